/**
 * A producer process for the e2e tests (tests/e2e/sdk_typescript.rs), the twin of
 * sdk/python/tests/producer_run.py:
 *
 *   producer_run.js emit NATS_URL SPOOL TENANT PREFIX [--count N] [--rate R] [--fsync P] [--flush-timeout S]
 *       Emits invocations PREFIX-0, PREFIX-1, … through `Producer.invoke` (tool.declared once, then
 *       planned, started, progress, succeeded, tool.result.created each), N of them (0: until killed), at
 *       most R invocations/s; then waits up to S seconds for the acks (0: not at all). After `emit`
 *       resolved for an event it writes `E <event id>` to stdout with one write(2), so a line on stdout
 *       means that event was emitted before any later kill. Prints `READY` first and `DONE {metrics}`.
 *   producer_run.js drain NATS_URL SPOOL TENANT [--timeout S]
 *       Opens the spool, waits until the sender has every event acked, prints `DRAINED {metrics}`.
 *   producer_run.js upload NATS_URL SPOOL TENANT INVOCATION [--size N] [--flush-timeout S]
 *       Emits one invocation whose result is a text of N bytes (`largeText(N)`), so it travels through
 *       the tenant's payload bucket; prints `E <id>` lines, then `UPLOADS [{name, sha256, size, file}]`
 *       (the spool's pending uploads) and `DONE {metrics}`.
 *   producer_run.js extract
 *       Reads a JSON array of {event_id, data, threshold, budget} from stdin and prints, for each, the
 *       JSON {data, uploads: [{bucket, name, sha256, size, content_type}]} that `uploads.extract` makes
 *       (bucket ATL_PAYLOADS_acme), one line each: the Python SDK's must be the same.
 *   producer_run.js everything SPOOL
 *       Builds one event of every class a producer sends (through the helpers and the builders), emits
 *       them into SPOOL with no sender, and prints each as a structured CloudEvent, one JSON line each.
 *   producer_run.js bench SPOOL N --fsync P
 *       Emits N events with no reachable NATS and prints {"events_per_s": …}.
 */
import fs from "node:fs";

import { ROOT_CONTEXT, context, trace, type Context, type ContextManager } from "@opentelemetry/api";

import { Producer, ToolFailure, extract, type CloudEvent, type FsyncPolicy, type Tool } from "../src/index.js";

const TOOL: Tool = { toolId: "kv.get", name: "get", namespace: "kv", description: "reads a key", sensitiveFields: ["pin"] };
const UNREACHABLE = "nats://127.0.0.1:1";

function out(line: string): void {
  fs.writeSync(1, `${line}\n`);
}

function flag(args: string[], name: string, fallback: string): string {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? (args[i + 1] as string) : fallback;
}

function traced(producer: Producer): Producer {
  const emit = producer.emit.bind(producer);
  producer.emit = async (event: CloudEvent) => {
    const id = await emit(event);
    out(`E ${id}`);
    return id;
  };
  return producer;
}

async function emit(args: string[]): Promise<number> {
  const [nats, spool, tenant, prefix] = args as [string, string, string, string];
  const count = Number(flag(args, "--count", "0"));
  const rate = Number(flag(args, "--rate", "0"));
  const flushTimeout = Number(flag(args, "--flush-timeout", "120"));
  const producer = traced(
    new Producer({
      tenant,
      spoolDir: spool,
      servers: nats,
      source: "urn:toolledger-producer:e2e-ts",
      fsync: flag(args, "--fsync", "every_event") as FsyncPolicy,
      backoffMaxMs: 1000,
      publishTimeoutMs: 2000,
    }),
  );
  out("READY");
  const started = performance.now();
  for (let n = 0; count === 0 || n < count; n++) {
    await producer.invoke(TOOL, { key: `k${n}`, pin: `secret-${n}` }, async (inv) => {
      await inv.progress("looked up", { percent: 100 });
      return { value: n };
    }, { invocationId: `${prefix}-${n}` });
    if (rate > 0) {
      const delay = started + ((n + 1) / rate) * 1000 - performance.now();
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    } else if (n % 16 === 15) {
      await new Promise((r) => setImmediate(r)); // let the sender's acks in
    }
  }
  const drained = flushTimeout > 0 ? await producer.flush(flushTimeout * 1000) : true;
  const metrics = producer.metrics();
  await producer.close(flushTimeout > 0 ? 5000 : 0);
  out(`DONE ${JSON.stringify(metrics)}`);
  return drained ? 0 : 1;
}

async function drain(args: string[]): Promise<number> {
  const [nats, spool, tenant] = args as [string, string, string];
  const producer = new Producer({ tenant, spoolDir: spool, servers: nats, source: "urn:toolledger-producer:e2e-ts", backoffMaxMs: 1000 });
  const drained = await producer.flush(Number(flag(args, "--timeout", "60")) * 1000);
  const metrics = producer.metrics();
  await producer.close(5000);
  out(`${drained ? "DRAINED" : "NOT DRAINED"} ${JSON.stringify(metrics)}`);
  return drained ? 0 : 1;
}

/** `row 00000000\n`, `row 00000001\n`, … cut at `size` bytes (the e2e tests write the same). */
function largeText(size: number): string {
  const rows: string[] = [];
  for (let i = 0; i <= Math.floor(size / 13); i++) rows.push(`row ${String(i).padStart(8, "0")}\n`);
  return rows.join("").slice(0, size);
}

async function upload(args: string[]): Promise<number> {
  const [nats, spool, tenant, invocation] = args as [string, string, string, string];
  const size = Number(flag(args, "--size", String(2 * 1024 * 1024)));
  const flushTimeout = Number(flag(args, "--flush-timeout", "0"));
  const producer = traced(
    new Producer({ tenant, spoolDir: spool, servers: nats, source: "urn:toolledger-producer:e2e-ts", backoffMaxMs: 1000, publishTimeoutMs: 2000 }),
  );
  out("READY");
  await producer.invoke(TOOL, { key: "big", pin: "secret-big" }, (inv) => inv.result(largeText(size)), { invocationId: invocation });
  const drained = flushTimeout > 0 ? await producer.flush(flushTimeout * 1000) : true;
  const pending = producer.spool
    .head(1000)
    .flatMap((m) => m.uploads ?? [])
    .map((u) => ({ name: u.name, sha256: u.sha256, size: u.size, file: u.file }));
  out(`UPLOADS ${JSON.stringify(pending)}`);
  const metrics = producer.metrics();
  await producer.close(flushTimeout > 0 ? 5000 : 0);
  out(`DONE ${JSON.stringify(metrics)}`);
  return drained ? 0 : 1;
}

async function extractMode(): Promise<number> {
  const cases = JSON.parse(fs.readFileSync(0, "utf8")) as { event_id: string; data: unknown; threshold: number; budget: number }[];
  for (const c of cases) {
    const { data, uploads } = extract(c.data, { eventId: c.event_id, bucket: "ATL_PAYLOADS_acme", threshold: c.threshold, budget: c.budget });
    const refs = uploads.map(({ upload: u }) => ({ bucket: u.bucket, name: u.name, sha256: u.sha256, size: u.size, content_type: u.contentType }));
    out(JSON.stringify({ data, uploads: refs }));
  }
  return 0;
}

/** A synchronous context manager, so a span made current with `context.with` is the active one. */
function contextManager(): ContextManager {
  let active: Context | undefined;
  return {
    active: () => active ?? ROOT_CONTEXT,
    with(ctx, fn, thisArg, ...rest) {
      const previous = active;
      active = ctx;
      try {
        return fn.call(thisArg, ...rest);
      } finally {
        active = previous;
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
}

async function everything(args: string[]): Promise<number> {
  const [spool] = args as [string];
  const built: CloudEvent[] = [];
  const producer = new Producer({ tenant: "acme", spoolDir: spool, source: "urn:toolledger-producer:schemas-check-ts", sessionId: "sess-schemas", start: false });
  const emit = producer.emit.bind(producer);
  producer.emit = async (event: CloudEvent) => {
    const id = await emit(event);
    built.push(event);
    return id;
  };
  const secretTool: Tool = {
    toolId: "vault.read",
    name: "read",
    namespace: "vault",
    description: "reads a secret",
    version: "1",
    sensitiveFields: ["api_key", "/headers/authorization"],
    inputSchema: { type: "object", properties: { path: { type: "string" } } },
  };
  const noteTool: Tool = { toolId: "notes.read", name: "read", namespace: "notes", description: "reads a note" };

  context.setGlobalContextManager(contextManager());
  const span = trace.wrapSpanContext({ traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: 1 });
  const inv = producer.invocation(secretTool, { path: "db/ünïcode", api_key: "k-123" }, {
    start: false,
    invocationId: "inv-schemas-1",
    nativeCallId: "call 1/ü",
    declare: false,
  });
  await producer.declare(secretTool);
  // The planned event is built under an active span: it carries its traceparent. (This context
  // manager keeps a context only through synchronous code, hence the declaration beforehand.)
  await context.with(trace.setSpan(ROOT_CONTEXT, span), () => inv.begin());
  await inv.run(async (inv) => {
    await inv.hook("pre", "started", "hook-1");
    await inv.hook("pre", "completed", "hook-1", { updated_input: { path: "db/prod" } });
    const decision = await inv.requestPermission({ path: "db/prod" }, { reason: { rule: "ask for prod" } });
    await inv.decide("allow", { decisionId: decision, reason: { by: "user" }, mode: "default" });
    await inv.start();
    await inv.progress("half way", { percent: 50.5 });
    await inv.progress("done", { percent: 100 });
    await inv.hook("post", "started", "hook-2");
    await inv.hook("post", "completed", "hook-2", { updated_output: { ok: true } });
    inv.result({ value: "s3cr3t-free" });
  });
  const failing: [string, () => never][] = [
    ["inv-schemas-2", () => { throw new ToolFailure("no note named missing", "invalid_arguments", { errorCode: "notes:missing" }); }],
    ["inv-schemas-3", () => { throw new DOMException("took too long", "TimeoutError"); }],
    ["inv-schemas-4", () => { throw new DOMException("the user stopped it", "AbortError"); }],
    ["inv-schemas-5", () => { throw Object.assign(new Error("denied by the file system"), { code: "EACCES" }); }],
  ];
  for (const [id, fn] of failing) {
    await producer.invoke(noteTool, { name: id }, fn, { invocationId: id }).catch(() => undefined);
  }
  const b = producer.events;
  const snapshot = { invocation_id: "inv-schemas-6", tool_id: "notes.read", model_input: { name: "big" } };
  for (const eventClass of ["tool.invocation.planned", "tool.invocation.selected", "tool.invocation.arguments_ready",
    "tool.invocation.queued", "tool.invocation.started", "tool.invocation.yielded"] as const) {
    await producer.emit(b.invocation(eventClass, snapshot));
  }
  await producer.emit(b.result({ invocation_id: "inv-schemas-6", tool_id: "notes.read", status: "succeeded",
    content: [{ type: "text", text: "part" }] }, { eventClass: "tool.invocation.partial_result" }));
  await producer.emit(b.invocation("tool.invocation.succeeded", snapshot));
  await producer.emit(b.result({ invocation_id: "inv-schemas-6", tool_id: "notes.read", status: "redacted",
    redaction_state: "redacted" }, { eventClass: "tool.result.redacted" }));
  await producer.emit(b.invocation("tool.invocation.validation_failed", { invocation_id: "inv-schemas-7",
    tool_id: "notes.read", error: { error_class: "schema_validation_failed" } }));
  await producer.close(0);
  for (const event of built) out(JSON.stringify(event));
  return 0;
}

async function bench(args: string[]): Promise<number> {
  const [spool, n] = args as [string, string];
  const fsync = flag(args, "--fsync", "every_event") as FsyncPolicy;
  const producer = new Producer({ tenant: "acme", spoolDir: spool, servers: UNREACHABLE, fsync, maxBytes: 2 ** 30, start: false });
  const snapshot = { invocation_id: "inv-bench", tool_id: "kv.get", model_input: { key: "k", pad: "x".repeat(300) } };
  const events = Array.from({ length: Number(n) }, (_, i) => producer.events.invocation("tool.invocation.started", snapshot, { seq: i }));
  const t0 = performance.now();
  for (const event of events) await producer.emit(event);
  const took = (performance.now() - t0) / 1000;
  await producer.close(0);
  out(JSON.stringify({ fsync, events: events.length, seconds: Number(took.toFixed(3)), events_per_s: Math.round(events.length / took) }));
  return 0;
}

const [mode, ...rest] = process.argv.slice(2);
const modes: Record<string, (args: string[]) => Promise<number>> = { emit, drain, upload, extract: extractMode, everything, bench };
const run = mode === undefined ? undefined : modes[mode];
if (run === undefined) {
  process.stderr.write("usage: producer_run.js emit|drain|upload|extract|everything|bench …\n");
  process.exit(2);
}
process.exitCode = await run(rest);
