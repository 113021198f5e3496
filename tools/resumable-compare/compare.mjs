// Side by side on resumable-stream's own workload: one producer yields numbered deltas at a
// steady rate while K readers follow the stream, and every reader times each delta from the
// moment the producer handed it over to the moment the reader has it.
//
//   - resumable-stream 2.2.13 on a local redis-server: the producer's stream is created with
//     createNewResumableStream and drained by its first consumer; the K readers are HTTP
//     requests to a node:http route that joins with resumeExistingStream (each a Redis pub/sub
//     listener the producer publishes to) and writes the stream out, as its README serves it.
//   - rindled (built from this checkout, private PostgreSQL): the producer appends over HTTP
//     (each delta acknowledged), the K readers follow /v1/streams/{id}/events over SSE, and
//     every delta is also made durable in PostgreSQL at the default checkpoints.
//
// Producer and readers live in this Node process for both, so the client-side costs are the
// same. It prints each side's latency percentiles, the machine's busy CPU per delivered delta
// (all processes: this one, redis-server or rindled and PostgreSQL), and the ratios.
//
//   npm ci && node compare.mjs [--readers 100] [--rate 100] [--seconds 5] [--runs 3]
//
// It needs redis-server on PATH (Debian: apt-get install -y redis-server) and Go.
import { spawn } from "node:child_process";
import { mkdtempSync, chmodSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer } from "node:net";
import { createServer as createHttpServer } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { createClient } from "redis";
import { createResumableStreamContext } from "resumable-stream";
import { startRindled } from "../rindled.mjs";

const { values: opt } = parseArgs({
  options: {
    readers: { type: "string", default: "100" },
    rate: { type: "string", default: "100" },
    seconds: { type: "string", default: "5" },
    runs: { type: "string", default: "3" },
  },
});
const K = Number(opt.readers), RATE = Number(opt.rate), SECONDS = Number(opt.seconds), RUNS = Number(opt.runs);
const DELTAS = RATE * SECONDS;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

// busy is the machine's non-idle CPU time in seconds (all processes), from /proc/stat.
function busy() {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + f[4];
  return (f.reduce((a, b) => a + b, 0) - idle) / 100;
}

function pct(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

// Tokens: "k;" per delta. A reader may get several in one piece, or a piece cut anywhere.
function tokenizer(onDelta) {
  let rest = "";
  return (text) => {
    const parts = (rest + text).split(";");
    rest = parts.pop();
    for (const p of parts) onDelta(Number(p));
  };
}

function summarize(name, lat, cpu) {
  lat.sort((a, b) => a - b);
  if (lat.length !== K * DELTAS) throw new Error(`${name}: ${lat.length} deliveries, want ${K * DELTAS}`);
  return { name, p50: pct(lat, 0.5), p99: pct(lat, 0.99), max: lat[lat.length - 1], cpuPerDelivery: (cpu / lat.length) * 1e6 };
}

async function runResumable(redisUrl, run) {
  const publisher = createClient({ url: redisUrl });
  const subscriber = createClient({ url: redisUrl });
  await publisher.connect(); // clients passed in are the caller's to connect
  await subscriber.connect();
  const ctx = createResumableStreamContext({ waitUntil: () => {}, publisher, subscriber, keyPrefix: `bench-${run}` });
  const pushedAt = new Float64Array(DELTAS);
  let go;
  const started = new Promise((ok) => (go = ok));
  const makeStream = () =>
    new ReadableStream({
      async start(controller) {
        await started;
        const t0 = performance.now();
        for (let k = 0; k < DELTAS; k++) {
          const due = t0 + (k * 1000) / RATE;
          const wait = due - performance.now();
          if (wait > 0) await sleep(wait);
          pushedAt[k] = performance.now();
          controller.enqueue(`${k};`);
        }
        controller.close();
      },
    });
  const id = `rs-${run}`;
  const first = await ctx.createNewResumableStream(id, makeStream);
  const drained = (async () => {
    for await (const _ of first) {
      // the first consumer (the original request) reads and drops
    }
  })();
  // Each reader is an HTTP request to a route that resumes the stream and writes it out, as
  // the library's README serves it (a Next.js GET handler), here on node:http.
  const server = createHttpServer(async (req, res) => {
    const s = await ctx.resumeExistingStream(id);
    if (!s) {
      res.writeHead(422).end();
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    for await (const piece of s) res.write(piece);
    res.end();
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  const url = `http://127.0.0.1:${server.address().port}/`;
  const lat = [];
  const readers = [];
  for (let i = 0; i < K; i++) {
    const res = await fetch(url);
    if (!res.ok) throw new Error(`resume: ${res.status}`);
    readers.push(
      (async () => {
        const feed = tokenizer((k) => lat.push(performance.now() - pushedAt[k]));
        const decoder = new TextDecoder();
        for await (const bytes of res.body) feed(decoder.decode(bytes, { stream: true }));
      })(),
    );
  }
  await sleep(500); // the resumers' requests reach the producer before it starts
  const cpu0 = busy();
  go();
  await Promise.all([drained, ...readers]);
  const cpu = busy() - cpu0;
  server.close();
  await publisher.quit();
  await subscriber.quit();
  return summarize("resumable-stream + Redis", lat, cpu);
}

async function rindled(work) {
  const r = await startRindled(work);
  return { ...r, producer: r.token("-sub", "bench", "-scope", "producer"), reader: r.token("-sub", "alice") };
}

async function runRindled(srv, run) {
  const id = `rindle-${run}`;
  const call = async (path, body) => {
    const res = await fetch(srv.base + path, {
      method: "POST",
      headers: { authorization: `Bearer ${srv.producer}`, "content-type": "application/json" },
      body: JSON.stringify(body ?? {}),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  await call("/v1/messages", { id, owner: "alice" });
  await call(`/v1/streams/${id}/open`);
  const pushedAt = new Float64Array(DELTAS);
  const lat = [];
  const readers = [];
  for (let i = 0; i < K; i++) {
    const res = await fetch(`${srv.base}/v1/streams/${id}/events?access_token=${encodeURIComponent(srv.reader)}`);
    if (!res.ok) throw new Error(`events: ${res.status}`);
    readers.push(
      (async () => {
        const feed = tokenizer((k) => lat.push(performance.now() - pushedAt[k]));
        const decoder = new TextDecoder();
        let buf = "";
        for await (const bytes of res.body) {
          buf += decoder.decode(bytes, { stream: true });
          let at;
          while ((at = buf.indexOf("\n\n")) >= 0) {
            const event = buf.slice(0, at);
            buf = buf.slice(at + 2);
            for (const line of event.split("\n")) {
              if (!line.startsWith("data:")) continue;
              const f = JSON.parse(line.slice(5));
              if (f.type === "chunk") feed(f.text);
              if (f.type === "end") return;
            }
          }
        }
      })(),
    );
  }
  await sleep(500);
  const cpu0 = busy();
  const t0 = performance.now();
  let seq = 0;
  for (let k = 0; k < DELTAS; k++) {
    const due = t0 + (k * 1000) / RATE;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const text = `${k};`;
    pushedAt[k] = performance.now();
    await call(`/v1/streams/${id}/append`, { text, expectedSeq: seq });
    seq += text.length;
  }
  await call(`/v1/streams/${id}/close`);
  await Promise.all(readers);
  const cpu = busy() - cpu0;
  return summarize("rindled (durable in PostgreSQL)", lat, cpu);
}

const work = mkdtempSync(join(tmpdir(), "rindle-compare-"));
chmodSync(work, 0o755); // as root, rindled runs PostgreSQL as postgres, who must reach the cluster
const redisPort = await freePort();
const redis = spawn("redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdio: "ignore" });
let srv;
try {
  console.error("starting rindled…");
  srv = await rindled(work);
  console.error("rindled at", srv.base);
  await sleep(300);
  const rows = [];
  for (let run = 0; run < RUNS; run++) {
    const theirs = await runResumable(`redis://127.0.0.1:${redisPort}`, run);
    const ours = await runRindled(srv, run);
    rows.push({ theirs, ours });
    console.log(`run ${run + 1}: p99 ${theirs.p99.toFixed(2)} ms vs ${ours.p99.toFixed(2)} ms; CPU/delivery ${theirs.cpuPerDelivery.toFixed(1)} µs vs ${ours.cpuPerDelivery.toFixed(1)} µs`);
  }
  const stat = (f) => {
    const v = rows.map(f).sort((a, b) => a - b);
    return `${v[0].toFixed(2)} / ${v[Math.floor(v.length / 2)].toFixed(2)} / ${v[v.length - 1].toFixed(2)}`;
  };
  console.log(`\n${K} readers, ${RATE} deltas/s for ${SECONDS} s, ${RUNS} runs (min / median / max)`);
  for (const [label, f] of [
    ["resumable-stream p50 ms", (r) => r.theirs.p50],
    ["rindled p50 ms", (r) => r.ours.p50],
    ["resumable-stream p99 ms", (r) => r.theirs.p99],
    ["rindled p99 ms", (r) => r.ours.p99],
    ["resumable-stream busy CPU µs per delivery", (r) => r.theirs.cpuPerDelivery],
    ["rindled busy CPU µs per delivery", (r) => r.ours.cpuPerDelivery],
    ["ratio p99 (resumable-stream ÷ rindled)", (r) => r.theirs.p99 / r.ours.p99],
    ["ratio CPU per delivery (resumable-stream ÷ rindled)", (r) => r.theirs.cpuPerDelivery / r.ours.cpuPerDelivery],
  ]) {
    console.log(`${label.padEnd(54)} ${stat(f)}`);
  }
} finally {
  if (srv) {
    srv.proc.kill("SIGTERM");
    await new Promise((ok) => srv.proc.once("exit", ok));
  }
  redis.kill("SIGTERM");
  rmSync(work, { recursive: true, force: true });
}
