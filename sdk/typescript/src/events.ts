/**
 * Typed builders for the Agent Tool v0.2.0 event classes a producer emits (DESIGN.md §3), the
 * TypeScript twin of the Python SDK's `events.py`:
 *
 *     Tool ─▶ EventBuilder.toolDeclared             (subject toolId; input_contract.sensitive_fields)
 *     Invocation snapshot ─▶ EventBuilder.invocation  (tool.invocation.<planned … timed_out>)
 *     PermissionRequest / PermissionDecision ─▶ tool.permission.requested / .decided
 *     Hook ─▶ tool.hook.<pre|post>.<started|completed>;  Progress ─▶ tool.invocation.progress
 *     Result ─▶ tool.result.created / .redacted, tool.invocation.partial_result
 *
 * Every builder returns a structured CloudEvent with the `tenant` extension, `invocationid`, `toolid`,
 * `sessionid` where they apply, and `traceparent`/`tracestate` from the ambient OpenTelemetry context
 * when `@opentelemetry/api` is installed and a span is active.
 *
 * **Stable ids.** An event's `id` is a digest of the producer's `source`, the object it is about (the
 * invocation id; for a declaration the tool id and the declaration's content), the class and a
 * sequence (`seq`, 0 for the first event of a class for that object). The digest is the Python SDK's,
 * byte for byte, so both SDKs name the same event alike; built again for a retry, an event has the
 * same id, and the ledger's dedupe (tenant, source, id) makes the retry a duplicate.
 *
 * Data shapes carry the official schemas' snake_case field names, as they go on the wire. Unknown
 * fields are allowed, as the official schemas allow them; the e2e test validates every builder's
 * output against the official schemas and `toolledger validate`, so drift fails CI.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { createRequire } from "node:module";

import { InvalidEvent, checkTenant, lengthPrefixedDigest } from "./wire.js";

/** The Agent Tool schema version every object declares. */
export const SCHEMA_VERSION = "0.2.0";

/** The status an invocation snapshot reports for each class (kept equal to the class's transition
 * so no `status_mismatch` anomaly is recorded). */
export const STATUS_OF_CLASS = {
  "tool.invocation.planned": "planned",
  "tool.invocation.selected": "selected",
  "tool.invocation.arguments_ready": "arguments_ready",
  "tool.invocation.validation_failed": "validation_failed",
  "tool.invocation.queued": "queued",
  "tool.invocation.started": "running",
  "tool.invocation.yielded": "yielded",
  "tool.invocation.succeeded": "succeeded",
  "tool.invocation.failed": "failed",
  "tool.invocation.canceled": "canceled",
  "tool.invocation.timed_out": "timed_out",
} as const;

/** A `tool.invocation.*` lifecycle class. */
export type InvocationClass = keyof typeof STATUS_OF_CLASS;
/** Every invocation class, in lifecycle order. */
export const INVOCATION_CLASSES = Object.keys(STATUS_OF_CLASS) as InvocationClass[];
/** The classes that carry a result. */
export type ResultClass = "tool.result.created" | "tool.result.redacted" | "tool.invocation.partial_result";

/** JSON as the ledger takes it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json | undefined };

/** A tool error (spec "Errors and retries"): `error_class` from the spec's initial classes. */
export interface ToolError {
  error_class?: string;
  error_code?: string;
  message?: string;
  recoverability?: string;
  retry_after?: unknown;
  native_error_ref?: unknown;
  [field: string]: unknown;
}

/** An invocation snapshot (official `agenttool-invocation`); may be partial. */
export interface Invocation {
  schema_version?: string;
  invocation_id: string;
  tool_id: string;
  status?: string;
  created_at?: string;
  started_at?: string;
  ended_at?: string;
  surface_id?: string;
  native_call_id?: string;
  model_input?: unknown;
  observable_input?: unknown;
  permission_input?: unknown;
  call_input?: unknown;
  actor_ref?: string;
  session_id?: string;
  retry_of?: string;
  attempt?: number;
  error?: ToolError;
  external_mappings?: Record<string, unknown>[];
  telemetry_refs?: Record<string, unknown>[];
  [field: string]: unknown;
}

/** Data of `tool.permission.requested` (the ledger's `ledger/permission-request` shape). */
export interface PermissionRequest {
  schema_version?: string;
  decision_id: string;
  invocation_id: string;
  tool_id?: string;
  permission_input?: unknown;
  permission_profile_ref?: string;
  mode?: string;
  reason?: Record<string, unknown>;
  requested_at?: string;
  [field: string]: unknown;
}

/** A permission decision (official `agenttool-permission-decision`). */
export interface PermissionDecision {
  schema_version?: string;
  decision_id: string;
  invocation_id: string;
  behavior: "allow" | "ask" | "deny" | "passthrough";
  decided_at?: string;
  mode?: string;
  source?: string;
  reason?: Record<string, unknown>;
  updated_input?: unknown;
  user_modified?: boolean;
  rule_refs?: string[];
  policy_refs?: string[];
  [field: string]: unknown;
}

/** The hook events of the official `agenttool-hook`. */
export type HookEvent =
  | "pre_tool_use"
  | "post_tool_use"
  | "post_tool_use_failure"
  | "permission_request"
  | "permission_decision"
  | "result_persistence";

/** A hook run (official `agenttool-hook`). */
export interface Hook {
  schema_version?: string;
  hook_id: string;
  hook_event: HookEvent;
  invocation_id: string;
  tool_id?: string;
  matcher?: Record<string, unknown>;
  outputs?: unknown[];
  updated_input?: unknown;
  updated_output?: unknown;
  stop?: Record<string, unknown>;
  started_at?: string;
  ended_at?: string;
  [field: string]: unknown;
}

/** A progress update (official `agenttool-progress`). */
export interface Progress {
  schema_version?: string;
  progress_id?: string;
  invocation_id: string;
  tool_id?: string;
  sequence: number;
  status: string;
  message?: string;
  percent?: number;
  current_step?: string;
  total_steps?: number;
  elapsed_ms?: number;
  timestamp?: string;
  [field: string]: unknown;
}

/** A tool result (official `agenttool-result`). */
export interface Result {
  schema_version?: string;
  result_id?: string;
  invocation_id: string;
  tool_id?: string;
  status: string;
  is_error?: boolean;
  content?: Record<string, unknown>[];
  structured_content?: unknown;
  summary?: string;
  redaction_state?: string;
  error?: ToolError;
  created_at?: string;
  external_mapping?: Record<string, unknown>;
  [field: string]: unknown;
}

/**
 * A tool as its producer declares it. `sensitiveFields` (property names, matched at any depth of an
 * input, or JSON Pointers such as `/headers/authorization`) go into the declaration's
 * `input_contract.sensitive_fields`, so ingest scrubs them from every invocation of the tool — once
 * the declaration is in the ledger: declare before the first invocation (docs/ingest.md, ordering
 * caveat); `Producer.invoke` does.
 */
export interface Tool {
  toolId: string;
  name: string;
  /** Default `"default"`. */
  namespace?: string;
  /** Default `""`. */
  description?: string;
  /** Default `"function"`. */
  toolKind?: string;
  /** Default `"available"`. */
  lifecycle?: string;
  version?: string;
  sensitiveFields?: readonly string[];
  inputSchema?: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  /** More declaration fields, merged in last. */
  extra?: Record<string, unknown>;
}

/** The `tool-declaration` object of `tool`. */
export function toolDeclaration(tool: Tool): Record<string, unknown> {
  const data: Record<string, unknown> = {
    schema_version: SCHEMA_VERSION,
    tool_id: tool.toolId,
    namespace: tool.namespace ?? "default",
    name: tool.name,
    description: tool.description ?? "",
    lifecycle: tool.lifecycle ?? "available",
    tool_kind: tool.toolKind ?? "function",
  };
  if (tool.version !== undefined) {
    data.version = tool.version;
  }
  const contract: Record<string, unknown> = {};
  if (tool.inputSchema !== undefined) {
    contract.model_input_schema = { ...tool.inputSchema };
  }
  if (tool.sensitiveFields && tool.sensitiveFields.length > 0) {
    contract.sensitive_fields = [...tool.sensitiveFields];
  }
  if (Object.keys(contract).length > 0) {
    data.input_contract = contract;
  }
  if (tool.outputSchema !== undefined) {
    data.output_contract = { output_schema: { ...tool.outputSchema } };
  }
  Object.assign(data, tool.extra ?? {});
  return data;
}

/** The current UTC time, RFC 3339 with milliseconds and `Z`. */
export function nowRfc3339(): string {
  return new Date().toISOString();
}

/** Hex SHA-256 over length-prefixed `parts` (the Python SDK's `stable_id`), truncated to `length`. */
export function stableId(parts: readonly string[], length = 32): string {
  return lengthPrefixedDigest("toolledger.producer.v1", parts).slice(0, length);
}

/** Compares strings by code point, as Python sorts `str` keys. */
function byCodePoint(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0) ?? 0);
  const y = Array.from(b, (c) => c.codePointAt(0) ?? 0);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) {
      return (x[i] ?? 0) - (y[i] ?? 0);
    }
  }
  return x.length - y.length;
}

/** A string as Python's `json.dumps` writes it with `ensure_ascii=True`. */
function pyString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const ch = s[i];
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (c < 0x20 || c > 0x7e) out += `\\u${c.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}

/** A number as Python's `json.dumps` writes it: integral values as `int` (JavaScript cannot tell
 * `1` from `1.0`), others as `repr(float)`. */
function pyNumber(n: number): string {
  if (Number.isInteger(n) && Math.abs(n) < 1e21) {
    return BigInt(n).toString();
  }
  const [mantissa = "", exp = "0"] = n.toExponential().split("e");
  const e = Number(exp);
  if (e < -4 || e >= 16) {
    const sign = e < 0 ? "-" : "+";
    return `${mantissa}e${sign}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  return String(n);
}

/** `json.dumps(value, sort_keys=True, separators=(",", ":"))` of the Python SDK, for digests that
 * must match it. */
export function pythonCanonicalJson(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "number") return pyNumber(value);
  if (typeof value === "string") return pyString(value);
  if (Array.isArray(value)) return `[${value.map(pythonCanonicalJson).join(",")}]`;
  if (typeof value === "object") {
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") return pythonCanonicalJson(toJSON.call(value));
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => byCodePoint(a, b));
    return `{${entries.map(([k, v]) => `${pyString(k)}:${pythonCanonicalJson(v)}`).join(",")}}`;
  }
  throw new InvalidEvent(`${typeof value} is not JSON`);
}

interface OtelApi {
  trace: {
    getActiveSpan(): { spanContext(): OtelSpanContext } | undefined;
    isSpanContextValid?(context: OtelSpanContext): boolean;
  };
  isSpanContextValid?(context: OtelSpanContext): boolean;
}
interface OtelSpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: { serialize(): string };
}

let otel: OtelApi | null | undefined;

/** `@opentelemetry/api` if it is installed (an optional peer dependency), loaded once. */
function otelApi(): OtelApi | null {
  if (otel === undefined) {
    try {
      otel = createRequire(import.meta.url)("@opentelemetry/api") as OtelApi;
    } catch {
      otel = null;
    }
  }
  return otel;
}

/** `traceparent` (and `tracestate`) of the active OpenTelemetry span, if `@opentelemetry/api` is
 * installed and a valid span is active; empty otherwise. */
export function traceContext(): { traceparent?: string; tracestate?: string } {
  const api = otelApi();
  const context = api?.trace.getActiveSpan()?.spanContext();
  if (!api || !context) {
    return {};
  }
  const valid = api.isSpanContextValid ?? api.trace.isSpanContextValid;
  if (valid ? !valid(context) : !/^[0-9a-f]{32}$/.test(context.traceId) || /^0+$/.test(context.traceId)) {
    return {};
  }
  const out: { traceparent?: string; tracestate?: string } = {
    traceparent: `00-${context.traceId}-${context.spanId}-${(context.traceFlags & 0xff).toString(16).padStart(2, "0")}`,
  };
  const state = context.traceState?.serialize() ?? "";
  if (state) {
    out.tracestate = state;
  }
  return out;
}

/** A structured CloudEvent as the builders make it (binary mode puts all but `data` in headers). */
export interface CloudEvent {
  specversion: "1.0";
  id: string;
  source: string;
  type: string;
  subject: string;
  time?: string;
  datacontenttype: "application/json";
  tenant: string;
  sessionid?: string;
  invocationid?: string;
  toolid?: string;
  traceparent?: string;
  tracestate?: string;
  data: Record<string, unknown>;
  [extension: string]: unknown;
}

/** Options every builder takes. */
export interface BuildOptions {
  /** The sequence of this event among its class's events for the object (default 0). */
  seq?: number;
  /** The event time (RFC 3339); default now. */
  time?: string;
}

/** Builds CloudEvents for one producer: its `tenant`, `source` and (optionally) agent session. */
export class EventBuilder {
  readonly tenant: string;
  readonly source: string;
  readonly sessionId: string | undefined;
  readonly trace: boolean;

  constructor(tenant: string, source: string, sessionId?: string, options: { trace?: boolean } = {}) {
    this.tenant = checkTenant(tenant);
    if (!source) {
      throw new InvalidEvent("source must not be empty");
    }
    this.source = source;
    this.sessionId = sessionId;
    this.trace = options.trace ?? true;
  }

  /** A structured CloudEvent of `eventClass` about `subject`; its id is a digest of the source,
   * `key` (what identifies the object), the class and `seq`. */
  event(
    eventClass: string,
    subject: string,
    data: Readonly<Record<string, unknown>>,
    options: { key: readonly string[]; seq?: number; time?: string; sessionId?: string },
  ): CloudEvent {
    const body: Record<string, unknown> = { ...data };
    body.schema_version ??= SCHEMA_VERSION;
    const seq = options.seq ?? 0;
    const event: CloudEvent = {
      specversion: "1.0",
      id: `tlp-${stableId([this.source, ...options.key, eventClass, String(seq)])}`,
      source: this.source,
      type: eventClass,
      subject,
      time: options.time ?? nowRfc3339(),
      datacontenttype: "application/json",
      tenant: this.tenant,
      data: body,
    };
    const bodySession = typeof body.session_id === "string" && body.session_id ? body.session_id : undefined;
    const session = options.sessionId || bodySession || this.sessionId;
    if (session) {
      event.sessionid = session;
    }
    if (eventClass === "tool.declared") {
      event.toolid = subject;
    } else {
      if (typeof body.invocation_id === "string") {
        event.invocationid = body.invocation_id;
      }
      if (typeof body.tool_id === "string") {
        event.toolid = body.tool_id;
      }
    }
    if (this.trace) {
      Object.assign(event, traceContext());
    }
    // `data` last, as the Python SDK orders it (headers follow the attribute order).
    delete (event as Partial<CloudEvent>).data;
    event.data = body;
    return event;
  }

  /**
   * `tool.declared`. Its id covers the declaration's content, so declaring the same tool again (every
   * producer start does) is a duplicate and a changed declaration a new event. For that it carries no
   * `time`, session or trace context unless `time` is given: the ledger compares a repeat's whole
   * content, and a new time under the same id would be a `duplicate_conflict`.
   */
  toolDeclared(tool: Tool, options: { time?: string } = {}): CloudEvent {
    const data = toolDeclaration(tool);
    const digest = createHash("sha256").update(pythonCanonicalJson(data), "utf8").digest("hex");
    const event = this.event("tool.declared", tool.toolId, data, {
      key: [tool.toolId, digest],
      ...(options.time !== undefined ? { time: options.time } : {}),
    });
    delete event.sessionid;
    delete event.traceparent;
    delete event.tracestate;
    if (options.time === undefined) {
      delete event.time;
    }
    return event;
  }

  /** A `tool.invocation.*` event carrying `snapshot`; `status` defaults to the class's own. */
  invocation(eventClass: InvocationClass, snapshot: Invocation, options: BuildOptions = {}): CloudEvent {
    if (!(eventClass in STATUS_OF_CLASS)) {
      throw new InvalidEvent(`${eventClass} is not an invocation class (${INVOCATION_CLASSES.join(", ")})`);
    }
    const data: Record<string, unknown> = { ...snapshot };
    data.status ??= STATUS_OF_CLASS[eventClass];
    data.created_at ??= options.time ?? nowRfc3339();
    return this.event(eventClass, snapshot.invocation_id, data, { key: [snapshot.invocation_id], ...options });
  }

  /** `tool.permission.requested`. */
  permissionRequested(request: PermissionRequest, options: BuildOptions = {}): CloudEvent {
    const data: Record<string, unknown> = { ...request };
    data.requested_at ??= options.time ?? nowRfc3339();
    return this.event("tool.permission.requested", request.invocation_id, data, {
      key: [request.invocation_id, request.decision_id],
      ...options,
    });
  }

  /** `tool.permission.decided` (behavior allow | ask | deny | passthrough). */
  permissionDecided(decision: PermissionDecision, options: BuildOptions = {}): CloudEvent {
    const data: Record<string, unknown> = { ...decision };
    data.decided_at ??= options.time ?? nowRfc3339();
    return this.event("tool.permission.decided", decision.invocation_id, data, {
      key: [decision.invocation_id, decision.decision_id],
      ...options,
    });
  }

  /** `tool.hook.<phase>.<stage>`. */
  hook(phase: "pre" | "post", stage: "started" | "completed", hook: Hook, options: BuildOptions = {}): CloudEvent {
    if ((phase !== "pre" && phase !== "post") || (stage !== "started" && stage !== "completed")) {
      throw new InvalidEvent(`tool.hook.${String(phase)}.${String(stage)} is not a hook class`);
    }
    return this.event(`tool.hook.${phase}.${stage}`, hook.invocation_id, { ...hook }, {
      key: [hook.invocation_id, hook.hook_id],
      ...options,
    });
  }

  /** `tool.invocation.progress`; its `sequence` is the event's sequence. */
  progress(progress: Progress, options: { time?: string } = {}): CloudEvent {
    const data: Record<string, unknown> = { ...progress };
    data.timestamp ??= options.time ?? nowRfc3339();
    data.progress_id ??= `prg-${stableId([progress.invocation_id, String(progress.sequence)], 24)}`;
    return this.event("tool.invocation.progress", progress.invocation_id, data, {
      key: [progress.invocation_id],
      seq: Math.trunc(progress.sequence),
      ...(options.time !== undefined ? { time: options.time } : {}),
    });
  }

  /** `tool.result.created` (or `.redacted`, or `tool.invocation.partial_result`). */
  result(result: Result, options: BuildOptions & { eventClass?: ResultClass } = {}): CloudEvent {
    const eventClass = options.eventClass ?? "tool.result.created";
    if (!["tool.result.created", "tool.result.redacted", "tool.invocation.partial_result"].includes(eventClass)) {
      throw new InvalidEvent(`${eventClass} does not carry a result`);
    }
    const data: Record<string, unknown> = { ...result };
    data.created_at ??= options.time ?? nowRfc3339();
    data.result_id ??= `res-${stableId([result.invocation_id], 24)}`;
    return this.event(eventClass, result.invocation_id, data, {
      key: [result.invocation_id],
      ...(options.seq !== undefined ? { seq: options.seq } : {}),
      ...(options.time !== undefined ? { time: options.time } : {}),
    });
  }
}
