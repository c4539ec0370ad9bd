/**
 * The NATS side of the contract (DESIGN.md §2–3), as `libs/wire` writes it for `toolledger emit` and
 * the Python SDK's `wire.py` does:
 *
 *     CloudEvent ─▶ binary mode: every attribute and extension in a `ce-<name>` header, its value
 *                   percent-encoded as the CloudEvents HTTP binding prescribes (controls, space, `"`,
 *                   `%` and every non-ASCII byte), `ce-datacontenttype: application/json`, body = `data`
 *               ─▶ `Nats-Msg-Id` = hex SHA-256 over the length-prefixed tenant, source and id (the
 *                   same digest as `toolledger_wire::produce::msg_id`)
 *               ─▶ subject `atl.in.<tenant>.<event class>`
 *
 * Ids: every id the ledger takes must be one it can serve back (docs/ingest.md, "Ids"): no control
 * character and at most 1,024 bytes of UTF-8. A bad id is refused here, at `emit`, rather than
 * quarantined as `bad_id` later where the producer cannot see it.
 *
 * @module
 */

import { createHash } from "node:crypto";

/** A tenant is a NATS subject token (DESIGN.md §2); `_`-names are the ledger's own. */
export const TENANT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
/** The largest integer I-JSON keeps exactly (RFC 7493); ingest quarantines larger ones. */
export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER;
/** The longest id the ledger serves (bytes of UTF-8). */
export const MAX_ID_BYTES = 1024;
/** Attributes the ledger reads as ids (DESIGN.md §3, docs/ingest.md "Ids"). */
export const ID_ATTRIBUTES = ["id", "subject", "sessionid", "invocationid", "toolid"] as const;

/** An event the ledger would refuse; the message says which field and why. */
export class InvalidEvent extends Error {
  override name = "InvalidEvent";
}

/** A lone UTF-16 surrogate: not Unicode, so not UTF-8 either (JSON would carry it as `\udXXX`). */
const LONE_SURROGATE = /\p{Cs}/u;

/** Returns `tenant` if it is a valid, non-reserved tenant; throws `InvalidEvent` otherwise. */
export function checkTenant(tenant: unknown): string {
  if (typeof tenant !== "string" || !TENANT_PATTERN.test(tenant)) {
    throw new InvalidEvent(`tenant ${JSON.stringify(tenant)} is not [A-Za-z0-9][A-Za-z0-9_-]{0,63}`);
  }
  return tenant;
}

/** Throws `InvalidEvent` naming `where` when `value` is outside the ledger's id grammar. */
export function checkId(where: string, value: unknown): void {
  if (typeof value !== "string") {
    throw new InvalidEvent(`${where} must be a string`);
  }
  if (LONE_SURROGATE.test(value)) {
    throw new InvalidEvent(`${where}: a lone surrogate is not Unicode`);
  }
  const bytes = Buffer.byteLength(value, "utf8");
  if (bytes > MAX_ID_BYTES) {
    throw new InvalidEvent(`${where}: ${bytes} bytes, over the ${MAX_ID_BYTES}-byte limit for ids`);
  }
  for (const ch of value) {
    const code = ch.codePointAt(0) ?? 0;
    if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) {
      throw new InvalidEvent(`${where}: control character U+${code.toString(16).toUpperCase().padStart(4, "0")}`);
    }
  }
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * Throws `InvalidEvent` for what ingest cannot canonicalize or JSON cannot carry: integers beyond
 * ±(2^53−1), NaN and infinities, bigints, lone surrogates, functions, symbols, and objects other than
 * plain ones and arrays (unless they have a `toJSON`, whose result is checked instead).
 */
export function checkIJson(value: unknown, path = "/data"): void {
  if (value === null || typeof value === "boolean") {
    return;
  }
  if (typeof value === "string") {
    if (LONE_SURROGATE.test(value)) {
      throw new InvalidEvent(`${path}: a lone surrogate is not Unicode`);
    }
    return;
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new InvalidEvent(`${path}: NaN and infinities are not JSON`);
    }
    if (Number.isInteger(value) && Math.abs(value) > MAX_SAFE_INTEGER) {
      throw new InvalidEvent(`${path}: integer beyond ±(2^53−1) is not I-JSON; send it as a string`);
    }
    return;
  }
  if (typeof value === "bigint") {
    throw new InvalidEvent(`${path}: a bigint is not JSON; send it as a string`);
  }
  if (typeof value === "object") {
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") {
      checkIJson(toJSON.call(value), path);
      return;
    }
    if (Array.isArray(value)) {
      value.forEach((item, i) => checkIJson(item === undefined ? null : item, `${path}/${i}`));
      return;
    }
    if (!isPlainObject(value)) {
      throw new InvalidEvent(`${path}: ${value.constructor?.name ?? "object"} is not JSON`);
    }
    for (const [key, item] of Object.entries(value)) {
      if (LONE_SURROGATE.test(key)) {
        throw new InvalidEvent(`${path}: object key with a lone surrogate`);
      }
      if (item !== undefined) {
        checkIJson(item, `${path}/${key}`);
      }
    }
    return;
  }
  if (value === undefined) {
    throw new InvalidEvent(`${path}: undefined is not JSON`);
  }
  throw new InvalidEvent(`${path}: ${typeof value} is not JSON`);
}

/** Header value bytes that stay as they are: printable ASCII except space, `"` and `%`. */
function kept(byte: number): boolean {
  return byte >= 0x21 && byte < 0x7f && byte !== 0x22 && byte !== 0x25;
}

/**
 * A header value as the CloudEvents HTTP binding writes it (`utf8_percent_encode` with the escapes
 * of `toolledger_wire::binding`).
 */
export function percentEncode(value: string): string {
  const raw = Buffer.from(value, "utf8");
  if (raw.every(kept)) {
    return value;
  }
  let out = "";
  for (const byte of raw) {
    out += kept(byte) ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** SHA-256 over `domain` then each part as u64be length ‖ UTF-8 bytes. */
export function lengthPrefixedDigest(domain: string, parts: readonly string[]): string {
  const h = createHash("sha256");
  h.update(domain, "utf8");
  for (const part of parts) {
    const raw = Buffer.from(part, "utf8");
    const len = Buffer.alloc(8);
    len.writeBigUInt64BE(BigInt(raw.length));
    h.update(len);
    h.update(raw);
  }
  return h.digest("hex");
}

/** `Nats-Msg-Id`: the digest `toolledger emit` uses, so both name an event alike. */
export function msgId(tenant: string, source: string, eventId: string): string {
  return lengthPrefixedDigest("toolledger.msg-id.v1", [tenant, source, eventId]);
}

/** `atl.in.<tenant>.<event class>`. */
export function inboundSubject(tenant: string, eventClass: string): string {
  return `atl.in.${tenant}.${eventClass}`;
}

/** What goes on the wire for one event (binary mode). */
export interface BinaryMessage {
  /** `atl.in.<tenant>.<event class>`. */
  subject: string;
  /** `ce-*` headers (percent-encoded), `ce-datacontenttype`, `Nats-Msg-Id`. */
  headers: Record<string, string>;
  /** The event's `data` as compact UTF-8 JSON. */
  body: Buffer;
}

/** `(subject, headers, body)` of a structured CloudEvent (an object with `data`) in binary mode. */
export function binaryMessage(event: Readonly<Record<string, unknown>>): BinaryMessage {
  const tenant = checkTenant(event.tenant);
  for (const name of ID_ATTRIBUTES) {
    if (name in event && event[name] !== undefined) {
      checkId(`/${name}`, event[name]);
    }
  }
  const data = event.data;
  if (data !== null && typeof data === "object" && !Array.isArray(data)) {
    for (const [key, value] of Object.entries(data)) {
      if (typeof value === "string" && (key.endsWith("_id") || key === "retry_of")) {
        checkId(`/data/${key}`, value);
      }
    }
  }
  checkIJson(data);
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(event)) {
    if (name === "data" || value === undefined) {
      continue;
    }
    if (typeof value !== "string") {
      throw new InvalidEvent(`attribute ${name} must be a string`);
    }
    headers[`ce-${name}`] = percentEncode(value);
  }
  headers["ce-datacontenttype"] ??= "application/json";
  if (typeof event.source !== "string" || typeof event.id !== "string" || typeof event.type !== "string") {
    throw new InvalidEvent("an event needs string id, source and type");
  }
  headers["Nats-Msg-Id"] = msgId(tenant, event.source, event.id);
  return {
    subject: inboundSubject(tenant, event.type),
    headers,
    body: Buffer.from(JSON.stringify(data), "utf8"),
  };
}
