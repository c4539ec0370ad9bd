//! The exporter service: ATL_LEDGER (and ATL_CHECKPOINTS) in order ─▶ Parquet files in the archive.
//!
//! ```text
//! start ─▶ newest events manifest [a, b]? ─▶ newest _tracker/<s>.json, s < a; replay s+1..a-1 (no rows)
//!                                         ─▶ redo [a, b]: same rows, same bytes, create-only puts
//!       ─▶ newest checkpoints manifest? ─▶ redo it
//!       ─▶ local archive: remove staging files (`<object>#<n>`) that kill -9 left beside objects
//! follow ATL_LEDGER from b+1 (ordered consumer) ─▶ batches ─spawn_blocking─▶ decode_ahead ─▶ Tracker::apply ─▶ segment
//! segment full (rows_per_file entries) or its oldest row older than max_delay, or caught up / stop:
//!   0 the range's `invocations` rows: a version of every invocation it changed (Tracker::take_rows)
//!   1 manifests of the four ledger tables for [first, last]       (the boundary is fixed here)
//!   2 encode every (table, tenant, event_date) file  (spawn_blocking; partitions on rayon's pool;
//!     fixed writer properties)
//!   3 create-only puts of the files (an equal existing object is a re-run; other bytes: Conflict)
//!   4 the tracker's invocations ─▶ _tracker/<last>.json (a restart cache, not data)
//!   5 checkpoints signed for sizes ≤ last, in their own ATL_CHECKPOINTS range: manifest, then file
//! ```
//!
//! A kill -9 anywhere leaves at most one range whose files are partly written; its manifest exists,
//! so the next start rewrites exactly the same objects and every sequence ends up in exactly one file.
//!
//! A partitioned ledger (`docs/scaling.md`) has one exporter per partition, all into the same
//! archive: partition K's manifests are `<table>/_manifest_p<K>/`, its tracker snapshots
//! `_tracker_p<K>/`, its checkpoints only those on its subject; its data files go to its tenants'
//! folders (`tenant=<t>/…`, no other partition's), so the tables read as one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use bytes::Bytes;
use rayon::prelude::*;
use toolledger_ledger::{OrderedReader, ReadSpec, last_sequence};
use toolledger_merkle::Checkpoint;
use toolledger_wire::partition::{Partition as LedgerPartition, Partitions};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};

use crate::manifest::{self, Manifest, ManifestFile, part_name};
use crate::rows::{DecisionRow, EventRow, InvocationRow, Partition, ResultRow, Tracker, UNDECODABLE_TENANT};
use crate::store::Archive;
use crate::tables::{self, CheckpointRow, Table};
use crate::{Error, Result};

/// Messages handed to one blocking apply step: large enough to amortize the hop to the blocking
/// pool, small enough that a batch of big entries stays a few MB.
const BATCH: usize = 512;
/// How long the follower waits for the next entry before checking the rotation delay.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// What the exporter reports while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Ledger entries applied so far (last sequence read).
    pub read_seq: u64,
    /// Ledger entries exported (the last range's end).
    pub exported_seq: u64,
    /// The ledger's last sequence when the exporter started.
    pub ledger_last: u64,
    /// Parquet bytes written by this run.
    pub bytes: u64,
}

/// A progress callback.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Entries per range unless configured otherwise.
pub const DEFAULT_ROWS_PER_FILE: u64 = 250_000;

/// How the exporter runs.
#[derive(Clone)]
pub struct Options {
    /// The archive.
    pub archive: Archive,
    /// Close a range after this many ledger entries.
    pub rows_per_file: u64,
    /// Close a range when its oldest entry has waited this long.
    pub max_delay: Duration,
    /// Rows per Parquet row group.
    pub row_group_rows: usize,
    /// Stop once the ledger's last sequence at start is exported, instead of following.
    pub until_caught_up: bool,
    /// The ledger stream.
    pub ledger_stream: String,
    /// The checkpoint stream.
    pub checkpoint_stream: String,
    /// The ledger partition exported, of how many: its stream is `ledger_stream`, its manifests
    /// and trackers are its own, and with more than one its checkpoints are only those on its
    /// subject.
    pub partition: LedgerPartition,
    /// How many partitions the ledger has.
    pub partitions: Partitions,
    /// Remove the staging files a killed put left behind before starting. Off when several
    /// exporters share the archive in one process (their caller removes them once, first: one
    /// exporter's clean-up must not take another's put in flight).
    pub clean_staging: bool,
    /// Called after every batch and range.
    pub progress: Option<ProgressFn>,
}

impl Options {
    /// Defaults for `archive`: 250 000 entries per range, 60 s delay, 50 000-row groups.
    pub fn new(archive: Archive) -> Self {
        Self {
            archive,
            rows_per_file: DEFAULT_ROWS_PER_FILE,
            max_delay: Duration::from_secs(60),
            row_group_rows: 50_000,
            until_caught_up: false,
            ledger_stream: LEDGER.to_owned(),
            checkpoint_stream: CHECKPOINTS.to_owned(),
            partition: LedgerPartition::ZERO,
            partitions: Partitions::default(),
            clean_staging: true,
            progress: None,
        }
    }

    /// These options for `partition` of `partitions`: its ledger stream, manifests and trackers.
    #[must_use]
    pub fn for_partition(self, partition: LedgerPartition, partitions: Partitions) -> Self {
        Self {
            ledger_stream: partition.stream(),
            partition,
            partitions,
            ..self
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// The last ledger sequence in the archive.
    pub position: u64,
    /// The last checkpoint-stream sequence in the archive.
    pub checkpoint_position: u64,
    /// Ranges written (or rewritten) by this run.
    pub ranges: u64,
    /// Files written by this run (existing equal ones included).
    pub files: u64,
    /// Ledger entries exported by this run.
    pub entries: u64,
    /// Parquet bytes written by this run.
    pub bytes: u64,
}

/// The rows of one open range.
#[derive(Default)]
struct Segment {
    first: u64,
    last: u64,
    opened: Option<Instant>,
    events: Vec<EventRow>,
    invocations: Vec<InvocationRow>,
    decisions: Vec<DecisionRow>,
    results: Vec<ResultRow>,
}

impl Segment {
    fn entries(&self) -> u64 {
        if self.first == 0 {
            0
        } else {
            self.last - self.first + 1
        }
    }
}

/// Applies a batch on a blocking thread (JSON parsing, hashing, the state machine).
async fn apply_batch(
    tracker: Tracker,
    mut segment: Segment,
    batch: Vec<(u64, Bytes)>,
    rows: bool,
) -> Result<(Tracker, Segment)> {
    tokio::task::spawn_blocking(move || {
        let mut tracker = tracker;
        // Parsing and classifying (the larger part of the work) runs on a second thread, ahead.
        let Ok(()) = toolledger_ledger::decode_ahead(
            &batch,
            |(_, bytes)| toolledger_ledger::decode_entry(bytes),
            |(seq, bytes), decoded| {
                let out = tracker.apply_decoded(*seq, bytes, decoded, rows);
                if rows {
                    if segment.first == 0 {
                        segment.first = *seq;
                        segment.opened = Some(Instant::now());
                    }
                    segment.last = *seq;
                    segment.events.extend(out.event);
                    segment.decisions.extend(out.decision);
                    segment.results.extend(out.result);
                }
                Ok::<_, std::convert::Infallible>(())
            },
        );
        (tracker, segment)
    })
    .await
    .map_err(|e| Error::Worker {
        reason: e.to_string(),
    })
}

/// Reads `from..=to` of the ledger into the tracker (and the segment when `rows`).
async fn read_range(
    js: &jetstream::Context,
    stream: &str,
    from: u64,
    to: u64,
    mut tracker: Tracker,
    rows: bool,
) -> Result<(Tracker, Segment)> {
    let mut segment = Segment::default();
    if from > to {
        return Ok((tracker, segment));
    }
    let mut reader = match OrderedReader::open(js, stream, ReadSpec::range(from, to)).await {
        Ok(reader) => reader,
        Err(toolledger_ledger::Error::BeyondTail { last, .. }) => {
            return Err(Error::ArchiveAheadOfLedger { covered: to, last });
        }
        Err(error) => return Err(error.into()),
    };
    // The reader fails on a gap or an early end, so every sequence of the range is applied.
    loop {
        let batch = reader.next_batch(BATCH).await?;
        if batch.is_empty() {
            return Ok((tracker, segment));
        }
        let batch = batch.into_iter().map(|m| (m.seq, m.payload)).collect();
        (tracker, segment) = apply_batch(tracker, segment, batch, rows).await?;
    }
}

/// An encoded file ready to put.
struct EncodedFile {
    path: String,
    bytes: Vec<u8>,
}

/// Groups rows by partition (sorted) and encodes one file per partition.
fn encode_table<R: Sync>(
    table: Table,
    rows: &[R],
    partition: impl Fn(&R) -> &Partition,
    to_batch: impl Fn(&[&R]) -> Result<arrow_array::RecordBatch> + Sync,
    first: u64,
    last: u64,
    row_group_rows: usize,
) -> Result<(Manifest, Vec<EncodedFile>)> {
    let mut groups: BTreeMap<&Partition, Vec<&R>> = BTreeMap::new();
    for row in rows {
        groups.entry(partition(row)).or_default().push(row);
    }
    // Partitions are encoded independently (the same bytes whichever thread does it), on rayon's
    // pool, one thread per core; the results keep the partitions' order.
    let encoded: Vec<(ManifestFile, EncodedFile)> = groups
        .into_iter()
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|(partition, rows)| {
            let batch = to_batch(&rows)?;
            let bytes = tables::encode(table, &batch, tables::writer_properties(row_group_rows))?;
            let relative = format!("{}/{}", partition.folder(), part_name(first, last));
            let file = EncodedFile {
                path: format!("{}/{relative}", table.name()),
                bytes,
            };
            Ok((
                ManifestFile {
                    path: relative,
                    rows: rows.len() as u64,
                },
                file,
            ))
        })
        .collect::<Result<_>>()?;
    let (entries, files) = encoded.into_iter().unzip();
    Ok((Manifest::new(table, LEDGER, first, last, entries), files))
}

/// Writes a closed range with the invocation versions `tracker` collected for it: manifests first,
/// then files. Returns (files, bytes).
async fn write_segment(options: &Options, tracker: &mut Tracker, mut segment: Segment) -> Result<(u64, u64)> {
    // The range's `invocations` rows: a version of each invocation it changed.
    segment.invocations = tracker.take_rows();
    if segment.first == 0 {
        return Ok((0, 0));
    }
    // Entries whose tenant cannot be read have no tenant's folder to keep them apart: a partition
    // after p0 files them under a folder of its own, so no two partitions' ranges meet in one.
    if options.partition != LedgerPartition::ZERO {
        let folder = format!("{UNDECODABLE_TENANT}_{}", options.partition);
        let relabel = |partition: &mut Partition| {
            if partition.tenant == UNDECODABLE_TENANT {
                partition.tenant.clone_from(&folder);
            }
        };
        segment.events.iter_mut().for_each(|r| relabel(&mut r.partition));
        segment
            .invocations
            .iter_mut()
            .for_each(|r| relabel(&mut r.partition));
        segment
            .decisions
            .iter_mut()
            .for_each(|r| relabel(&mut r.partition));
        segment.results.iter_mut().for_each(|r| relabel(&mut r.partition));
    }
    let row_group_rows = options.row_group_rows;
    let stream = options.ledger_stream.clone();
    let partition = options.partition;
    let encoded = tokio::task::spawn_blocking(move || -> Result<Vec<(Manifest, Vec<EncodedFile>)>> {
        let (first, last) = (segment.first, segment.last);
        let mut out = vec![
            encode_table(
                Table::Events,
                &segment.events,
                |r| &r.partition,
                tables::events_batch,
                first,
                last,
                row_group_rows,
            )?,
            encode_table(
                Table::Invocations,
                &segment.invocations,
                |r| &r.partition,
                tables::invocations_batch,
                first,
                last,
                row_group_rows,
            )?,
            encode_table(
                Table::PermissionDecisions,
                &segment.decisions,
                |r| &r.partition,
                tables::decisions_batch,
                first,
                last,
                row_group_rows,
            )?,
            encode_table(
                Table::Results,
                &segment.results,
                |r| &r.partition,
                tables::results_batch,
                first,
                last,
                row_group_rows,
            )?,
        ];
        for (manifest, _) in &mut out {
            manifest.stream = stream.clone();
            manifest.partition = (partition != LedgerPartition::ZERO).then(|| partition.index());
        }
        Ok(out)
    })
    .await
    .map_err(|e| Error::Worker {
        reason: e.to_string(),
    })??;
    for (manifest, _) in &encoded {
        options
            .archive
            .put_create(&manifest.path(), Bytes::from(manifest.to_bytes()?))
            .await?;
    }
    let (mut files, mut bytes) = (0u64, 0u64);
    for (_, encoded_files) in encoded {
        for file in encoded_files {
            bytes += file.bytes.len() as u64;
            files += 1;
            options
                .archive
                .put_create(&file.path, Bytes::from(file.bytes))
                .await?;
        }
    }
    Ok((files, bytes))
}

/// The folder of a partition's tracker snapshots: `_tracker`, `_tracker_p<K>`.
fn tracker_folder(partition: LedgerPartition) -> String {
    manifest::partition_folder("_tracker", partition)
}

/// The tracker snapshot after ledger seq `seq` of `partition`.
fn tracker_path(partition: LedgerPartition, seq: u64) -> String {
    format!("{}/{seq:020}.json", tracker_folder(partition))
}

/// Tracker snapshots kept: a restart redoes the newest range from the newest snapshot before it,
/// which is the newest snapshot, or the one before when the range's files were being written.
const TRACKERS_KEPT: usize = 2;

/// The seqs of the stored tracker snapshots, oldest first.
async fn stored_trackers(options: &Options) -> Result<Vec<u64>> {
    let mut stored: Vec<u64> = options
        .archive
        .list(&tracker_folder(options.partition))
        .await?
        .iter()
        .filter_map(|p| p.rsplit('/').next()?.strip_suffix(".json")?.parse().ok())
        .collect();
    stored.sort_unstable();
    Ok(stored)
}

/// Stores the tracker's state after `seq`, so a restart replays from there instead of from seq 1,
/// and removes all but the newest [`TRACKERS_KEPT`] snapshots.
async fn save_tracker(options: &Options, tracker: Tracker, seq: u64) -> Result<Tracker> {
    let (tracker, bytes) = tokio::task::spawn_blocking(move || {
        let bytes = tracker.snapshot();
        (tracker, bytes)
    })
    .await
    .map_err(|e| Error::Worker {
        reason: e.to_string(),
    })?;
    options
        .archive
        .put_cache(&tracker_path(options.partition, seq), Bytes::from(bytes))
        .await?;
    let stored = stored_trackers(options).await?;
    for old in &stored[..stored.len().saturating_sub(TRACKERS_KEPT)] {
        options
            .archive
            .delete_cache(&tracker_path(options.partition, *old))
            .await?;
    }
    Ok(tracker)
}

/// The newest stored tracker at or before `seq` (and its seq), else an empty one at 0.
async fn load_tracker(options: &Options, seq: u64) -> Result<(Tracker, u64)> {
    let mut stored = stored_trackers(options).await?;
    stored.retain(|s| *s <= seq);
    while let Some(at) = stored.pop() {
        if let Some(bytes) = options.archive.get(&tracker_path(options.partition, at)).await?
            && let Some(tracker) = Tracker::restore(&bytes)
        {
            return Ok((tracker, at));
        }
        tracing::warn!(at, "unreadable tracker snapshot; trying an older one");
    }
    Ok((Tracker::default(), 0))
}

/// The body of a signed note (the text before the blank line), parsed.
fn parse_note(note: &str) -> Option<Checkpoint> {
    let (body, _) = note.split_once("\n\n")?;
    Checkpoint::parse_body(&format!("{body}\n")).ok()
}

/// Exports the checkpoints after `position` whose size the archive covers (`size ≤ covered`), as
/// one range of the checkpoint stream. `only` redoes exactly that range (recovery).
async fn export_checkpoints(
    js: &jetstream::Context,
    options: &Options,
    position: u64,
    covered: u64,
    only: Option<u64>,
) -> Result<(u64, u64, u64)> {
    let stream = &options.checkpoint_stream;
    // A partition of several: only its own checkpoints (the others' and the directory's share the
    // stream, and their sizes count other trees).
    let mut spec = ReadSpec::to_tail(position + 1);
    if options.partitions.count() > 1 {
        spec = spec.subjects(options.partition.checkpoint_subject());
    }
    let mut reader = match OrderedReader::open(js, stream, spec).await {
        Ok(reader) => reader,
        Err(error) => {
            tracing::warn!(%error, stream = %stream, "checkpoint stream not readable; checkpoints not exported");
            return Ok((position, 0, 0));
        }
    };
    let mut rows = Vec::new();
    while let Some(message) = reader.next().await? {
        let (seq, payload) = (message.seq, message.payload);
        if only.is_some_and(|last| seq > last) {
            break;
        }
        let note = String::from_utf8_lossy(&payload).into_owned();
        // A note that does not parse is still exported (verify reports it); it covers nothing.
        let (origin, size, root) = match parse_note(&note) {
            Some(c) => (c.origin, c.size, toolledger_wire::entry::hex(&c.root)),
            None => (String::new(), 0, String::new()),
        };
        if only.is_none() && size > covered {
            break;
        }
        rows.push(CheckpointRow {
            checkpoint_seq: seq,
            origin,
            size,
            root,
            note,
        });
    }
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Ok((position, 0, 0));
    };
    let (first, last) = (first.checkpoint_seq, last.checkpoint_seq);
    let row_group_rows = options.row_group_rows;
    let bytes = tokio::task::spawn_blocking(move || {
        let refs: Vec<&CheckpointRow> = rows.iter().collect();
        tables::encode(
            Table::Checkpoints,
            &tables::checkpoints_batch(&refs)?,
            tables::writer_properties(row_group_rows),
        )
        .map(|bytes| (bytes, refs.len() as u64))
    })
    .await
    .map_err(|e| Error::Worker {
        reason: e.to_string(),
    })??;
    let (bytes, count) = bytes;
    let name = part_name(first, last);
    let manifest = Manifest::new(
        Table::Checkpoints,
        stream,
        first,
        last,
        vec![ManifestFile {
            path: name.clone(),
            rows: count,
        }],
    )
    .of_partition(options.partition);
    options
        .archive
        .put_create(&manifest.path(), Bytes::from(manifest.to_bytes()?))
        .await?;
    let size = bytes.len() as u64;
    options
        .archive
        .put_create(
            &format!("{}/{name}", Table::Checkpoints.name()),
            Bytes::from(bytes),
        )
        .await?;
    Ok((last, 1, size))
}

/// Follows the ledger into the archive until `shutdown` (or until caught up, per the options).
pub async fn run(
    client: async_nats::Client,
    options: Options,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<Summary> {
    let js = jetstream::new(client);
    let stream = options.ledger_stream.clone();
    let ledger_last = last_sequence(&js, &stream).await?;
    let mut summary = Summary::default();
    let mut tracker = Tracker::default();
    let report = |summary: &Summary, read_seq: u64| {
        if let Some(progress) = &options.progress {
            progress(Progress {
                read_seq,
                exported_seq: summary.position,
                ledger_last,
                bytes: summary.bytes,
            });
        }
    };

    // Recovery: the newest range is redone exactly as its manifest names it.
    if let Some(newest) = manifest::newest(&options.archive, Table::Events, options.partition).await? {
        tracing::info!(
            first = newest.first_seq,
            last = newest.last_seq,
            "redoing the newest range"
        );
        let (stored, at) = load_tracker(&options, newest.first_seq - 1).await?;
        (tracker, _) = read_range(&js, &stream, at + 1, newest.first_seq - 1, stored, false).await?;
        let segment;
        (tracker, segment) =
            read_range(&js, &stream, newest.first_seq, newest.last_seq, tracker, true).await?;
        let (files, bytes) = write_segment(&options, &mut tracker, segment).await?;
        tracker = save_tracker(&options, tracker, newest.last_seq).await?;
        summary.position = newest.last_seq;
        summary.ranges += 1;
        summary.files += files;
        summary.bytes += bytes;
    }
    if let Some(newest) = manifest::newest(&options.archive, Table::Checkpoints, options.partition).await? {
        export_checkpoints(
            &js,
            &options,
            newest.first_seq - 1,
            u64::MAX,
            Some(newest.last_seq),
        )
        .await?;
        summary.checkpoint_position = newest.last_seq;
    }
    if options.clean_staging {
        let removed = options.archive.remove_interrupted_puts().await?;
        if removed > 0 {
            tracing::info!(removed, "removed the staging files of interrupted puts");
        }
    }
    report(&summary, summary.position);

    tokio::pin!(shutdown);
    let mut segment = Segment::default();
    let mut read_seq = summary.position;
    let mut messages = None;
    let mut stopping = false;
    loop {
        let caught_up = options.until_caught_up && read_seq >= ledger_last;
        let due = segment.entries() >= options.rows_per_file.max(1)
            || segment.opened.is_some_and(|t| t.elapsed() >= options.max_delay)
            || ((caught_up || stopping) && segment.entries() > 0);
        if due {
            let last = segment.last;
            let entries = segment.entries();
            let (files, bytes) = write_segment(&options, &mut tracker, std::mem::take(&mut segment)).await?;
            tracker = save_tracker(&options, tracker, last).await?;
            summary.position = last;
            summary.ranges += 1;
            summary.files += files;
            summary.bytes += bytes;
            summary.entries += entries;
            tracing::debug!(last, entries, files, bytes, "range exported");
        }
        if due || caught_up || stopping {
            let (position, files, bytes) =
                export_checkpoints(&js, &options, summary.checkpoint_position, summary.position, None)
                    .await?;
            summary.checkpoint_position = position;
            summary.files += files;
            summary.bytes += bytes;
            report(&summary, read_seq);
        }
        if caught_up || stopping {
            return Ok(summary);
        }
        if messages.is_none() {
            messages = Some(OrderedReader::open(&js, &stream, ReadSpec::follow(read_seq + 1)).await?);
        }
        let Some(reader) = messages.as_mut() else {
            continue;
        };
        let mut ended = false;
        let mut batch = Vec::with_capacity(BATCH);
        let deadline = tokio::time::sleep(IDLE_POLL);
        tokio::pin!(deadline);
        while batch.len() < BATCH {
            tokio::select! {
                () = &mut shutdown => {
                    stopping = true;
                    break;
                }
                () = &mut deadline => break,
                // The reader checks that sequences follow each other.
                next = reader.next() => {
                    let Some(message) = next? else {
                        ended = true;
                        break;
                    };
                    let seq = message.seq;
                    batch.push((seq, message.payload));
                    if options.until_caught_up && seq >= ledger_last {
                        break;
                    }
                }
            }
        }
        if ended {
            messages = None;
        }
        if let Some((seq, _)) = batch.last() {
            read_seq = *seq;
            (tracker, segment) = apply_batch(tracker, segment, batch, true).await?;
            report(&summary, read_seq);
        }
    }
}
