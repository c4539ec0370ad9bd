"""The spool on its own (no NATS): format, recovery, compaction, permissions, lock and full policies.

Each check names what it asserts; the script exits non-zero at the first that fails and prints one JSON
line {"checks": [names]} when all pass.
"""

import hashlib
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from toolledger_producer.spool import (FRAME, SEGMENT_MAGIC, Message, Spool, SpoolError, SpoolFull, Upload,
                                       encode_record)
from toolledger_producer.uploads import extract

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def msg(n: int, size: int = 100) -> Message:
    return Message(f"atl.in.acme.tool.invocation.planned", {"ce-id": f"e{n}", "Nats-Msg-Id": f"m{n}"},
                   (b"x" * size) + str(n).encode(), 1_700_000_000_000 + n)


def segments(d: str):
    return sorted(f for f in os.listdir(d) if f.endswith(".seg"))


@check
def records_round_trip_and_restart_resumes_after_the_ack(d):
    s = Spool(d)
    for n in range(10):
        s.append(msg(n))
    assert [m.headers["ce-id"] for m in s.head(3)] == ["e0", "e1", "e2"]
    s.ack(4)
    s.close()
    s = Spool(d)
    assert s.recovered == 6 and s.queued == 6, (s.recovered, s.queued)
    head = s.head(100)
    assert [m.headers["ce-id"] for m in head] == [f"e{n}" for n in range(4, 10)]
    assert head[0].body == msg(4).body and head[0].emitted_at_ms == msg(4).emitted_at_ms
    s.close()


@check
def a_torn_tail_is_truncated_and_what_came_before_is_kept(d):
    s = Spool(d)
    for n in range(3):
        s.append(msg(n))
    path = os.path.join(d, segments(d)[-1])
    s.close()
    whole = encode_record(msg(3))
    with open(path, "ab") as f:
        f.write(whole[: len(whole) // 2])  # a write cut short by a crash
    size = os.path.getsize(path)
    s = Spool(d)
    assert s.queued == 3 and os.path.getsize(path) == size - len(whole) // 2
    s.append(msg(4))
    assert [m.headers["ce-id"] for m in s.head(10)] == ["e0", "e1", "e2", "e4"]
    s.close()


@check
def a_record_with_a_bad_checksum_ends_the_segment_there(d):
    s = Spool(d)
    for n in range(3):
        s.append(msg(n))
    path = os.path.join(d, segments(d)[-1])
    s.close()
    with open(path, "r+b") as f:
        data = f.read()
        last = data.rfind(b"e2")  # inside the third record's meta
        f.seek(last)
        f.write(b"E")
    s = Spool(d)
    assert [m.headers["ce-id"] for m in s.head(10)] == ["e0", "e1"], "a garbled record was read"
    s.close()


@check
def zeros_at_the_tail_are_not_a_record(d):
    s = Spool(d)
    s.append(msg(0))
    path = os.path.join(d, segments(d)[-1])
    s.close()
    with open(path, "ab") as f:
        f.write(b"\0" * 64)
    s = Spool(d)
    assert s.queued == 1
    s.close()


@check
def files_are_0600_and_the_directory_0700(d):
    spool_dir = os.path.join(d, "spool")
    s = Spool(spool_dir)
    s.append(msg(0))
    s.ack(1)
    s.append(msg(1))
    assert stat.S_IMODE(os.stat(spool_dir).st_mode) == 0o700
    for name in os.listdir(spool_dir):
        mode = stat.S_IMODE(os.stat(os.path.join(spool_dir, name)).st_mode)
        assert mode == 0o600, (name, oct(mode))
    s.close()


@check
def a_second_process_cannot_open_a_spool_in_use(d):
    s = Spool(d)
    try:
        Spool(d)
    except SpoolError:
        pass
    else:
        raise AssertionError("two spools on one directory")
    s.close()
    Spool(d).close()


@check
def segments_roll_and_acked_ones_are_deleted(d):
    s = Spool(d, segment_bytes=1024)
    for n in range(40):
        s.append(msg(n))
    before = segments(d)
    assert len(before) >= 8, before
    s.ack(30)
    live = segments(d)
    # Only the segments holding the 10 unacked records (about 4 records a segment) remain.
    assert len(live) <= 4 and live[0] > before[0], (before, live)
    s.ack(10)
    s.append(msg(99))
    assert [m.headers["ce-id"] for m in s.head(5)] == ["e99"]
    s.close()
    s = Spool(d)
    assert s.queued == 1
    s.close()


@check
def fail_policy_raises_at_once_when_full(d):
    s = Spool(d, max_bytes=4096, segment_bytes=1024, when_full="fail")
    appended = 0
    try:
        for n in range(100):
            s.append(msg(n))
            appended += 1
    except SpoolFull:
        pass
    else:
        raise AssertionError("never full")
    assert 10 <= appended < 100 and s.queued == appended
    assert s.used_bytes <= 4096
    t0 = time.monotonic()
    try:
        s.append(msg(100))
    except SpoolFull:
        assert time.monotonic() - t0 < 0.1
    s.ack(appended)
    s.append(msg(101))  # room again
    s.close()


@check
def block_policy_waits_for_room_then_raises(d):
    s = Spool(d, max_bytes=4096, segment_bytes=1024, when_full="block", block_timeout=0.3)
    n = 0
    try:
        while True:
            s.append(msg(n))
            n += 1
    except SpoolFull:
        pass
    took = time.time()
    threading.Timer(0.1, lambda: s.ack(s.queued)).start()
    s.append(msg(1000))  # blocks until the acks free a segment
    assert time.time() - took < 0.3 + 0.2
    assert s.head(1)[0].headers["ce-id"] == "e1000"
    s.close()


@check
def the_ack_file_lost_means_resending_not_losing(d):
    s = Spool(d)
    for n in range(5):
        s.append(msg(n))
    s.ack(2)
    s.close()
    os.unlink(os.path.join(d, "ack"))
    s = Spool(d)
    # The records of the acked prefix come back (duplicates for the ledger to drop); none is lost.
    ids = [m.headers["ce-id"] for m in s.head(10)]
    assert ids[-3:] == ["e2", "e3", "e4"], ids
    s.close()


@check
def the_format_is_as_documented(d):
    record = encode_record(msg(7, size=3))
    length, crc = FRAME.unpack(record[:8])
    payload = record[8:]
    assert length == len(payload) and crc == zlib.crc32(payload, zlib.crc32(record[:4]))
    (meta_len,) = struct.unpack(">I", payload[:4])
    meta = json.loads(payload[4 : 4 + meta_len])
    assert meta == {"subject": "atl.in.acme.tool.invocation.planned",
                    "headers": {"ce-id": "e7", "Nats-Msg-Id": "m7"}, "emitted_at_ms": 1_700_000_000_007}
    assert payload[4 + meta_len :] == b"xxx7"
    s = Spool(d)
    s.append(msg(7, size=3))
    with open(os.path.join(d, segments(d)[-1]), "rb") as f:
        assert f.read() == SEGMENT_MAGIC + record
    s.close()


def upload_msg(n: int, content: bytes) -> Message:
    upload = Upload("ATL_PAYLOADS_acme", f"e{n}/data/content/0/text", hashlib.sha256(content).hexdigest(),
                    len(content), "text/plain; charset=utf-8")
    return Message("atl.in.acme.tool.result.created", {"ce-id": f"e{n}", "Nats-Msg-Id": f"m{n}"},
                   b'{"ref":true}', 1_700_000_000_000 + n, (upload,))


def sidecars(d: str):
    try:
        return sorted(os.listdir(os.path.join(d, "uploads")))
    except FileNotFoundError:
        return []


@check
def upload_sidecars_are_durable_private_counted_and_deleted_on_ack(d):
    content = b"large value " * 10_000
    s = Spool(d)
    s.append(msg(0))
    before = s.used_bytes
    s.append(upload_msg(1, content), [content])
    [name] = sidecars(d)
    path = os.path.join(d, "uploads", name)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(d, "uploads")).st_mode) == 0o700
    assert s.used_bytes >= before + len(content), (before, s.used_bytes)
    s.close()
    s = Spool(d)  # the sidecar of an unacked record survives a reopen
    assert sidecars(d) == [name] and s.used_bytes >= len(content)
    head = s.head(2)
    assert head[0].uploads == () and head[1].uploads[0].file == f"uploads/{name}"
    assert head[1].uploads[0].name == "e1/data/content/0/text"
    assert s.read_upload(head[1].uploads[0]) == content
    s.ack(1)
    assert sidecars(d) == [name]
    s.ack(1)
    assert sidecars(d) == [] and s.used_bytes < len(content)
    s.close()


@check
def the_same_event_emitted_twice_keeps_two_sidecars(d):
    content = b"z" * 5000
    s = Spool(d)
    s.append(upload_msg(1, content), [content])
    s.append(upload_msg(1, content), [content])
    assert len(sidecars(d)) == 2
    s.ack(1)  # the first record's sidecar goes; the second's stays for its own send
    [left] = sidecars(d)
    assert s.read_upload(s.head(1)[0].uploads[0]) == content and s.head(1)[0].uploads[0].file.endswith(left)
    s.close()


@check
def a_corrupt_sidecar_is_reported_not_sent(d):
    content = b"y" * 5000
    s = Spool(d)
    s.append(upload_msg(1, content), [content])
    [name] = sidecars(d)
    with open(os.path.join(d, "uploads", name), "r+b") as f:
        f.write(b"Y")
    try:
        s.read_upload(s.head(1)[0].uploads[0])
        raise AssertionError("a corrupt sidecar was read")
    except SpoolError:
        pass
    s.close()


@check
def sidecar_bytes_count_toward_max_bytes(d):
    content = b"w" * 40_000
    s = Spool(d, max_bytes=64 * 1024, when_full="fail")
    s.append(upload_msg(1, content), [content])
    try:
        s.append(upload_msg(2, content), [content])
        raise AssertionError("sidecars were not counted")
    except SpoolFull:
        pass
    assert len(sidecars(d)) == 1, sidecars(d)  # the refused event left nothing behind
    try:
        s.append(upload_msg(3, b"v" * 70_000), [b"v" * 70_000])
        raise AssertionError("an upload larger than the spool was accepted")
    except SpoolFull:
        pass
    s.ack(1)
    s.append(upload_msg(2, content), [content])  # room again once the first was acked
    s.close()


KILLED_BETWEEN_SIDECAR_AND_RECORD = """
import os, signal, sys
sys.path[:0] = {path!r}
sys.path.insert(0, {here!r})
from spool_check import upload_msg
from toolledger_producer.spool import Spool
s = Spool({d!r})
s.append(upload_msg(1, b"kept" * 2000), [b"kept" * 2000])
# The next append dies by SIGKILL after its sidecar is durable and before its record is written.
Spool._write_record = lambda self, record: os.kill(os.getpid(), signal.SIGKILL)
s.append(upload_msg(2, b"lost" * 2000), [b"lost" * 2000])
print("not killed")
"""


@check
def kill_9_between_sidecar_and_record_leaves_no_orphan(d):
    code = KILLED_BETWEEN_SIDECAR_AND_RECORD.format(path=sys.path, here=os.path.dirname(os.path.abspath(__file__)), d=d)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    assert len(sidecars(d)) == 2, sidecars(d)  # the kept one, and the orphan of the killed emit
    s = Spool(d)
    assert s.queued == 1
    [upload] = s.head(1)[0].uploads
    assert sidecars(d) == [os.path.basename(upload.file)], (sidecars(d), upload)
    assert s.read_upload(upload) == b"kept" * 2000
    s.close()


@check
def an_orphan_left_by_a_crash_after_the_ack_is_removed_at_open(d):
    content = b"u" * 3000
    s = Spool(d)
    s.append(upload_msg(1, content), [content])
    [name] = sidecars(d)
    s.ack(1)
    s.close()
    os.makedirs(os.path.join(d, "uploads"), exist_ok=True)
    with open(os.path.join(d, "uploads", name), "wb") as f:  # as if the ack's deletion never ran
        f.write(content)
    Spool(d).close()
    assert sidecars(d) == []


@check
def large_values_are_extracted_deterministically_and_small_ones_stay(d):
    text = "t" * 300_000
    data = {"invocation_id": "inv-1", "content": [{"type": "text", "text": text}],
            "structured_content": {"rows": ["r" * 100] * 4000}, "small": "s" * 2000}
    out, moved = extract(data, event_id="ev/1", bucket="ATL_PAYLOADS_acme", threshold=256 * 1024,
                         budget=1_000_000)
    assert data["content"][0]["text"] == text, "the input is not changed"
    names = [u.name for u, _ in moved]
    # The deepest value over the threshold moves: the array, not the object holding it.
    assert names == ["ev/1/data/content/0/text", "ev/1/data/structured_content/rows"], names
    [(text_up, text_bytes), (json_up, json_bytes)] = moved
    assert text_bytes == text.encode() and text_up.content_type.startswith("text/plain")
    assert json.loads(json_bytes) == data["structured_content"]["rows"] and json_up.content_type == "application/json"
    assert out["content"][0]["text"] == {"$upload": {
        "bucket": "ATL_PAYLOADS_acme", "name": "ev/1/data/content/0/text",
        "sha256": hashlib.sha256(text.encode()).hexdigest(), "size": 300_000,
        "content_type": "text/plain; charset=utf-8"}}
    assert out["small"] == data["small"] and out["invocation_id"] == "inv-1"
    assert extract(data, event_id="ev/1", bucket="ATL_PAYLOADS_acme", threshold=256 * 1024,
                   budget=1_000_000)[0] == out
    # Values under the threshold move too when the event would not fit otherwise, largest first.
    many = {"invocation_id": "inv-2", "a": "a" * 200_000, "b": "b" * 150_000, "c": "c" * 100}
    out, moved = extract(many, event_id="ev:2", bucket="B", threshold=256 * 1024, budget=250_000)
    assert [u.name for u, _ in moved] == ["ev%3A2/data/a"] and out["b"] == many["b"], moved


def main() -> int:
    for fn in CHECKS:
        with tempfile.TemporaryDirectory() as d:
            try:
                fn(d)
            except Exception:
                print(f"FAILED: {fn.__name__}", file=sys.stderr)
                raise
    print(json.dumps({"checks": [fn.__name__ for fn in CHECKS]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
