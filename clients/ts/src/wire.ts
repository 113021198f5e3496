// The wire's pure functions: offsets, resume points, splicing and durable-text assembly.
import type { ChunkFrame, Frame } from "./frames.js";

/** The length of text in UTF-16 code units: the unit of every offset. */
export function len16(text: string): number {
  return text.length;
}

/** Where a reader that got f resumes (the SSE id): open → from; chunk, durable, end → seq. */
export function resumePoint(f: Frame): number | undefined {
  switch (f.type) {
    case "open":
      return f.from;
    case "chunk":
    case "durable":
    case "end":
      return f.seq;
    default:
      return undefined;
  }
}

/** A chunk that starts past the text held: a gap, which no client may paper over. */
export class GapError extends Error {
  constructor(readonly held: number, readonly from: number) {
    super(`chunk starts at ${from}, past the ${held} code units held`);
    this.name = "GapError";
  }
}

/**
 * Applies a chunk at its own offset: the text held up to `from`, then the chunk. A chunk that
 * overlaps what is held replaces the overlap (the server never sends one that disagrees); one
 * that starts past the end is a gap and throws. The result is the longer text.
 */
export function splice(text: string, f: ChunkFrame): string {
  if (f.from > text.length) throw new GapError(text.length, f.from);
  if (f.seq - f.from !== f.text.length) {
    throw new RangeError(`chunk ${f.from}→${f.seq} carries ${f.text.length} code units`);
  }
  if (f.seq <= text.length) return text; // already held
  return text.slice(0, f.from) + f.text;
}

/** One chunk row of the durable plane: its END offset and its text. */
export interface ChunkRow {
  seq: number;
  text: string;
}

/**
 * The durable text at an instant: the body, then the chunk rows in seq order, as long as they
 * are contiguous (a row past a hole is not yet durable text).
 */
export function durableText(body: string, chunks: readonly ChunkRow[]): string {
  let text = body;
  for (const c of [...chunks].sort((a, b) => a.seq - b.seq)) {
    const from = c.seq - c.text.length;
    if (from > text.length) break;
    if (c.seq > text.length) text = text.slice(0, from) + c.text;
  }
  return text;
}

/** One server-sent event. */
export interface SSEEvent {
  id?: string;
  data?: string;
  retry?: number;
}

/** An incremental SSE parser (the HTML spec's rules, for the fields rindled sends). */
export class SSEParser {
  private buf = "";
  private event: SSEEvent = {};
  private data: string[] = [];

  /** Feeds decoded text and returns the events it completed. */
  feed(chunk: string): SSEEvent[] {
    this.buf += chunk;
    const out: SSEEvent[] = [];
    for (;;) {
      const nl = this.buf.search(/\r\n|\r|\n/);
      if (nl < 0) break;
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + (this.buf.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (this.data.length > 0 || this.event.id !== undefined || this.event.retry !== undefined) {
          if (this.data.length > 0) this.event.data = this.data.join("\n");
          out.push(this.event);
        }
        this.event = {};
        this.data = [];
        continue;
      }
      if (line.startsWith(":")) continue; // a comment: keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") this.data.push(value);
      else if (field === "id") this.event.id = value;
      else if (field === "retry" && /^\d+$/.test(value)) this.event.retry = Number(value);
    }
    return out;
  }
}
