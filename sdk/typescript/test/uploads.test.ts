// Uploads (docs/sdk/spool.md, "Uploads") without NATS: which values move and under which names (the
// Python SDK's, checked against values it computed), the sidecars (0600, durable, counted toward
// maxBytes, deleted after the ack, orphans removed at open) and the record's meta.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

import { Producer } from "../src/producer.js";
import { Spool, SpoolError, SpoolFull, UPLOADS_DIR, decodePayload, type Message, type Upload } from "../src/spool.js";
import { DEFAULT_UPLOAD_THRESHOLD, extract, objectName } from "../src/uploads.js";
import { InvalidEvent } from "../src/wire.js";

function tmp(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "tlp-uploads-"));
}

const sha256 = (b: Buffer): string => createHash("sha256").update(b).digest("hex");

function upload(name: string, content: Buffer): Upload {
  return { bucket: "ATL_PAYLOADS_acme", name, sha256: sha256(content), size: content.length, contentType: "text/plain; charset=utf-8", file: "" };
}

function msg(n: number, uploads: Upload[] = []): Message {
  const m: Message = {
    subject: "atl.in.acme.tool.result.created",
    headers: { "ce-id": `e${n}`, "Nats-Msg-Id": `m${n}` },
    body: Buffer.from(`{"n":${n}}`),
    emittedAtMs: 1_700_000_000_000 + n,
  };
  if (uploads.length > 0) m.uploads = uploads;
  return m;
}

const sidecars = (d: string): string[] => {
  try {
    return fs.readdirSync(path.join(d, UPLOADS_DIR)).sort();
  } catch {
    return [];
  }
};

// The expected values below are what the Python SDK's `uploads.extract` gives for the same input
// (sdk/python/src/toolledger_producer/uploads.py); the e2e test compares more cases live.
test("extract moves the values the Python SDK moves, under the same names, with the same bytes", () => {
  const a = extract({ "a/b": { "t~": "x".repeat(300000) }, n: 1 }, { eventId: "ev 1/ü~x", bucket: "ATL_PAYLOADS_acme", threshold: DEFAULT_UPLOAD_THRESHOLD, budget: 1e9 });
  assert.deepEqual(
    a.uploads.map(({ upload: u }) => [u.name, u.sha256, u.size, u.contentType]),
    [["ev%201/%C3%BC~x/data/a~1b/t~0", "29927e273accc68286005017f7fa6e4f27bddb4db3083ff8b8d4c3667905b7fa", 300000, "text/plain; charset=utf-8"]],
  );
  assert.deepEqual(a.data, {
    "a/b": { "t~": { $upload: { bucket: "ATL_PAYLOADS_acme", name: "ev%201/%C3%BC~x/data/a~1b/t~0", sha256: "29927e273accc68286005017f7fa6e4f27bddb4db3083ff8b8d4c3667905b7fa", size: 300000, content_type: "text/plain; charset=utf-8" } } },
    n: 1,
  });
  // An array still over the threshold once no member is: it goes whole, as compact JSON.
  const b = extract({ rows: Array.from({ length: 400 }, () => ({ k: "v".repeat(1000) })), small: "ok" }, { eventId: "ev-2", bucket: "ATL_PAYLOADS_acme", threshold: DEFAULT_UPLOAD_THRESHOLD, budget: 1e9 });
  assert.deepEqual(
    b.uploads.map(({ upload: u }) => [u.name, u.sha256, u.size, u.contentType]),
    [["ev-2/data/rows", "291588cdf6b5ef02561337601b2557ec1a7ea80e2a1d71d319f159cee480e214", 403601, "application/json"]],
  );
  // Over the budget: the largest values of at least 1 KiB, one at a time.
  const c = extract({ a: "a".repeat(5000), b: ["b".repeat(3000), "c".repeat(2000)], c: "ü".repeat(600), d: 7 }, { eventId: "ev-3", bucket: "ATL_PAYLOADS_acme", threshold: DEFAULT_UPLOAD_THRESHOLD, budget: 4000 });
  assert.deepEqual(
    c.uploads.map(({ upload: u }) => [u.name, u.sha256, u.size, u.contentType]),
    [
      ["ev-3/data/b", "383e1b6d5a815673345cd22f348bc191c8529141ab28c011bdf1c76c7e297c93", 5007, "application/json"],
      ["ev-3/data/a", "c526c6222044dab5674de9c4ac7f4566ebb5e4d8bf9d8ea34c9cc8a7cc3c869c", 5000, "text/plain; charset=utf-8"],
    ],
  );
  assert.equal(objectName("é/x y", "/data/%"), "%C3%A9/x%20y/data/%25");
});

test("extract refuses an event it cannot make fit, and leaves small events alone", () => {
  const many = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, "x".repeat(500)]));
  assert.throws(() => extract(many, { eventId: "e", bucket: "B", threshold: DEFAULT_UPLOAD_THRESHOLD, budget: 1000 }), InvalidEvent);
  const small = { a: "x".repeat(100) };
  const out = extract(small, { eventId: "e", bucket: "B", threshold: DEFAULT_UPLOAD_THRESHOLD, budget: 1e6 });
  assert.deepEqual(out, { data: small, uploads: [] });
});

test("a sidecar is 0600 in a 0700 uploads/, named in the record's meta as spool.md specifies", async () => {
  const d = tmp();
  const s = new Spool(d);
  const content = Buffer.from("hello upload");
  const u = upload("e1/data/x", content);
  await s.append(msg(1, [u]), [content]);
  const [name] = sidecars(d);
  assert.match(name ?? "", /^[0-9a-f]{32}$/);
  assert.equal(fs.statSync(path.join(d, UPLOADS_DIR)).mode & 0o777, 0o700);
  assert.equal(fs.statSync(path.join(d, UPLOADS_DIR, name as string)).mode & 0o777, 0o600);
  assert.deepEqual(fs.readFileSync(path.join(d, UPLOADS_DIR, name as string)), content);
  const [m] = s.head(1);
  assert.deepEqual(m?.uploads, [{ ...u, file: `${UPLOADS_DIR}/${name}` }]);
  // The raw meta: the keys and order the Python SDK writes.
  const seg = fs.readdirSync(d).find((f) => f.endsWith(".seg")) as string;
  const raw = fs.readFileSync(path.join(d, seg)).subarray(8 + 8);
  const meta = raw.subarray(4, 4 + raw.readUInt32BE(0)).toString("utf8");
  assert.ok(
    meta.endsWith(
      `"uploads":[{"file":"uploads/${name}","bucket":"ATL_PAYLOADS_acme","name":"e1/data/x","sha256":"${u.sha256}",` +
        `"size":${content.length},"content_type":"text/plain; charset=utf-8"}]}`,
    ),
    meta,
  );
  assert.deepEqual(decodePayload(raw).uploads?.[0]?.file, `${UPLOADS_DIR}/${name}`);
  assert.deepEqual(await s.readUpload(m?.uploads?.[0] as Upload), content);
  // The same event appended twice: two records, two sidecars.
  await s.append(msg(1, [u]), [content]);
  assert.equal(sidecars(d).length, 2);
  s.close();
});

test("sidecar bytes count toward maxBytes, and the ack deletes them", async () => {
  const d = tmp();
  const s = new Spool(d, { maxBytes: 64 * 1024, whenFull: "fail" });
  const base = s.usedBytes;
  const content = Buffer.alloc(25 * 1024, "z");
  await s.append(msg(1, [upload("e1/data/x", content)]), [content]);
  assert.ok(s.usedBytes >= base + content.length, `${s.usedBytes}`);
  await s.append(msg(2, [upload("e2/data/x", content)]), [content]);
  await assert.rejects(s.append(msg(3, [upload("e3/data/x", content)]), [content]), SpoolFull);
  assert.equal(sidecars(d).length, 2, "a refused event leaves no sidecar");
  const big = Buffer.alloc(70 * 1024, "z");
  await assert.rejects(s.append(msg(4, [upload("e4/data/x", big)]), [big]), /can never fit/);
  const before = s.usedBytes;
  s.ack(1);
  assert.equal(sidecars(d).length, 1);
  assert.ok(s.usedBytes <= before - content.length);
  await s.append(msg(3, [upload("e3/data/x", content)]), [content]);
  s.ack(2);
  assert.deepEqual(sidecars(d), []);
  s.close();
});

test("a blocked append gets room when an ack deletes sidecars", async () => {
  const d = tmp();
  const s = new Spool(d, { maxBytes: 64 * 1024, blockTimeoutMs: 5000 });
  const content = Buffer.alloc(25 * 1024, "z");
  await s.append(msg(1, [upload("e1/data/x", content)]), [content]);
  await s.append(msg(2, [upload("e2/data/x", content)]), [content]);
  const blocked = s.append(msg(3, [upload("e3/data/x", content)]), [content]);
  setTimeout(() => s.ack(1), 50);
  await blocked;
  assert.equal(s.queued, 2);
  assert.equal(sidecars(d).length, 2);
  s.close();
});

test("open removes orphaned sidecars and keeps those of unacked records", async () => {
  const d = tmp();
  let s = new Spool(d);
  const content = Buffer.from("payload");
  await s.append(msg(1, [upload("e1/data/x", content)]), [content]);
  await s.append(msg(2, [upload("e2/data/x", content)]), [content]);
  const live = s.head(2).map((m) => m.uploads?.[0]?.file);
  s.ack(1);
  s.close();
  // An emit that died between its sidecar and its record; and a crash between an ack and its deletion.
  fs.writeFileSync(path.join(d, UPLOADS_DIR, "0123456789abcdef0123456789abcdef"), "orphan", { mode: 0o600 });
  fs.writeFileSync(path.join(d, live[0] as string), content, { mode: 0o600 });
  s = new Spool(d);
  assert.deepEqual(sidecars(d), [path.basename(live[1] as string)]);
  assert.equal(s.queued, 1);
  assert.ok(s.usedBytes >= content.length);
  s.close();
});

test("a sidecar whose bytes do not match is an error, not a publish", async () => {
  const d = tmp();
  const s = new Spool(d);
  const content = Buffer.from("the real bytes");
  await s.append(msg(1, [upload("e1/data/x", content)]), [content]);
  const u = s.head(1)[0]?.uploads?.[0] as Upload;
  fs.writeFileSync(path.join(d, u.file), "other bytes!!!");
  await assert.rejects(s.readUpload(u), SpoolError);
  fs.unlinkSync(path.join(d, u.file));
  assert.equal(s.hasUpload(u), false);
  await assert.rejects(s.readUpload(u), /missing/);
  s.close();
});

test("emit moves a large result to a sidecar offline; uploadThresholdBytes null refuses it", async () => {
  const d = tmp();
  const p = new Producer({ tenant: "acme", spoolDir: path.join(d, "spool"), start: false });
  const text = "r".repeat(2 * 1024 * 1024);
  const event = p.events.result({ invocation_id: "inv-1", tool_id: "kv.get", status: "succeeded", content: [{ type: "text", text }] });
  await p.emit(event);
  const [m] = p.spool.head(1);
  const u = m?.uploads?.[0] as Upload;
  assert.equal(u.name, `${event.id}/data/content/0/text`);
  assert.equal(u.bucket, "ATL_PAYLOADS_acme");
  assert.equal(u.size, text.length);
  const body = JSON.parse(m?.body.toString("utf8") as string) as { content: { text: unknown }[] };
  assert.deepEqual(body.content[0]?.text, {
    $upload: { bucket: u.bucket, name: u.name, sha256: u.sha256, size: u.size, content_type: "text/plain; charset=utf-8" },
  });
  assert.equal(p.metrics().uploaded, 0);
  assert.ok(p.metrics().spoolBytes > text.length);
  await p.close(0);

  const q = new Producer({ tenant: "acme", spoolDir: path.join(d, "spool2"), start: false, uploadThresholdBytes: null });
  await assert.rejects(q.emit(q.events.result({ invocation_id: "inv-2", tool_id: "kv.get", status: "succeeded", content: [{ type: "text", text }] })), InvalidEvent);
  await q.close(0);
});
