// The producer helper: idempotent appends that stop on a reader's cancel.
import type { AppendResult, StreamState } from "./frames.js";
import { HttpError, authHeaders, problemOf, retryAfter, retryable, sleep, url } from "./http.js";
import type { ClientOptions } from "./http.js";

export interface ProducerOptions extends ClientOptions {
  streamId: string;
  /** How long a request may keep retrying a 503 or a lost answer, in ms. Defaults to 30 s. */
  retryForMs?: number;
}

/** A reader asked the producer to stop: close the stream (it seals as cancelled). */
export class CancelledError extends Error {
  constructor(readonly streamId: string) {
    super(`stream ${streamId} was cancelled by a reader`);
    this.name = "CancelledError";
  }
}

/**
 * Produces one stream over HTTP. Every append carries the offset the producer believes the
 * stream is at (expectedSeq), so a request whose answer was lost is simply sent again: text the
 * server already took is absorbed, never doubled. A 503 (the instance cannot confirm its lease,
 * or the text is not durable yet) is retried after its Retry-After. Once any answer says a
 * reader cancelled, `cancelled` is true, `signal` aborts (hand it to the model's request) and
 * appends throw CancelledError: call close().
 */
export class Producer {
  seq = 0;
  durableSeq = 0;
  cancelled = false;
  private readonly abort = new AbortController();
  private readonly fetch: typeof fetch;

  constructor(private readonly opts: ProducerOptions) {
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** Aborts once a reader has cancelled the stream. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Creates the message row the stream lives in; returns its id. */
  static async create(opts: ClientOptions & { owner: string; id?: string; chatId?: string; role?: string }): Promise<string> {
    const f = opts.fetch ?? globalThis.fetch.bind(globalThis);
    const res = await f(url(opts.baseUrl, "/v1/messages"), {
      method: "POST",
      headers: { "content-type": "application/json", ...(await authHeaders(opts.token)) },
      body: JSON.stringify({ id: opts.id, owner: opts.owner, chatId: opts.chatId, role: opts.role }),
    });
    if (!res.ok) throw new HttpError(res.status, await problemOf(res));
    return ((await res.json()) as { id: string }).id;
  }

  /** Opens the stream on the instance behind baseUrl. */
  async open(): Promise<StreamState> {
    return this.adopt(await this.post("open", undefined));
  }

  /** Pushes text at the offset this producer is at. */
  async append(text: string): Promise<AppendResult> {
    if (this.cancelled) throw new CancelledError(this.opts.streamId);
    const res = (await this.post("append", { text, expectedSeq: this.seq })) as AppendResult;
    return this.adopt(res);
  }

  /** Resolves once everything produced is durable. */
  async flush(): Promise<StreamState> {
    return this.adopt(await this.post("flush", undefined));
  }

  /** Seals the stream: complete (cancelled after a reader's cancel), or error with a message. */
  async close(error?: string): Promise<StreamState> {
    return this.adopt(await this.post("close", error ? { error } : {}, true));
  }

  /** Appends every delta of an answer until it ends or a reader cancels, then closes. */
  async pump(deltas: AsyncIterable<string> | Iterable<string>): Promise<StreamState> {
    try {
      for await (const d of deltas) {
        await this.append(d);
        if (this.cancelled) break;
      }
    } catch (err) {
      if (!(err instanceof CancelledError)) {
        await this.close(err instanceof Error ? err.message : String(err)).catch(() => {});
        throw err;
      }
    }
    return this.close();
  }

  private adopt<T extends StreamState>(s: T): T {
    this.seq = s.seq;
    this.durableSeq = s.durableSeq;
    if (s.cancelled && !this.cancelled) {
      this.cancelled = true;
      this.abort.abort(new CancelledError(this.opts.streamId));
    }
    return s;
  }

  /** One producer request, sent again while it is safe to: after a lost answer or a 503. */
  private async post(route: string, body: unknown, retryNotDurable = false): Promise<StreamState> {
    const deadline = Date.now() + (this.opts.retryForMs ?? 30_000);
    let delay = 100;
    for (;;) {
      let res: Response;
      try {
        res = await this.fetch(url(this.opts.baseUrl, `/v1/streams/${encodeURIComponent(this.opts.streamId)}/${route}`), {
          method: "POST",
          headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...(await authHeaders(this.opts.token)) },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
      } catch (err) {
        // The answer was lost, or the request never arrived: the same request is safe to send
        // again (expectedSeq absorbs what was taken).
        if (Date.now() > deadline) throw err;
        await sleep(delay);
        delay = Math.min(delay * 2, 2000);
        continue;
      }
      if (res.ok) return (await res.json()) as StreamState;
      const problem = await problemOf(res);
      if (res.status === 409 && problem.cancelled) {
        this.adopt({ seq: problem.seq ?? this.seq, durableSeq: this.durableSeq, cancelled: true });
        throw new CancelledError(this.opts.streamId);
      }
      if (retryable(res.status) && (route !== "close" || retryNotDurable) && Date.now() <= deadline) {
        await sleep(retryAfter(res, delay));
        delay = Math.min(delay * 2, 2000);
        continue;
      }
      throw new HttpError(res.status, problem);
    }
  }
}
