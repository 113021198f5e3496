import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { CancelledError, Producer, readStream } from "../src/index.js";
import type { ReaderState, View } from "../src/index.js";
import { Rindled } from "./harness.js";

// The client against a real rindled: a producer and readers over HTTP, with the faults a
// browser and a model proxy meet.

let srv: Rindled;
let prod: string;
let alice: string;
let n = 0;

before(async () => {
  srv = await Rindled.start();
  prod = srv.token("svc", "producer");
  alice = srv.token("alice");
});

after(async () => {
  await srv?.stop();
});

const delta = (k: number) => `tok${k} é😀 `;

async function newStream(): Promise<{ id: string; producer: Producer }> {
  const id = await Producer.create({ baseUrl: srv.base, token: prod, owner: "alice", id: `ts-${process.pid}-${++n}` });
  return { id, producer: new Producer({ baseUrl: srv.base, token: prod, streamId: id }) };
}

// view reads the durable view of a stream that has ended. The view follows the database through
// CDC, so it can lag the live plane's end frame (on a busy machine it did): the read long-polls
// until the view shows a terminal status (an offset past any stream makes only that end the wait).
async function view(id: string): Promise<View> {
  const res = await fetch(`${srv.base}/v1/streams/${id}?after=9007199254740991&wait=30s`, { headers: { authorization: `Bearer ${alice}` } });
  assert.equal(res.status, 200);
  return (await res.json()) as View;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("a reader that joins before the open gets the live tail, chunk by chunk", async () => {
  const { id, producer } = await newStream();
  const chunks: number[] = [];
  const reading = readStream({ baseUrl: srv.base, token: alice, streamId: id, onUpdate: (s) => chunks.push(s.text.length) });
  await pause(200); // the reader is in first: create, subscribe, then open
  await producer.open();
  let produced = "";
  for (let k = 0; k < 60; k++) {
    await producer.append(delta(k));
    produced += delta(k);
  }
  await producer.close();
  const final = await reading;
  assert.equal(final.status, "complete");
  assert.equal(final.text, produced);
  assert.equal(final.connections, 1);
  assert.ok(new Set(chunks).size >= 50, `a chunk per delta, not checkpoint steps (${new Set(chunks).size} distinct lengths)`);
  assert.equal((await view(id)).text, produced);
});

test("an append whose answer was lost is sent again and absorbed, not doubled", async () => {
  const { id } = await newStream();
  let lose = 3; // the server takes these appends, then the answer never arrives
  const lossy: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (String(input).endsWith("/append") && lose > 0 && lose-- % 2 === 1) {
      await res.arrayBuffer();
      throw new TypeError("fetch failed: the connection dropped before the answer");
    }
    return res;
  };
  const producer = new Producer({ baseUrl: srv.base, token: prod, streamId: id, fetch: lossy });
  await producer.open();
  let produced = "";
  for (let k = 0; k < 20; k++) {
    await producer.append(delta(k));
    produced += delta(k);
  }
  await producer.close();
  const final = await readStream({ baseUrl: srv.base, token: alice, streamId: id });
  assert.equal(final.text, produced);
  assert.equal((await view(id)).text, produced);
});

test("the reader resumes after dropped connections with Last-Event-ID", async () => {
  const { id, producer } = await newStream();
  await producer.open();
  let drops = 3;
  const lastEventIds: string[] = [];
  // The token is a getter, asked on every connection: a refreshed token reaches the reconnect.
  // Two distinct valid tokens for alice stand for an old and a refreshed one.
  const fresh = [alice, srv.token("alice", "", "-ttl", "2h")];
  let asked = 0;
  const sent: string[] = [];
  const token = () => fresh[asked++ % 2];
  const flaky: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers);
    if (String(input).includes("/events")) sent.push(headers.get("authorization") ?? "");
    if (headers.has("last-event-id")) lastEventIds.push(headers.get("last-event-id")!);
    const res = await fetch(input, init);
    if (!String(input).includes("/events") || drops <= 0 || !res.body) return res;
    drops--;
    // Let a few reads through, then break the connection mid-stream.
    const src = res.body.getReader();
    let reads = 0;
    const cut = new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        if (reads++ >= 3) {
          src.cancel().catch(() => {});
          ctrl.error(new TypeError("network error"));
          return;
        }
        const { done, value } = await src.read();
        if (done) ctrl.close();
        else ctrl.enqueue(value);
      },
    });
    return new Response(cut, { status: res.status, headers: res.headers });
  };
  const reading = readStream({ baseUrl: srv.base, token, streamId: id, fetch: flaky, reconnectDelayMs: 20 });
  let produced = "";
  for (let k = 0; k < 80; k++) {
    await producer.append(delta(k));
    produced += delta(k);
    if (k % 10 === 0) await pause(30);
  }
  await producer.close();
  const final = await reading;
  assert.equal(final.status, "complete");
  assert.equal(final.text, produced, "S: nothing lost, nothing doubled across the reconnects");
  assert.ok(final.connections >= 4, `reconnected (${final.connections} connections)`);
  assert.ok(lastEventIds.length >= 3 && lastEventIds.every((v) => /^\d+$/.test(v)), `resumed with Last-Event-ID (${lastEventIds})`);
  assert.ok(sent.length >= 4 && asked >= sent.length, `the getter was asked for each connection (${asked} for ${sent.length})`);
  assert.deepEqual([...new Set(sent)].sort(), fresh.map((t) => `Bearer ${t}`).sort(), "the connections carried the getter's tokens, old and refreshed");
});

test("a reader's cancel stops the producer, which closes as cancelled", async () => {
  const { id, producer } = await newStream();
  await producer.open();
  const reading = readStream({ baseUrl: srv.base, token: alice, streamId: id });
  async function* answer() {
    for (let k = 0; ; k++) {
      if (k === 20) {
        const res = await fetch(`${srv.base}/v1/streams/${id}/cancel`, { method: "POST", headers: { authorization: `Bearer ${alice}` } });
        assert.equal(res.status, 202);
      }
      if (k > 500) throw new Error("the producer never learned of the cancel");
      yield delta(k);
    }
  }
  const closed = await producer.pump(answer());
  assert.equal(producer.cancelled, true);
  assert.equal(producer.signal.aborted, true);
  await assert.rejects(producer.append("late"), CancelledError);
  const final = await reading;
  assert.equal(final.status, "cancelled");
  assert.equal(final.text.length, closed.seq);
  assert.equal((await view(id)).text, final.text);
});

test("the producing instance killed mid-answer: the reader ends interrupted with the durable text", async () => {
  const { id, producer } = await newStream();
  await producer.open();
  const states: ReaderState[] = [];
  const reading = readStream({ baseUrl: srv.base, token: alice, streamId: id, reconnectDelayMs: 100, onUpdate: (s) => states.push({ ...s }) });
  for (let k = 0; k < 40; k++) await producer.append(delta(k));
  await producer.flush();
  await producer.append("never durable");
  await srv.kill(); // kill -9: the producer dies with its instance
  await srv.run(); // same host id: the new process seals what the old one left, interrupted
  const final = await reading;
  const v = await view(id);
  assert.equal(v.status, "interrupted");
  assert.equal(final.status, "interrupted");
  assert.equal(final.text, v.text, "the reader ends with exactly the durable text");
  assert.ok(final.text.startsWith(delta(0)) && final.text.length >= 40 * delta(0).length - 10);
  assert.ok(final.connections >= 2);
});
