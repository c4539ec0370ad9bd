"""Independent producers for the wire tests: publish one event three ways to a real nats-server.

1. structured mode, serialized by the CloudEvents Python SDK (`to_structured_event`);
2. binary mode, with `ce-*` headers written by hand and percent-encoded as the CloudEvents HTTP
   binding prescribes (no toolledger code involved);
3. the spec's agenttool-event envelope as a plain JSON body.

Usage: produce.py NATS_URL TENANT. Prints one line per publish ack: `<mode> <stream> <seq>`.
"""

import asyncio
import json
import sys
from datetime import datetime, timezone
from urllib.parse import quote

import nats
from cloudevents.core.bindings.http import to_structured_event
from cloudevents.core.v1.event import CloudEvent

CLASS = "tool.invocation.started"

ATTRIBUTES = {
    "id": "ev-py-1",
    "source": "agent://runner/ü 1",
    "type": CLASS,
    "subject": "inv 42 \"quoted\" 100%",
    "time": datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=timezone.utc),
    "datacontenttype": "application/json",
    "invocationid": "inv-42",
    "sessionid": "séance-7",
}
DATA = {
    "invocation_id": "inv-42",
    "status": "running",
    "attempt": 1,
    "ratio": 0.1,
    "big": 1e30,
    "text": "line1\nline2 \u20ac",
}


def percent_encode(value: str) -> str:
    # Keep printable ASCII except space, '"' and '%'; encode everything else as UTF-8 octets.
    safe = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')
    return quote(value, safe=safe, encoding="utf-8")


def binary_headers(attributes: dict, tenant: str) -> dict:
    headers = {"ce-specversion": "1.0", "ce-tenant": tenant}
    for name, value in attributes.items():
        if isinstance(value, datetime):
            value = value.isoformat().replace("+00:00", "Z")
        # Mixed case on purpose: names are case-insensitive.
        headers["Ce-" + name] = percent_encode(str(value))
    return headers


async def main() -> None:
    url, tenant = sys.argv[1], sys.argv[2]
    subject = f"atl.in.{tenant}.{CLASS}"
    nc = await nats.connect(url)
    js = nc.jetstream()

    event = CloudEvent(dict(ATTRIBUTES, tenant=tenant), DATA)
    message = to_structured_event(event)
    ack = await js.publish(subject, message.body, headers=dict(message.headers))
    print("structured", ack.stream, ack.seq, flush=True)

    ack = await js.publish(subject, json.dumps(DATA).encode(), headers=binary_headers(ATTRIBUTES, tenant))
    print("binary", ack.stream, ack.seq, flush=True)

    envelope = {
        "schema_version": "0.2.0",
        "event_id": ATTRIBUTES["id"],
        "event_type": CLASS,
        "source": ATTRIBUTES["source"],
        "subject": ATTRIBUTES["subject"],
        "time": "2026-01-02T03:04:05.123Z",
        "invocation_id": "inv-42",
        "data": dict(DATA, session_id="séance-7"),
        "trace_refs": [{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}],
    }
    ack = await js.publish(subject, json.dumps(envelope).encode())
    print("agenttool-event", ack.stream, ack.seq, flush=True)
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
