"""Debugging aid, not a test and not used by one: a throwaway OTLP traces collector that prints what arrives.

Listens on 127.0.0.1 for OTLP/HTTP (POST /v1/traces, protobuf or JSON, gzip or not) and OTLP/gRPC, and
writes one JSON line per received span on stdout: resource service.name, scope, ids, kind, status,
attributes, plus the request's authorization header and content encoding. Use it to see what a client in
this directory really puts on the wire:

    .venv/bin/python tests/e2e/otlp/dump_collector.py 4318 4317 > /tmp/spans.jsonl &
    OTLP_ENDPOINT=http://127.0.0.1:4318/v1/traces .venv/bin/python tests/e2e/otlp/sdk_client.py
    OTLP_PROTOCOL=grpc OTLP_ENDPOINT=http://127.0.0.1:4317 .venv/bin/python tests/e2e/otlp/sdk_client.py

Args: HTTP_PORT [GRPC_PORT]. Stop it with Ctrl-C or kill PID.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf.json_format import MessageToDict, Parse
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

_lock = threading.Lock()


def emit(request: trace_service_pb2.ExportTraceServiceRequest, via: str, auth: str | None, encoding: str | None):
    for rs in request.resource_spans:
        service = next((a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), None)
        for ss in rs.scope_spans:
            for span in ss.spans:
                d = MessageToDict(span)  # ids come out base64 here; print them as hex instead
                line = {
                    "via": via, "auth": auth, "encoding": encoding, "service": service,
                    "scope": ss.scope.name, "name": span.name,
                    "kind": d.get("kind"), "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex() or None, "status": d.get("status", {}),
                    "attributes": {a["key"]: next(iter(a["value"].values()), None) for a in d.get("attributes", [])},
                }
                with _lock:
                    print(json.dumps(line), flush=True)


class Http(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        encoding = self.headers.get("Content-Encoding")
        if encoding == "gzip":
            body = gzip.decompress(body)
        request = trace_service_pb2.ExportTraceServiceRequest()
        json_body = self.headers.get("Content-Type", "").startswith("application/json")
        if json_body:
            Parse(body, request)
        else:
            request.ParseFromString(body)
        emit(request, "http/json" if json_body else "http/protobuf", self.headers.get("Authorization"), encoding)
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


class Grpc(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):  # noqa: N802 (generated name)
        meta = dict(context.invocation_metadata())
        emit(request, "grpc", meta.get("authorization"), meta.get("grpc-encoding"))
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> None:
    http_port = int(sys.argv[1]) if len(sys.argv) > 1 else 4318
    if len(sys.argv) > 2:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Grpc(), server)
        server.add_insecure_port(f"127.0.0.1:{int(sys.argv[2])}")
        server.start()
    ThreadingHTTPServer(("127.0.0.1", http_port), Http).serve_forever()


if __name__ == "__main__":
    main()
