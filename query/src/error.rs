//! The crate's error: what a caller of the read paths can get wrong, and what can fail underneath.

use std::path::PathBuf;

/// Everything a query, the API or its authentication can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter is malformed, out of range or inconsistent; `field` names it.
    #[error("{field}: {reason}")]
    InvalidParameter {
        /// The parameter (query-string name).
        field: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The object does not exist for the caller's tenants.
    #[error("{what} `{id}` not found")]
    NotFound {
        /// `invocation`, `session`, …
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// No bearer token, or one no configured token matches.
    #[error("missing or unknown bearer token")]
    Unauthenticated,
    /// The token may not read that tenant.
    #[error("token `{principal}` may not read tenant `{tenant}`")]
    Forbidden {
        /// The token's name.
        principal: String,
        /// The tenant asked for.
        tenant: String,
    },
    /// The projector has not written a generation yet.
    #[error("no projection in {path} yet: run `toolledger project` or `toolledger up`")]
    NoProjection {
        /// `<data_dir>/projections`.
        path: PathBuf,
    },
    /// The projection could not be opened (missing file, other schema version).
    #[error("projection: {0}")]
    Projection(toolledger_projector::Error),
    /// A statement against the projection failed.
    #[error("projection query ({context}): {source}")]
    Sql {
        /// Which read.
        context: &'static str,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// The blob store could not be opened.
    #[error("blob store could not be opened")]
    BlobStore(#[source] toolledger_ledger::Error),
    /// A blocking read task panicked or was cancelled.
    #[error("read task failed: {0}")]
    Task(String),
    /// The API server could not bind or serve.
    #[error("api server on {addr}: {source}")]
    Serve {
        /// The listen address.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// A ledger entry could not be read (replay, bundles).
    #[error("ledger seq {seq}: {reason}")]
    Ledger {
        /// The entry's sequence.
        seq: u64,
        /// What failed.
        reason: String,
    },
    /// An analyst's statement does something the sandbox forbids (a write, ATTACH, a PRAGMA, a table
    /// outside the tenant's views, a denied function).
    #[error("sql refused: {reason}")]
    SqlRefused {
        /// What was refused.
        reason: String,
    },
    /// An analyst's statement does not parse or fails in SQLite.
    #[error("sql invalid: {reason}")]
    SqlInvalid {
        /// SQLite's message.
        reason: String,
    },
    /// An analyst's statement ran past its time limit and was interrupted.
    #[error("sql interrupted: the statement ran longer than {limit_ms} ms")]
    SqlTimeout {
        /// The limit.
        limit_ms: u64,
    },
    /// Every SQL slot the request could take stayed taken while it waited.
    #[error("sql busy: the {slots} SQL slots of {whose} stayed taken; retry shortly")]
    SqlBusy {
        /// Statements allowed at once there.
        slots: usize,
        /// Whose slots: `this tenant` or `the server`.
        whose: &'static str,
    },
    /// An analyst's statement would build a string or blob, an answer or a working set past its bound.
    #[error("sql too large: {what} would exceed {limit_bytes} bytes; select fewer or shorter values")]
    SqlTooLarge {
        /// What outgrew its bound: a string or blob, the answer, SQLite's memory.
        what: &'static str,
        /// The bound.
        limit_bytes: u64,
    },
    /// An analyst's statement was stopped before it finished because the server is stopping (or the
    /// client went away, when nobody reads the answer).
    #[error("sql canceled: the statement was stopped because the server is shutting down; retry")]
    SqlCanceled,
    /// The endpoint needs the ledger (NATS) and the server runs without it.
    #[error("{what} needs the ledger: start the server with a nats url (`serve --nats-url` or `up`)")]
    NoLedger {
        /// The feature, e.g. `replay`.
        what: &'static str,
    },
    /// A proof, checkpoint or bundle could not be produced.
    #[error("evidence: {0}")]
    Evidence(#[from] toolledger_verify::Error),
    /// The API configuration is unsafe or incomplete.
    #[error("api configuration: {0}")]
    Config(String),
    /// The projection's file cannot be read — damaged, not a database, an I/O error, another
    /// schema: the server's fault, never the caller's (503, not 400 or 500).
    #[error(
        "projection unavailable: {source}; run `toolledger rebuild` to build a new generation from the ledger"
    )]
    ProjectionUnavailable {
        /// What SQLite or the projector said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The read's access record could not be queued for the ledger in time (NATS unreachable or
    /// too slow): the read is refused rather than answered unrecorded.
    #[error("audit unavailable: {reason}; the read was not served because it could not be recorded")]
    AuditUnavailable {
        /// Why the record could not be written.
        reason: String,
    },
}

/// SQLite's own messages for a file that cannot be read (`SQLITE_CORRUPT`, `SQLITE_NOTADB`,
/// `SQLITE_IOERR`, `SQLITE_CANTOPEN`). The analysts' sandbox reports SQLite failures as text only, so
/// a damaged projection under an analyst's statement is told from a bad statement by these.
const DAMAGED_FILE_MESSAGES: [&str; 4] = [
    "database disk image is malformed",
    "file is not a database",
    "disk i/o error",
    "unable to open database file",
];

fn damaged_file_message(reason: &str) -> bool {
    let reason = reason.to_ascii_lowercase();
    DAMAGED_FILE_MESSAGES.iter().any(|m| reason.contains(m))
}

impl From<toolledger_projector::Error> for Error {
    /// The sandbox's verdicts keep their meaning; anything else is a projection failure.
    fn from(error: toolledger_projector::Error) -> Self {
        match error {
            toolledger_projector::Error::SqlRefused { reason } => Error::SqlRefused { reason },
            toolledger_projector::Error::SqlInvalid { reason } if damaged_file_message(&reason) => {
                Error::ProjectionUnavailable {
                    source: reason.into(),
                }
            }
            toolledger_projector::Error::SqlInvalid { reason } => Error::SqlInvalid { reason },
            toolledger_projector::Error::SqlTimeout { limit_ms } => Error::SqlTimeout { limit_ms },
            toolledger_projector::Error::SqlTooLarge { what, limit_bytes } => {
                Error::SqlTooLarge { what, limit_bytes }
            }
            toolledger_projector::Error::SqlCanceled => Error::SqlCanceled,
            other if other.is_unusable_projection() => Error::ProjectionUnavailable {
                source: Box::new(other),
            },
            other => Error::Projection(other),
        }
    }
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A stable machine-readable code, the `error.code` of every API error body.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidParameter { .. } => "invalid_parameter",
            Error::NotFound { .. } => "not_found",
            Error::Unauthenticated => "unauthenticated",
            Error::Forbidden { .. } => "forbidden",
            Error::NoProjection { .. } => "no_projection",
            Error::SqlRefused { .. } => "sql_refused",
            Error::SqlInvalid { .. } => "sql_invalid",
            Error::SqlTimeout { .. } => "sql_timeout",
            Error::SqlBusy { .. } => "sql_busy",
            Error::SqlTooLarge { .. } => "sql_too_large",
            Error::SqlCanceled => "sql_canceled",
            Error::NoLedger { .. } => "no_ledger",
            Error::ProjectionUnavailable { .. } => "projection_unavailable",
            Error::AuditUnavailable { .. } => "audit_unavailable",
            Error::Evidence(toolledger_verify::Error::NoSuchEntry { .. }) => "not_found",
            Error::Evidence(toolledger_verify::Error::NoCheckpoint { .. }) => "no_checkpoint",
            Error::Evidence(toolledger_verify::Error::BadSizes { .. }) => "invalid_parameter",
            _ => "internal",
        }
    }

    /// The parameter at fault, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::InvalidParameter { field, .. } => Some(field),
            Error::SqlRefused { .. } | Error::SqlInvalid { .. } | Error::SqlTooLarge { .. } => Some("sql"),
            Error::Evidence(toolledger_verify::Error::BadSizes { .. }) => Some("from"),
            _ => None,
        }
    }

    pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> Self {
        Error::InvalidParameter {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// Attaches a context to rusqlite errors.
pub(crate) trait SqlContext<T> {
    fn sql(self, context: &'static str) -> Result<T>;
}

impl<T> SqlContext<T> for rusqlite::Result<T> {
    fn sql(self, context: &'static str) -> Result<T> {
        self.map_err(|source| {
            if toolledger_projector::is_damaged(&source) {
                Error::ProjectionUnavailable {
                    source: Box::new(source),
                }
            } else {
                Error::Sql { context, source }
            }
        })
    }
}
