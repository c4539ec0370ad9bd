//! The crate's one error type. Every variant that wraps a failure of NATS, the object store or a
//! parser keeps it as its `source`, so an operator sees the whole chain (`{error:#}` in the binary).

use std::time::Duration;

/// A failure of a client library, kept whole as a cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What can go wrong reading the ledger, using the blob or tile store, or administering erasure and
/// quarantine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A stream could not be opened, inspected or read.
    #[error("stream {stream}: {action}")]
    Stream {
        /// The stream's name.
        stream: String,
        /// What was being done, e.g. `reading from seq 12`.
        action: String,
        /// The NATS client's error.
        #[source]
        source: BoxError,
    },
    /// A bounded read waited longer than its limit for the next message: the server is stuck or
    /// unreachable.
    #[error("stream {stream}: no message after seq {after} within {waited:?}")]
    ReadStalled {
        /// The stream's name.
        stream: String,
        /// The last sequence read (or the one before the read's start).
        after: u64,
        /// How long the read waited.
        waited: Duration,
    },
    /// A read asked for sequences the stream does not have yet.
    #[error("stream {stream} ends at seq {last}, the read needs seq {wanted}")]
    BeyondTail {
        /// The stream's name.
        stream: String,
        /// The last sequence the read needs.
        wanted: u64,
        /// The stream's last sequence.
        last: u64,
    },
    /// The stream skipped sequences. The ledger and checkpoint streams deny deletes, so a gap means
    /// the stream was tampered with or misconfigured.
    #[error("stream {stream}: seq {expected} is missing (the next message is seq {found})")]
    SequenceGap {
        /// The stream's name.
        stream: String,
        /// The sequence the read expected next.
        expected: u64,
        /// The sequence it got.
        found: u64,
    },
    /// A bounded read ended before the last sequence it covers: those messages are gone.
    #[error("stream {stream}: seq {from}..={to} are missing (the stream ends early)")]
    EndsEarly {
        /// The stream's name.
        stream: String,
        /// The first missing sequence.
        from: u64,
        /// The last sequence the read covers.
        to: u64,
    },
    /// A stream holds no message at a sequence that was asked for.
    #[error("stream {stream} has no message at seq {seq}")]
    NoSuchMessage {
        /// The stream's name.
        stream: String,
        /// The sequence asked for.
        seq: u64,
    },

    /// The blob store URL or its options are unusable.
    #[error("blob store {url}: {reason}")]
    BlobStoreConfig {
        /// The store URL.
        url: String,
        /// What is wrong.
        reason: String,
        /// The parser's or client's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A payload's blob is not in the store (erased, or never written).
    #[error("payload blob {blob_id} is missing")]
    PayloadMissing {
        /// The blob id the entry references.
        blob_id: String,
    },
    /// A payload's blob does not match the commitment in the entry: it was altered or swapped.
    #[error("payload blob {blob_id}: commitment {actual} does not match the entry's {expected}")]
    PayloadDigestMismatch {
        /// The blob id the entry references.
        blob_id: String,
        /// The commitment in the entry.
        expected: String,
        /// The commitment of the stored bytes.
        actual: String,
    },
    /// The blob store kept failing with transient errors; nothing was lost, retry later.
    #[error("blob store {operation} of {blob_id}: unavailable after {attempts} attempts")]
    BlobStoreUnavailable {
        /// `put`, `get` or `delete`.
        operation: &'static str,
        /// The blob concerned.
        blob_id: String,
        /// Attempts made.
        attempts: u32,
        /// The last error (boxed: it is large, and errors travel by value).
        #[source]
        source: Box<object_store::Error>,
    },
    /// The blob store refused an operation for good (permissions, configuration).
    #[error("blob store {operation} of {blob_id} failed")]
    BlobStore {
        /// The operation.
        operation: &'static str,
        /// The blob concerned (empty for a listing).
        blob_id: String,
        /// The store's error (boxed: it is large, and errors travel by value).
        #[source]
        source: Box<object_store::Error>,
    },
    /// A retried put found another blob under its fresh id: something else writes into this store.
    #[error("blob store put of {blob_id}: a different blob already exists under this id")]
    BlobConflict {
        /// The blob id.
        blob_id: String,
    },
    /// The operating system's randomness failed while making a blob id or nonce.
    #[error("os randomness unavailable for a blob id or nonce")]
    Randomness {
        /// The generator's error.
        #[source]
        source: getrandom::Error,
    },

    /// The tile store location is unusable.
    #[error("tile store {location}: {reason}")]
    TileStoreConfig {
        /// The configured location.
        location: String,
        /// What is wrong.
        reason: String,
        /// The parser's or client's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// A ledger entry an erasure reads is not a ledger entry.
    #[error("erasure: ledger seq {seq} is not a ledger entry")]
    ErasureEntryUnreadable {
        /// Its ledger sequence.
        seq: u64,
        /// The parser's error (boxed: it is large, and errors travel by value).
        #[source]
        source: Box<toolledger_wire::Error>,
    },
    /// An erasure was asked for without a reason.
    #[error("erasure refused: an erasure needs a reason")]
    ErasureWithoutReason,
    /// A quarantined message an erasure reaches could not be deleted.
    #[error("erasure: deleting quarantined message {seq} failed")]
    ErasureQuarantineDelete {
        /// Its ATL_QUARANTINE sequence.
        seq: u64,
        /// The NATS client's error.
        #[source]
        source: BoxError,
    },
    /// The erasure record could not be built or published (the blobs are already deleted: run the
    /// same erasure again, it is idempotent).
    #[error("erasure {erasure_id}: the record could not be published")]
    ErasureRecord {
        /// The erasure's id.
        erasure_id: String,
        /// The serializer's or NATS client's error.
        #[source]
        source: BoxError,
    },
    /// An erasure reaches content inside the tenant's legal hold and was not forced.
    #[error(
        "erasure refused: {held} payloads of tenant {tenant} are inside the legal hold of {min_days} days (an admin may force it with a reason)"
    )]
    LegalHold {
        /// The tenant.
        tenant: String,
        /// Payloads inside the hold.
        held: usize,
        /// The hold in days.
        min_days: u32,
    },

    /// No quarantined message has this sequence (never, or gone by the quarantine's age limit).
    #[error("no quarantined message with seq {seq}")]
    NotQuarantined {
        /// The ATL_QUARANTINE sequence asked for.
        seq: u64,
    },
    /// A quarantined message cannot be redriven.
    #[error("redrive of quarantined message {seq}: {reason}")]
    Redrive {
        /// Its ATL_QUARANTINE sequence.
        seq: u64,
        /// Why.
        reason: String,
        /// The NATS client's error, when the publish failed.
        #[source]
        source: Option<BoxError>,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A stream failure while doing `action`, keeping the client's error.
    pub(crate) fn stream(stream: &str, action: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Stream {
            stream: stream.to_owned(),
            action: action.into(),
            source: source.into(),
        }
    }
}

/// `error` and its causes joined by `: `, for places that keep an error as text (a report's finding,
/// a log field, another crate's string-only variant).
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}
