// What the reader and the producer share: options, auth, problem details and retry pacing.
import type { Problem } from "./frames.js";

/** A bearer token, or a function that returns a fresh one for each request. */
export type Token = string | (() => string | Promise<string>);

/** The options every client part takes. */
export interface ClientOptions {
  /** rindled's base URL, such as "https://api.example.com" (no trailing slash needed). */
  baseUrl: string;
  /** The bearer token (a producer needs the producer scope; a reader reads its own messages), or a
   * getter asked before every request and every reconnect, so an event stream reconnects with a
   * refreshed token (an identity provider's SDK: () => auth.getAccessToken()). */
  token?: Token;
  /** A fetch to use instead of the global one (tests, proxies, instrumentation). */
  fetch?: typeof fetch;
}

/** An answer rindled gave as problem details. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly problem: Problem) {
    super(`${status}: ${problem.detail ?? problem.title ?? "request failed"}`);
    this.name = "HttpError";
  }
}

export function url(base: string, path: string): string {
  return base.replace(/\/+$/, "") + path;
}

export async function authHeaders(token: Token | undefined): Promise<Record<string, string>> {
  if (token === undefined) return {};
  const t = typeof token === "function" ? await token() : token;
  return { authorization: `Bearer ${t}` };
}

export async function problemOf(res: Response): Promise<Problem> {
  try {
    const body = (await res.json()) as Problem;
    return { ...body, status: res.status };
  } catch {
    return { status: res.status, title: res.statusText };
  }
}

/** Waits ms, or less if signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });
}

/** The delay a 503 asks for (Retry-After seconds), else fallback. */
export function retryAfter(res: Response, fallback: number): number {
  const v = Number(res.headers.get("retry-after"));
  return Number.isFinite(v) && v > 0 ? v * 1000 : fallback;
}

/** Whether a request that failed this way may be sent again as it is. */
export function retryable(status: number): boolean {
  return status === 502 || status === 503 || status === 504;
}
