// The resuming reader: the event stream first, the durable view when the live plane cannot
// serve. It keeps contract S on the client: every chunk is applied at its own offset, a
// reconnect resumes from what is held (Last-Event-ID), and the final text is what the store
// holds.
import type { Frame, Status, View } from "./frames.js";
import { isTerminal } from "./frames.js";
import { HttpError, authHeaders, problemOf, retryable, sleep, url } from "./http.js";
import type { ClientOptions } from "./http.js";
import { SSEParser, splice } from "./wire.js";

export interface ReaderOptions extends ClientOptions {
  streamId: string;
  /** Text the reader already holds (a prefix of the answer, e.g. kept across a page reload). */
  held?: string;
  /** How long each long-poll of the view waits, as a duration ("30s"). */
  pollWait?: string;
  /** The first reconnect delay in ms (doubling to 8 s); the server's retry: field wins. */
  reconnectDelayMs?: number;
  /** Called after every change of the state. */
  onUpdate?: (state: ReaderState) => void;
  /** Ends the read. */
  signal?: AbortSignal;
}

export interface ReaderState {
  /** The text so far: live text may run ahead of the durable text until the end. */
  text: string;
  /** How much of text the store has confirmed. */
  durableSeq: number;
  /** "live" while the event stream serves, "view" once following the durable view. */
  source: "live" | "view";
  /** Set once the stream has ended: what the store holds. */
  status?: Status;
  error?: string;
  /** Connections made, reconnects included. */
  connections: number;
}

/** Reads a stream to its end; the promise resolves with the final state (text = the body). */
export function readStream(opts: ReaderOptions): Promise<ReaderState> {
  return new StreamReader(opts).read();
}

export class StreamReader {
  readonly state: ReaderState;
  private readonly fetch: typeof fetch;
  private delay: number;

  constructor(private readonly opts: ReaderOptions) {
    this.state = { text: opts.held ?? "", durableSeq: 0, source: "live", connections: 0 };
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.delay = opts.reconnectDelayMs ?? 250;
  }

  async read(): Promise<ReaderState> {
    const first = this.state.connections;
    for (;;) {
      this.throwIfAborted();
      let outcome: "ended" | "fallback" | "dropped";
      try {
        outcome = await this.events(this.state.connections > first);
      } catch (err) {
        if (err instanceof HttpError && !retryable(err.status)) throw err;
        if (this.opts.signal?.aborted) throw err;
        outcome = "dropped";
      }
      if (outcome === "ended") return this.state;
      if (outcome === "fallback") return this.followView();
      await sleep(this.delay, this.opts.signal);
      this.delay = Math.min(this.delay * 2, 8000);
    }
  }

  /** One event-stream connection: "ended" at end, "fallback" at stale or absent. */
  private async events(reconnect: boolean): Promise<"ended" | "fallback" | "dropped"> {
    const held = this.state.text.length;
    const headers: Record<string, string> = { accept: "text/event-stream", ...(await authHeaders(this.opts.token)) };
    // A reconnect says where it is the way EventSource does; the first join uses ?from.
    if (reconnect) headers["last-event-id"] = String(held);
    const res = await this.fetch(url(this.opts.baseUrl, `/v1/streams/${encodeURIComponent(this.opts.streamId)}/events?from=${held}`), {
      headers,
      signal: this.opts.signal,
    });
    this.state.connections++;
    if (res.status === 204) {
      // Sealed, and nothing past what is held: the view says how it ended.
      return this.finishFromView();
    }
    if (!res.ok || !res.body) throw new HttpError(res.status, await problemOf(res));
    const parser = new SSEParser();
    const decoder = new TextDecoder();
    const reader = res.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return "dropped";
        for (const ev of parser.feed(decoder.decode(value, { stream: true }))) {
          if (ev.retry !== undefined) this.delay = ev.retry;
          if (ev.data === undefined) continue;
          const f = JSON.parse(ev.data) as Frame;
          this.apply(f);
          if (isTerminal(f)) return f.type === "end" ? "ended" : "fallback";
        }
        this.delay = this.opts.reconnectDelayMs ?? 250; // a healthy connection resets the backoff
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  private apply(f: Frame): void {
    const s = this.state;
    switch (f.type) {
      case "chunk":
        s.text = splice(s.text, f);
        break;
      case "durable":
        s.durableSeq = Math.max(s.durableSeq, f.seq);
        break;
      case "end":
        // The end claims the durable length: text past it was produced and never made durable.
        s.text = s.text.slice(0, f.seq);
        s.durableSeq = f.seq;
        s.status = f.status;
        if (f.error) s.error = f.error;
        break;
      default:
        return;
    }
    this.opts.onUpdate?.(s);
  }

  /** Long-polls the durable view until the stream ends. */
  private async followView(): Promise<ReaderState> {
    this.state.source = "view";
    this.opts.onUpdate?.(this.state);
    for (;;) {
      this.throwIfAborted();
      let view: View;
      try {
        view = await this.view(this.state.durableSeq, this.opts.pollWait ?? "30s");
      } catch (err) {
        if (err instanceof HttpError && !retryable(err.status)) throw err;
        if (this.opts.signal?.aborted) throw err;
        await sleep(this.delay, this.opts.signal);
        this.delay = Math.min(this.delay * 2, 8000);
        continue;
      }
      if (this.adopt(view)) return this.state;
    }
  }

  private async finishFromView(): Promise<"ended"> {
    for (;;) {
      const view = await this.view(this.state.durableSeq, "30s");
      if (this.adopt(view)) return "ended";
    }
  }

  /** Takes the view's word; true once it is terminal. */
  private adopt(view: View): boolean {
    const s = this.state;
    const terminal = view.status !== "pending" && view.status !== "streaming";
    if (terminal || view.text.length >= s.text.length) s.text = view.text;
    s.durableSeq = view.seq;
    if (terminal) {
      s.status = view.status as Status;
      if (view.error) s.error = view.error;
    }
    this.opts.onUpdate?.(s);
    return terminal;
  }

  private async view(after: number, wait: string): Promise<View> {
    const res = await this.fetch(
      url(this.opts.baseUrl, `/v1/streams/${encodeURIComponent(this.opts.streamId)}?after=${after}&wait=${encodeURIComponent(wait)}`),
      { headers: await authHeaders(this.opts.token), signal: this.opts.signal },
    );
    if (!res.ok) throw new HttpError(res.status, await problemOf(res));
    return (await res.json()) as View;
  }

  private throwIfAborted(): void {
    this.opts.signal?.throwIfAborted();
  }
}
