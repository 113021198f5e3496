// A producing process for the resumable-stream tests: it starts an answer through the drop-in,
// pushes the deltas it is given, says so on stdout, and then waits for the model forever (the
// test kills it with SIGKILL mid-answer).
import { createResumableStreamContext } from "../src/resumable-stream.js";

const [baseUrl, token, keyPrefix, streamId, ...deltas] = process.argv.slice(2);
const ctx = createResumableStreamContext({ baseUrl, token, keyPrefix, waitUntil: null });
const stream = await ctx.resumableStream(streamId, () => new ReadableStream<string>({
  start(c) {
    for (const d of deltas) c.enqueue(d);
    // never closed: the model is still thinking when the process dies
  },
}));
if (!stream) throw new Error("the stream was already done");
const reader = stream.getReader();
for (let got = ""; got.length < deltas.join("").length; ) {
  const { value } = await reader.read();
  got += value ?? "";
}
process.stdout.write("produced\n");
setInterval(() => {}, 1 << 30); // alive, thinking, until the test kills it
