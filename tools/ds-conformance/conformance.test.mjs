// The suite's CLI finds no test files when the package is installed normally, so vitest runs
// this file, which calls the suite's entry point against the server run.mjs started.
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

runConformanceTests({
  baseUrl: process.env.DS_BASE_URL,
  longPollTimeoutMs: Number(process.env.DS_LONG_POLL_MS ?? 10000),
});
