"""A platform instrumented by hand with the OpenTelemetry Python SDK, exporting over real OTLP.

One agent turn as the GenAI semantic conventions describe it, made with the SDK's tracer API:

    invoke_agent support-agent                 INTERNAL  not a tool call
      chat gpt-4o                              CLIENT    not a tool call
      execute_tool search_docs                 INTERNAL  succeeds; arguments hold an api_key
      execute_tool fetch_url                   INTERNAL  succeeds; arguments hold an Authorization header
      execute_tool delete_file                 INTERNAL  fails: status ERROR, error.type, exception event

Every execute_tool span carries gen_ai.operation.name, gen_ai.tool.name, gen_ai.tool.call.id,
gen_ai.tool.type=function, gen_ai.tool.description, gen_ai.tool.call.arguments (a JSON string),
gen_ai.conversation.id and, when it succeeded, gen_ai.tool.call.result.

Env: OTLP_ENDPOINT, OTLP_PROTOCOL, OTLP_TOKEN, OTLP_GZIP, OTLP_TIMEOUT, OTLP_RUN, OTLP_DUMP (otlp_env.py).

Stdout, one JSON line, after the export:
  {"run", "conversation_id", "ignored": [{"name", "trace_id", "span_id"}],
   "tool_calls": [{"call_id", "tool_name", "outcome": "succeeded"|"failed", "arguments", "trace_id", "span_id"}]}
Exit status 0 only if every span was exported (see otlp_env.Otlp.finish).
"""

import json
import sys

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from otlp_env import RUN, Otlp, hex_ids

CONVERSATION = f"conv-sdk-{RUN}"
SECRET_KEY = "sk-live-SECRETSECRETSECRET123"
SECRET_BEARER = "Bearer ghp-SECRETTOKENSECRETTOKEN456"

# (tool name, description, arguments, result or None for a failure)
CALLS = [
    ("search_docs", "Full-text search over the product docs.",
     {"query": "rotate credentials", "api_key": SECRET_KEY}, {"hits": 2, "top": "docs/security.md"}),
    ("fetch_url", "Fetches a URL with the given headers.",
     {"url": "https://example.invalid/status", "headers": {"Authorization": SECRET_BEARER}}, "200 OK"),
    ("delete_file", "Deletes a file in the workspace.", {"path": "/etc/passwd"}, None),
]


def main() -> int:
    otlp = Otlp("toolledger-sdk-client")
    tracer = trace.get_tracer("toolledger.e2e.sdk_client")
    out = {"run": RUN, "conversation_id": CONVERSATION, "ignored": [], "tool_calls": []}

    with tracer.start_as_current_span(
        "invoke_agent support-agent",
        kind=SpanKind.INTERNAL,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support-agent",
                    "gen_ai.conversation.id": CONVERSATION},
    ) as agent:
        out["ignored"].append({"name": "invoke_agent support-agent", **hex_ids(agent)})
        with tracer.start_as_current_span(
            "chat gpt-4o",
            kind=SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                        "gen_ai.request.model": "gpt-4o", "gen_ai.conversation.id": CONVERSATION},
        ) as chat:
            out["ignored"].append({"name": "chat gpt-4o", **hex_ids(chat)})

        for n, (name, description, arguments, result) in enumerate(CALLS, 1):
            call_id = f"call-{RUN}-{n}"
            # The SDK would record the exception and set ERROR itself; doing it explicitly shows the shape.
            with tracer.start_as_current_span(
                f"execute_tool {name}",
                kind=SpanKind.INTERNAL,
                record_exception=False,
                set_status_on_exception=False,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.type": "function",
                    "gen_ai.tool.description": description,
                    "gen_ai.tool.call.arguments": json.dumps(arguments),
                    "gen_ai.conversation.id": CONVERSATION,
                },
            ) as span:
                if result is None:
                    error = PermissionError(f"refusing to delete {arguments['path']}")
                    span.record_exception(error)
                    span.set_attribute("error.type", type(error).__qualname__)
                    span.set_status(Status(StatusCode.ERROR, str(error)))
                else:
                    span.set_attribute("gen_ai.tool.call.result", result if isinstance(result, str) else json.dumps(result))
            out["tool_calls"].append({
                "call_id": call_id, "tool_name": name, "arguments": arguments,
                "outcome": "failed" if result is None else "succeeded", **hex_ids(span),
            })

    status = otlp.finish()
    print(json.dumps(out), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
