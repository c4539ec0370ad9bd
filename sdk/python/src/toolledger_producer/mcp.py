"""Record every MCP `tools/call` made through an `mcp` (2.x) `ClientSession` or `Client`.

    recorded = RecordedSession(client_or_session, producer, session_id="sess-1")
    tools = await recorded.list_tools()        # tool.declared per tool (as `import --format mcp` maps)
    result = await recorded.call_tool("read_note", {"name": "welcome"})
      ─▶ the request is given its JSON-RPC id ─▶ tool.invocation.planned + .started, carrying
         native_call_id = the JSON-RPC id and external_mappings [{source: mcp, method: tools/call,
         tool_name, jsonrpc_request_id, mcp_session_id, server_id, mcp_protocol_version, _meta}]
      ─▶ result, isError false ─▶ succeeded + tool.result.created (content, structured_content, _meta)
         result, isError true  ─▶ failed (execution_failed, code mcp:isError) + an error result
         error response        ─▶ failed (invalid_arguments for -32602, timeout for -32001 → timed_out,
                                  else execution_failed; code jsonrpc:<code>)
         cancellation          ─▶ canceled

The native ids are those the MCP import adapter keeps (docs/import.md), so a call recorded live and
the same call imported from a JSON-RPC log carry the same mapping fields. The tool id is
`mcp:<server>:<tool name>`, the server being `server_id` or the server's own name from `initialize`.

The JSON-RPC id: `mcp` allocates it inside its dispatcher and exposes it nowhere, so the wrapper
allocates it there itself (the dispatcher's own counter, the same id the request would have had) and
hands it to the request (`opts["request_id"]`, the dispatcher's supported way to choose an id). This
reaches into `mcp`'s private dispatcher; with an `mcp` that lacks it, calls are still recorded, without
`jsonrpc_request_id`.
"""

from __future__ import annotations

import contextvars
import uuid
from typing import Any, Callable, Dict, List, Optional

from .events import Tool
from .invocation import InvocationScope

_ON_REQUEST: contextvars.ContextVar[Optional[Callable[[Any, Dict[str, Any]], None]]] = contextvars.ContextVar(
    "toolledger_mcp_on_request", default=None
)

#: JSON-RPC error codes with an error class of their own.
_CODE_CLASSES = {-32602: "invalid_arguments", -32001: "timeout", -32601: "unknown_tool"}


def _instrument(session: Any) -> bool:
    """Wraps `session`'s dispatcher once so a `tools/call` reports its JSON-RPC id to the
    recording call; False when this `mcp` has no dispatcher to wrap."""
    dispatcher = getattr(session, "_dispatcher", None)
    if dispatcher is None or not hasattr(dispatcher, "_allocate_id"):
        return False
    if getattr(dispatcher, "_toolledger_instrumented", False):
        return True
    original = dispatcher.send_raw_request

    async def send_raw_request(method, params, opts=None, **kwargs):
        on_request = _ON_REQUEST.get()
        if method == "tools/call" and on_request is not None:
            opts = dict(opts or {})
            if opts.get("request_id") is None:
                request_id = dispatcher._allocate_id()
                while request_id in dispatcher._pending:
                    request_id = dispatcher._allocate_id()
                opts["request_id"] = request_id
            on_request(opts["request_id"], dict(params or {}))
        return await original(method, params, opts, **kwargs)

    dispatcher.send_raw_request = send_raw_request
    dispatcher._toolledger_instrumented = True
    return True


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, mode="json", exclude_none=True)
    return value


class RecordedSession:
    """Wraps an `mcp` `ClientSession` or `Client`: `call_tool` and `list_tools` are recorded, every
    other attribute is the wrapped object's."""

    def __init__(self, target: Any, producer, *, server_id: Optional[str] = None,
                 session_id: Optional[str] = None, mcp_session_id: Optional[str] = None):
        self._target = target
        self._producer = producer
        self._server_id = server_id
        self._session_id = session_id
        self._mcp_session_id = mcp_session_id
        self._tools: Dict[str, Tool] = {}
        #: The invocation id of the latest `call_tool`, to find it in the ledger.
        self.last_invocation_id: Optional[str] = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def _session(self) -> Any:
        session = getattr(self._target, "session", None)
        return session if session is not None and not callable(session) else self._target

    def _server(self) -> str:
        if self._server_id:
            return self._server_id
        info = getattr(self._session(), "server_info", None)
        return getattr(info, "name", None) or "mcp"

    def _tool(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            server = self._server()
            tool = Tool(tool_id=f"mcp:{server}:{name}", name=name, namespace=server, tool_kind="mcp_tool",
                        extra={"external_mappings": [self._mapping(name)]})
            self._tools[name] = tool
        return tool

    def _mapping(self, name: str) -> Dict[str, Any]:
        mapping: Dict[str, Any] = {"source": "mcp", "method": "tools/call", "tool_name": name,
                                   "server_id": self._server()}
        if self._mcp_session_id:
            mapping["mcp_session_id"] = self._mcp_session_id
        return mapping

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        """`tools/list`, each tool declared (description, inputSchema, outputSchema, annotations)."""
        listed = await self._target.list_tools(*args, **kwargs)
        server = self._server()
        for tool in getattr(listed, "tools", []):
            extra: Dict[str, Any] = {"external_mappings": [self._mapping(tool.name)]}
            if getattr(tool, "title", None):
                extra["title"] = tool.title
            if getattr(tool, "annotations", None) is not None:
                extra["annotations"] = _dump(tool.annotations)
            declared = Tool(
                tool_id=f"mcp:{server}:{tool.name}", name=tool.name, namespace=server, tool_kind="mcp_tool",
                description=tool.description or "", input_schema=_dump(getattr(tool, "input_schema", None)),
                output_schema=_dump(getattr(tool, "output_schema", None)), extra=extra,
            )
            self._tools[tool.name] = declared
            self._producer.declare(declared)
        return listed

    async def call_tool(self, name: str, arguments: Optional[Dict[str, Any]] = None, *args: Any, **kwargs: Any) -> Any:
        """`tools/call`, recorded from the request to the result."""
        session = self._session()
        _instrument(session)
        tool = self._tool(name)
        scope = InvocationScope(self._producer, tool, arguments or {}, session_id=self._session_id,
                                invocation_id=f"mcp-{uuid.uuid4().hex}", start=False)
        entered: List[Any] = []
        self.last_invocation_id = scope.invocation_id

        def enter(request_id: Any, params: Dict[str, Any]) -> None:
            if entered:
                return  # a resend of the same call (input_required rounds, header refresh)
            mapping = self._mapping(name)
            if request_id is not None:
                scope._snapshot["native_call_id"] = str(request_id)
                mapping["jsonrpc_request_id"] = str(request_id)
            version = getattr(session, "protocol_version", None)
            if isinstance(version, str):
                mapping["mcp_protocol_version"] = version
            if params.get("_meta"):
                mapping["_meta"] = params["_meta"]
            scope._snapshot["external_mappings"] = [mapping]
            entered.append(request_id)
            scope.__enter__()
            scope.start()

        token = _ON_REQUEST.set(enter)
        try:
            result = await self._target.call_tool(name, arguments, *args, **kwargs)
        except BaseException as e:
            if not entered:
                enter(None, {})
            code = getattr(e, "code", None)
            if isinstance(code, int):
                from .invocation import ToolFailure

                failure = ToolFailure(getattr(e, "message", str(e)), _CODE_CLASSES.get(code, "execution_failed"),
                                      f"jsonrpc:{code}")
                scope._finish(failure)
            else:
                scope._finish(e)
            raise
        finally:
            _ON_REQUEST.reset(token)
        if not entered:
            enter(None, {})
        request_id = entered[0]
        content = [_dump(block) for block in getattr(result, "content", []) or []]
        is_error = bool(getattr(result, "is_error", False))
        outcome: Dict[str, Any] = {"content": content,
                                   "external_mapping": {"source": "mcp", "isError": is_error}}
        if request_id is not None:
            outcome["external_mapping"]["jsonrpc_request_id"] = str(request_id)
        structured = getattr(result, "structured_content", None)
        if structured is not None:
            outcome["structured_content"] = structured
        meta = getattr(result, "meta", None)
        if meta:
            outcome["_meta"] = _dump(meta)
        scope.result(**outcome)
        if is_error:
            text = next((b.get("text") for b in content if isinstance(b, dict) and b.get("text")), "tool error")
            from .invocation import ToolFailure

            scope._finish(ToolFailure(text, "execution_failed", "mcp:isError"))
        else:
            scope._finish(None)
        return result
