"""Every event the SDK produces, validated against the official Agent Tool schemas and the project's own.

Builds one of every kind the SDK makes — a declaration with sensitive fields, the whole lifecycle
through the invocation helper (planned, started, progress, permission request and decision, pre and
post hooks, succeeded / failed / timed_out / canceled with their results), the remaining invocation
classes through the builders, a partial and a redacted result — emits them through a real `Producer`
(no sender: they stay in its spool), reads the spool back, decodes each binary-mode message into its
structured event (percent-decoding the `ce-*` headers, as ingest does) and validates:

  * the event against `schemas/events/<class>.schema.json` (envelope, tenant, traceparent, data), and
  * its `data` against the official schema of the object the class carries (`$AGENTTOOL_SCHEMAS`),

so a schema change the SDK does not follow fails. Also checks: ids are stable (the same event built
again has the same id), the ambient OpenTelemetry span becomes `traceparent`, ids and tenants outside
the grammar and non-I-JSON numbers are refused at emit.

Usage: schemas_check.py SCHEMAS_DIR AGENTTOOL_SCHEMAS_DIR OUT_NDJSON
Writes every event as NDJSON to OUT_NDJSON (for `toolledger validate`); prints one JSON line
{"events": N, "classes": [...]}; exits non-zero on any violation.
"""

import asyncio
import json
import sys
import tempfile
import urllib.parse
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

from toolledger_producer import InvalidEvent, Producer, Tool
from toolledger_producer.invocation import ToolFailure

#: The official object each class's data is (DESIGN.md §3); permission requests have none.
OFFICIAL = {
    "tool.declared": "agenttool-tool-declaration",
    "tool.permission.decided": "agenttool-permission-decision",
    "tool.invocation.progress": "agenttool-progress",
    "tool.invocation.partial_result": "agenttool-result",
    "tool.result.created": "agenttool-result",
    "tool.result.redacted": "agenttool-result",
}
for phase in ("pre", "post"):
    for stage in ("started", "completed"):
        OFFICIAL[f"tool.hook.{phase}.{stage}"] = "agenttool-hook"


def official_for(event_class: str):
    if event_class.startswith("tool.invocation.") and event_class not in OFFICIAL:
        return "agenttool-invocation"
    return OFFICIAL.get(event_class)


def project_registry(schemas: Path) -> Registry:
    registry = Registry()
    for path in schemas.rglob("*.schema.json"):
        document = json.loads(path.read_text())
        registry = registry.with_resource(document["$id"], Resource.from_contents(document))
    return registry


def structured(message) -> dict:
    """The structured event of a binary-mode message, as ingest decodes it."""
    event = {}
    for name, value in message.headers.items():
        if name.lower().startswith("ce-"):
            event[name[3:].lower()] = urllib.parse.unquote(value, errors="strict")
    event["data"] = json.loads(message.body)
    return event


async def emit_everything(producer: Producer) -> None:
    secret_tool = Tool(tool_id="vault.read", name="read", namespace="vault", description="reads a secret",
                       version="1", sensitive_fields=["api_key", "/headers/authorization"],
                       input_schema={"type": "object", "properties": {"path": {"type": "string"}}})
    note_tool = Tool(tool_id="notes.read", name="read", namespace="notes", description="reads a note")

    with producer.invocation(secret_tool, {"path": "db/ünïcode", "api_key": "k-123"}, start=False,
                             invocation_id="inv-schemas-1", native_call_id="call 1/ü") as inv:
        inv.hook("pre", "started", "hook-1")
        inv.hook("pre", "completed", "hook-1", updated_input={"path": "db/prod"})
        decision = inv.request_permission({"path": "db/prod"}, reason={"rule": "ask for prod"})
        inv.decide("allow", decision_id=decision, reason={"by": "user"}, mode="default")
        inv.start()
        inv.progress("half way", percent=50.0)
        inv.progress("done", percent=100.0)
        inv.hook("post", "started", "hook-2")
        inv.hook("post", "completed", "hook-2", updated_output={"ok": True})
        inv.result({"value": "s3cr3t-free"})

    try:
        with producer.invocation(note_tool, {"name": "missing"}, invocation_id="inv-schemas-2"):
            raise ToolFailure("no note named missing", "invalid_arguments", "notes:missing")
    except ToolFailure:
        pass
    try:
        with producer.invocation(note_tool, {"name": "slow"}, invocation_id="inv-schemas-3"):
            raise TimeoutError("took too long")
    except TimeoutError:
        pass

    async def canceled():
        async with producer.invocation(note_tool, {"name": "x"}, invocation_id="inv-schemas-4"):
            raise asyncio.CancelledError()

    try:
        await canceled()
    except asyncio.CancelledError:
        pass
    try:
        with producer.invocation(note_tool, {"name": "p"}, invocation_id="inv-schemas-5"):
            raise PermissionError("denied by the file system")
    except PermissionError:
        pass

    builder = producer.events
    snapshot = {"invocation_id": "inv-schemas-6", "tool_id": "notes.read", "model_input": {"name": "big"}}
    for event_class in ("tool.invocation.planned", "tool.invocation.selected", "tool.invocation.arguments_ready",
                        "tool.invocation.queued", "tool.invocation.started", "tool.invocation.yielded"):
        producer.emit(builder.invocation(event_class, snapshot))
    producer.emit(builder.result({"invocation_id": "inv-schemas-6", "tool_id": "notes.read", "status": "succeeded",
                                  "content": [{"type": "text", "text": "part"}]},
                                 event_class="tool.invocation.partial_result"))
    producer.emit(builder.invocation("tool.invocation.succeeded", snapshot))
    producer.emit(builder.result({"invocation_id": "inv-schemas-6", "tool_id": "notes.read", "status": "redacted",
                                  "redaction_state": "redacted"}, event_class="tool.result.redacted"))
    producer.emit(builder.invocation("tool.invocation.validation_failed",
                                     {"invocation_id": "inv-schemas-7", "tool_id": "notes.read",
                                      "error": {"error_class": "schema_validation_failed"}}))


def check_refusals(producer: Producer) -> None:
    builder = producer.events
    bad = [
        ("control character in an id", {"invocation_id": "inv\n1", "tool_id": "t"}),
        ("id over 1 KiB", {"invocation_id": "i" * 1025, "tool_id": "t"}),
        ("integer beyond 2^53", {"invocation_id": "inv-big", "tool_id": "t", "model_input": {"n": 2**60}}),
        ("NaN", {"invocation_id": "inv-nan", "tool_id": "t", "model_input": {"x": float("nan")}}),
    ]
    for what, snapshot in bad:
        try:
            producer.emit(builder.invocation("tool.invocation.planned", snapshot))
        except (InvalidEvent, ValueError):
            continue
        raise AssertionError(f"{what} was not refused at emit")
    try:
        Producer(tenant="_system", spool_dir=tempfile.mkdtemp(), start=False)
    except InvalidEvent:
        pass
    else:
        raise AssertionError("the reserved tenant _system was accepted")


def check_stable_ids(producer: Producer) -> None:
    builder = producer.events
    snapshot = {"invocation_id": "inv-stable", "tool_id": "t", "created_at": "2026-01-01T00:00:00.000Z"}
    a = builder.invocation("tool.invocation.planned", snapshot)
    b = builder.invocation("tool.invocation.planned", dict(snapshot))
    assert a["id"] == b["id"], "the same event built twice has two ids"
    assert builder.invocation("tool.invocation.started", snapshot)["id"] != a["id"], "classes share an id"
    assert builder.invocation("tool.invocation.planned", snapshot, seq=1)["id"] != a["id"], "seq ignored"
    tool = Tool(tool_id="t", name="t")
    assert builder.tool_declared(tool)["id"] == builder.tool_declared(tool)["id"]
    assert builder.tool_declared(tool)["id"] != builder.tool_declared(Tool(tool_id="t", name="t", version="2"))["id"]


def check_trace_context(producer: Producer) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("schemas_check")
    snapshot = {"invocation_id": "inv-traced", "tool_id": "t"}
    assert "traceparent" not in producer.events.invocation("tool.invocation.planned", snapshot)
    with tracer.start_as_current_span("execute_tool t") as span:
        context = span.get_span_context()
        event = producer.events.invocation("tool.invocation.planned", snapshot)
    assert event["traceparent"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}", event


def main() -> int:
    schemas, official_dir, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    registry = project_registry(schemas)
    official = {p.name[: -len(".schema.json")]: json.loads(p.read_text()) for p in official_dir.glob("*.schema.json")}
    with tempfile.TemporaryDirectory() as tmp:
        producer = Producer(tenant="acme", spool_dir=tmp + "/spool", source="urn:toolledger-producer:schemas-check",
                            session_id="sess-schemas", start=False)
        asyncio.run(emit_everything(producer))
        check_refusals(producer)
        check_stable_ids(producer)
        check_trace_context(producer)
        messages = producer.spool.head(10_000)
        producer.close(timeout=0)
    failures, classes, events = [], set(), []
    for message in messages:
        event = structured(message)
        events.append(event)
        event_class = event["type"]
        classes.add(event_class)
        assert message.subject == f"atl.in.acme.{event_class}", message.subject
        schema = registry.get_or_retrieve(f"https://toolledger.dev/schemas/v1/events/{event_class}.schema.json").value.contents
        validator = jsonschema.Draft202012Validator(schema, registry=registry,
                                                    format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        for error in validator.iter_errors(event):
            failures.append(f"{event_class} {event['id']}: project schema: {error.json_path}: {error.message}")
        name = official_for(event_class)
        if name is not None:
            for error in jsonschema.Draft202012Validator(official[name]).iter_errors(event["data"]):
                failures.append(f"{event_class} {event['id']}: official {name}: {error.json_path}: {error.message}")
        for attribute, field in (("invocationid", "invocation_id"), ("toolid", "tool_id")):
            if attribute in event and field in event["data"]:
                assert event[attribute] == event["data"][field], (attribute, event)
    ids = [(e["id"]) for e in events]
    assert len(ids) == len(set(ids)), "two events share an id"
    wanted = {"tool.declared", "tool.permission.requested", "tool.permission.decided", "tool.hook.pre.started",
              "tool.hook.pre.completed", "tool.hook.post.started", "tool.hook.post.completed",
              "tool.invocation.progress", "tool.result.created", "tool.result.redacted",
              "tool.invocation.partial_result", *[c for c in __import__("toolledger_producer").events.INVOCATION_CLASSES]}
    missing = wanted - classes
    if missing:
        failures.append(f"classes the check never produced: {sorted(missing)}")
    out.write_text("".join(json.dumps(e) + "\n" for e in events))
    for failure in failures:
        print(failure, file=sys.stderr)
    print(json.dumps({"events": len(events), "classes": sorted(classes)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
