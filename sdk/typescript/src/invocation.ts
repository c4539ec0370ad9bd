/**
 * The invocation helper: one tool call's lifecycle around an async function.
 *
 *     await producer.invoke(tool, input, async (inv) => {   // tool.declared (once per producer)
 *       …                                                   // tool.invocation.planned, .started
 *       await inv.progress("half way", { percent: 50 });    // tool.invocation.progress (sequence 1, 2, …)
 *       return { rows: 3 };                                 // the result, unless inv.result(…) chose one
 *     });
 *     // returned                 ─▶ tool.invocation.succeeded + tool.result.created (status succeeded)
 *     // threw a TimeoutError     ─▶ tool.invocation.timed_out (error_class timeout)
 *     // threw an AbortError      ─▶ tool.invocation.canceled (error_class canceled)
 *     // threw anything else      ─▶ tool.invocation.failed (error_class from the error) + an error result
 *     // the error is rethrown; the helper never swallows it.
 *
 * `start: false` keeps the call planned so permission and pre-hook events come first, in the
 * lifecycle's order; call `await inv.start()` when it runs. `producerTool(producer, tool, fn)` wraps a
 * function so each call is an invocation with its argument as input and its return value the result.
 *
 * @module
 */

import { randomUUID } from "node:crypto";

import { type Invocation, type Tool, type ToolError, nowRfc3339 } from "./events.js";
import type { Producer } from "./producer.js";

/** Throw from inside an invocation to choose the error class (and code) the ledger records. */
export class ToolFailure extends Error {
  override name = "ToolFailure";
  readonly errorClass: string;
  readonly errorCode: string | undefined;
  readonly recoverability: string | undefined;

  constructor(
    message: string,
    errorClass = "execution_failed",
    options: { errorCode?: string; recoverability?: string; cause?: unknown } = {},
  ) {
    super(message, options.cause !== undefined ? { cause: options.cause } : undefined);
    this.errorClass = errorClass;
    this.errorCode = options.errorCode;
    this.recoverability = options.recoverability;
  }
}

/** Node's system error codes that name a dependency the tool could not reach. */
const UNAVAILABLE_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
]);

/**
 * The spec's error class for what a call threw (first match wins): `ToolFailure` its own;
 * `AbortError` → `canceled`; `TimeoutError` or code `ETIMEDOUT` / `ABORT_ERR` with a timeout reason →
 * `timeout`; `EACCES` / `EPERM` → `permission_denied`; connection codes (`ECONNREFUSED`, `ENOTFOUND`, …)
 * → `dependency_unavailable`; `ERR_OUT_OF_MEMORY`-like `RangeError: Array buffer allocation failed` is
 * not guessed; anything else → `execution_failed`.
 */
export function errorClassOf(error: unknown): string {
  if (error instanceof ToolFailure) return error.errorClass;
  const name = error instanceof Error || (typeof error === "object" && error !== null) ? (error as Error).name : "";
  const code = typeof error === "object" && error !== null ? (error as { code?: unknown }).code : undefined;
  if (name === "TimeoutError" || code === "ETIMEDOUT" || code === "UND_ERR_CONNECT_TIMEOUT") return "timeout";
  if (name === "AbortError" || code === "ABORT_ERR") {
    const cause = (error as { cause?: { name?: string } }).cause;
    return cause?.name === "TimeoutError" ? "timeout" : "canceled";
  }
  if (code === "EACCES" || code === "EPERM") return "permission_denied";
  if (typeof code === "string" && UNAVAILABLE_CODES.has(code)) return "dependency_unavailable";
  return "execution_failed";
}

/** The tool error a thrown value stands for. */
export function errorOf(error: unknown): ToolError {
  if (error instanceof ToolFailure) {
    const out: ToolError = { error_class: error.errorClass, message: error.message };
    if (error.errorCode) out.error_code = error.errorCode;
    if (error.recoverability) out.recoverability = error.recoverability;
    return out;
  }
  const errorClass = errorClassOf(error);
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return {
      error_class: errorClass,
      error_code: `js:${error.name}${typeof code === "string" ? `:${code}` : ""}`,
      message: error.message || error.name,
    };
  }
  return { error_class: errorClass, error_code: "js:thrown", message: String(error) };
}

/** Options of one invocation. */
export interface InvocationOptions {
  /** Default `inv-<uuid>`. */
  invocationId?: string;
  /** Default the producer's session. */
  sessionId?: string;
  nativeCallId?: string;
  externalMappings?: Record<string, unknown>[];
  actorRef?: string;
  retryOf?: string;
  attempt?: number;
  /** Emit started right after planned (default true); false: call `inv.start()` yourself. */
  start?: boolean;
  /** Emit `tool.declared` first, once per producer (default true). */
  declare?: boolean;
}

/** One invocation's events, emitted through `producer` in lifecycle order. */
export class InvocationScope {
  readonly producer: Producer;
  readonly tool: Tool;
  readonly invocationId: string;
  readonly input: unknown;
  /** Wall time of the call in milliseconds, once it ended (from `start`). */
  durationMs: number | undefined;

  readonly #autoStart: boolean;
  readonly #declare: boolean;
  readonly #snapshot: Invocation;
  #progress = 0;
  #result: Record<string, unknown> | undefined;
  #begun = false;
  #started = false;
  #done = false;
  #t0 = 0;

  constructor(producer: Producer, tool: Tool, input?: unknown, options: InvocationOptions = {}) {
    this.producer = producer;
    this.tool = tool;
    this.invocationId = options.invocationId ?? `inv-${randomUUID().replaceAll("-", "")}`;
    this.input = input;
    this.#autoStart = options.start ?? true;
    this.#declare = options.declare ?? true;
    const snapshot: Invocation = { invocation_id: this.invocationId, tool_id: tool.toolId };
    const fields: [keyof Invocation, unknown][] = [
      ["session_id", options.sessionId ?? producer.events.sessionId],
      ["native_call_id", options.nativeCallId],
      ["external_mappings", options.externalMappings],
      ["actor_ref", options.actorRef],
      ["retry_of", options.retryOf],
      ["attempt", options.attempt],
    ];
    for (const [key, value] of fields) {
      if (value !== undefined) snapshot[key] = value;
    }
    if (input !== undefined) snapshot.model_input = input;
    this.#snapshot = snapshot;
  }

  // ── lifecycle ──────────────────────────────────────────────────────────────────────────────────

  async #emit(eventClass: Parameters<Producer["emitInvocation"]>[0], fields: Record<string, unknown> = {}): Promise<void> {
    await this.producer.emitInvocation(eventClass, { ...this.#snapshot, ...fields });
  }

  /** `tool.declared` (once per producer), `tool.invocation.planned`, and `started` unless
   * `start: false`. */
  async begin(): Promise<this> {
    if (this.#begun) return this;
    this.#begun = true;
    if (this.#declare) {
      await this.producer.declare(this.tool);
    }
    this.#snapshot.created_at = nowRfc3339();
    await this.#emit("tool.invocation.planned");
    if (this.#autoStart) {
      await this.start();
    }
    return this;
  }

  /** `tool.invocation.started` (running), with `callInput` (default: the model input). */
  async start(callInput?: unknown): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#t0 = performance.now();
    const fields: Record<string, unknown> = { started_at: nowRfc3339() };
    const call = callInput !== undefined ? callInput : this.input;
    if (call !== undefined) fields.call_input = call;
    await this.#emit("tool.invocation.started", fields);
  }

  /** `tool.invocation.progress` with the next sequence number. */
  async progress(
    message?: string,
    options: { percent?: number; status?: string; [field: string]: unknown } = {},
  ): Promise<void> {
    this.#progress += 1;
    const { percent, status, ...fields } = options;
    const progress: Record<string, unknown> = {
      invocation_id: this.invocationId,
      tool_id: this.tool.toolId,
      sequence: this.#progress,
      status: status ?? "running",
    };
    if (message !== undefined) progress.message = message;
    if (percent !== undefined) progress.percent = percent;
    if (this.#started) progress.elapsed_ms = Math.trunc(performance.now() - this.#t0);
    Object.assign(progress, fields);
    await this.producer.emit(this.producer.events.progress(progress as never));
  }

  /** `tool.permission.requested`; resolves to the decision id the decision must carry. */
  async requestPermission(
    permissionInput?: unknown,
    options: { decisionId?: string; [field: string]: unknown } = {},
  ): Promise<string> {
    const { decisionId, ...fields } = options;
    const id = decisionId ?? `dec-${randomUUID().replaceAll("-", "")}`;
    const request: Record<string, unknown> = {
      decision_id: id,
      invocation_id: this.invocationId,
      tool_id: this.tool.toolId,
      permission_input: permissionInput !== undefined ? permissionInput : this.input,
      ...fields,
    };
    await this.producer.emit(this.producer.events.permissionRequested(request as never));
    return id;
  }

  /** `tool.permission.decided` (allow | ask | deny | passthrough); resolves to its decision id. */
  async decide(
    behavior: "allow" | "ask" | "deny" | "passthrough",
    options: { decisionId?: string; reason?: Record<string, unknown>; [field: string]: unknown } = {},
  ): Promise<string> {
    const { decisionId, reason, ...fields } = options;
    const id = decisionId ?? `dec-${randomUUID().replaceAll("-", "")}`;
    const decision: Record<string, unknown> = { decision_id: id, invocation_id: this.invocationId, behavior };
    if (reason !== undefined) decision.reason = reason;
    Object.assign(decision, fields);
    await this.producer.emit(this.producer.events.permissionDecided(decision as never));
    return id;
  }

  /** `tool.hook.<pre|post>.<started|completed>` for hook `hookId`. */
  async hook(
    phase: "pre" | "post",
    stage: "started" | "completed",
    hookId: string,
    fields: Record<string, unknown> = {},
  ): Promise<void> {
    const hook: Record<string, unknown> = {
      hook_id: hookId,
      invocation_id: this.invocationId,
      tool_id: this.tool.toolId,
      hook_event: phase === "pre" ? "pre_tool_use" : "post_tool_use",
      ...fields,
    };
    await this.producer.emit(this.producer.events.hook(phase, stage, hook as never));
  }

  /** The call's result, emitted as `tool.result.created` when the call ends: `value` as
   * `structured_content` (a string becomes a text block), or MCP-style `content` blocks. */
  result(value?: unknown, options: { content?: Record<string, unknown>[]; [field: string]: unknown } = {}): void {
    const { content, ...fields } = options;
    const result: Record<string, unknown> = {};
    if (typeof value === "string" && content === undefined) {
      result.content = [{ type: "text", text: value }];
    } else if (value !== undefined) {
      result.structured_content = value;
    }
    if (content !== undefined) result.content = content;
    Object.assign(result, fields);
    this.#result = result;
  }

  /** Ends the call: succeeded (no `error`), or failed / timed_out / canceled by `errorOf(error)`;
   * then the result, if one was set or the call failed. */
  async finish(error?: unknown, failed = error !== undefined): Promise<void> {
    if (this.#done) return;
    this.#done = true;
    const ended = nowRfc3339();
    if (this.#started) this.durationMs = performance.now() - this.#t0;
    let status: string;
    let toolError: ToolError | undefined;
    if (!failed) {
      await this.#emit("tool.invocation.succeeded", { ended_at: ended });
      status = "succeeded";
    } else {
      toolError = errorOf(error);
      const [eventClass, s] =
        toolError.error_class === "timeout"
          ? (["tool.invocation.timed_out", "timed_out"] as const)
          : toolError.error_class === "canceled"
            ? (["tool.invocation.canceled", "canceled"] as const)
            : (["tool.invocation.failed", "failed"] as const);
      status = s;
      await this.#emit(eventClass, { ended_at: ended, error: toolError });
    }
    if (this.#result !== undefined || failed) {
      const result: Record<string, unknown> = {
        invocation_id: this.invocationId,
        tool_id: this.tool.toolId,
        status,
        is_error: failed,
      };
      if (toolError !== undefined) {
        result.error = toolError;
        result.content = [{ type: "text", text: toolError.message ?? "" }];
      }
      Object.assign(result, this.#result ?? {});
      await this.producer.emit(this.producer.events.result(result as never));
    }
  }

  /** `begin()`, then `fn(this)`, then `finish()` with what it threw (rethrown) or its return value as
   * the result unless `result()` chose one. */
  async run<T>(fn: (inv: InvocationScope) => Promise<T> | T): Promise<T> {
    await this.begin();
    let value: T;
    try {
      value = await fn(this);
    } catch (error) {
      await this.finish(error, true);
      throw error;
    }
    if (this.#result === undefined && value !== undefined) {
      this.result(value);
    }
    await this.finish();
    return value;
  }
}

/** Wraps `fn` so every call is an invocation of `tool`: its argument the input, its return value
 * the result. */
export function producerTool<A, T>(
  producer: Producer,
  tool: Tool,
  fn: (input: A, inv: InvocationScope) => Promise<T> | T,
  options: Omit<InvocationOptions, "invocationId"> = {},
): (input: A) => Promise<T> {
  return (input: A) => producer.invoke(tool, input, (inv) => fn(input, inv), options);
}
