/**
 * toolledger-producer: emit Agent Tool lifecycle events to a toolledger ledger without losing one.
 *
 *     import { Producer } from "toolledger-producer";
 *
 *     const producer = new Producer({ tenant: "acme", spoolDir: "/var/spool/agent", servers: "nats://127.0.0.1:4222" });
 *     const search = { toolId: "web.search", name: "search", namespace: "web", sensitiveFields: ["api_key"] };
 *     await producer.invoke(search, { q: "ledger", api_key: key }, async () => runSearch());
 *     await producer.close();
 *
 * Modules: `events` (typed builders, stable ids, trace context), `wire` (binary-mode CloudEvents over
 * NATS, the checks ingest applies), `spool` (the durable spool, docs/sdk/spool.md), `uploads` (large values through the tenant's
 * payload bucket), `producer` (emit
 * and the background sender), `invocation` (the lifecycle helper). The TypeScript twin of the Python
 * SDK (`sdk/python`): same ids, same wire bytes, same spool format.
 *
 * @module
 */

export {
  SCHEMA_VERSION,
  STATUS_OF_CLASS,
  INVOCATION_CLASSES,
  EventBuilder,
  nowRfc3339,
  stableId,
  toolDeclaration,
  traceContext,
  type BuildOptions,
  type CloudEvent,
  type Hook,
  type HookEvent,
  type Invocation,
  type InvocationClass,
  type Json,
  type PermissionDecision,
  type PermissionRequest,
  type Progress,
  type Result,
  type ResultClass,
  type Tool,
  type ToolError,
} from "./events.js";
export {
  InvocationScope,
  ToolFailure,
  errorClassOf,
  errorOf,
  producerTool,
  type InvocationOptions,
} from "./invocation.js";
export {
  DEFAULT_MAX_EVENT_BYTES,
  INBOUND_STREAM,
  Producer,
  type ProducerMetrics,
  type ProducerOptions,
} from "./producer.js";
export {
  Spool,
  SpoolError,
  SpoolFull,
  UPLOADS_DIR,
  decodePayload,
  encodeRecord,
  type FsyncPolicy,
  type FullPolicy,
  type Message,
  type SpoolOptions,
  type Upload,
} from "./spool.js";
export {
  DEFAULT_UPLOAD_THRESHOLD,
  MAX_UPLOAD_BYTES,
  MIN_UPLOAD_BYTES,
  bucketOf,
  extract,
  objectName,
  type Moved,
} from "./uploads.js";
export { InvalidEvent, binaryMessage, msgId, percentEncode } from "./wire.js";

/** The package version. */
export const VERSION = "0.1.0";
