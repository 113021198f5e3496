// The published AI SDK transport (@durable-streams/aisdk-transport) against rindled, with the
// AI SDK's mock model: an app server writes a generation's UI message chunks into a rindled
// stream (toDurableStreamResponse), the chat transport reads them back over the protocol's SSE,
// and a reconnect (a refreshed page) reads the same generation again from the stream.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { mkdtempSync, chmodSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { streamText, simulateReadableStream } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { createDurableChatTransport, toDurableStreamResponse } from "@durable-streams/aisdk-transport";
import { startRindled } from "../rindled.mjs";
import { authProxy } from "../ds-conformance/run.mjs";

const words = ["Durable ", "answers ", "survive ", "a ", "refresh."];

function model() {
  const usage = { inputTokens: { total: 3, noCache: 3, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 5, text: 5, reasoning: 0 } };
  return new MockLanguageModelV3({
    doStream: async () => ({
      stream: simulateReadableStream({
        chunks: [
          { type: "text-start", id: "t" },
          ...words.map((delta) => ({ type: "text-delta", id: "t", delta })),
          { type: "text-end", id: "t" },
          { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage },
        ],
      }),
    }),
  });
}

async function textOf(stream) {
  let text = "";
  for await (const chunk of stream) if (chunk.type === "text-delta") text += chunk.delta;
  return text;
}

test("AI SDK chats write and resume through rindled streams", { timeout: 180_000 }, async (t) => {
  const work = mkdtempSync(join(tmpdir(), "ds-clients-"));
  chmodSync(work, 0o755); // the private cluster runs as the postgres user when we are root
  const r = await startRindled(work);
  // A gateway that adds the app's token: the browser-side transport reads through it.
  const gw = await authProxy(r.base, r.token("-sub", "chat-app", "-scope", "producer"));
  const active = new Map(); // chat id -> the stream of its generation
  const app = http.createServer(async (req, res) => {
    const url = new URL(req.url, "http://app");
    const reconnect = /^\/api\/chat\/([^/]+)\/stream$/.exec(url.pathname);
    if (req.method === "GET" && reconnect) {
      const streamUrl = active.get(reconnect[1]);
      if (!streamUrl) return res.writeHead(204).end();
      return res.writeHead(200, { location: streamUrl, "content-type": "application/json" }).end(JSON.stringify({ streamUrl }));
    }
    let body = "";
    for await (const b of req) body += b;
    const { id } = JSON.parse(body);
    const streamUrl = `${gw.url}/v1/stream/chats/${id}/${active.size}`;
    active.set(id, streamUrl);
    const result = streamText({ model: model(), prompt: "hi" });
    const response = await toDurableStreamResponse({ source: result.toUIMessageStream(), stream: { writeUrl: streamUrl, readUrl: streamUrl }, mode: "await" });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body) Readable.fromWeb(response.body).pipe(res);
    else res.end();
  });
  await new Promise((ok) => app.listen(0, "127.0.0.1", ok));
  t.after(async () => {
    app.closeAllConnections();
    app.close();
    gw.server.closeAllConnections();
    gw.server.close();
    r.proc.kill("SIGTERM");
    await new Promise((ok) => (r.proc.exitCode !== null ? ok() : r.proc.on("exit", ok)));
    rmSync(work, { recursive: true, force: true });
  });

  const transport = createDurableChatTransport({ api: `http://127.0.0.1:${app.address().port}/api/chat` });
  const messages = [{ id: "u1", role: "user", parts: [{ type: "text", text: "hi" }] }];
  const sent = await transport.sendMessages({ chatId: "c1", messages, trigger: "submit-message", messageId: undefined, abortSignal: undefined });
  assert.equal(await textOf(sent), words.join(""));

  const again = await transport.reconnectToStream({ chatId: "c1" });
  assert.ok(again, "the app names the generation's stream");
  assert.equal(await textOf(again), words.join(""), "a reconnect reads the same generation from the stream");
  assert.equal(await transport.reconnectToStream({ chatId: "none" }), null, "no generation: nothing to resume");
});
