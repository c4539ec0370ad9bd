//! `verify_ledger`: recompute the tree from the ledger and hold it against everything that vouches
//! for it.
//!
//! ```text
//! 1 checkpoints  every message of the checkpoint stream: signature by a trusted key, one origin,
//!                sizes strictly growing (equal sizes with other roots are a fork)
//! 2 configs      the live ledger and checkpoint stream configurations against DESIGN §2
//! 3 tiles        (given a tile store) check_tiles against the newest trusted checkpoint
//! 4 ledger pass  seq 1..=last: no gaps, a readable entry whose bytes are the RFC 8785 form of
//!                what they parse to, leaf hash ─▶ tree;
//!                leaf = the trusted tiles' leaf (the exact position of an altered entry);
//!                root at every checkpoint size = the signed root
//! 5 afterwards   checkpoints beyond the ledger's end; consistency proofs (from trusted tiles)
//!                between consecutive checkpoints the recomputed tree could not vouch for
//! 6 payloads      (given a blob store) every payload reference's blob fetched and held against
//!                its commitment; blobs a `toolledger.erasure.completed` entry names are erased,
//!                not missing
//! ```
//!
//! Everything wrong is a [`Finding`]; [`Report::first_bad`] names the first bad ledger position.
//! Without tiles an altered entry is located between the last checkpoint that still matches and the
//! first that does not; with tiles that a signed root vouches for, to the exact entry.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use async_nats::jetstream;
use serde::Serialize;
use toolledger_ledger::erasure::ERASURE_CLASS;
use toolledger_ledger::{BlobStore, Error as LedgerError, OrderedReader, ReadSpec, StreamMessage};
use toolledger_merkle::tile::{TILE_WIDTH, TileId, tile_for};
use toolledger_merkle::{Checkpoint, CompactRange, Hash, TileReader, TileStore, Verifiers, WitnessPolicy};
use toolledger_schemas::EventClass;
use toolledger_schemas::model::PartitionsRecorded;
use toolledger_wire::entry::LEDGER_SOURCE;
use toolledger_wire::entry::ScannedEntry;
use toolledger_wire::ijson::JsonProblem;
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::{self, CHECKPOINTS, LEDGER};
use toolledger_wire::{Error as WireError, LedgerEntry, Origin, PayloadRef, Tenant};

use crate::{Result, hex};

/// How often the progress callback is called, in entries.
const PROGRESS_EVERY: u64 = 1024;

/// What else to check besides the two streams.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The log's origin every checkpoint must name; `None` takes the first trusted checkpoint's.
    pub origin: Option<String>,
    /// The tile store to check, and to locate an altered entry exactly.
    pub tiles: Option<TileStore>,
    /// Check the live stream configurations against DESIGN §2.
    pub check_stream_configs: bool,
    /// Parse every entry as a canonical ledger entry (not only hash it).
    pub check_entries: bool,
    /// The blob store to check every payload commitment against (needs `check_entries`).
    pub blobs: Option<BlobStore>,
    /// A signed checkpoint (its C2SP note) trusted already, e.g. saved by an earlier clean run:
    /// the pass continues from its tree (read from the tiles, else re-hashed from the ledger, and
    /// checked against its root) and reads only the entries after it. Checkpoints of smaller trees
    /// are not checked again.
    pub from_checkpoint: Option<String>,
    /// The witnesses whose cosignatures the newest checkpoints must carry, at least k of them
    /// (`docs/witnesses.md`); `None` asks for none.
    pub witness_policy: Option<WitnessPolicy>,
    /// Only the checkpoints on this subject of the checkpoint stream are the ledger's (a partition's,
    /// `docs/scaling.md`); `None` takes every message of the stream.
    pub checkpoint_subject: Option<String>,
    /// The partition the stream is, of how many (needs `check_entries`): every entry's tenant must
    /// live in it by the partition rule, and p0 of several must hold the rule's record.
    pub placement: Option<Placement>,
}

/// Which partition of a partitioned ledger a verified stream is (`docs/scaling.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// How many partitions the ledger has.
    pub partitions: Partitions,
    /// This stream's.
    pub partition: Partition,
    /// The ledger's own origin (p0's), which the rule's record names every partition's under.
    pub origin: String,
}

impl Placement {
    /// A finding when `tenant`'s entry at `seq` is not in this partition.
    fn misplaced(&self, seq: u64, tenant: Option<&str>) -> Option<Finding> {
        let tenant = tenant.unwrap_or_default();
        let home = self.partitions.of(tenant);
        (home != self.partition).then(|| Finding::EntryMisplaced {
            seq,
            tenant: tenant.to_owned(),
            partition: self.partition.to_string(),
            home: home.to_string(),
        })
    }

    /// Whether this stream must hold the partition rule's record: p0 of several.
    fn holds_rule(&self) -> bool {
        self.partition == Partition::ZERO && self.partitions.count() > 1
    }

    /// What is wrong with a recorded rule (a `toolledger.partitions.recorded` entry), if anything.
    fn rule_problem(&self, entry: Option<&LedgerEntry>) -> Option<String> {
        let Some(entry) = entry else {
            return Some("it does not read as a ledger entry".to_owned());
        };
        if entry.ledger.origin != Origin::Ledger || entry.event.source() != LEDGER_SOURCE {
            return Some(format!(
                "it was not appended by the ledger itself (origin {:?}, source {:?})",
                entry.ledger.origin.as_str(),
                entry.event.source()
            ));
        }
        let data = entry.event.data.as_ref();
        let recorded: PartitionsRecorded = match data.map(|d| serde_json::from_value(d.clone())) {
            Some(Ok(recorded)) => recorded,
            Some(Err(error)) => return Some(format!("its data does not read as the rule: {error}")),
            None => return Some("it carries no data".to_owned()),
        };
        if recorded.partitions != self.partitions.count() || recorded.rule != Partitions::RULE {
            return Some(format!(
                "it records {} partition(s) by rule {:?}; the ledger is verified as {} by {:?}",
                recorded.partitions,
                recorded.rule,
                self.partitions.count(),
                Partitions::RULE
            ));
        }
        (recorded.layout != self.partitions.layout(&self.origin))
            .then(|| "its layout (streams, checkpoint subjects, origins) is not the ledger's".to_owned())
    }
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            origin: None,
            tiles: None,
            check_stream_configs: true,
            check_entries: true,
            blobs: None,
            from_checkpoint: None,
            witness_policy: None,
            checkpoint_subject: None,
            placement: None,
        }
    }
}

/// How far the ledger pass is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Entries read so far.
    pub done: u64,
    /// Entries in the ledger when the pass started.
    pub total: u64,
}

/// One thing wrong with the ledger, its checkpoints, its tiles or its streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Finding {
    /// A live stream configuration is weaker than the contract (it could truncate or purge).
    StreamConfig {
        /// The stream.
        stream: String,
        /// The configuration field.
        field: String,
        /// What the live stream has.
        actual: String,
        /// What the contract needs.
        required: String,
    },
    /// A checkpoint carries no valid signature by a trusted key (forged, re-signed or altered).
    CheckpointUntrusted {
        /// Its sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// Why it does not verify.
        reason: String,
    },
    /// A trusted checkpoint is for another log.
    CheckpointOrigin {
        /// Its sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// The origin it names.
        origin: String,
        /// The origin expected.
        expected: String,
    },
    /// A trusted checkpoint does not grow the tree: a smaller size, or the same size again (with
    /// another root: a fork).
    CheckpointOrder {
        /// Its sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// Its tree size.
        size: u64,
        /// The size of the checkpoint before it.
        previous_size: u64,
        /// What is wrong.
        reason: String,
    },
    /// Two consecutive trusted checkpoints are not consistent (the later does not extend the earlier).
    CheckpointInconsistent {
        /// The later checkpoint's sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// The earlier checkpoint's size.
        old_size: u64,
        /// The later checkpoint's size.
        new_size: u64,
        /// What failed.
        reason: String,
    },
    /// Under a witness policy, none of the newest checkpoints has enough of its witnesses'
    /// cosignatures (the newest is named): a finding, not a pass.
    WitnessQuorum {
        /// The newest checkpoint's sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// Its tree size.
        size: u64,
        /// The witnesses that did cosign it.
        cosigned_by: String,
        /// How many.
        have: usize,
        /// What the policy asks for.
        quorum: usize,
        /// The witnesses the policy lists.
        of: usize,
    },
    /// A trusted checkpoint covers more entries than the ledger holds: entries were lost.
    CheckpointBeyondLedger {
        /// Its sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// Its tree size.
        size: u64,
        /// Entries in the ledger.
        ledger_size: u64,
    },
    /// The ledger skips a sequence: a message was deleted.
    SequenceGap {
        /// The sequence expected next.
        expected_seq: u64,
        /// The sequence found.
        found_seq: u64,
    },
    /// A ledger message is not a ledger entry (not JSON, not I-JSON, or not the entry's shape).
    EntryUnreadable {
        /// Its ledger sequence.
        seq: u64,
        /// Why it cannot be read.
        reason: String,
    },
    /// A ledger message reads as an entry, but its bytes are not the RFC 8785 bytes of the JSON they
    /// hold (re-spaced, pretty-printed, members reordered, numbers or strings written another way).
    /// The tree may well be consistent over it: what is wrong is that the writer did not write the
    /// one byte form DESIGN §4 promises, so equal entries could hash differently.
    EntryNotCanonical {
        /// Its ledger sequence.
        seq: u64,
    },
    /// The entry at `seq` is not the one the signed tree holds there (located with tiles a signed
    /// root vouches for): changed, dropped, swapped or inserted from here on.
    EntryAltered {
        /// The ledger sequence (leaf index + 1).
        seq: u64,
        /// The leaf hash the signed tree has at this position, hex.
        signed_leaf: String,
        /// The leaf hash of the ledger's entry, hex.
        ledger_leaf: String,
    },
    /// The tree recomputed from the ledger has another root than a signed checkpoint: an entry in
    /// `good_through + 1 ..= size` was altered (the first such checkpoint is reported).
    RootMismatch {
        /// The checkpoint's sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// Its tree size.
        size: u64,
        /// Its signed root, hex.
        signed_root: String,
        /// The root recomputed from the ledger, hex.
        computed_root: String,
        /// The size of the last checkpoint that still matched (0 if none).
        good_through: u64,
    },
    /// The ledger's first `size` entries do not make the root of the trusted checkpoint the pass
    /// started from: an entry at or before `size` was altered (or the checkpoint is another log's).
    StartMismatch {
        /// The trusted checkpoint's tree size.
        size: u64,
        /// Its signed root, hex.
        trusted_root: String,
        /// The root of the ledger's first `size` entries, hex.
        computed_root: String,
    },
    /// A payload's blob is not in the blob store and no erasure of it is recorded: the content is lost
    /// (the entry and its commitment are intact).
    PayloadMissing {
        /// The ledger sequence of the entry that references it.
        seq: u64,
        /// The JSON Pointer of the payload in the event.
        path: String,
        /// The blob.
        blob_id: String,
    },
    /// A payload's blob does not match the commitment its entry holds: altered or swapped.
    PayloadAltered {
        /// The ledger sequence of the entry that references it.
        seq: u64,
        /// The JSON Pointer of the payload in the event.
        path: String,
        /// The blob.
        blob_id: String,
        /// What did not match.
        reason: String,
    },
    /// A payload's blob could not be read for another reason (the store is unreachable, a bad
    /// tenant): it was not checked.
    PayloadUnchecked {
        /// The ledger sequence of the entry that references it.
        seq: u64,
        /// The blob.
        blob_id: String,
        /// Why.
        reason: String,
    },
    /// An entry of a partitioned ledger is in another partition than its tenant's by the partition
    /// rule: appended to the wrong stream, or moved there.
    EntryMisplaced {
        /// Its ledger sequence.
        seq: u64,
        /// Its tenant.
        tenant: String,
        /// The partition it is in.
        partition: String,
        /// The partition its tenant lives in.
        home: String,
    },
    /// Partition p0 of a partitioned ledger holds no record of the partition rule
    /// (`toolledger.partitions.recorded`), or one that is not the ledger's.
    PartitionRule {
        /// The record's ledger sequence; `None` when there is none.
        seq: Option<u64>,
        /// What is wrong.
        reason: String,
    },
    /// An entry of a partitioned ledger's directory does not commit to what it says: not an entry,
    /// not one reference per partition, a reference to a checkpoint that is missing, on another
    /// subject, unsigned or of another size or root, or a partition going back.
    DirectoryEntry {
        /// Its sequence in the directory's stream.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A tile disagrees with the signed tree (replaced, damaged or missing). Tiles are a cache: the
    /// ledger is unaffected and `toolledger` rebuilds them.
    TileCorrupt {
        /// The tile's object path.
        path: String,
        /// The first ledger sequence the tile covers, when known.
        first_seq: Option<u64>,
        /// What is wrong.
        reason: String,
    },
}

impl Finding {
    /// The first ledger sequence this finding puts in doubt, for findings about entries.
    pub fn ledger_seq(&self) -> Option<u64> {
        match self {
            Self::SequenceGap { expected_seq, .. } => Some(*expected_seq),
            Self::EntryUnreadable { seq, .. }
            | Self::EntryNotCanonical { seq }
            | Self::EntryAltered { seq, .. }
            | Self::EntryMisplaced { seq, .. }
            | Self::DirectoryEntry { seq, .. } => Some(*seq),
            Self::PartitionRule { seq, .. } => *seq,
            Self::RootMismatch { good_through, .. } => Some(good_through + 1),
            Self::StartMismatch { .. } => Some(1),
            Self::CheckpointBeyondLedger { ledger_size, .. } => Some(ledger_size + 1),
            _ => None,
        }
    }

    /// Where the problem is, for people: `ledger seq 300`, `checkpoint seq 4`, a tile or a stream.
    pub fn position(&self) -> String {
        match self {
            Self::StreamConfig { stream, field, .. } => format!("stream {stream} ({field})"),
            Self::CheckpointUntrusted { checkpoint_seq, .. }
            | Self::CheckpointOrigin { checkpoint_seq, .. }
            | Self::CheckpointOrder { checkpoint_seq, .. }
            | Self::CheckpointInconsistent { checkpoint_seq, .. }
            | Self::WitnessQuorum { checkpoint_seq, .. } => {
                format!("checkpoint seq {checkpoint_seq}")
            }
            Self::RootMismatch {
                good_through, size, ..
            } => format!("ledger seq {}..={size}", good_through + 1),
            Self::StartMismatch { size, .. } => format!("ledger seq 1..={size}"),
            Self::TileCorrupt { path, .. } => format!("tile {path}"),
            Self::PartitionRule { seq: None, .. } => "partition p0".to_owned(),
            Self::DirectoryEntry { seq, .. } => format!("directory seq {seq}"),
            Self::PayloadMissing { seq, blob_id, .. }
            | Self::PayloadAltered { seq, blob_id, .. }
            | Self::PayloadUnchecked { seq, blob_id, .. } => format!("payload {blob_id} of ledger seq {seq}"),
            other => format!("ledger seq {}", other.ledger_seq().unwrap_or_default()),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.position())?;
        match self {
            Self::StreamConfig { actual, required, .. } => write!(f, "is {actual}, needs {required}"),
            Self::CheckpointUntrusted { reason, .. } => write!(f, "not signed by a trusted key: {reason}"),
            Self::WitnessQuorum {
                size,
                cosigned_by,
                have,
                quorum,
                of,
                ..
            } => write!(
                f,
                "no recent checkpoint meets the witness policy: the newest, size {size}, is cosigned \
                 by {have} of its {of} witnesses ({cosigned_by}); it asks for {quorum}"
            ),
            Self::CheckpointOrigin { origin, expected, .. } => {
                write!(f, "is for log {origin:?}, expected {expected:?}")
            }
            Self::CheckpointOrder {
                size,
                previous_size,
                reason,
                ..
            } => write!(f, "size {size} after size {previous_size}: {reason}"),
            Self::CheckpointInconsistent {
                old_size,
                new_size,
                reason,
                ..
            } => write!(f, "size {new_size} does not extend size {old_size}: {reason}"),
            Self::CheckpointBeyondLedger {
                checkpoint_seq,
                size,
                ledger_size,
            } => write!(
                f,
                "missing: checkpoint seq {checkpoint_seq} covers {size} entries, the ledger holds {ledger_size}"
            ),
            Self::SequenceGap {
                expected_seq,
                found_seq,
            } => write!(
                f,
                "missing: the ledger jumps from seq {} to {found_seq}",
                expected_seq - 1
            ),
            Self::EntryUnreadable { reason, .. } => write!(f, "not a ledger entry: {reason}"),
            Self::EntryMisplaced {
                tenant,
                partition,
                home,
                ..
            } => write!(
                f,
                "misplaced: an entry of tenant {tenant:?} in partition {partition}; the partition rule puts it in {home}"
            ),
            Self::PartitionRule { seq: None, reason } => write!(f, "no partition rule recorded: {reason}"),
            Self::DirectoryEntry { reason, .. } => write!(f, "the directory entry does not hold: {reason}"),
            Self::PartitionRule { reason, .. } => {
                write!(f, "the recorded partition rule is not the ledger's: {reason}")
            }
            Self::EntryNotCanonical { .. } => write!(
                f,
                "not canonical: its bytes are not the RFC 8785 form of the entry they hold"
            ),
            Self::EntryAltered {
                signed_leaf,
                ledger_leaf,
                ..
            } => write!(
                f,
                "altered: the signed tree has leaf {signed_leaf}, the ledger's entry hashes to {ledger_leaf}"
            ),
            Self::RootMismatch {
                checkpoint_seq,
                size,
                signed_root,
                computed_root,
                ..
            } => write!(
                f,
                "altered: the tree of size {size} has root {computed_root}, checkpoint seq {checkpoint_seq} signed {signed_root}"
            ),
            Self::StartMismatch {
                size,
                trusted_root,
                computed_root,
                ..
            } => write!(
                f,
                "altered: the first {size} entries have root {computed_root}, the trusted checkpoint signed {trusted_root}"
            ),
            Self::PayloadMissing { path, .. } => {
                write!(
                    f,
                    "missing: the blob of {path} is not in the store and no erasure is recorded"
                )
            }
            Self::PayloadAltered { path, reason, .. } => write!(f, "altered: {path}: {reason}"),
            Self::PayloadUnchecked { reason, .. } => write!(f, "not checked: {reason}"),
            Self::TileCorrupt {
                first_seq, reason, ..
            } => match first_seq {
                Some(seq) => write!(f, "{reason} (covers ledger seq {seq} on)"),
                None => write!(f, "{reason}"),
            },
        }
    }
}

/// What a verification found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The ledger stream verified.
    pub ledger_stream: String,
    /// The checkpoint stream verified.
    pub checkpoint_stream: String,
    /// The ledger's size at the end of the pass.
    pub entries: u64,
    /// The size of the trusted checkpoint the pass continued from (0: it read from seq 1).
    pub from_size: u64,
    /// The root recomputed over all of them, hex.
    pub root: String,
    /// Messages in the checkpoint stream.
    pub checkpoints: u64,
    /// Of those, checkpoints signed by a trusted key for this log.
    pub trusted_checkpoints: u64,
    /// The newest trusted checkpoint's size (0 if none).
    pub signed_size: u64,
    /// The newest trusted checkpoint's C2SP note, to continue from next time (`--from-checkpoint`).
    pub newest_checkpoint: Option<String>,
    /// Whether a tile store was checked.
    pub tiles_checked: bool,
    /// Payload references checked against the blob store (0 when none was given).
    pub payloads_checked: u64,
    /// Of those, blobs missing because a recorded erasure deleted them.
    pub payloads_erased: u64,
    /// Everything wrong, in the order found.
    pub findings: Vec<Finding>,
    /// What costs speed and not safety (a ledger stream without atomic batches); never fails the
    /// verification.
    pub notes: Vec<String>,
    /// Under a witness policy: the newest checkpoint enough of its witnesses cosigned (among the
    /// newest few), else the newest with the cosignatures it has (and a
    /// [`Finding::WitnessQuorum`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witnessed: Option<crate::prove::WitnessedCheckpoint>,
}

impl Report {
    /// No findings.
    pub fn is_ok(&self) -> bool {
        self.findings.is_empty()
    }

    /// The finding naming the first bad ledger position; when no finding is about entries, the first
    /// finding of all.
    pub fn first_bad(&self) -> Option<&Finding> {
        self.findings
            .iter()
            .filter(|f| f.ledger_seq().is_some())
            .min_by_key(|f| f.ledger_seq())
            .or_else(|| self.findings.first())
    }

    /// The first bad ledger sequence, if any finding is about entries.
    pub fn first_bad_seq(&self) -> Option<u64> {
        self.findings.iter().filter_map(Finding::ledger_seq).min()
    }
}

/// A trusted checkpoint and where it is in the checkpoint stream.
#[derive(Debug, Clone)]
pub(crate) struct Signed {
    pub(crate) seq: u64,
    /// Its subject in the checkpoint stream, its log's: where its cosignatures are
    /// ([`toolledger_wire::streams::cosignatures_prefix`]).
    pub(crate) subject: String,
    pub(crate) checkpoint: Checkpoint,
    pub(crate) note: String,
}

/// The trusted checkpoints of a checkpoint stream, built message by message: a note is trusted when
/// a verifier signed it, its origin is the log's, and its tree is larger than the one before.
#[derive(Debug, Clone)]
pub(crate) struct Trust {
    /// Trusted checkpoints in growing size order (shared with the proofs that read them).
    pub(crate) trusted: Arc<Vec<Signed>>,
    /// Why the others are not.
    pub(crate) findings: Vec<Finding>,
    origin: Option<String>,
    /// Messages taken.
    pub(crate) read: u64,
    /// The last stream sequence taken.
    pub(crate) last_seq: u64,
}

impl Trust {
    pub(crate) fn new(origin: Option<&str>) -> Self {
        Self {
            trusted: Arc::new(Vec::new()),
            findings: Vec::new(),
            origin: origin.map(str::to_owned),
            read: 0,
            last_seq: 0,
        }
    }

    /// The log's origin: the one given, else the first trusted checkpoint's.
    pub(crate) fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    /// Takes the checkpoint stream's next message.
    pub(crate) fn take(&mut self, message: &StreamMessage, verifiers: &Verifiers) {
        let (seq, payload) = (message.seq, &message.payload);
        self.read += 1;
        self.last_seq = seq;
        let note = String::from_utf8_lossy(payload).into_owned();
        let checkpoint = match Checkpoint::open(&note, verifiers) {
            Ok(checkpoint) => checkpoint,
            Err(error) => {
                self.findings.push(Finding::CheckpointUntrusted {
                    checkpoint_seq: seq,
                    reason: error.to_string(),
                });
                return;
            }
        };
        let expected = self.origin.get_or_insert_with(|| checkpoint.origin.clone());
        if checkpoint.origin != *expected {
            self.findings.push(Finding::CheckpointOrigin {
                checkpoint_seq: seq,
                origin: checkpoint.origin.clone(),
                expected: expected.clone(),
            });
            return;
        }
        if let Some(previous) = self.trusted.last() {
            let previous = &previous.checkpoint;
            if checkpoint.size <= previous.size {
                let reason = if checkpoint.size == previous.size && checkpoint.root != previous.root {
                    "the same size with another root: two trees were signed".to_owned()
                } else if checkpoint.size == previous.size {
                    "signed again without growing".to_owned()
                } else {
                    "the tree shrank".to_owned()
                };
                self.findings.push(Finding::CheckpointOrder {
                    checkpoint_seq: seq,
                    size: checkpoint.size,
                    previous_size: previous.size,
                    reason,
                });
                return;
            }
        }
        Arc::make_mut(&mut self.trusted).push(Signed {
            seq,
            subject: message.subject.to_string(),
            checkpoint,
            note,
        });
    }
}

/// The live configurations of the ledger and checkpoint streams against DESIGN §2, through the
/// contract's own comparison ([`streams::weaknesses`]). A stream under another name (a partition or
/// a copy) is held to the same rules on its own subjects.
/// Also returns, as notes, what the live streams lack that only costs speed ([`streams::shortfalls`]).
async fn stream_config_findings(
    js: &jetstream::Context,
    ledger: &str,
    checkpoints: &str,
) -> (Vec<Finding>, Vec<String>) {
    let settings = streams::ContractSettings::default();
    let mut found = Vec::new();
    let mut notes = Vec::new();
    for (name, mut wanted, default_name) in [
        (ledger, streams::ledger_config(&settings), LEDGER),
        (checkpoints, streams::checkpoints_config(&settings), CHECKPOINTS),
    ] {
        let live = match js.get_stream(name).await {
            Ok(live) => live.cached_info().config.clone(),
            Err(error) => {
                found.push(Finding::StreamConfig {
                    stream: name.to_owned(),
                    field: "stream".to_owned(),
                    actual: format!("unreadable: {error}"),
                    required: "present".to_owned(),
                });
                continue;
            }
        };
        if name != default_name {
            wanted.name = name.to_owned();
            wanted.subjects = live.subjects.clone();
        }
        notes.extend(
            streams::shortfalls(&live, &wanted)
                .iter()
                .map(ToString::to_string),
        );
        found.extend(
            streams::weaknesses(&live, &wanted)
                .into_iter()
                .map(|w| Finding::StreamConfig {
                    stream: w.stream,
                    field: w.field,
                    actual: w.actual,
                    required: w.required,
                }),
        );
    }
    (found, notes)
}

/// The first ledger sequence a tile covers, from its object path.
fn tile_first_seq(path: &str) -> Option<u64> {
    let tile = TileId::parse(&path[path.find("tile/")?..])?;
    let span = TILE_WIDTH.checked_pow(u32::from(tile.level) + 1)?;
    tile.index.checked_mul(span).map(|first| first + 1)
}

fn tile_finding(error: toolledger_merkle::Error, size: u64) -> Finding {
    use toolledger_merkle::Error as M;
    let (path, reason) = match &error {
        M::TileCorrupt { path, reason } => (path.clone(), reason.clone()),
        M::TileMissing { path } | M::TileConflict { path } | M::TileStore { path, .. } => {
            (path.clone(), error.to_string())
        }
        _ => (
            format!("right edge of the tree of size {size}"),
            error.to_string(),
        ),
    };
    Finding::TileCorrupt {
        first_seq: tile_first_seq(&path),
        path,
        reason,
    }
}

/// Recomputes every leaf and the tree from `stream`, and checks the signed checkpoints in
/// `checkpoint_stream` (trusted: `verifiers`), the live stream configurations and, when given, the
/// tiles. `progress` is called every 1024 entries and at the end. With
/// [`VerifyOptions::from_checkpoint`] it continues from that trusted tree instead of seq 1.
///
/// Fails only when a stream cannot be read (or the starting checkpoint is not trusted); everything
/// wrong with what was read is a finding in the report.
pub async fn verify_ledger(
    js: &jetstream::Context,
    stream: &str,
    checkpoint_stream: &str,
    verifiers: &Verifiers,
    options: &VerifyOptions,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Report> {
    let mut run = Run::start(js, stream, checkpoint_stream, verifiers, options).await?;
    run.read_through(js, None, progress).await?;
    run.finish(js, options).await
}

/// What a monitor saw: a line's worth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorEvent {
    /// The first pass reached the ledger's tail: `entries` checked, the newest trusted checkpoint
    /// of `size`.
    CaughtUp {
        /// Entries in the ledger.
        entries: u64,
        /// The newest trusted checkpoint's size.
        size: u64,
    },
    /// A newly signed checkpoint is consistent with the last one: the entries in between were read,
    /// checked and make its root.
    Checkpoint {
        /// Its sequence in the checkpoint stream.
        checkpoint_seq: u64,
        /// Its tree size.
        size: u64,
        /// Its root, hex.
        root: String,
        /// Entries checked since the last one.
        entries: u64,
    },
}

/// `verify_ledger`, then follows the checkpoint stream: every newly signed checkpoint is trusted
/// (signature, origin, growth), the ledger entries up to its size are read and checked, and its root
/// must be the recomputed one. Returns the report at the first finding (an altered entry, a root
/// that does not match, a forked or untrusted checkpoint); runs until `stop` completes otherwise.
/// Payload commitments are left to a full `verify` (a monitor would hold every reference).
pub async fn monitor(
    js: &jetstream::Context,
    stream: &str,
    checkpoint_stream: &str,
    verifiers: &Verifiers,
    options: &VerifyOptions,
    on_event: &mut (dyn FnMut(MonitorEvent) + Send),
    stop: impl std::future::Future<Output = ()>,
) -> Result<Report> {
    let options = &VerifyOptions {
        blobs: None,
        ..options.clone()
    };
    let mut run = Run::start(js, stream, checkpoint_stream, verifiers, options).await?;
    run.read_through(js, None, &mut |_| {}).await?;
    if !run.clean() {
        return run.finish(js, options).await;
    }
    on_event(MonitorEvent::CaughtUp {
        entries: run.pass.range.size(),
        size: run.newest().map_or(0, |c| c.checkpoint.size),
    });
    let mut spec = ReadSpec::follow(run.trust.last_seq + 1);
    if let Some(subject) = &options.checkpoint_subject {
        spec = spec.subjects(subject.clone());
    }
    let mut checkpoints = OrderedReader::open(js, checkpoint_stream, spec).await?;
    tokio::pin!(stop);
    loop {
        let message = tokio::select! {
            () = &mut stop => return run.finish(js, options).await,
            next = checkpoints.next() => next?,
        };
        let Some(message) = message else {
            return Err(crate::Error::Worker {
                reason: "the checkpoint stream's follower ended".to_owned(),
            });
        };
        let (trusted_before, findings_before) = (run.trust.trusted.len(), run.trust.findings.len());
        run.trust.take(&message, verifiers);
        if run.trust.findings.len() > findings_before {
            return run.finish(js, options).await;
        }
        if run.trust.trusted.len() == trusted_before {
            continue;
        }
        let signed = run.trust.trusted[trusted_before].clone();
        let from = run.pass.range.size();
        run.pass.pending.push_back(signed.clone());
        run.read_through(js, Some(signed.checkpoint.size), &mut |_| {})
            .await?;
        if !run.clean() || run.pass.range.size() < signed.checkpoint.size {
            return run.finish(js, options).await;
        }
        on_event(MonitorEvent::Checkpoint {
            checkpoint_seq: signed.seq,
            size: signed.checkpoint.size,
            root: hex(&signed.checkpoint.root),
            entries: signed.checkpoint.size - from,
        });
    }
}

/// One verification: the trusted checkpoints, the findings so far and the pass over the ledger.
struct Run {
    stream: String,
    checkpoint_stream: String,
    trust: Trust,
    findings: Vec<Finding>,
    notes: Vec<String>,
    /// The tiles and the size whose signed root vouched for them.
    tiles_trusted: Option<(TileStore, u64)>,
    from_size: u64,
    pass: Pass,
}

impl Run {
    async fn start(
        js: &jetstream::Context,
        stream: &str,
        checkpoint_stream: &str,
        verifiers: &Verifiers,
        options: &VerifyOptions,
    ) -> Result<Self> {
        let mut trust = Trust::new(options.origin.as_deref());
        let spec = match &options.checkpoint_subject {
            Some(subject) => ReadSpec::to_tail(1).subjects(subject.clone()),
            None => ReadSpec::to_tail(1),
        };
        let mut checkpoints = OrderedReader::open(js, checkpoint_stream, spec).await?;
        while let Some(message) = checkpoints.next().await? {
            trust.take(&message, verifiers);
        }
        let mut findings = Vec::new();
        let mut notes = Vec::new();
        if options.check_stream_configs {
            let (found, noted) = stream_config_findings(js, stream, checkpoint_stream).await;
            findings.extend(found);
            notes = noted;
        }

        // Tiles are trusted for locating entries only once the newest signed root vouches for them.
        let mut tiles_trusted = None;
        if let (Some(tiles), Some(newest)) = (&options.tiles, trust.trusted.last()) {
            let newest = &newest.checkpoint;
            match TileReader::new(tiles.clone())
                .check_tiles(newest.size, &newest.root)
                .await
            {
                Ok(()) => tiles_trusted = Some((tiles.clone(), newest.size)),
                Err(error) => findings.push(tile_finding(error, newest.size)),
            }
        }

        let mut pass_findings = Vec::new();
        let start = match &options.from_checkpoint {
            None => CompactRange::new(),
            Some(note) => {
                let start = Checkpoint::open(note, verifiers).map_err(|e| crate::Error::UntrustedStart {
                    reason: e.to_string(),
                })?;
                if let Some(origin) = trust.origin()
                    && start.origin != origin
                {
                    return Err(crate::Error::UntrustedStart {
                        reason: format!("it is for log {:?}, the ledger's is {origin:?}", start.origin),
                    });
                }
                // The stream must not hold another tree of the same size.
                for signed in trust.trusted.iter() {
                    if signed.checkpoint.size == start.size && signed.checkpoint.root != start.root {
                        findings.push(Finding::CheckpointOrder {
                            checkpoint_seq: signed.seq,
                            size: signed.checkpoint.size,
                            previous_size: start.size,
                            reason: "the same size as the trusted checkpoint with another root: two trees \
                                     were signed"
                                .to_owned(),
                        });
                    }
                }
                let range = start_range(js, stream, options.tiles.as_ref(), &start).await?;
                if range.root() != start.root {
                    pass_findings.push(Finding::StartMismatch {
                        size: start.size,
                        trusted_root: hex(&start.root),
                        computed_root: hex(&range.root()),
                    });
                }
                range
            }
        };
        let from_size = start.size();
        let mut pass = Pass::new(
            trust
                .trusted
                .iter()
                .filter(|s| s.checkpoint.size > from_size || (from_size == 0 && s.checkpoint.size == 0))
                .cloned()
                .collect(),
            start,
        );
        pass.entry_findings.extend(pass_findings);
        pass.check_entries = options.check_entries;
        pass.want_payloads = options.blobs.is_some();
        pass.placement = options.placement.clone().map(Arc::new);
        pass.payloads = PayloadLedger::new(options.blobs.clone());
        Ok(Run {
            stream: stream.to_owned(),
            checkpoint_stream: checkpoint_stream.to_owned(),
            trust,
            findings,
            notes,
            tiles_trusted,
            from_size,
            pass,
        })
    }

    /// No finding so far.
    fn clean(&self) -> bool {
        self.findings.is_empty() && self.pass.entry_findings.is_empty() && self.trust.findings.is_empty()
    }

    fn newest(&self) -> Option<&Signed> {
        self.trust.trusted.last()
    }

    /// Reads the ledger from the pass's size on, through `to` (else to the tail when it started).
    ///
    /// Entries are checked (canonical form, parse, leaf hash) a batch at a time on every core while
    /// the next batch is read; the tree, the tiles and the checkpoints then take them in ledger
    /// order. At most two batches are in hand, so memory does not grow with the ledger.
    async fn read_through(
        &mut self,
        js: &jetstream::Context,
        to: Option<u64>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<()> {
        let from = self.pass.expected_seq;
        // Gaps are findings here, not errors: the pass goes on and reports every one.
        let spec = match to {
            Some(to) if to < from => return Ok(()),
            Some(to) => ReadSpec::range(from, to),
            None => ReadSpec::to_tail(from),
        };
        let mut reader = match OrderedReader::open(js, &self.stream, spec.allow_gaps()).await {
            Ok(reader) => reader,
            // Nothing after the trusted start: the pass is done.
            Err(LedgerError::BeyondTail { .. }) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        let total = reader.last().unwrap_or(0);
        let (check_entries, want_payloads) = (self.pass.check_entries, self.pass.want_payloads);
        let placement = self.pass.placement.clone();
        let mut checking: Option<tokio::task::JoinHandle<Vec<CheckedEntry>>> = None;
        loop {
            let batch = reader.next_batch(CHECK_BATCH).await?;
            let checked = match checking.take() {
                Some(task) => task.await.map_err(|e| crate::Error::Worker {
                    reason: e.to_string(),
                })?,
                None => Vec::new(),
            };
            if batch.is_empty() && checked.is_empty() {
                break;
            }
            if !batch.is_empty() {
                let placement = placement.clone();
                checking = Some(tokio::task::spawn_blocking(move || {
                    use rayon::prelude::*;
                    batch
                        .into_par_iter()
                        .map(|message| {
                            check_entry(
                                message.seq,
                                &message.payload,
                                check_entries,
                                want_payloads,
                                placement.as_deref(),
                            )
                        })
                        .collect()
                }));
            }
            for entry in checked {
                self.pass
                    .take(entry, &mut self.tiles_trusted, &mut self.findings)
                    .await;
                if self.pass.range.size().is_multiple_of(PROGRESS_EVERY) {
                    progress(Progress {
                        done: self.pass.range.size(),
                        total,
                    });
                }
            }
        }
        progress(Progress {
            done: self.pass.range.size(),
            total,
        });
        Ok(())
    }

    /// The report: what the pass left unmatched, the consistency of checkpoints it did not match
    /// itself, the payload commitments.
    async fn finish(self, js: &jetstream::Context, options: &VerifyOptions) -> Result<Report> {
        let Run {
            stream,
            checkpoint_stream,
            trust,
            findings,
            notes,
            tiles_trusted,
            from_size,
            pass,
        } = self;
        let Pass {
            range,
            mut pending,
            matched,
            entry_findings,
            payloads,
            placement,
            rule_recorded,
            check_entries,
            ..
        } = pass;
        let size = range.size();
        // In the order found: the checkpoint stream's, the streams' and tiles', the entries'.
        let mut findings: Vec<Finding> = trust.findings.iter().cloned().chain(findings).collect();
        findings.extend(entry_findings);
        // p0's writer records the rule before anything else it appends; a pass that read p0 from
        // its start and found entries but no record was given a ledger without it.
        if placement.is_some_and(|p| p.holds_rule())
            && check_entries
            && from_size == 0
            && size > 0
            && rule_recorded == 0
        {
            findings.push(Finding::PartitionRule {
                seq: None,
                reason: format!(
                    "{stream} holds {size} entries and no {} entry of tenant {}",
                    EventClass::PartitionsRecorded,
                    Tenant::SYSTEM
                ),
            });
        }
        if let Some(signed) = pending.pop_front() {
            findings.push(Finding::CheckpointBeyondLedger {
                checkpoint_seq: signed.seq,
                size: signed.checkpoint.size,
                ledger_size: size,
            });
        }

        // Consecutive checkpoints both matched by the recomputed tree are consistent by
        // construction; the others are checked with proofs from the trusted tiles.
        if let Some((tiles, _)) = &tiles_trusted {
            let reader = TileReader::new(tiles.clone());
            for pair in trust.trusted.windows(2) {
                let (old, new) = (&pair[0].checkpoint, &pair[1].checkpoint);
                if old.size < from_size || matched.contains(&old.size) && matched.contains(&new.size) {
                    continue;
                }
                let checked = match reader.consistency_proof(old.size, new.size).await {
                    Ok(proof) => proof.verify(&old.root, &new.root),
                    Err(error) => Err(error),
                };
                if let Err(error) = checked {
                    findings.push(Finding::CheckpointInconsistent {
                        checkpoint_seq: pair[1].seq,
                        old_size: old.size,
                        new_size: new.size,
                        reason: error.to_string(),
                    });
                }
            }
        }

        let (payloads_checked, payloads_erased) = match &options.blobs {
            Some(_) => {
                let checked = payloads.check().await;
                findings.extend(checked.findings);
                (checked.checked, checked.erased)
            }
            None => (0, 0),
        };
        let newest = trust.trusted.last();
        let witnessed = match &options.witness_policy {
            Some(policy) => {
                let mut bad = Vec::new();
                let found = crate::prove::witnessed_in(js, &trust.trusted, Some(policy), 0, &mut bad).await?;
                // A listed witness's line that does not verify is tampering in ATL_COSIGNATURES, not
                // a missing cosignature.
                findings.extend(bad.into_iter().map(|(checkpoint_seq, reason)| {
                    Finding::CheckpointUntrusted {
                        checkpoint_seq,
                        reason: format!("a cosignature by a witness of the policy does not verify: {reason}"),
                    }
                }));
                found.map(|(signed, note, verdict)| {
                    if !verdict.met() {
                        findings.push(Finding::WitnessQuorum {
                            checkpoint_seq: signed.seq,
                            size: signed.checkpoint.size,
                            cosigned_by: verdict.names(),
                            have: verdict.cosigned_by.len(),
                            quorum: verdict.quorum,
                            of: verdict.of,
                        });
                    }
                    crate::prove::WitnessedCheckpoint {
                        checkpoint: crate::prove::SignedCheckpoint {
                            note,
                            ..crate::prove::SignedCheckpoint::from(signed)
                        },
                        verdict,
                    }
                })
            }
            None => None,
        };
        Ok(Report {
            ledger_stream: stream,
            checkpoint_stream,
            entries: size,
            from_size,
            root: hex(&range.root()),
            checkpoints: trust.read,
            trusted_checkpoints: trust.trusted.len() as u64,
            signed_size: newest.map_or(0, |c| c.checkpoint.size),
            newest_checkpoint: newest.map(|c| c.note.clone()),
            tiles_checked: options.tiles.is_some(),
            payloads_checked,
            payloads_erased,
            findings,
            notes,
            witnessed,
        })
    }
}

/// The compact range of the tree `start` signs: from the tiles when they hold it, else from the
/// ledger's first `start.size` entries, hashed (not parsed). The caller compares its root.
async fn start_range(
    js: &jetstream::Context,
    stream: &str,
    tiles: Option<&TileStore>,
    start: &Checkpoint,
) -> Result<CompactRange> {
    if let Some(tiles) = tiles {
        match TileReader::new(tiles.clone()).compact_range(start.size).await {
            Ok(range) if range.root() == start.root => return Ok(range),
            Ok(_) => tracing::warn!(
                size = start.size,
                "the tiles disagree with the trusted checkpoint; hashing the ledger up to it"
            ),
            Err(error) => {
                tracing::warn!(%error, size = start.size, "tiles unusable; hashing the ledger up to the trusted checkpoint")
            }
        }
    }
    let mut range = CompactRange::new();
    if start.size == 0 {
        return Ok(range);
    }
    let mut reader = OrderedReader::open(js, stream, ReadSpec::range(1, start.size)).await?;
    loop {
        let batch = reader.next_batch(CHECK_BATCH).await?;
        if batch.is_empty() {
            return Ok(range);
        }
        for message in batch {
            range.append(toolledger_merkle::leaf_hash(&message.payload));
        }
    }
}

/// Whether reading an entry failed only because its bytes are not in RFC 8785 form.
fn is_not_canonical(error: &WireError) -> bool {
    matches!(
        error,
        WireError::NotIJson {
            problem: JsonProblem::NotCanonical { .. },
            ..
        }
    )
}

/// Entries checked together on the pool: large enough to keep every core busy between reads,
/// small enough that two batches in hand stay a few MB.
const CHECK_BATCH: usize = 2048;

/// One entry, checked on its own (any thread): its leaf, and what is wrong with its bytes.
struct CheckedEntry {
    seq: u64,
    leaf: Hash,
    findings: Vec<Finding>,
    /// Whether it is a record of the partition rule (checked against the placement).
    rule: bool,
    /// What the payload check needs of it, when payloads are checked and it parsed.
    payloads: Option<EntryPayloads>,
}

/// An entry's payload references and the erasures it records.
struct EntryPayloads {
    tenant: String,
    refs: Vec<PayloadRef>,
    /// `(tenant, blob id)` an erasure record names.
    erased: Vec<(String, String)>,
}

impl EntryPayloads {
    fn of(entry: &LedgerEntry) -> Self {
        let event = &entry.event;
        let tenant = event.extension_str("tenant").unwrap_or_default().to_owned();
        let mut erased = Vec::new();
        // Only the ledger's own record (tenant `_system`) erases: one a producer tenant got into an
        // old ledger, before ingest refused the class on producer subjects, excuses no missing blob.
        if event.ty() == ERASURE_CLASS && tenant == toolledger_wire::Tenant::SYSTEM {
            // The tenant erased is in its data.
            let data = event.data().unwrap_or(&serde_json::Value::Null);
            let erased_tenant = data["tenant"].as_str().unwrap_or(&tenant).to_owned();
            for id in data["blob_ids"].as_array().into_iter().flatten() {
                if let Some(id) = id.as_str() {
                    erased.push((erased_tenant.clone(), id.to_owned()));
                }
            }
        }
        EntryPayloads {
            tenant,
            refs: entry.ledger.payload_refs.clone(),
            erased,
        }
    }

    /// [`Self::of`] a scanned entry; an erasure record is read whole for the blobs it names.
    fn of_scanned(scanned: ScannedEntry<'_>, bytes: &[u8]) -> Result<Self, WireError> {
        let erasure =
            scanned.ty == ERASURE_CLASS && scanned.tenant.as_deref() == Some(toolledger_wire::Tenant::SYSTEM);
        if erasure {
            return LedgerEntry::parse(bytes).map(|entry| Self::of(&entry));
        }
        Ok(EntryPayloads {
            tenant: scanned.tenant.map(Cow::into_owned).unwrap_or_default(),
            refs: scanned.ledger.payload_refs,
            erased: Vec::new(),
        })
    }
}

/// Proves an entry's bytes are the RFC 8785 form of a ledger entry with a validating scan (no
/// event is built); bytes that are not are read again without the proof, so their payloads are
/// still checked. The scan reads the entry's outline only: an entry it accepts may still hold an
/// attribute the typed event refuses (a bad `time`, an unknown attribute form), which ingest never
/// writes and the leaf hash would expose if anyone else did.
fn check_entry(
    seq: u64,
    bytes: &[u8],
    check_entries: bool,
    want_payloads: bool,
    placement: Option<&Placement>,
) -> CheckedEntry {
    let mut findings = Vec::new();
    let mut payloads = None;
    let mut rule = false;
    if check_entries {
        let read = match LedgerEntry::scan_canonical(bytes) {
            Ok(scanned) => {
                if let Some(placement) = placement {
                    let tenant = scanned.tenant.as_deref();
                    rule = check_placement(placement, seq, tenant, &scanned.ty, bytes, &mut findings);
                }
                if want_payloads {
                    EntryPayloads::of_scanned(scanned, bytes).map(Some)
                } else {
                    Ok(None)
                }
            }
            // Not canonical, or the outline refused: the entry is unreadable only if the parse
            // says so too (the parse is the judge of what an entry is; the scan only reads less).
            Err(error) => {
                if is_not_canonical(&error) {
                    findings.push(Finding::EntryNotCanonical { seq });
                }
                LedgerEntry::parse(bytes).map(|entry| {
                    if let Some(placement) = placement {
                        let (tenant, ty) = (entry.event.extension_str("tenant"), entry.event.ty());
                        rule = check_placement(placement, seq, tenant, ty, bytes, &mut findings);
                    }
                    want_payloads.then(|| EntryPayloads::of(&entry))
                })
            }
        };
        match read {
            Ok(read) => payloads = read,
            Err(error) => findings.push(Finding::EntryUnreadable {
                seq,
                reason: error.to_string(),
            }),
        }
    }
    CheckedEntry {
        seq,
        leaf: toolledger_merkle::leaf_hash(bytes),
        findings,
        rule,
        payloads,
    }
}

/// The placement's checks of the entry at `seq`: its tenant lives in this partition, and a record of
/// the partition rule is the ledger's. True when it is such a record.
fn check_placement(
    placement: &Placement,
    seq: u64,
    tenant: Option<&str>,
    ty: &str,
    bytes: &[u8],
    findings: &mut Vec<Finding>,
) -> bool {
    findings.extend(placement.misplaced(seq, tenant));
    if ty != EventClass::PartitionsRecorded.as_str() || tenant != Some(Tenant::SYSTEM) {
        return false;
    }
    let entry = LedgerEntry::parse(bytes).ok();
    if let Some(reason) = placement.rule_problem(entry.as_ref()) {
        findings.push(Finding::PartitionRule {
            seq: Some(seq),
            reason,
        });
    }
    true
}

/// The ordered part of a verify pass: the tree the entries so far make, and what it matched.
struct Pass {
    /// Trusted checkpoints the tree has not reached yet, in growing size order.
    pending: std::collections::VecDeque<Signed>,
    range: CompactRange,
    /// Sizes whose signed root the recomputed tree matched.
    matched: std::collections::BTreeSet<u64>,
    good_through: u64,
    altered: Option<u64>,
    root_mismatch: bool,
    tile_cache: Option<(TileId, Vec<Hash>)>,
    expected_seq: u64,
    entry_findings: Vec<Finding>,
    payloads: PayloadLedger,
    check_entries: bool,
    want_payloads: bool,
    /// The partition checks, when the stream is a partition ([`VerifyOptions::placement`]).
    placement: Option<Arc<Placement>>,
    /// Whether a record of the partition rule was read.
    rule_recorded: u64,
}

impl Pass {
    /// A pass continuing from `start` (the empty tree, or a trusted one) towards `pending`.
    fn new(pending: Vec<Signed>, start: CompactRange) -> Self {
        let size = start.size();
        let mut pass = Pass {
            pending: pending.into(),
            range: start,
            matched: std::collections::BTreeSet::new(),
            good_through: size,
            altered: None,
            root_mismatch: false,
            tile_cache: None,
            expected_seq: size + 1,
            entry_findings: Vec::new(),
            payloads: PayloadLedger::default(),
            check_entries: true,
            want_payloads: false,
            placement: None,
            rule_recorded: 0,
        };
        // A checkpoint of the empty tree has nothing to match but the empty root.
        while let Some(signed) = pass.pending.front().filter(|s| s.checkpoint.size == 0) {
            if signed.checkpoint.root != toolledger_merkle::empty_root() {
                pass.entry_findings.push(Finding::RootMismatch {
                    checkpoint_seq: signed.seq,
                    size: 0,
                    signed_root: hex(&signed.checkpoint.root),
                    computed_root: hex(&toolledger_merkle::empty_root()),
                    good_through: 0,
                });
            }
            pass.pending.pop_front();
        }
        pass
    }

    /// Takes the next entry in ledger order: its findings, its leaf into the tree (checked against
    /// the trusted tiles), and every checkpoint the tree now reaches.
    async fn take(
        &mut self,
        checked: CheckedEntry,
        tiles_trusted: &mut Option<(TileStore, u64)>,
        findings: &mut Vec<Finding>,
    ) {
        let CheckedEntry {
            seq,
            leaf,
            findings: found,
            rule,
            payloads,
        } = checked;
        if rule {
            self.rule_recorded += 1;
            // One record stands for the ledger's life: a second is not the ledger's writing.
            if self.rule_recorded > 1 {
                self.entry_findings.push(Finding::PartitionRule {
                    seq: Some(seq),
                    reason: "a second record of the partition rule".to_owned(),
                });
            }
        }
        if seq != self.expected_seq {
            self.entry_findings.push(Finding::SequenceGap {
                expected_seq: self.expected_seq,
                found_seq: seq,
            });
        }
        self.expected_seq = seq + 1;
        self.entry_findings.extend(found);
        if let Some(payloads) = payloads {
            self.payloads.observe(seq, payloads).await;
        }
        let index = self.range.size();
        self.range.append(leaf);

        if self.altered.is_none()
            && let Some((tiles, tiles_size)) = tiles_trusted.as_ref()
            && index < *tiles_size
        {
            let tile = tile_for(0, index, *tiles_size);
            if self.tile_cache.as_ref().is_none_or(|(id, _)| *id != tile) {
                match tiles.read_at_least(&tile).await {
                    Ok(hashes) => self.tile_cache = Some((tile, hashes)),
                    Err(error) => {
                        findings.push(tile_finding(error, *tiles_size));
                        *tiles_trusted = None;
                        self.tile_cache = None;
                    }
                }
            }
            if let Some((_, hashes)) = &self.tile_cache
                && let Some(signed_leaf) = hashes.get((index % TILE_WIDTH) as usize)
                && *signed_leaf != leaf
            {
                self.altered = Some(index + 1);
                self.entry_findings.push(Finding::EntryAltered {
                    seq: index + 1,
                    signed_leaf: hex(signed_leaf),
                    ledger_leaf: hex(&leaf),
                });
            }
        }

        while let Some(signed) = self
            .pending
            .pop_front_if(|s| s.checkpoint.size == self.range.size())
        {
            let computed = self.range.root();
            if computed == signed.checkpoint.root {
                self.matched.insert(signed.checkpoint.size);
                self.good_through = signed.checkpoint.size;
            } else if !self.root_mismatch {
                self.root_mismatch = true;
                // An exact position found with the tiles says more than the range.
                if self.altered.is_none() {
                    self.entry_findings.push(Finding::RootMismatch {
                        checkpoint_seq: signed.seq,
                        size: signed.checkpoint.size,
                        signed_root: hex(&signed.checkpoint.root),
                        computed_root: hex(&computed),
                        good_through: self.good_through,
                    });
                }
            }
        }
    }
}

/// How many blobs are fetched and hashed at once: enough to hide a remote store's latency, few enough
/// that a handful of large payloads cannot exhaust memory.
const PAYLOAD_FETCHES_IN_FLIGHT: usize = 8;

/// The payload commitments, checked as the ledger pass meets them: at most
/// [`PAYLOAD_FETCHES_IN_FLIGHT`] blobs are fetched at once (the pass waits for one when the window is
/// full), a blob that checks out is forgotten at once, and what does not is held until the pass ends,
/// since an erasure record later in the ledger may excuse a missing one. Every reference is checked,
/// erased or not: a blob still stored after its erasure record must still be the one committed to.
/// Memory: the window, the erased blob ids the ledger records, and the failures not yet excused — not
/// every reference in the ledger.
#[derive(Default)]
struct PayloadLedger {
    /// The store, when payloads are checked.
    blobs: Option<BlobStore>,
    /// The checks running: tasks of their own, so they go on while the pass waits for the ledger.
    in_flight: tokio::task::JoinSet<Option<Unexcused>>,
    /// References met so far: orders one entry's findings as its references are.
    met: u64,
    /// Blob ids recorded as erased, per tenant.
    erased: std::collections::HashSet<(String, String)>,
    /// What failed its check and no erasure record has excused yet, by `(tenant, blob id)`.
    unexcused: std::collections::HashMap<BlobKey, Vec<(RefOrder, Finding)>>,
    checked: u64,
    erased_count: u64,
}

/// A blob: `(tenant, blob id)`.
type BlobKey = (String, String);

/// A reference's place in the ledger: its entry's seq, then the order references were met.
type RefOrder = (u64, u64);

/// A reference whose blob failed its check: the blob, the reference's place, what is wrong.
type Unexcused = (BlobKey, RefOrder, Finding);

/// What the payload check found.
struct PayloadCheck {
    checked: u64,
    erased: u64,
    findings: Vec<Finding>,
}

impl PayloadLedger {
    fn new(blobs: Option<BlobStore>) -> Self {
        Self {
            blobs,
            ..Self::default()
        }
    }

    /// Takes in an entry's erasures and references, starting the checks of its blobs.
    async fn observe(&mut self, seq: u64, entry: EntryPayloads) {
        let Some(blobs) = self.blobs.clone() else {
            return;
        };
        for id in entry.erased {
            // A blob found missing before the record that erased it was met.
            if let Some(failed) = self.unexcused.remove(&id) {
                let (missing, other): (Vec<_>, Vec<_>) = failed
                    .into_iter()
                    .partition(|(_, f)| matches!(f, Finding::PayloadMissing { .. }));
                self.erased_count += missing.len() as u64;
                if !other.is_empty() {
                    self.unexcused.insert(id.clone(), other);
                }
            }
            self.erased.insert(id);
        }
        for payload in entry.refs {
            self.checked += 1;
            while let Some(done) = self.in_flight.try_join_next() {
                self.settle_task(done);
            }
            while self.in_flight.len() >= PAYLOAD_FETCHES_IN_FLIGHT {
                if let Some(done) = self.in_flight.join_next().await {
                    self.settle_task(done);
                }
            }
            let (blobs, tenant) = (blobs.clone(), entry.tenant.clone());
            self.met += 1;
            let order = (seq, self.met);
            self.in_flight
                .spawn(async move { check_payload(&blobs, order, tenant, payload).await });
        }
    }

    /// Takes a failed check: a missing blob the ledger records as erased is excused and counted;
    /// anything else waits for the end of the pass (an erasure record may still excuse a missing one).
    fn settle(&mut self, (id, order, finding): Unexcused) {
        if matches!(finding, Finding::PayloadMissing { .. }) && self.erased.contains(&id) {
            self.erased_count += 1;
        } else {
            self.unexcused.entry(id).or_default().push((order, finding));
        }
    }

    /// [`Self::settle`] a finished check task; one that panicked or was cancelled is a failure too.
    fn settle_task(&mut self, done: Result<Option<Unexcused>, tokio::task::JoinError>) {
        match done {
            Ok(None) => {}
            Ok(Some(failed)) => self.settle(failed),
            Err(error) => self.unexcused.entry(Default::default()).or_default().push((
                (0, 0),
                Finding::PayloadUnchecked {
                    seq: 0,
                    blob_id: String::new(),
                    reason: format!("a payload check did not finish: {error}"),
                },
            )),
        }
    }

    /// Waits for the checks in flight; what failed and was never excused, in ledger order.
    async fn check(mut self) -> PayloadCheck {
        while let Some(done) = self.in_flight.join_next().await {
            self.settle_task(done);
        }
        let mut findings: Vec<_> = self.unexcused.into_values().flatten().collect();
        // In ledger order, and one entry's as its references are.
        findings.sort_by_key(|(order, _)| *order);
        let findings = findings.into_iter().map(|(_, finding)| finding).collect();
        PayloadCheck {
            checked: self.checked,
            erased: self.erased_count,
            findings,
        }
    }
}

/// Fetches the blob `payload` names and checks its commitment; what is wrong, if anything.
async fn check_payload(
    blobs: &BlobStore,
    (seq, met): (u64, u64),
    tenant: String,
    payload: PayloadRef,
) -> Option<Unexcused> {
    let finding = match Tenant::parse(&tenant) {
        Err(error) => Finding::PayloadUnchecked {
            seq,
            blob_id: payload.blob_id.clone(),
            reason: format!("the entry's tenant: {error}"),
        },
        Ok(parsed) => match blobs.fetch_verified(&parsed, &payload).await {
            Ok(_) => return None,
            Err(LedgerError::PayloadMissing { .. }) => Finding::PayloadMissing {
                seq,
                path: payload.path.clone(),
                blob_id: payload.blob_id.clone(),
            },
            Err(error @ LedgerError::PayloadDigestMismatch { .. }) => Finding::PayloadAltered {
                seq,
                path: payload.path.clone(),
                blob_id: payload.blob_id.clone(),
                reason: error.to_string(),
            },
            Err(error) => Finding::PayloadUnchecked {
                seq,
                blob_id: payload.blob_id.clone(),
                reason: toolledger_ledger::with_causes(&error),
            },
        },
    };
    Some(((tenant, payload.blob_id), (seq, met), finding))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(count: u16, partition: u16) -> Placement {
        Placement {
            partitions: Partitions::new(count).unwrap(),
            partition: Partition::new(partition),
            origin: "ledger.example".to_owned(),
        }
    }

    #[test]
    fn the_recorded_rule_must_be_the_ledgers_and_every_tenant_in_its_partition() {
        let three = Partitions::new(3).unwrap();
        let at = "2026-11-27T09:00:00Z".parse().unwrap();
        let entry = |event: serde_json::Value| {
            LedgerEntry::own(toolledger_wire::Event::from_json(event).unwrap(), at)
        };
        let record = toolledger_ingest::partition_rule::record_event(three, "ledger.example", at);
        assert_eq!(placement(3, 0).rule_problem(Some(&entry(record.clone()))), None);
        assert!(
            placement(4, 0)
                .rule_problem(Some(&entry(record.clone())))
                .is_some()
        );
        let elsewhere = toolledger_ingest::partition_rule::record_event(three, "other.example", at);
        assert!(placement(3, 0).rule_problem(Some(&entry(elsewhere))).is_some());
        let mut forged = record;
        forged["source"] = serde_json::json!("urn:someone-else");
        let forged = placement(3, 0).rule_problem(Some(&entry(forged)));
        assert!(forged.is_some_and(|reason| reason.contains("not appended by the ledger")));
        assert!(placement(3, 0).rule_problem(None).is_some());
        assert!(placement(3, 0).holds_rule() && !placement(3, 1).holds_rule());

        let acme = three.of("acme");
        assert_eq!(placement(3, acme.index()).misplaced(7, Some("acme")), None);
        let other = Partition::new((acme.index() + 1) % 3);
        assert!(matches!(
            placement(3, other.index()).misplaced(7, Some("acme")),
            Some(Finding::EntryMisplaced { seq: 7, .. })
        ));
        assert!(placement(3, 1).misplaced(9, Some(Tenant::SYSTEM)).is_some());
    }
}
