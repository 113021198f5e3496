// startRindled builds rindled from this repository into work and starts it on a private
// PostgreSQL cluster there, listening on a free loopback port. It resolves once rindled logs
// its address, with a function that mints tokens (`rindled token -data`). Shared by the tools
// under tools/ (plain Node, no dependencies). work must be reachable by the postgres user when
// running as root (chmod 0755).
import { spawn, execFileSync } from "node:child_process";
import { join, resolve } from "node:path";

const repo = resolve(import.meta.dirname, "..");

export async function startRindled(work, extraArgs = []) {
  const bin = join(work, "rindled");
  execFileSync("go", ["build", "-o", bin, "./cmd/rindled"], { cwd: repo, stdio: "inherit" });
  const data = join(work, "data");
  const proc = spawn(bin, ["-addr", "127.0.0.1:0", "-data", data, "-demo", "false", ...extraArgs], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  proc.stderr.on("data", (b) => (log += b));
  const base = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`rindled never listened:\n${log}`)), 120_000);
    proc.stdout.on("data", (b) => {
      log += b;
      const m = /url=(http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    proc.on("exit", (code) => fail(new Error(`rindled exited ${code}:\n${log}`)));
  });
  const token = (...args) => execFileSync(bin, ["token", "-data", data, ...args], { encoding: "utf8" }).trim();
  return { proc, base, token, log: () => log };
}
