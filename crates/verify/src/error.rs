//! The crate's one error type: what stops a verification or a proof from being produced at all.
//! What verification finds wrong with the ledger is not an error but a [`crate::Finding`].

/// Why a verification or a proof could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A stream could not be read or inspected.
    #[error("stream {stream}: {reason}")]
    Stream {
        /// The stream's name.
        stream: String,
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
    /// The Merkle library refused (a proof, a tile, a signature).
    #[error("merkle: {0}")]
    Merkle(#[from] toolledger_merkle::Error),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
