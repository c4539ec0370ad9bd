//! The crate's error type.

/// What can go wrong while exporting or verifying an archive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The archive URL cannot be opened as an object store.
    #[error("archive {url}: {reason}")]
    ArchiveConfig {
        /// The URL as given.
        url: String,
        /// Why it cannot be opened.
        reason: String,
    },
    /// An object store call failed.
    #[error("archive object {path}: {reason}")]
    Store {
        /// The object's path under the store.
        path: String,
        /// The store's error.
        reason: String,
    },
    /// A create-only put found an object with other bytes: the archive was written by something
    /// else, or from a different ledger.
    #[error("archive object {path} already exists with different bytes ({existing} bytes, {new} bytes new)")]
    Conflict {
        /// The object's path.
        path: String,
        /// Size of the object in the store.
        existing: usize,
        /// Size of the object the exporter would write.
        new: usize,
    },
    /// A manifest is unreadable or disagrees with the ledger.
    #[error("manifest {path}: {reason}")]
    Manifest {
        /// The manifest's path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Encoding a table's Parquet file failed.
    #[error("encoding {table} parquet: {reason}")]
    Encode {
        /// The table.
        table: String,
        /// The arrow or parquet error.
        reason: String,
    },
    /// A Parquet file of the archive cannot be read.
    #[error("reading {path}: {reason}")]
    Decode {
        /// The file's path.
        path: String,
        /// The arrow or parquet error.
        reason: String,
    },
    /// Reading ATL_LEDGER or ATL_CHECKPOINTS failed, or the ledger skipped a sequence (a ledger
    /// never has gaps).
    #[error(transparent)]
    Ledger(#[from] toolledger_ledger::Error),
    /// The archive's manifests cover sequences the ledger does not have: the archive was written from
    /// another ledger (or the ledger was replaced).
    #[error("the archive's manifests cover seq {covered}, the ledger ends at seq {last}")]
    ArchiveAheadOfLedger {
        /// The last sequence the newest manifest covers.
        covered: u64,
        /// The ledger's last sequence.
        last: u64,
    },
    /// The export worker thread stopped unexpectedly.
    #[error("export worker: {reason}")]
    Worker {
        /// Why.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
