"""The MCP server that mcp_client.py starts over stdio: an MCPServer (mcp 2.x's name for FastMCP) with one
tool, read_note, which fails (a tool error, isError=true) for a note that does not exist.

The mcp package traces every request it handles itself (its OpenTelemetry middleware, on by default), so
the only set-up here is the exporting TracerProvider. Spans are exported as they end, since the client
stops this process soon after its last request.

Env: as mcp_client.py passes it: the OTLP_* variables of otlp_env.py (same OTLP_RUN as the client), and
  OTLP_STATUS_FILE  where to write this process's export tally, {"exported": N, "status": 0|1}, on exit.
Stdout is the MCP stdio transport; nothing else may be printed there.
"""

import json
import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from otlp_env import Otlp

NOTES = {"welcome": "Welcome to the ledger."}


def main() -> None:
    otlp = Otlp("toolledger-mcp-server", batch=False)
    server = MCPServer("toolledger-e2e-notes")

    @server.tool()
    def read_note(name: str) -> str:
        """Returns the text of a stored note."""
        if name not in NOTES:
            raise ToolError(f"no note named {name!r}")
        return NOTES[name]

    server.run()  # stdio, until the client closes stdin
    status = otlp.finish()
    if path := os.environ.get("OTLP_STATUS_FILE"):
        with open(path, "w") as f:
            json.dump({"exported": otlp.recording.exported, "status": status}, f)


if __name__ == "__main__":
    main()
