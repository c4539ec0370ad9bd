//! The directory of a partitioned ledger (DESIGN §8): one more log, whose entries each commit to
//! every partition's latest signed checkpoint at a time, so an auditor holds one signed value — the
//! directory's checkpoint — for the whole ledger.
//!
//! ```text
//!             stream          subject       checkpoints (on ATL_CHECKPOINTS)   origin                tiles                lease
//! directory   ATL_DIRECTORY   atl.directory atl.checkpoints.directory          <origin>/directory    <tiles>/directory    directory
//!
//! entry (RFC 8785 JSON, its leaf hash in the directory's tree):
//!   {"partitions":[{"checkpoint_seq":7,"origin":"<origin>","partition":0,"root":"<base64>","size":120}, …],
//!    "recorded_at":"2026-11-27T09:00:00.000Z"}
//! ```
//!
//! Each reference names the partition's checkpoint by its sequence in ATL_CHECKPOINTS, with the size
//! and root that checkpoint signed (a partition with no checkpoint yet: sequence 0, size 0, the empty
//! tree's root), so a verifier checks the reference against the signed note, and the note against
//! the partition's ledger. A single-partition ledger has no directory: its one checkpoint is already
//! the one value.

use serde::{Deserialize, Serialize};

use crate::partition::Partitions;
use crate::{Error, Result};

/// The directory's stream.
pub const STREAM: &str = "ATL_DIRECTORY";
/// The subject of its entries.
pub const SUBJECT: &str = "atl.directory";
/// The subject of its checkpoints on ATL_CHECKPOINTS.
pub const CHECKPOINT_SUBJECT: &str = "atl.checkpoints.directory";
/// Its single-writer lease key in ATL_LEASES.
pub const LEASE_KEY: &str = "directory";

/// Its checkpoints' origin, from the ledger's.
pub fn origin(ledger_origin: &str) -> String {
    format!("{ledger_origin}/directory")
}

/// Its tiles location, from the ledger's.
pub fn tiles(ledger_tiles: &str) -> String {
    format!("{}/directory", ledger_tiles.trim_end_matches('/'))
}

/// One entry: every partition's latest checkpoint when it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryEntry {
    /// One reference per partition, p0 first.
    pub partitions: Vec<CheckpointRef>,
    /// When it was recorded (RFC 3339).
    pub recorded_at: String,
}

/// A partition's checkpoint as a directory entry names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRef {
    /// The partition's index.
    pub partition: u16,
    /// Its checkpoints' origin.
    pub origin: String,
    /// The checkpoint's sequence in ATL_CHECKPOINTS (0: the partition has none yet).
    pub checkpoint_seq: u64,
    /// The tree size it signed.
    pub size: u64,
    /// The root it signed, base64.
    pub root: String,
}

impl DirectoryEntry {
    /// Its bytes in the directory: RFC 8785 JSON.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let value =
            serde_json::to_value(self).map_err(|e| Error::bad_envelope("directory", e.to_string()))?;
        crate::jcs::to_vec(&value).map_err(|e| Error::bad_envelope("directory", e.to_string()))
    }

    /// An entry read back from its bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| Error::bad_envelope("directory", e.to_string()))
    }

    /// What is wrong with its shape for a ledger of `partitions` under `ledger_origin`: one reference
    /// per partition, in order, each under its partition's origin.
    pub fn shape_problem(&self, partitions: Partitions, ledger_origin: &str) -> Option<String> {
        let expected: Vec<(u16, String)> = partitions
            .all()
            .map(|p| (p.index(), p.origin(ledger_origin)))
            .collect();
        let found: Vec<(u16, String)> = self
            .partitions
            .iter()
            .map(|r| (r.partition, r.origin.clone()))
            .collect();
        (expected != found).then(|| {
            format!(
                "it names partitions {found:?}; the ledger has {} partition(s) under {ledger_origin:?}",
                partitions.count()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_canonical_json_and_reads_back() {
        let entry = DirectoryEntry {
            partitions: vec![CheckpointRef {
                partition: 0,
                origin: "ledger.example".to_owned(),
                checkpoint_seq: 7,
                size: 120,
                root: "AAAA".to_owned(),
            }],
            recorded_at: "2026-11-27T09:00:00Z".to_owned(),
        };
        let bytes = entry.to_bytes().unwrap();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"partitions":[{"checkpoint_seq":7,"origin":"ledger.example","partition":0,"root":"AAAA","size":120}],"recorded_at":"2026-11-27T09:00:00Z"}"#
        );
        assert_eq!(DirectoryEntry::parse(&bytes).unwrap(), entry);
        let two = Partitions::new(2).unwrap();
        assert!(entry.shape_problem(two, "ledger.example").is_some());
        let one = Partitions::new(1).unwrap();
        assert_eq!(entry.shape_problem(one, "ledger.example"), None);
        assert_eq!(origin("ledger.example"), "ledger.example/directory");
        assert_eq!(tiles("file:///t/"), "file:///t/directory");
    }
}
