//! The crate's one error type.

use std::path::PathBuf;

/// What can go wrong while projecting the ledger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A SQLite statement or transaction failed.
    #[error("sqlite ({context}): {source}")]
    Sqlite {
        /// What the projector was doing.
        context: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// A file or directory of the projection could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The ledger stream could not be read.
    #[error("ledger stream {stream}: {reason}")]
    Ledger {
        /// The stream's name.
        stream: String,
        /// What failed.
        reason: String,
    },
    /// The ledger skipped a sequence. ATL_LEDGER denies deletes, so a gap means the stream was
    /// tampered with or misconfigured; the projection stops rather than silently miss an entry.
    #[error("ledger gap: the projection is at seq {position}, the next entry read is seq {next}")]
    LedgerGap {
        /// The projection's position.
        position: u64,
        /// The sequence that was read.
        next: u64,
    },
    /// A rebuild's batch failed, taking the invocation folds it held in memory: the rebuild's
    /// database is incomplete and is discarded.
    #[error("a batch of this rebuild failed; its database is incomplete: run the rebuild again")]
    RebuildBroken,
    /// The database was written by a build with another schema: rebuild it.
    #[error("{path} has projection schema {found}, this build writes {expected}: run `toolledger rebuild`")]
    SchemaVersion {
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: String,
        /// The version this build writes.
        expected: String,
    },
    /// The `current` pointer of the projections directory names no usable generation.
    #[error("generation pointer {path}: {reason}")]
    BadPointer {
        /// The pointer file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// An analyst's statement does something the sandbox forbids (a write, ATTACH, a PRAGMA, a table
    /// outside the tenant's views, a denied function).
    #[error("sql refused: {reason}")]
    SqlRefused {
        /// What was refused.
        reason: String,
    },
    /// An analyst's statement ran past its time limit and was interrupted.
    #[error("sql interrupted: the statement ran longer than {limit_ms} ms")]
    SqlTimeout {
        /// The limit.
        limit_ms: u64,
    },
    /// An analyst's statement does not parse or fails in SQLite.
    #[error("sql error: {reason}")]
    SqlInvalid {
        /// SQLite's message.
        reason: String,
    },
    /// An analyst's statement would build a value, an answer or a working set larger than its bound.
    #[error("sql too large: {what} would exceed {limit_bytes} bytes")]
    SqlTooLarge {
        /// What outgrew its bound: a string or blob, the answer, SQLite's memory.
        what: &'static str,
        /// The bound.
        limit_bytes: u64,
    },
    /// An analyst's statement was stopped by its caller (the client went away, the server stops).
    #[error("sql canceled: the statement was stopped before it finished")]
    SqlCanceled,
    /// An invocation's stored fold (`invocations.fold`) does not parse: the database was damaged or
    /// written by another build. Rebuild it.
    #[error("stored invocation fold of {invocation_id} (tenant {tenant}) does not parse: {source}")]
    StoredFold {
        /// The tenant.
        tenant: String,
        /// The invocation.
        invocation_id: String,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The SQLite writer thread stopped unexpectedly.
    #[error("projection writer stopped: {reason}")]
    WriterStopped {
        /// Why.
        reason: String,
    },
}

impl Error {
    /// Whether the error says the projection itself cannot be used — its file is damaged, is not a
    /// database, cannot be read or opened, was written by another schema, or `current` names nothing
    /// usable — so the way out is `toolledger rebuild` (a new generation from the ledger), not a retry.
    pub fn is_unusable_projection(&self) -> bool {
        match self {
            Error::Sqlite { source, .. } => is_damaged(source),
            Error::SchemaVersion { .. } | Error::StoredFold { .. } | Error::BadPointer { .. } => true,
            _ => false,
        }
    }
}

/// Whether SQLite failed because of the database file rather than the statement: damaged pages
/// (`SQLITE_CORRUPT`), not a database (`SQLITE_NOTADB`), an I/O error reading it (`SQLITE_IOERR`), or
/// a file that cannot be opened (`SQLITE_CANTOPEN`). A server's fault, never its caller's.
pub fn is_damaged(error: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode;
    matches!(
        error.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseCorrupt
                | ErrorCode::NotADatabase
                | ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
        )
    )
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds a context to SQLite errors: `.sql("insert events")?`.
pub(crate) trait SqlContext<T> {
    fn sql(self, context: &str) -> Result<T>;
}

impl<T> SqlContext<T> for rusqlite::Result<T> {
    fn sql(self, context: &str) -> Result<T> {
        self.map_err(|source| Error::Sqlite {
            context: context.to_owned(),
            source,
        })
    }
}
