//! The crate's one error type.

/// What can go wrong running a witness or asking one to cosign.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The witness's cosigned size for this log is not the old size the request named: the caller's
    /// view is stale (retry from `witness_size`) or it tried to roll the witness back.
    #[error("the witness's latest checkpoint for this log has size {witness_size}")]
    Conflict {
        /// The size of the latest checkpoint the witness cosigned.
        witness_size: u64,
    },

    /// The witness refused the checkpoint (400 malformed or old size past the new, 403 not signed by
    /// a key it trusts for the log, 404 unknown log, 422 inconsistent proof, or another status).
    #[error("witness {url} refused the checkpoint with status {status}: {reason}")]
    Refused {
        /// The witness's submission URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The witness's explanation (its response body).
        reason: String,
    },

    /// The witness could not be reached or its response not read.
    #[error("witness {url} unreachable")]
    Unreachable {
        /// The witness's submission URL.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },

    /// A request body is not a well-formed add-checkpoint request.
    #[error("malformed add-checkpoint request: {reason}")]
    MalformedRequest {
        /// What is wrong with it.
        reason: String,
    },

    /// A state file could not be read or written.
    #[error("witness state {path}")]
    StateFile {
        /// The file or directory.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A state file holds something that is not a checkpoint for its log. The witness refuses to start
    /// rather than forget what it cosigned (forgetting would let the log roll it back).
    #[error("witness state {path} is corrupt: {reason}")]
    CorruptState {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Another process holds the state directory.
    #[error("witness state directory {path} is in use by another process")]
    StateLocked {
        /// The directory.
        path: String,
    },

    /// The configuration cannot run a witness.
    #[error("witness configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },

    /// A key or note could not be made, read or checked.
    #[error(transparent)]
    Merkle(#[from] toolledger_merkle::Error),

    /// The listener could not be bound.
    #[error("cannot listen on {addr}")]
    Serve {
        /// The address.
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
