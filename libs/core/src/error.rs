use std::path::PathBuf;

/// What can go wrong in the shared pieces.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is missing, malformed or out of range.
    #[error("invalid configuration at `{key}`: {reason}")]
    Config {
        /// The dotted key (`telemetry.metrics_listen`) or the environment variable that set it.
        key: String,
        /// Why the value was refused.
        reason: String,
    },
    /// The managed nats-server could not be started or did not become ready.
    #[error("nats-server {bin}: {reason}")]
    NatsServer {
        /// The binary that was run.
        bin: PathBuf,
        /// What happened.
        reason: String,
    },
    /// The telemetry server could not bind or serve.
    #[error("telemetry server on {addr}: {source}")]
    Telemetry {
        /// The address it tried to listen on.
        addr: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Any other I/O failure, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What the process was doing.
        context: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
}

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
