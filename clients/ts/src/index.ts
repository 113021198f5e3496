// rindle-streams: the browser and Node client of rindled. Typed frames, the wire's pure
// functions, a resuming reader with a durable-view fallback, and an idempotent producer.
export * from "./frames.js";
export * from "./wire.js";
export { HttpError } from "./http.js";
export type { ClientOptions, Token } from "./http.js";
export { StreamReader, readStream } from "./reader.js";
export type { ReaderOptions, ReaderState } from "./reader.js";
export { CancelledError, Producer } from "./producer.js";
export type { ProducerOptions } from "./producer.js";
