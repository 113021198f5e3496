// The published Yjs binding (@durable-streams/y-durable-streams) against rindled: its server
// keeps each document in Durable Streams streams on rindled (updates and snapshots are
// application/octet-stream, so byte streams here; the index is JSON), and two providers sync a
// document through it. A small compaction threshold makes the server snapshot the document, so
// a third client that joins later loads a snapshot and the updates after it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, chmodSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as Y from "yjs";
import { YjsProvider } from "@durable-streams/y-durable-streams";
import { YjsServer } from "@durable-streams/y-durable-streams/server";
import { startRindled } from "../rindled.mjs";

// until resolves once cond() holds, checking at every change of doc (no timers); the test
// runner's timeout bounds it.
function until(doc, cond) {
  return new Promise((ok) => {
    if (cond()) return ok();
    const check = () => {
      if (cond()) {
        doc.off("update", check);
        ok();
      }
    };
    doc.on("update", check);
  });
}

function synced(provider) {
  return new Promise((ok) => {
    if (provider.synced) return ok();
    const on = (s) => {
      if (s) {
        provider.off("synced", on);
        ok();
      }
    };
    provider.on("synced", on);
  });
}

test("Yjs documents sync between clients through rindled's byte streams", { timeout: 180_000 }, async (t) => {
  const work = mkdtempSync(join(tmpdir(), "ds-clients-"));
  chmodSync(work, 0o755); // the private cluster runs as the postgres user when we are root
  const r = await startRindled(work);
  const token = r.token("-sub", "yjs-server", "-scope", "producer");
  const ys = new YjsServer({ dsServerUrl: r.base, dsServerHeaders: { authorization: `Bearer ${token}` }, compactionThreshold: 256 });
  const url = await ys.start();
  const providers = [];
  // Torn down in order: the clients, the Yjs server, then rindled.
  t.after(async () => {
    providers.forEach((p) => p.destroy());
    await ys.stop();
    r.proc.kill("SIGTERM");
    await new Promise((ok) => (r.proc.exitCode !== null ? ok() : r.proc.on("exit", ok)));
    rmSync(work, { recursive: true, force: true });
  });
  const client = async () => {
    const doc = new Y.Doc();
    const provider = new YjsProvider({ doc, baseUrl: `${url}/v1/yjs/notes`, docId: "meeting" });
    providers.push(provider);
    await synced(provider);
    return doc;
  };

  const a = await client();
  const b = await client();
  a.getText("t").insert(0, "hello from a");
  await until(b, () => b.getText("t").toString() === "hello from a");
  for (let i = 0; i < 40; i++) b.getText("t").insert(b.getText("t").length, ` b${i}`); // past the compaction threshold
  const want = b.getText("t").toString();
  await until(a, () => a.getText("t").toString() === want);

  const c = await client(); // joins late: a snapshot, then the updates after it
  await until(c, () => c.getText("t").toString() === want);
  assert.equal(c.getText("t").toString(), want);

  // The streams behind the document are rindled's: byte streams for updates and snapshots.
  const head = await fetch(`${r.base}/v1/stream/yjs/notes/docs/meeting/.updates`, { method: "HEAD", headers: { authorization: `Bearer ${token}` } });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("content-type"), "application/octet-stream");
});
