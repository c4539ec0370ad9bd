"""The durable spool: every event is on local disk before `emit` returns, and leaves it only once
ATL_INBOUND has acked it. The format is shared by the Python, TypeScript and Rust SDKs and is specified
in docs/sdk/spool.md; this module is its reference implementation.

    emit ─▶ Spool.append ─▶ record appended to the active segment (write, then fdatasync per policy)
                                 │ index: (segment, start, end, emitted_at) of every unacked record
    sender ─▶ Spool.head(n) ─▶ records read back (pread, CRC checked) ─▶ publish ─▶ acks
           ─▶ Spool.ack(k) ─▶ `ack` file = (segment, offset) past the k-th record (tmp + rename)
                           ─▶ every segment wholly before the ack position is deleted (compaction)
    open  ─▶ lock ─▶ read `ack` ─▶ delete acked segments ─▶ scan the rest (a torn or corrupt tail is
             truncated: it was never reported durable) ─▶ rebuild the index ─▶ a fresh active segment

Uploads (values too large for a NATS message, see `uploads.py`): `append` first writes each value's
bytes to a sidecar file `uploads/<random hex>` and fdatasyncs it and the directory, then appends the
record, whose meta names the sidecars. The sender puts them into the tenant's payload bucket before it
publishes the record; they are deleted when the record is acked. A sidecar no unacked record names
(emit crashed before its record, or the spool crashed between an ack and the deletion) is deleted at
open. Sidecar bytes count toward `max_bytes`.

The directory is 0700 and every file 0600: records hold events before ingest scrubs them, so raw
secrets. An `fcntl` lock keeps a second process off a spool in use (the kernel drops it on kill -9).

Full disk (`max_bytes`, the segment files' total size): `when_full="block"` makes `append` wait for the
sender to free space, up to `block_timeout` seconds, then raise `SpoolFull`; `when_full="fail"` raises
`SpoolFull` at once. An event is never dropped silently.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import hashlib
import json
import logging
import os
import secrets
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Deque, Dict, List, Mapping, Optional, Sequence, Tuple

log = logging.getLogger("toolledger_producer.spool")

#: First 8 bytes of every segment file.
SEGMENT_MAGIC = b"TLSPOOL1"
#: First 8 bytes of the ack file.
ACK_MAGIC = b"TLSPACK1"
#: A record's frame: payload length, CRC-32 of (length ‖ payload).
FRAME = struct.Struct(">II")
#: The largest payload a record may claim; a bigger length is a corrupt frame, not a record.
MAX_RECORD = 64 * 1024 * 1024
ACK = struct.Struct(">8sQQI")

#: The subdirectory holding upload sidecars.
UPLOADS_DIR = "uploads"

FSYNC_POLICIES = ("every_event", "interval")
FULL_POLICIES = ("block", "fail")


class SpoolError(Exception):
    """The spool cannot be used (locked by another process, not a spool, unwritable)."""


class SpoolFull(SpoolError):
    """The spool holds `max_bytes` and the sender could not free room in time; the event was NOT
    stored. Retry later, or raise `max_bytes`."""


@dataclass(frozen=True)
class Upload:
    """One value of an event that travels through the tenant's payload bucket: the object `name` in
    `bucket`, with the `sha256`, `size` and `content_type` of the event's `{"$upload": …}` reference.
    `file` is its sidecar, relative to the spool directory; the spool sets it in `append`."""

    bucket: str
    name: str
    sha256: str
    size: int
    content_type: str
    file: str = ""

    def as_meta(self) -> Dict[str, object]:
        return {"file": self.file, "bucket": self.bucket, "name": self.name, "sha256": self.sha256,
                "size": self.size, "content_type": self.content_type}


@dataclass(frozen=True)
class Message:
    """What goes on the wire for one event, and the uploads that must be in the bucket first."""

    subject: str
    headers: Mapping[str, str]
    body: bytes
    emitted_at_ms: int
    uploads: Tuple[Upload, ...] = ()


@dataclass(frozen=True)
class _Entry:
    segment: int
    start: int
    end: int
    emitted_at_ms: int
    #: The sidecars of the record's uploads (relative paths) and their sizes.
    sidecars: Tuple[Tuple[str, int], ...] = ()


def encode_record(message: Message) -> bytes:
    """A record's bytes: frame, then `u32 meta length ‖ meta JSON ‖ body`."""
    meta_obj: Dict[str, object] = {
        "subject": message.subject, "headers": dict(message.headers), "emitted_at_ms": message.emitted_at_ms,
    }
    if message.uploads:
        meta_obj["uploads"] = [u.as_meta() for u in message.uploads]
    meta = json.dumps(meta_obj, separators=(",", ":"), ensure_ascii=False).encode()
    payload = struct.pack(">I", len(meta)) + meta + message.body
    length = struct.pack(">I", len(payload))
    return length + struct.pack(">I", zlib.crc32(payload, zlib.crc32(length))) + payload


def decode_payload(payload: bytes) -> Message:
    """The message of a record's payload (after the frame)."""
    (meta_len,) = struct.unpack_from(">I", payload)
    meta = json.loads(payload[4 : 4 + meta_len])
    uploads = tuple(_upload_of(u) for u in meta.get("uploads", ()))
    return Message(meta["subject"], meta["headers"], payload[4 + meta_len :], int(meta["emitted_at_ms"]), uploads)


def _upload_of(meta: Mapping[str, object]) -> Upload:
    return Upload(str(meta["bucket"]), str(meta["name"]), str(meta["sha256"]), int(meta["size"]),  # type: ignore[arg-type]
                  str(meta["content_type"]), str(meta["file"]))


def _sidecars_of(meta: Mapping[str, object]) -> Tuple[Tuple[str, int], ...]:
    return tuple((str(u["file"]), int(u["size"])) for u in meta.get("uploads", ()))  # type: ignore[union-attr,index]


def _check_frame(frame: bytes, payload: bytes) -> bool:
    length, crc = FRAME.unpack(frame)
    return length == len(payload) and zlib.crc32(payload, zlib.crc32(frame[:4])) == crc


def _new_sidecar_name() -> str:
    """A fresh sidecar path: random, so two records never share one (the same event emitted twice
    gets two), and deleting one record's sidecars never touches another's."""
    return f"{UPLOADS_DIR}/{secrets.token_hex(16)}"


def _segment_name(number: int) -> str:
    return f"{number:020d}.seg"


class Spool:
    """An append-only, checksummed, segmented spool in one directory. Thread-safe: `append` from any
    thread, `head`/`ack` from the sender."""

    def __init__(
        self,
        directory: str,
        *,
        max_bytes: int = 256 * 1024 * 1024,
        segment_bytes: int = 8 * 1024 * 1024,
        fsync: str = "every_event",
        fsync_interval_ms: int = 100,
        when_full: str = "block",
        block_timeout: float = 30.0,
    ):
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}")
        if when_full not in FULL_POLICIES:
            raise ValueError(f"when_full must be one of {FULL_POLICIES}")
        if max_bytes < 2 * len(SEGMENT_MAGIC) or segment_bytes <= len(SEGMENT_MAGIC):
            raise ValueError("max_bytes and segment_bytes are too small")
        self.directory = os.path.abspath(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.fsync_interval = fsync_interval_ms / 1000.0
        self.when_full = when_full
        self.block_timeout = block_timeout
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._drained = threading.Condition(self._lock)
        self._index: Deque[_Entry] = collections.deque()
        self._sizes: Dict[int, int] = {}
        self._readers: Dict[int, int] = {}
        #: Bytes of the sidecars of unacked records.
        self._sidecar_bytes = 0
        self._dirty = False
        self._closed = False
        #: Segments found corrupt at open and set aside as `<name>.corrupt` (never deleted).
        self.corrupt_segments: List[str] = []
        #: Records recovered at open (not yet acked by an earlier run).
        self.recovered = 0

        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        self._lock_fd = os.open(os.path.join(self.directory, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._lock_fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise SpoolError(f"spool {self.directory} is in use by another process") from e
            raise
        self._ack = self._read_ack()
        self._recover()
        self._remove_orphan_sidecars()
        # Above every segment found at open, set-aside ones included: numbers are never reused.
        self._active = max(self._seen, self._ack[0]) + 1
        self._fd = self._create_segment(self._active)
        self._syncer: Optional[threading.Thread] = None
        if fsync == "interval":
            self._syncer = threading.Thread(target=self._sync_loop, name="toolledger-spool-sync", daemon=True)
            self._syncer.start()

    # ── opening ──────────────────────────────────────────────────────────────────────────────────

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _read_ack(self) -> Tuple[int, int]:
        try:
            with open(self._path("ack"), "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return (0, 0)
        if len(raw) == ACK.size:
            magic, segment, offset, crc = ACK.unpack(raw)
            if magic == ACK_MAGIC and zlib.crc32(raw[:-4]) == crc:
                return (segment, offset)
        # Losing the ack position only resends acked events, which the ledger drops as duplicates.
        log.warning("spool %s: ack file unreadable; unacked state rebuilt from the segments", self.directory)
        return (0, 0)

    def _recover(self) -> None:
        ack_segment, ack_offset = self._ack
        numbers = sorted(
            int(name[:-4]) for name in os.listdir(self.directory) if name.endswith(".seg") and name[:-4].isdigit()
        )
        self._seen = max(numbers, default=0)
        for number in numbers:
            path = self._path(_segment_name(number))
            if number < ack_segment:
                os.unlink(path)  # wholly acked; its deletion was interrupted
                continue
            os.chmod(path, 0o600)
            with open(path, "r+b") as f:
                data = f.read()
                if data[: len(SEGMENT_MAGIC)] != SEGMENT_MAGIC:
                    if len(data) < len(SEGMENT_MAGIC) and SEGMENT_MAGIC.startswith(data):
                        os.unlink(path)  # created, header torn: held nothing
                        continue
                    self._set_aside(path, "not a spool segment")
                    continue
                offset = len(SEGMENT_MAGIC)
                entries = []
                while offset < len(data):
                    frame = data[offset : offset + FRAME.size]
                    length = FRAME.unpack(frame)[0] if len(frame) == FRAME.size else 0
                    end = offset + FRAME.size + length
                    if len(frame) < FRAME.size or not 4 <= length <= MAX_RECORD or end > len(data) \
                            or not _check_frame(frame, data[offset + FRAME.size : end]):
                        # A torn or garbled tail: written but never made durable, so never reported
                        # emitted under `every_event` (interval: within the stated window).
                        log.warning("spool %s: segment %d truncated at byte %d (torn tail)", self.directory, number, offset)
                        f.truncate(offset)
                        os.fsync(f.fileno())
                        break
                    if not (number == ack_segment and end <= ack_offset):
                        payload = data[offset + FRAME.size : end]
                        (meta_len,) = struct.unpack_from(">I", payload)
                        meta = json.loads(payload[4 : 4 + meta_len])
                        entries.append(_Entry(number, offset, end, int(meta.get("emitted_at_ms", 0)),
                                              _sidecars_of(meta)))
                    offset = end
            self._sizes[number] = offset
            self._index.extend(entries)
        self.recovered = len(self._index)

    def _remove_orphan_sidecars(self) -> None:
        """Deletes every sidecar no unacked record names: emit crashed after writing it and before its
        record (the event was never reported emitted), or a crash fell between an ack and the deletion."""
        live = {file: size for entry in self._index for file, size in entry.sidecars}
        uploads = self._path(UPLOADS_DIR)
        try:
            names = os.listdir(uploads)
        except FileNotFoundError:
            names = []
        for name in names:
            rel = f"{UPLOADS_DIR}/{name}"
            if rel not in live:
                log.info("spool %s: orphaned upload sidecar %s removed", self.directory, rel)
                os.unlink(os.path.join(uploads, name))
        for rel in live:
            if not os.path.exists(self._path(rel)):
                # Never by this SDK: a sidecar is durable before its record is written. The sender
                # keeps retrying the record (it may already be in the bucket) and reports the error.
                log.error("spool %s: upload sidecar %s of an unacked record is missing", self.directory, rel)
        self._sidecar_bytes = sum(live.values())

    def _set_aside(self, path: str, reason: str) -> None:
        os.rename(path, path + ".corrupt")
        self.corrupt_segments.append(path + ".corrupt")
        log.error("spool %s: %s set aside as %s.corrupt (%s)", self.directory, os.path.basename(path), path, reason)

    def _create_segment(self, number: int) -> int:
        fd = os.open(
            self._path(_segment_name(number)),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC,
            0o600,
        )
        os.write(fd, SEGMENT_MAGIC)
        os.fdatasync(fd)
        self._sync_dir()
        self._sizes[number] = len(SEGMENT_MAGIC)
        return fd

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # ── writing ──────────────────────────────────────────────────────────────────────────────────

    @property
    def used_bytes(self) -> int:
        """Bytes of segment files and upload sidecars on disk."""
        return sum(self._sizes.values()) + self._sidecar_bytes

    def append(self, message: Message, contents: Sequence[bytes] = ()) -> None:
        """Appends one record; returns once it is written and, under `every_event`, fdatasync'ed.
        `contents` are the bytes of `message.uploads`, in order: each goes to a sidecar that is
        fdatasync'ed (under both policies) before the record is written. Raises `SpoolFull` by the
        full policy."""
        if len(contents) != len(message.uploads):
            raise ValueError("one content per upload")
        sidecar_bytes = sum(len(c) for c in contents)
        if contents:
            message = Message(message.subject, message.headers, message.body, message.emitted_at_ms,
                              tuple(Upload(u.bucket, u.name, u.sha256, u.size, u.content_type, _new_sidecar_name())
                                    for u in message.uploads))
        record = encode_record(message)
        needed = len(record) + sidecar_bytes
        if len(record) + len(SEGMENT_MAGIC) > MAX_RECORD or needed + len(SEGMENT_MAGIC) > self.max_bytes:
            raise SpoolFull(f"an event of {needed} bytes can never fit a spool of {self.max_bytes} bytes")
        with self._lock:
            if self._closed:
                raise SpoolError("spool is closed")
            deadline = None
            while self.used_bytes + needed > self.max_bytes:
                if self._active_fully_acked() and self._sizes[self._active] > len(SEGMENT_MAGIC):
                    self._roll()
                    continue
                if self.when_full == "fail":
                    raise SpoolFull(f"spool {self.directory} holds {self.used_bytes} of {self.max_bytes} bytes")
                now = time.monotonic()
                deadline = deadline or now + self.block_timeout
                if now >= deadline:
                    raise SpoolFull(
                        f"spool {self.directory} stayed full ({self.used_bytes} of {self.max_bytes} bytes) "
                        f"for {self.block_timeout} s: is NATS reachable?"
                    )
                self._space.wait(deadline - now)
                if self._closed:
                    raise SpoolError("spool is closed")
            if self._sizes[self._active] + len(record) > self.segment_bytes and \
                    self._sizes[self._active] > len(SEGMENT_MAGIC):
                self._roll()
            sidecars: Tuple[Tuple[str, int], ...] = ()
            if contents:
                sidecars = tuple(self._write_sidecar(u.file, c) for u, c in zip(message.uploads, contents))
            start = self._sizes[self._active]
            self._write_record(record)
            self._sizes[self._active] = start + len(record)
            self._sidecar_bytes += sidecar_bytes
            self._index.append(_Entry(self._active, start, start + len(record), message.emitted_at_ms, sidecars))
            if self.fsync == "every_event":
                os.fdatasync(self._fd)
            else:
                self._dirty = True

    def _write_record(self, record: bytes) -> None:
        view = memoryview(record)
        while view:
            view = view[os.write(self._fd, view):]

    def _write_sidecar(self, rel: str, content: bytes) -> Tuple[str, int]:
        """Writes an upload's bytes to `rel` and makes file and name durable before the record that
        names it exists: a record on disk never names a sidecar a crash could lose."""
        uploads = self._path(UPLOADS_DIR)
        if not os.path.isdir(uploads):
            os.makedirs(uploads, mode=0o700, exist_ok=True)
            os.chmod(uploads, 0o700)
            self._sync_dir()
        fd = os.open(self._path(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
        finally:
            os.close(fd)
        fd = os.open(uploads, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return (rel, len(content))

    def has_upload(self, upload: Upload) -> bool:
        """Whether `upload`'s sidecar is on disk."""
        return os.path.exists(self._path(upload.file))

    def read_upload(self, upload: Upload) -> bytes:
        """The bytes of `upload`'s sidecar, checked against its size and SHA-256."""
        try:
            with open(self._path(upload.file), "rb") as f:
                content = f.read()
        except FileNotFoundError as e:
            raise SpoolError(f"spool {self.directory}: upload sidecar {upload.file} of {upload.name} is missing") from e
        if len(content) != upload.size or hashlib.sha256(content).hexdigest() != upload.sha256:
            raise SpoolError(f"spool {self.directory}: upload sidecar {upload.file} of {upload.name} is corrupt")
        return content

    def _active_fully_acked(self) -> bool:
        return not self._index or self._index[-1].segment != self._active

    def _roll(self) -> None:
        """Seals the active segment (synced) and starts the next; deletes the old one if it is
        wholly acked."""
        os.fdatasync(self._fd)
        os.close(self._fd)
        old = self._active
        self._active += 1
        self._fd = self._create_segment(self._active)
        self._dirty = False
        self._compact()
        if old in self._sizes and self._active_fully_acked() and (not self._index or self._index[0].segment > old):
            self._delete(old)

    def _sync_loop(self) -> None:
        while True:
            time.sleep(self.fsync_interval)
            with self._lock:
                if self._closed:
                    return
                if self._dirty:
                    os.fdatasync(self._fd)
                    self._dirty = False

    # ── the sender's side ────────────────────────────────────────────────────────────────────────

    def head(self, limit: int) -> List[Message]:
        """The first `limit` unacked records, oldest first."""
        with self._lock:
            entries = [self._index[i] for i in range(min(limit, len(self._index)))]
        out = []
        for entry in entries:
            fd = self._readers.get(entry.segment)
            if fd is None:
                fd = os.open(self._path(_segment_name(entry.segment)), os.O_RDONLY | os.O_CLOEXEC)
                self._readers[entry.segment] = fd
            raw = os.pread(fd, entry.end - entry.start, entry.start)
            frame, payload = raw[: FRAME.size], raw[FRAME.size :]
            if not _check_frame(frame, payload):
                raise SpoolError(f"spool {self.directory}: record at {entry.segment}:{entry.start} fails its checksum")
            out.append(decode_payload(payload))
        return out

    def ack(self, count: int) -> None:
        """Marks the first `count` unacked records as acked: writes the ack position and deletes
        every segment wholly before it."""
        if count <= 0:
            return
        with self._lock:
            last = None
            acked_sidecars: List[Tuple[str, int]] = []
            for _ in range(count):
                last = self._index.popleft()
                acked_sidecars.extend(last.sidecars)
            assert last is not None
            self._ack = (last.segment, last.end)
            raw = ACK.pack(ACK_MAGIC, last.segment, last.end, 0)[:-4]
            raw += struct.pack(">I", zlib.crc32(raw))
            tmp = self._path("ack.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, raw)
            finally:
                os.close(fd)
            # Not fsynced: an ack position lost in a crash only resends events the ledger has
            # (duplicates, dropped by ingest); the records themselves are what must not be lost.
            os.replace(tmp, self._path("ack"))
            # After the ack position: a crash in between leaves sidecars no unacked record names,
            # which the next open deletes.
            for rel, size in acked_sidecars:
                try:
                    os.unlink(self._path(rel))
                except FileNotFoundError:
                    pass
                self._sidecar_bytes -= size
            if acked_sidecars:
                self._space.notify_all()
            self._compact()
            if not self._index:
                self._drained.notify_all()

    def _compact(self) -> None:
        first_live = self._index[0].segment if self._index else self._active
        for number in [n for n in self._sizes if n < first_live and n != self._active]:
            self._delete(number)

    def _delete(self, number: int) -> None:
        fd = self._readers.pop(number, None)
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(self._path(_segment_name(number)))
        except FileNotFoundError:
            pass
        self._sizes.pop(number, None)
        self._space.notify_all()

    def wait_drained(self, timeout: Optional[float]) -> bool:
        """Waits until every record is acked; False if `timeout` passed first."""
        with self._lock:
            return self._drained.wait_for(lambda: not self._index or self._closed, timeout)

    # ── metrics and shutdown ─────────────────────────────────────────────────────────────────────

    @property
    def queued(self) -> int:
        """Records not yet acked."""
        return len(self._index)

    def oldest_emitted_at_ms(self) -> Optional[int]:
        """When the oldest unacked record was emitted (Unix ms), or None."""
        with self._lock:
            return self._index[0].emitted_at_ms if self._index else None

    def close(self) -> None:
        """Syncs and closes; unacked records stay for the next open."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.fdatasync(self._fd)
            os.close(self._fd)
            if self._active_fully_acked():
                self._delete(self._active)  # nothing unacked in it
            for fd in self._readers.values():
                os.close(fd)
            self._readers.clear()
            try:
                fd = os.open(self._path("ack"), os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            except FileNotFoundError:
                pass
            self._space.notify_all()
            self._drained.notify_all()
            os.close(self._lock_fd)
