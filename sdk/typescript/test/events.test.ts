// Builders, stable ids, the checks at emit, trace context and the invocation helper (no NATS).
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

import { ROOT_CONTEXT, context, trace, type Context, type ContextManager } from "@opentelemetry/api";

import { EventBuilder, InvalidEvent, Producer, ToolFailure, binaryMessage, errorOf, type Tool } from "../src/index.js";
import { decodePayload } from "../src/spool.js";

const tool: Tool = { toolId: "kv.get", name: "get", namespace: "kv", description: "reads a key", sensitiveFields: ["pin"] };

function producer(): Producer {
  return new Producer({
    tenant: "acme",
    spoolDir: fs.mkdtempSync(path.join(os.tmpdir(), "tlp-events-")),
    source: "urn:toolledger-producer:unit",
    start: false,
  });
}

test("ids are stable and equal the Python SDK's", () => {
  // Fixed vectors computed with sdk/python (toolledger_producer.events) for the same inputs.
  const b = new EventBuilder("acme", "urn:toolledger-producer:typescript");
  assert.equal(b.toolDeclared(tool).id, "tlp-d3c277474d462b8ab3b72d6b3abb84c6");
  const snapshot = { invocation_id: "inv-1", tool_id: "kv.get" };
  assert.equal(b.invocation("tool.invocation.planned", snapshot).id, "tlp-eb81a8c4ca67cf2c6db86c36ad8b197e");
  assert.equal(b.invocation("tool.invocation.planned", { ...snapshot }).id, b.invocation("tool.invocation.planned", snapshot).id);
  assert.notEqual(b.invocation("tool.invocation.started", snapshot).id, b.invocation("tool.invocation.planned", snapshot).id);
  assert.notEqual(b.invocation("tool.invocation.planned", snapshot, { seq: 1 }).id, b.invocation("tool.invocation.planned", snapshot).id);
  assert.notEqual(b.toolDeclared({ ...tool, version: "2" }).id, b.toolDeclared(tool).id);
  const declared = b.toolDeclared(tool);
  assert.equal(declared.time, undefined, "a declaration carries no time");
  assert.equal(declared.toolid, "kv.get");
});

test("binary mode: ce-* headers percent-encoded, Nats-Msg-Id, subject", () => {
  const b = new EventBuilder("acme", "urn:x", "sess 1/ü");
  const event = b.invocation("tool.invocation.planned", { invocation_id: "inv 1", tool_id: "t" }, { time: "2026-01-01T00:00:00.000Z" });
  const m = binaryMessage(event);
  assert.equal(m.subject, "atl.in.acme.tool.invocation.planned");
  assert.equal(m.headers["ce-sessionid"], "sess%201/%C3%BC");
  assert.equal(m.headers["ce-subject"], "inv%201");
  assert.equal(m.headers["ce-datacontenttype"], "application/json");
  assert.match(m.headers["Nats-Msg-Id"] ?? "", /^[0-9a-f]{64}$/);
  assert.equal(JSON.parse(m.body.toString()).status, "planned");
});

test("what ingest would refuse is refused at emit", async () => {
  const p = producer();
  const b = p.events;
  const bad: [string, Record<string, unknown>][] = [
    ["control character in an id", { invocation_id: "inv\n1", tool_id: "t" }],
    ["id over 1 KiB", { invocation_id: "i".repeat(1025), tool_id: "t" }],
    ["integer beyond 2^53", { invocation_id: "inv-big", tool_id: "t", model_input: { n: 2 ** 60 } }],
    ["NaN", { invocation_id: "inv-nan", tool_id: "t", model_input: { x: Number.NaN } }],
    ["bigint", { invocation_id: "inv-bigint", tool_id: "t", model_input: { x: 1n } }],
    ["lone surrogate", { invocation_id: "inv-s", tool_id: "t", model_input: { x: "\ud800" } }],
  ];
  for (const [what, snapshot] of bad) {
    await assert.rejects(p.emit(b.invocation("tool.invocation.planned", snapshot as never)), InvalidEvent, what);
  }
  // Too large, with uploads off (by default the value would go to the payload bucket).
  const q = new Producer({ tenant: "acme", spoolDir: fs.mkdtempSync(path.join(os.tmpdir(), "tlp-events-")), start: false, uploadThresholdBytes: null });
  await assert.rejects(
    q.emit(q.events.invocation("tool.invocation.planned", { invocation_id: "inv-huge", tool_id: "t", model_input: "x".repeat(2 << 20) })),
    InvalidEvent,
  );
  assert.equal(q.queued, 0, "a refused event reached the spool");
  await q.close(0);
  assert.throws(() => new EventBuilder("_system", "urn:x"), InvalidEvent);
  assert.equal(p.queued, 0, "a refused event reached the spool");
  await p.close(0);
});

test("the active OpenTelemetry span becomes traceparent", () => {
  // A minimal synchronous context manager: the API alone keeps no context.
  let active: Context | undefined;
  const manager: ContextManager = {
    active: () => active ?? ROOT_CONTEXT,
    with: (ctx, fn, thisArg, ...args) => {
      const prev = active;
      active = ctx;
      try {
        return fn.call(thisArg, ...args);
      } finally {
        active = prev;
      }
    },
    bind: (_ctx, target) => target,
    enable() {
      return this;
    },
    disable() {
      return this;
    },
  };
  context.setGlobalContextManager(manager);
  try {
    const b = new EventBuilder("acme", "urn:x");
    const snapshot = { invocation_id: "inv-traced", tool_id: "t" };
    assert.equal(b.invocation("tool.invocation.planned", snapshot).traceparent, undefined);
    const span = trace.wrapSpanContext({ traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: 1 });
    const event = context.with(trace.setSpan(context.active(), span), () => b.invocation("tool.invocation.planned", snapshot));
    assert.equal(event.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    const declared = context.with(trace.setSpan(context.active(), span), () => b.toolDeclared(tool));
    assert.equal(declared.traceparent, undefined, "a declaration carries no trace context");
  } finally {
    context.disable();
  }
});

test("the invocation helper emits the lifecycle in order, with the error class of what was thrown", async () => {
  const p = producer();
  const value = await p.invoke(tool, { key: "k", pin: "1234" }, async (inv) => {
    await inv.progress("half", { percent: 50 });
    return { value: 1 };
  }, { invocationId: "inv-ok" });
  assert.deepEqual(value, { value: 1 });
  await assert.rejects(p.invoke(tool, {}, () => {
    throw new ToolFailure("no such key", "invalid_arguments", { errorCode: "kv:missing" });
  }, { invocationId: "inv-fail" }), ToolFailure);
  await assert.rejects(p.invoke(tool, {}, () => {
    throw new DOMException("slow", "TimeoutError");
  }, { invocationId: "inv-timeout" }));
  await assert.rejects(p.invoke(tool, {}, () => {
    throw new DOMException("stop", "AbortError");
  }, { invocationId: "inv-cancel" }));
  const events = p.spool.head(100).map((m) => ({ type: m.headers["ce-type"], data: JSON.parse(m.body.toString()) }));
  assert.deepEqual(events.slice(0, 6).map((e) => e.type), [
    "tool.declared",
    "tool.invocation.planned",
    "tool.invocation.started",
    "tool.invocation.progress",
    "tool.invocation.succeeded",
    "tool.result.created",
  ]);
  assert.deepEqual(events[5]?.data.structured_content, { value: 1 });
  const ends = events.filter((e) => ["failed", "timed_out", "canceled"].includes(e.data.status) && e.type?.startsWith("tool.invocation."));
  assert.deepEqual(ends.map((e) => [e.type, e.data.error.error_class]), [
    ["tool.invocation.failed", "invalid_arguments"],
    ["tool.invocation.timed_out", "timeout"],
    ["tool.invocation.canceled", "canceled"],
  ]);
  assert.equal(events.filter((e) => e.type === "tool.declared").length, 1, "declared once per producer");
  assert.equal(errorOf(Object.assign(new Error("refused"), { code: "ECONNREFUSED" })).error_class, "dependency_unavailable");
  assert.equal(errorOf(Object.assign(new Error("no"), { code: "EACCES" })).error_class, "permission_denied");
  assert.equal(decodePayload(Buffer.from([0, 0, 0, 2, 0x7b, 0x7d])).body.length, 0);
  await p.close(0);
});
