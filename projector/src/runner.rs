//! The services: `project` (follow the ledger into the current generation) and `rebuild` (a new
//! generation from seq 1, then switch).
//!
//! ```text
//!  async (tokio)                                         dedicated thread (rusqlite)
//!  ATL_LEDGER ─▶ OrderedReader from position+1            ┌──────────────────────────────┐
//!     ─▶ next_batch(batch_size) ─▶ Vec<RawEntry>           │ bounded channel (4 batches)   │
//!     ─▶ blocking thread: DecodedBatch::decode ──────────▶ │ Store::apply_decoded_batch:   │
//!                                                          │ rows and position in one      │
//!  select: shutdown | generation switched | next chunk     │ transaction                   │
//!              ▲                                           └──────────────┬───────────────┘
//!              └── applied batches, freed beside the next decode ◀────────┘
//! ```
//!
//! Decoding (leaf hash, parse, classification) needs no database, so the next batch is decoded
//! while the writer applies the one before, and the writer hands applied batches back to be freed
//! on the decoding thread: the writer — the stage every entry waits for — does only its own work.
//!
//! The position in SQLite is authoritative: every start (and every restart after a consumer error)
//! reads it and creates a fresh ordered consumer from the entry after it. No durable consumer state
//! exists on the server, so nothing there can disagree with the database.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::AtomicI64;
use std::time::{Duration, Instant};
use toolledger_core::telemetry::ErrorChain;

use async_nats::jetstream;
use futures::FutureExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use toolledger_core::telemetry::Telemetry;
use toolledger_ledger::{OrderedReader, ReadSpec};
use toolledger_schemas::state::Config as StateConfig;
use toolledger_wire::partition::Partition;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::generation::{Generation, Generations};
use crate::heartbeat::{ProjectorState, Pulse};
use crate::store::{DecodedBatch, RawEntry, Store};

/// Batches in flight between the NATS reader and the SQLite writer. Four lets the reader fetch the
/// next batches while one commits (the commit's fsync is the slow part) without holding more than
/// a few thousand entries in memory; when SQLite falls behind, the reader waits on the channel and
/// the ordered consumer stops pulling.
pub const CHANNEL_CAPACITY: usize = 4;

/// How the projector runs.
#[derive(Clone)]
pub struct Options {
    /// The data directory; projections live in `<data_dir>/projections` (a partition's in
    /// [`Generations::of`]).
    pub data_dir: PathBuf,
    /// The ledger partition projected: its stream, its projections directory, its position.
    pub partition: Partition,
    /// Most entries per SQLite transaction.
    pub batch_size: usize,
    /// The state machine's knobs (out-of-order skew).
    pub state: StateConfig,
    /// How often a progress line is logged while entries are applied.
    pub progress_every: Duration,
    /// Where health goes, if anywhere. Set it with [`Options::with_telemetry`], which registers
    /// [`Options::metrics`] in it too (setting this field alone leaves the gauges unexported).
    pub telemetry: Option<Telemetry>,
    /// The position and lag gauges, one series per partition ([`Options::with_telemetry`]
    /// registers them; by default they are kept but exported nowhere).
    pub metrics: Metrics,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("data_dir", &self.data_dir)
            .field("partition", &self.partition)
            .field("batch_size", &self.batch_size)
            .field("state", &self.state)
            .field("progress_every", &self.progress_every)
            .field("telemetry", &self.telemetry.is_some())
            .finish()
    }
}

impl Options {
    /// Defaults for `data_dir`: partition p0, batches of 500, a 5 s skew, progress every 5 s, no
    /// metrics.
    pub fn new(data_dir: PathBuf) -> Options {
        Options {
            data_dir,
            partition: Partition::ZERO,
            batch_size: 500,
            state: StateConfig::default(),
            progress_every: Duration::from_secs(5),
            telemetry: None,
            metrics: Metrics::default(),
        }
    }

    /// These options reporting to `telemetry`: health on its board, gauges in its registry (once,
    /// however many partitions the options are then cloned for).
    #[must_use]
    pub fn with_telemetry(self, telemetry: Telemetry) -> Options {
        Options {
            metrics: Metrics::registered(&telemetry),
            telemetry: Some(telemetry),
            ..self
        }
    }

    fn generations(&self) -> Generations {
        Generations::of(&self.data_dir, self.partition)
    }
}

/// The `partition` label of the projector's gauges (`p0`, `p1`, …).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabel {
    partition: String,
}

/// The projector's gauges: one series per partition of each.
#[derive(Clone, Default)]
pub struct Metrics {
    position: Family<PartitionLabel, Gauge<i64, AtomicI64>>,
    lag: Family<PartitionLabel, Gauge<i64, AtomicI64>>,
}

impl Metrics {
    /// The gauges, registered in `telemetry`'s registry.
    pub fn registered(telemetry: &Telemetry) -> Metrics {
        let metrics = Metrics::default();
        telemetry.register(|registry| {
            registry.register(
                "projector_position",
                "Ledger sequence of the last entry in the partition's current projection",
                metrics.position.clone(),
            );
            registry.register(
                "projector_lag",
                "Ledger entries of the partition not yet applied to its projection",
                metrics.lag.clone(),
            );
        });
        metrics
    }
}

/// How [`run`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// The generation written last.
    pub generation: Generation,
    /// Its position when the run stopped.
    pub position: u64,
}

/// What [`rebuild`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildSummary {
    /// The new generation.
    pub generation: Generation,
    /// Its position: the ledger's last sequence when the rebuild started.
    pub position: u64,
    /// Whether `current` now names it (false when shutdown came first; the directory is removed).
    pub switched: bool,
}

/// One partition's position and lag, shared with the writer thread.
#[derive(Clone)]
struct Meter {
    position: Gauge<i64, AtomicI64>,
    lag: Gauge<i64, AtomicI64>,
}

impl Meter {
    fn new(options: &Options) -> Meter {
        let label = PartitionLabel {
            partition: options.partition.to_string(),
        };
        Meter {
            position: options.metrics.position.get_or_create(&label).clone(),
            lag: options.metrics.lag.get_or_create(&label).clone(),
        }
    }
}

/// A failed read of `partition`'s ledger stream as the projector reports it (its error keeps text
/// only, so the causes are written out).
fn read_error(partition: Partition) -> impl Fn(toolledger_ledger::Error) -> Error {
    move |error| Error::Ledger {
        stream: partition.stream(),
        reason: toolledger_ledger::with_causes(&error),
    }
}

/// Why a pump ended.
enum PumpEnd {
    /// Shutdown was asked for.
    Shutdown,
    /// Another generation became current.
    Switched,
    /// The target sequence was applied.
    Reached,
    /// The consumer failed; start again from the stored position.
    Restart,
}

/// Reads the ledger from `store`'s position + 1 and applies it until `until` (when given), a
/// shutdown, a generation switch (when `watch` is given) or a consumer error. Returns the store.
async fn pump<S: Future<Output = ()>>(
    js: &jetstream::Context,
    store: Store,
    until: Option<u64>,
    options: &Options,
    meter: &Meter,
    mut shutdown: std::pin::Pin<&mut S>,
    watch: Option<(&Generations, u64)>,
) -> Result<(PumpEnd, Store)> {
    let from = store.position()? + 1;
    if until.is_some_and(|until| from > until) {
        return Ok((PumpEnd::Reached, store));
    }
    let spec = match until {
        Some(until) => ReadSpec::range(from, until),
        None => ReadSpec::follow(from),
    };
    let stream = options.partition.stream();
    let mut reader = OrderedReader::open(js, &stream, spec)
        .await
        .map_err(read_error(options.partition))?;
    let batch_size = options.batch_size.max(1);

    let (tx, rx) = mpsc::channel::<DecodedBatch>(CHANNEL_CAPACITY);
    // Unbounded, but holds at most the batches in flight: the channel's and the writer's.
    let (give_back, applied) = std::sync::mpsc::channel::<DecodedBatch>();
    let writer = spawn_writer(store, rx, give_back, meter.clone(), options.progress_every);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let end = loop {
        let read = tokio::select! {
            biased;
            () = shutdown.as_mut() => break PumpEnd::Shutdown,
            _ = tick.tick() => {
                if let Some((generations, ours)) = watch
                    && generations.current()?.is_some_and(|g| g.number != ours)
                {
                    break PumpEnd::Switched;
                }
                continue;
            }
            read = reader.next_batch(batch_size) => read,
        };
        let batch = match read {
            Ok(batch) => batch,
            // A gap is fatal, as the store would find it: the projection never skips an entry.
            Err(toolledger_ledger::Error::SequenceGap { expected, found, .. }) => {
                drop(tx);
                let _ = tokio::task::spawn_blocking(move || writer.join()).await;
                return Err(Error::LedgerGap {
                    position: expected - 1,
                    next: found,
                });
            }
            Err(error) => {
                tracing::warn!(error = %toolledger_ledger::with_causes(&error), "ledger read failed; restarting from the stored position");
                break PumpEnd::Restart;
            }
        };
        let Some(last) = batch.last() else {
            if until.is_some() {
                break PumpEnd::Reached;
            }
            tracing::warn!("ledger consumer ended; restarting from the stored position");
            break PumpEnd::Restart;
        };
        meter.lag.set(i64::try_from(last.pending).unwrap_or(i64::MAX));
        let reached = until == Some(last.seq);
        let entries = batch
            .into_iter()
            .map(|message| RawEntry {
                seq: message.seq,
                bytes: message.payload.to_vec(),
            })
            .collect();
        let spent: Vec<DecodedBatch> = applied.try_iter().collect();
        let decoded = tokio::task::spawn_blocking(move || {
            drop(spent);
            DecodedBatch::decode(entries)
        })
        .await;
        let entries = match decoded {
            Ok(entries) => entries,
            Err(e) => {
                drop(tx);
                let _ = tokio::task::spawn_blocking(move || writer.join()).await;
                return Err(Error::WriterStopped {
                    reason: format!("decoding a batch: {e}"),
                });
            }
        };
        tokio::select! {
            biased;
            () = shutdown.as_mut() => break PumpEnd::Shutdown,
            sent = tx.send(entries) => if sent.is_err() {
                // The writer stopped: its result says why.
                break PumpEnd::Restart;
            },
        }
        if reached {
            break PumpEnd::Reached;
        }
    };
    drop(tx);
    let store = tokio::task::spawn_blocking(move || writer.join())
        .await
        .map_err(|e| Error::WriterStopped {
            reason: e.to_string(),
        })?
        .map_err(|_| Error::WriterStopped {
            reason: "the writer thread panicked".to_owned(),
        })??;
    Ok((end, store))
}

/// The SQLite writer: applies batches as they come, one transaction each, until the channel
/// closes; logs progress with its rate.
fn spawn_writer(
    mut store: Store,
    mut rx: mpsc::Receiver<DecodedBatch>,
    give_back: std::sync::mpsc::Sender<DecodedBatch>,
    meter: Meter,
    progress_every: Duration,
) -> std::thread::JoinHandle<Result<Store>> {
    // The writer's lines carry the partition's span, as the reader's do.
    let span = tracing::Span::current();
    std::thread::spawn(move || {
        let _span = span.enter();
        let started = Instant::now();
        let mut last_log = started;
        let mut applied_since_log = 0u64;
        let mut applied = 0u64;
        while let Some(batch) = rx.blocking_recv() {
            let before = store.position()?;
            let position = store.apply_decoded_batch(&batch)?;
            // Freed where it was decoded, not here (the reader may have stopped: then here).
            let _ = give_back.send(batch);
            let done = position - before;
            applied += done;
            applied_since_log += done;
            meter.position.set(i64::try_from(position).unwrap_or(i64::MAX));
            let since = last_log.elapsed();
            if since >= progress_every {
                let rate = applied_since_log as f64 / since.as_secs_f64();
                tracing::info!(
                    position,
                    applied,
                    lag = meter.lag.get(),
                    rate = %format!("{rate:.0}/s"),
                    "projecting"
                );
                last_log = Instant::now();
                applied_since_log = 0;
            }
        }
        if applied > 0 {
            let secs = started.elapsed().as_secs_f64();
            tracing::info!(
                position = store.position()?,
                applied,
                rate = %format!("{:.0}/s", applied as f64 / secs.max(1e-9)),
                "projection writer stopped"
            );
        }
        Ok(store)
    })
}

/// How often a projector that cannot use its projection tries it again (a rebuild may have switched
/// `current`, or an operator restored the file).
const REPAIR_POLL: Duration = Duration::from_secs(2);
/// How often the unusable projection is logged again while the projector waits for the repair.
const REPAIR_REMINDER: Duration = Duration::from_secs(60);

/// Runs `project` for one partition (`options.partition`): follows its ledger stream into its
/// current generation (creating `gen-1` on first use) until `shutdown` completes. When `rebuild`
/// switches generations, it reopens the new one and continues from that one's position.
///
/// A projection it cannot use — a damaged file, another schema, a `current` that names nothing
/// usable — does not end the run (a service manager would only restart it into the same failure):
/// the projector says what is wrong and that `toolledger rebuild` repairs it, on the health board,
/// in its heartbeat and in its log, and tries again every few seconds, so it resumes by itself once
/// a rebuild switched `current`.
pub async fn run(
    client: async_nats::Client,
    options: &Options,
    shutdown: impl Future<Output = ()>,
) -> Result<RunSummary> {
    let generations = options.generations();
    let pulse = Pulse::start(
        &generations,
        options.telemetry.as_ref().map(|t| t.health().clone()),
        "starting",
    );
    let result = follow(client, options, &generations, &pulse, shutdown)
        .instrument(tracing::info_span!("projector", partition = %options.partition))
        .await;
    match &result {
        Ok(summary) => pulse.set(
            ProjectorState::Stopped,
            &format!(
                "stopped at seq {} in {}",
                summary.position,
                summary.generation.name()
            ),
        ),
        Err(error) => pulse.set(
            ProjectorState::Stopped,
            &format!("ended with an error: {}", ErrorChain(error)),
        ),
    }
    result
}

async fn follow(
    client: async_nats::Client,
    options: &Options,
    generations: &Generations,
    pulse: &Pulse,
    shutdown: impl Future<Output = ()>,
) -> Result<RunSummary> {
    let js = jetstream::new(client);
    let meter = Meter::new(options);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut unusable = Unusable::new(options.partition);
    loop {
        let generation = match generations.current_or_init() {
            Ok(generation) => generation,
            Err(error) if error.is_unusable_projection() => {
                if unusable.wait(&error, None, pulse, shutdown.as_mut()).await {
                    return Err(error);
                }
                continue;
            }
            Err(error) => return Err(error),
        };
        let database = generation.database();
        let state = options.state;
        let opened = tokio::task::spawn_blocking(move || {
            let store = Store::open(&database, state)?;
            let start = store.position()?;
            Ok::<_, Error>((store, start))
        })
        .await
        .map_err(|e| Error::WriterStopped {
            reason: e.to_string(),
        })?;
        let (store, start) = match opened {
            Ok(opened) => opened,
            Err(error) if error.is_unusable_projection() => {
                if unusable
                    .wait(&error, Some(&generation), pulse, shutdown.as_mut())
                    .await
                {
                    return Err(error);
                }
                continue;
            }
            Err(error) => return Err(error),
        };
        unusable.said = None;
        meter.position.set(i64::try_from(start).unwrap_or(i64::MAX));
        pulse.set(
            ProjectorState::Running,
            &format!("{} from seq {}", generation.name(), start + 1),
        );
        tracing::info!(generation = %generation.name(), position = start, "projecting the ledger");
        let pumped = pump(
            &js,
            store,
            None,
            options,
            &meter,
            shutdown.as_mut(),
            Some((generations, generation.number)),
        )
        .await;
        let (end, store) = match pumped {
            Ok(pumped) => pumped,
            // The ledger is unreachable or not created yet: a service waits for it. SQLite errors
            // and gaps stay fatal.
            Err(error @ Error::Ledger { .. }) => {
                tracing::warn!(error = %ErrorChain(&error), "cannot read the ledger; retrying in 1s");
                pulse.set(ProjectorState::Failing, &error.to_string());
                tokio::select! {
                    () = shutdown.as_mut() => return Ok(RunSummary { generation, position: start }),
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
            Err(error) if error.is_unusable_projection() => {
                if unusable
                    .wait(&error, Some(&generation), pulse, shutdown.as_mut())
                    .await
                {
                    return Err(error);
                }
                continue;
            }
            Err(error) => return Err(error),
        };
        let position = store.position()?;
        match end {
            PumpEnd::Shutdown | PumpEnd::Reached => return Ok(RunSummary { generation, position }),
            PumpEnd::Switched => {
                tracing::info!(from = %generation.name(), "current generation switched; reopening");
            }
            PumpEnd::Restart => {
                tokio::select! {
                    () = shutdown.as_mut() => return Ok(RunSummary { generation, position }),
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Runs [`run`] for each of `partitions` in this process — one projector for several, each
/// partition into its own projections from its own position — until `shutdown`, or until one of
/// them ends with an error (which ends the others: a service manager restarts the process).
pub async fn run_partitions(
    client: async_nats::Client,
    options: &Options,
    partitions: &[Partition],
    shutdown: impl Future<Output = ()>,
) -> Result<Vec<RunSummary>> {
    let shutdown = shutdown.shared();
    futures::future::try_join_all(partitions.iter().map(|&partition| {
        let options = Options {
            partition,
            ..options.clone()
        };
        let (client, shutdown) = (client.clone(), shutdown.clone());
        async move { run(client, &options, shutdown).await }
    }))
    .await
}

/// The projector's wait while its projection cannot be used: what it said last and when.
struct Unusable {
    said: Option<(String, Instant)>,
    /// The command that repairs it.
    rebuild: String,
}

impl Unusable {
    fn new(partition: Partition) -> Unusable {
        let rebuild = match partition.index() {
            0 => "toolledger rebuild".to_owned(),
            k => format!("toolledger rebuild --partition {k}"),
        };
        Unusable { said: None, rebuild }
    }

    /// Reports `error` (on the board and in the heartbeat each time; in the log the first time, when
    /// it changes, and every [`REPAIR_REMINDER`]) and waits [`REPAIR_POLL`]. True when shutdown came.
    async fn wait<S: Future<Output = ()>>(
        &mut self,
        error: &Error,
        generation: Option<&Generation>,
        pulse: &Pulse,
        shutdown: std::pin::Pin<&mut S>,
    ) -> bool {
        let which = generation.map_or_else(
            || "the projections' `current` pointer".to_owned(),
            |g| format!("projection {} ({})", g.name(), g.database().display()),
        );
        let detail = format!(
            "{which} cannot be used: {}; run `{}` to build a new generation from the \
             ledger (this projector switches to it by itself)",
            ErrorChain(error),
            self.rebuild
        );
        pulse.set(ProjectorState::Failing, &detail);
        let repeat = self
            .said
            .as_ref()
            .is_none_or(|(said, at)| *said != detail || at.elapsed() >= REPAIR_REMINDER);
        if repeat {
            tracing::error!("{detail}");
            self.said = Some((detail, Instant::now()));
        }
        tokio::select! {
            () = shutdown => true,
            () = tokio::time::sleep(REPAIR_POLL) => false,
        }
    }
}

/// Runs `rebuild`: a new generation from seq 1 up to the ledger's last sequence at the start, then
/// `current` switches to it, and the generations before the one it replaced are removed. A shutdown first leaves `current` alone and removes the new directory.
pub async fn rebuild(
    client: async_nats::Client,
    options: &Options,
    shutdown: impl Future<Output = ()>,
) -> Result<RebuildSummary> {
    rebuild_partition(client, options, shutdown)
        .instrument(tracing::info_span!("rebuild", partition = %options.partition))
        .await
}

async fn rebuild_partition(
    client: async_nats::Client,
    options: &Options,
    shutdown: impl Future<Output = ()>,
) -> Result<RebuildSummary> {
    let js = jetstream::new(client);
    let generations = options.generations();
    let meter = Meter::new(options);
    let target = toolledger_ledger::last_sequence(&js, &options.partition.stream())
        .await
        .map_err(read_error(options.partition))?;
    let generation = generations.create_next()?;
    tracing::info!(generation = %generation.name(), target, "rebuilding the projection");
    let database = generation.database();
    let state = options.state;
    let mut store = tokio::task::spawn_blocking(move || Store::open_for_rebuild(&database, state))
        .await
        .map_err(|e| Error::WriterStopped {
            reason: e.to_string(),
        })??;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (end, returned) =
            pump(&js, store, Some(target), options, &meter, shutdown.as_mut(), None).await?;
        store = returned;
        match end {
            PumpEnd::Reached => break,
            PumpEnd::Restart => tokio::time::sleep(Duration::from_secs(1)).await,
            PumpEnd::Shutdown | PumpEnd::Switched => {
                drop(store);
                let _ = std::fs::remove_dir_all(&generation.dir);
                return Ok(RebuildSummary {
                    generation,
                    position: 0,
                    switched: false,
                });
            }
        }
    }
    let position = store.position()?;
    tracing::info!(generation = %generation.name(), position, "ledger applied; writing the last invocations and building indexes");
    let started = Instant::now();
    let store = tokio::task::spawn_blocking(move || {
        let mut store = store;
        store.finish_rebuild().map(|()| store)
    })
    .await
    .map_err(|e| Error::WriterStopped {
        reason: e.to_string(),
    })??;
    tracing::info!(generation = %generation.name(), elapsed = ?started.elapsed(), "indexes built");
    drop(store);
    let replaced = generations.current()?;
    generations.switch_to(&generation)?;
    tracing::info!(generation = %generation.name(), position, "rebuild complete; current switched");
    // The generation replaced stays for readers that have not reopened; the ones before it go.
    // (A rebuild that started before another and finished after it replaced a newer generation:
    // nothing is removed then, its own directory among the lower numbers.)
    if let Some(replaced) = replaced.filter(|replaced| replaced.number < generation.number) {
        for old in generations.prune_below(&replaced)? {
            tracing::info!(generation = %old.name(), "removed an old generation");
        }
    }
    Ok(RebuildSummary {
        generation,
        position,
        switched: true,
    })
}
