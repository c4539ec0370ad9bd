"""A producer process for the e2e tests: emits invocations through the SDK, or drains its spool.

Usage:
  producer_run.py emit  NATS_URL SPOOL TENANT PREFIX [--count N] [--rate R] [--fsync every_event|interval]
      Emits invocations PREFIX-0, PREFIX-1, … through `Producer.invocation` (tool.declared once, then
      planned, started, progress, succeeded, tool.result.created each), N of them (0: until killed),
      at most R invocations/s (0: as fast as it can); then waits up to --flush-timeout s for the acks
      (0: not at all). After `emit` returns for an event it writes `E <event id>` to stdout with one
      write(2), so a line on stdout means that event was emitted before any later kill. Prints `READY` first and `DONE {metrics}` when N were emitted and flushed.
  producer_run.py drain NATS_URL SPOOL TENANT [--timeout S]
      Opens the spool, waits until the sender has every event acked, prints `DRAINED {metrics}`;
      exits 1 if the timeout passed first.
  producer_run.py upload NATS_URL SPOOL TENANT INVOCATION --size N [--flush-timeout S]
      Emits one invocation whose result is a text of N bytes (`large_text(N)`), so it travels through
      the tenant's payload bucket; prints `E <id>` lines, then `UPLOADS [{name, sha256, size, file}]`
      (the spool's pending uploads) and `DONE {metrics}`.
  producer_run.py bench SPOOL N --fsync every_event|interval
      Emits N events with no reachable NATS (the spool alone) and prints {"events_per_s": …}.
"""

import argparse
import json
import os
import sys
import time

from toolledger_producer import Producer, Tool

TOOL = Tool(tool_id="kv.get", name="get", namespace="kv", description="reads a key",
            sensitive_fields=["pin"])
#: A port nothing listens on: the producer works offline and keeps everything in its spool.
UNREACHABLE = "nats://127.0.0.1:1"


def out(line: str) -> None:
    os.write(1, (line + "\n").encode())


def traced(producer: Producer) -> Producer:
    emit = producer.emit

    def emit_and_say(event):
        event_id = emit(event)
        out(f"E {event_id}")
        return event_id

    producer.emit = emit_and_say  # type: ignore[method-assign]
    return producer


def emit(args) -> int:
    producer = traced(Producer(tenant=args.tenant, spool_dir=args.spool, servers=args.nats,
                               source="urn:toolledger-producer:e2e", fsync=args.fsync,
                               backoff_max=1.0, publish_timeout=2.0))
    out("READY")
    n = 0
    started = time.monotonic()
    while args.count == 0 or n < args.count:
        with producer.invocation(TOOL, {"key": f"k{n}", "pin": f"secret-{n}"},
                                 invocation_id=f"{args.prefix}-{n}") as inv:
            inv.progress("looked up", percent=100.0)
            inv.result({"value": n})
        n += 1
        if args.rate:
            delay = started + n / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    drained = producer.flush(timeout=args.flush_timeout) if args.flush_timeout > 0 else True
    metrics = producer.metrics()
    producer.close(timeout=0 if args.flush_timeout <= 0 else 5)
    out("DONE " + json.dumps(metrics))
    return 0 if drained else 1


def drain(args) -> int:
    producer = Producer(tenant=args.tenant, spool_dir=args.spool, servers=args.nats,
                        source="urn:toolledger-producer:e2e", backoff_max=1.0)
    recovered = producer.spool.recovered
    drained = producer.flush(timeout=args.timeout)
    metrics = dict(producer.metrics(), recovered=recovered)
    producer.close(timeout=5)
    out(("DRAINED " if drained else "NOT DRAINED ") + json.dumps(metrics))
    return 0 if drained else 1


def large_text(size: int) -> str:
    """`row 00000000\n`, `row 00000001\n`, … cut at `size` bytes (the e2e test writes the same)."""
    rows = "".join(f"row {i:08d}\n" for i in range(size // 13 + 1))
    return rows[:size]


def upload(args) -> int:
    producer = traced(Producer(tenant=args.tenant, spool_dir=args.spool, servers=args.nats,
                               source="urn:toolledger-producer:e2e", backoff_max=1.0, publish_timeout=2.0))
    out("READY")
    with producer.invocation(TOOL, {"key": "big", "pin": "secret-big"}, invocation_id=args.invocation) as inv:
        inv.result(large_text(args.size))
    drained = producer.flush(timeout=args.flush_timeout) if args.flush_timeout > 0 else True
    pending = [dict(name=u.name, sha256=u.sha256, size=u.size, file=u.file)
               for m in producer.spool.head(1000) for u in m.uploads]
    out("UPLOADS " + json.dumps(pending))
    metrics = producer.metrics()
    producer.close(timeout=0 if args.flush_timeout <= 0 else 5)
    out("DONE " + json.dumps(metrics))
    return 0 if drained else 1


def bench(args) -> int:
    producer = Producer(tenant="acme", spool_dir=args.spool, servers=UNREACHABLE, fsync=args.fsync,
                        max_bytes=1 << 30)
    snapshot = {"invocation_id": "inv-bench", "tool_id": "kv.get", "model_input": {"key": "k", "pad": "x" * 300}}
    events = [producer.events.invocation("tool.invocation.started",
                                         snapshot, seq=i) for i in range(args.n)]
    t0 = time.perf_counter()
    for event in events:
        producer.emit(event)
    took = time.perf_counter() - t0
    producer.close(timeout=0)
    print(json.dumps({"fsync": args.fsync, "events": args.n, "seconds": round(took, 3),
                      "events_per_s": round(args.n / took)}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("emit")
    for name in ("nats", "spool", "tenant", "prefix"):
        e.add_argument(name)
    e.add_argument("--count", type=int, default=0)
    e.add_argument("--rate", type=float, default=0)
    e.add_argument("--fsync", default="every_event")
    e.add_argument("--flush-timeout", type=float, default=120, help="0: exit without waiting for acks")
    d = sub.add_parser("drain")
    for name in ("nats", "spool", "tenant"):
        d.add_argument(name)
    d.add_argument("--timeout", type=float, default=60)
    u = sub.add_parser("upload")
    for name in ("nats", "spool", "tenant", "invocation"):
        u.add_argument(name)
    u.add_argument("--size", type=int, default=2 * 1024 * 1024)
    u.add_argument("--flush-timeout", type=float, default=0, help="0: exit without waiting for acks")
    b = sub.add_parser("bench")
    b.add_argument("spool")
    b.add_argument("n", type=int)
    b.add_argument("--fsync", default="every_event")
    args = parser.parse_args()
    return {"emit": emit, "drain": drain, "upload": upload, "bench": bench}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
