//! [`Producer`]: `emit` puts an event in the durable spool; a background task drains the spool to
//! ATL_INBOUND and removes what the stream acked.
//!
//! ```text
//! emit(event) ─▶ wire::binary_message (checks, ce-* headers, Nats-Msg-Id)
//!             ─▶ uploads::extract (values over upload_threshold_bytes, or what keeps the event over
//!                max_event_bytes, become {"$upload": …} references; their bytes go along)
//!             ─▶ Spool::append (sidecars, then the record: durable) ─▶ returns: the event is on
//!                disk; it will reach the ledger
//! sender task (one async-nats connection that reconnects forever)
//!   ─▶ Spool::head(window) ─▶ for a record with uploads: put each sidecar into ATL_PAYLOADS_<tenant>
//!      (skipped when the object is there with that size and digest), in order; at the first failed
//!      put only the records before it are published
//!   ─▶ send_publish each, in order on the wire, expected stream ATL_INBOUND
//!   ─▶ await the PubAcks in order ─▶ Spool::ack(acked prefix)
//!   ─▶ on a failure: capped exponential backoff with jitter, window 1 until a publish succeeds
//!      again (so a refused event is not overtaken by many of its successors); window doubles back
//!      up to max_in_flight after each clean batch
//! close ─▶ flush(timeout) ─▶ stop the sender ─▶ Spool::close (unacked records stay for the next open)
//! ```
//!
//! Retries resend the same bytes (same id, same `Nats-Msg-Id`), so the ledger holds each event once.
//! Dropping every handle of a producer stops its sender; what it had not sent stays in the spool and
//! goes out at the next start with the same spool directory.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use async_nats::{HeaderMap, HeaderName, HeaderValue, ServerAddr};
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::events::{Event, EventBuilder, Tool, TraceContext};
use crate::invocation::{InvocationGuard, InvocationOptions};
use crate::spool::{FsyncPolicy, Message, Spool, SpoolConfig};
use crate::{Error, Result, uploads, wire};

/// The stream producers publish to (DESIGN.md §2); the expected-stream header makes a publish that a
/// misconfigured server would route elsewhere fail instead.
pub const INBOUND_STREAM: &str = "ATL_INBOUND";
/// Default ceiling on one event's wire size: the default NATS max_payload (1 MiB) with room for the
/// headers. Larger values belong in the tenant's payload bucket.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1024 * 1024 - 16 * 1024;
/// The default `source` of this SDK's events.
pub const DEFAULT_SOURCE: &str = "urn:toolledger-producer:rust";

/// Called with each event once it is durably in the spool (for a producer's own log or metrics).
pub type EmitObserver = Arc<dyn Fn(&Event) + Send + Sync>;

/// How a [`Producer`] is set up. `ProducerConfig::new(tenant, spool_dir)` has the defaults of
/// docs/sdk/spool.md; change fields with struct update syntax or the `with_*` methods.
#[derive(Clone)]
#[non_exhaustive]
pub struct ProducerConfig {
    /// The tenant every event is for.
    pub tenant: String,
    /// The spool directory: one per producer identity (tenant + source).
    pub spool_dir: PathBuf,
    /// NATS URLs (`nats://127.0.0.1:4222`).
    pub servers: Vec<String>,
    /// The events' `source` (`urn:toolledger-producer:rust`).
    pub source: String,
    /// The agent session events are in by default.
    pub session_id: Option<String>,
    /// The trace context events carry by default.
    pub trace: Option<TraceContext>,
    /// Spool bounds and policies.
    pub spool: SpoolConfig,
    /// Events larger on the wire (once large values moved to uploads) are refused with
    /// [`Error::InvalidEvent`] at emit.
    pub max_event_bytes: usize,
    /// A value in `data` whose JSON is over this (256 KiB), and whatever else keeps the event over
    /// `max_event_bytes`, travels through the tenant's payload bucket `ATL_PAYLOADS_<tenant>` as an
    /// `{"$upload": …}` reference ([`crate::uploads`]); `emit` stays offline: the bytes wait in the
    /// spool until the sender puts them, just before it publishes the event. `None` turns uploads off
    /// (events over `max_event_bytes` are refused).
    pub upload_threshold_bytes: Option<usize>,
    /// How long a publish waits for its PubAck before it is retried (5 s).
    pub publish_timeout: Duration,
    /// Publishes awaiting their acks at once (64).
    pub max_in_flight: usize,
    /// First retry delay (100 ms); doubles, with jitter, up to `backoff_max` (5 s).
    pub backoff_initial: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Connection options (credentials, TLS, name); the producer adds reconnect-forever and
    /// retry-on-initial-connect.
    pub connect_options: Option<async_nats::ConnectOptions>,
    /// Whether [`Producer::open`] starts the sender (true); with false the spool fills until
    /// [`Producer::start`] or [`Producer::flush`].
    pub start_sender: bool,
    /// Called with each event once it is durably stored.
    pub on_emitted: Option<EmitObserver>,
}

impl std::fmt::Debug for ProducerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerConfig")
            .field("tenant", &self.tenant)
            .field("spool_dir", &self.spool_dir)
            .field("servers", &self.servers)
            .field("source", &self.source)
            .field("spool", &self.spool)
            .field("publish_timeout", &self.publish_timeout)
            .finish_non_exhaustive()
    }
}

impl ProducerConfig {
    /// A producer for `tenant` with its spool in `spool_dir`, talking to `nats://127.0.0.1:4222`.
    pub fn new(tenant: impl Into<String>, spool_dir: impl Into<PathBuf>) -> Self {
        Self {
            tenant: tenant.into(),
            spool_dir: spool_dir.into(),
            servers: vec!["nats://127.0.0.1:4222".into()],
            source: DEFAULT_SOURCE.into(),
            session_id: None,
            trace: None,
            spool: SpoolConfig::default(),
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            upload_threshold_bytes: Some(uploads::DEFAULT_UPLOAD_THRESHOLD),
            publish_timeout: Duration::from_secs(5),
            max_in_flight: 64,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            connect_options: None,
            start_sender: true,
            on_emitted: None,
        }
    }

    /// With these NATS URLs.
    pub fn with_servers<S: Into<String>>(mut self, servers: impl IntoIterator<Item = S>) -> Self {
        self.servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// With this `source`.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// With this default session.
    pub fn with_session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// With these spool bounds and policies.
    pub fn with_spool(mut self, spool: SpoolConfig) -> Self {
        self.spool = spool;
        self
    }
}

/// A producer's counters (docs/sdk/spool.md "Metrics").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// Records not yet acked.
    pub queued: u64,
    /// Events acked by ATL_INBOUND since this producer started.
    pub sent: u64,
    /// Failed publish or upload attempts, each retried.
    pub retried: u64,
    /// Objects put into the payload bucket since this producer started.
    pub uploaded: u64,
    /// Seconds since the oldest queued event was emitted (0 when none).
    pub oldest_age: f64,
    /// Bytes of segment files and upload sidecars on disk.
    pub spool_bytes: u64,
    /// Records found unacked when the spool was opened.
    pub recovered: u64,
}

struct Inner {
    events: EventBuilder,
    spool: Spool,
    servers: Vec<ServerAddr>,
    connect_options: async_nats::ConnectOptions,
    max_event_bytes: usize,
    upload_threshold: Option<usize>,
    bucket: String,
    publish_timeout: Duration,
    max_in_flight: usize,
    backoff_initial: Duration,
    backoff_max: Duration,
    on_emitted: Option<EmitObserver>,
    sent: AtomicU64,
    retried: AtomicU64,
    uploaded: AtomicU64,
    last_error: Mutex<Option<String>>,
    declared: Mutex<HashSet<(String, String)>>,
    wake: Notify,
    stop: watch::Sender<bool>,
    sender: Mutex<Option<JoinHandle<()>>>,
}

/// Stops the sender when the last handle of a producer is dropped.
struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.stop.send_replace(true);
        self.inner.wake.notify_one();
    }
}

/// A producer for one tenant with a durable spool. Cheap to clone: clones share the spool and sender.
#[derive(Clone)]
pub struct Producer {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("tenant", &self.inner().events.tenant())
            .field("spool", &self.inner().spool)
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// Opens the spool (resuming what an earlier run left) and, unless `config.start_sender` is
    /// false, starts the sender. Needs a tokio runtime.
    pub async fn open(config: ProducerConfig) -> Result<Self> {
        let bucket = uploads::bucket_of(&config.tenant);
        let events = EventBuilder::new(config.tenant, config.source)?
            .with_session(config.session_id)
            .with_trace(config.trace);
        let servers = config
            .servers
            .iter()
            .map(|s| {
                s.parse::<ServerAddr>()
                    .map_err(|e| Error::InvalidConfig(format!("server {s:?}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        if servers.is_empty() {
            return Err(Error::InvalidConfig("no NATS server given".into()));
        }
        let (dir, spool_config) = (config.spool_dir, config.spool);
        let spool = blocking(move || Spool::open(dir, spool_config)).await?;
        let (stop, _) = watch::channel(false);
        let producer = Self {
            handle: Arc::new(Handle {
                inner: Arc::new(Inner {
                    events,
                    spool,
                    servers,
                    connect_options: config.connect_options.unwrap_or_default(),
                    max_event_bytes: config.max_event_bytes,
                    upload_threshold: config.upload_threshold_bytes,
                    bucket,
                    publish_timeout: config.publish_timeout,
                    max_in_flight: config.max_in_flight.max(1),
                    backoff_initial: config.backoff_initial,
                    backoff_max: config.backoff_max.max(config.backoff_initial),
                    on_emitted: config.on_emitted,
                    sent: AtomicU64::new(0),
                    retried: AtomicU64::new(0),
                    uploaded: AtomicU64::new(0),
                    last_error: Mutex::new(None),
                    declared: Mutex::new(HashSet::new()),
                    wake: Notify::new(),
                    stop,
                    sender: Mutex::new(None),
                }),
            }),
        };
        if config.start_sender {
            producer.start();
        }
        Ok(producer)
    }

    fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// The builder of this producer's events (its tenant, source, session and trace context).
    pub fn events(&self) -> &EventBuilder {
        &self.inner().events
    }

    /// The spool (for its directory, metrics, or reading records back).
    pub fn spool(&self) -> &Spool {
        &self.inner().spool
    }

    /// Starts the background sender if it is not running.
    pub fn start(&self) {
        let inner = self.inner();
        let mut sender = inner
            .sender
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if sender.is_none() && !*inner.stop.borrow() {
            *sender = Some(tokio::spawn(run_sender(Arc::clone(inner))));
        }
    }

    /// Stores `event` durably; returns its id once it is in the spool (and fdatasync'ed under the
    /// every-event policy). Fails with [`Error::InvalidEvent`] for an event the ledger would refuse
    /// and [`Error::SpoolFull`] by the full policy; then nothing was stored.
    ///
    /// Under `every_event` the file work (a write and an fdatasync) runs on tokio's blocking pool.
    /// Under `interval` the append is one `write(2)` into the page cache, microseconds, so it runs on
    /// the calling task as a log line would (a thread hop per event cost more than the write: half of
    /// `emit`'s time in a profile). Anything more goes to the pool: a full spool (which may wait
    /// for room), a segment roll (fdatasyncs), the spool's lock held by another thread, a record over
    /// 64 KiB, and an event with uploads (its sidecars are fdatasync'ed under both policies).
    pub async fn emit(&self, event: Event) -> Result<String> {
        let inner = self.inner();
        if matches!(inner.spool.fsync(), FsyncPolicy::Interval(_)) {
            let (message, contents) = inner.prepare(&event)?;
            if contents.is_empty() && inner.spool.try_append(&message)? {
                return Ok(inner.emitted(&event));
            }
            let inner = Arc::clone(inner);
            return blocking(move || {
                inner.spool.append_with(&message, &contents)?;
                Ok(inner.emitted(&event))
            })
            .await;
        }
        let inner = Arc::clone(inner);
        blocking(move || inner.emit(&event)).await
    }

    /// [`Producer::emit`] on the calling thread (it blocks for the write and, by policy, one
    /// fdatasync): for synchronous code and `Drop`.
    pub fn emit_blocking(&self, event: &Event) -> Result<String> {
        self.inner().emit(event)
    }

    /// Emits `tool.declared` for `tool` once per producer and declaration content (a declaration with
    /// sensitive fields must reach the ledger before the tool's invocations; the spool keeps order).
    pub async fn declare(&self, tool: &Tool) -> Result<()> {
        let key = (tool.tool_id.clone(), tool.declaration_digest());
        if self.is_declared(&key) {
            return Ok(());
        }
        self.emit(self.events().tool_declared(tool, None)).await?;
        self.inner()
            .declared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key);
        Ok(())
    }

    fn is_declared(&self, key: &(String, String)) -> bool {
        self.inner()
            .declared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(key)
    }

    /// Starts one call of `tool` with `input` as its model input (`Value::Null`: none): declares the
    /// tool (once), emits planned and started, and returns the guard that emits the rest.
    pub async fn invocation(&self, tool: &Tool, input: Value) -> Result<InvocationGuard> {
        InvocationGuard::begin(self.clone(), tool, input, InvocationOptions::default()).await
    }

    /// [`Producer::invocation`] with options (an id of your own, the session, native ids, a retry,
    /// `start: false` to emit permission and pre-hook events before the call starts, …).
    pub async fn invocation_with(
        &self,
        tool: &Tool,
        input: Value,
        options: InvocationOptions,
    ) -> Result<InvocationGuard> {
        InvocationGuard::begin(self.clone(), tool, input, options).await
    }

    /// The counters.
    pub fn metrics(&self) -> Metrics {
        let inner = self.inner();
        let oldest_age = inner
            .spool
            .oldest_emitted_at_ms()
            .map_or(0.0, |oldest| (now_ms().saturating_sub(oldest)) as f64 / 1000.0);
        Metrics {
            queued: inner.spool.queued(),
            sent: inner.sent.load(Ordering::Relaxed),
            retried: inner.retried.load(Ordering::Relaxed),
            uploaded: inner.uploaded.load(Ordering::Relaxed),
            oldest_age,
            spool_bytes: inner.spool.used_bytes(),
            recovered: inner.spool.recovered(),
        }
    }

    /// The last publish error, for operators (the sender retries every one).
    pub fn last_error(&self) -> Option<String> {
        self.inner()
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Waits until every emitted event is acked (starting the sender if it was not); true when
    /// drained, false when `timeout` passed first (the rest stays in the spool).
    pub async fn flush(&self, timeout: Duration) -> bool {
        self.start();
        let mut queued = self.inner().spool.watch_queued();
        matches!(
            tokio::time::timeout(timeout, queued.wait_for(|q| *q == 0)).await,
            Ok(Ok(_))
        )
    }

    /// Flushes for up to `timeout`, stops the sender and closes the spool; returns whether everything
    /// was acked. What was not stays in the spool for the next start. Later emits fail with
    /// [`Error::Closed`].
    pub async fn close(&self, timeout: Duration) -> Result<bool> {
        let inner = Arc::clone(self.inner());
        let running = inner
            .sender
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some();
        let drained = if running && !timeout.is_zero() {
            self.flush(timeout).await
        } else {
            inner.spool.queued() == 0
        };
        inner.stop.send_replace(true);
        inner.wake.notify_one();
        let task = inner
            .sender
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut task) = task {
            let grace = inner.publish_timeout + Duration::from_secs(3);
            if tokio::time::timeout(grace, &mut task).await.is_err() {
                task.abort();
            }
        }
        blocking(move || inner.spool.close()).await?;
        Ok(drained)
    }
}

impl Inner {
    fn emit(&self, event: &Event) -> Result<String> {
        let (message, contents) = self.prepare(event)?;
        self.spool.append_with(&message, &contents)?;
        Ok(self.emitted(event))
    }

    /// The record of `event`, checked as ingest would check it, with its large values moved to
    /// uploads, and the bytes of each upload.
    fn prepare(&self, event: &Event) -> Result<(Message, Vec<Vec<u8>>)> {
        if event.tenant != self.events.tenant() {
            return Err(Error::invalid(
                "/tenant",
                format!(
                    "event tenant {:?} is not this producer's {:?}",
                    event.tenant,
                    self.events.tenant()
                ),
            ));
        }
        let mut message = wire::binary_message(event)?;
        let header_bytes = message
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.len() + 4)
            .sum::<usize>();
        let mut contents = Vec::new();
        // A body within the threshold has no value over it: small events skip the walk.
        if let Some(threshold) = self.upload_threshold
            && (message.body.len() > threshold || message.body.len() + header_bytes > self.max_event_bytes)
        {
            let budget = self.max_event_bytes.saturating_sub(header_bytes);
            let (data, moved) = uploads::extract(&event.data, &event.id, &self.bucket, threshold, budget)?;
            if !moved.is_empty() {
                message.body =
                    serde_json::to_vec(&data).map_err(|e| Error::invalid("/data", e.to_string()))?;
                for (upload, content) in moved {
                    message.uploads.push(upload);
                    contents.push(content);
                }
            }
        }
        let size = message.body.len() + header_bytes;
        if size > self.max_event_bytes {
            return Err(Error::invalid(
                "/data",
                format!(
                    "event {} is {size} bytes, over max_event_bytes {}: upload large values to the \
                     tenant's payload bucket and reference them",
                    event.id, self.max_event_bytes
                ),
            ));
        }
        message.emitted_at_ms = now_ms();
        Ok((message, contents))
    }

    /// After `event` is in the spool: wakes the sender, tells the observer; its id.
    fn emitted(&self, event: &Event) -> String {
        self.wake.notify_one();
        if let Some(observer) = &self.on_emitted {
            observer(event);
        }
        event.id.clone()
    }

    fn set_error(&self, error: String) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs `f` on tokio's blocking pool (a panic in it is resumed here).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::Closed),
    }
}

/// The message of a stored record as a JetStream publish. Records written by this SDK always convert
/// (their values are percent-encoded); one from elsewhere with CR or LF in a header is refused here
/// rather than handed to async-nats' panicking constructors.
fn publish_of(message: &Message) -> std::result::Result<PublishMessage, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in &message.headers {
        let header: HeaderName = name
            .parse()
            .map_err(|_| format!("record header name {name:?} is not valid"))?;
        let value: HeaderValue = value
            .parse()
            .map_err(|_| format!("record header {name} holds CR or LF"))?;
        headers.insert(header, value);
    }
    Ok(PublishMessage::build()
        .payload(Bytes::from(message.body.clone()))
        .headers(headers)
        .expected_stream(INBOUND_STREAM))
}

/// Jitter in [0.8, 1.2) from the OS's random source (no RNG state to seed or share).
fn jitter() -> f64 {
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    0.8 + 0.4 * f64::from(u16::from_be_bytes(b)) / 65536.0
}

async fn run_sender(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let backoff_max = inner.backoff_max;
    let options = inner
        .connect_options
        .clone()
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(2))
        .reconnect_delay_callback(move |attempts| {
            (Duration::from_millis(250) * u32::try_from(attempts).unwrap_or(u32::MAX)).min(backoff_max)
        })
        .event_callback(|event| async move { tracing::debug!(%event, "nats") });
    let client = match options.connect(inner.servers.clone()).await {
        Ok(client) => client,
        Err(e) => {
            // Only a configuration the client refuses outright ends here (the connection itself is
            // retried in the background); the events stay in the spool.
            tracing::error!(error = %e, "producer cannot connect; events stay in the spool");
            inner.set_error(format!("connect: {e}"));
            return;
        }
    };
    let js = async_nats::jetstream::ContextBuilder::new()
        .timeout(inner.publish_timeout)
        .ack_timeout(inner.publish_timeout)
        .build(client.clone());
    let mut backoff = inner.backoff_initial;
    let mut window = inner.max_in_flight;
    while !*stop.borrow() {
        let batch = {
            let inner = Arc::clone(&inner);
            blocking(move || inner.spool.head(window)).await
        };
        let batch = match batch {
            Ok(batch) => batch,
            Err(Error::Closed) => break,
            Err(e) => {
                tracing::error!(error = %e, "reading the spool failed");
                inner.set_error(e.to_string());
                pause(&mut stop, inner.backoff_max).await;
                continue;
            }
        };
        if batch.is_empty() {
            tokio::select! {
                () = inner.wake.notified() => {}
                _ = stop.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            continue;
        }
        // Stopping abandons the acks still awaited: those records stay unacked and are sent again
        // at the next start (the ledger drops the repeats).
        let (acked, error) = tokio::select! {
            outcome = send_batch(&inner, &js, &batch) => outcome,
            _ = stop.changed() => break,
        };
        if acked > 0 {
            let inner2 = Arc::clone(&inner);
            if let Err(e) = blocking(move || inner2.spool.ack(acked)).await {
                tracing::error!(error = %e, "writing the ack position failed");
                inner.set_error(e.to_string());
            }
            inner.sent.fetch_add(acked as u64, Ordering::Relaxed);
        }
        match error {
            Some(error) => {
                let failed = batch.len() - acked;
                inner.retried.fetch_add(failed as u64, Ordering::Relaxed);
                tracing::debug!(failed, error = %error, "publish failed; retrying");
                inner.set_error(error);
                window = 1;
                pause(&mut stop, backoff).await;
                backoff = backoff.mul_f64(2.0).min(inner.backoff_max).mul_f64(jitter());
            }
            None => {
                backoff = inner.backoff_initial;
                window = (window * 2).min(inner.max_in_flight);
            }
        }
    }
    // Nothing to flush: what was published but not acked is in the spool and is sent again next time.
    drop(client);
}

/// Puts the uploads of `batch`'s records, in order, then publishes the records whose objects are in:
/// how many of its first records were acked (or counted acked), and the error that stopped the rest.
async fn send_batch(
    inner: &Arc<Inner>,
    js: &async_nats::jetstream::Context,
    batch: &[Message],
) -> (usize, Option<String>) {
    // Uploads first, in order: a record is published only once its objects are in the bucket; at
    // the first that fails, only the records before it go out.
    let mut ready = batch.len();
    let mut upload_error = None;
    let mut acked_before = vec![false; batch.len()];
    for (i, message) in batch.iter().enumerate() {
        if message.uploads.is_empty() {
            continue;
        }
        match put_uploads(inner, js, message).await {
            Ok(true) => {}
            Ok(false) => acked_before[i] = true,
            Err(e) => {
                ready = i;
                upload_error = Some(e);
                break;
            }
        }
    }
    let (acked, error) = publish_batch(js, &batch[..ready], &acked_before, inner.publish_timeout).await;
    (acked, error.or(upload_error))
}

/// Puts each upload of `message` into its bucket unless the object is already there with the same
/// size and digest (a retry, or a restart after a put whose record was not acked). `Ok(false)` when
/// the record was acked before: a sidecar is missing and its object is not in the bucket. Sidecars are
/// durable before their record and deleted only after its ack, so that happens only when a power loss
/// or a damaged `ack` file brought acked records back (docs/sdk/spool.md, Uploads); such a record is
/// counted acked, not published with a reference to nothing.
async fn put_uploads(
    inner: &Arc<Inner>,
    js: &async_nats::jetstream::Context,
    message: &Message,
) -> std::result::Result<bool, String> {
    use async_nats::jetstream::object_store::InfoErrorKind;
    use base64::Engine as _;

    for upload in &message.uploads {
        let store = js
            .get_object_store(&upload.bucket)
            .await
            .map_err(|e| format!("object store {}: {e}", upload.bucket))?;
        // Some(info) of a live object, None when there is none.
        let existing = match store.info(&upload.name).await {
            Ok(info) if !info.deleted => Some(info),
            Ok(_) => None,
            Err(e) if e.kind() == InfoErrorKind::NotFound => None,
            Err(e) => return Err(format!("object {} in {}: {e}", upload.name, upload.bucket)),
        };
        let has_sidecar = {
            let inner = Arc::clone(inner);
            let upload = upload.clone();
            blocking(move || Ok(inner.spool.has_upload(&upload)))
                .await
                .map_err(|e| e.to_string())?
        };
        if !has_sidecar && existing.is_none() {
            tracing::warn!(
                dir = %inner.spool.dir().display(),
                object = %upload.name,
                bucket = %upload.bucket,
                "the sidecar is gone and the object is not in the bucket: the record was acked before \
                 its ack position was lost; not sent again"
            );
            return Ok(false);
        }
        let raw = (0..upload.sha256.len())
            .step_by(2)
            .map(|i| {
                upload
                    .sha256
                    .get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| format!("upload {}: sha256 {:?} is not hex", upload.name, upload.sha256))?;
        let digest = format!(
            "SHA-256={}",
            base64::engine::general_purpose::URL_SAFE.encode(raw)
        );
        if existing
            .is_some_and(|info| info.size as u64 == upload.size && info.digest.as_deref() == Some(&digest))
        {
            continue;
        }
        let content = {
            let inner = Arc::clone(inner);
            let upload = upload.clone();
            blocking(move || inner.spool.read_upload(&upload))
                .await
                .map_err(|e| e.to_string())?
        };
        let info = store
            .put(upload.name.as_str(), &mut content.as_slice())
            .await
            .map_err(|e| format!("put {} into {}: {e}", upload.name, upload.bucket))?;
        if info.digest.as_deref() != Some(&digest) {
            return Err(format!(
                "object {} in {} has digest {:?}, not {digest}",
                upload.name, upload.bucket, info.digest
            ));
        }
        inner.uploaded.fetch_add(1, Ordering::Relaxed);
    }
    Ok(true)
}

/// Publishes `batch` in order on the wire and awaits the acks in order: how many of its first records
/// were acked, and the error that stopped the rest. A record marked in `acked_before` is counted acked
/// without being published.
async fn publish_batch(
    js: &async_nats::jetstream::Context,
    batch: &[Message],
    acked_before: &[bool],
    timeout: Duration,
) -> (usize, Option<String>) {
    let mut pending: Vec<Option<PublishAckFuture>> = Vec::with_capacity(batch.len());
    let mut error = None;
    for (i, message) in batch.iter().enumerate() {
        if acked_before.get(i).copied().unwrap_or(false) {
            pending.push(None);
            continue;
        }
        let publish = match publish_of(message) {
            Ok(publish) => publish,
            Err(e) => {
                tracing::error!(subject = %message.subject, error = %e, "unpublishable spool record");
                error = Some(e);
                break;
            }
        };
        // Bounded: while disconnected the client's command queue can fill, and send_publish waits.
        match tokio::time::timeout(timeout, js.send_publish(message.subject.clone(), publish)).await {
            Ok(Ok(ack)) => pending.push(Some(ack)),
            Ok(Err(e)) => {
                error = Some(format!("publish: {e}"));
                break;
            }
            Err(_) => {
                error = Some("publish: timed out queueing the message".into());
                break;
            }
        }
    }
    let mut acked = 0;
    for ack in pending {
        let Some(ack) = ack else {
            acked += 1;
            continue;
        };
        match ack.await {
            Ok(_) => acked += 1,
            Err(e) => {
                error = Some(format!("publish ack: {e}"));
                break;
            }
        }
    }
    (acked, error)
}

/// Sleeps for `delay` or until stopped.
async fn pause(stop: &mut watch::Receiver<bool>, delay: Duration) {
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        _ = stop.changed() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Invocation, InvocationClass, Stamp};

    /// A port nothing listens on: the producer keeps everything in its spool.
    const UNREACHABLE: &str = "nats://127.0.0.1:1";

    fn config(dir: &std::path::Path) -> ProducerConfig {
        ProducerConfig::new("acme", dir.join("spool")).with_servers([UNREACHABLE])
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn emit_checks_what_ingest_would_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        // Uploads off: an event over max_event_bytes is refused.
        config.upload_threshold_bytes = None;
        let producer = Producer::open(config).await.unwrap();
        let b = producer.events().clone();
        let planned = |snapshot: Invocation| {
            b.invocation(InvocationClass::Planned, &snapshot, &Stamp::default())
                .unwrap()
        };
        for (what, snapshot) in [
            ("control character in an id", Invocation::new("inv\n1", "t")),
            ("id over 1 KiB", Invocation::new("i".repeat(1025), "t")),
            (
                "integer beyond 2^53",
                Invocation {
                    model_input: Some(serde_json::json!({"n": 1_u64 << 60})),
                    ..Invocation::new("inv-big", "t")
                },
            ),
            (
                "retry_of with a control",
                Invocation {
                    retry_of: Some("a\u{1}".into()),
                    ..Invocation::new("inv-r", "t")
                },
            ),
        ] {
            let err = producer.emit(planned(snapshot)).await.unwrap_err();
            assert!(matches!(err, Error::InvalidEvent { .. }), "{what}: {err}");
        }
        let mut big = Invocation::new("inv-huge", "t");
        big.model_input = Some(Value::String("x".repeat(DEFAULT_MAX_EVENT_BYTES)));
        assert!(matches!(
            producer.emit(planned(big)).await,
            Err(Error::InvalidEvent { .. })
        ));
        let other = EventBuilder::new("other", "s").unwrap();
        let foreign = other
            .invocation(
                InvocationClass::Planned,
                &Invocation::new("i", "t"),
                &Stamp::default(),
            )
            .unwrap();
        assert!(producer.emit(foreign).await.is_err());
        assert_eq!(producer.metrics().queued, 0, "a refused event was stored");
        producer.close(Duration::ZERO).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_values_go_to_sidecars_at_emit_offline_under_both_policies() {
        for fsync in [
            FsyncPolicy::EveryEvent,
            FsyncPolicy::Interval(Duration::from_millis(50)),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let config = config(dir.path()).with_spool(SpoolConfig {
                fsync,
                ..SpoolConfig::default()
            });
            let producer = Producer::open(config).await.unwrap();
            let text = "row\n".repeat(512 * 1024); // 2 MiB
            let mut snapshot = Invocation::new("inv-big", "t");
            snapshot.model_input = Some(serde_json::json!({"doc": text, "small": "s"}));
            let event = producer
                .events()
                .invocation(InvocationClass::Planned, &snapshot, &Stamp::default())
                .unwrap();
            let id = producer.emit(event).await.unwrap();
            let head = producer.spool().head(10).unwrap();
            assert_eq!(head.len(), 1);
            let upload = &head[0].uploads[0];
            assert_eq!(head[0].uploads.len(), 1);
            assert_eq!(upload.bucket, "ATL_PAYLOADS_acme");
            assert_eq!(upload.name, format!("{id}/data/model_input/doc"));
            assert_eq!(upload.size, text.len() as u64);
            assert_eq!(upload.content_type, uploads::TEXT);
            assert_eq!(producer.spool().read_upload(upload).unwrap(), text.as_bytes());
            let body: Value = serde_json::from_slice(&head[0].body).unwrap();
            assert_eq!(body["model_input"]["small"], "s");
            assert_eq!(
                body["model_input"]["doc"]["$upload"]["name"],
                upload.name.as_str()
            );
            assert_eq!(
                body["model_input"]["doc"]["$upload"]["sha256"],
                upload.sha256.as_str()
            );
            assert!(producer.metrics().spool_bytes > text.len() as u64);
            producer.close(Duration::ZERO).await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_invocation_guard_emits_the_lifecycle_and_a_restart_resumes_it() {
        let dir = tempfile::tempdir().unwrap();
        let producer = Producer::open(config(dir.path())).await.unwrap();
        let tool = Tool::new("kv.get", "get").sensitive_fields(["pin"]);
        let mut inv = producer
            .invocation(&tool, serde_json::json!({"key": "k", "pin": "1234"}))
            .await
            .unwrap();
        inv.progress("half", Some(50.0)).await.unwrap();
        let id = inv.invocation_id().to_owned();
        inv.succeed(serde_json::json!({"value": 1})).await.unwrap();
        {
            // Dropped unfinished: canceled, with an error result.
            let _dropped = producer.invocation(&tool, Value::Null).await.unwrap();
        }
        let failed = producer.invocation(&tool, Value::Null).await.unwrap();
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow backend");
        failed.fail(&io).await.unwrap();
        // Declared once: tool.declared, then 5 + 4 + 4 events.
        assert_eq!(producer.metrics().queued, 14);
        assert!(!producer.close(Duration::ZERO).await.unwrap());

        let producer = Producer::open(config(dir.path())).await.unwrap();
        assert_eq!(producer.metrics().recovered, 14);
        let messages = producer.spool().head(100).unwrap();
        let classes: Vec<&str> = messages.iter().map(|m| m.header("ce-type").unwrap()).collect();
        assert_eq!(
            classes,
            [
                "tool.declared",
                "tool.invocation.planned",
                "tool.invocation.started",
                "tool.invocation.progress",
                "tool.invocation.succeeded",
                "tool.result.created",
                "tool.invocation.planned",
                "tool.invocation.started",
                "tool.invocation.canceled",
                "tool.result.created",
                "tool.invocation.planned",
                "tool.invocation.started",
                "tool.invocation.timed_out",
                "tool.result.created",
            ]
        );
        assert_eq!(messages[1].header("ce-invocationid"), Some(id.as_str()));
        let timed_out: Value = serde_json::from_slice(&messages[12].body).unwrap();
        assert_eq!(timed_out["error"]["error_class"], "timeout");
        assert_eq!(timed_out["status"], "timed_out");
        let canceled: Value = serde_json::from_slice(&messages[8].body).unwrap();
        assert_eq!(canceled["error"]["error_class"], "canceled");
        let started: Value = serde_json::from_slice(&messages[2].body).unwrap();
        assert_eq!(started["call_input"]["pin"], "1234");
        assert!(started["started_at"].is_string());
        assert!(producer.metrics().oldest_age > 0.0);
        producer.close(Duration::ZERO).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_producers_cannot_share_a_spool() {
        let dir = tempfile::tempdir().unwrap();
        let producer = Producer::open(config(dir.path())).await.unwrap();
        assert!(matches!(
            Producer::open(config(dir.path())).await,
            Err(Error::SpoolLocked { .. })
        ));
        producer.close(Duration::ZERO).await.unwrap();
        let again = Producer::open(config(dir.path())).await.unwrap();
        let event = again
            .events()
            .invocation(
                InvocationClass::Planned,
                &Invocation::new("i", "t"),
                &Stamp::default(),
            )
            .unwrap();
        again.close(Duration::ZERO).await.unwrap();
        assert!(matches!(again.emit(event).await, Err(Error::Closed)));
    }

    #[test]
    fn records_with_cr_or_lf_in_a_header_are_refused_not_panicked_on() {
        let message = Message {
            subject: "atl.in.acme.tool.invocation.planned".into(),
            headers: vec![("ce-id".into(), "a\r\nb".into())],
            body: b"{}".to_vec(),
            emitted_at_ms: 0,
            uploads: Vec::new(),
        };
        assert!(publish_of(&message).is_err());
        let message = Message {
            headers: vec![("bad name".into(), "v".into())],
            ..message
        };
        assert!(publish_of(&message).is_err());
    }
}
