//! `verify --parquet`: an archive checked from its `events` and `checkpoints` tables alone.
//!
//! ```text
//! checkpoints/*.parquet ─▶ notes ─Checkpoint::open(Verifiers)─▶ trusted (size, root), growing sizes
//! events/**/part-<a>-<b>.parquet ─ grouped by range, ranges in order, rows by seq ─▶
//!     contiguous from 1? exactly once? leaf_hash(entry) = the stored leaf_hash? ─▶ CompactRange
//!     ─▶ root at every trusted checkpoint's size = its signed root
//! ```
//!
//! Without tiles an altered entry whose stored leaf hash was rewritten too is located between the
//! last checkpoint that still matches and the first that does not.

use std::collections::BTreeMap;
use std::fmt;

use arrow_array::{Array, BinaryArray, RecordBatch, StringArray, UInt64Array};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Serialize;
use toolledger_merkle::{Checkpoint, CompactRange, Verifiers};
use toolledger_wire::entry::hex;

use toolledger_wire::partition::{Partition as LedgerPartition, Partitions};

use crate::manifest::parse_range;
use crate::store::Archive;
use crate::tables::Table;
use crate::{Error, Result};

/// Something wrong with an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Finding {
    /// A file cannot be read as a table file.
    FileUnreadable {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A checkpoint is not signed by a trusted key, or is for another log.
    CheckpointUntrusted {
        /// Its ATL_CHECKPOINTS sequence.
        checkpoint_seq: u64,
        /// Why.
        reason: String,
    },
    /// A sequence appears more than once.
    Duplicate {
        /// The sequence.
        seq: u64,
        /// The file of the second copy.
        path: String,
    },
    /// Sequences are missing.
    SequenceGap {
        /// The sequence expected.
        expected_seq: u64,
        /// The one found.
        found_seq: u64,
    },
    /// An entry does not hash to the leaf hash stored beside it.
    EntryAltered {
        /// The sequence.
        seq: u64,
        /// The stored `leaf_hash`.
        stored_leaf: String,
        /// The hash of the stored `entry`.
        entry_leaf: String,
    },
    /// The tree recomputed from the archive disagrees with a signed checkpoint.
    RootMismatch {
        /// The checkpoint's sequence.
        checkpoint_seq: u64,
        /// Its size.
        size: u64,
        /// Its root.
        signed_root: String,
        /// The recomputed root.
        computed_root: String,
        /// The largest checkpointed size that still matched.
        good_through: u64,
    },
    /// A trusted checkpoint covers more entries than the archive holds.
    CheckpointBeyondArchive {
        /// The checkpoint's sequence.
        checkpoint_seq: u64,
        /// Its size.
        size: u64,
        /// Entries in the archive.
        archive_size: u64,
    },
}

impl Finding {
    /// The first ledger sequence the finding implicates, when it is about entries.
    pub fn ledger_seq(&self) -> Option<u64> {
        match self {
            Self::Duplicate { seq, .. } | Self::EntryAltered { seq, .. } => Some(*seq),
            Self::SequenceGap { expected_seq, .. } => Some(*expected_seq),
            Self::RootMismatch { good_through, .. } => Some(good_through + 1),
            Self::CheckpointBeyondArchive { archive_size, .. } => Some(archive_size + 1),
            _ => None,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FileUnreadable { path, reason } => write!(f, "file {path}: unreadable: {reason}"),
            Self::CheckpointUntrusted {
                checkpoint_seq,
                reason,
            } => {
                write!(f, "checkpoint seq {checkpoint_seq}: not trusted: {reason}")
            }
            Self::Duplicate { seq, path } => write!(f, "ledger seq {seq}: duplicated (again in {path})"),
            Self::SequenceGap {
                expected_seq,
                found_seq,
            } => write!(
                f,
                "ledger seq {expected_seq}: missing: the archive jumps from seq {} to {found_seq}",
                expected_seq - 1
            ),
            Self::EntryAltered {
                seq,
                stored_leaf,
                entry_leaf,
            } => write!(
                f,
                "ledger seq {seq}: altered: stored leaf hash {stored_leaf}, the entry hashes to {entry_leaf}"
            ),
            Self::RootMismatch {
                checkpoint_seq,
                size,
                signed_root,
                computed_root,
                good_through,
            } => write!(
                f,
                "ledger seq {}..={size}: altered: the tree of size {size} has root {computed_root}, checkpoint seq {checkpoint_seq} signed {signed_root}",
                good_through + 1
            ),
            Self::CheckpointBeyondArchive {
                checkpoint_seq,
                size,
                archive_size,
            } => write!(
                f,
                "ledger seq {}: missing: checkpoint seq {checkpoint_seq} covers {size} entries, the archive holds {archive_size}",
                archive_size + 1
            ),
        }
    }
}

/// What verifying an archive found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchiveReport {
    /// The archive's URL.
    pub archive: String,
    /// Event rows read.
    pub entries: u64,
    /// The root over the contiguous entries from seq 1, hex.
    pub root: String,
    /// Files read (events and checkpoints).
    pub files: u64,
    /// Checkpoint rows read.
    pub checkpoints: u64,
    /// Of those, trusted.
    pub trusted_checkpoints: u64,
    /// The largest trusted size the recomputed tree matched.
    pub signed_size: u64,
    /// Everything wrong.
    pub findings: Vec<Finding>,
}

impl ArchiveReport {
    /// The finding naming the first bad ledger position, else the first finding. An exact finding
    /// (an altered, duplicated or missing entry) wins over the root mismatch of a range holding it.
    pub fn first_bad(&self) -> Option<&Finding> {
        let key = |f: &Finding| match f {
            Finding::RootMismatch { size, .. } => Some(*size),
            other => other.ledger_seq(),
        };
        self.findings
            .iter()
            .filter(|f| key(f).is_some())
            .min_by_key(|f| key(f))
            .or_else(|| self.findings.first())
    }
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> std::result::Result<&'a T, String> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| format!("no column {name} of the expected type"))
}

fn read_batches(bytes: Bytes) -> std::result::Result<Vec<RecordBatch>, String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| e.to_string())?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

/// `(seq, stored leaf hash, entry)` rows of an events file.
fn event_rows(bytes: Bytes) -> std::result::Result<Vec<(u64, String, Vec<u8>)>, String> {
    let mut out = Vec::new();
    for batch in read_batches(bytes)? {
        let seq = column::<UInt64Array>(&batch, "seq")?;
        let leaf = column::<StringArray>(&batch, "leaf_hash")?;
        let entry = column::<BinaryArray>(&batch, "entry")?;
        for i in 0..batch.num_rows() {
            out.push((seq.value(i), leaf.value(i).to_owned(), entry.value(i).to_vec()));
        }
    }
    Ok(out)
}

/// `(checkpoint_seq, note)` rows of a checkpoints file.
fn checkpoint_rows(bytes: Bytes) -> std::result::Result<Vec<(u64, String)>, String> {
    let mut out = Vec::new();
    for batch in read_batches(bytes)? {
        let seq = column::<UInt64Array>(&batch, "checkpoint_seq")?;
        let note = column::<StringArray>(&batch, "note")?;
        for i in 0..batch.num_rows() {
            if !note.is_null(i) {
                out.push((seq.value(i), note.value(i).to_owned()));
            }
        }
    }
    Ok(out)
}

/// Verifies the archive with the trusted keys (and the log's origin, when given). For a partitioned
/// ledger, `partition` (of how many; the origin is then needed) picks one partition's log out of
/// the shared archive: the event files its own manifests name and the checkpoints of its origin.
pub async fn verify_archive(
    archive: &Archive,
    verifiers: &Verifiers,
    origin: Option<&str>,
    partition: Option<(Partitions, LedgerPartition)>,
) -> Result<ArchiveReport> {
    let partition = partition.filter(|(partitions, _)| partitions.count() > 1);
    let own_origin = partition
        .zip(origin)
        .map(|((_, ours), origin)| ours.origin(origin));
    if partition.is_some() && own_origin.is_none() {
        return Err(Error::ArchiveConfig {
            url: archive.url().to_owned(),
            reason: "a partition's log is told apart by its origin: pass the ledger's".to_owned(),
        });
    }
    // A note is this log's when it names this log's origin; one naming none of the ledger's logs
    // (unreadable, forged) is p0's to report, so it is reported once.
    let origins: Vec<String> = match (partition, origin) {
        (Some((partitions, _)), Some(origin)) => partitions.all().map(|p| p.origin(origin)).collect(),
        _ => Vec::new(),
    };
    let ours = |note: &str| match partition {
        None => true,
        Some((_, this)) => {
            let named = note.lines().next().unwrap_or_default();
            Some(named) == own_origin.as_deref()
                || (this == LedgerPartition::ZERO && !origins.iter().any(|o| o == named))
        }
    };
    let origin = own_origin.as_deref().or(origin);
    // A partition's event files are those its own manifests name (its tenants' folders, and its
    // folder of entries without a readable tenant).
    let own_files: Option<std::collections::BTreeSet<String>> = match partition {
        None => None,
        Some((_, this)) => {
            let mut named = std::collections::BTreeSet::new();
            for (_, _, path) in crate::manifest::list(archive, Table::Events, this).await? {
                let bytes = fetch(archive, &path).await?;
                let manifest: crate::manifest::Manifest =
                    serde_json::from_slice(&bytes).map_err(|e| Error::Manifest {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                named.extend(
                    manifest
                        .files
                        .into_iter()
                        .map(|file| format!("{}/{}", Table::Events.name(), file.path)),
                );
            }
            Some(named)
        }
    };
    let mut findings = Vec::new();
    let mut files = 0u64;

    // Checkpoints: trusted ones by growing size.
    let mut notes: BTreeMap<u64, String> = BTreeMap::new();
    for path in archive.list(Table::Checkpoints.name()).await? {
        if !path.ends_with(".parquet") {
            continue;
        }
        files += 1;
        let bytes = fetch(archive, &path).await?;
        match tokio::task::spawn_blocking(move || checkpoint_rows(bytes))
            .await
            .map_err(|e| Error::Worker {
                reason: e.to_string(),
            })? {
            Ok(rows) => notes.extend(rows.into_iter().filter(|(_, note)| ours(note))),
            Err(reason) => findings.push(Finding::FileUnreadable { path, reason }),
        }
    }
    let checkpoints = notes.len() as u64;
    let mut trusted: Vec<(u64, Checkpoint)> = Vec::new();
    for (seq, note) in notes {
        let opened = match origin {
            Some(origin) => Checkpoint::open_for(&note, origin, verifiers),
            None => Checkpoint::open(&note, verifiers),
        };
        match opened {
            Ok(checkpoint) => trusted.push((seq, checkpoint)),
            Err(error) => findings.push(Finding::CheckpointUntrusted {
                checkpoint_seq: seq,
                reason: error.to_string(),
            }),
        }
    }
    trusted.sort_by_key(|(seq, c)| (c.size, *seq));
    let trusted_checkpoints = trusted.len() as u64;

    // Events: ranges in order, rows by seq.
    let mut ranges: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    for path in archive.list(Table::Events.name()).await? {
        if let (true, Some(range)) = (path.ends_with(".parquet"), parse_range(&path))
            && own_files.as_ref().is_none_or(|own| own.contains(&path))
        {
            ranges.entry(range).or_default().push(path);
        }
    }
    let mut tree = CompactRange::new();
    let mut next_checkpoint = 0usize;
    let mut good_through = 0u64;
    let mut signed_size = 0u64;
    let mut entries = 0u64;
    let mut broken = false;
    for (_, paths) in ranges {
        let mut rows: Vec<(u64, String, Vec<u8>, String)> = Vec::new();
        for path in paths {
            files += 1;
            let bytes = fetch(archive, &path).await?;
            match tokio::task::spawn_blocking(move || event_rows(bytes))
                .await
                .map_err(|e| Error::Worker {
                    reason: e.to_string(),
                })? {
                Ok(file_rows) => rows.extend(file_rows.into_iter().map(|(s, l, e)| (s, l, e, path.clone()))),
                Err(reason) => findings.push(Finding::FileUnreadable { path, reason }),
            }
        }
        rows.sort_by_key(|r| r.0);
        entries += rows.len() as u64;
        let checkpoints_left: Vec<(u64, Checkpoint)> = trusted[next_checkpoint..].to_vec();
        let state = (tree, next_checkpoint, good_through, signed_size, broken);
        let (state, range_findings) =
            tokio::task::spawn_blocking(move || hash_range(rows, state, &checkpoints_left))
                .await
                .map_err(|e| Error::Worker {
                    reason: e.to_string(),
                })?;
        (tree, next_checkpoint, good_through, signed_size, broken) = state;
        findings.extend(range_findings);
    }
    for (seq, checkpoint) in &trusted[next_checkpoint.min(trusted.len())..] {
        if checkpoint.size > tree.size() {
            findings.push(Finding::CheckpointBeyondArchive {
                checkpoint_seq: *seq,
                size: checkpoint.size,
                archive_size: tree.size(),
            });
            break;
        }
    }
    Ok(ArchiveReport {
        archive: archive.url().to_owned(),
        entries,
        root: hex(&tree.root()),
        files,
        checkpoints,
        trusted_checkpoints,
        signed_size,
        findings,
    })
}

type HashState = (CompactRange, usize, u64, u64, bool);

/// Hashes one range's rows into the tree; `checkpoints` are the trusted ones not yet reached
/// (indices in the state count from the start of the full list).
fn hash_range(
    rows: Vec<(u64, String, Vec<u8>, String)>,
    state: HashState,
    checkpoints: &[(u64, Checkpoint)],
) -> (HashState, Vec<Finding>) {
    let (mut tree, mut next, mut good_through, mut signed_size, mut broken) = state;
    let offset = next;
    let mut findings = Vec::new();
    for (seq, stored, entry, path) in rows {
        let expected = tree.size() + 1;
        if broken {
            continue;
        }
        if seq < expected {
            findings.push(Finding::Duplicate { seq, path });
            continue;
        }
        if seq > expected {
            findings.push(Finding::SequenceGap {
                expected_seq: expected,
                found_seq: seq,
            });
            // The tree cannot continue past a hole: later roots would all differ.
            broken = true;
            continue;
        }
        let leaf = toolledger_merkle::leaf_hash(&entry);
        let entry_leaf = hex(&leaf);
        if entry_leaf != stored {
            findings.push(Finding::EntryAltered {
                seq,
                stored_leaf: stored,
                entry_leaf,
            });
        }
        tree.append(leaf);
        while let Some((checkpoint_seq, checkpoint)) = checkpoints.get(next - offset) {
            if checkpoint.size > tree.size() {
                break;
            }
            if checkpoint.size == tree.size() {
                let root = tree.root();
                if root == checkpoint.root {
                    good_through = checkpoint.size;
                    signed_size = checkpoint.size;
                } else {
                    findings.push(Finding::RootMismatch {
                        checkpoint_seq: *checkpoint_seq,
                        size: checkpoint.size,
                        signed_root: hex(&checkpoint.root),
                        computed_root: hex(&root),
                        good_through,
                    });
                }
            }
            next += 1;
        }
    }
    ((tree, next, good_through, signed_size, broken), findings)
}

async fn fetch(archive: &Archive, path: &str) -> Result<Bytes> {
    archive.get(path).await?.ok_or_else(|| Error::Store {
        path: path.to_owned(),
        reason: "listed but gone".to_owned(),
    })
}
