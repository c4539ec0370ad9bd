//! The crate's one error type: what stops a verification or a proof from being produced at all.
//! What verification finds wrong with the ledger is not an error but a [`crate::Finding`].

/// Why a verification or a proof could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The checkpoint a verification was asked to continue from is not trusted: not signed by a
    /// verifier key, not a checkpoint, or another log's.
    #[error("the checkpoint to continue from is not trusted: {reason}")]
    UntrustedStart {
        /// Why.
        reason: String,
    },
    /// A worker thread of a verification stopped (a panic).
    #[error("a verification worker stopped: {reason}")]
    Worker {
        /// What it said.
        reason: String,
    },
    /// A backup could not be written, read or restored.
    #[error("backup: {reason}")]
    Backup {
        /// What went wrong.
        reason: String,
    },
    /// The requested ledger sequence is not in the ledger.
    #[error("ledger seq {seq} is not in the ledger (last seq {last})")]
    NoSuchEntry {
        /// The requested sequence.
        seq: u64,
        /// The ledger's last sequence.
        last: u64,
    },
    /// No trusted checkpoint of the requested size (or covering the requested entry) exists.
    #[error("no trusted checkpoint {wanted}")]
    NoCheckpoint {
        /// What was looked for, e.g. `of size 1000` or `covering seq 12`.
        wanted: String,
    },
    /// The requested sizes do not make a consistency proof (`from` must not exceed `to`).
    #[error("cannot prove size {from} consistent with size {to}")]
    BadSizes {
        /// The older size.
        from: u64,
        /// The newer size.
        to: u64,
    },
    /// The proof produced does not verify against the signed checkpoint: the ledger or the tiles
    /// disagree with it (run `toolledger verify`).
    #[error("proof does not verify against the signed checkpoint: {reason}")]
    ProofDoesNotVerify {
        /// What failed.
        reason: String,
    },
    /// A proof output is malformed (bad hex, missing checkpoint).
    #[error("malformed proof: {reason}")]
    MalformedProof {
        /// What is wrong.
        reason: String,
    },
    /// An evidence bundle file is not a well-formed bundle (JSON shape, canonical form, encodings,
    /// entry order): see `docs/evidence-bundles.md`.
    #[error("malformed evidence bundle: {reason}")]
    MalformedBundle {
        /// What is wrong.
        reason: String,
    },
    /// A signed checkpoint in (or for) an evidence bundle does not verify with the trusted keys or
    /// does not parse as a checkpoint.
    #[error("{which} is not trusted: {reason}")]
    BundleCheckpointUntrusted {
        /// `checkpoint`, `old checkpoint` or `held checkpoint`.
        which: &'static str,
        /// Why.
        reason: String,
    },
    /// A checkpoint has fewer cosignatures by the witness policy's witnesses than its quorum: a
    /// finding, not a pass.
    #[error(
        "checkpoint of size {size} is cosigned by {have} of the policy's {of} witnesses ({cosigned_by}); \
         the policy asks for {quorum}"
    )]
    WitnessQuorum {
        /// The checkpoint's tree size.
        size: u64,
        /// Cosignatures that verified.
        have: usize,
        /// What the policy asks for.
        quorum: usize,
        /// The witnesses the policy lists.
        of: usize,
        /// The witnesses that did cosign.
        cosigned_by: String,
    },
    /// An entry of an evidence bundle is not proven: outside the tree, not included under the signed
    /// root, not a ledger entry, or not part of the bundle's selection.
    #[error("bundle entry at ledger seq {seq} rejected: {reason}")]
    BundleEntryRejected {
        /// The entry's ledger sequence.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// A payload blob in an evidence bundle does not match its entry's payload reference.
    #[error("bundle payload {blob_id} of ledger seq {seq} rejected: {reason}")]
    BundlePayloadRejected {
        /// The entry's ledger sequence.
        seq: u64,
        /// The blob.
        blob_id: String,
        /// Why.
        reason: String,
    },
    /// The bundle's consistency proof does not link the older checkpoint to the bundle's.
    #[error("bundle checkpoint of size {new_size} is not proven consistent with size {old_size}: {reason}")]
    BundleNotConsistent {
        /// The older checkpoint's size.
        old_size: u64,
        /// The bundle checkpoint's size.
        new_size: u64,
        /// Why.
        reason: String,
    },
    /// The ledger's tree at the size of a checkpoint the auditor holds has another root: the ledger
    /// was rewritten since, or the held checkpoint comes from a fork signed with the same key.
    #[error("the held checkpoint of size {size} has root {held}, the ledger's tree at that size {ledger}")]
    HeldCheckpointDiverges {
        /// The held checkpoint's size.
        size: u64,
        /// Its root, hex.
        held: String,
        /// The ledger's root at that size, hex.
        ledger: String,
    },
    /// An evidence bundle's directory proof does not tie its checkpoint to a signed directory
    /// checkpoint.
    #[error("the bundle's directory proof does not hold: {reason}")]
    BundleDirectoryRejected {
        /// Why.
        reason: String,
    },
    /// A bundle was requested without any entry.
    #[error("an evidence bundle needs at least one ledger entry")]
    EmptyBundle,
    /// A payload blob could not be read for a bundle, or does not match its commitment in the store.
    #[error("payload {blob_id} of ledger seq {seq}: {reason}")]
    BundlePayloadUnavailable {
        /// The entry's ledger sequence.
        seq: u64,
        /// The blob.
        blob_id: String,
        /// Why.
        reason: String,
    },
    /// The Merkle library refused (a proof, a tile, a signature).
    #[error("merkle: {0}")]
    Merkle(#[from] toolledger_merkle::Error),
    /// A stream could not be read (or, in a backup, has a gap), or a store could not be opened.
    #[error(transparent)]
    Ledger(#[from] toolledger_ledger::Error),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
