import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";

import { StreamEndedError, createResumableStreamContext } from "../src/resumable-stream.js";
import type { View } from "../src/index.js";
import { Rindled } from "./harness.js";

// What the drop-in does beyond resumable-stream, against a real rindled: an answer outlives the
// process that produced it, a reader cancels the generation, and a producer's retried append is
// absorbed. rindled seals a stream nobody pushes to for 2 s as interrupted (its idle seal): the
// producing process below dies without a word.

let srv: Rindled;
let token: string;

before(async () => {
  srv = await Rindled.start("-stream-idle-timeout", "2s");
  token = srv.token("svc", "producer");
});

after(async () => {
  await srv?.stop();
});

const context = (keyPrefix = `beyond-${randomUUID()}`, f?: typeof fetch) =>
  createResumableStreamContext({ baseUrl: srv.base, token, keyPrefix, waitUntil: null, fetch: f });

async function view(keyPrefix: string, id: string): Promise<View> {
  // Long-polls until the view is terminal (an offset past any stream makes only the end the wait).
  const res = await fetch(`${srv.base}/v1/streams/${encodeURIComponent(`${keyPrefix}:${id}`)}?after=9007199254740991&wait=30s`, {
    headers: { authorization: `Bearer ${token}` },
  });
  assert.equal(res.status, 200);
  return (await res.json()) as View;
}

async function readAll(stream: ReadableStream<string>): Promise<{ text: string; error?: unknown }> {
  let text = "";
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text };
      text += value;
    }
  } catch (error) {
    return { text, error };
  }
}

test("an answer outlives the process that produced it: a resumer gets every character and an honest interrupted end", async () => {
  const prefix = `beyond-${randomUUID()}`;
  const deltas = Array.from({ length: 40 }, (_, k) => `tok${k} é😀 `);
  const child = spawn(process.execPath, [fileURLToPath(new URL("./produce-child.js", import.meta.url)), srv.base, token, prefix, "chat-1", ...deltas], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise((ok) => child.once("exit", ok));
  await new Promise<void>((ok, fail) => {
    child.stdout!.on("data", (b: Buffer) => b.toString().includes("produced") && ok());
    child.once("exit", (code) => fail(new Error(`the producing process exited (${code}) before producing`)));
  });

  // Another process (this one), with a context of its own, resumes mid-answer from 5 characters.
  const ctx = context(prefix);
  assert.equal(await ctx.hasExistingStream("chat-1"), true);
  const resumed = await ctx.resumeExistingStream("chat-1", 5);
  assert.ok(resumed);
  const reading = readAll(resumed);
  child.kill("SIGKILL");
  await exited;

  const { text, error } = await reading;
  assert.equal(text, deltas.join("").slice(5), "every character the dead process pushed, after the 5 skipped");
  assert.ok(error instanceof StreamEndedError, `an honest end, not a clean one: ${error}`);
  assert.equal(error.status, "interrupted");
  assert.equal(await ctx.hasExistingStream("chat-1"), "DONE");
  assert.equal(await ctx.resumableStream("chat-1", () => assert.fail("a done stream is not produced again")), null);
});

test("a reader cancels the generation: the model's stream is cancelled and the answer seals as cancelled", async () => {
  const prefix = `beyond-${randomUUID()}`;
  const producer = context(prefix);
  let cancelledWith: unknown;
  let pull!: ReadableStreamDefaultController<string>;
  const stream = await producer.resumableStream("chat-2", () => new ReadableStream<string>({
    start(c) {
      pull = c;
      c.enqueue("thinking… ");
    },
    cancel(reason) {
      cancelledWith = reason;
    },
  }));
  assert.ok(stream);
  const own = readAll(stream);

  const reader = context(prefix);
  const resumed = await reader.resumeExistingStream("chat-2");
  assert.ok(resumed);
  const theirs = readAll(resumed);
  await reader.cancel("chat-2");
  pull.enqueue("more "); // the next append learns of the cancel

  const mine = await own;
  const them = await theirs;
  assert.equal(mine.text, them.text, "the producer's own stream holds what the store took, nothing refused");
  assert.equal(them.error, undefined, "a cancelled answer ends cleanly");
  assert.ok(them.text.startsWith("thinking… "));
  assert.ok(cancelledWith !== undefined, "the model's stream was cancelled");
  const v = await view(prefix, "chat-2");
  assert.equal(v.status, "cancelled");
  assert.equal(v.text, them.text, "what the reader got is what the store sealed");
});

test("a producer whose append's answer was lost sends it again, and the text is not doubled", async () => {
  const prefix = `beyond-${randomUUID()}`;
  let lost = 0;
  // Every third append reaches rindled, and its answer is lost on the way back.
  let appends = 0;
  const lossy: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (String(input).endsWith("/append") && ++appends % 3 === 0) {
      lost++;
      throw new TypeError("fetch failed: the answer was lost");
    }
    return res;
  };
  const ctx = context(prefix, lossy);
  const deltas = Array.from({ length: 12 }, (_, k) => `d${k} `);
  const stream = await ctx.resumableStream("chat-3", () => new ReadableStream<string>({
    start(c) {
      for (const d of deltas) c.enqueue(d);
      c.close();
    },
  }));
  assert.ok(stream);
  assert.equal((await readAll(stream)).text, deltas.join(""));
  assert.ok(lost >= 3, `answers lost: ${lost}`);
  const v = await view(prefix, "chat-3");
  assert.equal(v.status, "complete");
  assert.equal(v.text, deltas.join(""), "each delta once");
});

test("a resume in the producing context while the stream is still being created resumes it", async () => {
  // The AI SDK streams to the client while consumeSseStream is still creating the stream: a
  // client that drops and comes back at once asks the same process before rindled has the
  // message. The create is held here until the resume has asked.
  let releaseCreate!: () => void;
  const createHeld = new Promise<void>((ok) => (releaseCreate = ok));
  let createSent!: () => void;
  const createStarted = new Promise<void>((ok) => (createSent = ok));
  const held: typeof fetch = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if ((init?.method ?? "GET") === "POST" && url.pathname === "/v1/messages") {
      createSent();
      await createHeld;
    }
    return fetch(input, init);
  };
  const ctx = context(undefined, held);
  let source!: ReadableStreamDefaultController<string>;
  const made = new ReadableStream<string>({ start: (c) => void (source = c) });
  const producing = ctx.createNewResumableStream("chat-1", () => made);
  await createStarted;
  const resuming = ctx.resumeExistingStream("chat-1");
  releaseCreate();
  const produced = await producing;
  assert.ok(produced, "the creating request produces");
  const resumed = await resuming;
  assert.ok(resumed, "the stream being created is resumed, not reported absent");
  const [producedText, resumedText] = [readAll(produced), readAll(resumed)];
  for (const d of ["one ", "two é😀 ", "three"]) source.enqueue(d);
  source.close();
  assert.deepEqual(await producedText, { text: "one two é😀 three" });
  assert.deepEqual(await resumedText, { text: "one two é😀 three" });
  assert.equal(await ctx.hasExistingStream("chat-1"), "DONE");
});
