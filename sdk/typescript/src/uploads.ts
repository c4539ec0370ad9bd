/**
 * Large values of an event move to the tenant's payload bucket (`ATL_PAYLOADS_<tenant>`) and the event
 * carries a `{"$upload": {bucket, name, sha256, size, content_type}}` reference in their place
 * (schemas/README.md, producer uploads); ingest copies the object into its blob store, puts a `$payload`
 * reference there, and deletes the object once the entry is in the ledger. The twin of the Python SDK's
 * `uploads.py`: the same event moves the same values under the same names with the same bytes.
 *
 *     emit ─▶ extract(data) ─▶ data with references + [(Upload, bytes)]   (no network: emit stays offline)
 *          ─▶ Spool.append: each value's bytes to a durable sidecar, then the record
 *     sender ─▶ ObjectStore.put(name, sidecar bytes) unless the object is already there with that digest
 *            ─▶ publish the record ─▶ acked: the sidecars are deleted
 *
 * Which values move (`extract`):
 * 1. every value in `data` whose compact JSON is over `threshold` bytes, deepest first: a long string is
 *    moved on its own; an object or array is moved whole only when it is still over `threshold` once its
 *    large members were moved (and then it goes with its original members, never with references inside);
 * 2. while the event is still over its budget (`maxEventBytes` less the headers), the largest value that
 *    holds no reference and is at least `MIN_UPLOAD_BYTES`, one at a time.
 *
 * A string travels as its UTF-8 text (`text/plain; charset=utf-8`); any other value as its compact JSON
 * (`application/json`: the bytes are the field's JSON value). The object name is
 * `<event id>/<JSON Pointer from the event root>`, percent-encoded outside `[A-Za-z0-9._~/-]`.
 *
 * `extract` works on the JSON the event's body holds (`JSON.parse` of it), so sizes are those of the
 * bytes on the wire.
 *
 * @module
 */

import { createHash } from "node:crypto";

import type { Upload } from "./spool.js";
import { InvalidEvent } from "./wire.js";

/** The default size above which a value travels through the payload bucket: a quarter of the default
 * `maxEventBytes`, so that a few large values never push an event over it. */
export const DEFAULT_UPLOAD_THRESHOLD = 256 * 1024;
/** Values smaller than this are never moved to make an event fit: ids and small fields stay inline. */
export const MIN_UPLOAD_BYTES = 1024;
/** Ingest's limit on one upload (it holds one in memory while checking and copying it). */
export const MAX_UPLOAD_BYTES = 256 * 1024 * 1024;

export const TEXT = "text/plain; charset=utf-8";
export const JSON_TYPE = "application/json";

/** A JSON value as `JSON.parse` makes it. */
type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** `ATL_PAYLOADS_<tenant>`: the bucket a tenant's producers upload to. */
export function bucketOf(tenant: string): string {
  return `ATL_PAYLOADS_${tenant}`;
}

function safe(byte: number): boolean {
  return (
    (byte >= 0x41 && byte <= 0x5a) || // A-Z
    (byte >= 0x61 && byte <= 0x7a) || // a-z
    (byte >= 0x30 && byte <= 0x39) || // 0-9
    byte === 0x2e || // .
    byte === 0x5f || // _
    byte === 0x7e || // ~
    byte === 0x2f || // /
    byte === 0x2d // -
  );
}

/** `<event id><pointer>` (the pointer starts with `/`), percent-encoded outside a safe set. */
export function objectName(eventId: string, pointer: string): string {
  let out = "";
  for (const byte of Buffer.from(eventId + pointer, "utf8")) {
    out += safe(byte) ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** Compact JSON as UTF-8 bytes. */
function dumps(value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value), "utf8");
}

/** Byte length of `value`'s compact JSON. */
function sizeOf(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value), "utf8");
}

function escape(key: string): string {
  return key.replaceAll("~", "~0").replaceAll("/", "~1");
}

function unescape(part: string): string {
  return part.replaceAll("~1", "/").replaceAll("~0", "~");
}

function isObject(value: JsonValue): value is { [key: string]: JsonValue } {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function isReference(value: JsonValue): boolean {
  if (!isObject(value)) return false;
  const keys = Object.keys(value);
  return keys.length === 1 && (keys[0] === "$upload" || keys[0] === "$payload");
}

/** An object with exactly these own properties (`__proto__` included, as a plain key). */
function objectOf(entries: [string, JsonValue][]): { [key: string]: JsonValue } {
  return Object.fromEntries(entries) as { [key: string]: JsonValue };
}

/** One moved value: its reference's fields (`file` unset until the spool names the sidecar) and bytes. */
export interface Moved {
  upload: Upload;
  content: Buffer;
}

class Extraction {
  readonly uploads: Moved[] = [];

  constructor(
    readonly eventId: string,
    readonly bucket: string,
  ) {}

  reference(value: JsonValue, pointer: string): [JsonValue, number] {
    const [content, contentType] = typeof value === "string" ? [Buffer.from(value, "utf8"), TEXT] : [dumps(value), JSON_TYPE];
    if (content.length > MAX_UPLOAD_BYTES) {
      throw new InvalidEvent(
        `event ${this.eventId}: ${pointer} is ${content.length} bytes, over the ${MAX_UPLOAD_BYTES}-byte limit ` +
          "ingest sets for one upload",
      );
    }
    const upload: Upload = {
      bucket: this.bucket,
      name: objectName(this.eventId, pointer),
      sha256: createHash("sha256").update(content).digest("hex"),
      size: content.length,
      contentType,
      file: "",
    };
    this.uploads.push({ upload, content });
    const ref = {
      $upload: {
        bucket: upload.bucket,
        name: upload.name,
        sha256: upload.sha256,
        size: upload.size,
        content_type: upload.contentType,
      },
    };
    return [ref, sizeOf(ref)];
  }

  /** `value` with every member over `threshold` moved, and its compact JSON size. */
  overThreshold(value: JsonValue, pointer: string, threshold: number, root: boolean): [JsonValue, number] {
    const mark = this.uploads.length;
    if (isReference(value)) {
      return [value, sizeOf(value)];
    }
    let out: JsonValue;
    let size: number;
    if (Array.isArray(value)) {
      const items: JsonValue[] = [];
      size = 2 + Math.max(0, value.length - 1);
      value.forEach((child, i) => {
        const [moved, childSize] = this.overThreshold(child, `${pointer}/${i}`, threshold, false);
        items.push(moved);
        size += childSize;
      });
      out = items;
    } else if (isObject(value)) {
      const entries: [string, JsonValue][] = [];
      const keys = Object.keys(value);
      size = 2 + Math.max(0, keys.length - 1);
      for (const key of keys) {
        const [moved, childSize] = this.overThreshold(value[key] as JsonValue, `${pointer}/${escape(key)}`, threshold, false);
        entries.push([key, moved]);
        size += sizeOf(key) + 1 + childSize;
      }
      out = objectOf(entries);
    } else {
      out = value;
      size = sizeOf(value);
    }
    if (root || size <= threshold) {
      return [out, size];
    }
    // Still too large with its large members moved: it goes whole, with its original members.
    this.uploads.length = mark;
    return this.reference(value, pointer);
  }
}

/** The largest movable value under `value` as [size, pointer], `value`'s size, and whether it holds a
 * reference. */
function largestCandidate(value: JsonValue, pointer: string, root: boolean): [[number, string] | undefined, number, boolean] {
  if (isReference(value)) {
    return [undefined, sizeOf(value), true];
  }
  let best: [number, string] | undefined;
  let holds = false;
  let size: number;
  if (Array.isArray(value) || isObject(value)) {
    const array = Array.isArray(value);
    const keys = array ? value.map((_, i) => String(i)) : Object.keys(value);
    size = 2 + Math.max(0, keys.length - 1);
    for (const key of keys) {
      const child = (array ? (value as JsonValue[])[Number(key)] : (value as { [key: string]: JsonValue })[key]) as JsonValue;
      const [childBest, childSize, childHolds] = largestCandidate(child, `${pointer}/${array ? key : escape(key)}`, false);
      size += childSize + (array ? 0 : sizeOf(key) + 1);
      holds ||= childHolds;
      if (childBest !== undefined && (best === undefined || childBest[0] > best[0])) {
        best = childBest;
      }
    }
  } else {
    size = sizeOf(value);
  }
  if (!root && !holds && size >= MIN_UPLOAD_BYTES && (best === undefined || size > best[0])) {
    best = [size, pointer];
  }
  return [best, size, holds];
}

function replace(value: JsonValue, parts: string[], replacement: JsonValue): JsonValue {
  if (parts.length === 0) {
    return replacement;
  }
  const [key, ...rest] = parts as [string, ...string[]];
  if (Array.isArray(value)) {
    const copy = [...value];
    copy[Number(key)] = replace(value[Number(key)] as JsonValue, rest, replacement);
    return copy;
  }
  const object = value as { [key: string]: JsonValue };
  return objectOf(Object.keys(object).map((k) => [k, k === key ? replace(object[k] as JsonValue, rest, replacement) : (object[k] as JsonValue)]));
}

function get(value: JsonValue, parts: string[]): JsonValue {
  for (const key of parts) {
    value = (Array.isArray(value) ? value[Number(key)] : (value as { [key: string]: JsonValue })[key]) as JsonValue;
  }
  return value;
}

/**
 * `data` (the event's, at `/data`, as parsed from its JSON body) with its large values replaced by
 * upload references, and each upload with its bytes. `budget` is the most the encoded `data` may take.
 * The input is not changed. Throws `InvalidEvent` when no value can be moved to make the event fit.
 */
export function extract(
  data: unknown,
  options: { eventId: string; bucket: string; threshold: number; budget: number },
): { data: unknown; uploads: Moved[] } {
  const extraction = new Extraction(options.eventId, options.bucket);
  let [out, size] = extraction.overThreshold(data as JsonValue, "/data", options.threshold, true);
  while (size > options.budget) {
    const [best] = largestCandidate(out, "/data", true);
    if (best === undefined) {
      throw new InvalidEvent(
        `event ${options.eventId}: data is ${size} bytes, over the budget of ${options.budget}, and no value of ` +
          `at least ${MIN_UPLOAD_BYTES} bytes is left to upload`,
      );
    }
    const parts = best[1].split("/").slice(2).map(unescape);
    const [ref] = extraction.reference(get(out, parts), best[1]);
    out = replace(out, parts, ref);
    size = sizeOf(out);
  }
  return { data: out, uploads: extraction.uploads };
}
