// src/frames.ts
function isTerminal(f) {
  return f.type === "end" || f.type === "stale" || f.type === "absent";
}

// src/wire.ts
function len16(text) {
  return text.length;
}
function resumePoint(f) {
  switch (f.type) {
    case "open":
      return f.from;
    case "chunk":
    case "durable":
    case "end":
      return f.seq;
    default:
      return void 0;
  }
}
var GapError = class extends Error {
  constructor(held, from) {
    super(`chunk starts at ${from}, past the ${held} code units held`);
    this.held = held;
    this.from = from;
    this.name = "GapError";
  }
  held;
  from;
};
function splice(text, f) {
  if (f.from > text.length) throw new GapError(text.length, f.from);
  if (f.seq - f.from !== f.text.length) {
    throw new RangeError(`chunk ${f.from}\u2192${f.seq} carries ${f.text.length} code units`);
  }
  if (f.seq <= text.length) return text;
  return text.slice(0, f.from) + f.text;
}
function durableText(body, chunks) {
  let text = body;
  for (const c of [...chunks].sort((a, b) => a.seq - b.seq)) {
    const from = c.seq - c.text.length;
    if (from > text.length) break;
    if (c.seq > text.length) text = text.slice(0, from) + c.text;
  }
  return text;
}
var SSEParser = class {
  buf = "";
  event = {};
  data = [];
  /** Feeds decoded text and returns the events it completed. */
  feed(chunk) {
    this.buf += chunk;
    const out = [];
    for (; ; ) {
      const nl = this.buf.search(/\r\n|\r|\n/);
      if (nl < 0) break;
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + (this.buf.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (this.data.length > 0 || this.event.id !== void 0 || this.event.retry !== void 0) {
          if (this.data.length > 0) this.event.data = this.data.join("\n");
          out.push(this.event);
        }
        this.event = {};
        this.data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
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
};

// src/http.ts
var HttpError = class extends Error {
  constructor(status, problem) {
    super(`${status}: ${problem.detail ?? problem.title ?? "request failed"}`);
    this.status = status;
    this.problem = problem;
    this.name = "HttpError";
  }
  status;
  problem;
};
function url(base, path) {
  return base.replace(/\/+$/, "") + path;
}
async function authHeaders(token) {
  if (token === void 0) return {};
  const t = typeof token === "function" ? await token() : token;
  return { authorization: `Bearer ${t}` };
}
async function problemOf(res) {
  try {
    const body = await res.json();
    return { ...body, status: res.status };
  } catch {
    return { status: res.status, title: res.statusText };
  }
}
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });
}
function retryAfter(res, fallback) {
  const v = Number(res.headers.get("retry-after"));
  return Number.isFinite(v) && v > 0 ? v * 1e3 : fallback;
}
function retryable(status) {
  return status === 502 || status === 503 || status === 504;
}

// src/reader.ts
function readStream(opts) {
  return new StreamReader(opts).read();
}
var StreamReader = class {
  constructor(opts) {
    this.opts = opts;
    this.state = { text: opts.held ?? "", durableSeq: 0, source: "live", connections: 0 };
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.delay = opts.reconnectDelayMs ?? 250;
  }
  opts;
  state;
  fetch;
  delay;
  async read() {
    const first = this.state.connections;
    for (; ; ) {
      this.throwIfAborted();
      let outcome;
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
      this.delay = Math.min(this.delay * 2, 8e3);
    }
  }
  /** One event-stream connection: "ended" at end, "fallback" at stale or absent. */
  async events(reconnect) {
    const held = this.state.text.length;
    const headers = { accept: "text/event-stream", ...await authHeaders(this.opts.token) };
    if (reconnect) headers["last-event-id"] = String(held);
    const res = await this.fetch(url(this.opts.baseUrl, `/v1/streams/${encodeURIComponent(this.opts.streamId)}/events?from=${held}`), {
      headers,
      signal: this.opts.signal
    });
    this.state.connections++;
    if (res.status === 204) {
      return this.finishFromView();
    }
    if (!res.ok || !res.body) throw new HttpError(res.status, await problemOf(res));
    const parser = new SSEParser();
    const decoder = new TextDecoder();
    const reader = res.body.getReader();
    try {
      for (; ; ) {
        const { done, value } = await reader.read();
        if (done) return "dropped";
        for (const ev of parser.feed(decoder.decode(value, { stream: true }))) {
          if (ev.retry !== void 0) this.delay = ev.retry;
          if (ev.data === void 0) continue;
          const f = JSON.parse(ev.data);
          this.apply(f);
          if (isTerminal(f)) return f.type === "end" ? "ended" : "fallback";
        }
        this.delay = this.opts.reconnectDelayMs ?? 250;
      }
    } finally {
      reader.cancel().catch(() => {
      });
    }
  }
  apply(f) {
    const s = this.state;
    switch (f.type) {
      case "chunk":
        s.text = splice(s.text, f);
        break;
      case "durable":
        s.durableSeq = Math.max(s.durableSeq, f.seq);
        break;
      case "end":
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
  async followView() {
    this.state.source = "view";
    this.opts.onUpdate?.(this.state);
    for (; ; ) {
      this.throwIfAborted();
      let view;
      try {
        view = await this.view(this.state.durableSeq, this.opts.pollWait ?? "30s");
      } catch (err) {
        if (err instanceof HttpError && !retryable(err.status)) throw err;
        if (this.opts.signal?.aborted) throw err;
        await sleep(this.delay, this.opts.signal);
        this.delay = Math.min(this.delay * 2, 8e3);
        continue;
      }
      if (this.adopt(view)) return this.state;
    }
  }
  async finishFromView() {
    for (; ; ) {
      const view = await this.view(this.state.durableSeq, "30s");
      if (this.adopt(view)) return "ended";
    }
  }
  /** Takes the view's word; true once it is terminal. */
  adopt(view) {
    const s = this.state;
    const terminal = view.status !== "pending" && view.status !== "streaming";
    if (terminal || view.text.length >= s.text.length) s.text = view.text;
    s.durableSeq = view.seq;
    if (terminal) {
      s.status = view.status;
      if (view.error) s.error = view.error;
    }
    this.opts.onUpdate?.(s);
    return terminal;
  }
  async view(after, wait) {
    const res = await this.fetch(
      url(this.opts.baseUrl, `/v1/streams/${encodeURIComponent(this.opts.streamId)}?after=${after}&wait=${encodeURIComponent(wait)}`),
      { headers: await authHeaders(this.opts.token), signal: this.opts.signal }
    );
    if (!res.ok) throw new HttpError(res.status, await problemOf(res));
    return await res.json();
  }
  throwIfAborted() {
    this.opts.signal?.throwIfAborted();
  }
};

// src/producer.ts
var CancelledError = class extends Error {
  constructor(streamId) {
    super(`stream ${streamId} was cancelled by a reader`);
    this.streamId = streamId;
    this.name = "CancelledError";
  }
  streamId;
};
var Producer = class {
  constructor(opts) {
    this.opts = opts;
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
  }
  opts;
  seq = 0;
  durableSeq = 0;
  cancelled = false;
  abort = new AbortController();
  fetch;
  /** Aborts once a reader has cancelled the stream. */
  get signal() {
    return this.abort.signal;
  }
  /** Creates the message row the stream lives in; returns its id. */
  static async create(opts) {
    const f = opts.fetch ?? globalThis.fetch.bind(globalThis);
    const res = await f(url(opts.baseUrl, "/v1/messages"), {
      method: "POST",
      headers: { "content-type": "application/json", ...await authHeaders(opts.token) },
      body: JSON.stringify({ id: opts.id, owner: opts.owner, chatId: opts.chatId, role: opts.role })
    });
    if (!res.ok) throw new HttpError(res.status, await problemOf(res));
    return (await res.json()).id;
  }
  /** Opens the stream on the instance behind baseUrl. */
  async open() {
    return this.adopt(await this.post("open", void 0));
  }
  /** Pushes text at the offset this producer is at. */
  async append(text) {
    if (this.cancelled) throw new CancelledError(this.opts.streamId);
    const res = await this.post("append", { text, expectedSeq: this.seq });
    return this.adopt(res);
  }
  /** Resolves once everything produced is durable. */
  async flush() {
    return this.adopt(await this.post("flush", void 0));
  }
  /** Seals the stream: complete (cancelled after a reader's cancel), or error with a message. */
  async close(error) {
    return this.adopt(await this.post("close", error ? { error } : {}, true));
  }
  /** Appends every delta of an answer until it ends or a reader cancels, then closes. */
  async pump(deltas) {
    try {
      for await (const d of deltas) {
        await this.append(d);
        if (this.cancelled) break;
      }
    } catch (err) {
      if (!(err instanceof CancelledError)) {
        await this.close(err instanceof Error ? err.message : String(err)).catch(() => {
        });
        throw err;
      }
    }
    return this.close();
  }
  adopt(s) {
    this.seq = s.seq;
    this.durableSeq = s.durableSeq;
    if (s.cancelled && !this.cancelled) {
      this.cancelled = true;
      this.abort.abort(new CancelledError(this.opts.streamId));
    }
    return s;
  }
  /** One producer request, sent again while it is safe to: after a lost answer or a 503. */
  async post(route, body, retryNotDurable = false) {
    const deadline = Date.now() + (this.opts.retryForMs ?? 3e4);
    let delay = 100;
    for (; ; ) {
      let res;
      try {
        res = await this.fetch(url(this.opts.baseUrl, `/v1/streams/${encodeURIComponent(this.opts.streamId)}/${route}`), {
          method: "POST",
          headers: { ...body === void 0 ? {} : { "content-type": "application/json" }, ...await authHeaders(this.opts.token) },
          body: body === void 0 ? void 0 : JSON.stringify(body)
        });
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await sleep(delay);
        delay = Math.min(delay * 2, 2e3);
        continue;
      }
      if (res.ok) return await res.json();
      const problem = await problemOf(res);
      if (res.status === 409 && problem.cancelled) {
        this.adopt({ seq: problem.seq ?? this.seq, durableSeq: this.durableSeq, cancelled: true });
        throw new CancelledError(this.opts.streamId);
      }
      if (retryable(res.status) && (route !== "close" || retryNotDurable) && Date.now() <= deadline) {
        await sleep(retryAfter(res, delay));
        delay = Math.min(delay * 2, 2e3);
        continue;
      }
      throw new HttpError(res.status, problem);
    }
  }
};
export {
  CancelledError,
  GapError,
  HttpError,
  Producer,
  SSEParser,
  StreamReader,
  durableText,
  isTerminal,
  len16,
  readStream,
  resumePoint,
  splice
};
