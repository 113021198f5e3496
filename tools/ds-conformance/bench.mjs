// The same Durable Streams workload against rindled (PostgreSQL, each append committed before
// its answer) and the npm reference server (@durable-streams/server, file-backed), side by side
// in one run, printing each figure and the ratio ours/theirs, min/median/max over --runs. Each
// repetition starts fresh processes: a rindled on a new private cluster, and the reference in a
// process of its own (reference-server.mjs), never in this client's event loop. The CPU each
// side used is read from /proc per process: rindled and its PostgreSQL (every process whose
// command line names the repetition's directory), and the reference's node process.
//
//   appends   W writers, each appending to its own stream, one request in flight each: acknowledged appends per second
//   fanout    one writer at R appends/s, M SSE readers from the tail: write → reader latency
//   catchup   C readers re-reading a 1,000-append stream from the start: reads per second
//   ceiling   the appends workload against null-server.mjs (stores nothing, its own process):
//             what this client can send at all, so no ratio to the reference exceeds
//             ceiling ÷ reference
//
//   node bench.mjs [--runs 3] [--seconds 5] [--writers 8] [--readers 100] [--rate 50] [--catchup 8]
import { spawn } from "node:child_process";
import { mkdtempSync, chmodSync, rmSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { rindled } from "./run.mjs";

const args = process.argv.slice(2);
const num = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const runs = num("--runs", 3);
const seconds = num("--seconds", 5);
const writers = num("--writers", 8);
const readers = num("--readers", 100);
const rate = num("--rate", 50);
const catchupReaders = num("--catchup", 8);

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN;
};

function client(base, token) {
  const headers = (h = {}) => (token ? { ...h, authorization: `Bearer ${token}` } : h);
  return {
    url: (p) => `${base}/v1/stream/${p}`,
    put: (p, body = "") => fetch(`${base}/v1/stream/${p}`, { method: "PUT", headers: headers({ "content-type": "text/plain" }), body }),
    post: (p, body) => fetch(`${base}/v1/stream/${p}`, { method: "POST", headers: headers({ "content-type": "text/plain" }), body }),
    get: (p, q = "") => fetch(`${base}/v1/stream/${p}${q}`, { headers: headers() }),
  };
}

async function appends(c, tag) {
  let acked = 0;
  const deadline = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: writers }, async (_, i) => {
      const p = `${tag}-w${i}`;
      await c.put(p);
      while (Date.now() < deadline) {
        const r = await c.post(p, `delta ${acked} é😀 `);
        if (r.status !== 204) throw new Error(`append: ${r.status} ${await r.text()}`);
        acked++;
      }
    }),
  );
  return acked / seconds;
}

async function fanout(c, tag) {
  const p = `${tag}-fan`;
  await c.put(p);
  const sent = new Map(); // marker -> time
  const lat = [];
  const ctl = new AbortController();
  let ready = 0;
  const readersDone = Array.from({ length: readers }, async () => {
    const res = await c.get(p, "?offset=now&live=sse").catch(() => null);
    if (!res) return;
    ready++;
    const dec = new TextDecoder();
    let buf = "";
    try {
      for await (const chunk of res.body) {
        buf += dec.decode(chunk, { stream: true });
        let m;
        const re = /<(\d+)>/g;
        while ((m = re.exec(buf))) {
          const t = sent.get(m[1]);
          if (t !== undefined) lat.push(performance.now() - t);
        }
        buf = buf.slice(buf.lastIndexOf(">") + 1);
        if (ctl.signal.aborted) break;
      }
    } catch {
      // aborted
    }
  });
  while (ready < readers) await sleep(50);
  await sleep(200);
  const n = Math.floor(seconds * rate);
  for (let k = 0; k < n; k++) {
    sent.set(String(k), performance.now());
    await c.post(p, `<${k}>`);
    await sleep(1000 / rate);
  }
  await sleep(500);
  ctl.abort();
  await c.post(p, "<end>").catch(() => {});
  await fetch(c.url(p), { method: "POST", headers: { "stream-closed": "true", ...(c.token ? { authorization: `Bearer ${c.token}` } : {}) } }).catch(() => {});
  await Promise.race([Promise.all(readersDone), sleep(3000)]);
  return { p50: pct(lat, 0.5), p99: pct(lat, 0.99), deliveries: lat.length, expected: n * readers };
}

async function catchup(c, tag) {
  const p = `${tag}-cu`;
  await c.put(p);
  for (let k = 0; k < 1000; k++) await c.post(p, `append ${k} with some text, é😀; `);
  let reads = 0;
  let bytes = 0;
  const deadline = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: catchupReaders }, async () => {
      while (Date.now() < deadline) {
        const r = await c.get(p, "?offset=-1");
        bytes += (await r.arrayBuffer()).byteLength;
        reads++;
      }
    }),
  );
  return { rps: reads / seconds, mbps: bytes / seconds / 1e6 };
}

async function measure(c, tag) {
  return { appends: await appends(c, tag), fanout: await fanout(c, tag), catchup: await catchup(c, tag) };
}

const here = dirname(fileURLToPath(import.meta.url));
const ticks = 100; // USER_HZ on Linux

// cpuSeconds sums user and system CPU of the processes whose command line contains needle and
// of all their descendants (rindled's PostgreSQL backends name no directory on their command
// line: they count as the postmaster's children), or of the one process pid.
function cpuSeconds({ needle, pid }) {
  const procs = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const matched = pid ? Number(d) === pid : readFileSync(`/proc/${d}/cmdline`, "utf8").includes(needle);
      procs.set(Number(d), { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) / ticks, matched }); // utime, stime
    } catch {
      // the process ended while we read it
    }
  }
  const counted = (p, seen = new Set()) => {
    for (let at = p; at && !seen.has(at); at = procs.get(at)?.ppid) {
      seen.add(at);
      if (procs.get(at)?.matched) return true;
      if (pid) return false; // the one process, not its children
    }
    return false;
  };
  let total = 0;
  for (const [p, s] of procs) if (counted(p)) total += s.cpu;
  return total;
}

async function startReference(dir) {
  return startNode([join(here, "reference-server.mjs"), dir]);
}

async function startNode(argv) {
  const proc = spawn(process.execPath, argv, { stdio: ["ignore", "pipe", "inherit"] });
  const base = await new Promise((ok, fail) => {
    let out = "";
    proc.stdout.on("data", (b) => {
      out += b;
      const m = /^(http:\/\/\S+)$/m.exec(out); // after its own log lines
      if (m) ok(m[1]);
    });
    proc.on("exit", (code) => fail(new Error(`reference server exited ${code}`)));
  });
  return { proc, base };
}

const stopped = (proc) => new Promise((ok) => (proc.exitCode !== null ? ok() : proc.on("exit", ok)));

const rows = [];
for (let run = 0; run < runs; run++) {
  const work = mkdtempSync(join(tmpdir(), "ds-bench-"));
  chmodSync(work, 0o755);
  const r = await rindled(work);
  const ref = await startReference(join(work, "reference"));
  const ours = client(r.base, r.token);
  ours.token = r.token;
  const theirs = client(ref.base, "");
  const cpu0 = { a: cpuSeconds({ needle: work }) - cpuSeconds({ pid: ref.proc.pid }), b: cpuSeconds({ pid: ref.proc.pid }) };
  const a = await measure(ours, `rindle-${run}`);
  const cpuA = cpuSeconds({ needle: work }) - cpuSeconds({ pid: ref.proc.pid }) - cpu0.a;
  const b = await measure(theirs, `ref-${run}`);
  const cpuB = cpuSeconds({ pid: ref.proc.pid }) - cpu0.b;
  ref.proc.kill("SIGTERM");
  r.proc.kill("SIGTERM");
  await Promise.all([stopped(ref.proc), stopped(r.proc)]);
  const nul = await startNode([join(here, "null-server.mjs")]);
  const ceiling = await appends(client(nul.base, ""), `null-${run}`);
  nul.proc.kill("SIGTERM");
  await stopped(nul.proc);
  rows.push({ a, b, cpuA, cpuB, ceiling });
  console.log(
    `run ${run + 1}: appends/s ours ${a.appends.toFixed(0)} theirs ${b.appends.toFixed(0)} | fan-out p50/p99 ms ours ${a.fanout.p50.toFixed(2)}/${a.fanout.p99.toFixed(2)} (${a.fanout.deliveries}/${a.fanout.expected}) theirs ${b.fanout.p50.toFixed(2)}/${b.fanout.p99.toFixed(2)} (${b.fanout.deliveries}/${b.fanout.expected}) | catch-up reads/s ours ${a.catchup.rps.toFixed(0)} theirs ${b.catchup.rps.toFixed(0)} | server CPU s ours ${cpuA.toFixed(1)} (rindled + PostgreSQL) theirs ${cpuB.toFixed(1)} | client ceiling appends/s ${ceiling.toFixed(0)}`,
  );
  rmSync(work, { recursive: true, force: true });
}
const mmm = (xs) => {
  const s = [...xs].sort((x, y) => x - y);
  return `${s[0].toFixed(2)}/${s[Math.floor(s.length / 2)].toFixed(2)}/${s[s.length - 1].toFixed(2)}`;
};
console.log(`ratio ours/theirs, min/median/max of ${runs} runs (fresh processes each):`);
console.log(`  acknowledged appends per second (${writers} writers, ${writers} streams): ${mmm(rows.map((x) => x.a.appends / x.b.appends))}`);
console.log(`  the client's ceiling (a server that stores nothing) ÷ theirs, appends: ${mmm(rows.map((x) => x.ceiling / x.b.appends))}`);
console.log(`  ours ÷ the client's ceiling, appends: ${mmm(rows.map((x) => x.a.appends / x.ceiling))}`);
console.log(`  fan-out p99 latency (${readers} SSE readers, ${rate} appends/s; lower is better; >1 means ours is slower): ${mmm(rows.map((x) => x.a.fanout.p99 / x.b.fanout.p99))}`);
console.log(`  catch-up reads per second (${catchupReaders} readers of a 1,000-append stream): ${mmm(rows.map((x) => x.a.catchup.rps / x.b.catchup.rps))}`);
console.log(`  server CPU seconds for the whole workload: ${mmm(rows.map((x) => x.cpuA / x.cpuB))}`);
