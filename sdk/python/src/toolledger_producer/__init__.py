"""toolledger-producer: emit Agent Tool lifecycle events to a toolledger ledger without losing one.

    from toolledger_producer import Producer, Tool

    producer = Producer(tenant="acme", spool_dir="/var/spool/agent", servers="nats://127.0.0.1:4222")
    search = Tool(tool_id="web.search", name="search", namespace="web", sensitive_fields=["api_key"])
    with producer.invocation(search, {"q": "ledger", "api_key": key}) as inv:
        inv.result(run_search(...))
    producer.close()

Modules: `events` (typed builders, stable ids, trace context), `wire` (binary-mode CloudEvents over
NATS, the checks ingest applies), `spool` (the durable spool, docs/sdk/spool.md), `producer` (emit and
the background sender), `invocation` (the lifecycle helper), `mcp` (the `mcp` client wrapper).
"""

from .events import (
    SCHEMA_VERSION,
    EventBuilder,
    Hook,
    Invocation,
    PermissionDecision,
    PermissionRequest,
    Progress,
    Result,
    Tool,
    ToolError,
)
from .invocation import InvocationScope, ToolFailure, error_of, producer_tool
from .producer import Producer
from .spool import Spool, SpoolError, SpoolFull
from .wire import InvalidEvent

__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "EventBuilder",
    "Hook",
    "InvalidEvent",
    "Invocation",
    "InvocationScope",
    "PermissionDecision",
    "PermissionRequest",
    "Producer",
    "Progress",
    "Result",
    "Spool",
    "SpoolError",
    "SpoolFull",
    "Tool",
    "ToolError",
    "ToolFailure",
    "error_of",
    "producer_tool",
]
