//! The directory's writer (DESIGN §8, [`toolledger_wire::directory`]): in a ledger of more than one
//! partition, whichever ingest holds the `directory` lease records every partition's latest signed
//! checkpoint as one entry of ATL_DIRECTORY whenever any of them changed, and signs the directory's
//! own checkpoint at once, so one signed value commits to the whole ledger.
//!
//! ```text
//! every checkpoint interval, holding the `directory` lease:
//!   each partition: last message on its checkpoint subject ─▶ verified note (its origin, a trusted key)
//!   any checkpoint newer than the last entry names ─▶ append DirectoryEntry ─▶ tree ─▶ sign
//!                                                     (atl.checkpoints.directory, <origin>/directory)
//! shutdown: after every partition's writer has stopped (and signed its tail), one last entry, then
//!           the lease is released
//! beside it: the witnesses asked to cosign the directory's checkpoints ([`crate::witnessing`])
//! ```
//!
//! The directory is a log like a partition: an appender conditional on its last sequence, a tree
//! restored from its tiles and checked against its last signed checkpoint, a lease. A partition
//! checkpoint that does not verify stops the session (and is retried): the directory never vouches
//! for what it cannot check.

use std::time::{Duration, Instant};

use base64::Engine as _;
use chrono::{SecondsFormat, Utc};
use toolledger_core::telemetry::{ErrorChain, Health};
use toolledger_merkle::NoteSigner;
use toolledger_wire::directory::{self, CheckpointRef, DirectoryEntry};
use toolledger_wire::partition::Partition;
use toolledger_wire::streams::CHECKPOINTS;

use crate::append::{Appender, PendingEntry};
use crate::checkpoint::{self, CheckpointSettings, Checkpointer};
use crate::lease::{LEASE_BUCKET, Lease};
use crate::metrics::IngestMetrics;
use crate::session::{Connector, IngestSettings};
use crate::witnessing::Witnessing;
use crate::{Error, Result};

/// The health board's component for the directory's writer.
pub const COMPONENT: &str = "directory";

/// Writes the directory until `stop`, taking its lease when it can and starting over after any
/// failure. `settings` are p0's (the ledger's own origin and tiles).
pub async fn run(
    connector: Connector,
    settings: IngestSettings,
    metrics: IngestMetrics,
    health: Health,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut failures = 0u32;
    loop {
        match session(&connector, &settings, &metrics, &health, &mut stop).await {
            Ok(()) => return,
            Err(error) => {
                failures += 1;
                let chain = ErrorChain(&error).to_string();
                tracing::error!(error = %chain, failures, "directory session failed; starting over");
                health.failing(COMPONENT, chain);
                let pause = Duration::from_millis(200 * u64::from(failures.min(10)));
                tokio::select! {
                    () = tokio::time::sleep(pause) => {},
                    _ = stop.wait_for(|stop| *stop) => return,
                }
            }
        }
    }
}

/// One holding of the lease: until `stop` (a last entry first) or a failure.
async fn session(
    connector: &Connector,
    settings: &IngestSettings,
    metrics: &IngestMetrics,
    health: &Health,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let js = connector.connect().await?;
    let leases = js
        .get_key_value(LEASE_BUCKET)
        .await
        .map_err(|e| Error::stream(LEASE_BUCKET, "opening the bucket", e))?;
    let mut lease = loop {
        if let Some(lease) = Lease::try_acquire(
            &leases,
            directory::LEASE_KEY,
            &settings.holder,
            settings.lease_ttl,
        )
        .await?
        {
            break lease;
        }
        health.ok(COMPONENT, "another ingest writes the directory");
        tokio::select! {
            () = tokio::time::sleep(settings.lease_ttl / 3) => {},
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
        }
    };
    let mut log = Directory::open(&js, settings).await?;
    let witnessing = Witnessing::open(
        js.clone(),
        &checkpoint_settings(settings),
        log.checkpointer.tiles().clone(),
        &settings.witnessing,
        metrics.clone(),
    )
    .await?;
    health.ok(
        COMPONENT,
        format!(
            "writing {} after seq {}",
            directory::STREAM,
            log.appender.last_seq()
        ),
    );
    tracing::info!(holder = lease.holder(), "holding the directory lease");
    // The lease is renewed on its own clock (a third of its time), the directory recorded every
    // checkpoint interval: an interval longer than the lease must not let it lapse between records.
    let every = settings.checkpoint.interval.max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval(every.min(lease.renew_every()));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewed = Instant::now();
    let mut recorded_at: Option<Instant> = None;
    let writing = async {
        loop {
            tokio::select! {
                _ = ticks.tick() => {},
                _ = stop.wait_for(|stop| *stop) => {},
            }
            let stopping = *stop.borrow();
            if renewed.elapsed() >= lease.renew_every() {
                lease.renew().await?;
                renewed = Instant::now();
            }
            if stopping || recorded_at.is_none_or(|at| at.elapsed() >= every) {
                recorded_at = Some(Instant::now());
                if let Some(seq) = log.record(&js).await? {
                    health.ok(
                        COMPONENT,
                        format!("recorded every partition's checkpoint at seq {seq}"),
                    );
                }
            }
            if stopping {
                return Ok(());
            }
        }
    };
    // The witnesses are asked beside the writer, never in its way; they end with the session.
    let outcome: Result<()> = tokio::select! {
        outcome = writing => outcome,
        never = Witnessing::run_or_wait(witnessing) => match never {},
    };
    outcome?;
    let _ = lease.release().await;
    Ok(())
}

/// The directory's checkpoint settings: its own subject and origin, a checkpoint at every entry,
/// the ledger's interval and trusted keys. `settings` are p0's.
fn checkpoint_settings(settings: &IngestSettings) -> CheckpointSettings {
    CheckpointSettings {
        ledger_stream: directory::STREAM.to_owned(),
        checkpoint_stream: CHECKPOINTS.to_owned(),
        checkpoint_subject: directory::CHECKPOINT_SUBJECT.to_owned(),
        origin: directory::origin(&settings.checkpoint.origin),
        every: 1,
        interval: settings.checkpoint.interval,
        trusted: settings.checkpoint.trusted.clone(),
    }
}

/// The directory's log as its writer holds it.
struct Directory {
    appender: Appender,
    checkpointer: Checkpointer,
    /// Each partition's checkpoint sequence in the last entry.
    recorded: Option<Vec<u64>>,
    /// The signing key's verifier and the trusted older keys.
    verifiers: toolledger_merkle::Verifiers,
    /// Each partition's checkpoint settings (its subject and origin), p0 first.
    partitions: Vec<(Partition, CheckpointSettings)>,
}

impl Directory {
    /// Opens the appender and restores the tree (checked against the last signed checkpoint).
    async fn open(js: &async_nats::jetstream::Context, settings: &IngestSettings) -> Result<Self> {
        let appender = Appender::open(js.clone(), directory::STREAM).await?;
        let signer = NoteSigner::load(&settings.key_file)?;
        let mut verifiers = settings.checkpoint.trusted.clone();
        verifiers.add(signer.verifier());
        let tiles = checkpoint::open_tiles(&directory::tiles(&settings.tiles))?;
        let checkpointer = Checkpointer::open(
            js.clone(),
            checkpoint_settings(settings),
            signer,
            tiles,
            appender.last_seq(),
        )
        .await?;
        let recorded = match appender.last_seq() {
            0 => None,
            last => {
                let bytes = toolledger_ledger::message(js, directory::STREAM, last).await?;
                DirectoryEntry::parse(&bytes)
                    .ok()
                    .map(|entry| entry.partitions.iter().map(|r| r.checkpoint_seq).collect())
            }
        };
        let partitions = settings
            .partitions
            .all()
            .map(|partition| (partition, settings.for_partition(partition).checkpoint))
            .collect();
        Ok(Self {
            appender,
            checkpointer,
            recorded,
            verifiers,
            partitions,
        })
    }

    /// Appends and signs an entry when any partition's latest checkpoint is newer than the last
    /// entry's; its sequence, or `None` when nothing changed.
    async fn record(&mut self, js: &async_nats::jetstream::Context) -> Result<Option<u64>> {
        let mut refs = Vec::new();
        for (partition, partition_settings) in &self.partitions {
            let (checkpoint_seq, size, root) =
                match checkpoint::last_checkpoint(js, partition_settings, &self.verifiers).await? {
                    Some((seq, checkpoint)) => (seq, checkpoint.size, checkpoint.root),
                    None => (0, 0, toolledger_merkle::empty_root()),
                };
            refs.push(CheckpointRef {
                partition: partition.index(),
                origin: partition_settings.origin.clone(),
                checkpoint_seq,
                size,
                root: base64::engine::general_purpose::STANDARD.encode(root),
            });
        }
        let seqs: Vec<u64> = refs.iter().map(|r| r.checkpoint_seq).collect();
        if self.recorded.as_ref() == Some(&seqs) {
            return Ok(None);
        }
        let entry = DirectoryEntry {
            partitions: refs,
            recorded_at: Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        };
        let bytes = entry
            .to_bytes()
            .map_err(|source| Error::DirectoryEntry { source })?;
        let pending = [PendingEntry::new(directory::SUBJECT.to_owned(), bytes.into())];
        let appended = self.appender.append(&pending).await?;
        self.checkpointer.appended(&appended, &pending).await?;
        self.checkpointer.checkpoint().await?;
        self.recorded = Some(seqs);
        Ok(appended.last().copied())
    }
}
