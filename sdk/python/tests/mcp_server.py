"""The MCP server mcp_run.py starts over stdio: an `MCPServer` (mcp 2.x) with one tool, read_note, which
answers a tool error (isError) for a note that does not exist. Stdout is the MCP transport."""

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NOTES = {"welcome": "Welcome to the ledger."}


def main() -> None:
    server = MCPServer("notes")

    @server.tool()
    def read_note(name: str) -> str:
        """Returns the text of a stored note."""
        if name not in NOTES:
            raise ToolError(f"no note named {name!r}")
        return NOTES[name]

    server.run()


if __name__ == "__main__":
    main()
