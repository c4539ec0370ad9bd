"""`Producer`: `emit` puts an event in the durable spool; a background sender drains the spool to
ATL_INBOUND and removes what the stream acked.

    emit(event) ─▶ wire.binary_message (checks, ce-* headers, Nats-Msg-Id)
                ─▶ uploads.extract (values over upload_threshold_bytes, or what keeps the event over
                   max_event_bytes, become {"$upload": …} references; their bytes go along)
                ─▶ Spool.append (sidecars, then the record: durable)
                ─▶ returns (the event is on disk; it will reach the ledger)
    sender thread (its own asyncio loop, one nats-py connection that reconnects forever)
      ─▶ Spool.head(window) ─▶ for a record with uploads: ObjectStore.put of each sidecar into
         ATL_PAYLOADS_<tenant> (skipped when the object is there with that digest), in order
      ─▶ js.publish(...) for each, concurrently, each awaiting its PubAck
      ─▶ Spool.ack(acked prefix) ─▶ on a failure: capped exponential backoff with jitter, window 1
         until a publish succeeds again (so a refused event is not overtaken by more of its successors)

Retries resend the same bytes (same id, same `Nats-Msg-Id`), so the ledger holds each event once.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import threading
import time
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from . import uploads, wire
from .events import EventBuilder, Tool
from .spool import Message, Spool, SpoolError, SpoolFull, Upload

log = logging.getLogger("toolledger_producer")

#: The stream producers publish to (DESIGN.md §2); the expected-stream header makes a publish that a
#: misconfigured server would route elsewhere fail instead.
INBOUND_STREAM = "ATL_INBOUND"
#: Default ceiling on one event's wire size: the default NATS max_payload (1 MiB) with room for the
#: headers. Larger values belong in the tenant's payload bucket (schemas/README.md, producer uploads).
DEFAULT_MAX_EVENT_BYTES = 1024 * 1024 - 16 * 1024

__all__ = ["Producer", "SpoolFull", "SpoolError"]


class Producer:
    """A producer for one tenant, with a durable spool in `spool_dir`.

    `fsync="every_event"` (default): each `emit` returns after `os.fdatasync` of its record.
    `fsync="interval"`: records are fdatasync'ed at most `fsync_interval_ms` after `emit` returns;
    a machine crash (not a process crash) can lose that window.
    `when_full="block"` (default): `emit` waits up to `block_timeout` seconds for room, then raises
    `SpoolFull`; `when_full="fail"`: raises `SpoolFull` at once. Never a silent drop.

    Metrics, as attributes: `queued` (in the spool, not yet acked), `sent` (acked since start),
    `retried` (failed publish attempts, each retried), `oldest_age` (seconds since the oldest
    queued event was emitted; 0 when none), `uploaded` (objects put into the payload bucket).

    Uploads: a value in `data` whose JSON is over `upload_threshold_bytes` (default 256 KiB), and
    whatever else keeps the event over `max_event_bytes`, is sent through the tenant's payload bucket
    `ATL_PAYLOADS_<tenant>` and referenced (`toolledger_producer.uploads`); `emit` stays offline: the
    bytes wait in the spool until the sender puts them, just before it publishes the event.
    `upload_threshold_bytes=None` turns uploads off (events over `max_event_bytes` are refused).
    """

    def __init__(
        self,
        *,
        tenant: str,
        spool_dir: str,
        servers: Union[str, Sequence[str]] = "nats://127.0.0.1:4222",
        source: str = "urn:toolledger-producer:python",
        session_id: Optional[str] = None,
        fsync: str = "every_event",
        fsync_interval_ms: int = 100,
        max_bytes: int = 256 * 1024 * 1024,
        segment_bytes: int = 8 * 1024 * 1024,
        when_full: str = "block",
        block_timeout: float = 30.0,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        upload_threshold_bytes: Optional[int] = uploads.DEFAULT_UPLOAD_THRESHOLD,
        publish_timeout: float = 5.0,
        max_in_flight: int = 64,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        connect_options: Optional[Mapping[str, Any]] = None,
        start: bool = True,
    ):
        self.events = EventBuilder(tenant, source, session_id)
        self.tenant = self.events.tenant
        self.source = source
        self.spool = Spool(
            spool_dir,
            max_bytes=max_bytes,
            segment_bytes=segment_bytes,
            fsync=fsync,
            fsync_interval_ms=fsync_interval_ms,
            when_full=when_full,
            block_timeout=block_timeout,
        )
        self.servers = [servers] if isinstance(servers, str) else list(servers)
        self.max_event_bytes = max_event_bytes
        self.upload_threshold_bytes = upload_threshold_bytes
        self.bucket = uploads.bucket_of(self.tenant)
        self.publish_timeout = publish_timeout
        self.max_in_flight = max(1, max_in_flight)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.connect_options = dict(connect_options or {})
        #: Events acked by ATL_INBOUND since this producer started.
        self.sent = 0
        #: Publish attempts that failed and will be retried.
        self.retried = 0
        #: Objects put into the payload bucket since start.
        self.uploaded = 0
        #: The last publish or connect error, for operators.
        self.last_error: Optional[str] = None
        self._declared: set = set()
        self._stop = threading.Event()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._wake: Optional[asyncio.Event] = None
        self._idle = False
        self._thread: Optional[threading.Thread] = None
        if start:
            self.start()

    # ── metrics ──────────────────────────────────────────────────────────────────────────────────

    @property
    def queued(self) -> int:
        """Events in the spool not yet acked."""
        return self.spool.queued

    @property
    def oldest_age(self) -> float:
        """Seconds since the oldest queued event was emitted (0 when the spool is drained)."""
        oldest = self.spool.oldest_emitted_at_ms()
        return 0.0 if oldest is None else max(0.0, time.time() - oldest / 1000.0)

    def metrics(self) -> Dict[str, Any]:
        """`queued`, `sent`, `retried`, `oldest_age`, `spool_bytes` and `recovered` at once."""
        return {
            "queued": self.queued,
            "sent": self.sent,
            "retried": self.retried,
            "uploaded": self.uploaded,
            "oldest_age": self.oldest_age,
            "spool_bytes": self.spool.used_bytes,
            "recovered": self.spool.recovered,
        }

    # ── emitting ─────────────────────────────────────────────────────────────────────────────────

    def emit(self, event: Mapping[str, Any]) -> str:
        """Stores a structured CloudEvent (as the builders make) durably; returns its id. Raises
        `wire.InvalidEvent` for an event the ledger would refuse, `SpoolFull` by the full policy."""
        if event.get("tenant") != self.tenant:
            raise wire.InvalidEvent(f"event tenant {event.get('tenant')!r} is not this producer's {self.tenant!r}")
        subject, headers, body = wire.binary_message(event)
        header_bytes = sum(len(k) + len(v) + 4 for k, v in headers.items())
        moved: list = []
        threshold = self.upload_threshold_bytes
        # A body within the threshold has no value over it: small events skip the walk.
        if threshold is not None and (len(body) > threshold or len(body) + header_bytes > self.max_event_bytes):
            data, moved = uploads.extract(event.get("data"), event_id=event["id"], bucket=self.bucket,
                                          threshold=threshold, budget=self.max_event_bytes - header_bytes)
            if moved:
                body = wire.dumps(data)
        size = len(body) + header_bytes
        if size > self.max_event_bytes:
            raise wire.InvalidEvent(
                f"event {event['id']} is {size} bytes, over max_event_bytes {self.max_event_bytes}: "
                "upload large values to the tenant's payload bucket and reference them"
            )
        self.spool.append(Message(subject, headers, body, int(time.time() * 1000), tuple(u for u, _ in moved)),
                          [c for _, c in moved])
        if self._idle and self._loop is not None and self._wake is not None:
            self._idle = False
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop is closing
                pass
        return event["id"]

    def declare(self, tool: Tool) -> None:
        """Emits `tool.declared` for `tool` once per producer (declarations with sensitive fields
        must reach the ledger before the tool's invocations; the spool keeps their order)."""
        key = (tool.tool_id, repr(tool))
        if key not in self._declared:
            self.emit(self.events.tool_declared(tool))
            self._declared.add(key)

    def invocation(self, tool: Tool, input: Any = None, **options: Any):
        """An `InvocationScope` (context manager, sync or async) that emits the lifecycle of one
        call of `tool` with `input` as its model input; see `toolledger_producer.invocation`."""
        from .invocation import InvocationScope

        return InvocationScope(self, tool, input, **options)

    # ── the sender ───────────────────────────────────────────────────────────────────────────────

    def start(self) -> None:
        """Starts the background sender (done by the constructor unless `start=False`)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run_thread, name="toolledger-producer-sender", daemon=True)
            self._thread.start()

    def _run_thread(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        import nats  # imported here so building events needs no NATS client

        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        nc = None
        backoff = self.backoff_initial
        window = self.max_in_flight
        try:
            while not self._stop.is_set():
                if nc is None or nc.is_closed:
                    try:
                        nc = await nats.connect(
                            servers=self.servers,
                            allow_reconnect=True,
                            max_reconnect_attempts=-1,
                            reconnect_time_wait=0.25,
                            connect_timeout=2,
                            error_cb=self._quiet,
                            disconnected_cb=self._nothing,
                            reconnected_cb=self._nothing,
                            closed_cb=self._nothing,
                            **self.connect_options,
                        )
                    except Exception as e:  # noqa: BLE001 — every failure to connect is retried
                        nc = None
                        self.last_error = f"connect: {e!r}"
                        await self._sleep(backoff)
                        backoff = self._next_backoff(backoff)
                        continue
                    js = nc.jetstream(timeout=self.publish_timeout)
                try:
                    batch = self.spool.head(window)
                except SpoolError as e:
                    log.error("%s", e)
                    self.last_error = str(e)
                    await self._sleep(self.backoff_max)
                    continue
                if not batch:
                    self._idle = True
                    if self.spool.queued == 0 and not self._stop.is_set():
                        try:
                            await asyncio.wait_for(self._wake.wait(), 0.5)
                        except asyncio.TimeoutError:
                            pass
                    self._wake.clear()
                    self._idle = False
                    continue
                # Uploads first, in order: a record is published only once its objects are in the
                # bucket; at the first that fails, only the records before it go out.
                ready, upload_error, acked_before = len(batch), None, set()
                for i, m in enumerate(batch):
                    if m.uploads:
                        try:
                            if not await self._put_uploads(js, m):
                                acked_before.add(i)
                        except Exception as e:  # noqa: BLE001 — every failure to upload is retried
                            ready, upload_error = i, e
                            break
                results = await asyncio.gather(
                    *(self._nothing() if i in acked_before else self._publish(js, m)
                      for i, m in enumerate(batch[:ready])),
                    return_exceptions=True,
                )
                ok = 0
                for result in results:
                    if isinstance(result, BaseException):
                        break
                    ok += 1
                self.spool.ack(ok)
                self.sent += ok
                if ok < len(batch):
                    failed = len(batch) - ok
                    self.retried += failed
                    self.last_error = repr(results[ok] if ok < ready else upload_error)
                    log.debug("publish failed, %d to retry: %s", failed, self.last_error)
                    window = 1
                    await self._sleep(backoff)
                    backoff = self._next_backoff(backoff)
                else:
                    backoff = self.backoff_initial
                    window = min(self.max_in_flight, window * 2)
        finally:
            if nc is not None and not nc.is_closed:
                try:
                    await asyncio.wait_for(nc.close(), 2)
                except Exception:  # noqa: BLE001 — closing is best effort; the spool has everything
                    pass

    async def _publish(self, js, message: Message):
        ack = await js.publish(
            message.subject, message.body, timeout=self.publish_timeout, stream=INBOUND_STREAM,
            headers=dict(message.headers),
        )
        return ack

    async def _put_uploads(self, js, message: Message) -> bool:
        """Puts each upload of `message` into its bucket unless the object is already there with the
        same size and digest (a retry, or a restart after a put whose record was not acked). False
        when the record was acked before: a sidecar is missing and its object is not in the bucket.
        Sidecars are durable before their record and deleted only after its ack, so that happens only
        when a power loss or a damaged `ack` file brought acked records back (spool.md, Uploads);
        such a record is counted acked, not published with a reference to nothing."""
        from nats.js.errors import NotFoundError

        for upload in message.uploads:
            if not self.spool.has_upload(upload):
                store = await js.object_store(upload.bucket)
                try:
                    await store.get_info(upload.name)
                except NotFoundError:
                    log.warning("spool %s: sidecar of %s is gone and the object is not in %s: the record "
                                "was acked before its ack position was lost; not sent again",
                                self.spool.directory, upload.name, upload.bucket)
                    return False
            store = await js.object_store(upload.bucket)
            digest = "SHA-256=" + base64.urlsafe_b64encode(bytes.fromhex(upload.sha256)).decode()
            try:
                info = await store.get_info(upload.name)
                if info.size == upload.size and info.digest == digest:
                    continue
            except NotFoundError:
                pass
            content = await asyncio.to_thread(self.spool.read_upload, upload)
            info = await store.put(upload.name, content)
            if info.digest != digest:
                raise SpoolError(f"object {upload.name} in {upload.bucket} has digest {info.digest}, not {digest}")
            self.uploaded += 1
        return True

    def _next_backoff(self, backoff: float) -> float:
        return min(self.backoff_max, backoff * 2) * (0.8 + 0.4 * random.random())

    async def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stop.is_set() and time.monotonic() < end:
            await asyncio.sleep(min(0.05, end - time.monotonic()))

    @staticmethod
    async def _quiet(e: Exception) -> None:
        log.debug("nats: %r", e)

    @staticmethod
    async def _nothing(*_: Any) -> None:
        return None

    # ── flush and shutdown ───────────────────────────────────────────────────────────────────────

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every emitted event is acked; True when drained, False when `timeout`
        passed first (the rest stays in the spool)."""
        if self._thread is None:
            self.start()
        return self.spool.wait_drained(timeout)

    def close(self, timeout: Optional[float] = 10.0) -> bool:
        """Flushes for up to `timeout` seconds, stops the sender and closes the spool. Returns
        whether everything was acked; what was not stays in the spool for the next start."""
        drained = self.flush(timeout) if self._thread is not None else self.spool.queued == 0
        self._stop.set()
        if self._loop is not None and self._wake is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.publish_timeout + 3))
        self.spool.close()
        return drained

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
