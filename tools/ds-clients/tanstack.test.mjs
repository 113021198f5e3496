// The published TanStack AI transport (@durable-streams/tanstack-ai-transport) against rindled:
// a chat session is one JSON stream; an app server echoes each user turn into it and pipes the
// assistant's chunks after it (toDurableChatSessionResponse), and a client subscribed to the
// session gets a snapshot of what is there, then the next turn's chunks live over SSE.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { mkdtempSync, chmodSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durableStreamConnection, materializeSnapshotFromDurableStream, toDurableChatSessionResponse } from "@durable-streams/tanstack-ai-transport";
import { startRindled } from "../rindled.mjs";
import { authProxy } from "../ds-conformance/run.mjs";

// reply is an assistant turn as TanStack AI's chunks.
async function* reply(id, words) {
  yield { type: "TEXT_MESSAGE_START", messageId: id, role: "assistant" };
  for (const delta of words) yield { type: "TEXT_MESSAGE_CONTENT", messageId: id, delta, content: "ignored: the transport stores deltas" };
  yield { type: "TEXT_MESSAGE_END", messageId: id };
  yield { type: "RUN_FINISHED", runId: id };
}

const text = (m) => m.parts.filter((p) => p.type === "text").map((p) => p.content).join("");

test("TanStack AI chat sessions live in rindled streams", { timeout: 180_000 }, async (t) => {
  const work = mkdtempSync(join(tmpdir(), "ds-clients-"));
  chmodSync(work, 0o755); // the private cluster runs as the postgres user when we are root
  const r = await startRindled(work);
  const gw = await authProxy(r.base, r.token("-sub", "chat-app", "-scope", "producer"));
  const session = `${gw.url}/v1/stream/sessions/s1`;
  let turn = 0;
  const app = http.createServer(async (req, res) => {
    let body = "";
    for await (const b of req) body += b;
    const { messages } = JSON.parse(body);
    turn++;
    const words = turn === 1 ? ["Hello", " there"] : ["Second", " answer"];
    const response = await toDurableChatSessionResponse({
      stream: { writeUrl: session }, newMessages: messages.slice(-1), responseStream: reply(`a${turn}`, words), mode: "await",
    });
    res.writeHead(response.status).end();
  });
  await new Promise((ok) => app.listen(0, "127.0.0.1", ok));
  const abort = new AbortController();
  t.after(async () => {
    abort.abort();
    app.closeAllConnections();
    app.close();
    gw.server.closeAllConnections();
    gw.server.close();
    r.proc.kill("SIGTERM");
    await new Promise((ok) => (r.proc.exitCode !== null ? ok() : r.proc.on("exit", ok)));
    rmSync(work, { recursive: true, force: true });
  });

  const conn = durableStreamConnection({ sendUrl: `http://127.0.0.1:${app.address().port}/api/chat`, readUrl: session });
  await conn.send([{ id: "u1", role: "user", parts: [{ type: "text", content: "hi" }] }]);

  // A client that subscribes now gets the session so far as one snapshot, then the next turn live.
  const chunks = conn.subscribe(abort.signal)[Symbol.asyncIterator]();
  const first = (await chunks.next()).value;
  assert.equal(first.type, "MESSAGES_SNAPSHOT");
  assert.deepEqual(first.messages.map((m) => [m.role, text(m)]), [["user", "hi"], ["assistant", "Hello there"]]);
  const sending = conn.send([{ id: "u2", role: "user", parts: [{ type: "text", content: "again" }] }]);
  let live = "";
  for (;;) {
    const { value } = await chunks.next();
    if (value.type === "TEXT_MESSAGE_CONTENT" && value.messageId === "a2") live += value.delta;
    if (value.type === "RUN_FINISHED") break;
  }
  await sending;
  assert.equal(live, "Second answer", "the second turn's chunks arrive live");

  const { messages } = await materializeSnapshotFromDurableStream({ readUrl: session });
  assert.deepEqual(messages.map((m) => [m.role, text(m)]), [["user", "hi"], ["assistant", "Hello there"], ["user", "again"], ["assistant", "Second answer"]]);
});
