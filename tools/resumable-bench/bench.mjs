// The resumable-stream drop-in (rindle-streams/resumable-stream on rindled) against
// resumable-stream 2.2.13 on Redis, side by side in one run (issue 25).
//
// Workload, per repetition, per side, per K in 1, 10, 100: a fresh server (rindled with its
// private PostgreSQL, or redis-server) and a fresh client process. The client creates one
// stream, K resumers join it, and the producer pushes 300 deltas of ~24 characters at 100/s;
// each delta carries its push time, and each resumer records push → receipt for every delta.
// Reported: p99 of those latencies, and CPU per delivered delta (deliveries = 300 × K) of each
// process on its own: the server (rindled, or redis-server), the database (rindled's PostgreSQL:
// its postmaster and backends), both read from /proc/PID/task/*/schedstat (ns, every thread), and the client process (producer
// and resumers, process.cpuUsage).
// Three repetitions; min/median/max.
//
//   cd tools/resumable-bench && npm ci && node bench.mjs            # needs redis-server on PATH
import { spawn, execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const DELTAS = 300;
const RATE = 100;
const REPS = Number(process.env.REPS ?? 3);
const KS = (process.env.KS ?? "1,10,100").split(",").map(Number);
const self = fileURLToPath(import.meta.url);

if (process.argv[2] === "--client") await client(process.argv[3], Number(process.argv[4]), process.argv[5], process.argv[6]);
else await main();

// ---- the client process: one producer and K resumers of one stream.
async function client(side, k, url, token) {
  const mod =
    side === "rindled"
      ? await import("../../clients/ts/dist/resumable-stream.js")
      : (process.env.REDIS_URL = url, await import("resumable-stream"));
  const ctx =
    side === "rindled"
      ? mod.createResumableStreamContext({ baseUrl: url, token, waitUntil: null })
      : mod.createResumableStreamContext({ waitUntil: null });
  let push;
  const source = new ReadableStream({ start: (c) => (push = c) });
  const own = await ctx.createNewResumableStream("bench", () => source);
  const drainOwn = (async () => {
    for await (const _ of own) void _;
  })();
  const lat = [];
  const readers = [];
  for (let i = 0; i < k; i++) {
    const s = await ctx.resumeExistingStream("bench");
    readers.push(
      (async () => {
        let buf = "";
        for await (const chunk of s) {
          buf += chunk;
          const parts = buf.split("|");
          buf = parts.pop();
          const now = performance.now();
          for (const p of parts) lat.push(now - Number(p.slice(p.indexOf("@") + 1)));
        }
      })(),
    );
  }
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < DELTAS; i++) {
    const due = t0 + (i * 1000) / RATE;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    push.enqueue(`d${String(i).padStart(5, "0")}@${performance.now().toFixed(3)}|`);
  }
  push.close();
  await Promise.all([drainOwn, ...readers]);
  const cpu = process.cpuUsage(cpu0);
  lat.sort((a, b) => a - b);
  const q = (x) => lat[Math.min(lat.length - 1, Math.floor(x * lat.length))];
  process.stdout.write(JSON.stringify({ deliveries: lat.length, p50: q(0.5), p99: q(0.99), clientCpuMs: (cpu.user + cpu.system) / 1000 }) + "\n");
  process.exit(0);
}

// ---- the orchestrator: fresh servers and clients, per-process CPU.
async function freePort() {
  return new Promise((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

function procs() {
  const stats = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
      const cmd = readFileSync(`/proc/${d}/cmdline`, "utf8").replaceAll("\0", " ");
      // schedstat's first field is the time on CPU in ns: stat's utime and stime count 10 ms
      // ticks, too coarse for a database that works a few milliseconds a run.
      // It is per thread: a Go server's threads are summed.
      let ns = 0;
      for (const t of readdirSync(`/proc/${d}/task`)) ns += Number(readFileSync(`/proc/${d}/task/${t}/schedstat`, "utf8").split(" ")[0]);
      stats.set(Number(d), { ppid: Number(f[1]), ns, cmd });
    } catch {
      // gone meanwhile
    }
  }
  return stats;
}

/** The postmaster of the cluster whose data directory lies under dir (pg_ctl detaches it from
 * rindled, so it is not rindled's descendant). */
function postmaster(dir) {
  const all = procs();
  for (const [pid, s] of all) if (/\bpostgres -D /.test(s.cmd) && s.cmd.includes(dir) && !all.get(s.ppid)?.cmd.includes(dir)) return pid;
  return undefined;
}

/** CPU ms of pid and all its descendants, from /proc. */
function treeCpuMs(root) {
  if (root === undefined) return 0;
  const stats = procs();
  let ns = 0;
  const stack = [root];
  while (stack.length) {
    const p = stack.pop();
    ns += stats.get(p)?.ns ?? 0;
    for (const [pid, s] of stats) if (s.ppid === p) stack.push(pid);
  }
  return ns / 1e6;
}

async function startServer(side) {
  if (side === "redis") {
    const port = await freePort();
    const proc = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdio: "ignore" });
    const url = `redis://127.0.0.1:${port}`;
    for (let i = 0; i < 200; i++) {
      try {
        execFileSync("redis-cli", ["-u", url, "ping"], { stdio: "pipe" });
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    return { url, token: "", pid: proc.pid, dbPid: undefined, stop: async () => { proc.kill("SIGTERM"); await new Promise((r) => proc.once("exit", r)); } };
  }
  const { startRindled } = await import("../rindled.mjs");
  const work = mkdtempSync(join(tmpdir(), "resumable-bench-"));
  chmodSync(work, 0o755);
  const r = await startRindled(work);
  return {
    url: r.base,
    token: r.token("-sub", "bench", "-scope", "producer"),
    pid: r.proc.pid,
    dbPid: postmaster(work),
    stop: async () => {
      r.proc.kill("SIGTERM");
      await new Promise((ok) => (r.proc.exitCode !== null ? ok() : r.proc.on("exit", ok)));
      rmSync(work, { recursive: true, force: true });
    },
  };
}

async function once(side, k) {
  const srv = await startServer(side);
  try {
    if (side === "rindled" && srv.dbPid === undefined) throw new Error("rindled's PostgreSQL was not found under its data directory");
    const before = treeCpuMs(srv.pid);
    const dbBefore = treeCpuMs(srv.dbPid);
    const out = execFileSync(process.execPath, [self, "--client", side, String(k), srv.url, srv.token], { encoding: "utf8", maxBuffer: 1 << 20 });
    const serverCpuMs = treeCpuMs(srv.pid) - before;
    const dbCpuMs = treeCpuMs(srv.dbPid) - dbBefore;
    const r = JSON.parse(out.trim().split("\n").pop());
    return { ...r, serverCpuMs, dbCpuMs };
  } finally {
    await srv.stop();
  }
}

async function main() {
  const fmt = (xs, d = 1) => {
    const s = [...xs].sort((a, b) => a - b);
    return `${s[0].toFixed(d)}/${s[Math.floor(s.length / 2)].toFixed(d)}/${s[s.length - 1].toFixed(d)}`;
  };
  console.log(`workload: one stream, ${DELTAS} deltas of ~24 chars at ${RATE}/s, K resumers; ${REPS} repetitions, each a fresh server and client process; min/median/max`);
  console.log("| K | side | deliveries | p99 ms | server µs CPU/delivery | PostgreSQL µs CPU/delivery | client µs CPU/delivery |");
  console.log("| --- | --- | --- | --- | --- | --- | --- |");
  for (const k of KS) {
    const runs = { rindled: [], redis: [] };
    for (let rep = 0; rep < REPS; rep++) for (const side of ["rindled", "redis"]) runs[side].push(await once(side, k));
    for (const side of ["rindled", "redis"]) {
      const rs = runs[side];
      const bad = rs.find((r) => r.deliveries !== DELTAS * k);
      if (bad) throw new Error(`${side} K=${k}: ${bad.deliveries} deliveries, want ${DELTAS * k}`);
      console.log(`| ${k} | ${side === "rindled" ? "drop-in on rindled" : "resumable-stream on Redis"} | ${DELTAS * k} | ${fmt(rs.map((r) => r.p99))} | ${fmt(rs.map((r) => (r.serverCpuMs * 1000) / r.deliveries))} | ${side === "redis" ? "none" : fmt(rs.map((r) => (r.dbCpuMs * 1000) / r.deliveries))} | ${fmt(rs.map((r) => (r.clientCpuMs * 1000) / r.deliveries))} |`);
    }
  }
}
