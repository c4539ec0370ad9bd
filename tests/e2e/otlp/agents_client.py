"""The OpenAI Agents SDK running an agent with two function tools, instrumented by a published
instrumentation that exports over real OTLP. No network: the model is scripted, and the SDK's own trace
export to OpenAI is replaced by the instrumentation's processor.

The scripted model answers three turns: call lookup_order (succeeds; its arguments hold an api_key), call
refund_order (raises, so the SDK marks the tool span failed and tells the model), then a final message.
Each turn is recorded the way the SDK's own chat-completions model does it (a generation span holding the
messages and the tool calls with their call ids), which the instrumentation turns into an LLM span.

Env: OTLP_ENDPOINT, OTLP_PROTOCOL, OTLP_TOKEN, OTLP_GZIP, OTLP_TIMEOUT, OTLP_RUN, OTLP_DUMP (otlp_env.py), and
  OTLP_INSTRUMENTATION  openinference (default): openinference-instrumentation-openai-agents, TOOL spans
                        with tool.name / input.value / output.value; the conversation is set with
                        OpenInference's using_session (session.id).
                        genai: opentelemetry-instrumentation-genai-openai-agents, GenAI execute_tool spans
                        (content capture defaults to on here: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY).

Stdout, one JSON line, after the export:
  {"run", "instrumentation", "conversation_id", "final_output",
   "tool_calls": [{"call_id", "tool_name", "arguments", "outcome": "succeeded"|"failed"}]}
The call ids are the ones the scripted model chose. The SDK keeps no call id on its function spans, so
neither instrumentation can put one on its tool span; OpenInference has it on the LLM span's tool_calls.
Exit status 0 only if every span was exported.
"""

import asyncio
import json
import os
import sys

os.environ["OPENAI_API_KEY"] = "sk-offline-dummy"  # never used: the model below is local
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

from agents import Agent, Model, ModelResponse, RunConfig, Runner, function_tool, generation_span, Usage
from agents.tracing import get_trace_provider
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from otlp_env import RUN, Otlp

INSTRUMENTATION = os.environ.get("OTLP_INSTRUMENTATION", "openinference")
CONVERSATION = f"conv-agents-{RUN}"
SECRET_KEY = "sk-live-SECRETSECRETSECRET123"
CALLS = [  # what the scripted model asks for, in order
    {"call_id": f"call-{RUN}-lookup", "tool_name": "lookup_order",
     "arguments": {"order_id": "A-1001", "api_key": SECRET_KEY}, "outcome": "succeeded"},
    {"call_id": f"call-{RUN}-refund", "tool_name": "refund_order",
     "arguments": {"order_id": "A-1001", "amount_cents": 4200}, "outcome": "failed"},
]
FINAL = "Order A-1001 was found, but the refund failed; a human will follow up."


@function_tool
def lookup_order(order_id: str, api_key: str) -> dict:
    """Looks an order up in the shop's back office."""
    return {"order_id": order_id, "status": "delivered", "total_cents": 4200}


@function_tool
def refund_order(order_id: str, amount_cents: int) -> str:
    """Refunds part or all of an order."""
    raise RuntimeError(f"payment gateway unavailable for {order_id}")


class ScriptedModel(Model):
    """Answers from the script above; which turn it is follows from the tool outputs already in the input."""

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema,
                           handoffs, tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
        turn = sum(1 for item in input if isinstance(item, dict) and item.get("type") == "function_call_output")
        if turn < len(CALLS):
            call = CALLS[turn]
            args = json.dumps(call["arguments"])
            output = [ResponseFunctionToolCall(id=f"fc-{turn}", call_id=call["call_id"], name=call["tool_name"],
                                               arguments=args, type="function_call", status="completed")]
            message = {"role": "assistant", "tool_calls": [{"id": call["call_id"], "type": "function",
                                                           "function": {"name": call["tool_name"], "arguments": args}}]}
        else:
            output = [ResponseOutputMessage(id="msg-final", role="assistant", status="completed", type="message",
                                            content=[ResponseOutputText(text=FINAL, type="output_text", annotations=[])])]
            message = {"role": "assistant", "content": FINAL}
        with generation_span(model="scripted-model", disabled=tracing.is_disabled()) as span:
            if tracing.include_data():
                span.span_data.input = [{"role": "user", "content": input}] if isinstance(input, str) else input
                span.span_data.output = [message]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


def instrument(otlp: Otlp):
    """Installs the chosen instrumentation as the Agents SDK's only trace processor; returns a context
    manager to run the agent in."""
    if INSTRUMENTATION == "openinference":
        from openinference.instrumentation import using_session
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        OpenAIAgentsInstrumentor().instrument(tracer_provider=otlp.provider, exclusive_processor=True)
        scope = using_session(CONVERSATION)
    elif INSTRUMENTATION == "genai":
        from contextlib import nullcontext

        from opentelemetry.instrumentation.genai.openai_agents import OpenAIAgentsInstrumentor

        OpenAIAgentsInstrumentor().instrument(tracer_provider=otlp.provider, disable_openai_trace_export=True)
        scope = nullcontext()
    else:
        sys.exit(f"OTLP_INSTRUMENTATION must be openinference or genai, not {INSTRUMENTATION!r}")
    # Nothing may reach OpenAI's trace backend: only the instrumentation's processor is left.
    processors = get_trace_provider()._multi_processor._processors
    assert all(type(p).__module__.split(".")[0] in ("openinference", "opentelemetry") for p in processors), processors
    return scope


async def main() -> int:
    otlp = Otlp(f"toolledger-agents-client-{INSTRUMENTATION}")
    with instrument(otlp):
        agent = Agent(name="support-agent", instructions="Help with orders.", model=ScriptedModel(),
                      tools=[lookup_order, refund_order])
        result = await Runner.run(agent, "Refund order A-1001.", run_config=RunConfig(
            workflow_name="support workflow", group_id=CONVERSATION, trace_include_sensitive_data=True))
    status = otlp.finish()
    print(json.dumps({"run": RUN, "instrumentation": INSTRUMENTATION, "conversation_id": CONVERSATION,
                      "final_output": result.final_output, "tool_calls": CALLS}), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
