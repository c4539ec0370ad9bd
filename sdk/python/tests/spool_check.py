"""The spool on its own (no NATS): format, recovery, compaction, permissions, lock and full policies.

Each check names what it asserts; the script exits non-zero at the first that fails and prints one JSON
line {"checks": [names]} when all pass.
"""

import json
import os
import stat
import struct
import sys
import tempfile
import threading
import time
import zlib

from toolledger_producer.spool import FRAME, SEGMENT_MAGIC, Message, Spool, SpoolError, SpoolFull, encode_record

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
