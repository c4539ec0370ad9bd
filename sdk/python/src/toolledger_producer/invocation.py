"""The invocation helper: one tool call's lifecycle around a block of code.

    with producer.invocation(tool, input) as inv:        # tool.declared (once per producer)
        ...                                               # tool.invocation.planned, .started
        inv.progress("half way", percent=50)              # tool.invocation.progress (sequence 1, 2, …)
        inv.result({"rows": 3})                           # remembered for the end
    # no exception        ─▶ tool.invocation.succeeded + tool.result.created (status succeeded)
    # TimeoutError        ─▶ tool.invocation.timed_out (error_class timeout)
    # CancelledError, KeyboardInterrupt ─▶ tool.invocation.canceled (error_class canceled)
    # any other exception ─▶ tool.invocation.failed (error_class from the exception) + an error result
    # the exception is re-raised; the helper never swallows it.

`start=False` keeps the call planned so permission and pre-hook events come first, in the lifecycle's
order; call `inv.start()` when it runs. `async with` works the same. `@producer_tool(producer, tool)`
wraps a function (sync or async) so each call is an invocation with its keyword arguments as input.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from .events import Invocation, Tool, ToolError, now_rfc3339

#: The spec's error classes for Python's own exceptions (first match wins; subclasses first).
ERROR_CLASSES = (
    (asyncio.CancelledError, "canceled"),
    (KeyboardInterrupt, "canceled"),
    (TimeoutError, "timeout"),
    (asyncio.TimeoutError, "timeout"),
    (PermissionError, "permission_denied"),
    (ConnectionError, "dependency_unavailable"),
    (MemoryError, "result_too_large"),
)


class ToolFailure(Exception):
    """Raise from inside an invocation to choose the error class (and code) the ledger records."""

    def __init__(self, message: str, error_class: str = "execution_failed", error_code: Optional[str] = None,
                 recoverability: Optional[str] = None):
        super().__init__(message)
        self.error_class = error_class
        self.error_code = error_code
        self.recoverability = recoverability


def error_of(exc: BaseException) -> ToolError:
    """The tool error an exception stands for."""
    if isinstance(exc, ToolFailure):
        error: ToolError = {"error_class": exc.error_class, "message": str(exc)}
        if exc.error_code:
            error["error_code"] = exc.error_code
        if exc.recoverability:
            error["recoverability"] = exc.recoverability
        return error
    error_class = next((c for t, c in ERROR_CLASSES if isinstance(exc, t)), "execution_failed")
    return {
        "error_class": error_class,
        "error_code": f"python:{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc) or type(exc).__name__,
    }


class InvocationScope:
    """One invocation's events, emitted through `producer` in lifecycle order."""

    def __init__(
        self,
        producer,
        tool: Tool,
        input: Any = None,
        *,
        invocation_id: Optional[str] = None,
        session_id: Optional[str] = None,
        native_call_id: Optional[str] = None,
        external_mappings: Optional[List[Dict[str, Any]]] = None,
        actor_ref: Optional[str] = None,
        retry_of: Optional[str] = None,
        attempt: Optional[int] = None,
        start: bool = True,
        declare: bool = True,
    ):
        self.producer = producer
        self.tool = tool
        self.invocation_id = invocation_id or f"inv-{uuid.uuid4().hex}"
        self.input = input
        self.auto_start = start
        self.declare = declare
        self._snapshot: Invocation = {"invocation_id": self.invocation_id, "tool_id": tool.tool_id}
        for key, value in (("session_id", session_id or producer.events.session_id), ("native_call_id", native_call_id),
                           ("external_mappings", external_mappings), ("actor_ref", actor_ref),
                           ("retry_of", retry_of), ("attempt", attempt)):
            if value is not None:
                self._snapshot[key] = value  # type: ignore[literal-required]
        if input is not None:
            self._snapshot["model_input"] = input
        self._progress = 0
        self._result: Optional[Dict[str, Any]] = None
        self._started = False
        self._done = False
        self._t0 = 0.0
        #: Wall time of the call in milliseconds, once it ended.
        self.duration_ms: Optional[float] = None

    # ── lifecycle ────────────────────────────────────────────────────────────────────────────────

    def _emit(self, event_class: str, **fields: Any) -> None:
        snapshot = dict(self._snapshot, **fields)
        self.producer.emit(self.producer.events.invocation(event_class, snapshot))  # type: ignore[arg-type]

    def __enter__(self) -> "InvocationScope":
        if self.declare:
            self.producer.declare(self.tool)
        self._snapshot["created_at"] = now_rfc3339()
        self._emit("tool.invocation.planned")
        if self.auto_start:
            self.start()
        return self

    def start(self, call_input: Any = None) -> None:
        """`tool.invocation.started` (running), with `call_input` (default: the model input)."""
        if self._started:
            return
        self._started = True
        self._t0 = time.monotonic()
        fields: Dict[str, Any] = {"started_at": now_rfc3339()}
        call = call_input if call_input is not None else self.input
        if call is not None:
            fields["call_input"] = call
        self._emit("tool.invocation.started", **fields)

    def progress(self, message: Optional[str] = None, *, percent: Optional[float] = None,
                 status: str = "running", **fields: Any) -> None:
        """`tool.invocation.progress` with the next sequence number."""
        self._progress += 1
        progress: Dict[str, Any] = {"invocation_id": self.invocation_id, "tool_id": self.tool.tool_id,
                                    "sequence": self._progress, "status": status}
        if message is not None:
            progress["message"] = message
        if percent is not None:
            progress["percent"] = percent
        if self._started:
            progress["elapsed_ms"] = int((time.monotonic() - self._t0) * 1000)
        progress.update(fields)
        self.producer.emit(self.producer.events.progress(progress))  # type: ignore[arg-type]

    def request_permission(self, permission_input: Any = None, *, decision_id: Optional[str] = None,
                           **fields: Any) -> str:
        """`tool.permission.requested`; returns the decision id the decision must carry."""
        decision_id = decision_id or f"dec-{uuid.uuid4().hex}"
        request: Dict[str, Any] = {"decision_id": decision_id, "invocation_id": self.invocation_id,
                                   "tool_id": self.tool.tool_id,
                                   "permission_input": permission_input if permission_input is not None else self.input}
        request.update(fields)
        self.producer.emit(self.producer.events.permission_requested(request))  # type: ignore[arg-type]
        return decision_id

    def decide(self, behavior: str, *, decision_id: Optional[str] = None, reason: Optional[Dict[str, Any]] = None,
               **fields: Any) -> str:
        """`tool.permission.decided` (allow | ask | deny | passthrough); returns its decision id."""
        decision_id = decision_id or f"dec-{uuid.uuid4().hex}"
        decision: Dict[str, Any] = {"decision_id": decision_id, "invocation_id": self.invocation_id,
                                    "behavior": behavior}
        if reason is not None:
            decision["reason"] = reason
        decision.update(fields)
        self.producer.emit(self.producer.events.permission_decided(decision))  # type: ignore[arg-type]
        return decision_id

    def hook(self, phase: str, stage: str, hook_id: str, **fields: Any) -> None:
        """`tool.hook.<pre|post>.<started|completed>` for hook `hook_id`."""
        hook: Dict[str, Any] = {"hook_id": hook_id, "invocation_id": self.invocation_id,
                                "tool_id": self.tool.tool_id,
                                "hook_event": "pre_tool_use" if phase == "pre" else "post_tool_use"}
        hook.update(fields)
        self.producer.emit(self.producer.events.hook(phase, stage, hook))  # type: ignore[arg-type]

    def result(self, value: Any = None, *, content: Optional[List[Dict[str, Any]]] = None, **fields: Any) -> None:
        """The call's result, emitted as `tool.result.created` when the block ends: `value` as
        `structured_content` (a `str` becomes a text block), or MCP-style `content` blocks."""
        result: Dict[str, Any] = {}
        if isinstance(value, str) and content is None:
            result["content"] = [{"type": "text", "text": value}]
        elif value is not None:
            result["structured_content"] = value
        if content is not None:
            result["content"] = content
        result.update(fields)
        self._result = result

    def _finish(self, exc: Optional[BaseException]) -> None:
        if self._done:
            return
        self._done = True
        ended = now_rfc3339()
        if self._started:
            self.duration_ms = (time.monotonic() - self._t0) * 1000
        if exc is None:
            self._emit("tool.invocation.succeeded", ended_at=ended)
            status, is_error, error = "succeeded", False, None
        else:
            error = error_of(exc)
            event_class, status = {
                "timeout": ("tool.invocation.timed_out", "timed_out"),
                "canceled": ("tool.invocation.canceled", "canceled"),
            }.get(error["error_class"], ("tool.invocation.failed", "failed"))
            self._emit(event_class, ended_at=ended, error=error)
            is_error = True
        if self._result is not None or exc is not None:
            result: Dict[str, Any] = {"invocation_id": self.invocation_id, "tool_id": self.tool.tool_id,
                                      "status": status, "is_error": is_error}
            if error is not None:
                result["error"] = error
                result.setdefault("content", [{"type": "text", "text": error["message"]}])
            result.update(self._result or {})
            self.producer.emit(self.producer.events.result(result))  # type: ignore[arg-type]

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._finish(exc)
        return False

    async def __aenter__(self) -> "InvocationScope":
        return self.__enter__()

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        self._finish(exc)
        return False


def producer_tool(producer, tool: Tool, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: every call of the function is an invocation of `tool`, its keyword arguments
    (and positional ones as `args`) the input and its return value the result."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def input_of(args: tuple, kwargs: dict) -> Any:
            return dict(kwargs, **({"args": list(args)} if args else {}))

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with InvocationScope(producer, tool, input_of(args, kwargs), **options) as inv:
                    value = await fn(*args, **kwargs)
                    inv.result(value)
                    return value
            return run_async

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with InvocationScope(producer, tool, input_of(args, kwargs), **options) as inv:
                value = fn(*args, **kwargs)
                inv.result(value)
                return value
        return run

    return wrap
