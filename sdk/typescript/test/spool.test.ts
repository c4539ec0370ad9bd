// The spool on its own (no NATS): format, recovery, compaction, permissions, lock and full policies,
// the checks of sdk/python/tests/spool_check.py for this implementation.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import zlib from "node:zlib";

import { SEGMENT_MAGIC, Spool, SpoolError, SpoolFull, encodeRecord, type Message } from "../src/spool.js";

function tmp(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "tlp-spool-"));
}

function msg(n: number, size = 100): Message {
  return {
    subject: "atl.in.acme.tool.invocation.planned",
    headers: { "ce-id": `e${n}`, "Nats-Msg-Id": `m${n}` },
    body: Buffer.concat([Buffer.alloc(size, "x"), Buffer.from(String(n))]),
    emittedAtMs: 1_700_000_000_000 + n,
  };
}

function segments(dir: string): string[] {
  return fs.readdirSync(dir).filter((f) => f.endsWith(".seg")).sort();
}

const ids = (s: Spool, n = 100): string[] => s.head(n).map((m) => m.headers["ce-id"] ?? "");

test("records round trip and a restart resumes after the ack", async () => {
  const d = tmp();
  let s = new Spool(d);
  for (let n = 0; n < 10; n++) await s.append(msg(n));
  assert.deepEqual(ids(s, 3), ["e0", "e1", "e2"]);
  s.ack(4);
  s.close();
  s = new Spool(d);
  assert.equal(s.recovered, 6);
  assert.equal(s.queued, 6);
  const head = s.head(100);
  assert.deepEqual(head.map((m) => m.headers["ce-id"]), ["e4", "e5", "e6", "e7", "e8", "e9"]);
  assert.deepEqual(head[0]?.body, msg(4).body);
  assert.equal(head[0]?.emittedAtMs, msg(4).emittedAtMs);
  s.close();
});

test("a torn tail is truncated and what came before is kept", async () => {
  const d = tmp();
  let s = new Spool(d);
  for (let n = 0; n < 3; n++) await s.append(msg(n));
  const file = path.join(d, segments(d).at(-1) as string);
  s.close();
  const whole = encodeRecord(msg(3));
  const half = Math.floor(whole.length / 2);
  fs.appendFileSync(file, whole.subarray(0, half)); // a write cut short by a crash
  const size = fs.statSync(file).size;
  s = new Spool(d);
  assert.equal(s.queued, 3);
  assert.equal(fs.statSync(file).size, size - half);
  await s.append(msg(4));
  assert.deepEqual(ids(s), ["e0", "e1", "e2", "e4"]);
  s.close();
});

test("a record with a bad checksum ends the segment there; zeros are not a record", async () => {
  const d = tmp();
  let s = new Spool(d);
  for (let n = 0; n < 3; n++) await s.append(msg(n));
  const file = path.join(d, segments(d).at(-1) as string);
  s.close();
  const data = fs.readFileSync(file);
  data[data.lastIndexOf("e2")] = "E".charCodeAt(0);
  fs.writeFileSync(file, Buffer.concat([data, Buffer.alloc(64)]));
  s = new Spool(d);
  assert.deepEqual(ids(s), ["e0", "e1"], "a garbled record was read");
  s.close();
});

test("a segment without the magic is set aside; a torn magic is deleted", () => {
  const d = tmp();
  fs.writeFileSync(path.join(d, "00000000000000000001.seg"), "NOTASPOOLSEGMENT");
  fs.writeFileSync(path.join(d, "00000000000000000002.seg"), "TLSP");
  const s = new Spool(d);
  assert.equal(s.corruptSegments.length, 1);
  assert.ok(fs.existsSync(path.join(d, "00000000000000000001.seg.corrupt")));
  assert.ok(!fs.existsSync(path.join(d, "00000000000000000002.seg")));
  // One past the highest segment found, set-aside and deleted ones included: never reused (spool.md).
  assert.deepEqual(segments(d), ["00000000000000000003.seg"]);
  s.close();
});

test("files are 0600 and the directory 0700", async () => {
  const d = path.join(tmp(), "spool");
  const old = process.umask(0);
  try {
    const s = new Spool(d);
    await s.append(msg(0));
    s.ack(1);
    await s.append(msg(1));
    assert.equal(fs.statSync(d).mode & 0o777, 0o700);
    for (const name of fs.readdirSync(d)) {
      assert.equal(fs.statSync(path.join(d, name)).mode & 0o777, 0o600, name);
    }
    s.close();
  } finally {
    process.umask(old);
  }
});

test("a second spool on the directory is refused, also across processes, until the holder closes or dies", () => {
  const d = tmp();
  const s = new Spool(d);
  assert.throws(() => new Spool(d), SpoolError);
  // The lock is the other SDKs' flock: Python sees it held.
  const probe = `import fcntl,sys\ntry:\n fcntl.flock(open(sys.argv[1],"r+"), fcntl.LOCK_EX|fcntl.LOCK_NB)\nexcept BlockingIOError:\n sys.exit(3)`;
  assert.equal(spawnSync("python3", ["-c", probe, path.join(d, "lock")]).status, 3, "flock not held");
  s.close();
  assert.equal(spawnSync("python3", ["-c", probe, path.join(d, "lock")]).status, 0, "flock not released");
  new Spool(d).close();
  // A holder killed with SIGKILL: the kernel drops its lock.
  const holder = spawnSync(
    process.execPath,
    ["--input-type=module", "-e", `import {Spool} from ${JSON.stringify(new URL("../src/spool.js", import.meta.url).href)}; new Spool(${JSON.stringify(d)}); process.kill(process.pid, "SIGKILL");`],
  );
  assert.equal(holder.signal, "SIGKILL", String(holder.stderr));
  new Spool(d).close();
});

test("segments roll and acked ones are deleted", async () => {
  const d = tmp();
  let s = new Spool(d, { segmentBytes: 1024 });
  for (let n = 0; n < 40; n++) await s.append(msg(n));
  const before = segments(d);
  assert.ok(before.length >= 8, String(before));
  s.ack(30);
  const live = segments(d);
  assert.ok(live.length <= 4 && (live[0] as string) > (before[0] as string), `${before} → ${live}`);
  s.ack(10);
  await s.append(msg(99));
  assert.deepEqual(ids(s, 5), ["e99"]);
  s.close();
  s = new Spool(d);
  assert.equal(s.queued, 1);
  s.close();
});

test("the fail policy rejects at once when full", async () => {
  const s = new Spool(tmp(), { maxBytes: 4096, segmentBytes: 1024, whenFull: "fail" });
  let appended = 0;
  await assert.rejects(async () => {
    for (let n = 0; n < 100; n++) {
      await s.append(msg(n));
      appended++;
    }
  }, SpoolFull);
  assert.ok(appended >= 10 && appended < 100 && s.queued === appended);
  assert.ok(s.usedBytes <= 4096);
  s.ack(appended);
  await s.append(msg(101)); // room again
  s.close();
});

test("the block policy waits for room, keeps call order, then rejects", async () => {
  const s = new Spool(tmp(), { maxBytes: 4096, segmentBytes: 1024, blockTimeoutMs: 300 });
  let n = 0;
  await assert.rejects(async () => {
    for (;;) {
      await s.append(msg(n));
      n++;
    }
  }, SpoolFull);
  const t0 = Date.now();
  setTimeout(() => s.ack(s.queued), 100);
  const first = s.append(msg(1000));
  const second = s.append(msg(1001));
  await Promise.all([first, second]);
  assert.ok(Date.now() - t0 < 300 + 200);
  assert.deepEqual(ids(s, 2), ["e1000", "e1001"]);
  s.close();
});

test("losing the ack file means resending, not losing", async () => {
  const d = tmp();
  let s = new Spool(d);
  for (let n = 0; n < 5; n++) await s.append(msg(n));
  s.ack(2);
  s.close();
  fs.unlinkSync(path.join(d, "ack"));
  s = new Spool(d);
  assert.deepEqual(ids(s).slice(-3), ["e2", "e3", "e4"]);
  s.close();
});

test("the format is as documented", async () => {
  const record = encodeRecord(msg(7, 3));
  const length = record.readUInt32BE(0);
  const payload = record.subarray(8);
  assert.equal(length, payload.length);
  assert.equal(record.readUInt32BE(4), zlib.crc32 ? zlib.crc32(payload, zlib.crc32(record.subarray(0, 4))) : record.readUInt32BE(4));
  const metaLength = payload.readUInt32BE(0);
  assert.deepEqual(JSON.parse(payload.subarray(4, 4 + metaLength).toString()), {
    subject: "atl.in.acme.tool.invocation.planned",
    headers: { "ce-id": "e7", "Nats-Msg-Id": "m7" },
    emitted_at_ms: 1_700_000_000_007,
  });
  assert.equal(payload.subarray(4 + metaLength).toString(), "xxx7");
  const d = tmp();
  const s = new Spool(d);
  await s.append(msg(7, 3));
  assert.deepEqual(fs.readFileSync(path.join(d, segments(d).at(-1) as string)), Buffer.concat([SEGMENT_MAGIC, record]));
  s.ack(1);
  const ack = fs.readFileSync(path.join(d, "ack"));
  assert.equal(ack.length, 28);
  assert.equal(ack.subarray(0, 8).toString(), "TLSPACK1");
  assert.equal(Number(ack.readBigUInt64BE(16)), 8 + record.length);
  s.close();
});
