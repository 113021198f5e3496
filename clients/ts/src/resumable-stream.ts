// A drop-in for the resumable-stream package (vercel/resumable-stream): the same context and
// methods, the same null and undefined meanings and skipCharacters, backed by rindled instead
// of Redis. The answer's text lives in rindled's durable plane, so a resumer in another process,
// or after the producing process died, gets every durable character; a producer's retried
// append is absorbed, never doubled; and a reader can cancel the generation.
import type { Frame, View } from "./frames.js";
import { HttpError, authHeaders, problemOf, retryable, sleep, url } from "./http.js";
import type { Token } from "./http.js";
import { CancelledError, Producer } from "./producer.js";
import { SSEParser } from "./wire.js";

export interface CreateResumableStreamContextOptions {
  /** rindled's base URL, such as "https://api.example.com". */
  baseUrl: string;
  /** A bearer token with the producer scope, or a getter asked before every request. */
  token: Token;
  /** Prefixes every stream id (rindled's message id is `${keyPrefix}:${streamId}`). Defaults to "resumable-stream". */
  keyPrefix?: string;
  /** Keeps the program alive until the promise settles (Vercel's `after`); null on a server. */
  waitUntil: ((promise: Promise<unknown>) => void) | null;
  /** The owner recorded on each message (a reader token of that subject may read it). Defaults to "resumable-stream". */
  owner?: string;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
}

export interface ResumableStreamContext {
  /**
   * Creates the stream, or resumes it if it is in progress. Resolves null if it is done. The
   * stream yields the answer from skipCharacters on (UTF-16 code units, as String.length).
   */
  resumableStream: (streamId: string, makeStream: () => ReadableStream<string>, skipCharacters?: number) => Promise<ReadableStream<string> | null>;
  /** Resumes a stream: null if it is done, undefined if there is none. */
  resumeExistingStream: (streamId: string, skipCharacters?: number) => Promise<ReadableStream<string> | null | undefined>;
  /** Creates the stream and produces it from makeStream. */
  createNewResumableStream: (streamId: string, makeStream: () => ReadableStream<string>, skipCharacters?: number) => Promise<ReadableStream<string> | null>;
  /** null if there is no such stream, true while it is produced, "DONE" once it is sealed. */
  hasExistingStream: (streamId: string) => Promise<null | true | "DONE">;
  /** Beyond resumable-stream: asks the producer to stop (its stream seals as cancelled). */
  cancel: (streamId: string) => Promise<void>;
}

/** A resumed stream ended without completing: the producer failed, or it died (interrupted). */
export class StreamEndedError extends Error {
  constructor(
    readonly streamId: string,
    readonly status: string,
    readonly detail?: string,
  ) {
    super(`stream ${streamId} ended ${status}${detail ? `: ${detail}` : ""}`);
    this.name = "StreamEndedError";
  }
}

const terminal = (status: string) => status !== "pending" && status !== "streaming";

export function createResumableStreamContext(options: CreateResumableStreamContextOptions): ResumableStreamContext {
  const prefix = options.keyPrefix || "resumable-stream";
  const owner = options.owner ?? "resumable-stream";
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const waitUntil = options.waitUntil ?? ((p: Promise<unknown>) => void p.catch(() => {}));
  const key = (streamId: string) => `${prefix}:${streamId}`;
  const path = (streamId: string, route = "") => url(options.baseUrl, `/v1/streams/${encodeURIComponent(key(streamId))}${route}`);
  // What this context produced or saw end, and whether each is sealed: known at once here.
  const produced = new Map<string, "producing" | "DONE">();
  // Streams this context is creating: a question about one waits for its creation, so a
  // resume in the same process never misses a stream whose first words are already out (the
  // AI SDK streams to the client while consumeSseStream is still creating the stream).
  const creating = new Map<string, Promise<void>>();

  async function view(streamId: string): Promise<View | undefined> {
    const res = await doFetch(path(streamId), { headers: await authHeaders(options.token) });
    if (res.status === 404 || res.status === 403) return undefined; // no such message (rindled answers both alike)
    if (!res.ok) throw new HttpError(res.status, await problemOf(res));
    return (await res.json()) as View;
  }

  async function state(streamId: string): Promise<null | true | "DONE"> {
    await creating.get(streamId);
    const mine = produced.get(streamId);
    if (mine) return mine === "DONE" ? "DONE" : true;
    const v = await view(streamId);
    if (!v) return null;
    return terminal(v.status) ? "DONE" : true;
  }

  async function create(streamId: string): Promise<boolean> {
    try {
      await Producer.create({ baseUrl: options.baseUrl, token: options.token, fetch: options.fetch, owner, id: key(streamId) });
      return true;
    } catch (err) {
      if (err instanceof HttpError && err.status === 409) return false; // it exists: another request made it
      throw err;
    }
  }

  // begin creates the stream and opens it for producing: undefined if it exists already (another
  // request made it). Until it settles, state() in this context waits for it.
  async function begin(streamId: string): Promise<Producer | undefined> {
    const made = (async () => {
      if (!(await create(streamId))) return undefined;
      const producer = new Producer({ baseUrl: options.baseUrl, token: options.token, fetch: options.fetch, streamId: key(streamId) });
      await producer.open();
      produced.set(streamId, "producing");
      return producer;
    })();
    const settled = made.then(
      () => {},
      () => {},
    );
    creating.set(streamId, settled);
    try {
      return await made;
    } finally {
      if (creating.get(streamId) === settled) creating.delete(streamId);
    }
  }

  // produce pumps makeStream into rindled through an opened producer (begin), and yields the
  // same text to the caller as rindled takes it, from skip on. The caller's stream ends once the
  // answer is sealed in the store.
  function produce(streamId: string, producer: Producer, makeStream: () => ReadableStream<string>, skip: number): ReadableStream<string> {
    let sent = 0;
    let finished!: () => void;
    waitUntil(new Promise<void>((ok) => (finished = ok)));
    return new ReadableStream<string>({
      start(controller) {
        const source = makeStream().getReader();
        let open = true;
        const emit = (text: string) => {
          const from = Math.max(skip - sent, 0);
          sent += text.length;
          if (open && from < text.length) {
            try {
              controller.enqueue(text.slice(from));
            } catch {
              open = false; // the caller let go; the answer is still produced and stored
            }
          }
        };
        (async () => {
          try {
            producer.signal.addEventListener("abort", () => void source.cancel(new CancelledError(key(streamId))).catch(() => {}), { once: true });
            for (;;) {
              const { done, value } = await source.read();
              if (done) break;
              if (!value) continue;
              // Yielded once the store took it: the caller's text is the stored text, and a
              // delta refused (a reader cancelled) is yielded to nobody.
              await producer.append(value);
              emit(value);
            }
            await producer.close();
          } catch (err) {
            if (err instanceof CancelledError || producer.cancelled) {
              await producer.close().catch(() => {});
            } else {
              await producer.close(err instanceof Error ? err.message : String(err)).catch(() => {});
            }
          } finally {
            produced.set(streamId, "DONE");
            if (open) {
              try {
                controller.close();
              } catch {
                // already closed by the caller
              }
            }
            finished();
          }
        })();
      },
    });
  }

  // follow reads the stream from rindled from skip on: the event stream, and the durable view
  // when the live plane cannot serve. It ends at the stream's end; an error or interrupted end
  // errors it with StreamEndedError after every durable character was yielded.
  function follow(streamId: string, skip: number): ReadableStream<string> {
    const abort = new AbortController();
    let pos = skip; // what the caller holds (code units)
    let delay = 100;
    const take = (controller: ReadableStreamDefaultController<string>, from: number, text: string) => {
      const end = from + text.length;
      if (from > pos || end <= pos) return from <= pos; // a gap is false: the view fills it
      controller.enqueue(text.slice(pos - from));
      pos = end;
      return true;
    };
    const finish = (controller: ReadableStreamDefaultController<string>, status: string, error?: string) => {
      // rindled sends the end only once the seal committed: this context knows it is done,
      // where the view (which follows CDC) may not show it yet.
      produced.set(streamId, "DONE");
      if (status === "complete" || status === "cancelled") controller.close();
      else controller.error(new StreamEndedError(streamId, status, error));
    };
    async function events(controller: ReadableStreamDefaultController<string>): Promise<"ended" | "view" | "again"> {
      const headers: Record<string, string> = { accept: "text/event-stream", ...(await authHeaders(options.token)) };
      const res = await doFetch(`${path(streamId, "/events")}?from=${pos}`, { headers, signal: abort.signal });
      if (res.status === 204) return "view";
      if (!res.ok || !res.body) throw new HttpError(res.status, await problemOf(res));
      const parser = new SSEParser();
      const decoder = new TextDecoder();
      const reader = res.body.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return "again";
          delay = 100;
          for (const ev of parser.feed(decoder.decode(value, { stream: true }))) {
            if (ev.data === undefined) continue;
            const f = JSON.parse(ev.data) as Frame;
            switch (f.type) {
              case "chunk":
                if (!take(controller, f.from, f.text)) return "view";
                break;
              case "end":
                if (f.seq > pos) return "view"; // durable text this reader lacks: the view has it
                finish(controller, f.status, f.error);
                return "ended";
              case "stale":
              case "absent":
                return "view";
            }
          }
        }
      } finally {
        reader.cancel().catch(() => {});
      }
    }
    async function fromView(controller: ReadableStreamDefaultController<string>): Promise<void> {
      for (;;) {
        const res = await doFetch(`${path(streamId)}?after=${pos}&wait=30s`, { headers: await authHeaders(options.token), signal: abort.signal });
        if (!res.ok) throw new HttpError(res.status, await problemOf(res));
        const v = (await res.json()) as View;
        if (v.seq > pos) take(controller, 0, v.text);
        if (terminal(v.status)) return finish(controller, v.status, v.error);
      }
    }
    return new ReadableStream<string>({
      async start(controller) {
        try {
          for (;;) {
            let next: "ended" | "view" | "again";
            try {
              next = await events(controller);
            } catch (err) {
              if (abort.signal.aborted || (err instanceof HttpError && !retryable(err.status))) throw err;
              next = "again";
            }
            if (next === "ended") return;
            if (next === "view") return await fromView(controller);
            await sleep(delay, abort.signal);
            delay = Math.min(delay * 2, 4000);
          }
        } catch (err) {
          if (!abort.signal.aborted) controller.error(err);
        }
      },
      cancel() {
        abort.abort();
      },
    });
  }

  async function resumeExistingStream(streamId: string, skipCharacters?: number) {
    const s = await state(streamId);
    if (s === null) return undefined;
    if (s === "DONE") return null;
    return follow(streamId, skipCharacters ?? 0);
  }

  return {
    async resumableStream(streamId, makeStream, skipCharacters) {
      const s = await state(streamId);
      if (s === "DONE") return null;
      const producer = s === null ? await begin(streamId) : undefined;
      if (producer) return produce(streamId, producer, makeStream, skipCharacters ?? 0);
      return (await resumeExistingStream(streamId, skipCharacters)) ?? null;
    },
    resumeExistingStream,
    async createNewResumableStream(streamId, makeStream, skipCharacters) {
      const producer = await begin(streamId);
      if (!producer) return (await resumeExistingStream(streamId, skipCharacters)) ?? null;
      return produce(streamId, producer, makeStream, skipCharacters ?? 0);
    },
    hasExistingStream: state,
    async cancel(streamId) {
      const res = await doFetch(path(streamId, "/cancel"), { method: "POST", headers: await authHeaders(options.token) });
      if (!res.ok && res.status !== 409) throw new HttpError(res.status, await problemOf(res));
    },
  };
}
