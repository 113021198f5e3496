// The AI SDK's resume recipe end to end (issue 25), with ai v5 and the current major: the app
// (app.mjs, its own process) writes each generation through the resumable-stream drop-in and a
// real rindled; the client (the SDK's DefaultChatTransport and readUIMessageStream) drops
// mid-answer and resumes, and the UI message it rebuilds is the one an uninterrupted client
// gets. Then the producing app process is killed mid-answer: a fresh app process resumes the
// chat, and the client rebuilds every word the dead process had written, then sees the stream
// end in error (rindled seals the orphaned answer interrupted after its 2 s idle timeout).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startRindled } from "../rindled.mjs";
import { createResumableStreamContext } from "../../clients/ts/dist/resumable-stream.js";

const words = Array.from({ length: 12 }, (_, k) => `word${k} é😀 `);
const half = words.slice(0, words.length / 2).join("");

async function startApp(t, pkg, r, token, prefix) {
  const child = spawn(process.execPath, [fileURLToPath(new URL("./app.mjs", import.meta.url)), pkg, r.base, token, prefix], { stdio: ["ignore", "pipe", "inherit"] });
  t.after(() => child.kill("SIGKILL"));
  const port = await new Promise((ok, fail) => {
    child.stdout.on("data", (b) => {
      const m = /listening (\d+)/.exec(b.toString());
      if (m) ok(Number(m[1]));
    });
    child.once("exit", (code) => fail(new Error(`the app exited (${code})`)));
  });
  return { child, url: `http://127.0.0.1:${port}` };
}

// rebuild reads UI message chunks into the final UI message; a stream that errors keeps what
// it rebuilt so far.
async function rebuild(ai, stream) {
  let last;
  let error;
  try {
    // An error chunk (the app's word that the answer did not complete) is reported to onError.
    for await (const m of ai.readUIMessageStream({ stream, onError: (err) => (error ??= err) })) last = m;
  } catch (err) {
    error = err;
  }
  return { message: last, error };
}

const textOf = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
const send = (transport, chatId, abortSignal) =>
  transport.sendMessages({ chatId, trigger: "submit-message", messageId: undefined, abortSignal, messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: "hi" }] }] });

for (const pkg of ["ai5", "ai"]) {
  test(`${pkg}: a client dropped mid-answer resumes to the UI message an uninterrupted client gets; a killed app process leaves every word it wrote`, { timeout: 300_000 }, async (t) => {
    const ai = await import(pkg);
    const { version } = (await import(`${pkg}/package.json`, { with: { type: "json" } })).default;
    const work = mkdtempSync(join(tmpdir(), "aisdk-resume-"));
    chmodSync(work, 0o755); // the private cluster runs as the postgres user when we are root
    const r = await startRindled(work, ["-stream-idle-timeout", "2s"]);
    t.after(async () => {
      r.proc.kill("SIGTERM");
      await new Promise((ok) => (r.proc.exitCode !== null ? ok() : r.proc.on("exit", ok)));
      rmSync(work, { recursive: true, force: true });
    });
    const token = r.token("-sub", "chat-app", "-scope", "producer");
    const prefix = `aisdk-${pkg}`;

    // The reference: a client that reads a whole answer.
    {
      const app = await startApp(t, pkg, r, token, prefix);
      const transport = new ai.DefaultChatTransport({ api: `${app.url}/api/chat` });
      const reading = rebuild(ai, await send(transport, "reference"));
      await fetch(`${app.url}/release`, { method: "POST" });
      var reference = await reading;
      assert.equal(reference.error, undefined);
      assert.equal(textOf(reference.message), words.join(""));
      app.child.kill("SIGKILL");
    }

    // A client drops mid-answer, resumes through the GET route, and the answer goes on.
    {
      const app = await startApp(t, pkg, r, token, prefix);
      const transport = new ai.DefaultChatTransport({ api: `${app.url}/api/chat` });
      const drop = new AbortController();
      const reader = (await send(transport, "dropped", drop.signal)).getReader();
      for (let seen = 0; seen < 3; ) if ((await reader.read()).value?.type === "text-delta") seen++;
      drop.abort(); // the page reloads
      await reader.cancel().catch(() => {});
      const resumed = await transport.reconnectToStream({ chatId: "dropped" });
      assert.ok(resumed, "the GET route resumes the chat's stream");
      const reading = rebuild(ai, resumed);
      await fetch(`${app.url}/release`, { method: "POST" });
      const { message, error } = await reading;
      assert.equal(error, undefined);
      assert.deepEqual(message.parts, reference.message.parts, "the rebuilt UI message is the produced one");
      assert.equal(await transport.reconnectToStream({ chatId: "dropped" }), null, "a done answer: nothing to resume");
      app.child.kill("SIGKILL");
    }

    // The producing app process is killed mid-answer; a fresh one resumes the chat.
    {
      const app = await startApp(t, pkg, r, token, prefix);
      const transport = new ai.DefaultChatTransport({ api: `${app.url}/api/chat` });
      const reader = (await send(transport, "killed")).getReader();
      // Wait until rindled holds the first half (the gate holds the rest), then kill.
      const watcher = createResumableStreamContext({ baseUrl: r.base, token, keyPrefix: prefix, waitUntil: null });
      // The POST route's consumeSseStream creates the stream while the answer starts: wait
      // for it (a condition, polled), then read what rindled holds.
      while ((await watcher.hasExistingStream("killed")) === null) await new Promise((ok) => setTimeout(ok, 20));
      const stored = (await watcher.resumeExistingStream("killed")).getReader();
      for (let sse = ""; !sse.includes(JSON.stringify(words[words.length / 2 - 1]).slice(1, -1)); ) sse += (await stored.read()).value;
      await stored.cancel();
      app.child.kill("SIGKILL");
      await reader.cancel().catch(() => {});

      const fresh = await startApp(t, pkg, r, token, prefix);
      const again = new ai.DefaultChatTransport({ api: `${fresh.url}/api/chat` });
      const resumed = await again.reconnectToStream({ chatId: "killed" });
      assert.ok(resumed, "the fresh process resumes the dead one's answer");
      const { message, error } = await rebuild(ai, resumed);
      assert.equal(textOf(message), half, "every word the killed process wrote, and nothing else");
      assert.ok(error, "the answer ends in error, not as if complete");
    }
    t.diagnostic(`ai ${version}: dropped and resumed, killed and resumed`);
  });
}
