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
//! The partitions' own passes check each partition checkpoint against its ledger, so a directory
//! entry that passes here commits, through those checkpoints, to every partition's entries.

use base64::Engine as _;
use toolledger_merkle::{Checkpoint, Verifiers};
use toolledger_wire::directory::{self, CheckpointRef, DirectoryEntry};
use toolledger_wire::partition::{Partition, Partitions};

use crate::Result;
use crate::verify::Finding;

/// Every finding about the directory's entries: `ledger_origin` is the ledger's own (p0's) origin,
/// `checkpoint_stream` where the partitions' checkpoints are.
pub async fn check_directory(
    js: &async_nats::jetstream::Context,
    checkpoint_stream: &str,
    partitions: Partitions,
    ledger_origin: &str,
    verifiers: &Verifiers,
) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    let mut previous: Option<DirectoryEntry> = None;
    for (seq, bytes) in toolledger_ledger::read_all(js, directory::STREAM).await? {
        let problem = |reason: String| Finding::DirectoryEntry { seq, reason };
        let entry = match DirectoryEntry::parse(&bytes) {
            Ok(entry) => entry,
            Err(error) => {
                findings.push(problem(format!("not a directory entry: {error}")));
                continue;
            }
        };
        if let Some(reason) = entry.shape_problem(partitions, ledger_origin) {
            findings.push(problem(reason));
            continue;
        }
        for (index, reference) in entry.partitions.iter().enumerate() {
            let partition = Partition::new(reference.partition);
            let shrank = previous
                .as_ref()
                .and_then(|previous| previous.partitions.get(index))
                .filter(|before| {
                    reference.size < before.size || reference.checkpoint_seq < before.checkpoint_seq
                });
            if let Some(before) = shrank {
                findings.push(problem(format!(
                    "{partition} goes back from size {} (checkpoint seq {}) to size {} (checkpoint seq {})",
                    before.size, before.checkpoint_seq, reference.size, reference.checkpoint_seq
                )));
            }
            if let Some(reason) =
                reference_problem(js, checkpoint_stream, partition, reference, verifiers).await?
            {
                findings.push(problem(format!("{partition}: {reason}")));
            }
        }
        previous = Some(entry);
    }
    Ok(findings)
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
