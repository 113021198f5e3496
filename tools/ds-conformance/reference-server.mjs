// The npm reference server (@durable-streams/server), file-backed in dir, in a process of its
// own: bench.mjs starts one per repetition, so the reference never shares the benchmark
// client's event loop. Prints its URL on the first line of stdout and runs until killed.
//
//   node reference-server.mjs DIR
import { DurableStreamTestServer } from "@durable-streams/server";

const server = new DurableStreamTestServer({ port: 0, dataDir: process.argv[2], compression: false });
console.log(await server.start());
process.on("SIGTERM", async () => {
  await server.stop();
  process.exit(0);
});
