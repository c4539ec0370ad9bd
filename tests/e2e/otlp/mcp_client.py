"""A real MCP client and server from the Python `mcp` package (2.x) over stdio, traced by the package's own
OpenTelemetry support and exported over real OTLP from both processes.

The client starts mcp_server.py as a subprocess (passing the OTLP_* environment on, with its own OTLP_RUN)
and calls tools/call read_note twice: once for a note that exists (succeeds) and once for one that does
not (the server answers isError=true). As an agent platform would, it wraps each call in a GenAI
execute_tool span, so one invocation is three nested spans across two processes:

    invoke_agent notes-agent                     INTERNAL  client   (not a tool call)
      MCP send server/discover, ...              CLIENT    client   mcp's own, one per request (not tools)
      execute_tool read_note                     INTERNAL  client   ours: call id, arguments, result
        MCP send tools/call read_note            CLIENT    client   mcp's own: mcp.method.name, jsonrpc.request.id
          tools/call read_note                   SERVER    server   mcp's own, parented through params._meta

Env: OTLP_ENDPOINT, OTLP_PROTOCOL, OTLP_TOKEN, OTLP_GZIP, OTLP_TIMEOUT, OTLP_RUN, OTLP_DUMP (otlp_env.py).

Stdout, one JSON line, after both processes exported:
  {"run", "conversation_id", "server_exported": N,
   "tool_calls": [{"call_id", "tool_name", "arguments", "outcome": "succeeded"|"failed", "result",
                   "trace_id", "span_id"}]}       (trace_id/span_id: the execute_tool span)
Exit status 0 only if every span of both processes was exported.
"""

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from otlp_env import RUN, Otlp, hex_ids

CONVERSATION = f"conv-mcp-{RUN}"
SERVER = Path(__file__).with_name("mcp_server.py")
CALLS = [({"name": "welcome"}, "succeeded"), ({"name": "missing"}, "failed")]


async def run(tracer, status_file: str) -> list:
    env = {k: v for k, v in os.environ.items() if k.startswith("OTLP_")}
    env |= {"OTLP_RUN": RUN, "OTLP_STATUS_FILE": status_file}
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)], env=env)
    calls = []
    with tracer.start_as_current_span(
        "invoke_agent notes-agent",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "notes-agent",
                    "gen_ai.conversation.id": CONVERSATION},
    ):
        async with Client(params) as client:
            for n, (arguments, outcome) in enumerate(CALLS, 1):
                call_id = f"call-{RUN}-{n}"
                with tracer.start_as_current_span(
                    "execute_tool read_note",
                    kind=SpanKind.INTERNAL,
                    attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_note",
                                "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "extension",
                                "gen_ai.tool.call.arguments": json.dumps(arguments),
                                "gen_ai.conversation.id": CONVERSATION},
                ) as span:
                    result = await client.call_tool("read_note", arguments)
                    text = " ".join(c.text for c in result.content if getattr(c, "text", None))
                    if result.is_error:
                        span.set_attribute("error.type", "tool_error")
                        span.set_status(Status(StatusCode.ERROR, text))
                    else:
                        span.set_attribute("gen_ai.tool.call.result", text)
                got = "failed" if result.is_error else "succeeded"
                assert got == outcome, f"read_note {arguments}: expected {outcome}, got {got}: {text}"
                calls.append({"call_id": call_id, "tool_name": "read_note", "arguments": arguments,
                              "outcome": outcome, "result": text, **hex_ids(span)})
    return calls


def main() -> int:
    otlp = Otlp("toolledger-mcp-client")
    tracer = trace.get_tracer("toolledger.e2e.mcp_client")
    with tempfile.TemporaryDirectory() as tmp:
        status_file = os.path.join(tmp, "server-status.json")
        calls = asyncio.run(run(tracer, status_file))
        try:
            server = json.loads(Path(status_file).read_text())
        except (OSError, ValueError):
            server = {"exported": 0, "status": 1}
            print("mcp server wrote no export status", file=sys.stderr)
    status = otlp.finish() or server["status"]
    print(json.dumps({"run": RUN, "conversation_id": CONVERSATION, "server_exported": server["exported"],
                      "tool_calls": calls}), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
