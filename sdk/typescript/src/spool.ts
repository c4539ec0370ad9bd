/**
 * The durable spool: every event is on local disk before `emit` resolves, and leaves it only once
 * ATL_INBOUND has acked it. The format is shared with the Python and Rust SDKs and specified in
 * docs/sdk/spool.md (the Python SDK's `spool.py` is the reference); a spool written here is read by
 * the others and the other way round.
 *
 *     emit ─▶ Spool.append ─▶ record appended to the active segment (one write(2) to an O_APPEND
 *                             file, then fdatasync per policy) │ index: (segment, start, end,
 *                             emitted_at) of every unacked record
 *     sender ─▶ Spool.head(n) ─▶ records read back (pread, CRC checked) ─▶ publish ─▶ acks
 *            ─▶ Spool.ack(k) ─▶ `ack` file = (segment, offset) past the k-th record (tmp + rename)
 *                            ─▶ every segment wholly before the ack position is deleted (compaction)
 *     open  ─▶ lock ─▶ read `ack` ─▶ delete acked segments ─▶ scan the rest (a torn or corrupt tail is
 *              truncated: it was never reported durable) ─▶ rebuild the index ─▶ a fresh active segment
 *
 * Uploads (values too large for a NATS message, see `uploads.ts`; spool.md, "Uploads"): `append` first
 * writes each value's bytes to a sidecar file `uploads/<random hex>` and fdatasyncs it and the
 * directory, then appends the record, whose meta names the sidecars. The sender puts them into the
 * tenant's payload bucket before it publishes the record; they are deleted when the record is acked. A
 * sidecar no unacked record names (emit crashed before its record, or the spool crashed between an ack
 * and the deletion) is deleted at open. Sidecar bytes count toward `maxBytes`.
 *
 * The directory is 0700 and every file 0600: records hold events before ingest scrubs them, so raw
 * secrets.
 *
 * **The lock.** spool.md asks for `flock(LOCK_EX | LOCK_NB)` on `lock`, which Node cannot call. A
 * flock belongs to the open file description, not the process: this module opens `lock` itself and
 * hands that very descriptor to a short-lived `flock -xn 3` child (util-linux; `python3`'s `fcntl`
 * when `flock` is missing), which takes the lock on the shared description and exits. The lock then
 * stays held by this process's descriptor and is dropped by the kernel when it is closed — by
 * `close()` or by the process dying, kill -9 included — exactly the semantics of the other SDKs, and
 * the same lock, so a Python, Rust and TypeScript producer exclude one another.
 *
 * All file I/O is synchronous: JavaScript runs one thing at a time, so an append is one uninterrupted
 * write + fdatasync, like a logging call to a file; only waiting for room (the `block` policy) is
 * asynchronous.
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

/** First 8 bytes of every segment file. */
export const SEGMENT_MAGIC = Buffer.from("TLSPOOL1", "ascii");
/** First 8 bytes of the ack file. */
export const ACK_MAGIC = Buffer.from("TLSPACK1", "ascii");
/** A record's frame: u32be payload length, u32be CRC-32 of (length ‖ payload). */
export const FRAME_BYTES = 8;
/** The largest payload a record may claim; a bigger length is a corrupt frame, not a record. */
export const MAX_RECORD = 64 * 1024 * 1024;
/** `TLSPACK1 ‖ segment u64be ‖ offset u64be ‖ crc u32be`. */
export const ACK_BYTES = 28;

/** When `append` fdatasyncs: each record before it returns, or a timer at most `fsyncIntervalMs` later. */
export type FsyncPolicy = "every_event" | "interval";
/** What `append` does when the spool is full. */
export type FullPolicy = "block" | "fail";

/** The spool cannot be used (locked by another process, not a spool, unwritable, closed). */
export class SpoolError extends Error {
  override name = "SpoolError";
}

/** The spool holds `maxBytes` and the sender could not free room in time; the event was NOT stored.
 * Retry later, or raise `maxBytes`. */
export class SpoolFull extends SpoolError {
  override name = "SpoolFull";
}

/** The subdirectory holding upload sidecars. */
export const UPLOADS_DIR = "uploads";

/**
 * One value of an event that travels through the tenant's payload bucket: the object `name` in
 * `bucket`, with the `sha256`, `size` and `contentType` of the event's `{"$upload": …}` reference.
 * `file` is its sidecar, relative to the spool directory; the spool sets it in `append`.
 */
export interface Upload {
  bucket: string;
  name: string;
  /** 64 lowercase hex. */
  sha256: string;
  size: number;
  contentType: string;
  file: string;
}

/** What goes on the wire for one event, and the uploads that must be in the bucket first. */
export interface Message {
  subject: string;
  headers: Record<string, string>;
  body: Buffer;
  emittedAtMs: number;
  /** Absent or empty: a record without uploads. */
  uploads?: Upload[];
}

/** A record ready to append, with its sidecars' paths and bytes. */
interface Pending {
  record: Buffer;
  emittedAtMs: number;
  sidecars: [string, Buffer][];
  sidecarBytes: number;
}

interface Entry {
  segment: number;
  start: number;
  end: number;
  emittedAtMs: number;
  /** The sidecars of the record's uploads (relative paths) and their sizes. */
  sidecars?: [string, number][];
}

interface UploadMeta {
  file: string;
  bucket: string;
  name: string;
  sha256: string;
  size: number;
  content_type: string;
}

function uploadOf(meta: UploadMeta): Upload {
  return {
    bucket: String(meta.bucket),
    name: String(meta.name),
    sha256: String(meta.sha256),
    size: Math.trunc(Number(meta.size)),
    contentType: String(meta.content_type),
    file: String(meta.file),
  };
}

function sidecarsOf(meta: { uploads?: UploadMeta[] }): [string, number][] | undefined {
  if (!Array.isArray(meta.uploads) || meta.uploads.length === 0) return undefined;
  return meta.uploads.map((u) => [String(u.file), Math.trunc(Number(u.size))]);
}

/** A fresh sidecar path: random, so two records never share one (the same event emitted twice gets
 * two), and deleting one record's sidecars never touches another's. */
function newSidecarName(): string {
  return `${UPLOADS_DIR}/${randomBytes(16).toString("hex")}`;
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) {
      c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    }
    table[n] = c >>> 0;
  }
  return table;
})();

const nativeCrc = (zlib as unknown as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;

/** CRC-32 (IEEE 802.3, as zlib.crc32) of `data`, continuing from `crc`. */
export function crc32(data: Uint8Array, crc = 0): number {
  if (nativeCrc) {
    return nativeCrc(data, crc) >>> 0;
  }
  let c = (crc ^ 0xffffffff) >>> 0;
  for (const byte of data) {
    c = (CRC_TABLE[(c ^ byte) & 0xff] ?? 0) ^ (c >>> 8);
  }
  return (c ^ 0xffffffff) >>> 0;
}

/** A record's bytes: frame, then `u32 meta length ‖ meta JSON ‖ body` (spool.md, "Segment"). */
export function encodeRecord(message: Message): Buffer {
  const metaObject: Record<string, unknown> = {
    subject: message.subject,
    headers: message.headers,
    emitted_at_ms: message.emittedAtMs,
  };
  if (message.uploads !== undefined && message.uploads.length > 0) {
    metaObject.uploads = message.uploads.map((u) => ({
      file: u.file,
      bucket: u.bucket,
      name: u.name,
      sha256: u.sha256,
      size: u.size,
      content_type: u.contentType,
    }));
  }
  const meta = Buffer.from(JSON.stringify(metaObject), "utf8");
  const payload = Buffer.alloc(4 + meta.length + message.body.length);
  payload.writeUInt32BE(meta.length, 0);
  meta.copy(payload, 4);
  message.body.copy(payload, 4 + meta.length);
  const frame = Buffer.alloc(FRAME_BYTES);
  frame.writeUInt32BE(payload.length, 0);
  frame.writeUInt32BE(crc32(payload, crc32(frame.subarray(0, 4))), 4);
  return Buffer.concat([frame, payload]);
}

/** The message of a record's payload (after the frame). */
export function decodePayload(payload: Buffer): Message {
  const metaLength = payload.readUInt32BE(0);
  const meta = JSON.parse(payload.subarray(4, 4 + metaLength).toString("utf8")) as {
    subject: string;
    headers: Record<string, string>;
    emitted_at_ms: number;
    uploads?: UploadMeta[];
  };
  const message: Message = {
    subject: meta.subject,
    headers: meta.headers,
    body: Buffer.from(payload.subarray(4 + metaLength)),
    emittedAtMs: Math.trunc(Number(meta.emitted_at_ms)),
  };
  if (Array.isArray(meta.uploads) && meta.uploads.length > 0) {
    message.uploads = meta.uploads.map(uploadOf);
  }
  return message;
}

function checkFrame(frame: Buffer, payload: Buffer): boolean {
  return frame.readUInt32BE(0) === payload.length && crc32(payload, crc32(frame.subarray(0, 4))) === frame.readUInt32BE(4);
}

function segmentName(number: number): string {
  return `${String(number).padStart(20, "0")}.seg`;
}

/** Options of a spool (docs/sdk/spool.md). */
export interface SpoolOptions {
  /** The bound on the segment files' total size (default 256 MiB). */
  maxBytes?: number;
  /** A segment rolls when the next record would take it past this (default 8 MiB). */
  segmentBytes?: number;
  /** Default `every_event`. */
  fsync?: FsyncPolicy;
  /** Under `interval`, the longest a written record waits for its fdatasync (default 100). */
  fsyncIntervalMs?: number;
  /** Default `block`. */
  whenFull?: FullPolicy;
  /** Under `block`, how long `append` waits for room before `SpoolFull` (default 30,000). */
  blockTimeoutMs?: number;
}

const { O_RDWR, O_CREAT, O_WRONLY, O_EXCL, O_APPEND, O_RDONLY, O_TRUNC, O_DIRECTORY } = fs.constants;

/**
 * Takes `flock(LOCK_EX | LOCK_NB)` on the open file description behind `fd` (see the module doc):
 * a child process does it on an inherited copy of `fd`. True when taken, false when another holds it.
 */
function flockExclusive(fd: number): boolean {
  const stdio: ["ignore", "ignore", "pipe", number] = ["ignore", "ignore", "pipe", fd];
  const viaFlock = spawnSync("flock", ["--exclusive", "--nonblock", "--conflict-exit-code", "75", "3"], { stdio });
  if (!viaFlock.error) {
    if (viaFlock.status === 0) return true;
    if (viaFlock.status === 75) return false;
    throw new SpoolError(`flock failed (${viaFlock.status}): ${String(viaFlock.stderr).trim()}`);
  }
  const script =
    "import fcntl,sys\ntry:\n fcntl.flock(3, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n sys.exit(75)";
  const viaPython = spawnSync("python3", ["-c", script], { stdio });
  if (!viaPython.error) {
    if (viaPython.status === 0) return true;
    if (viaPython.status === 75) return false;
    throw new SpoolError(`locking with python3 failed (${viaPython.status}): ${String(viaPython.stderr).trim()}`);
  }
  throw new SpoolError("neither `flock` (util-linux) nor `python3` is on PATH: the spool cannot be locked");
}

interface Waiter {
  resolve(): void;
}

/** An append-only, checksummed, segmented spool in one directory. */
export class Spool {
  readonly directory: string;
  readonly maxBytes: number;
  readonly segmentBytes: number;
  readonly fsync: FsyncPolicy;
  readonly fsyncIntervalMs: number;
  readonly whenFull: FullPolicy;
  readonly blockTimeoutMs: number;
  /** Segments found corrupt at open and set aside as `<name>.corrupt` (never deleted). */
  readonly corruptSegments: string[] = [];
  /** Records recovered at open (not yet acked by an earlier run). */
  readonly recovered: number;

  #index: Entry[] = [];
  #head = 0; // index of the first unacked entry in #index (compacted lazily)
  #sizes = new Map<number, number>();
  /** The highest segment number found at open (0: none). */
  #seen = 0;
  /** Bytes of the sidecars of unacked records. */
  #sidecarBytes = 0;
  #readers = new Map<number, number>();
  #ack: [number, number];
  #active: number;
  #fd: number;
  #lockFd: number;
  #dirty = false;
  #closed = false;
  #syncer: NodeJS.Timeout | undefined;
  #spaceWaiters: Waiter[] = [];
  #drainWaiters: Waiter[] = [];
  #blocked: Promise<void> = Promise.resolve();

  constructor(directory: string, options: SpoolOptions = {}) {
    this.maxBytes = options.maxBytes ?? 256 * 1024 * 1024;
    this.segmentBytes = options.segmentBytes ?? 8 * 1024 * 1024;
    this.fsync = options.fsync ?? "every_event";
    this.fsyncIntervalMs = options.fsyncIntervalMs ?? 100;
    this.whenFull = options.whenFull ?? "block";
    this.blockTimeoutMs = options.blockTimeoutMs ?? 30_000;
    if (this.fsync !== "every_event" && this.fsync !== "interval") {
      throw new RangeError("fsync must be every_event or interval");
    }
    if (this.whenFull !== "block" && this.whenFull !== "fail") {
      throw new RangeError("whenFull must be block or fail");
    }
    if (this.maxBytes < 2 * SEGMENT_MAGIC.length || this.segmentBytes <= SEGMENT_MAGIC.length) {
      throw new RangeError("maxBytes and segmentBytes are too small");
    }
    this.directory = path.resolve(directory);
    fs.mkdirSync(this.directory, { recursive: true, mode: 0o700 });
    fs.chmodSync(this.directory, 0o700);
    this.#lockFd = fs.openSync(this.#path("lock"), O_RDWR | O_CREAT, 0o600);
    try {
      fs.fchmodSync(this.#lockFd, 0o600);
      if (!flockExclusive(this.#lockFd)) {
        throw new SpoolError(`spool ${this.directory} is in use by another process`);
      }
    } catch (e) {
      fs.closeSync(this.#lockFd);
      throw e;
    }
    try {
      this.#ack = this.#readAck();
      this.#recover();
      this.#removeOrphanSidecars();
      this.recovered = this.#index.length;
      // Above every segment found at open, set-aside ones included: numbers are never reused.
      this.#active = Math.max(this.#ack[0], this.#seen) + 1;
      this.#fd = this.#createSegment(this.#active);
    } catch (e) {
      fs.closeSync(this.#lockFd);
      throw e;
    }
    if (this.fsync === "interval") {
      this.#syncer = setInterval(() => this.#syncDirty(), this.fsyncIntervalMs);
      this.#syncer.unref();
    }
  }

  // ── opening ────────────────────────────────────────────────────────────────────────────────────

  #path(name: string): string {
    return path.join(this.directory, name);
  }

  #readAck(): [number, number] {
    let raw: Buffer;
    try {
      raw = fs.readFileSync(this.#path("ack"));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return [0, 0];
      throw e;
    }
    if (
      raw.length === ACK_BYTES &&
      raw.subarray(0, 8).equals(ACK_MAGIC) &&
      crc32(raw.subarray(0, 24)) === raw.readUInt32BE(24)
    ) {
      return [Number(raw.readBigUInt64BE(8)), Number(raw.readBigUInt64BE(16))];
    }
    // Losing the ack position only resends acked events, which the ledger drops as duplicates.
    process.emitWarning(`spool ${this.directory}: ack file unreadable; unacked state rebuilt from the segments`);
    return [0, 0];
  }

  #recover(): void {
    const [ackSegment, ackOffset] = this.#ack;
    const numbers = fs
      .readdirSync(this.directory)
      .filter((name) => /^\d+\.seg$/.test(name))
      .map((name) => Number(name.slice(0, -4)))
      .sort((a, b) => a - b);
    this.#seen = numbers.length > 0 ? numbers[numbers.length - 1]! : 0;
    for (const number of numbers) {
      const file = this.#path(segmentName(number));
      if (number < ackSegment) {
        fs.unlinkSync(file); // wholly acked; its deletion was interrupted
        continue;
      }
      fs.chmodSync(file, 0o600);
      const data = fs.readFileSync(file);
      if (data.length < SEGMENT_MAGIC.length || !data.subarray(0, SEGMENT_MAGIC.length).equals(SEGMENT_MAGIC)) {
        if (data.length < SEGMENT_MAGIC.length && SEGMENT_MAGIC.subarray(0, data.length).equals(data)) {
          fs.unlinkSync(file); // created, header torn: held nothing
          continue;
        }
        fs.renameSync(file, `${file}.corrupt`);
        this.corruptSegments.push(`${file}.corrupt`);
        process.emitWarning(`spool ${this.directory}: ${segmentName(number)} is not a spool segment; set aside as .corrupt`);
        continue;
      }
      let offset = SEGMENT_MAGIC.length;
      while (offset < data.length) {
        const whole = offset + FRAME_BYTES <= data.length;
        const length = whole ? data.readUInt32BE(offset) : 0;
        const end = offset + FRAME_BYTES + length;
        if (
          !whole ||
          length < 4 ||
          length > MAX_RECORD ||
          end > data.length ||
          !checkFrame(data.subarray(offset, offset + FRAME_BYTES), data.subarray(offset + FRAME_BYTES, end))
        ) {
          // A torn or garbled tail: written but never made durable, so never reported emitted under
          // `every_event` (interval: within the stated window).
          process.emitWarning(`spool ${this.directory}: segment ${number} truncated at byte ${offset} (torn tail)`);
          const fd = fs.openSync(file, O_RDWR);
          try {
            fs.ftruncateSync(fd, offset);
            fs.fsyncSync(fd);
          } finally {
            fs.closeSync(fd);
          }
          break;
        }
        if (!(number === ackSegment && end <= ackOffset)) {
          const metaLength = data.readUInt32BE(offset + FRAME_BYTES);
          const metaStart = offset + FRAME_BYTES + 4;
          let emitted = 0;
          let sidecars: [string, number][] | undefined;
          try {
            const meta = JSON.parse(data.subarray(metaStart, metaStart + metaLength).toString("utf8")) as {
              emitted_at_ms?: number;
              uploads?: UploadMeta[];
            };
            emitted = Math.trunc(Number(meta.emitted_at_ms ?? 0));
            sidecars = sidecarsOf(meta);
          } catch {
            emitted = 0; // the CRC held, so the writer wrote it so; the sender still sends it
          }
          const entry: Entry = { segment: number, start: offset, end, emittedAtMs: emitted };
          if (sidecars !== undefined) entry.sidecars = sidecars;
          this.#index.push(entry);
        }
        offset = end;
      }
      this.#sizes.set(number, offset);
    }
  }

  /** Deletes every sidecar no unacked record names: emit crashed after writing it and before its
   * record (the event was never reported emitted), or a crash fell between an ack and the deletion. */
  #removeOrphanSidecars(): void {
    const live = new Map<string, number>();
    for (const entry of this.#index) {
      for (const [file, size] of entry.sidecars ?? []) live.set(file, size);
    }
    const uploads = this.#path(UPLOADS_DIR);
    let names: string[] = [];
    try {
      names = fs.readdirSync(uploads);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    for (const name of names) {
      if (!live.has(`${UPLOADS_DIR}/${name}`)) {
        fs.unlinkSync(path.join(uploads, name));
      }
    }
    let sum = 0;
    for (const [file, size] of live) {
      if (!fs.existsSync(this.#path(file))) {
        // Never by an SDK: a sidecar is durable before its record is written. The sender keeps
        // retrying the record (its object may already be in the bucket) and reports the error.
        process.emitWarning(`spool ${this.directory}: upload sidecar ${file} of an unacked record is missing`);
      }
      sum += size;
    }
    this.#sidecarBytes = sum;
  }

  #createSegment(number: number): number {
    const fd = fs.openSync(this.#path(segmentName(number)), O_WRONLY | O_CREAT | O_EXCL | O_APPEND, 0o600);
    fs.writeSync(fd, SEGMENT_MAGIC);
    fs.fdatasyncSync(fd);
    this.#syncDir();
    this.#sizes.set(number, SEGMENT_MAGIC.length);
    return fd;
  }

  #syncDir(): void {
    const fd = fs.openSync(this.directory, O_RDONLY | O_DIRECTORY);
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  }

  // ── writing ────────────────────────────────────────────────────────────────────────────────────

  /** Bytes of segment files and upload sidecars on disk. */
  get usedBytes(): number {
    let sum = this.#sidecarBytes;
    for (const size of this.#sizes.values()) sum += size;
    return sum;
  }

  /**
   * Appends one record; resolves once it is written and, under `every_event`, fdatasync'ed. Rejects
   * with `SpoolFull` by the full policy. Appends are stored in call order, also while one waits for
   * room. `contents` are the bytes of `message.uploads`, in order: each goes to a sidecar that is
   * fdatasync'ed (under both policies), and the directory fsync'ed, before the record is written.
   */
  append(message: Message, contents: readonly Buffer[] = []): Promise<void> {
    const uploads = message.uploads ?? [];
    if (contents.length !== uploads.length) {
      return Promise.reject(new RangeError("one content per upload"));
    }
    let sidecarBytes = 0;
    for (const content of contents) sidecarBytes += content.length;
    if (contents.length > 0) {
      message = { ...message, uploads: uploads.map((u) => ({ ...u, file: newSidecarName() })) };
    }
    const pending: Pending = {
      record: encodeRecord(message),
      emittedAtMs: message.emittedAtMs,
      sidecars: (message.uploads ?? []).map((u, i) => [u.file, contents[i] as Buffer]),
      sidecarBytes,
    };
    const record = pending.record;
    const needed = record.length + sidecarBytes;
    if (record.length + SEGMENT_MAGIC.length > MAX_RECORD || needed + SEGMENT_MAGIC.length > this.maxBytes) {
      return Promise.reject(
        new SpoolFull(`an event of ${needed} bytes can never fit a spool of ${this.maxBytes} bytes`),
      );
    }
    // Fast path: nobody waiting for room, and room now. The write happens before this returns.
    if (this.#spaceWaiters.length === 0 && this.#blockedCount === 0) {
      try {
        if (this.#tryAppend(pending)) {
          return Promise.resolve();
        }
      } catch (e) {
        return Promise.reject(e);
      }
      if (this.whenFull === "fail") {
        return Promise.reject(new SpoolFull(`spool ${this.directory} holds ${this.usedBytes} of ${this.maxBytes} bytes`));
      }
    } else if (this.whenFull === "fail") {
      return Promise.reject(new SpoolFull(`spool ${this.directory} holds ${this.usedBytes} of ${this.maxBytes} bytes`));
    }
    // Blocked: queue behind earlier blocked appends, so the spool keeps call order.
    this.#blockedCount++;
    const turn = this.#blocked.then(() => this.#appendBlocking(pending));
    this.#blocked = turn.catch(() => undefined);
    return turn.finally(() => {
      this.#blockedCount--;
    });
  }

  #blockedCount = 0;

  async #appendBlocking(pending: Pending): Promise<void> {
    const deadline = Date.now() + this.blockTimeoutMs;
    for (;;) {
      if (this.#tryAppend(pending)) {
        return;
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new SpoolFull(
          `spool ${this.directory} stayed full (${this.usedBytes} of ${this.maxBytes} bytes) for ` +
            `${this.blockTimeoutMs} ms: is NATS reachable?`,
        );
      }
      await new Promise<void>((resolve) => {
        const waiter: Waiter = {
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        };
        const timer = setTimeout(() => {
          this.#spaceWaiters = this.#spaceWaiters.filter((w) => w !== waiter);
          resolve();
        }, left);
        this.#spaceWaiters.push(waiter);
      });
    }
  }

  /** Appends when there is room (rolling a fully acked active segment to make some); false when full. */
  #tryAppend(pending: Pending): boolean {
    const { record, emittedAtMs } = pending;
    if (this.#closed) {
      throw new SpoolError("spool is closed");
    }
    while (this.usedBytes + record.length + pending.sidecarBytes > this.maxBytes) {
      if (this.#activeFullyAcked() && this.#size(this.#active) > SEGMENT_MAGIC.length) {
        this.#roll();
        continue;
      }
      return false;
    }
    if (
      this.#size(this.#active) + record.length > this.segmentBytes &&
      this.#size(this.#active) > SEGMENT_MAGIC.length
    ) {
      this.#roll();
    }
    let sidecars: [string, number][] | undefined;
    if (pending.sidecars.length > 0) {
      this.#writeSidecars(pending.sidecars);
      sidecars = pending.sidecars.map(([file, content]) => [file, content.length]);
    }
    const start = this.#size(this.#active);
    let written = 0;
    while (written < record.length) {
      written += fs.writeSync(this.#fd, record, written, record.length - written);
    }
    this.#sizes.set(this.#active, start + record.length);
    this.#sidecarBytes += pending.sidecarBytes;
    const entry: Entry = { segment: this.#active, start, end: start + record.length, emittedAtMs };
    if (sidecars !== undefined) entry.sidecars = sidecars;
    this.#index.push(entry);
    if (this.fsync === "every_event") {
      fs.fdatasyncSync(this.#fd);
    } else {
      this.#dirty = true;
    }
    return true;
  }

  /** Writes each upload's bytes to its sidecar and makes files and names durable before the record
   * that names them exists: a record on disk never names a sidecar a crash could lose. On a failure
   * the sidecars written so far are removed (the record is not written; the event was not emitted). */
  #writeSidecars(sidecars: [string, Buffer][]): void {
    const uploads = this.#path(UPLOADS_DIR);
    if (!fs.existsSync(uploads)) {
      fs.mkdirSync(uploads, { recursive: true, mode: 0o700 });
      fs.chmodSync(uploads, 0o700);
      this.#syncDir();
    }
    const done: string[] = [];
    try {
      for (const [file, content] of sidecars) {
        const fd = fs.openSync(this.#path(file), O_WRONLY | O_CREAT | O_EXCL, 0o600);
        done.push(file);
        try {
          let written = 0;
          while (written < content.length) {
            written += fs.writeSync(fd, content, written, content.length - written);
          }
          fs.fdatasyncSync(fd);
        } finally {
          fs.closeSync(fd);
        }
      }
      const fd = fs.openSync(uploads, O_RDONLY | O_DIRECTORY);
      try {
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
    } catch (e) {
      for (const file of done) {
        try {
          fs.unlinkSync(this.#path(file));
        } catch {
          // the next open removes it as an orphan
        }
      }
      throw e;
    }
  }

  /** Whether `upload`'s sidecar is on disk. */
  hasUpload(upload: Upload): boolean {
    return fs.existsSync(this.#path(upload.file));
  }

  /** The bytes of `upload`'s sidecar, checked against its size and SHA-256. */
  async readUpload(upload: Upload): Promise<Buffer> {
    let content: Buffer;
    try {
      content = await fs.promises.readFile(this.#path(upload.file));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") {
        throw new SpoolError(`spool ${this.directory}: upload sidecar ${upload.file} of ${upload.name} is missing`);
      }
      throw e;
    }
    if (content.length !== upload.size || createHash("sha256").update(content).digest("hex") !== upload.sha256) {
      throw new SpoolError(`spool ${this.directory}: upload sidecar ${upload.file} of ${upload.name} is corrupt`);
    }
    return content;
  }

  #size(segment: number): number {
    return this.#sizes.get(segment) ?? 0;
  }

  #activeFullyAcked(): boolean {
    return this.queued === 0 || this.#index[this.#index.length - 1]?.segment !== this.#active;
  }

  /** Seals the active segment (synced) and starts the next; deletes the old one if wholly acked. */
  #roll(): void {
    fs.fdatasyncSync(this.#fd);
    fs.closeSync(this.#fd);
    const old = this.#active;
    this.#active += 1;
    this.#fd = this.#createSegment(this.#active);
    this.#dirty = false;
    this.#compact();
    const first = this.#index[this.#head];
    if (this.#sizes.has(old) && this.#activeFullyAcked() && (first === undefined || first.segment > old)) {
      this.#delete(old);
    }
  }

  #syncDirty(): void {
    if (!this.#closed && this.#dirty) {
      fs.fdatasyncSync(this.#fd);
      this.#dirty = false;
    }
  }

  // ── the sender's side ──────────────────────────────────────────────────────────────────────────

  /** The first `limit` unacked records, oldest first. */
  head(limit: number): Message[] {
    const out: Message[] = [];
    const stop = Math.min(this.#index.length, this.#head + limit);
    for (let i = this.#head; i < stop; i++) {
      const entry = this.#index[i] as Entry;
      let fd = this.#readers.get(entry.segment);
      if (fd === undefined) {
        fd = fs.openSync(this.#path(segmentName(entry.segment)), O_RDONLY);
        this.#readers.set(entry.segment, fd);
      }
      const raw = Buffer.alloc(entry.end - entry.start);
      let got = 0;
      while (got < raw.length) {
        const n = fs.readSync(fd, raw, got, raw.length - got, entry.start + got);
        if (n === 0) break;
        got += n;
      }
      const frame = raw.subarray(0, FRAME_BYTES);
      const payload = raw.subarray(FRAME_BYTES);
      if (got !== raw.length || !checkFrame(frame, payload)) {
        throw new SpoolError(`spool ${this.directory}: record at ${entry.segment}:${entry.start} fails its checksum`);
      }
      out.push(decodePayload(payload));
    }
    return out;
  }

  /** Marks the first `count` unacked records as acked: writes the ack position and deletes every
   * segment wholly before it. */
  ack(count: number): void {
    if (count <= 0 || this.#closed) {
      return;
    }
    if (count > this.queued) {
      throw new RangeError(`ack of ${count} records, ${this.queued} queued`);
    }
    const acked: [string, number][] = [];
    for (let i = this.#head; i < this.#head + count; i++) {
      for (const sidecar of (this.#index[i] as Entry).sidecars ?? []) acked.push(sidecar);
    }
    this.#head += count;
    const last = this.#index[this.#head - 1] as Entry;
    if (this.#head > 1024 && this.#head * 2 > this.#index.length) {
      this.#index = this.#index.slice(this.#head);
      this.#head = 0;
    }
    this.#ack = [last.segment, last.end];
    const raw = Buffer.alloc(ACK_BYTES);
    ACK_MAGIC.copy(raw, 0);
    raw.writeBigUInt64BE(BigInt(last.segment), 8);
    raw.writeBigUInt64BE(BigInt(last.end), 16);
    raw.writeUInt32BE(crc32(raw.subarray(0, 24)), 24);
    const tmp = this.#path("ack.tmp");
    const fd = fs.openSync(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0o600);
    try {
      fs.writeSync(fd, raw);
    } finally {
      fs.closeSync(fd);
    }
    // Not fsynced: an ack position lost in a crash only resends events the ledger has (duplicates,
    // dropped by ingest); the records themselves are what must not be lost.
    fs.renameSync(tmp, this.#path("ack"));
    // After the ack position: a crash in between leaves sidecars no unacked record names, which the
    // next open deletes.
    for (const [file, size] of acked) {
      try {
        fs.unlinkSync(this.#path(file));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      this.#sidecarBytes -= size;
    }
    if (acked.length > 0) this.#wakeSpace();
    this.#compact();
    if (this.queued === 0) {
      this.#wakeDrained();
    }
  }

  #compact(): void {
    const firstLive = this.#index[this.#head]?.segment ?? this.#active;
    for (const number of [...this.#sizes.keys()]) {
      if (number < firstLive && number !== this.#active) {
        this.#delete(number);
      }
    }
  }

  #delete(number: number): void {
    const fd = this.#readers.get(number);
    if (fd !== undefined) {
      fs.closeSync(fd);
      this.#readers.delete(number);
    }
    try {
      fs.unlinkSync(this.#path(segmentName(number)));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    this.#sizes.delete(number);
    this.#wakeSpace();
  }

  #wakeSpace(): void {
    const waiters = this.#spaceWaiters;
    this.#spaceWaiters = [];
    for (const waiter of waiters) waiter.resolve();
  }

  #wakeDrained(): void {
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const waiter of waiters) waiter.resolve();
  }

  /** Resolves true once every record is acked, false if `timeoutMs` passed first (or it closed). */
  waitDrained(timeoutMs?: number): Promise<boolean> {
    if (this.queued === 0) return Promise.resolve(true);
    if (this.#closed) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter: Waiter = {
        resolve: () => {
          if (timer) clearTimeout(timer);
          resolve(this.queued === 0);
        },
      };
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.#drainWaiters = this.#drainWaiters.filter((w) => w !== waiter);
          resolve(this.queued === 0);
        }, Math.max(0, timeoutMs));
      }
      this.#drainWaiters.push(waiter);
    });
  }

  // ── metrics and shutdown ───────────────────────────────────────────────────────────────────────

  /** Records not yet acked. */
  get queued(): number {
    return this.#index.length - this.#head;
  }

  /** When the oldest unacked record was emitted (Unix ms), or undefined. */
  oldestEmittedAtMs(): number | undefined {
    return this.#index[this.#head]?.emittedAtMs;
  }

  /** Whether `close()` ran. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Syncs and closes; unacked records stay for the next open. Releases the lock. */
  close(): void {
    if (this.#closed) {
      return;
    }
    this.#closed = true;
    if (this.#syncer) clearInterval(this.#syncer);
    fs.fdatasyncSync(this.#fd);
    fs.closeSync(this.#fd);
    if (this.#activeFullyAcked()) {
      this.#delete(this.#active); // nothing unacked in it
    }
    for (const fd of this.#readers.values()) fs.closeSync(fd);
    this.#readers.clear();
    try {
      const fd = fs.openSync(this.#path("ack"), O_RDONLY);
      fs.fsyncSync(fd);
      fs.closeSync(fd);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    const waiters = this.#spaceWaiters;
    this.#spaceWaiters = [];
    for (const waiter of waiters) waiter.resolve();
    this.#wakeDrained();
    fs.closeSync(this.#lockFd);
  }
}
