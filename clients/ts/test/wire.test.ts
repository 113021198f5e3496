import { test } from "node:test";
import assert from "node:assert/strict";

import { GapError, SSEParser, durableText, isTerminal, len16, resumePoint, splice } from "../src/index.js";
import type { ChunkFrame, Frame } from "../src/index.js";

const chunk = (from: number, text: string): ChunkFrame => ({ type: "chunk", from, seq: from + text.length, text });

test("len16 counts UTF-16 code units, as seq does", () => {
  assert.equal(len16("héllo"), 5);
  assert.equal(len16("😀"), 2);
  assert.equal(len16("👋🏽"), 4);
});

test("resumePoint is the SSE id of each frame", () => {
  const cases: [Frame, number | undefined][] = [
    [{ type: "open", streamId: "m", from: 3, seq: 9, durableSeq: 5, ended: false }, 3],
    [chunk(3, "abc"), 6],
    [{ type: "durable", seq: 7 }, 7],
    [{ type: "end", seq: 8, status: "complete" }, 8],
    [{ type: "stale", floorSeq: 0, durableSeq: 2 }, undefined],
    [{ type: "absent" }, undefined],
  ];
  for (const [f, want] of cases) assert.equal(resumePoint(f), want, f.type);
  assert.equal(isTerminal({ type: "absent" }), true);
  assert.equal(isTerminal(chunk(0, "x")), false);
});

test("splice applies a chunk at its own offset", () => {
  assert.equal(splice("", chunk(0, "héllo")), "héllo");
  assert.equal(splice("hé", chunk(2, "llo")), "héllo");
  assert.equal(splice("héllo", chunk(3, "lo wörld")), "héllo wörld", "an overlapping replay extends");
  assert.equal(splice("héllo", chunk(1, "él")), "héllo", "a chunk held whole changes nothing");
  assert.equal(splice("", chunk(0, "😀")), "😀");
  assert.throws(() => splice("ab", chunk(3, "x")), GapError);
  assert.throws(() => splice("", { type: "chunk", from: 0, seq: 3, text: "x" }), RangeError);
});

test("durableText is the body, then the contiguous chunk rows in seq order", () => {
  assert.equal(durableText("ab", [{ seq: 6, text: "😀!" }, { seq: 3, text: "c" }]), "abc😀!");
  assert.equal(durableText("ab", [{ seq: 9, text: "late" }]), "ab", "a row past a hole is not durable yet");
  assert.equal(durableText("", []), "");
});

test("SSEParser parses rindled's events across arbitrary splits", () => {
  const raw = 'retry: 2000\n\nid: 0\ndata: {"type":"open"}\n\n: ping\n\nid: 5\ndata: {"type":"chunk","text":"a\\nb"}\r\n\r\n';
  for (let cut = 0; cut <= raw.length; cut++) {
    const p = new SSEParser();
    const evs = [...p.feed(raw.slice(0, cut)), ...p.feed(raw.slice(cut))];
    assert.deepEqual(evs, [{ retry: 2000 }, { id: "0", data: '{"type":"open"}' }, { id: "5", data: '{"type":"chunk","text":"a\\nb"}' }], `cut at ${cut}`);
  }
});
