"""The NATS side of the contract (DESIGN.md §2–3), as `libs/wire` writes it for `toolledger emit`.

    CloudEvent ─▶ binary mode: every attribute and extension in a `ce-<name>` header, its value
                  percent-encoded as the CloudEvents HTTP binding prescribes (controls, space, `"`, `%`
                  and every non-ASCII byte), `ce-datacontenttype: application/json`, the body = `data`
              ─▶ `Nats-Msg-Id` = hex SHA-256 over the length-prefixed tenant, source and id (the same
                  digest as `toolledger_wire::produce::msg_id`)
              ─▶ subject `atl.in.<tenant>.<event class>`

Ids: every id the ledger takes must be one it can serve back (docs/ingest.md, "Ids"): no control
character and at most 1,024 bytes of UTF-8. A bad id is refused here, at `emit`, rather than quarantined
as `bad_id` later where the producer cannot see it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Dict, Mapping, Tuple

#: A tenant is a NATS subject token (DESIGN.md §2); `_`-names are the ledger's own.
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
#: The largest integer I-JSON keeps exactly (RFC 7493); ingest quarantines larger ones.
MAX_SAFE_INTEGER = 2**53 - 1
#: The longest id the ledger serves (bytes of UTF-8).
MAX_ID_BYTES = 1024
#: Header value bytes that stay as they are: printable ASCII except space, `"` and `%`.
_KEEP = frozenset(b for b in range(0x21, 0x7F) if b not in (0x22, 0x25))
#: Attributes the ledger reads as ids (DESIGN.md §3, docs/ingest.md "Ids").
ID_ATTRIBUTES = ("id", "subject", "sessionid", "invocationid", "toolid")


class InvalidEvent(ValueError):
    """An event the ledger would refuse; the message says which field and why."""


def check_tenant(tenant: str) -> str:
    """Returns `tenant` if it is a valid, non-reserved tenant; raises `InvalidEvent` otherwise."""
    if not isinstance(tenant, str) or not TENANT_PATTERN.match(tenant):
        raise InvalidEvent(f"tenant {tenant!r} is not [A-Za-z0-9][A-Za-z0-9_-]{{0,63}}")
    return tenant


def check_id(where: str, value: str) -> None:
    """Raises `InvalidEvent` naming `where` when `value` is outside the ledger's id grammar."""
    if not isinstance(value, str):
        raise InvalidEvent(f"{where} must be a string")
    if len(value.encode()) > MAX_ID_BYTES:
        raise InvalidEvent(f"{where}: {len(value.encode())} bytes, over the {MAX_ID_BYTES}-byte limit for ids")
    for ch in value:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            raise InvalidEvent(f"{where}: control character U+{code:04X}")


def check_ijson(value: Any, path: str = "/data") -> None:
    """Raises `InvalidEvent` for what ingest cannot canonicalize: integers beyond ±(2^53−1), NaN and
    infinities, non-string keys."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise InvalidEvent(f"{path}: integer beyond ±(2^53−1) is not I-JSON; send it as a string")
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidEvent(f"{path}: NaN and infinities are not JSON")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidEvent(f"{path}: object key {key!r} is not a string")
            check_ijson(item, f"{path}/{key}")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_ijson(item, f"{path}/{i}")
        return
    raise InvalidEvent(f"{path}: {type(value).__name__} is not JSON")


def percent_encode(value: str) -> str:
    """A header value as the CloudEvents HTTP binding writes it (`utf8_percent_encode` with the
    escapes of `toolledger_wire::binding`)."""
    raw = value.encode()
    if all(b in _KEEP for b in raw):
        return value
    return "".join(chr(b) if b in _KEEP else f"%{b:02X}" for b in raw)


def msg_id(tenant: str, source: str, event_id: str) -> str:
    """`Nats-Msg-Id`: the digest `toolledger emit` uses, so both name an event alike."""
    h = hashlib.sha256(b"toolledger.msg-id.v1")
    for field in (tenant, source, event_id):
        raw = field.encode()
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.hexdigest()


def inbound_subject(tenant: str, event_class: str) -> str:
    """`atl.in.<tenant>.<event class>`."""
    return f"atl.in.{tenant}.{event_class}"


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON (no NaN)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def binary_message(event: Mapping[str, Any]) -> Tuple[str, Dict[str, str], bytes]:
    """`(subject, headers, body)` of a structured CloudEvent (a dict with `data`) in binary mode."""
    tenant = check_tenant(event.get("tenant"))  # type: ignore[arg-type]
    for name in ID_ATTRIBUTES:
        if name in event:
            check_id(f"/{name}", event[name])
    data = event.get("data")
    if isinstance(data, Mapping):
        for key, value in data.items():
            if isinstance(value, str) and (key.endswith("_id") or key == "retry_of"):
                check_id(f"/data/{key}", value)
    check_ijson(data)
    headers: Dict[str, str] = {}
    for name, value in event.items():
        if name == "data":
            continue
        if not isinstance(value, str):
            raise InvalidEvent(f"attribute {name} must be a string")
        headers["ce-" + name] = percent_encode(value)
    headers.setdefault("ce-datacontenttype", "application/json")
    headers["Nats-Msg-Id"] = msg_id(tenant, event["source"], event["id"])
    return inbound_subject(tenant, event["type"]), headers, dumps(data)
