import { defineConfig } from "vitest/config";

// A generous per-test timeout: this machine is small, and the suite runs several hundred
// tests with long-polls and SSE against a server backed by PostgreSQL.
export default defineConfig({
  test: {
    include: ["conformance.test.mjs"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
