/**
 * `Producer`: `emit` puts an event in the durable spool; a background sender drains the spool to
 * ATL_INBOUND and removes what the stream acked.
 *
 *     emit(event) ─▶ binaryMessage (checks, ce-* headers, Nats-Msg-Id)
 *                 ─▶ uploads.extract (values over uploadThresholdBytes, or what keeps the event over
 *                    maxEventBytes, become {"$upload": …} references; their bytes go along)
 *                 ─▶ Spool.append (sidecars, then the record: durable)
 *                 ─▶ resolves (the event is on disk; it will reach the ledger)
 *     sender (an async loop on this process's event loop, one NATS connection that reconnects forever)
 *       ─▶ Spool.head(window) ─▶ for a record with uploads: ObjectStore.putBlob of each sidecar into
 *          ATL_PAYLOADS_<tenant> (skipped when the object is there with that size and digest), in order
 *       ─▶ js.publish(...) for each, concurrently, each awaiting its PubAck
 *       ─▶ Spool.ack(acked prefix) ─▶ on a failure: capped exponential backoff with jitter, window 1
 *          until a publish succeeds again (so a refused event is not overtaken by its successors)
 *
 * Retries resend the same bytes (same id, same `Nats-Msg-Id`), so the ledger holds each event once.
 *
 * @module
 */

import { connect, headers as natsHeaders, type NatsConnection, type ConnectionOptions } from "@nats-io/transport-node";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { Objm, type ObjectStore } from "@nats-io/obj";

import { EventBuilder, type CloudEvent, type Invocation, type Tool, toolDeclaration } from "./events.js";
import { InvocationScope, type InvocationOptions } from "./invocation.js";
import { Spool, SpoolError, type FsyncPolicy, type FullPolicy, type Message } from "./spool.js";
import { DEFAULT_UPLOAD_THRESHOLD, bucketOf, extract } from "./uploads.js";
import { InvalidEvent, binaryMessage } from "./wire.js";

/** The stream producers publish to (DESIGN.md §2); the expected-stream header makes a publish that a
 * misconfigured server would route elsewhere fail instead. */
export const INBOUND_STREAM = "ATL_INBOUND";
/** Default ceiling on one event's wire size: the default NATS max_payload (1 MiB) with room for the
 * headers. Larger values belong in the tenant's payload bucket (schemas/README.md, producer uploads). */
export const DEFAULT_MAX_EVENT_BYTES = 1024 * 1024 - 16 * 1024;

/** Options of a `Producer`; times are milliseconds. */
export interface ProducerOptions {
  tenant: string;
  /** The spool directory: one per producer identity (tenant + source); created 0700. */
  spoolDir: string;
  /** NATS server URL(s); default `nats://127.0.0.1:4222`. */
  servers?: string | string[];
  /** The CloudEvents `source`; default `urn:toolledger-producer:typescript`. */
  source?: string;
  /** The agent session every event carries unless it names its own. */
  sessionId?: string;
  /** `every_event` (default): `emit` resolves after the record's fdatasync. `interval`: records are
   * fdatasync'ed at most `fsyncIntervalMs` later; a machine crash (not a process crash) can lose that
   * window. */
  fsync?: FsyncPolicy;
  fsyncIntervalMs?: number;
  /** Default 256 MiB. */
  maxBytes?: number;
  /** Default 8 MiB. */
  segmentBytes?: number;
  /** `block` (default): `emit` waits up to `blockTimeoutMs` for room, then rejects with `SpoolFull`;
   * `fail`: rejects with `SpoolFull` at once. Never a silent drop. */
  whenFull?: FullPolicy;
  /** Default 30,000. */
  blockTimeoutMs?: number;
  /** Default `DEFAULT_MAX_EVENT_BYTES`. */
  maxEventBytes?: number;
  /** A value in `data` whose JSON is over this many bytes (default 256 KiB), and whatever else keeps
   * an event over `maxEventBytes`, travels through the tenant's payload bucket `ATL_PAYLOADS_<tenant>`
   * and the event references it (`{"$upload": …}`). `null` turns uploads off: events over
   * `maxEventBytes` are refused. */
  uploadThresholdBytes?: number | null;
  /** How long one publish waits for its PubAck (default 5,000). */
  publishTimeoutMs?: number;
  /** Publishes in flight at once (default 64). */
  maxInFlight?: number;
  /** First retry delay (default 100); doubles, with ±20 % jitter, up to `backoffMaxMs` (default 5,000). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** More options for the NATS connection (credentials, TLS, name, …). */
  connectOptions?: Partial<ConnectionOptions>;
  /** Start the sender now (default true). */
  start?: boolean;
}

/** The producer's metrics (docs/sdk/spool.md, "Metrics"). */
export interface ProducerMetrics {
  /** Events in the spool not yet acked. */
  queued: number;
  /** Events acked by ATL_INBOUND since this producer started. */
  sent: number;
  /** Publish or upload attempts that failed and were (or will be) retried. */
  retried: number;
  /** Objects put into the payload bucket since this producer started. */
  uploaded: number;
  /** Seconds since the oldest queued event was emitted (0 when the spool is drained). */
  oldestAge: number;
  /** Bytes of spool segments on disk. */
  spoolBytes: number;
  /** Events found unacked in the spool at open. */
  recovered: number;
}

/**
 * A producer for one tenant, with a durable spool in `spoolDir`. Call `close()` when done: the
 * sender's NATS connection keeps the process alive until then. A process that dies without it loses
 * nothing: unsent events stay in the spool and go out at the next start with the same `spoolDir`.
 */
export class Producer {
  readonly events: EventBuilder;
  readonly tenant: string;
  readonly source: string;
  readonly spool: Spool;
  readonly servers: string[];
  /** Events acked by ATL_INBOUND since this producer started. */
  sent = 0;
  /** Publish or upload attempts that failed and were retried. */
  retried = 0;
  /** Objects put into the payload bucket since start. */
  uploaded = 0;
  /** `ATL_PAYLOADS_<tenant>`: where this producer's large values go. */
  readonly bucket: string;
  /** The last publish or connect error, for operators. */
  lastError: string | undefined;

  readonly #maxEventBytes: number;
  readonly #uploadThreshold: number | null;
  #stores = new Map<string, ObjectStore>();
  readonly #publishTimeoutMs: number;
  readonly #maxInFlight: number;
  readonly #backoffInitialMs: number;
  readonly #backoffMaxMs: number;
  readonly #connectOptions: Partial<ConnectionOptions>;
  readonly #declared = new Set<string>();
  #sender: Promise<void> | undefined;
  #stopping = false;
  #wakeIdle: (() => void) | undefined;
  #wakeSleep: (() => void) | undefined;
  #nc: NatsConnection | undefined;

  constructor(options: ProducerOptions) {
    this.source = options.source ?? "urn:toolledger-producer:typescript";
    this.events = new EventBuilder(options.tenant, this.source, options.sessionId);
    this.tenant = this.events.tenant;
    this.spool = new Spool(options.spoolDir, {
      ...(options.maxBytes !== undefined ? { maxBytes: options.maxBytes } : {}),
      ...(options.segmentBytes !== undefined ? { segmentBytes: options.segmentBytes } : {}),
      ...(options.fsync !== undefined ? { fsync: options.fsync } : {}),
      ...(options.fsyncIntervalMs !== undefined ? { fsyncIntervalMs: options.fsyncIntervalMs } : {}),
      ...(options.whenFull !== undefined ? { whenFull: options.whenFull } : {}),
      ...(options.blockTimeoutMs !== undefined ? { blockTimeoutMs: options.blockTimeoutMs } : {}),
    });
    const servers = options.servers ?? "nats://127.0.0.1:4222";
    this.servers = typeof servers === "string" ? [servers] : [...servers];
    this.#maxEventBytes = options.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
    this.#uploadThreshold = options.uploadThresholdBytes === undefined ? DEFAULT_UPLOAD_THRESHOLD : options.uploadThresholdBytes;
    this.bucket = bucketOf(this.tenant);
    this.#publishTimeoutMs = options.publishTimeoutMs ?? 5000;
    this.#maxInFlight = Math.max(1, options.maxInFlight ?? 64);
    this.#backoffInitialMs = options.backoffInitialMs ?? 100;
    this.#backoffMaxMs = options.backoffMaxMs ?? 5000;
    this.#connectOptions = options.connectOptions ?? {};
    if (options.start ?? true) {
      this.start();
    }
  }

  // ── metrics ────────────────────────────────────────────────────────────────────────────────────

  /** Events in the spool not yet acked. */
  get queued(): number {
    return this.spool.queued;
  }

  /** Seconds since the oldest queued event was emitted (0 when the spool is drained). */
  get oldestAge(): number {
    const oldest = this.spool.oldestEmittedAtMs();
    return oldest === undefined ? 0 : Math.max(0, (Date.now() - oldest) / 1000);
  }

  /** `queued`, `sent`, `retried`, `uploaded`, `oldestAge`, `spoolBytes` and `recovered` at once. */
  metrics(): ProducerMetrics {
    return {
      queued: this.queued,
      sent: this.sent,
      retried: this.retried,
      uploaded: this.uploaded,
      oldestAge: this.oldestAge,
      spoolBytes: this.spool.usedBytes,
      recovered: this.spool.recovered,
    };
  }

  // ── emitting ───────────────────────────────────────────────────────────────────────────────────

  /**
   * Stores a structured CloudEvent (as the builders make) durably; resolves to its id. The checks run
   * and the record is written (and, under `every_event`, fdatasync'ed) before this returns its promise
   * unless the spool is full and the policy is `block`. Rejects with `InvalidEvent` for an event the
   * ledger would refuse, `SpoolFull` by the full policy.
   */
  async emit(event: CloudEvent): Promise<string> {
    if (event.tenant !== this.tenant) {
      throw new InvalidEvent(`event tenant ${JSON.stringify(event.tenant)} is not this producer's ${JSON.stringify(this.tenant)}`);
    }
    const { subject, headers, body: encoded } = binaryMessage(event);
    let body = encoded;
    let headerBytes = 0;
    for (const [name, value] of Object.entries(headers)) headerBytes += name.length + value.length + 4;
    const threshold = this.#uploadThreshold;
    let moved: ReturnType<typeof extract>["uploads"] = [];
    // A body within the threshold has no value over it: small events skip the walk.
    if (threshold !== null && (body.length > threshold || body.length + headerBytes > this.#maxEventBytes)) {
      const extracted = extract(JSON.parse(body.toString("utf8")), {
        eventId: event.id,
        bucket: this.bucket,
        threshold,
        budget: this.#maxEventBytes - headerBytes,
      });
      moved = extracted.uploads;
      if (moved.length > 0) {
        body = Buffer.from(JSON.stringify(extracted.data), "utf8");
      }
    }
    const size = body.length + headerBytes;
    if (size > this.#maxEventBytes) {
      throw new InvalidEvent(
        `event ${event.id} is ${size} bytes, over maxEventBytes ${this.#maxEventBytes}: ` +
          "upload large values to the tenant's payload bucket and reference them",
      );
    }
    const message: Message = { subject, headers, body, emittedAtMs: Date.now() };
    if (moved.length > 0) message.uploads = moved.map((m) => m.upload);
    await this.spool.append(
      message,
      moved.map((m) => m.content),
    );
    this.#wakeIdle?.();
    return event.id;
  }

  /** Emits `tool.declared` for `tool` once per producer (declarations with sensitive fields must
   * reach the ledger before the tool's invocations; the spool keeps their order). */
  async declare(tool: Tool): Promise<void> {
    const key = JSON.stringify([tool.toolId, toolDeclaration(tool)]);
    if (!this.#declared.has(key)) {
      await this.emit(this.events.toolDeclared(tool));
      this.#declared.add(key);
    }
  }

  /** An `InvocationScope` for one call of `tool` with `input` as its model input, not yet begun:
   * `await scope.begin()`, …, `await scope.finish(error?)`. `invoke` does all of it around a function. */
  invocation(tool: Tool, input?: unknown, options: InvocationOptions = {}): InvocationScope {
    return new InvocationScope(this, tool, input, options);
  }

  /**
   * Runs `fn` as one invocation of `tool` with `input`: emits `tool.declared` (once), planned, started,
   * then succeeded with `fn`'s return value as the result (unless `fn` called `inv.result`), or
   * failed / timed_out / canceled with the error class of what it threw — which is rethrown.
   */
  async invoke<T>(
    tool: Tool,
    input: unknown,
    fn: (inv: InvocationScope) => Promise<T> | T,
    options: InvocationOptions = {},
  ): Promise<T> {
    return this.invocation(tool, input, options).run(fn);
  }

  /** Builds and emits one `tool.invocation.*` event; for lifecycles the helpers do not cover. */
  async emitInvocation(eventClass: Parameters<EventBuilder["invocation"]>[0], snapshot: Invocation): Promise<string> {
    return this.emit(this.events.invocation(eventClass, snapshot));
  }

  // ── the sender ─────────────────────────────────────────────────────────────────────────────────

  /** Starts the background sender (done by the constructor unless `start: false`). */
  start(): void {
    if (this.#sender === undefined && !this.spool.closed) {
      this.#stopping = false;
      this.#sender = this.#run().catch((e: unknown) => {
        this.lastError = `sender stopped: ${String(e)}`;
        process.emitWarning(`toolledger-producer: ${this.lastError}`);
      });
    }
  }

  async #run(): Promise<void> {
    let js: JetStreamClient | undefined;
    let backoff = this.#backoffInitialMs;
    let window = this.#maxInFlight;
    try {
      while (!this.#stopping) {
        if (this.#nc === undefined || this.#nc.isClosed()) {
          try {
            this.#nc = await connect({
              servers: this.servers,
              reconnect: true,
              maxReconnectAttempts: -1,
              reconnectTimeWait: 250,
              timeout: 2000,
              ...this.#connectOptions,
            });
          } catch (e) {
            this.#nc = undefined;
            this.lastError = `connect: ${String(e)}`;
            await this.#sleep(backoff);
            backoff = this.#nextBackoff(backoff);
            continue;
          }
          if (this.#stopping) break;
          js = jetstream(this.#nc, { timeout: this.#publishTimeoutMs });
          this.#stores = new Map();
        }
        let batch: Message[];
        try {
          batch = this.spool.head(window);
        } catch (e) {
          if (this.spool.closed) break;
          this.lastError = String(e);
          process.emitWarning(`toolledger-producer: ${this.lastError}`);
          await this.#sleep(this.#backoffMaxMs);
          continue;
        }
        if (batch.length === 0) {
          await this.#idle(500);
          continue;
        }
        const client = js as JetStreamClient;
        // Uploads first, in order: a record is published only once its objects are in the bucket; at
        // the first that fails, only the records before it go out.
        let ready = batch.length;
        let uploadError: unknown;
        const ackedBefore = new Set<number>();
        for (let i = 0; i < batch.length; i++) {
          if ((batch[i] as Message).uploads?.length) {
            try {
              if (!(await this.#putUploads(client, batch[i] as Message))) ackedBefore.add(i);
            } catch (e) {
              ready = i;
              uploadError = e;
              break;
            }
          }
        }
        const results = await Promise.allSettled(
          batch.slice(0, ready).map((m, i) => (ackedBefore.has(i) ? Promise.resolve() : this.#publish(client, m))),
        );
        let ok = 0;
        for (const result of results) {
          if (result.status === "rejected") break;
          ok += 1;
        }
        this.spool.ack(ok);
        this.sent += ok;
        if (ok < batch.length) {
          this.retried += batch.length - ok;
          this.lastError = String(ok < ready ? (results[ok] as PromiseRejectedResult).reason : uploadError);
          window = 1;
          await this.#sleep(backoff);
          backoff = this.#nextBackoff(backoff);
        } else {
          backoff = this.#backoffInitialMs;
          window = Math.min(this.#maxInFlight, window * 2);
        }
      }
    } finally {
      const nc = this.#nc;
      this.#nc = undefined;
      if (nc !== undefined && !nc.isClosed()) {
        await Promise.race([nc.close().catch(() => undefined), new Promise((r) => setTimeout(r, 2000).unref())]);
      }
    }
  }

  async #publish(js: JetStreamClient, message: Message): Promise<void> {
    const h = natsHeaders();
    for (const [name, value] of Object.entries(message.headers)) {
      h.set(name, value);
    }
    await js.publish(message.subject, message.body, {
      headers: h,
      expect: { streamName: INBOUND_STREAM },
      timeout: this.#publishTimeoutMs,
    });
  }

  async #store(js: JetStreamClient, bucket: string): Promise<ObjectStore> {
    let store = this.#stores.get(bucket);
    if (store === undefined) {
      store = await new Objm(js).open(bucket);
      this.#stores.set(bucket, store);
    }
    return store;
  }

  /**
   * Puts each upload of `message` into its bucket unless the object is already there with the same
   * size and digest (a retry, or a restart after a put whose record was not acked). False when the
   * record was acked before: a sidecar is missing and its object is not in the bucket. Sidecars are
   * durable before their record and deleted only after its ack, so that happens only when a power loss
   * or a damaged `ack` file brought acked records back (spool.md, Uploads); such a record is counted
   * acked, not published with a reference to nothing.
   */
  async #putUploads(js: JetStreamClient, message: Message): Promise<boolean> {
    for (const upload of message.uploads ?? []) {
      const store = await this.#store(js, upload.bucket);
      const info = await store.info(upload.name);
      const present = info !== null && !info.deleted;
      if (!present && !this.spool.hasUpload(upload)) {
        process.emitWarning(
          `toolledger-producer: spool ${this.spool.directory}: sidecar of ${upload.name} is gone and the object ` +
            `is not in ${upload.bucket}: the record was acked before its ack position was lost; not sent again`,
        );
        return false;
      }
      if (present && info.size === upload.size && digestHex(info.digest) === upload.sha256) {
        continue;
      }
      const content = await this.spool.readUpload(upload);
      const put = await store.putBlob({ name: upload.name }, content);
      if (digestHex(put.digest) !== upload.sha256) {
        throw new SpoolError(`object ${upload.name} in ${upload.bucket} has digest ${put.digest}, not sha256 ${upload.sha256}`);
      }
      this.uploaded += 1;
    }
    return true;
  }

  #nextBackoff(backoff: number): number {
    return Math.min(this.#backoffMaxMs, backoff * 2) * (0.8 + 0.4 * Math.random());
  }

  /** Sleeps `ms`, cut short by `close()`. */
  #sleep(ms: number): Promise<void> {
    return this.#idle(ms, false);
  }

  /** Waits `ms`, or until `close()` (or, when `byEmit`, an emit) wakes the sender. */
  #idle(ms: number, byEmit = true): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#wakeIdle = undefined;
        this.#wakeSleep = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wakeIdle = byEmit ? done : undefined;
      this.#wakeSleep = done;
    });
  }

  // ── flush and shutdown ─────────────────────────────────────────────────────────────────────────

  /** Waits until every emitted event is acked; true when drained, false when `timeoutMs` passed
   * first (the rest stays in the spool). Starts the sender if it was not. */
  async flush(timeoutMs?: number): Promise<boolean> {
    this.start();
    return this.spool.waitDrained(timeoutMs);
  }

  /** Flushes for up to `timeoutMs` (default 10,000), stops the sender and closes the spool. Resolves
   * to whether everything was acked; what was not stays in the spool for the next start. */
  async close(timeoutMs = 10_000): Promise<boolean> {
    if (this.spool.closed) {
      return this.spool.queued === 0;
    }
    const drained = this.#sender !== undefined && timeoutMs > 0 ? await this.flush(timeoutMs) : this.spool.queued === 0;
    this.#stopping = true;
    this.#wakeSleep?.();
    if (this.#sender !== undefined) {
      await Promise.race([
        this.#sender,
        new Promise((r) => setTimeout(r, Math.max(5000, this.#publishTimeoutMs + 3000)).unref()),
      ]);
    }
    this.spool.close();
    return drained;
  }
}

/** The hex SHA-256 of an object store digest (`SHA-256=<base64url>`), or "" for another kind. */
function digestHex(digest: string): string {
  if (!digest.startsWith("SHA-256=")) return "";
  return Buffer.from(digest.slice("SHA-256=".length), "base64url").toString("hex");
}
