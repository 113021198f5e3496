// A real rindled for the client's tests: built from this repository, on loopback, with its own
// private PostgreSQL in a temporary directory.
import { execFileSync, spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(fileURLToPath(import.meta.url), "../../../../..");

let built: string | undefined;

/** The rindled binary: $RINDLED_BIN, or built once from the repository. */
export function rindledBin(): string {
  if (process.env.RINDLED_BIN) return process.env.RINDLED_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "rindle-ts-bin-"));
    built = join(dir, "rindled");
    execFileSync("go", ["build", "-o", built, "./cmd/rindled"], { cwd: repo, stdio: "inherit" });
  }
  return built;
}

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? ok(addr.port) : fail(new Error("no port"))));
    });
  });
}

export class Rindled {
  readonly base: string;
  private proc?: ChildProcess;
  logs = "";

  private constructor(
    readonly dataDir: string,
    readonly port: number,
    private readonly extraArgs: string[] = [],
  ) {
    this.base = `http://127.0.0.1:${port}`;
  }

  /** Starts rindled on a fresh private cluster. */
  static async start(...extraArgs: string[]): Promise<Rindled> {
    const dir = mkdtempSync(join(tmpdir(), "rindle-ts-"));
    chmodSync(dir, 0o755); // as root, the cluster runs as postgres, which must reach it
    const r = new Rindled(dir, await freePort(), extraArgs);
    await r.run();
    return r;
  }

  /** (Re)starts the process on the same data directory, port and host id. */
  async run(): Promise<void> {
    const env = { ...process.env };
    delete env.DATABASE_URL;
    this.proc = spawn(rindledBin(), ["-addr", `127.0.0.1:${this.port}`, "-data", this.dataDir, "-demo", "false", "-host-id", "ts-test", "-lease-ttl", "2s", "-drain-timeout", "5s", ...this.extraArgs], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const proc = this.proc;
    await new Promise<void>((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`rindled never listened:\n${this.logs}`)), 90_000);
      const onData = (b: Buffer) => {
        this.logs += b.toString();
        if (this.logs.includes("rindled listening")) {
          clearTimeout(timer);
          ok();
        }
      };
      proc.stdout?.on("data", onData);
      proc.stderr?.on("data", (b: Buffer) => (this.logs += b.toString()));
      proc.on("exit", (code) => {
        clearTimeout(timer);
        fail(new Error(`rindled exited (${code}):\n${this.logs}`));
      });
    });
    for (let i = 0; i < 300; i++) {
      const res = await fetch(`${this.base}/readyz`).catch(() => undefined);
      if (res?.ok) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`rindled never ready:\n${this.logs}`);
  }

  /** A development token signed with the secret in the data directory. */
  token(sub: string, scope = "", ...flags: string[]): string {
    const args = ["token", "-data", this.dataDir, "-sub", sub, ...flags];
    if (scope) args.push("-scope", scope);
    return execFileSync(rindledBin(), args).toString().trim();
  }

  /** kill -9: no drain, no seal. The private cluster keeps running. */
  async kill(): Promise<void> {
    await this.signal("SIGKILL");
  }

  /** SIGTERM: drain, then stop the cluster; the data directory is removed. */
  async stop(): Promise<void> {
    await this.signal("SIGTERM");
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  private async signal(sig: NodeJS.Signals): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null) return;
    p.removeAllListeners("exit");
    const exited = new Promise((ok) => p.once("exit", ok));
    p.kill(sig);
    await exited;
  }
}
