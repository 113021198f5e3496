// The AI SDK app of the resume recipe, as a process of its own (the tests kill it): a POST route
// that streams a generation with the SDK's mock model and writes its SSE through the
// resumable-stream drop-in (consumeSseStream), and a GET route that resumes it
// (resumeExistingStream). The mock model sends the first half of its words, then waits for
// POST /release before the rest: the tests decide when the answer goes on, by request.
//   node app.mjs <ai package> <rindled URL> <producer token> <key prefix>
import http from "node:http";
import { Readable } from "node:stream";
import { createResumableStreamContext } from "../../clients/ts/dist/resumable-stream.js";

const [pkg, baseUrl, token, keyPrefix] = process.argv.slice(2);
const ai = await import(pkg);
const mocks = await import(`${pkg}/test`);
const words = Array.from({ length: 12 }, (_, k) => `word${k} é😀 `);
const streams = createResumableStreamContext({ baseUrl, token, keyPrefix, waitUntil: null });

let release;
const released = new Promise((ok) => (release = ok));

function model() {
  const text = (k) => ({ type: "text-delta", id: "t", delta: words[k] });
  const v2 = pkg === "ai5";
  const finish = v2
    ? { type: "finish", finishReason: "stop", usage: { inputTokens: 3, outputTokens: 12, totalTokens: 15 } }
    : { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage: { inputTokens: { total: 3, noCache: 3, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 12, text: 12, reasoning: 0 } } };
  const Mock = v2 ? mocks.MockLanguageModelV2 : mocks.MockLanguageModelV3;
  return new Mock({
    doStream: async () => ({
      stream: new ReadableStream({
        async start(c) {
          c.enqueue({ type: "text-start", id: "t" });
          for (let k = 0; k < words.length / 2; k++) c.enqueue(text(k));
          await released;
          for (let k = words.length / 2; k < words.length; k++) c.enqueue(text(k));
          c.enqueue({ type: "text-end", id: "t" });
          c.enqueue(finish);
          c.close();
        },
      }),
    }),
  });
}

const app = http.createServer(async (req, res) => {
  const url = new URL(req.url, "http://app");
  if (req.method === "POST" && url.pathname === "/release") {
    release();
    return res.writeHead(204).end();
  }
  const resume = /^\/api\/chat\/([^/]+)\/stream$/.exec(url.pathname);
  if (req.method === "GET" && resume) {
    // The recipe's GET route: the chat's active stream, resumed; 204 when there is none.
    const stream = await streams.resumeExistingStream(resume[1]);
    if (!stream) return res.writeHead(204).end();
    res.writeHead(200, ai.UI_MESSAGE_STREAM_HEADERS);
    try {
      for await (const sse of stream) res.write(sse);
    } catch (err) {
      // The answer ended without completing (its producer died: interrupted): say so in the UI
      // message stream's own terms, so the client shows an error, not a finished answer.
      res.write(`data: ${JSON.stringify({ type: "error", errorText: String(err?.message ?? err) })}\n\n`);
    }
    return res.end();
  }
  let body = "";
  for await (const b of req) body += b;
  const { id } = JSON.parse(body);
  const result = ai.streamText({ model: model(), prompt: "hi" });
  const response = result.toUIMessageStreamResponse({
    // The recipe's POST route: the SSE goes through the drop-in under the chat's id.
    async consumeSseStream({ stream }) {
      await streams.createNewResumableStream(id, () => stream);
    },
  });
  res.writeHead(response.status, Object.fromEntries(response.headers));
  Readable.fromWeb(response.body).on("error", () => res.destroy()).pipe(res);
});
app.listen(0, "127.0.0.1", () => process.stdout.write(`listening ${app.address().port}\n`));
