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
    /// The server refused an atomic batch (its stream has no `allow_atomic`, or it predates ADR-50);
    /// the appender goes on with chained publishes.
    #[error("ledger append at seq {seq}: atomic batch refused: {reason}")]
    AtomicRefused {
        /// The sequence the batch's first entry would have had.
        seq: u64,
        /// The server's answer.
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
    /// A stream (or the server connection, `nats`) could not be read or inspected.
    #[error("stream {stream}: {action}")]
    Stream {
        /// The stream's name.
        stream: String,
        /// What was being done.
        action: String,
        /// The client's or server's error.
        #[source]
        source: BoxError,
    },
    /// The lease bucket could not be used.
    #[error("lease {key}: {reason}")]
    Lease {
        /// The lease key.
        key: String,
        /// What went wrong.
        reason: String,
    },
    /// The identity index (duplicate detection) could not be read or written.
    #[error("identity index: {action}")]
    IdentityIndex {
        /// What was being done.
        action: String,
        /// SQLite's or the file system's error.
        #[source]
        source: BoxError,
    },
    /// A ledger entry read to catch the identity index up does not parse.
    #[error("identity index: ledger seq {seq} is not a readable entry")]
    IndexedEntryUnreadable {
        /// Its ledger sequence.
        seq: u64,
        /// Why.
        #[source]
        source: toolledger_wire::Error,
    },
    /// A blocking step (classify, the identity index) panicked or was cancelled: a bug, reported as
    /// the step it was and not as whatever that step touches.
    #[error("ingest's {task} step did not finish")]
    TaskFailed {
        /// The step.
        task: &'static str,
        /// The panic or cancellation.
        #[source]
        source: tokio::task::JoinError,
    },
    /// Ingest stopped moving: a step took longer than the stall limit, or the inbound consumer could
    /// not be read. The session starts over on a fresh connection.
    #[error("ingest stalled: {what}")]
    Stalled {
        /// What did not move, and for how long.
        what: String,
    },
    /// A rejected message could not be written to ATL_QUARANTINE; it stays unacked and comes back.
    #[error("quarantine of inbound seq {inbound_seq}: {reason}")]
    Quarantine {
        /// Its ATL_INBOUND sequence.
        inbound_seq: u64,
        /// What went wrong.
        reason: String,
    },
    /// An event the ledger writes itself (a receipt) could not be built.
    #[error("ledger-own event could not be built")]
    LedgerOwnEvent {
        /// Why.
        #[source]
        source: toolledger_wire::Error,
    },
    /// A directory entry could not be written as its bytes.
    #[error("directory entry could not be built")]
    DirectoryEntry {
        /// Why.
        #[source]
        source: toolledger_wire::Error,
    },
    /// An accepted event's entry could not be rebuilt after its payloads moved to the blob store.
    #[error("entry of event {event_id} could not be built after offloading")]
    OffloadedEntry {
        /// The event's id.
        event_id: String,
        /// Why.
        #[source]
        source: toolledger_wire::Error,
    },
    /// Another ingest took the lease this one held.
    #[error("lease {key} lost by {holder}")]
    LeaseLost {
        /// The lease key.
        key: String,
        /// This process's holder name.
        holder: String,
    },
    /// This process's scrubber key is not the one the ledger's other ingest processes use.
    #[error(
        "this ingest's scrubber key (fingerprint {ours}) is not the ledger's ({recorded}, recorded in \
         ATL_LEASES `ingest-scrub-key`): copy scrub-hmac.key from another ingest's data directory \
         and restart this ingest, or a re-sent event carrying a secret would be quarantined as \
         duplicate_conflict (docs/scaling.md; docs/runbooks.md for a deliberate change of key)"
    )]
    ScrubKeyDiffers {
        /// This process's key's fingerprint.
        ours: String,
        /// The recorded one.
        recorded: String,
    },
    /// The scrubber's HMAC key file could not be read or created.
    #[error("scrub key {path}: {reason}")]
    ScrubKey {
        /// The key file.
        path: std::path::PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// An event's `{"$upload": …}` reference is malformed or names another tenant's bucket.
    #[error("upload reference at {path}: {reason}")]
    UploadInvalid {
        /// JSON Pointer of the reference in the event.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A referenced upload is not in its bucket.
    #[error("upload {bucket}/{name} is missing")]
    UploadMissing {
        /// The bucket.
        bucket: String,
        /// The object's name.
        name: String,
    },
    /// A referenced upload's size or SHA-256 differs from the reference.
    #[error("upload {bucket}/{name}: {reason}")]
    UploadMismatch {
        /// The bucket.
        bucket: String,
        /// The object's name.
        name: String,
        /// What differs.
        reason: String,
    },
    /// The upload bucket could not be read or cleaned up now; retry later.
    #[error("upload {bucket}/{name}: unavailable: {reason}")]
    UploadUnavailable {
        /// The bucket.
        bucket: String,
        /// The object's name.
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// The ledger no longer hashes to the last signed checkpoint's root: the ledger (or the tiles and
    /// the ledger) were altered. Ingest must not append or sign over it.
    #[error(
        "ledger tree of size {size} has root {computed}, but the signed checkpoint says {signed}: the ledger was altered"
    )]
    CheckpointRootMismatch {
        /// The signed tree size.
        size: u64,
        /// The signed root, hex.
        signed: String,
        /// The root recomputed from the ledger, hex.
        computed: String,
    },
    /// The ledger has fewer entries than the last signed checkpoint covers.
    #[error("ledger ends at seq {ledger_last_seq} but a signed checkpoint covers {size} entries")]
    LedgerBehindCheckpoint {
        /// The signed tree size.
        size: u64,
        /// The ledger's last sequence.
        ledger_last_seq: u64,
    },
    /// The ledger entry at `seq` does not hash to the leaf the tiles hold for it (the ledger is then
    /// recomputed in full to decide which one was altered).
    #[error("ledger seq {seq} disagrees with the tiles")]
    LedgerDiverges {
        /// The ledger sequence.
        seq: u64,
    },
    /// The last checkpoint in the checkpoint stream does not verify with the trusted keys.
    #[error("checkpoint at seq {seq} is not trusted: {reason}")]
    CheckpointUntrusted {
        /// Its sequence in the checkpoint stream.
        seq: u64,
        /// Why it does not verify.
        reason: String,
    },
    /// A checkpoint could not be published.
    #[error("checkpoint of size {size}: {reason}")]
    CheckpointPublish {
        /// The tree size it signs.
        size: u64,
        /// What went wrong.
        reason: String,
    },
    /// Entries reached the checkpointer out of order: an append path bypassed it.
    #[error("checkpointer expected ledger seq {expected}, got {got}")]
    CheckpointerOutOfStep {
        /// The sequence the tree continues with.
        expected: u64,
        /// The sequence it was given.
        got: u64,
    },
    /// A configured witness cannot be asked: its verifier key does not parse.
    #[error("witness {url}: {reason}")]
    WitnessKey {
        /// The witness's URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// An entry was about to be appended to a partition its tenant does not live in (a bug: nothing
    /// is appended).
    #[error("entry {subject} does not belong to partition {partition}")]
    WrongPartition {
        /// The entry's subject.
        subject: String,
        /// The partition written.
        partition: String,
    },
    /// A configuration value ingest cannot run with (`ledger.partitions` that does not fit the ledger).
    #[error("{field}: {reason}")]
    Config {
        /// The configuration key.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The Merkle log (tiles, signing) failed.
    #[error("merkle log: {0}")]
    Merkle(#[from] toolledger_merkle::Error),
    /// A field to offload has no RFC 8785 form (the event passed I-JSON checks, so this is a bug).
    #[error("offloading {path}: no canonical form")]
    OffloadEncode {
        /// JSON Pointer of the field in the event.
        path: String,
        /// The canonicalizer's error.
        #[source]
        source: toolledger_wire::ijson::JsonError,
    },
    /// Reading the ledger back, the blob store or the tile store failed (`toolledger-ledger`).
    #[error(transparent)]
    Ledger(#[from] toolledger_ledger::Error),
}

/// A cause from a client library, kept as the error's source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Error {
    /// [`Error::Stream`]: doing `action` on `stream` failed with `source`.
    pub(crate) fn stream(stream: &str, action: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Stream {
            stream: stream.to_owned(),
            action: action.into(),
            source: source.into(),
        }
    }

    /// [`Error::IdentityIndex`]: doing `action` on the index failed with `source`.
    pub(crate) fn index(action: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::IdentityIndex {
            action: action.into(),
            source: source.into(),
        }
    }

    /// [`Error::TaskFailed`] for the blocking step `task`.
    pub(crate) fn task(task: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Self {
        move |source| Self::TaskFailed { task, source }
    }
}

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
