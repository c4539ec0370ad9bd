"""A real `mcp` 2.x client and server over stdio, every tools/call recorded by `RecordedSession`.

Lists the server's tools (each declared), calls read_note for a note that exists (succeeds) and one
that does not (isError), flushes the producer and prints one JSON line:
  {"calls": [{"invocation_id", "arguments", "outcome", "text"}], "metrics": {...}}

Usage: mcp_run.py NATS_URL SPOOL TENANT SESSION_ID
"""

import asyncio
import json
import sys
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from toolledger_producer import Producer
from toolledger_producer.mcp import RecordedSession

SERVER = Path(__file__).with_name("mcp_server.py")
CALLS = [({"name": "welcome"}, "succeeded"), ({"name": "missing"}, "failed")]


async def run(producer: Producer, session_id: str) -> list:
    calls = []
    async with Client(StdioServerParameters(command=sys.executable, args=[str(SERVER)])) as client:
        recorded = RecordedSession(client, producer, session_id=session_id)
        listed = await recorded.list_tools()
        assert [t.name for t in listed.tools] == ["read_note"], listed
        for arguments, outcome in CALLS:
            result = await recorded.call_tool("read_note", arguments)
            text = " ".join(c.text for c in result.content if getattr(c, "text", None))
            got = "failed" if result.is_error else "succeeded"
            assert got == outcome, f"read_note {arguments}: expected {outcome}, got {got}: {text}"
            calls.append({"invocation_id": recorded.last_invocation_id, "arguments": arguments,
                          "outcome": outcome, "text": text})
    return calls


def main() -> int:
    url, spool, tenant, session_id = sys.argv[1:5]
    producer = Producer(tenant=tenant, spool_dir=spool, servers=url, source="urn:toolledger-producer:mcp-e2e",
                        session_id=session_id)
    calls = asyncio.run(run(producer, session_id))
    drained = producer.flush(timeout=60)
    metrics = producer.metrics()
    producer.close()
    print(json.dumps({"calls": calls, "metrics": metrics}), flush=True)
    return 0 if drained else 1


if __name__ == "__main__":
    sys.exit(main())
