// The wire's frames, exactly as rindled sends them (DESIGN §4). Offsets are UTF-16 code units:
// what a JavaScript string's length counts.

/** A terminal status: what the store holds once a stream is sealed. */
export type Status = "complete" | "cancelled" | "error" | "interrupted";

/** The join was accepted at `from` (floored to a character, clamped to [0, seq]). */
export interface OpenFrame {
  type: "open";
  streamId: string;
  from: number;
  seq: number;
  durableSeq: number;
  ended: boolean;
}

/** Produced text: it starts at `from`, and `text.length === seq - from`. Apply it at `from`. */
export interface ChunkFrame {
  type: "chunk";
  from: number;
  seq: number;
  text: string;
}

/** The store holds the text through `seq`. */
export interface DurableFrame {
  type: "durable";
  seq: number;
}

/** Sealed: `seq` is the durable length, `status` what the store holds. The last frame. */
export interface EndFrame {
  type: "end";
  seq: number;
  status: Status;
  error?: string;
}

/** This reader must read the durable view instead. The last frame. */
export interface StaleFrame {
  type: "stale";
  floorSeq: number;
  durableSeq: number;
}

/** Nothing to serve here. The last frame. */
export interface AbsentFrame {
  type: "absent";
}

export type Frame = OpenFrame | ChunkFrame | DurableFrame | EndFrame | StaleFrame | AbsentFrame;

/** A subscription ends with exactly one of these. */
export function isTerminal(f: Frame): f is EndFrame | StaleFrame | AbsentFrame {
  return f.type === "end" || f.type === "stale" || f.type === "absent";
}

/** The durable view (GET /v1/streams/{id}). */
export interface View {
  id: string;
  text: string;
  seq: number;
  status: "pending" | "streaming" | Status;
  error?: string;
  updatedAt: string;
}

/** What every producer answer says about the stream. */
export interface StreamState {
  seq: number;
  durableSeq: number;
  cancelled: boolean;
}

/** Append's and ingest's answer. */
export interface AppendResult extends StreamState {
  applied: number;
}

/** RFC 9457 problem details, as rindled answers every error. */
export interface Problem {
  status: number;
  title?: string;
  detail?: string;
  /** On a 409 from a producer route: the stream's length, where to resume. */
  seq?: number;
  /** On a 409 from a producer route: a reader cancelled the stream. */
  cancelled?: boolean;
}
