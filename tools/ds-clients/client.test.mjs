// The published TypeScript client (@durable-streams/client) against rindled: an idempotent
// producer's batches, catch-up, SSE and long-poll live reads, resuming from a saved offset,
// and a byte stream's exact bytes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, chmodSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DurableStream, IdempotentProducer, stream } from "@durable-streams/client";
import { startRindled } from "../rindled.mjs";

// follow reads url live (mode) from offset and resolves with the first n items.
function follow(url, headers, offset, live, n) {
  return stream({ url, headers, offset, live }).then(
    (res) =>
      new Promise((ok) => {
        const got = [];
        res.subscribeJson((batch) => {
          got.push(...batch.items);
          if (got.length >= n) {
            res.cancel();
            ok(got.slice(0, n));
          }
        });
      }),
  );
}

test("the published client writes and reads rindled's streams", { timeout: 180_000 }, async (t) => {
  const work = mkdtempSync(join(tmpdir(), "ds-clients-"));
  chmodSync(work, 0o755); // the private cluster runs as the postgres user when we are root
  const r = await startRindled(work);
  t.after(async () => {
    r.proc.kill("SIGTERM");
    await new Promise((ok) => (r.proc.exitCode !== null ? ok() : r.proc.on("exit", ok)));
    rmSync(work, { recursive: true, force: true });
  });
  const headers = { authorization: `Bearer ${r.token("-sub", "client", "-scope", "producer")}` };
  const url = `${r.base}/v1/stream/client/events`;

  const handle = await DurableStream.create({ url, headers, contentType: "application/json" });
  const errors = [];
  const producer = new IdempotentProducer(handle, "writer-1", { autoClaim: true, onError: (e) => errors.push(e) });
  for (let i = 0; i < 50; i++) producer.append(JSON.stringify({ i }));
  await producer.flush();
  assert.deepEqual(errors, []);

  const first = await stream({ url, headers, live: false });
  const items = await first.json();
  assert.deepEqual(items, Array.from({ length: 50 }, (_, i) => ({ i })), "every batch, once, in order");
  const { offset } = await handle.head();

  // Live readers from the saved offset see only what comes after it.
  const sse = follow(url, headers, offset, "sse", 10);
  const poll = follow(url, headers, offset, "long-poll", 10);
  for (let i = 50; i < 60; i++) producer.append(JSON.stringify({ i }));
  await producer.flush();
  const later = Array.from({ length: 10 }, (_, i) => ({ i: 50 + i }));
  assert.deepEqual(await sse, later, "SSE from the saved offset");
  assert.deepEqual(await poll, later, "long-poll from the saved offset");
  await producer.close();

  // A byte stream gives back exactly the bytes it took.
  const bytesUrl = `${r.base}/v1/stream/client/blob`;
  const blob = await DurableStream.create({ url: bytesUrl, headers, contentType: "application/octet-stream" });
  const data = new Uint8Array([0, 255, 254, 97, 128, 0, 195]);
  await blob.append(data);
  const back = await (await stream({ url: bytesUrl, headers, live: false })).body();
  assert.deepEqual(Array.from(back), Array.from(data));
});
