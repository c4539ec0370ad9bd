//! `toolledger ingest`: the service loop.
//!
//! ```text
//! acquire lease ─▶ open appender at the ledger tail ─▶ catch the identity index up to the tail
//!   ─▶ loop: fetch ≤ batch from ATL_INBOUND
//!            ├─ classify (blocking thread): decode ▸ validate ▸ scrub ▸ digest ▸ dedupe
//!            │  (decode/validate and digest/canonicalize spread over the cores; scrub and dedupe in order)
//!            ├─ rejects: original ─▶ ATL_QUARANTINE, receipt ─▶ batch
//!            ├─ append the batch (entries and receipts, in inbound order), grow the Merkle tree;
//!            │  sign a checkpoint every N entries or T seconds
//!            ├─ index the new identities with the new position (one transaction)
//!            └─ ack every inbound message of the batch; renew the lease when due
//!   ─▶ on shutdown: finish the batch, release the lease
//! ```
//!
//! An inbound message is acked only after the ledger (or the quarantine and the ledger's receipt)
//! holds it. Any failure ends the session: the loop starts again from the top, re-reading the
//! ledger tail, and unacked messages come back; duplicate detection drops what had already landed.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind, consumer::pull};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use toolledger_ledger::read_range;
use toolledger_merkle::NoteSigner;
use toolledger_wire::entry::hex;
use toolledger_wire::streams::{INBOUND, LEDGER};
use toolledger_wire::{LedgerEntry, LedgerMetadata, Origin, QuarantineReason, Tenant};

use crate::append::{Appender, PendingEntry};
use crate::checkpoint::{self, CheckpointSettings, Checkpointer};
use crate::dedupe::{IdentityIndex, IdentityKey};
use crate::lease::{LEASE_BUCKET, Lease};
use crate::metrics::IngestMetrics;
use crate::payload::{BlobStore, OffloadConfig, Offloader, UploadCollector, UploadName};
use crate::poison;
use crate::quarantine::{self, Original, Rejection};
use crate::scrub::{ScrubConfig, Scrubber};
use crate::{Error, Result};

/// How ingest runs.
#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// Messages fetched and appended together. Bounds memory and the work redone after a crash;
    /// 256 keeps a batch well under a megabyte for typical events while amortizing round trips.
    pub batch_size: usize,
    /// How long a fetch waits for a full batch before taking what is there.
    pub fetch_wait: Duration,
    /// Deliveries before JetStream gives up on a message (it then goes to the poison path).
    pub max_deliver: i64,
    /// How long a delivered message may stay unacked before redelivery.
    pub ack_wait: Duration,
    /// How long the single-writer lease lasts unless renewed.
    pub lease_ttl: Duration,
    /// The identity index's SQLite file.
    pub index_path: PathBuf,
    /// This process's name in the lease.
    pub holder: String,
    /// The durable consumer's name on ATL_INBOUND.
    pub consumer: String,
    /// Where the scrubber's HMAC key lives (`<data_dir>/scrub-hmac.key`).
    pub data_dir: PathBuf,
    /// Paths always scrubbed, besides the built-in secret shapes and declared sensitive fields.
    pub scrub: ScrubConfig,
    /// The blob store URL (`file:///…`, `s3://bucket/prefix`, `memory://`).
    pub blob_store: String,
    /// The blob store client's options (`endpoint`, `allow_http`, credentials …), over `AWS_*`.
    pub blob_store_options: Vec<(String, String)>,
    /// What moves to the blob store.
    pub offload: OffloadConfig,
    /// The Merkle tree's checkpoints: origin, cadence, trusted older keys.
    pub checkpoint: CheckpointSettings,
    /// Where the Merkle tiles live (a directory, `file://`, `s3://`, `memory://`).
    pub tiles: String,
    /// The checkpoint signing key made by `toolledger init`.
    pub key_file: PathBuf,
    /// The largest producer upload copied in from `ATL_PAYLOADS_<tenant>`; larger ones are refused.
    pub max_upload_bytes: u64,
}

impl IngestSettings {
    /// Defaults with the index under `data_dir/ingest/`.
    pub fn new(data_dir: &std::path::Path) -> Self {
        Self {
            batch_size: 256,
            fetch_wait: Duration::from_millis(500),
            max_deliver: 5,
            ack_wait: Duration::from_secs(10),
            lease_ttl: Duration::from_secs(15),
            index_path: data_dir.join("ingest/identities.sqlite"),
            holder: format!(
                "{}-{}-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "ingest".to_owned()),
                std::process::id(),
                Utc::now().timestamp_micros()
            ),
            consumer: "ingest".to_owned(),
            data_dir: data_dir.to_path_buf(),
            scrub: ScrubConfig::default(),
            blob_store: format!("file://{}", absolute(&data_dir.join("blobs")).display()),
            blob_store_options: Vec::new(),
            offload: OffloadConfig::default(),
            checkpoint: CheckpointSettings::new("toolledger/ATL_LEDGER"),
            tiles: data_dir.join("tiles").display().to_string(),
            key_file: data_dir.join("keys/checkpoint.key"),
            max_upload_bytes: 256 * 1024 * 1024,
        }
    }
}

impl IngestSettings {
    /// Settings from the configuration file: data directory, checkpoints, tiles, signing key, blob
    /// store, offloading and scrubbing; the rest keep their defaults.
    pub fn from_config(config: &toolledger_core::config::Config) -> Self {
        let mut settings = Self::new(&config.data_dir);
        settings.checkpoint.origin = config.ledger.origin.clone();
        settings.checkpoint.every = config.ledger.checkpoint_every;
        settings.checkpoint.interval = Duration::from_millis(config.ledger.checkpoint_interval_ms);
        settings.tiles = config.tiles_location();
        settings.key_file = config.checkpoint_key_file();
        settings.blob_store = config.blob_store_url();
        settings.blob_store_options = config.payloads.blob_store_options.clone().into_iter().collect();
        settings.offload = OffloadConfig {
            threshold_bytes: config.payloads.offload_threshold_bytes,
            erasable_paths: config.payloads.erasable_paths.clone(),
        };
        settings.scrub = ScrubConfig {
            paths: config.payloads.scrub_paths.clone(),
        };
        settings.max_upload_bytes = config.payloads.max_upload_bytes;
        settings
    }
}

/// `path` made absolute against the working directory, for a `file://` URL.
fn absolute(path: &std::path::Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Runs ingest until `shutdown` completes, starting over after any failure. On shutdown the batch
/// in hand is finished and the lease released, so another ingest can take over at once.
pub async fn run(
    connector: Connector,
    settings: IngestSettings,
    metrics: IngestMetrics,
    health: toolledger_core::telemetry::Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let index = Arc::new(Mutex::new(
        tokio::task::spawn_blocking({
            let path = settings.index_path.clone();
            move || IdentityIndex::open(&path)
        })
        .await
        .map_err(|e| Error::IdentityIndex {
            reason: e.to_string(),
        })??,
    ));
    let stages = Arc::new(Stages::open(&settings)?);
    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let mut failures = 0u32;
    while !*stop.borrow() {
        let session = tokio::select! {
            session = Session::start(&connector, &settings, &index, &stages, &metrics) => session,
            _ = stop.changed() => return Ok(()),
        };
        let outcome = match session {
            Ok(session) => {
                session
                    .run(&settings, &index, &metrics, &health, stop.clone())
                    .await
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => return Ok(()),
            Err(error) => {
                failures += 1;
                health.failing("ingest", error.to_string());
                tracing::error!(%error, failures, "ingest session failed; starting over");
                let pause = Duration::from_millis(200 * u64::from(failures.min(10)));
                tokio::select! {
                    () = tokio::time::sleep(pause) => {},
                    _ = stop.changed() => return Ok(()),
                }
            }
        }
    }
    Ok(())
}

/// The stages that need state of their own: the scrubber (key and the sensitivity its
/// declarations taught it) and the payload stores.
struct Stages {
    scrubber: Mutex<Scrubber>,
    offloader: Offloader,
    uploads: UploadCollector,
}

impl Stages {
    fn open(settings: &IngestSettings) -> Result<Self> {
        let scrubber = Scrubber::open(&settings.data_dir, &settings.scrub)?;
        let mut store_config = crate::payload::BlobStoreConfig::new(settings.blob_store.clone());
        store_config.options = settings.blob_store_options.clone();
        let store = BlobStore::open_with(&store_config)?;
        Ok(Self {
            scrubber: Mutex::new(scrubber),
            offloader: Offloader::new(store.clone(), &settings.offload),
            uploads: UploadCollector::new(store).with_max_upload(settings.max_upload_bytes),
        })
    }

    /// Teaches the scrubber every declaration already in the ledger, so fields a tool declares
    /// sensitive are scrubbed after a restart too.
    async fn learn_declarations(&self, js: &jetstream::Context) -> Result<()> {
        let stream_error = |e: &dyn std::fmt::Display| Error::Stream {
            stream: LEDGER.to_owned(),
            reason: e.to_string(),
        };
        let filter = "atl.ledger.*.tool.declared";
        let ledger = js.get_stream(LEDGER).await.map_err(|e| stream_error(&e))?;
        let count: usize = ledger
            .info_with_subjects(filter)
            .await
            .map_err(|e| stream_error(&e))?
            .map(|subject| subject.map(|(_, n)| n).unwrap_or(0))
            .fold(0, |total, n| async move { total + n })
            .await;
        if count == 0 {
            return Ok(());
        }
        let consumer = ledger
            .create_consumer(pull::OrderedConfig {
                filter_subject: filter.to_owned(),
                ..Default::default()
            })
            .await
            .map_err(|e| stream_error(&e))?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| stream_error(&e))?
            .take(count);
        let mut declarations = Vec::with_capacity(count);
        while let Some(message) = messages.next().await {
            let message = message.map_err(|e| stream_error(&e))?;
            if let Ok(entry) = LedgerEntry::from_bytes(&message.payload)
                && let Ok(event) = entry.event_json()
            {
                declarations.push(event);
            }
        }
        let mut scrubber = self.scrubber.lock().unwrap_or_else(PoisonError::into_inner);
        for event in &declarations {
            scrubber.observe(event);
        }
        tracing::info!(declarations = count, "scrubber learned the ledger's declarations");
        Ok(())
    }
}

/// How ingest reaches NATS. Every session connects afresh: a message with a bare CR in a header
/// panics the client's connection task, and a new session must not inherit a dead client.
#[derive(Debug, Clone)]
pub struct Connector {
    /// The server URL.
    pub url: String,
    /// The connection name servers show.
    pub name: String,
}

impl Connector {
    async fn connect(&self) -> Result<jetstream::Context> {
        let client = toolledger_wire::connect::connect(&self.url, &self.name)
            .await
            .map_err(|e| Error::Stream {
                stream: "nats".to_owned(),
                reason: e.to_string(),
            })?;
        Ok(jetstream::new(client))
    }
}

/// One lease-holding run of the loop.
struct Session {
    js: jetstream::Context,
    stages: Arc<Stages>,
    lease: Lease,
    appender: Appender,
    checkpointer: Checkpointer,
    consumer: jetstream::consumer::Consumer<pull::Config>,
    advisories: jetstream::consumer::PullConsumer,
}

/// An inbound message in a batch, and what finishes it once the ledger holds it.
struct Item {
    original: Original,
    done: Done,
}

enum Done {
    /// Delivered normally: ack it.
    Ack(jetstream::Message),
    /// Fetched raw after its deliveries ran out: delete it from ATL_INBOUND, then ack the advisory.
    Exhausted(jetstream::Message),
}

impl Session {
    async fn start(
        connector: &Connector,
        settings: &IngestSettings,
        index: &Arc<Mutex<IdentityIndex>>,
        stages: &Arc<Stages>,
        metrics: &IngestMetrics,
    ) -> Result<Self> {
        let js = &connector.connect().await?;
        let stream_error = |stream: &str, e: &dyn std::fmt::Display| Error::Stream {
            stream: stream.to_owned(),
            reason: e.to_string(),
        };
        let leases = js
            .get_key_value(LEASE_BUCKET)
            .await
            .map_err(|e| stream_error(LEASE_BUCKET, &e))?;
        let lease = Lease::acquire(
            &leases,
            "ledger",
            &settings.holder,
            settings.lease_ttl,
            settings.lease_ttl / 3,
        )
        .await?;
        tracing::info!(holder = lease.holder(), "holding the ledger lease");
        let appender = Appender::open(js.clone(), LEDGER).await?;
        // The tree is restored and checked against the last signed checkpoint before anything new
        // is appended: a ledger or tiles altered since are caught here.
        let signer = NoteSigner::load(&settings.key_file)?;
        let tiles = checkpoint::open_tiles(&settings.tiles)?;
        let checkpointer = Checkpointer::open(
            js.clone(),
            settings.checkpoint.clone(),
            signer,
            tiles,
            appender.last_seq(),
        )
        .await?;
        catch_up_index(js, index, appender.last_seq()).await?;
        stages.learn_declarations(js).await?;
        metrics
            .last_seq
            .set(i64::try_from(appender.last_seq()).unwrap_or(i64::MAX));
        let inbound = js
            .get_stream(INBOUND)
            .await
            .map_err(|e| stream_error(INBOUND, &e))?;
        let consumer = inbound
            .get_or_create_consumer(
                &settings.consumer,
                pull::Config {
                    durable_name: Some(settings.consumer.clone()),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ack_wait: settings.ack_wait,
                    max_deliver: settings.max_deliver,
                    // Bounded in flight: at most a few batches delivered and unacked, which also
                    // bounds what the reorder hold keeps in memory.
                    max_ack_pending: i64::try_from(settings.batch_size * 4).unwrap_or(1024),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| stream_error(INBOUND, &e))?;
        let advisories = poison::advisory_consumer(js, &settings.consumer).await?;
        Ok(Self {
            js: js.clone(),
            stages: Arc::clone(stages),
            lease,
            appender,
            checkpointer,
            consumer,
            advisories,
        })
    }

    async fn run(
        mut self,
        settings: &IngestSettings,
        index: &Arc<Mutex<IdentityIndex>>,
        metrics: &IngestMetrics,
        health: &toolledger_core::telemetry::Health,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let mut renewed = Instant::now();
        let mut progressed = Instant::now();
        // Deliveries wait here until every older inbound message is in hand: see `contiguous_run`.
        let mut held: BTreeMap<u64, Item> = BTreeMap::new();
        health.ok(
            "ingest",
            format!("appending after seq {}", self.appender.last_seq()),
        );
        loop {
            if renewed.elapsed() >= self.lease.renew_every() {
                self.lease.renew().await?;
                renewed = Instant::now();
            }
            self.checkpointer.tick().await?;
            if *stop.borrow() {
                // Sign what was appended before letting the next writer in.
                self.checkpointer.checkpoint().await?;
                let _ = self.lease.release().await;
                return Ok(());
            }
            for (original, advisory) in poison::take(&self.js, &self.advisories, settings.batch_size).await? {
                held.insert(
                    original.inbound_seq,
                    Item {
                        original,
                        done: Done::Exhausted(advisory),
                    },
                );
            }
            // Always fetch: the older message a full hold waits for arrives only by redelivery.
            // What is held is bounded by the consumer's max_ack_pending.
            let fetched = tokio::select! {
                fetched = self.fetch(settings) => fetched?,
                _ = stop.changed() => continue,
            };
            for message in fetched {
                let original = original_of(&message);
                // A redelivery replaces the copy in hand: only the latest delivery can be acked.
                held.insert(
                    original.inbound_seq,
                    Item {
                        original,
                        done: Done::Ack(message),
                    },
                );
            }
            if held.is_empty() {
                self.report_lag(metrics).await;
                continue;
            }
            let run = self.contiguous_run(&mut held, settings.batch_size).await?;
            if run.is_empty() {
                // An older message is still out (being redelivered, or exhausted and on its way
                // through the advisory stream); keep the later ones from being redelivered meanwhile.
                if progressed.elapsed() >= settings.ack_wait / 3 {
                    for item in held.values() {
                        if let Done::Ack(message) = &item.done {
                            let _ = message.ack_with(AckKind::Progress).await;
                        }
                    }
                    progressed = Instant::now();
                }
                continue;
            }
            self.process(run, index, metrics).await?;
            health.ok(
                "ingest",
                format!("appended through seq {}", self.appender.last_seq()),
            );
        }
    }

    /// Takes from `held` the run of consecutive inbound sequences that starts at ATL_INBOUND's
    /// first sequence, at most `max` long.
    ///
    /// ATL_INBOUND is a work queue that ingest empties strictly in order (acks and deletes happen
    /// only for such runs), so it always holds one gapless range of sequences starting at its first
    /// sequence. Appending only runs that start there keeps the ledger in inbound order even when a
    /// crash sends some messages back through redelivery or, after `max_deliver`, the advisory
    /// stream. Held copies below the first sequence were already handled; they are acked and dropped.
    async fn contiguous_run(&mut self, held: &mut BTreeMap<u64, Item>, max: usize) -> Result<Vec<Item>> {
        let mut inbound = self.js.get_stream(INBOUND).await.map_err(|e| Error::Stream {
            stream: INBOUND.to_owned(),
            reason: e.to_string(),
        })?;
        let first = inbound
            .info()
            .await
            .map_err(|e| Error::Stream {
                stream: INBOUND.to_owned(),
                reason: e.to_string(),
            })?
            .state
            .first_sequence;
        let stale: Vec<u64> = held.range(..first).map(|(seq, _)| *seq).collect();
        for seq in stale {
            if let Some(Item {
                done: Done::Ack(message),
                ..
            }) = held.remove(&seq)
            {
                let _ = message.ack().await;
            }
        }
        let mut run = Vec::new();
        let mut next = first;
        while run.len() < max {
            match held.remove(&next) {
                Some(item) => run.push(item),
                None => break,
            }
            next += 1;
        }
        Ok(run)
    }

    async fn fetch(&self, settings: &IngestSettings) -> Result<Vec<jetstream::Message>> {
        let stream_error = |e: &dyn std::fmt::Display| Error::Stream {
            stream: INBOUND.to_owned(),
            reason: e.to_string(),
        };
        let mut batch = self
            .consumer
            .fetch()
            .max_messages(settings.batch_size)
            .expires(settings.fetch_wait)
            .messages()
            .await
            .map_err(|e| stream_error(&e))?;
        let mut messages = Vec::new();
        while let Some(message) = batch.next().await {
            match message {
                Ok(message) => messages.push(message),
                // A message the client could not parse; JetStream redelivers it until max_deliver.
                Err(error) => tracing::warn!(%error, "inbound message could not be read"),
            }
        }
        Ok(messages)
    }

    async fn report_lag(&mut self, metrics: &IngestMetrics) {
        if let Ok(info) = self.consumer.info().await {
            metrics
                .inbound_lag
                .set(i64::try_from(info.num_pending).unwrap_or(i64::MAX));
        }
    }

    async fn process(
        &mut self,
        items: Vec<Item>,
        index: &Arc<Mutex<IdentityIndex>>,
        metrics: &IngestMetrics,
    ) -> Result<()> {
        let originals: Vec<Original> = items.iter().map(|item| item.original.clone()).collect();
        let verdicts = {
            let index = Arc::clone(index);
            let originals = originals.clone();
            let stages = Arc::clone(&self.stages);
            tokio::task::spawn_blocking(move || classify_batch(&originals, &index, &stages))
                .await
                .map_err(|e| Error::IdentityIndex {
                    reason: e.to_string(),
                })??
        };

        // Rejections first: their receipts take their place in the batch's order.
        let mut pending = Vec::new();
        let mut identities = Vec::new();
        let mut receipts = Vec::new();
        let mut duplicates = 0u64;
        let mut uploads = Vec::new();
        for (original, verdict) in originals.iter().zip(verdicts) {
            let verdict = match verdict {
                Verdict::Append(mut prepared) => {
                    let (key, digest) = (prepared.key, prepared.digest);
                    let offloaded = match prepared.ready.take() {
                        Some(entry) => Offloaded::Entry {
                            entry,
                            uploads: Vec::new(),
                        },
                        None => offload(&self.js, &self.stages, *prepared).await?,
                    };
                    match offloaded {
                        Offloaded::Entry { entry, uploads: used } => {
                            pending.push(entry);
                            identities.push((key, digest));
                            receipts.push(false);
                            uploads.extend(used);
                            continue;
                        }
                        Offloaded::Rejected(rejection) => Verdict::Reject(rejection),
                    }
                }
                other => other,
            };
            match verdict {
                Verdict::Append(_) => {}
                Verdict::Duplicate => duplicates += 1,
                Verdict::Reject(rejection) => {
                    let kept = scrubbed_original(original, &self.stages.scrubber);
                    let quarantined = quarantine::publish(&self.js, &kept, &rejection).await?;
                    metrics.quarantined(rejection.reason);
                    let receipt = quarantine::receipt_event(original, &rejection, &quarantined);
                    let (entry, key, digest) = ledger_own_entry(receipt, original.published)?;
                    pending.push(entry);
                    identities.push((key, digest));
                    receipts.push(true);
                }
            }
        }
        // A receipt identical to one already appended (a redelivery after a crash) is dropped too.
        let (pending, identities) = drop_known_receipts(pending, identities, receipts, index).await?;

        if !pending.is_empty() {
            let started = Instant::now();
            let seqs = self.appender.append(&pending).await?;
            self.checkpointer.appended(&seqs, &pending).await?;
            metrics.append_latency.observe(started.elapsed().as_secs_f64());
            metrics.appended.inc_by(pending.len() as u64);
            let last = self.appender.last_seq();
            metrics.last_seq.set(i64::try_from(last).unwrap_or(i64::MAX));
            let rows: Vec<_> = identities
                .into_iter()
                .zip(seqs)
                .map(|((key, digest), seq)| (key, digest, seq))
                .collect();
            let index = Arc::clone(index);
            tokio::task::spawn_blocking(move || lock(&index).record(&rows, last))
                .await
                .map_err(|e| Error::IdentityIndex {
                    reason: e.to_string(),
                })??;
        }
        metrics.duplicates.inc_by(duplicates);
        // The uploads are copied and the ledger holds their refs; a crash before this line only
        // leaves them for the next delivery, which copies them again idempotently.
        UploadCollector::delete_uploads(&self.js, &uploads).await?;
        for item in items {
            match item.done {
                // A lost ack only means a redelivery, which duplicate detection absorbs.
                Done::Ack(message) => {
                    if let Err(error) = message.ack_with(AckKind::Ack).await {
                        tracing::warn!(%error, "inbound ack failed; the message will be redelivered");
                    }
                }
                Done::Exhausted(advisory) => {
                    poison::delete(&self.js, item.original.inbound_seq).await?;
                    if let Err(error) = advisory.ack().await {
                        tracing::warn!(%error, "advisory ack failed; it will be handled again");
                    }
                }
            }
        }
        Ok(())
    }
}

fn lock(index: &Mutex<IdentityIndex>) -> std::sync::MutexGuard<'_, IdentityIndex> {
    index.lock().unwrap_or_else(PoisonError::into_inner)
}

fn original_of(message: &jetstream::Message) -> Original {
    let info = message.info().ok();
    let published = info
        .as_ref()
        .and_then(|i| i64::try_from(i.published.unix_timestamp_nanos()).ok())
        .map_or_else(Utc::now, DateTime::<Utc>::from_timestamp_nanos);
    Original {
        subject: message.subject.to_string(),
        headers: message.headers.clone(),
        raw_headers: None,
        payload: message.payload.clone(),
        inbound_seq: info.map_or(0, |i| i.stream_sequence),
        published,
    }
}

/// What to do with one inbound message.
enum Verdict {
    Append(Box<Prepared>),
    Duplicate,
    Reject(Rejection),
}

/// Decodes, validates, scrubs, digests and deduplicates a batch; runs on a blocking thread.
///
/// The per-event work that does not depend on other events (decoding and validation; the digest and
/// the canonical entry) is spread over the machine's cores; scrubbing runs in inbound order, because a
/// `tool.declared` earlier in the batch changes what is sensitive in the events after it, and so does
/// deduplication, because a batch can hold the same identity twice.
fn classify_batch(
    originals: &[Original],
    index: &Mutex<IdentityIndex>,
    stages: &Stages,
) -> Result<Vec<Verdict>> {
    let mut checked = parallel_map(originals.iter().collect(), check);
    {
        let mut scrubber = stages.scrubber.lock().unwrap_or_else(PoisonError::into_inner);
        for checked in checked.iter_mut().flatten() {
            // Secrets never reach the ledger: scrubbed before the digest, so duplicates compare scrubbed.
            checked.scrubbed = scrubber.scrub(&mut checked.json);
        }
    }
    let prepared = parallel_map(checked, |checked| {
        checked.and_then(|checked| finish(checked, &stages.offloader))
    });

    let index = lock(index);
    let mut in_batch: HashMap<IdentityKey, [u8; 32]> = HashMap::new();
    let mut verdicts = Vec::with_capacity(originals.len());
    for prepared in prepared {
        let verdict = match prepared {
            Err(rejection) => Verdict::Reject(rejection),
            Ok(prepared) => {
                let known = match in_batch.get(&prepared.key) {
                    Some(digest) => Some(*digest),
                    None => index.lookup(&prepared.key)?.map(|r| r.digest),
                };
                match known {
                    None => {
                        in_batch.insert(prepared.key, prepared.digest);
                        Verdict::Append(Box::new(prepared))
                    }
                    Some(digest) if digest == prepared.digest => Verdict::Duplicate,
                    Some(_) => Verdict::Reject(Rejection {
                        reason: QuarantineReason::DuplicateConflict,
                        detail:
                            "an event with this tenant, source and id was already ingested with other content"
                                .to_owned(),
                        tenant: prepared.tenant,
                        event_id: Some(prepared.event_id),
                    }),
                }
            }
        };
        verdicts.push(verdict);
    }
    Ok(verdicts)
}

/// `f` over `items` on up to one thread per core, in order. Small inputs stay on this thread.
fn parallel_map<T: Send, U: Send>(mut items: Vec<T>, f: impl Fn(T) -> U + Sync) -> Vec<U> {
    /// Below this many items per thread, starting a thread costs more than it saves.
    const MIN_PER_THREAD: usize = 16;
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(items.len() / MIN_PER_THREAD)
        .max(1);
    if threads == 1 {
        return items.into_iter().map(f).collect();
    }
    let per_thread = items.len().div_ceil(threads);
    let mut chunks = Vec::with_capacity(threads);
    while items.len() > per_thread {
        chunks.push(items.split_off(items.len() - per_thread));
    }
    chunks.push(items);
    chunks.reverse();
    let f = &f;
    std::thread::scope(|scope| {
        let mut rest = chunks.into_iter();
        let first = rest.next().unwrap_or_default();
        let handles: Vec<_> = rest
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<U>>()))
            .collect();
        let mut out: Vec<U> = first.into_iter().map(f).collect();
        for handle in handles {
            match handle.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

/// A decoded event that passed validation, not yet scrubbed.
struct Checked {
    entry: LedgerEntry,
    json: serde_json::Value,
    scrubbed: Vec<String>,
    class: toolledger_schemas::EventClass,
    tenant: Tenant,
    source: String,
    event_id: String,
}

/// A decoded, validated, scrubbed event with its identity; payloads not yet offloaded.
struct Prepared {
    entry: LedgerEntry,
    /// The scrubbed event as JSON, what offloading works on.
    json: serde_json::Value,
    class: toolledger_schemas::EventClass,
    key: IdentityKey,
    digest: [u8; 32],
    tenant: Tenant,
    event_id: String,
    /// The ledger entry, when nothing in the event can move to the blob store.
    ready: Option<PendingEntry>,
}

fn tenant_of_subject(subject: &str) -> Tenant {
    toolledger_wire::subject::InboundSubject::parse(subject)
        .map_or_else(|_| Tenant::unroutable(), |s| s.tenant)
}

fn reject(tenant: &Tenant, error: &toolledger_wire::Error, event_id: Option<String>) -> Rejection {
    Rejection {
        reason: error.quarantine_reason().unwrap_or(QuarantineReason::BadEnvelope),
        detail: error.to_string(),
        tenant: tenant.clone(),
        event_id,
    }
}

/// decode ▸ validate, or the rejection that says why not.
fn check(original: &Original) -> std::result::Result<Checked, Rejection> {
    if original.raw_headers.is_some() {
        return Err(Rejection {
            reason: QuarantineReason::PoisonMessage,
            detail: "headers the NATS client cannot parse (invalid UTF-8, or a bare CR or LF)".to_owned(),
            tenant: tenant_of_subject(&original.subject),
            event_id: None,
        });
    }
    let decoded = toolledger_wire::decode(&original.subject, original.headers.as_ref(), &original.payload)
        .map_err(|e| reject(&tenant_of_subject(&original.subject), &e, None))?;
    let event_id = toolledger_wire::cloudevents::AttributesReader::id(&decoded.event).to_owned();
    let source = toolledger_wire::cloudevents::AttributesReader::source(&decoded.event).to_string();
    let tenant = decoded.tenant.clone();
    let class = decoded.class;
    let entry = LedgerEntry::new(decoded, Utc::now());
    let json = entry
        .event_json()
        .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
    if let Err(error) = toolledger_schemas::validate_event(&json) {
        return Err(Rejection {
            reason: match error {
                toolledger_schemas::EventError::UnknownClass(_) => QuarantineReason::UnknownClass,
                _ => QuarantineReason::SchemaViolation,
            },
            detail: error.to_string(),
            tenant,
            event_id: Some(event_id),
        });
    }
    Ok(Checked {
        entry,
        json,
        scrubbed: Vec::new(),
        class,
        tenant,
        source,
        event_id,
    })
}

/// The scrubbed event's digest and identity, and its ledger entry when nothing in it can move to
/// the blob store (otherwise [`offload`] makes the entry).
fn finish(checked: Checked, offloader: &Offloader) -> std::result::Result<Prepared, Rejection> {
    let Checked {
        mut entry,
        json,
        scrubbed,
        class,
        tenant,
        source,
        event_id,
    } = checked;
    if !scrubbed.is_empty() {
        entry.event = toolledger_wire::decode::structured_event(json.clone())
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
        entry.ledger.scrubbed_paths = scrubbed;
    }
    let stays_inline = !offloader.may_move(&json)
        && UploadCollector::find_uploads(&json).is_ok_and(|uploads| uploads.is_empty());
    let (digest, ready) = if stays_inline {
        let (digest, bytes) = entry
            .seal()
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
        let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
        (digest, Some(PendingEntry::new(subject, bytes.into())))
    } else {
        let digest = entry
            .content_digest()
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
        entry.ledger.content_digest = Some(format!("sha256:{}", hex(&digest)));
        (digest, None)
    };
    Ok(Prepared {
        key: IdentityKey::new(tenant.as_str(), &source, &event_id),
        entry,
        json,
        class,
        digest,
        tenant,
        event_id,
        ready,
    })
}

/// One inbound message through decode ▸ validate ▸ scrub ▸ digest ▸ offload ▸ canonicalize as a
/// batch of one, without NATS or the identity index, ingested at `ingested_at`: the entry bytes and
/// content digest ingest would append, or the rejection. For the golden byte-identity test of
/// entries; producer uploads (which need NATS) are not copied.
#[doc(hidden)]
pub async fn entry_for_message(
    original: &Original,
    scrubber: &mut Scrubber,
    offloader: &Offloader,
    ingested_at: DateTime<Utc>,
) -> Result<std::result::Result<(Vec<u8>, [u8; 32]), Rejection>> {
    let mut checked = match check(original) {
        Ok(checked) => checked,
        Err(rejection) => return Ok(Err(rejection)),
    };
    checked.entry.ledger.ingested_at = ingested_at;
    checked.scrubbed = scrubber.scrub(&mut checked.json);
    let prepared = match finish(checked, offloader) {
        Ok(prepared) => prepared,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let digest = prepared.digest;
    if let Some(ready) = prepared.ready {
        return Ok(Ok((ready.bytes.to_vec(), digest)));
    }
    let Prepared {
        mut entry,
        mut json,
        tenant,
        event_id,
        ..
    } = prepared;
    let refs = offloader.offload(&tenant, &mut json).await?;
    if !refs.is_empty() {
        entry.event = toolledger_wire::decode::structured_event(json).map_err(|e| Error::LedgerOwnEvent {
            reason: format!("offloaded event {event_id}: {e}"),
        })?;
        entry.ledger.payload_refs = refs;
    }
    let bytes = entry.canonical_bytes().map_err(|e| Error::LedgerOwnEvent {
        reason: format!("canonicalizing {event_id}: {e}"),
    })?;
    Ok(Ok((bytes, digest)))
}

/// A ledger-own event (a quarantine receipt) as ingest appends it: its entry bytes and content
/// digest. For the golden byte-identity test of entries.
#[doc(hidden)]
pub fn ledger_own_entry_bytes(
    event: serde_json::Value,
    ingested_at: DateTime<Utc>,
) -> Result<(Vec<u8>, [u8; 32])> {
    let (entry, _, digest) = ledger_own_entry(event, ingested_at)?;
    Ok((entry.bytes.to_vec(), digest))
}

/// What the payload stage did to one event.
enum Offloaded {
    Entry {
        entry: PendingEntry,
        uploads: Vec<UploadName>,
    },
    Rejected(Rejection),
}

/// Copies producer uploads in, moves large and erasable fields out, and canonicalizes the entry.
async fn offload(js: &jetstream::Context, stages: &Stages, prepared: Prepared) -> Result<Offloaded> {
    let Prepared {
        mut entry,
        mut json,
        class,
        tenant,
        event_id,
        ..
    } = prepared;
    let collected = match stages.uploads.collect(js, &tenant, &mut json).await {
        Ok(collected) => collected,
        Err(
            error
            @ (Error::UploadInvalid { .. } | Error::UploadMismatch { .. } | Error::UploadMissing { .. }),
        ) => {
            return Ok(Offloaded::Rejected(Rejection {
                reason: QuarantineReason::BadPayload,
                detail: error.to_string(),
                tenant,
                event_id: Some(event_id),
            }));
        }
        Err(error) => return Err(error),
    };
    let mut refs = stages.offloader.offload(&tenant, &mut json).await?;
    refs.extend(collected.refs);
    if !refs.is_empty() {
        refs.sort_by(|a, b| a.path.cmp(&b.path));
        entry.event = toolledger_wire::decode::structured_event(json).map_err(|e| Error::LedgerOwnEvent {
            reason: format!("offloaded event {event_id}: {e}"),
        })?;
        entry.ledger.payload_refs = refs;
    }
    let bytes = entry.canonical_bytes().map_err(|e| Error::LedgerOwnEvent {
        reason: format!("canonicalizing {event_id}: {e}"),
    })?;
    let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
    Ok(Offloaded::Entry {
        entry: PendingEntry::new(subject, bytes.into()),
        uploads: collected.uploads,
    })
}

/// The original as quarantine may keep it: a JSON body scrubbed like an accepted event would be,
/// credential-shaped headers replaced by their markers.
fn scrubbed_original(original: &Original, scrubber: &Mutex<Scrubber>) -> Original {
    let scrubber = scrubber.lock().unwrap_or_else(PoisonError::into_inner);
    let mut copy = original.clone();
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&original.payload)
        && let Some(scrubbed) = scrub_payload(json, original.headers.as_ref(), &scrubber)
        && let Ok(bytes) = serde_json::to_vec(&scrubbed)
    {
        copy.payload = bytes.into();
    }
    if let Some(headers) = &original.headers {
        let mut kept = async_nats::HeaderMap::new();
        for (name, values) in headers.iter() {
            let credential = crate::scrub::is_credential_header(name.as_ref());
            for value in values {
                if credential {
                    let marker = scrubber.marker(&serde_json::Value::String(value.to_string()));
                    if let Ok(value) = marker["$scrubbed"]
                        .as_str()
                        .unwrap_or_default()
                        .parse::<async_nats::header::HeaderValue>()
                    {
                        kept.append(name.clone(), value);
                    }
                } else {
                    kept.append(name.clone(), value.clone());
                }
            }
        }
        copy.headers = Some(kept);
    }
    copy
}

/// A parsed original payload scrubbed as the event it would be; `None` when nothing was a secret.
///
/// A structured event or an envelope is scrubbed as it is. A binary-mode payload is the event's `data`
/// with the attributes in `ce-*` headers: it is scrubbed inside an event rebuilt from those headers, so
/// declared sensitive fields (found through the tenant and tool id attributes) and `/data/…` paths
/// apply to it as they would have to the accepted event.
fn scrub_payload(
    mut json: serde_json::Value,
    headers: Option<&async_nats::HeaderMap>,
    scrubber: &Scrubber,
) -> Option<serde_json::Value> {
    let binary = headers.is_some_and(|h| h.get("ce-specversion").is_some());
    if !binary {
        return (!scrubber.scrub_only(&mut json).is_empty()).then_some(json);
    }
    let mut event = serde_json::Map::new();
    for (name, values) in headers.into_iter().flat_map(|h| h.iter()) {
        let name = name.to_string();
        if let (Some(attribute), Some(value)) = (name.strip_prefix("ce-"), values.first()) {
            event.insert(attribute.to_owned(), serde_json::Value::String(value.to_string()));
        }
    }
    event.insert("data".to_owned(), json);
    let mut event = serde_json::Value::Object(event);
    if scrubber.scrub_only(&mut event).is_empty() {
        return None;
    }
    event.get_mut("data").map(serde_json::Value::take)
}

/// A ledger-own event (a receipt) as an entry with its identity and digest.
fn ledger_own_entry(
    event: serde_json::Value,
    ingested_at: DateTime<Utc>,
) -> Result<(PendingEntry, IdentityKey, [u8; 32])> {
    let own = |e: toolledger_wire::Error| Error::LedgerOwnEvent {
        reason: e.to_string(),
    };
    let tenant_name = event["tenant"].as_str().unwrap_or(Tenant::UNROUTABLE).to_owned();
    let id = event["id"].as_str().unwrap_or_default().to_owned();
    let class: toolledger_schemas::EventClass = event["type"].as_str().unwrap_or_default().parse().map_err(
        |e: toolledger_schemas::UnknownClass| Error::LedgerOwnEvent {
            reason: e.to_string(),
        },
    )?;
    let cloud_event = toolledger_wire::decode::structured_event(event).map_err(own)?;
    let mut entry = LedgerEntry {
        event: cloud_event,
        ledger: LedgerMetadata {
            ingested_at,
            origin: Origin::Ledger,
            content_digest: None,
            payload_refs: Vec::new(),
            scrubbed_paths: Vec::new(),
            trace_refs: None,
            envelope_fields: None,
        },
    };
    let (digest, bytes) = entry.seal().map_err(own)?;
    let tenant = Tenant::parse(&tenant_name).unwrap_or_else(|_| Tenant::unroutable());
    let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
    Ok((
        PendingEntry::new(subject, bytes.into()),
        IdentityKey::new(&tenant_name, quarantine::LEDGER_SOURCE, &id),
        digest,
    ))
}

/// Entries plus their identities, as the batch appends them.
type Batch = (Vec<PendingEntry>, Vec<(IdentityKey, [u8; 32])>);

async fn drop_known_receipts(
    pending: Vec<PendingEntry>,
    identities: Vec<(IdentityKey, [u8; 32])>,
    is_receipt: Vec<bool>,
    index: &Arc<Mutex<IdentityIndex>>,
) -> Result<Batch> {
    if !is_receipt.contains(&true) {
        return Ok((pending, identities));
    }
    let index = Arc::clone(index);
    tokio::task::spawn_blocking(move || {
        let index = lock(&index);
        let mut kept = (
            Vec::with_capacity(pending.len()),
            Vec::with_capacity(identities.len()),
        );
        for ((entry, (key, digest)), receipt) in pending.into_iter().zip(identities).zip(is_receipt) {
            if !receipt || index.lookup(&key)?.is_none() {
                kept.0.push(entry);
                kept.1.push((key, digest));
            }
        }
        Ok(kept)
    })
    .await
    .map_err(|e| Error::IdentityIndex {
        reason: e.to_string(),
    })?
}

/// Brings the identity index up to the ledger's tail, reading entries it has not indexed.
async fn catch_up_index(js: &jetstream::Context, index: &Arc<Mutex<IdentityIndex>>, tail: u64) -> Result<()> {
    /// Entries read and indexed per step: bounds memory during a long catch-up.
    const STEP: u64 = 10_000;
    let mut position = {
        let index = Arc::clone(index);
        tokio::task::spawn_blocking(move || lock(&index).position())
            .await
            .map_err(|e| Error::IdentityIndex {
                reason: e.to_string(),
            })??
    };
    if position < tail {
        tracing::info!(
            from = position + 1,
            to = tail,
            "catching the identity index up with the ledger"
        );
    }
    while position < tail {
        let to = tail.min(position + STEP);
        let entries = read_range(js, LEDGER, position + 1, to).await?;
        let index = Arc::clone(index);
        position = tokio::task::spawn_blocking(move || {
            let mut rows = Vec::with_capacity(entries.len());
            for (seq, bytes) in &entries {
                let entry = LedgerEntry::from_bytes(bytes).map_err(|e| Error::IdentityIndex {
                    reason: format!("ledger seq {seq} unreadable: {e}"),
                })?;
                if let Some((key, digest)) = identity_of(&entry) {
                    rows.push((key, digest, *seq));
                }
            }
            lock(&index).record(&rows, to)?;
            Ok::<u64, Error>(to)
        })
        .await
        .map_err(|e| Error::IdentityIndex {
            reason: e.to_string(),
        })??;
    }
    Ok(())
}

/// The identity and recorded content digest of a stored entry.
fn identity_of(entry: &LedgerEntry) -> Option<(IdentityKey, [u8; 32])> {
    use toolledger_wire::cloudevents::AttributesReader;
    let tenant = entry.event.extension("tenant").map(|t| t.to_string())?;
    let key = IdentityKey::new(&tenant, &entry.event.source().to_string(), entry.event.id());
    let recorded = entry.ledger.content_digest.as_deref()?.strip_prefix("sha256:")?;
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(recorded.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((key, digest))
}
