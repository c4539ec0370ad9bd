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
    /// Reading ATL_LEDGER or ATL_CHECKPOINTS failed.
    #[error("{stream}: {reason}")]
    Stream {
        /// The stream.
        stream: String,
        /// The NATS error.
        reason: String,
    },
    /// The ledger skipped a sequence the exporter expected (a ledger never has gaps).
    #[error("ATL_LEDGER: expected seq {expected}, got {found}")]
    SequenceGap {
        /// The sequence expected next.
        expected: u64,
        /// The sequence read.
        found: u64,
    },
    /// The export worker thread stopped unexpectedly.
    #[error("export worker: {reason}")]
    Worker {
        /// Why.
        reason: String,
    },
}

impl From<toolledger_verify::Error> for Error {
    fn from(error: toolledger_verify::Error) -> Self {
        Error::Stream {
            stream: "nats".to_owned(),
            reason: error.to_string(),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
