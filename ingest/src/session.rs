//! `toolledger ingest`: the session loop around the per-event [`crate::pipeline`].
//!
//! ```text
//! acquire lease ─▶ open appender at the ledger tail ─▶ catch the identity index up to the tail
//!   ─▶ loop: fetch ≤ batch from ATL_INBOUND
//!            ├─ pipeline::classify_batch (blocking thread): decode ▸ validate ▸ scrub ▸ seal ▸ dedupe
//!            ├─ pipeline::offload for entries whose payloads move; rejects: original ─▶ ATL_QUARANTINE,
//!            │  receipt ─▶ batch
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

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolledger_core::telemetry::ErrorChain;

use async_nats::jetstream::{self, AckKind, consumer::pull};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use toolledger_ledger::{OrderedReader, ReadSpec, read_range};
use toolledger_merkle::NoteSigner;
use toolledger_wire::LedgerEntry;
use toolledger_wire::streams::{INBOUND, LEDGER};

use crate::append::{Appender, PendingEntry};
use crate::checkpoint::{self, CheckpointSettings, Checkpointer};
use crate::dedupe::{IdentityIndex, IdentityKey};
use crate::lease::{LEASE_BUCKET, Lease};
use crate::metrics::IngestMetrics;
use crate::payload::{OffloadConfig, UploadCollector};
use crate::pipeline::{self, Offloaded, Stages, Verdict};
use crate::poison;
use crate::quarantine::{self, Original};
use crate::scrub::ScrubConfig;
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
        .map_err(Error::task("identity index open"))??,
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
                let chain = ErrorChain(&error).to_string();
                tracing::error!(error = %chain, failures, "ingest session failed; starting over");
                health.failing("ingest", chain);
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

/// Teaches the scrubber every declaration already in the ledger, so fields a tool declares
/// sensitive are scrubbed after a restart too.
async fn learn_declarations(stages: &Stages, js: &jetstream::Context) -> Result<()> {
    let spec = ReadSpec::to_tail(1).subjects("atl.ledger.*.tool.declared");
    let mut reader = OrderedReader::open(js, LEDGER, spec).await?;
    let mut declarations = Vec::new();
    loop {
        let batch = reader.next_batch(512).await?;
        if batch.is_empty() {
            break;
        }
        declarations.extend(
            batch
                .iter()
                .filter_map(|message| LedgerEntry::parse(&message.payload).ok())
                .map(|entry| entry.event.into_json()),
        );
    }
    if declarations.is_empty() {
        return Ok(());
    }
    let count = declarations.len();
    let mut scrubber = stages.scrubber.lock().unwrap_or_else(PoisonError::into_inner);
    for event in &declarations {
        scrubber.observe(event);
    }
    tracing::info!(declarations = count, "scrubber learned the ledger's declarations");
    Ok(())
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
            .map_err(|e| Error::stream("nats", "connecting", e))?;
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
        let leases = js
            .get_key_value(LEASE_BUCKET)
            .await
            .map_err(|e| Error::stream(LEASE_BUCKET, "opening the bucket", e))?;
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
        learn_declarations(stages, js).await?;
        metrics
            .last_seq
            .set(i64::try_from(appender.last_seq()).unwrap_or(i64::MAX));
        let inbound = js
            .get_stream(INBOUND)
            .await
            .map_err(|e| Error::stream(INBOUND, "opening", e))?;
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
            .map_err(|e| Error::stream(INBOUND, format!("opening consumer {}", settings.consumer), e))?;
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
        let mut inbound = self
            .js
            .get_stream(INBOUND)
            .await
            .map_err(|e| Error::stream(INBOUND, "opening", e))?;
        let first = inbound
            .info()
            .await
            .map_err(|e| Error::stream(INBOUND, "reading its state", e))?
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
        let mut batch = self
            .consumer
            .fetch()
            .max_messages(settings.batch_size)
            .expires(settings.fetch_wait)
            .messages()
            .await
            .map_err(|e| Error::stream(INBOUND, "fetching", e))?;
        let mut messages = Vec::new();
        while let Some(message) = batch.next().await {
            match message {
                Ok(message) => messages.push(message),
                // A message the client could not parse; JetStream redelivers it until max_deliver.
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&*error), "inbound message could not be read")
                }
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
            tokio::task::spawn_blocking(move || pipeline::classify_batch(&originals, &index, &stages))
                .await
                .map_err(Error::task("classify"))??
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
                        None => pipeline::offload(&self.js, &self.stages, *prepared).await?,
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
                    let kept = pipeline::reject::scrubbed_original(original, &self.stages.scrubber);
                    let quarantined = quarantine::publish(&self.js, &kept, &rejection).await?;
                    metrics.quarantined(rejection.reason);
                    let receipt = quarantine::receipt_event(original, &rejection, &quarantined);
                    let (entry, key, digest) = pipeline::own_entry(receipt, original.published)?;
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
                .map_err(Error::task("identity index record"))??;
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
    .map_err(Error::task("identity index lookup"))?
}

/// Brings the identity index up to the ledger's tail, reading entries it has not indexed.
async fn catch_up_index(js: &jetstream::Context, index: &Arc<Mutex<IdentityIndex>>, tail: u64) -> Result<()> {
    /// Entries read and indexed per step: bounds memory during a long catch-up.
    const STEP: u64 = 10_000;
    let mut position = {
        let index = Arc::clone(index);
        tokio::task::spawn_blocking(move || lock(&index).position())
            .await
            .map_err(Error::task("identity index position"))??
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
                let entry = LedgerEntry::parse(bytes)
                    .map_err(|source| Error::IndexedEntryUnreadable { seq: *seq, source })?;
                if let Some((key, digest)) = identity_of(&entry) {
                    rows.push((key, digest, *seq));
                }
            }
            lock(&index).record(&rows, to)?;
            Ok::<u64, Error>(to)
        })
        .await
        .map_err(Error::task("identity index catch-up"))??;
    }
    Ok(())
}

/// The identity and recorded content digest of a stored entry.
fn identity_of(entry: &LedgerEntry) -> Option<(IdentityKey, [u8; 32])> {
    let tenant = entry.event.extension("tenant").map(|t| t.to_string())?;
    let key = IdentityKey::new(&tenant, entry.event.source(), entry.event.id());
    let recorded = entry.ledger.content_digest.as_deref()?.strip_prefix("sha256:")?;
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(recorded.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((key, digest))
}
