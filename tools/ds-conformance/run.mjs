// Runs the Durable Streams conformance suite (@durable-streams/server-conformance-tests) against
// rindled, built from this repository and started on a private PostgreSQL cluster, and prints
// passed / failed / skipped. Exits non-zero below the floor (--floor N, default 332).
//
// Auth stays on in rindled: this harness mints a producer and admin token (the suite deletes streams) with `rindled token` and puts a
// small proxy in front that adds it to every request, as an API gateway would.
//
//   node run.mjs                 rindled
//   node run.mjs --reference     the npm reference server (@durable-streams/server), in memory
//   node run.mjs --keep          keep the work directory (logs, vitest's JSON report)
import { spawn } from "node:child_process";
import { startRindled } from "../rindled.mjs";
import { mkdtempSync, chmodSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const flag = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const reference = args.includes("--reference");
const keep = args.includes("--keep");
const floor = Number(flag("--floor", reference ? "0" : "332"));
const longPollMs = Number(flag("--long-poll-ms", "10000"));

// rindled starts rindled (tools/rindled.mjs) with CORS on for any origin (the suite checks
// preflights as a browser sends them) and long-polls that end well inside the suite's wait for
// them, and mints a producer token.
export async function rindled(work) {
  const r = await startRindled(work, ["-cors-origins", "*", "-streams-long-poll", `${Math.max(1000, longPollMs - 5000)}ms`]);
  return { ...r, token: r.token("-sub", "conformance", "-scope", "producer admin") };
}

// authProxy forwards every request to target with the bearer token added, streaming both ways.
export function authProxy(target, token) {
  const to = new URL(target);
  const server = http.createServer((req, res) => {
    const up = http.request(
      { host: to.hostname, port: to.port, method: req.method, path: req.url, headers: { ...req.headers, authorization: `Bearer ${token}` } },
      (upRes) => {
        res.writeHead(upRes.statusCode, upRes.rawHeaders);
        upRes.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    res.on("close", () => up.destroy());
    req.pipe(up);
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok({ server, url: `http://127.0.0.1:${server.address().port}` })));
}

async function main() {
  const work = mkdtempSync(join(tmpdir(), "ds-conformance-"));
  chmodSync(work, 0o755); // the private cluster runs as the postgres user when we are root
  let stop = async () => {};
  let baseUrl;
  if (reference) {
    const { DurableStreamTestServer } = await import("@durable-streams/server");
    const srv = new DurableStreamTestServer({ port: 0, longPollTimeout: Math.max(1000, longPollMs - 5000) });
    baseUrl = await srv.start();
    stop = () => srv.stop();
  } else {
    const r = await rindled(work);
    const proxy = await authProxy(r.base, r.token);
    baseUrl = proxy.url;
    stop = async () => {
      proxy.server.closeAllConnections();
      proxy.server.close();
      r.proc.kill("SIGTERM");
      await new Promise((ok) => r.proc.on("exit", ok));
    };
  }
  const report = join(work, "report.json");
  const started = Date.now();
  const vitest = spawn(join(here, "node_modules/.bin/vitest"), ["run", "--reporter=dot", "--reporter=json", `--outputFile.json=${report}`], {
    cwd: here,
    stdio: "inherit",
    env: { ...process.env, DS_BASE_URL: baseUrl, DS_LONG_POLL_MS: String(longPollMs) },
  });
  await new Promise((ok) => vitest.on("exit", ok));
  await stop();
  const r = JSON.parse(readFileSync(report, "utf8"));
  const secs = ((Date.now() - started) / 1000).toFixed(0);
  const failedNames = r.testResults.flatMap((f) => f.assertionResults.filter((a) => a.status === "failed").map((a) => a.fullName));
  if (args.includes("--list-failed")) {
    for (const n of failedNames) console.log("FAILED", n);
  }
  console.log(`conformance (${reference ? "reference server" : "rindled"}): ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests + r.numTodoTests} skipped, of ${r.numTotalTests} (${secs} s)`);
  if (!keep) rmSync(work, { recursive: true, force: true });
  else console.log(`work directory: ${work}`);
  if (r.numPassedTests < floor) {
    console.error(`conformance: ${r.numPassedTests} passed, below the floor of ${floor}`);
    process.exit(1);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await main();
}
