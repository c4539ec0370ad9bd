"""Typed builders for the Agent Tool v0.2.0 event classes a producer emits (DESIGN.md §3).

    Tool ─▶ EventBuilder.tool_declared            (subject tool_id; input_contract.sensitive_fields)
    Invocation snapshot ─▶ EventBuilder.invocation  (tool.invocation.<planned … timed_out>)
    PermissionRequest / PermissionDecision ─▶ tool.permission.requested / .decided
    Hook ─▶ tool.hook.<pre|post>.<started|completed>;  Progress ─▶ tool.invocation.progress
    Result ─▶ tool.result.created / .redacted, tool.invocation.partial_result

Every builder returns a structured CloudEvent (a `dict`) with the `tenant` extension, `invocationid`,
`toolid`, `sessionid` where they apply, and `traceparent`/`tracestate` from the ambient OpenTelemetry
context when `opentelemetry` is importable and a span is current.

**Stable ids.** An event's `id` is a digest of the producer's `source`, the object it is about (the
invocation id; for a declaration the tool id and the declaration's content), the class and a sequence
(`seq`, 0 for the first event of a class for that object; progress and repeated hooks count up). Built
again for a retry, the event has the same id, so the ledger's dedupe (tenant, source, id) makes retries
duplicates, never new entries. A producer that builds one event twice with different content gets a
`duplicate_conflict` quarantine receipt: bump `seq` for a genuinely new event.

The data shapes are `TypedDict`s of the official schemas (`$AGENTTOOL_SCHEMAS`) with the fields the
ledger reads besides (`session_id`, `error`, `retry_of`, `attempt`, `external_mappings`); unknown fields
are allowed, as the official schemas allow them. `sdk/python/tests/schemas_check.py` validates every
builder's output against the official schemas and the project's `schemas/`, so drift fails CI.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, TypedDict

from . import wire

try:  # Required: Python 3.11+, typing_extensions before.
    from typing import Required
except ImportError:  # pragma: no cover
    from typing_extensions import Required  # type: ignore

#: The Agent Tool schema version every object declares.
SCHEMA_VERSION = "0.2.0"

#: Every class of DESIGN.md §3 a producer may publish, with the data it carries.
INVOCATION_CLASSES = (
    "tool.invocation.planned",
    "tool.invocation.selected",
    "tool.invocation.arguments_ready",
    "tool.invocation.validation_failed",
    "tool.invocation.queued",
    "tool.invocation.started",
    "tool.invocation.yielded",
    "tool.invocation.succeeded",
    "tool.invocation.failed",
    "tool.invocation.canceled",
    "tool.invocation.timed_out",
)
#: The status an invocation snapshot reports for each class (the class decides the transition; the
#: status is what the producer sees, kept equal so no `status_mismatch` anomaly is recorded).
STATUS_OF_CLASS = {
    "tool.invocation.planned": "planned",
    "tool.invocation.selected": "selected",
    "tool.invocation.arguments_ready": "arguments_ready",
    "tool.invocation.validation_failed": "validation_failed",
    "tool.invocation.queued": "queued",
    "tool.invocation.started": "running",
    "tool.invocation.yielded": "yielded",
    "tool.invocation.succeeded": "succeeded",
    "tool.invocation.failed": "failed",
    "tool.invocation.canceled": "canceled",
    "tool.invocation.timed_out": "timed_out",
}


class ToolError(TypedDict, total=False):
    """A tool error (spec "Errors and retries"): `error_class` from the spec's initial classes."""

    error_class: str
    error_code: str
    message: str
    recoverability: str
    retry_after: Any
    native_error_ref: Any


class Invocation(TypedDict, total=False):
    """An invocation snapshot (official `agenttool-invocation`); may be partial."""

    schema_version: str
    invocation_id: Required[str]
    tool_id: Required[str]
    status: str
    created_at: str
    started_at: str
    ended_at: str
    surface_id: str
    native_call_id: str
    model_input: Any
    observable_input: Any
    permission_input: Any
    call_input: Any
    actor_ref: str
    session_id: str
    retry_of: str
    attempt: int
    error: ToolError
    external_mappings: List[Dict[str, Any]]
    telemetry_refs: List[Dict[str, Any]]


class PermissionRequest(TypedDict, total=False):
    """Data of `tool.permission.requested` (the ledger's `ledger/permission-request` shape)."""

    schema_version: str
    decision_id: Required[str]
    invocation_id: Required[str]
    tool_id: str
    permission_input: Any
    permission_profile_ref: str
    mode: str
    reason: Dict[str, Any]
    requested_at: str


class PermissionDecision(TypedDict, total=False):
    """A permission decision (official `agenttool-permission-decision`)."""

    schema_version: str
    decision_id: Required[str]
    invocation_id: Required[str]
    behavior: Required[Literal["allow", "ask", "deny", "passthrough"]]
    decided_at: str
    mode: str
    source: str
    reason: Dict[str, Any]
    updated_input: Any
    user_modified: bool
    rule_refs: List[str]
    policy_refs: List[str]


HookEvent = Literal[
    "pre_tool_use",
    "post_tool_use",
    "post_tool_use_failure",
    "permission_request",
    "permission_decision",
    "result_persistence",
]


class Hook(TypedDict, total=False):
    """A hook run (official `agenttool-hook`)."""

    schema_version: str
    hook_id: Required[str]
    hook_event: Required[HookEvent]
    invocation_id: Required[str]
    tool_id: str
    matcher: Dict[str, Any]
    outputs: List[Any]
    updated_input: Any
    updated_output: Any
    stop: Dict[str, Any]
    started_at: str
    ended_at: str


class Progress(TypedDict, total=False):
    """A progress update (official `agenttool-progress`)."""

    schema_version: str
    progress_id: str
    invocation_id: Required[str]
    tool_id: str
    sequence: Required[int]
    status: Required[str]
    message: str
    percent: float
    current_step: str
    total_steps: int
    elapsed_ms: int
    timestamp: str


class Result(TypedDict, total=False):
    """A tool result (official `agenttool-result`)."""

    schema_version: str
    result_id: str
    invocation_id: Required[str]
    tool_id: str
    status: Required[str]
    is_error: bool
    content: List[Dict[str, Any]]
    structured_content: Any
    summary: str
    redaction_state: str
    error: ToolError
    created_at: str
    external_mapping: Dict[str, Any]


@dataclass(frozen=True)
class Tool:
    """A tool as its producer declares it. `sensitive_fields` (property names, matched at any depth of
    an input, or JSON Pointers such as `/headers/authorization`) go into the declaration's
    `input_contract.sensitive_fields`, so ingest scrubs them from every invocation of the tool — once
    the declaration is in the ledger: declare before the first invocation (docs/ingest.md, ordering
    caveat); `Producer.invocation` does."""

    tool_id: str
    name: str
    namespace: str = "default"
    description: str = ""
    tool_kind: str = "function"
    lifecycle: str = "available"
    version: Optional[str] = None
    sensitive_fields: Sequence[str] = ()
    input_schema: Optional[Mapping[str, Any]] = None
    output_schema: Optional[Mapping[str, Any]] = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def declaration(self) -> Dict[str, Any]:
        """The `tool-declaration` object."""
        data: Dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool_id": self.tool_id,
            "namespace": self.namespace,
            "name": self.name,
            "description": self.description,
            "lifecycle": self.lifecycle,
            "tool_kind": self.tool_kind,
        }
        if self.version is not None:
            data["version"] = self.version
        contract: Dict[str, Any] = {}
        if self.input_schema is not None:
            contract["model_input_schema"] = dict(self.input_schema)
        if self.sensitive_fields:
            contract["sensitive_fields"] = list(self.sensitive_fields)
        if contract:
            data["input_contract"] = contract
        if self.output_schema is not None:
            data["output_contract"] = {"output_schema": dict(self.output_schema)}
        data.update(self.extra)
        return data


def now_rfc3339() -> str:
    """The current UTC time, RFC 3339 with milliseconds and `Z`."""
    return rfc3339(_dt.datetime.now(_dt.timezone.utc))


def rfc3339(moment: _dt.datetime) -> str:
    """`moment` in UTC as RFC 3339 with milliseconds and `Z`."""
    return moment.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def stable_id(*parts: str, length: int = 32) -> str:
    """Hex SHA-256 over length-prefixed `parts`, truncated to `length` digits."""
    h = hashlib.sha256(b"toolledger.producer.v1")
    for part in parts:
        raw = part.encode()
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.hexdigest()[:length]


def trace_context() -> Dict[str, str]:
    """`traceparent` (and `tracestate`) of the current OpenTelemetry span, if opentelemetry is
    installed and a valid span is current; empty otherwise."""
    try:
        from opentelemetry import trace
    except ImportError:
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    out = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"}
    state = context.trace_state.to_header() if context.trace_state else ""
    if state:
        out["tracestate"] = state
    return out


class EventBuilder:
    """Builds CloudEvents for one producer: its `tenant`, `source` and (optionally) agent session."""

    def __init__(self, tenant: str, source: str, session_id: Optional[str] = None, *, trace: bool = True):
        self.tenant = wire.check_tenant(tenant)
        if not source:
            raise wire.InvalidEvent("source must not be empty")
        self.source = source
        self.session_id = session_id
        self.trace = trace

    def event(
        self,
        event_class: str,
        subject: str,
        data: Mapping[str, Any],
        *,
        key: Sequence[str],
        seq: int = 0,
        time: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """A structured CloudEvent of `event_class` about `subject`; its id is a digest of the
        source, `key` (what identifies the object), the class and `seq`."""
        body = dict(data)
        body.setdefault("schema_version", SCHEMA_VERSION)
        event: Dict[str, Any] = {
            "specversion": "1.0",
            "id": "tlp-" + stable_id(self.source, *key, event_class, str(seq)),
            "source": self.source,
            "type": event_class,
            "subject": subject,
            "time": time or now_rfc3339(),
            "datacontenttype": "application/json",
            "tenant": self.tenant,
        }
        session = session_id or body.get("session_id") or self.session_id
        if session:
            event["sessionid"] = session
        if event_class == "tool.declared":
            event["toolid"] = subject
        else:
            if isinstance(body.get("invocation_id"), str):
                event["invocationid"] = body["invocation_id"]
            if isinstance(body.get("tool_id"), str):
                event["toolid"] = body["tool_id"]
        if self.trace:
            event.update(trace_context())
        event["data"] = body
        return event

    def tool_declared(self, tool: Tool, *, time: Optional[str] = None) -> Dict[str, Any]:
        """`tool.declared`. Its id covers the declaration's content, so declaring the same tool again
        (every producer start does) is a duplicate and a changed declaration a new event. For that it
        carries no `time`, session or trace context unless `time` is given: the ledger compares a
        repeat's whole content, and a new time under the same id would be a `duplicate_conflict`."""
        data = tool.declaration()
        digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        event = self.event("tool.declared", tool.tool_id, data, key=(tool.tool_id, digest), time=time)
        for attribute in ("sessionid", "traceparent", "tracestate") + (() if time else ("time",)):
            event.pop(attribute, None)
        return event

    def invocation(
        self, event_class: str, snapshot: Invocation, *, seq: int = 0, time: Optional[str] = None
    ) -> Dict[str, Any]:
        """A `tool.invocation.*` event carrying `snapshot`; `status` defaults to the class's own."""
        if event_class not in STATUS_OF_CLASS:
            raise wire.InvalidEvent(f"{event_class} is not an invocation class ({', '.join(INVOCATION_CLASSES)})")
        data: Dict[str, Any] = dict(snapshot)
        data.setdefault("status", STATUS_OF_CLASS[event_class])
        data.setdefault("created_at", time or now_rfc3339())
        return self.event(event_class, data["invocation_id"], data, key=(data["invocation_id"],), seq=seq, time=time)

    def permission_requested(self, request: PermissionRequest, *, seq: int = 0, time: Optional[str] = None) -> Dict[str, Any]:
        """`tool.permission.requested`."""
        data: Dict[str, Any] = dict(request)
        data.setdefault("requested_at", time or now_rfc3339())
        return self.event("tool.permission.requested", data["invocation_id"], data,
                          key=(data["invocation_id"], data["decision_id"]), seq=seq, time=time)

    def permission_decided(self, decision: PermissionDecision, *, seq: int = 0, time: Optional[str] = None) -> Dict[str, Any]:
        """`tool.permission.decided` (behavior allow | ask | deny | passthrough)."""
        data: Dict[str, Any] = dict(decision)
        data.setdefault("decided_at", time or now_rfc3339())
        return self.event("tool.permission.decided", data["invocation_id"], data,
                          key=(data["invocation_id"], data["decision_id"]), seq=seq, time=time)

    def hook(self, phase: Literal["pre", "post"], stage: Literal["started", "completed"], hook: Hook,
             *, seq: int = 0, time: Optional[str] = None) -> Dict[str, Any]:
        """`tool.hook.<phase>.<stage>`."""
        if phase not in ("pre", "post") or stage not in ("started", "completed"):
            raise wire.InvalidEvent(f"tool.hook.{phase}.{stage} is not a hook class")
        data: Dict[str, Any] = dict(hook)
        return self.event(f"tool.hook.{phase}.{stage}", data["invocation_id"], data,
                          key=(data["invocation_id"], data["hook_id"]), seq=seq, time=time)

    def progress(self, progress: Progress, *, time: Optional[str] = None) -> Dict[str, Any]:
        """`tool.invocation.progress`; its `sequence` is the event's sequence."""
        data: Dict[str, Any] = dict(progress)
        data.setdefault("timestamp", time or now_rfc3339())
        data.setdefault("progress_id", "prg-" + stable_id(data["invocation_id"], str(data["sequence"]), length=24))
        return self.event("tool.invocation.progress", data["invocation_id"], data,
                          key=(data["invocation_id"],), seq=int(data["sequence"]), time=time)

    def result(self, result: Result, *, event_class: str = "tool.result.created", seq: int = 0,
               time: Optional[str] = None) -> Dict[str, Any]:
        """`tool.result.created` (or `.redacted`, or `tool.invocation.partial_result`)."""
        if event_class not in ("tool.result.created", "tool.result.redacted", "tool.invocation.partial_result"):
            raise wire.InvalidEvent(f"{event_class} does not carry a result")
        data: Dict[str, Any] = dict(result)
        data.setdefault("created_at", time or now_rfc3339())
        data.setdefault("result_id", "res-" + stable_id(data["invocation_id"], length=24))
        return self.event(event_class, data["invocation_id"], data, key=(data["invocation_id"],), seq=seq, time=time)
