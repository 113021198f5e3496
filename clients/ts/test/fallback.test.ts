import { test } from "node:test";
import assert from "node:assert/strict";

import { readStream } from "../src/index.js";

// The fallback path, where the live plane cannot serve (stale): the reader detaches and
// long-polls the durable view to the end. A scripted server, since a real one goes stale only
// under load.
test("on stale the reader follows the durable view to the end", async () => {
  const calls: string[] = [];
  const scripted: typeof fetch = async (input) => {
    const u = new URL(String(input));
    calls.push(u.pathname + u.search);
    if (u.pathname.endsWith("/events")) {
      const body = 'retry: 10\n\nid: 0\ndata: {"type":"open","streamId":"m","from":0,"seq":9,"durableSeq":3,"ended":false}\n\n' +
        'id: 6\ndata: {"type":"chunk","from":0,"seq":6,"text":"héllo "}\n\n' +
        'data: {"type":"stale","floorSeq":0,"durableSeq":3}\n\n';
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    }
    const after = Number(u.searchParams.get("after"));
    const view = after < 9 ? { id: "m", text: "héllo wör", seq: 9, status: "streaming" } : { id: "m", text: "héllo wörld", seq: 11, status: "complete" };
    return Response.json({ ...view, updatedAt: new Date().toISOString() });
  };
  const sources: string[] = [];
  const final = await readStream({ baseUrl: "http://rindled.test", streamId: "m", fetch: scripted, onUpdate: (s) => sources.push(s.source) });
  assert.equal(final.text, "héllo wörld");
  assert.equal(final.status, "complete");
  assert.equal(final.source, "view");
  assert.ok(sources.includes("live") && sources.includes("view"));
  assert.deepEqual(calls.slice(1), ["/v1/streams/m?after=0&wait=30s", "/v1/streams/m?after=9&wait=30s"]);
});
