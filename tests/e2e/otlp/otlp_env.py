"""Shared set-up for the OTLP test clients in this directory (not a test itself).

Builds an OpenTelemetry SDK TracerProvider that exports through a real OTLP exporter chosen by the
environment, records every export result, and optionally dumps each finished span. A client makes one
`Otlp(service)` first and ends with `sys.exit(otlp.finish())`: the status is 0 only if every finished
span was exported successfully.

Env:
  OTLP_ENDPOINT  required. http: the full URL, http://127.0.0.1:PORT/v1/traces; grpc: http://127.0.0.1:PORT
  OTLP_PROTOCOL  http (alias http/protobuf; the default) or grpc. The Python SDK has no http/json exporter.
  OTLP_TOKEN     optional; sent as `Authorization: Bearer <token>` (gRPC metadata `authorization`).
  OTLP_GZIP      1 to gzip each request.
  OTLP_TIMEOUT   seconds per export including the exporter's own retries (default 10).
  OTLP_RUN       optional run tag. It seeds the span/trace id generator and is part of the ids the clients
                 choose, so running a client twice with the same tag re-sends the same spans (a duplicate).
                 Default: a random tag.
  OTLP_DUMP      1 to also write every finished span as one JSON line on stderr (research/debugging).
"""

from __future__ import annotations

import json
import os
import random
import sys
import uuid

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator

RUN = os.environ.get("OTLP_RUN") or uuid.uuid4().hex[:8]


class SeededIds(IdGenerator):
    """Trace and span ids drawn from a PRNG seeded with the run tag and the service name."""

    def __init__(self, service: str) -> None:
        self._rng = random.Random(f"{RUN}/{service}")

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._rng.getrandbits(128) or 1


class Recording(SpanExporter):
    """Wraps the OTLP exporter and keeps what each export() returned."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner, self.results, self.exported = inner, [], 0

    def export(self, spans):
        result = self.inner.export(spans)
        self.results.append(result)
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()


class Counting(SpanProcessor):
    """Counts finished spans and, with OTLP_DUMP=1, writes each as a JSON line on stderr."""

    def __init__(self, dump: bool) -> None:
        self.ended, self.dump = 0, dump

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1
        if self.dump:
            print(json.dumps(describe(span), default=str), file=sys.stderr, flush=True)


def describe(span: ReadableSpan) -> dict:
    ctx, parent = span.context, span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "status": {"code": span.status.status_code.name, "description": span.status.description},
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "links": len(span.links),
    }


def exporter() -> SpanExporter:
    endpoint = os.environ.get("OTLP_ENDPOINT") or sys.exit("OTLP_ENDPOINT is required (see otlp_env.py)")
    protocol = os.environ.get("OTLP_PROTOCOL", "http")
    token = os.environ.get("OTLP_TOKEN")
    gzip = os.environ.get("OTLP_GZIP") == "1"
    timeout = float(os.environ.get("OTLP_TIMEOUT", "10"))
    if protocol in ("http", "http/protobuf"):
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(
            endpoint=endpoint,
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=timeout,
            compression=Compression.Gzip if gzip else Compression.NoCompression,
        )
    if protocol == "grpc":
        from grpc import Compression
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(
            endpoint=endpoint,
            insecure=True,
            headers={"authorization": f"Bearer {token}"} if token else {},
            timeout=timeout,
            compression=Compression.Gzip if gzip else Compression.NoCompression,
        )
    sys.exit(f"OTLP_PROTOCOL must be http, http/protobuf or grpc, not {protocol!r}")


class Otlp:
    """The global TracerProvider with its recording exporter. `service` (service.name) also seeds the ids,
    so each client (and the MCP server) of one run has its own. By default spans are sent as one batch when
    finish() flushes; with batch=False each span is exported as it ends (for a process that may be killed
    soon after its last span)."""

    def __init__(self, service: str, batch: bool = True) -> None:
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service}), id_generator=SeededIds(service)
        )
        self.recording = Recording(exporter())
        self.counting = Counting(os.environ.get("OTLP_DUMP") == "1")
        self.provider.add_span_processor(self.counting)
        self.provider.add_span_processor(
            BatchSpanProcessor(self.recording, schedule_delay_millis=60_000) if batch
            else SimpleSpanProcessor(self.recording)
        )
        trace.set_tracer_provider(self.provider)

    def finish(self) -> int:
        """Flushes and shuts down; returns 0 if every finished span was exported, else 1."""
        self.provider.force_flush()
        self.provider.shutdown()
        if self.counting.ended == 0 or self.recording.exported != self.counting.ended:
            results = [r.name for r in self.recording.results]
            print(
                f"otlp export failed: {self.recording.exported}/{self.counting.ended} spans exported, "
                f"export results {results}",
                file=sys.stderr,
            )
            return 1
        return 0


def hex_ids(span) -> dict:
    """The span's trace id and span id as lowercase hex, as OTLP/JSON and traceparent spell them."""
    ctx = span.get_span_context()
    return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
