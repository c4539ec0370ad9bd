//! The directory of a partitioned ledger, checked (DESIGN §8, [`toolledger_wire::directory`]): its own
//! tree and checkpoints are verified like a partition's ([`crate::verify_ledger`] with
//! `check_entries` off); here, each entry against the partition checkpoints it names.
//!
//! ```text
//! each ATL_DIRECTORY entry ─▶ DirectoryEntry (one reference per partition, in order, its origin)
//!   each reference ─▶ ATL_CHECKPOINTS message at checkpoint_seq: on the partition's subject, signed
//!                     by a trusted key for the partition's origin, with the size and root named
//!                   ─▶ sizes never shrink from one entry to the next
//! ```
//!
//! The partitions' own passes check each partition checkpoint they read against its ledger, so a
//! directory entry that passes here commits, through those checkpoints, to every partition's
//! entries; references to checkpoints signed after those passes started are counted
//! ([`DirectoryCheck::beyond_passes`]) and held against the ledger by the next run.

use base64::Engine as _;
use toolledger_ledger::{OrderedReader, ReadSpec};
use toolledger_merkle::{Checkpoint, Verifiers};
use toolledger_wire::directory::{self, CheckpointRef, DirectoryEntry};
use toolledger_wire::partition::{Partition, Partitions};

use crate::Result;
use crate::verify::Finding;

/// What [`check_directory`] found.
#[derive(Debug, Default)]
pub struct DirectoryCheck {
    /// Everything wrong with the entries.
    pub findings: Vec<Finding>,
    /// References to a partition checkpoint larger than the one that partition's own pass checked
    /// against its ledger (signed after the pass read its checkpoints): signed, but not yet held
    /// against the ledger by this run.
    pub beyond_passes: u64,
}

/// Checks every directory entry: `ledger_origin` is the ledger's own (p0's) origin,
/// `checkpoint_stream` where the partitions' checkpoints are, `checked_sizes` the size of the newest
/// checkpoint each partition's pass matched against its ledger (p0 first).
pub async fn check_directory(
    js: &async_nats::jetstream::Context,
    checkpoint_stream: &str,
    partitions: Partitions,
    ledger_origin: &str,
    verifiers: &Verifiers,
    checked_sizes: &[u64],
) -> Result<DirectoryCheck> {
    let mut check = DirectoryCheck::default();
    let last = toolledger_ledger::last_sequence(js, directory::STREAM).await?;
    if last == 0 {
        return Ok(check);
    }
    let spec = ReadSpec::range(1, last).allow_gaps();
    let mut reader = OrderedReader::open(js, directory::STREAM, spec).await?;
    // The last clean entry, which the next must not go back from; its references are checked
    // already, so an unchanged one is not fetched again.
    let mut previous: Option<DirectoryEntry> = None;
    while let Some(message) = reader.next().await? {
        let seq = message.seq;
        let problem = |reason: String| Finding::DirectoryEntry { seq, reason };
        let entry = match DirectoryEntry::parse(&message.payload) {
            Ok(entry) => entry,
            Err(error) => {
                check
                    .findings
                    .push(problem(format!("not a directory entry: {error}")));
                continue;
            }
        };
        if let Some(reason) = entry.shape_problem(partitions, ledger_origin) {
            check.findings.push(problem(reason));
            continue;
        }
        let mut clean = true;
        for (index, reference) in entry.partitions.iter().enumerate() {
            let partition = Partition::new(reference.partition);
            let before = previous
                .as_ref()
                .and_then(|previous| previous.partitions.get(index));
            if let Some(before) = before.filter(|before| {
                reference.size < before.size || reference.checkpoint_seq < before.checkpoint_seq
            }) {
                clean = false;
                check.findings.push(problem(format!(
                    "{partition} goes back from size {} (checkpoint seq {}) to size {} (checkpoint seq {})",
                    before.size, before.checkpoint_seq, reference.size, reference.checkpoint_seq
                )));
            }
            if before == Some(reference) {
                continue;
            }
            if let Some(reason) =
                reference_problem(js, checkpoint_stream, partition, reference, verifiers).await?
            {
                clean = false;
                check.findings.push(problem(format!("{partition}: {reason}")));
            } else if checked_sizes
                .get(index)
                .is_some_and(|checked| reference.size > *checked)
            {
                check.beyond_passes += 1;
            }
        }
        if clean {
            previous = Some(entry);
        }
    }
    Ok(check)
}

/// What is wrong with one reference, if anything.
async fn reference_problem(
    js: &async_nats::jetstream::Context,
    checkpoint_stream: &str,
    partition: Partition,
    reference: &CheckpointRef,
    verifiers: &Verifiers,
) -> Result<Option<String>> {
    if reference.checkpoint_seq == 0 {
        let empty = base64::engine::general_purpose::STANDARD.encode(toolledger_merkle::empty_root());
        return Ok((reference.size != 0 || reference.root != empty)
            .then(|| "names no checkpoint but a tree that is not empty".to_owned()));
    }
    let Some(message) =
        toolledger_ledger::stored_message(js, checkpoint_stream, reference.checkpoint_seq).await?
    else {
        return Ok(Some(format!(
            "checkpoint seq {} is not in {checkpoint_stream}",
            reference.checkpoint_seq
        )));
    };
    if message.subject != partition.checkpoint_subject() {
        return Ok(Some(format!(
            "checkpoint seq {} is on {}, not {}",
            reference.checkpoint_seq,
            message.subject,
            partition.checkpoint_subject()
        )));
    }
    let note = String::from_utf8_lossy(&message.payload);
    let checkpoint = match Checkpoint::open_for(&note, &reference.origin, verifiers) {
        Ok(checkpoint) => checkpoint,
        Err(error) => {
            return Ok(Some(format!(
                "checkpoint seq {} does not verify: {error}",
                reference.checkpoint_seq
            )));
        }
    };
    let signed_root = base64::engine::general_purpose::STANDARD.encode(checkpoint.root);
    Ok(
        (checkpoint.size != reference.size || signed_root != reference.root).then(|| {
            format!(
                "names size {} root {}, checkpoint seq {} signed size {} root {signed_root}",
                reference.size, reference.root, reference.checkpoint_seq, checkpoint.size
            )
        }),
    )
}
