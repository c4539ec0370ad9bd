/// What can stop ingest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The ledger's tail (last sequence, or last message id in a pipeline) was not the one this writer
    /// expected: an earlier publish failed, or another writer appended.
    #[error("ledger append at seq {seq}: the ledger's tail is not what this writer expected")]
    WrongLastSequence {
        /// The sequence the entry would have had.
        seq: u64,
    },
    /// A publish ack did not come in time; the entry may or may not have landed.
    #[error("ledger append at seq {seq}: timed out")]
    AppendTimedOut {
        /// The sequence the entry would have had.
        seq: u64,
    },
    /// A publish to the ledger failed for another reason.
    #[error("ledger append at seq {seq}: {reason}")]
    Append {
        /// The sequence the entry would have had.
        seq: u64,
        /// The server's or client's reason.
        reason: String,
    },
    /// The server acked an entry at a sequence other than the expected one.
    #[error("ledger acked seq {actual}, expected {expected}")]
    UnexpectedSequence {
        /// The sequence the append expected.
        expected: u64,
        /// The sequence the server reported.
        actual: u64,
    },
    /// The ledger holds an entry this writer did not write: two writers, or a lost lease.
    #[error("ledger seq {seq} holds an entry this ingest did not write; another writer is active")]
    ForeignAppend {
        /// The first sequence that is not ours.
        seq: u64,
    },
    /// A stream could not be read or inspected.
    #[error("stream {stream}: {reason}")]
    Stream {
        /// The stream's name.
        stream: String,
        /// What went wrong.
        reason: String,
    },
    /// The lease bucket could not be used.
    #[error("lease {key}: {reason}")]
    Lease {
        /// The lease key.
        key: String,
        /// What went wrong.
        reason: String,
    },
    /// Another ingest took the lease this one held.
    #[error("lease {key} lost by {holder}")]
    LeaseLost {
        /// The lease key.
        key: String,
        /// This process's holder name.
        holder: String,
    },
}

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
