//! `toolledger ingest`: the session loop around the per-event [`crate::pipeline`].
//!
//! ```text
//! acquire lease ─▶ open appender at the ledger tail ─▶ catch the identity index up to the tail
//!   ─▶ two stages, one batch apart (see `Session`):
//!      front: a lane per tenant (see `lanes`), fed by a continuous pull on the tenant's consumer
//!             (own connection) ▸ hold in the tenant's inbound order ▸ read missing deliveries raw ▸
//!             when the back can take one, a batch of every lane's share ▸ pipeline::classify_batch
//!             (decode ▸ validate ▸ scrub ▸ seal ▸ dedupe against the index and the batches in
//!             flight) ──▶ channel of one batch
//!      back:  pipeline::offload for entries whose payloads move; rejects: original ─▶ ATL_QUARANTINE,
//!             receipt ─▶ batch ▸ append (entries and receipts, in inbound order), grow the Merkle
//!             tree, sign a checkpoint every N entries or T seconds ▸ index the new identities (one
//!             transaction) ▸ ack (or delete) every inbound message of the batch; renew the lease
//!      watch: inbound lag every second; a stage stuck past `stall_after` ends the session
//!   ─▶ on shutdown: finish the batches in hand, sign, release the lease
//! ```
//!
//! An inbound message is acked only after the ledger (or the quarantine and the ledger's receipt)
//! holds it. Any failure ends the session: the loop starts again from the top, re-reading the
//! ledger tail, and unacked messages come back; duplicate detection drops what had already landed.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolledger_core::telemetry::ErrorChain;

use async_nats::jetstream::{self, AckKind, consumer::pull};
use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use toolledger_ledger::{OrderedReader, ReadSpec, read_range};
use toolledger_merkle::NoteSigner;
use toolledger_wire::LedgerEntry;
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::{INBOUND, INBOUND_SUBJECTS, check_partition_count};

use crate::append::{Appender, PendingEntry};
use crate::checkpoint::{self, CheckpointSettings, Checkpointer};
use crate::dedupe::{IdentityIndex, IdentityKey};
use crate::lease::{LEASE_BUCKET, Lease, Membership};
use crate::metrics::IngestMetrics;
use crate::payload::{OffloadConfig, UploadCollector};
use crate::pipeline::{self, InFlight, Offloaded, Stages, Verdict};
use crate::poison;
use crate::quarantine::{self, Original};
use crate::scrub::ScrubConfig;
use crate::witnessing::{Witnessing, WitnessingSettings};
use crate::{Error, Result};

mod lanes;
use lanes::{Delivery, Done, Item, Lane, LaneKey, Lanes};

/// How ingest runs.
#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// Messages fetched and appended together. Bounds memory and the work redone after a crash;
    /// the default, the largest atomic batch the server takes (1,000), amortizes each batch's fixed
    /// cost on the server (a staging store per atomic batch; the bench's relay moved 29k events/s
    /// with batches of 256, 41k with 1,000) and stays around a megabyte for typical events.
    pub batch_size: usize,
    /// How long a lane's pull request lasts (twice this) and how often the server sends heartbeats
    /// on it (half this).
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
    /// The witnesses asked to cosign each checkpoint.
    pub witnessing: WitnessingSettings,
    /// Where the Merkle tiles live (a directory, `file://`, `s3://`, `memory://`).
    pub tiles: String,
    /// The checkpoint signing key made by `toolledger init`.
    pub key_file: PathBuf,
    /// The largest producer upload copied in from `ATL_PAYLOADS_<tenant>`; larger ones are refused.
    pub max_upload_bytes: u64,
    /// How long a stage may be at one step (a fetch, a batch's append) before the session is taken
    /// for stalled and started over on fresh connections.
    pub stall_after: Duration,
    /// The ledger's partitions; [`run`] writes every one whose lease it can take.
    pub partitions: Partitions,
    /// The partition these settings are for ([`IngestSettings::for_partition`]); p0 by default.
    pub partition: Partition,
}

impl IngestSettings {
    /// Defaults with the index under `data_dir/ingest/`.
    pub fn new(data_dir: &std::path::Path) -> Self {
        Self {
            batch_size: crate::append::MAX_ATOMIC_BATCH,
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
            witnessing: WitnessingSettings::default(),
            tiles: data_dir.join("tiles").display().to_string(),
            key_file: data_dir.join("keys/checkpoint.key"),
            max_upload_bytes: 256 * 1024 * 1024,
            stall_after: Duration::from_secs(10),
            partitions: Partitions::default(),
            partition: Partition::ZERO,
        }
    }

    /// These settings for one partition: its ledger stream, checkpoint subject and origin, tiles,
    /// lease and identity index (p0's are these settings unchanged). The same witnesses cosign every
    /// partition, each under its own origin.
    pub fn for_partition(&self, partition: Partition) -> Self {
        let mut settings = self.clone();
        settings.partition = partition;
        if partition == Partition::ZERO {
            return settings;
        }
        if let Some(name) = self.index_path.file_name().and_then(|name| name.to_str()) {
            settings.index_path = self.index_path.with_file_name(partition.file_name(name));
        }
        settings.checkpoint.ledger_stream = partition.stream();
        settings.checkpoint.checkpoint_subject = partition.checkpoint_subject();
        settings.checkpoint.origin = partition.origin(&self.checkpoint.origin);
        settings.tiles = partition.tiles(&self.tiles);
        settings
    }

    /// The health component of this partition's writer: `ingest`, `ingest-p1`, …
    fn component(&self) -> String {
        match self.partition.index() {
            0 => "ingest".to_owned(),
            _ => format!("ingest-{}", self.partition),
        }
    }
}

impl IngestSettings {
    /// Settings from the configuration file: data directory, checkpoints, tiles, signing key, blob
    /// store, offloading, scrubbing and witnesses; the rest keep their defaults. A witness key that
    /// does not parse is an error.
    pub fn from_config(config: &toolledger_core::config::Config) -> Result<Self> {
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
        settings.witnessing = WitnessingSettings::from_config(&config.ledger)?;
        settings.partitions = Partitions::new(config.ledger.partitions).map_err(|reason| Error::Config {
            field: "ledger.partitions".to_owned(),
            reason,
        })?;
        Ok(settings)
    }
}

/// `path` made absolute against the working directory, for a `file://` URL.
fn absolute(path: &std::path::Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// How long a session may take to finish after shutdown is asked for before it is abandoned (its
/// unacked messages come back to the next ingest; the lease lapses on its own).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(4);
/// How often the back stage looks at the lease and the checkpoint clock while no batch comes.
const TICK: Duration = Duration::from_millis(100);
/// How often the front looks for tenants with messages and no lane yet, and for max-deliveries
/// advisories.
const DISCOVER_EVERY: Duration = Duration::from_millis(250);
/// How long a lane may have nothing before it is closed (it opens again when messages come).
const LANE_IDLE: Duration = Duration::from_secs(60);
/// How long a lane's consumer may go unused before the server removes it.
const CONSUMER_INACTIVE: Duration = Duration::from_secs(3600);

/// Runs ingest until `shutdown` completes: a writer for every partition, each taking its lease
/// when it can (another process's partitions are taken over when their lease lapses) and starting
/// over after any failure. On shutdown the batch in hand is finished and the lease released, so
/// another ingest can take over at once; a session that cannot finish within [`SHUTDOWN_GRACE`] is
/// abandoned.
pub async fn run(
    connector: Connector,
    settings: IngestSettings,
    metrics: IngestMetrics,
    health: toolledger_core::telemetry::Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let membership = Arc::new(Membership::new(
        &settings.holder,
        settings.lease_ttl,
        settings.partitions.count(),
    ));
    // One partition needs no sharing: whoever holds its lease writes it.
    let members = (settings.partitions.count() > 1).then(|| {
        tokio::spawn(keep_membership(
            connector.clone(),
            Arc::clone(&membership),
            stop.clone(),
        ))
    });
    let writers = settings.partitions.all().map(|partition| {
        run_partition(
            &connector,
            settings.for_partition(partition),
            &metrics,
            &health,
            &membership,
            stop.clone(),
        )
    });
    // The directory's writer stops after the partitions' (which sign their tails on the way out),
    // so its last entry names their last checkpoints.
    let (directory_stop, directory_stopped) = tokio::sync::watch::channel(false);
    let directory = (settings.partitions.count() > 1).then(|| {
        tokio::spawn(crate::directory::run(
            connector.clone(),
            settings.clone(),
            metrics.clone(),
            health.clone(),
            directory_stopped,
        ))
    });
    let outcome = futures::future::try_join_all(writers).await.map(drop);
    let _ = directory_stop.send(true);
    if let Some(directory) = directory {
        if outcome.is_ok() {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, directory).await;
        } else {
            directory.abort();
        }
    }
    if let Some(members) = members {
        if outcome.is_ok() {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, members).await;
        } else {
            members.abort();
        }
    }
    outcome
}

/// Keeps this process's membership current (see [`Membership`]) until `stop`, reconnecting after
/// any failure; leaves on stop.
async fn keep_membership(
    connector: Connector,
    membership: Arc<Membership>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut store = None;
    while !*stop.borrow() {
        if store.is_none() {
            store = match connector.connect().await {
                Ok(js) => js
                    .get_key_value(LEASE_BUCKET)
                    .await
                    .map_err(|e| tracing::warn!(error = %e, "could not open {LEASE_BUCKET} for this ingest's membership"))
                    .ok(),
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "could not connect for this ingest's membership");
                    None
                }
            };
        }
        if let Some(kv) = &store
            && let Err(error) = membership.refresh(kv).await
        {
            tracing::warn!(error = %ErrorChain(&error), "could not renew this ingest's membership; retrying");
            store = None;
        }
        tokio::select! {
            () = tokio::time::sleep(membership.refresh_every()) => {}
            _ = stop.changed() => {}
        }
    }
    if let Some(kv) = &store {
        membership.leave(kv).await;
    }
}

/// One partition's writer: sessions, each holding the partition's lease, until `stop`. A session
/// asked to hand its partition on ([`Membership`]) ends as on shutdown, and the writer waits a
/// lease time before it tries again.
async fn run_partition(
    connector: &Connector,
    settings: IngestSettings,
    metrics: &IngestMetrics,
    health: &toolledger_core::telemetry::Health,
    membership: &Arc<Membership>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    // The session's own stop: shutdown, or this partition handed on.
    let (hand_on, session_stop) = tokio::sync::watch::channel(false);
    membership.register(settings.partition.index(), hand_on.clone());
    let forward = {
        let mut stop = stop.clone();
        let hand_on = hand_on.clone();
        tokio::spawn(async move {
            let _ = stop.wait_for(|stop| *stop).await;
            let _ = hand_on.send(true);
        })
    };
    let outcome = write_partition(
        connector,
        &settings,
        metrics,
        health,
        membership,
        &mut stop,
        &hand_on,
        session_stop,
    )
    .await;
    forward.abort();
    outcome
}

#[allow(clippy::too_many_arguments)] // the writer's parts, passed once
async fn write_partition(
    connector: &Connector,
    settings: &IngestSettings,
    metrics: &IngestMetrics,
    health: &toolledger_core::telemetry::Health,
    membership: &Arc<Membership>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    hand_on: &tokio::sync::watch::Sender<bool>,
    session_stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let index = Arc::new(Mutex::new(
        tokio::task::spawn_blocking({
            let path = settings.index_path.clone();
            move || IdentityIndex::open(&path)
        })
        .await
        .map_err(Error::task("identity index open"))??,
    ));
    let stages = Arc::new(Stages::open(settings)?);
    let mut failures = 0u32;
    while !*stop.borrow() {
        // A partition handed on (or a hand-on asked of a session that ended otherwise) is not
        // handed on again by the next session; shutdown still is.
        hand_on.send_replace(false);
        if *stop.borrow() {
            hand_on.send_replace(true);
        }
        let session = tokio::select! {
            session = Session::start(connector, settings, &index, &stages, metrics, membership) => session,
            _ = stop.changed() => return Ok(()),
        };
        let outcome = match session {
            Ok(session) => {
                // Each session has its own: a classify step that an ended session left running on
                // its blocking thread must not mark identities in flight for the next one.
                let in_flight = Arc::new(InFlight::default());
                let shared = Shared {
                    settings,
                    index: &index,
                    in_flight: &in_flight,
                    metrics,
                    health,
                    beats: &Beats::new(),
                };
                let mut running = std::pin::pin!(session.run(shared, session_stop.clone()));
                let mut asked = session_stop.clone();
                tokio::select! {
                    outcome = &mut running => outcome,
                    () = async {
                        let _ = asked.wait_for(|stop| *stop).await;
                        tokio::time::sleep(SHUTDOWN_GRACE).await;
                    } => {
                        tracing::warn!(grace = ?SHUTDOWN_GRACE, "ingest did not finish its batch in time; stopping without it");
                        Ok(())
                    }
                }
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) if *stop.borrow() => return Ok(()),
            Ok(()) => {
                // Handed on: another ingest takes the partition; try again only after a lease time.
                tracing::info!(partition = %settings.partition, "handed the partition on");
                health.ok(&settings.component(), "handed on to another ingest");
                tokio::select! {
                    () = tokio::time::sleep(settings.lease_ttl) => {},
                    _ = stop.changed() => return Ok(()),
                }
            }
            Err(error) => {
                failures += 1;
                let chain = ErrorChain(&error).to_string();
                tracing::error!(error = %chain, failures, partition = %settings.partition, "ingest session failed; starting over");
                health.failing(&settings.component(), chain);
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
async fn learn_declarations(stages: &Stages, js: &jetstream::Context, partition: Partition) -> Result<()> {
    let spec = ReadSpec::to_tail(1).subjects(format!("{}.*.tool.declared", partition.subject_prefix()));
    let mut reader = OrderedReader::open(js, &partition.stream(), spec).await?;
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

/// How ingest reaches NATS. Every session connects afresh, and each lane's deliveries come over a
/// connection of their own: a message with a bare CR in a header panics the client's connection
/// task (and invalid UTF-8 drops the connection), so only the sending tenant's connection dies, and
/// it is replaced in milliseconds without ending the session or touching another lane (see
/// [`LaneLink`]).
#[derive(Debug, Clone)]
pub struct Connector {
    /// The server URL.
    pub url: String,
    /// The connection name servers show.
    pub name: String,
}

impl Connector {
    pub(crate) async fn connect(&self) -> Result<jetstream::Context> {
        self.connect_named(&self.name).await
    }

    async fn connect_named(&self, name: &str) -> Result<jetstream::Context> {
        let client = toolledger_wire::connect::connect(&self.url, name)
            .await
            .map_err(|e| Error::stream("nats", "connecting", e))?;
        Ok(jetstream::new(client))
    }
}

/// What both stages of a session share.
#[derive(Clone, Copy)]
struct Shared<'a> {
    settings: &'a IngestSettings,
    index: &'a Arc<Mutex<IdentityIndex>>,
    in_flight: &'a Arc<InFlight>,
    metrics: &'a IngestMetrics,
    health: &'a toolledger_core::telemetry::Health,
    beats: &'a Beats,
}

/// One lease-holding run: two stages and a monitor.
///
/// ```text
///  front: advisories ▸ find tenants ▸ feeders pull every lane ▸ hold each in inbound order ▸ fill
///         gaps raw ▸ a batch of every lane's share ▸ classify ─┐ channel of 1
///  back:  ◀─ offload ▸ quarantine ▸ append ▸ checkpoint ▸ index ▸ ack ─┘
///  monitor: inbound lag every second; ends the session when a stage stalls
/// ```
///
/// The front classifies batch N+1 while the back appends batch N, and takes batch N+1 from the lanes
/// only once the back has taken batch N, so what arrived meanwhile goes into it. Each lane's feeder
/// pulls continuously; its consumer's `max_ack_pending` of four batches bounds what a lane holds.
struct Session {
    front: Front,
    back: Back,
    monitor: jetstream::stream::Stream,
    /// Asks the witnesses to cosign each new checkpoint; `None` without witnesses.
    witnessing: Option<Witnessing>,
}

/// The first stage: ATL_INBOUND lane by lane (see [`lanes`]), classified.
struct Front {
    js: jetstream::Context,
    stages: Arc<Stages>,
    connector: Connector,
    advisories: jetstream::consumer::PullConsumer,
    /// ATL_INBOUND on the session's connection: its subjects name the tenants with messages.
    stream: jetstream::stream::Stream,
    lanes: Lanes,
    /// Each lane's feeder ([`feed_lane`]), on a consumer opened on the lane's own connection, and
    /// the generation it was started in; aborted (closing its connection) when the connection is
    /// replaced or the lane closes.
    feeders: tokio::task::JoinSet<()>,
    feeding: HashMap<LaneKey, (tokio::task::AbortHandle, u64)>,
    /// What the feeders fetched.
    fed: tokio::sync::mpsc::Receiver<Fetched>,
    feed: tokio::sync::mpsc::Sender<Fetched>,
    /// Counts the feeders started, so a failure reported by a replaced one is not acted on.
    generation: u64,
    /// When the stream's subjects were last looked at for new tenants.
    discovered: Option<Instant>,
    /// The partition this session writes, of how many: it reads only its tenants' lanes.
    partition: Partition,
    partitions: Partitions,
}

/// A lane's fetch, done: its deliveries, or why the connection is taken for gone.
struct Fetched {
    lane: LaneKey,
    generation: u64,
    outcome: std::result::Result<Vec<jetstream::Message>, String>,
}

/// The second stage: the ledger's single writer.
struct Back {
    js: jetstream::Context,
    stages: Arc<Stages>,
    lease: Lease,
    /// This process's count of the partition as held, until the session ends.
    _reservation: Reservation,
    appender: Appender,
    checkpointer: Checkpointer,
}

/// A partition counted as held by this process ([`Membership::try_reserve`]) until dropped.
struct Reservation {
    membership: Arc<Membership>,
    index: u16,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.membership.release(self.index);
    }
}

/// A classified batch on its way from the front to the back.
struct Classified {
    items: Vec<Item>,
    verdicts: Vec<Verdict>,
    /// Later copies of messages an earlier batch holds (redeliveries): finished only after that
    /// batch is, which the back's order guarantees.
    late: Vec<Item>,
}

/// When each stage began what it is doing (milliseconds since the session began); [`Beats::IDLE`]
/// while it waits for work or for the other stage. The monitor reads them.
struct Beats {
    began: Instant,
    front: AtomicU64,
    back: AtomicU64,
}

impl Beats {
    const IDLE: u64 = u64::MAX;

    fn new() -> Self {
        Self {
            began: Instant::now(),
            front: AtomicU64::new(Self::IDLE),
            back: AtomicU64::new(Self::IDLE),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn busy(&self, stage: &AtomicU64) {
        stage.store(self.now(), Ordering::Relaxed);
    }

    fn idle(stage: &AtomicU64) {
        stage.store(Self::IDLE, Ordering::Relaxed);
    }

    /// The stage that has been at one step longer than `limit`, and for how long.
    fn stalled(&self, limit: Duration) -> Option<String> {
        let now = self.now();
        [("fetch and classify", &self.front), ("append", &self.back)]
            .into_iter()
            .find_map(|(name, stage)| {
                let since = stage.load(Ordering::Relaxed);
                let busy = Duration::from_millis(now.saturating_sub(since));
                (since != Self::IDLE && busy > limit)
                    .then(|| format!("the {name} stage has not moved for {:.1} s", busy.as_secs_f64()))
            })
    }
}

/// A lane's own connection, on which its consumer is opened: a header block the client cannot
/// parse breaks this connection alone, so only its tenant's deliveries wait while it is replaced.
struct LaneLink {
    /// ATL_INBOUND on this connection.
    stream: jetstream::stream::Stream,
    /// Turns true when the connection drops.
    lost: tokio::sync::watch::Receiver<bool>,
}

impl LaneLink {
    async fn open(connector: &Connector, lane: &LaneKey) -> Result<Self> {
        // A header block the client cannot parse drops the connection (or panics its task); the
        // client would reconnect by itself, but the pull out would wait out its expiry. The
        // disconnect event ends it at once instead.
        let (dropped, lost) = tokio::sync::watch::channel(false);
        let (addrs, options) =
            toolledger_wire::connect::options(&connector.url, &format!("{} inbound {lane}", connector.name))
                .map_err(|e| Error::stream("nats", "connecting", e))?;
        let dropped = Arc::new(dropped);
        let client = options
            .event_callback(move |event| {
                let dropped = Arc::clone(&dropped);
                async move {
                    if matches!(event, async_nats::Event::Disconnected) {
                        let _ = dropped.send(true);
                    }
                }
            })
            .connect(addrs)
            .await
            .map_err(|e| Error::stream("nats", "connecting", e))?;
        let stream = jetstream::new(client)
            .get_stream(INBOUND)
            .await
            .map_err(|e| Error::stream(INBOUND, "opening", e))?;
        Ok(Self { stream, lost })
    }
}

/// A lane's feeder: a continuous pull (up to `max` deliveries asked for at a time, topped up as
/// they arrive, with heartbeats), forwarded to the front in chunks of what has arrived, so
/// deliveries keep coming while the front classifies and the back appends (the consumer's
/// `max_ack_pending` bounds what a lane holds). A pull that fails, heartbeats that stop, or the
/// lane's connection dropping mean the connection is gone (a header block broke the client, or the
/// server went away): the feeder reports it and stops, and its connection closes with it.
async fn feed_lane(
    lane: LaneKey,
    consumer: jetstream::consumer::PullConsumer,
    mut lost: tokio::sync::watch::Receiver<bool>,
    max: usize,
    wait: Duration,
    generation: u64,
    to_front: tokio::sync::mpsc::Sender<Fetched>,
) {
    let report = |outcome| Fetched {
        lane: lane.clone(),
        generation,
        outcome,
    };
    let stream = consumer
        .stream()
        .max_messages_per_batch(max)
        .expires(wait * 2)
        .heartbeat(wait / 2)
        .messages()
        .await;
    let why = match stream {
        Err(error) => ErrorChain(&error).to_string(),
        Ok(mut messages) => loop {
            let next = tokio::select! {
                next = messages.next() => next,
                _ = lost.wait_for(|dropped| *dropped) => break "the connection dropped".to_owned(),
            };
            let first = match next {
                Some(Ok(message)) => message,
                Some(Err(error)) => break ErrorChain(&error).to_string(),
                None => break "the pull ended".to_owned(),
            };
            let mut chunk = vec![first];
            // What else has arrived, without waiting.
            while chunk.len() < max {
                match messages.next().now_or_never() {
                    Some(Some(Ok(message))) => chunk.push(message),
                    _ => break,
                }
            }
            if to_front.send(report(Ok(chunk))).await.is_err() {
                return;
            }
        },
    };
    let _ = to_front.send(report(Err(why))).await;
}

impl Session {
    async fn start(
        connector: &Connector,
        settings: &IngestSettings,
        index: &Arc<Mutex<IdentityIndex>>,
        stages: &Arc<Stages>,
        metrics: &IngestMetrics,
        membership: &Arc<Membership>,
    ) -> Result<Self> {
        let js = &connector.connect().await?;
        let partition = settings.partition;
        check_partition_count(js, settings.partitions)
            .await
            .map_err(|e| Error::Config {
                field: "ledger.partitions".to_owned(),
                reason: e.to_string(),
            })?;
        let leases = js
            .get_key_value(LEASE_BUCKET)
            .await
            .map_err(|e| Error::stream(LEASE_BUCKET, "opening the bucket", e))?;
        // Nothing is written with a scrubber key the ledger's other writers do not share: the key
        // this process scrubs with (loaded when it started), not whatever the file holds now.
        let fingerprint = stages
            .scrubber
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fingerprint()
            .to_owned();
        crate::lease::agree_on_scrub_key(&leases, &fingerprint).await?;
        // Taken only while this process holds fewer partitions than its share, so the writers of
        // several processes spread over the partitions.
        membership.ready();
        let mut waited = false;
        let (lease, reservation) = loop {
            if membership.try_reserve(partition.index()) {
                let reservation = Reservation {
                    membership: Arc::clone(membership),
                    index: partition.index(),
                };
                if let Some(lease) = Lease::try_acquire(
                    &leases,
                    &partition.lease_key(),
                    &settings.holder,
                    settings.lease_ttl,
                )
                .await?
                {
                    membership.leased(partition.index());
                    break (lease, reservation);
                }
            }
            if !waited {
                tracing::info!(%partition, "ledger lease held by another ingest (or this one holds its share); waiting");
                waited = true;
            }
            tokio::time::sleep(settings.lease_ttl / 3).await;
        };
        tracing::info!(holder = lease.holder(), %partition, "holding the ledger lease");
        let appender = Appender::open_partition(js.clone(), partition, settings.partitions).await?;
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
        catch_up_index(js, &partition.stream(), index, appender.last_seq()).await?;
        learn_declarations(stages, js, partition).await?;
        metrics
            .last_seq(partition)
            .set(i64::try_from(appender.last_seq()).unwrap_or(i64::MAX));
        let stream = js
            .get_stream(INBOUND)
            .await
            .map_err(|e| Error::stream(INBOUND, "opening", e))?;
        // Before lanes, ingest read ATL_INBOUND through one unfiltered consumer; a work queue takes
        // no filtered consumer beside it. Its unacked messages stay in the stream for the lanes.
        match stream.delete_consumer(&settings.consumer).await {
            Ok(_) => tracing::info!(
                consumer = settings.consumer,
                "removed the single inbound consumer; ingest reads ATL_INBOUND tenant by tenant now"
            ),
            Err(error)
                if matches!(error.kind(), jetstream::stream::ConsumerErrorKind::JetStream(inner)
                    if inner.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND) => {}
            Err(error) => {
                return Err(Error::stream(
                    INBOUND,
                    format!("removing consumer {}", settings.consumer),
                    error,
                ));
            }
        }
        let witnessing = Witnessing::open(
            js.clone(),
            &settings.checkpoint,
            checkpointer.tiles().clone(),
            &settings.witnessing,
            metrics.clone(),
        )
        .await?;
        let advisories = poison::advisory_consumer(js).await?;
        // Room for a few fetches a lane before feeders wait for the front.
        let (feed, fed) = tokio::sync::mpsc::channel(64);
        Ok(Self {
            front: Front {
                js: js.clone(),
                stages: Arc::clone(stages),
                connector: connector.clone(),
                advisories,
                stream: stream.clone(),
                lanes: Lanes::new(),
                feeders: tokio::task::JoinSet::new(),
                feeding: HashMap::new(),
                fed,
                feed,
                generation: 0,
                discovered: None,
                partition,
                partitions: settings.partitions,
            },
            back: Back {
                js: js.clone(),
                stages: Arc::clone(stages),
                lease,
                _reservation: reservation,
                appender,
                checkpointer,
            },
            monitor: stream,
            witnessing,
        })
    }

    async fn run(self, shared: Shared<'_>, stop: tokio::sync::watch::Receiver<bool>) -> Result<()> {
        let Self {
            front,
            back,
            monitor,
            witnessing,
        } = self;
        shared.health.ok(
            &shared.settings.component(),
            format!("appending after seq {}", back.appender.last_seq()),
        );
        let (to_back, from_front) = tokio::sync::mpsc::channel(1);
        let stages = async {
            tokio::try_join!(front.run(to_back, shared, stop), back.run(from_front, shared))?;
            Ok(())
        };
        // The witnesses are asked beside the stages, never in their way; they end with the session.
        tokio::select! {
            outcome = stages => outcome,
            stalled = watch(monitor, shared) => Err(stalled),
            never = Witnessing::run_or_wait(witnessing) => match never {},
        }
    }
}

/// Reports the inbound lag every second, and ends the session (returns why) when a stage has been
/// at one step longer than the stall limit or ATL_INBOUND cannot be read for that long.
async fn watch(mut inbound: jetstream::stream::Stream, shared: Shared<'_>) -> Error {
    let limit = shared.settings.stall_after;
    let mut unreadable_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(what) = shared.beats.stalled(limit) {
            return Error::Stalled { what };
        }
        match tokio::time::timeout(Duration::from_secs(2), inbound.info()).await {
            Ok(Ok(info)) => {
                unreadable_since = None;
                // A work queue holds exactly what ingest has not finished.
                shared
                    .metrics
                    .inbound_lag
                    .set(i64::try_from(info.state.messages).unwrap_or(i64::MAX));
            }
            _ => {
                let since = *unreadable_since.get_or_insert_with(Instant::now);
                if since.elapsed() > limit {
                    return Error::Stalled {
                        what: format!(
                            "ATL_INBOUND could not be read for {:.1} s",
                            since.elapsed().as_secs_f64()
                        ),
                    };
                }
            }
        }
    }
}

/// What a waiting front woke for.
enum Woke<P> {
    Fed(Option<Fetched>),
    Back(P),
    Other,
}

impl Front {
    async fn run(
        mut self,
        to_back: tokio::sync::mpsc::Sender<Classified>,
        shared: Shared<'_>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let settings = shared.settings;
        let mut late = Vec::new();
        loop {
            shared.beats.busy(&shared.beats.front);
            if *stop.borrow() {
                return Ok(());
            }
            // New tenants and exhausted messages are looked for a few times a second, not on every
            // delivery (each look is a request).
            if self.discovered.is_none_or(|at| at.elapsed() >= DISCOVER_EVERY) {
                let exhausted = poison::take(&self.js, &self.advisories, settings.batch_size, |consumer| {
                    self.owns_consumer(consumer, &settings.consumer)
                })
                .await?;
                for (original, advisory) in exhausted {
                    self.route(original, Done::Exhausted(advisory), None, &mut late);
                }
                self.discover().await?;
            }
            self.arm(settings).await?;
            self.take_fed(&mut late).await?;
            if !self.lanes.work_in_hand() && late.is_empty() {
                // Waiting for deliveries is not a stall.
                Beats::idle(&shared.beats.front);
                let woke: Woke<()> = tokio::select! {
                    fed = self.fed.recv() => Woke::Fed(fed),
                    () = tokio::time::sleep(DISCOVER_EVERY) => Woke::Other,
                    _ = stop.changed() => Woke::Other,
                };
                if let Woke::Fed(Some(fed)) = woke {
                    shared.beats.busy(&shared.beats.front);
                    self.take_in(fed, &mut late).await?;
                }
                continue;
            }
            // The batch is taken when the back can take it (it is done with the one before);
            // deliveries keep coming into the lanes meanwhile, and the batch takes them all.
            Beats::idle(&shared.beats.front);
            let permit = loop {
                let woke = tokio::select! {
                    biased;
                    permit = to_back.reserve() => Woke::Back(permit),
                    fed = self.fed.recv() => Woke::Fed(fed),
                };
                match woke {
                    Woke::Back(Ok(permit)) => break permit,
                    // The back has ended: its outcome is the session's.
                    Woke::Back(Err(_)) => return Ok(()),
                    Woke::Fed(Some(fed)) => self.take_in(fed, &mut late).await?,
                    Woke::Fed(None) | Woke::Other => {}
                }
            };
            shared.beats.busy(&shared.beats.front);
            self.take_fed(&mut late).await?;
            self.fill(settings.batch_size).await?;
            self.keep_from_redelivery(settings.ack_wait).await;
            let run = self.lanes.batch(settings.batch_size);
            if run.is_empty() {
                if !late.is_empty() {
                    permit.send(Classified {
                        items: Vec::new(),
                        verdicts: Vec::new(),
                        late: std::mem::take(&mut late),
                    });
                }
                continue;
            }
            let (run, verdicts) = {
                let (index, in_flight, stages) = (
                    Arc::clone(shared.index),
                    Arc::clone(shared.in_flight),
                    Arc::clone(&self.stages),
                );
                // The batch goes to the blocking thread and comes back with its verdicts: nothing
                // in it is copied.
                tokio::task::spawn_blocking(move || {
                    let originals: Vec<&Original> = run.iter().map(|item| &item.original).collect();
                    let verdicts = pipeline::classify_batch(&originals, &index, &in_flight, &stages)?;
                    Ok::<_, Error>((run, verdicts))
                })
                .await
                .map_err(Error::task("classify"))??
            };
            tracing::debug!(events = run.len(), late = late.len(), "batch classified");
            permit.send(Classified {
                items: run,
                verdicts,
                late: std::mem::take(&mut late),
            });
        }
    }

    /// Takes in everything the feeders have fetched so far.
    async fn take_fed(&mut self, late: &mut Vec<Item>) -> Result<()> {
        while let Ok(fed) = self.fed.try_recv() {
            self.take_in(fed, late).await?;
        }
        Ok(())
    }

    /// Puts an inbound message into its tenant's lane, or among the late copies when the lane is
    /// past it.
    fn route(&mut self, original: Original, done: Done, delivery: Option<Delivery>, late: &mut Vec<Item>) {
        let key = LaneKey::of(&original.subject).unwrap_or(LaneKey::Bare);
        let lane = self.lanes.lanes.entry(key).or_insert_with(Lane::new);
        if let Some(item) = lane.hold(Item { original, done }, delivery) {
            late.push(item);
        }
    }

    /// Takes in a lane's fetch; a failed one means the lane's connection is gone.
    async fn take_in(&mut self, fetched: Fetched, late: &mut Vec<Item>) -> Result<()> {
        let Fetched {
            lane,
            generation,
            outcome,
        } = fetched;
        let messages = match outcome {
            Ok(messages) => messages,
            // Already replaced.
            Err(_)
                if self
                    .feeding
                    .get(&lane)
                    .is_none_or(|(_, current)| *current != generation) =>
            {
                return Ok(());
            }
            Err(why) => {
                tracing::warn!(lane = %lane, error = why, "a lane's inbound connection failed; reconnecting it");
                // The next round opens the lane again on a new connection (see `arm`).
                if let Some((feeder, _)) = self.feeding.remove(&lane) {
                    feeder.abort();
                }
                return Ok(());
            }
        };
        for mut message in messages {
            let Ok(info) = message.info() else {
                // No inbound sequence to place it by: left unacked, it comes back (or is read raw).
                tracing::warn!(subject = %message.subject, "an inbound delivery without JetStream metadata");
                continue;
            };
            let delivery = Some(Delivery {
                consumer_seq: info.consumer_sequence,
                delivered: info.delivered,
            });
            let original = original_of(&mut message);
            self.route(original, Done::Ack(message), delivery, late);
        }
        if let Some(lane) = self.lanes.lanes.get_mut(&lane) {
            lane.advance();
        }
        Ok(())
    }

    /// Whether a lane's tenant lives in this session's partition (a subject with no tenant, in p0).
    fn owns(&self, key: &LaneKey) -> bool {
        let partition = match key {
            LaneKey::Tenant(tenant) => self.partitions.of(tenant),
            LaneKey::Bare => Partition::ZERO,
        };
        partition == self.partition
    }

    /// Whether an ATL_INBOUND consumer is one of this partition's lanes: `<prefix>_<tenant>` is
    /// its tenant's; the others (no class, a token that is no tenant, an older release's single
    /// consumer) are p0's, as their lanes are.
    fn owns_consumer(&self, consumer: &str, prefix: &str) -> bool {
        match consumer
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('_'))
        {
            Some(tenant) => self.owns(&LaneKey::Tenant(tenant.to_owned())),
            None => self.partition == Partition::ZERO,
        }
    }

    /// Opens a lane for every tenant with messages in this partition's share of ATL_INBOUND, and closes lanes that have had
    /// nothing for a while (their consumers stay, and lapse on the server after an hour unused).
    async fn discover(&mut self) -> Result<()> {
        let mut subjects = self
            .stream
            .info_with_subjects(INBOUND_SUBJECTS)
            .await
            .map_err(|e| Error::stream(INBOUND, "listing its subjects", e))?;
        while let Some(subject) = subjects.next().await {
            let (subject, _) = subject.map_err(|e| Error::stream(INBOUND, "listing its subjects", e))?;
            if let Some(key) = LaneKey::of(&subject)
                && self.owns(&key)
            {
                self.lanes.lanes.entry(key).or_insert_with(Lane::new);
            }
        }
        // Feeders of closed lanes, aborted: let the set forget them.
        while self.feeders.try_join_next().is_some() {}
        let feeding = &mut self.feeding;
        self.lanes.lanes.retain(|key, lane| {
            let idle = lane.held() == 0 && !lane.needs_fill() && lane.last_delivery.elapsed() >= LANE_IDLE;
            if idle && let Some((feeder, _)) = feeding.remove(key) {
                feeder.abort();
            }
            !idle
        });
        self.discovered = Some(Instant::now());
        Ok(())
    }

    /// Starts a feeder for every lane that has none (a new lane, or a lane whose connection failed),
    /// on a new connection of the lane's own and its consumer opened afresh there; a lane that has
    /// not followed every delivery the consumer made is read raw for them (see [`Lane::opened`]).
    /// Deliveries already in hand stay good: acks go out on the session's connection.
    async fn arm(&mut self, settings: &IngestSettings) -> Result<()> {
        let wanted: Vec<LaneKey> = self
            .lanes
            .lanes
            .keys()
            .filter(|key| !self.feeding.contains_key(*key))
            .cloned()
            .collect();
        for key in wanted {
            let link = LaneLink::open(&self.connector, &key).await?;
            // The lanes' positions are ATL_INBOUND sequences: a stream made again meanwhile starts
            // over from 1, and only a new session (new lanes) may read it.
            if link.stream.cached_info().created != self.stream.cached_info().created {
                return Err(Error::stream(
                    INBOUND,
                    "opening a lane",
                    "the stream was made again while ingest read it; starting over",
                ));
            }
            let consumer = open_consumer(&link.stream, &key, settings).await?;
            let info = consumer.cached_info();
            if let Some(lane) = self.lanes.lanes.get_mut(&key) {
                lane.opened(
                    info.created.unix_timestamp_nanos(),
                    info.delivered.consumer_sequence,
                );
            }
            self.generation += 1;
            let feeder = self.feeders.spawn(feed_lane(
                key.clone(),
                consumer,
                link.lost,
                settings.batch_size,
                settings.fetch_wait,
                self.generation,
                self.feed.clone(),
            ));
            self.feeding.insert(key, (feeder, self.generation));
        }
        Ok(())
    }

    /// Reads raw every lane whose messages in hand wait for ones whose deliveries did not come (at
    /// most `max` reads a round over all lanes).
    ///
    /// A delivery is missing when the client could not parse it (the connection was replaced), when
    /// it is still out from an earlier session (until its ack wait passes), or when it went out on
    /// a connection that dropped; JetStream would redeliver it only after its ack wait, holding up
    /// its tenant behind it. Read raw (`STREAM.MSG.GET`, base64 headers no parser chokes on) it is
    /// handled at once: appended, or quarantined as `poison_message` when its header block does not
    /// parse, and then deleted from ATL_INBOUND.
    async fn fill(&mut self, max: usize) -> Result<()> {
        // At most a batch's worth of reads a round over all lanes (one request each): a round stays
        // well inside the stall limit however many lanes have deliveries out after a crash.
        let mut budget = max;
        for (key, lane) in &mut self.lanes.lanes {
            let max = budget;
            let mut reads = 0;
            let filter = key.filter();
            while let Some(from) = lane.next_raw_read(reads, max) {
                lane.raw_read(poison::raw_next(&self.js, &filter, from).await?);
                reads += 1;
            }
            if reads > 0 {
                tracing::debug!(lane = %key, reads, "read a lane raw for deliveries that did not come");
            }
            budget -= reads;
        }
        Ok(())
    }

    /// Keeps deliveries in hand from being redelivered while they wait.
    async fn keep_from_redelivery(&mut self, ack_wait: Duration) {
        for lane in self.lanes.lanes.values_mut() {
            if lane.held() == 0 || lane.progressed.elapsed() < ack_wait / 3 {
                continue;
            }
            let client = self.js.client();
            for message in lane.deliveries() {
                let _ = ack_on(&client, message, AckKind::Progress).await;
            }
            lane.progressed = Instant::now();
        }
    }
}

/// Opens (or makes) a lane's consumer on `stream`.
async fn open_consumer(
    stream: &jetstream::stream::Stream,
    key: &LaneKey,
    settings: &IngestSettings,
) -> Result<jetstream::consumer::PullConsumer> {
    let name = key.consumer_name(&settings.consumer);
    stream
        .get_or_create_consumer(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: key.filter(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: settings.ack_wait,
                max_deliver: settings.max_deliver,
                // Bounded in flight: the batches in the pipeline and the lane's hold.
                max_ack_pending: i64::try_from(settings.batch_size * 4).unwrap_or(4096),
                inactive_threshold: CONSUMER_INACTIVE,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| Error::stream(INBOUND, format!("opening consumer {name}"), e))
}

impl Back {
    async fn run(
        mut self,
        mut from_front: tokio::sync::mpsc::Receiver<Classified>,
        shared: Shared<'_>,
    ) -> Result<()> {
        self.record_partition_rule(shared).await?;
        let mut renewed = Instant::now();
        loop {
            shared.beats.busy(&shared.beats.back);
            if renewed.elapsed() >= self.lease.renew_every() {
                self.lease.renew().await?;
                renewed = Instant::now();
            }
            self.checkpointer.tick().await?;
            Beats::idle(&shared.beats.back);
            let batch = match tokio::time::timeout(TICK, from_front.recv()).await {
                Ok(Some(batch)) => batch,
                // The front has stopped (shutdown): everything it classified is appended.
                Ok(None) => break,
                Err(_) => {
                    let index = Arc::clone(shared.index);
                    tokio::task::spawn_blocking(move || lock(&index).flush_if_due())
                        .await
                        .map_err(Error::task("identity index commit"))??;
                    continue;
                }
            };
            shared.beats.busy(&shared.beats.back);
            let appended = !batch.items.is_empty();
            self.process(batch, shared).await?;
            Beats::idle(&shared.beats.back);
            if appended {
                shared.health.ok(
                    &shared.settings.component(),
                    format!("appended through seq {}", self.appender.last_seq()),
                );
            }
        }
        // Sign what was appended before letting the next writer in.
        self.checkpointer.checkpoint().await?;
        let _ = self.lease.release().await;
        Ok(())
    }

    async fn process(&mut self, batch: Classified, shared: Shared<'_>) -> Result<()> {
        let Classified {
            items,
            verdicts,
            late,
        } = batch;
        let (index, metrics) = (shared.index, shared.metrics);
        let classified: Vec<IdentityKey> = verdicts
            .iter()
            .filter_map(|verdict| match verdict {
                Verdict::Append(prepared) => Some(prepared.key),
                _ => None,
            })
            .collect();

        // Rejections first: their receipts take their place in the batch's order.
        let mut pending = Vec::new();
        let mut identities = Vec::new();
        let mut receipts = Vec::new();
        let mut duplicates = 0u64;
        let mut uploads = Vec::new();
        for (item, verdict) in items.iter().zip(verdicts) {
            let original = &item.original;
            let verdict = match verdict {
                Verdict::Append(prepared) => {
                    let (key, digest) = (prepared.key, prepared.digest);
                    match pipeline::offload(&self.js, &self.stages, *prepared).await? {
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
                    let rejection = pipeline::reject::scrubbed_rejection(rejection, &self.stages.scrubber);
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
            self.append_indexed(&pending, identities, shared).await?;
        }
        // Recorded (or never appended): the batches behind this one find them in the index now.
        shared.in_flight.forget(classified);
        metrics.duplicates.inc_by(duplicates);
        // The uploads are copied and the ledger holds their refs; a crash before this line only
        // leaves them for the next delivery, which copies them again idempotently.
        UploadCollector::delete_uploads(&self.js, &uploads).await?;
        self.finish(items.into_iter().chain(late)).await
    }

    /// Appends `pending`, adds them to the tree and records their identities in the index.
    async fn append_indexed(
        &mut self,
        pending: &[PendingEntry],
        identities: Vec<(IdentityKey, [u8; 32])>,
        shared: Shared<'_>,
    ) -> Result<()> {
        let metrics = shared.metrics;
        let started = Instant::now();
        let seqs = self.appender.append(pending).await?;
        self.checkpointer.appended(&seqs, pending).await?;
        metrics.append_latency.observe(started.elapsed().as_secs_f64());
        let partition = shared.settings.partition;
        metrics.appended(partition).inc_by(pending.len() as u64);
        let last = self.appender.last_seq();
        metrics
            .last_seq(partition)
            .set(i64::try_from(last).unwrap_or(i64::MAX));
        let rows: Vec<_> = identities
            .into_iter()
            .zip(seqs)
            .map(|((key, digest), seq)| (key, digest, seq))
            .collect();
        let index = Arc::clone(shared.index);
        tokio::task::spawn_blocking(move || lock(&index).record(&rows, last))
            .await
            .map_err(Error::task("identity index record"))?
    }

    /// The writer of p0 of a partitioned ledger: appends the partition rule unless the identity
    /// index holds it already ([`crate::partition_rule`]).
    async fn record_partition_rule(&mut self, shared: Shared<'_>) -> Result<()> {
        let settings = shared.settings;
        if settings.partition != Partition::ZERO || settings.partitions.count() == 1 {
            return Ok(());
        }
        let at = Utc::now();
        let event = crate::partition_rule::record_event(settings.partitions, &settings.checkpoint.origin, at);
        let (entry, key, digest) = pipeline::own_entry(event, at)?;
        let index = Arc::clone(shared.index);
        let known = tokio::task::spawn_blocking(move || lock(&index).lookup_many(&[key]))
            .await
            .map_err(Error::task("identity index lookup"))??;
        if !known.is_empty() {
            return Ok(());
        }
        self.append_indexed(&[entry], vec![(key, digest)], shared).await?;
        tracing::info!(
            partitions = settings.partitions.count(),
            seq = self.appender.last_seq(),
            "recorded the partition rule in the ledger"
        );
        Ok(())
    }

    /// Acks (or deletes) inbound messages the ledger now holds.
    ///
    /// Acks go out on the session's connection ([`ack_on`]).
    async fn finish(&self, items: impl Iterator<Item = Item>) -> Result<()> {
        let client = self.js.client();
        let mut deletes = Vec::new();
        for item in items {
            match item.done {
                // A lost ack only means a redelivery, which duplicate detection absorbs.
                Done::Ack(message) => {
                    if let Err(error) = ack_on(&client, &message, AckKind::Ack).await {
                        tracing::warn!(%error, "inbound ack failed; the message will be redelivered");
                    }
                }
                Done::Exhausted(advisory) => {
                    poison::delete(&self.js, item.original.inbound_seq).await?;
                    if let Err(error) = advisory.ack().await {
                        tracing::warn!(%error, "advisory ack failed; it will be handled again");
                    }
                }
                Done::Raw => deletes.push(poison::delete(&self.js, item.original.inbound_seq)),
            }
        }
        for deleted in futures::future::join_all(deletes).await {
            deleted?;
        }
        if let Err(error) = client.flush().await {
            tracing::warn!(%error, "inbound acks may not have gone out; the messages will be redelivered");
        }
        Ok(())
    }
}

/// Acks `message` (`kind`) on `client`, the session's connection: the inbound connection a
/// delivery came over may have been replaced since (a header block broke it), and an ack lost with
/// it would leave the message to its ack wait, holding its tenant's next ones.
async fn ack_on(
    client: &async_nats::Client,
    message: &jetstream::Message,
    kind: AckKind,
) -> std::result::Result<(), async_nats::PublishError> {
    match message.reply.clone() {
        Some(reply) => client.publish(reply, kind.into()).await,
        None => Ok(()),
    }
}

fn lock(index: &Mutex<IdentityIndex>) -> std::sync::MutexGuard<'_, IdentityIndex> {
    index.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The inbound message as the pipeline reads it; its headers are moved out (the ack needs only the
/// reply subject).
fn original_of(message: &mut jetstream::Message) -> Original {
    let (inbound_seq, published) = message.info().ok().map_or((0, None), |info| {
        let published = i64::try_from(info.published.unix_timestamp_nanos()).ok();
        (info.stream_sequence, published)
    });
    Original {
        subject: message.subject.to_string(),
        headers: message.message.headers.take(),
        raw_headers: None,
        payload: message.payload.clone(),
        inbound_seq,
        published: published.map_or_else(Utc::now, DateTime::<Utc>::from_timestamp_nanos),
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
        let receipt_keys: Vec<IdentityKey> = identities
            .iter()
            .zip(&is_receipt)
            .filter(|(_, receipt)| **receipt)
            .map(|((key, _), _)| *key)
            .collect();
        let known = lock(&index).lookup_many(&receipt_keys)?;
        let mut kept = (
            Vec::with_capacity(pending.len()),
            Vec::with_capacity(identities.len()),
        );
        for ((entry, (key, digest)), receipt) in pending.into_iter().zip(identities).zip(is_receipt) {
            if !receipt || !known.contains_key(&key) {
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
async fn catch_up_index(
    js: &jetstream::Context,
    stream: &str,
    index: &Arc<Mutex<IdentityIndex>>,
    tail: u64,
) -> Result<()> {
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
        let entries = read_range(js, stream, position + 1, to).await?;
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
