//! Native tool-call records from the seed systems, mapped faithfully to Agent Tool v0.2.0 events.
//!
//! Many platforms do not emit Agent Tool events yet. This crate takes their own records in and turns
//! each into the structured CloudEvents `toolledger emit` publishes, keeping every native id in the
//! invocation's `native_call_id` and `external_mappings` (where the projector indexes them into
//! `invocation_external_ids`) and in each declaration's `external_mappings`.
//!
//! ```text
//! file (JSON value, JSON array or NDJSON) ─▶ records with their location (file:line, file[i])
//!   ─▶ Importer::map_record (one mapper per system, stateful across a file: requests wait for their
//!      responses, versions are checked for monotonicity)
//!   ─▶ events (deterministic ids, record or synthesized times) ─▶ each validated by the project's
//!      validator ─▶ RecordOutcome: mapped (events, notes of dropped fields) | rejected (reason)
//! ```
//!
//! One bad record never stops the rest: it becomes a rejected [`RecordOutcome`] and the next record
//! is mapped. Nothing here does I/O; `toolledger import` reads files and publishes.
//!
//! Modules, one per source system, plus the shared event builder:
//! - [`nact`]: N-ACT tool signatures and `:invoke` exchanges (5xx → failed attempt, then retry).
//! - [`otc`]: Open Tool Calling definitions, requests and responses (secrets dropped here).
//! - [`toolproto`]: Tool Protocol schemas (`_tool`, `_activity`, `_output`) and calls (latent vs explicit).
//! - [`mcp`]: MCP `tools/list` and `tools/call` JSON-RPC logs.
//! - [`openai`]: function-calling logs (`tool_calls`, results by `tool_call_id`).
//! - `event` (private): ids, the clock, the CloudEvent envelope and snapshots every mapper shares.
//!
//! `docs/import.md` has each mapping as a table, what is dropped and why, and how ids are built.
#![warn(missing_docs)]

mod event;
pub mod mcp;
pub mod nact;
pub mod openai;
pub mod otc;
pub mod otlp;
pub mod toolproto;

use serde::Serialize;
use serde_json::Value;

pub use event::DEFAULT_START;

/// Errors of this crate: why a record was rejected, or why an import cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The record is not valid JSON (or not I-JSON).
    #[error("unreadable record: {reason}")]
    Unreadable {
        /// The parser's reason.
        reason: String,
    },
    /// The record does not have the shape the system's specification gives it.
    #[error("malformed {system} record: {reason}")]
    Malformed {
        /// The source system.
        system: &'static str,
        /// What is missing or wrong.
        reason: String,
    },
    /// A response, result or follow-up names a call that no earlier record opened.
    #[error("unmatched {system} record: {reason}")]
    Unmatched {
        /// The source system.
        system: &'static str,
        /// Which id matched nothing.
        reason: String,
    },
    /// An N-ACT tool version that does not increase monotonically, or a changed signature that
    /// kept its version (N-ACT §6.1).
    #[error("version not monotonic for tool {tool_id}: {reason}")]
    VersionNotMonotonic {
        /// The N-ACT toolId.
        tool_id: String,
        /// What was seen.
        reason: String,
    },
    /// A mapped event failed the project's validator (a mapper bug or an unmappable value).
    #[error("mapped {class} event is invalid: {reason}")]
    InvalidEvent {
        /// The event class.
        class: String,
        /// The validator's violations.
        reason: String,
    },
    /// An option is unusable (a tenant that is not a subject token, an unparsable start time).
    #[error("bad option {option}: {reason}")]
    BadOption {
        /// The option.
        option: &'static str,
        /// Why.
        reason: String,
    },
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The source systems, each a `--format` of `toolledger import`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Format {
    /// N-ACT (IETF draft): tool signatures and `:invoke` request/response exchanges.
    Nact,
    /// Open Tool Calling: tool definitions, tool requests and tool responses.
    Otc,
    /// Tool Protocol / Agent Tool (schemas with `_tool`, `_activity`, `_output`; calls).
    ToolProto,
    /// MCP JSON-RPC logs (`tools/list`, `tools/call`).
    Mcp,
    /// Function-calling logs (OpenAI-style `tool_calls` and `tool` messages).
    OpenAi,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 5] = [
        Format::Nact,
        Format::Otc,
        Format::ToolProto,
        Format::Mcp,
        Format::OpenAi,
    ];

    /// The `--format` name, also the `source` of the native ids it records.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Nact => "nact",
            Format::Otc => "otc",
            Format::ToolProto => "toolproto",
            Format::Mcp => "mcp",
            Format::OpenAi => "openai",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = Error;

    fn from_str(name: &str) -> Result<Format> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| Error::BadOption {
                option: "format",
                reason: format!("`{name}` is not one of nact, otc, toolproto, mcp, openai"),
            })
    }
}

/// How an import names and times what it produces.
#[derive(Debug, Clone)]
pub struct Options {
    /// The tenant every event is for (the `tenant` extension).
    pub tenant: String,
    /// The session for records that carry none (MCP session and OTC run_id take precedence).
    pub session: Option<String>,
    /// Unix milliseconds from which times are synthesized, 1 ms apart, for records without
    /// timestamps; [`DEFAULT_START`] unless given, so a re-import yields identical events.
    pub start_ms: i64,
}

impl Options {
    /// Options for `tenant`, no session, times synthesized from [`DEFAULT_START`].
    pub fn new(tenant: &str) -> Options {
        Options {
            tenant: tenant.to_owned(),
            session: None,
            start_ms: event::default_start_ms(),
        }
    }
}

/// Parses an RFC 3339 time (`--start`) to Unix milliseconds.
pub fn parse_start(text: &str) -> Result<i64> {
    event::parse_rfc3339(text).ok_or_else(|| Error::BadOption {
        option: "start",
        reason: format!("`{text}` is not an RFC 3339 time"),
    })
}

/// What became of one record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordOutcome {
    /// Where the record was: `file:line` (NDJSON) or `file[index]` (JSON array) or `file`.
    pub location: String,
    /// The events produced, structured CloudEvents in publish order (empty when rejected, or when
    /// the record carries nothing to record, such as a `tools/list` request).
    pub events: Vec<Value>,
    /// Fields deliberately not copied (secrets, tokens) and other facts a reader of the report
    /// should know, by field name only.
    pub notes: Vec<String>,
    /// Why the record was rejected; `None` when it mapped.
    pub rejected: Option<String>,
}

impl RecordOutcome {
    /// Whether the record mapped.
    pub fn is_ok(&self) -> bool {
        self.rejected.is_none()
    }
}

/// What a mapper produces for one record.
#[derive(Debug, Default)]
pub(crate) struct Mapped {
    pub events: Vec<Value>,
    pub notes: Vec<String>,
}

/// A mapper for one source system; stateful across the records of one file.
pub(crate) trait Mapper {
    /// Maps one record.
    fn map(&mut self, ctx: &mut event::Ctx, record: &Value) -> Result<Mapped>;
}

/// Maps the records of one file, in order, with one system's mapper.
pub struct Importer {
    ctx: event::Ctx,
    mapper: Box<dyn Mapper + Send>,
}

impl std::fmt::Debug for Importer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Importer")
            .field("system", &self.ctx.system)
            .finish()
    }
}

impl Importer {
    /// An importer for `format`; fails when the tenant is not a valid subject token.
    pub fn new(format: Format, options: &Options) -> Result<Importer> {
        toolledger_wire::Tenant::parse(&options.tenant).map_err(|e| Error::BadOption {
            option: "tenant",
            reason: e.to_string(),
        })?;
        let mapper: Box<dyn Mapper + Send> = match format {
            Format::Nact => Box::new(nact::NactMapper::default()),
            Format::Otc => Box::new(otc::OtcMapper::default()),
            Format::ToolProto => Box::new(toolproto::ToolProtoMapper::default()),
            Format::Mcp => Box::new(mcp::McpMapper::default()),
            Format::OpenAi => Box::new(openai::OpenAiMapper::default()),
        };
        Ok(Importer {
            ctx: event::Ctx::new(format.as_str(), options),
            mapper,
        })
    }

    /// Maps one record; its events are validated before they are returned, and a record with an
    /// invalid event is rejected whole.
    pub fn map_record(&mut self, location: &str, record: &Value) -> RecordOutcome {
        let outcome = self.mapper.map(&mut self.ctx, record).and_then(|mapped| {
            for event in &mapped.events {
                if let Err(error) = toolledger_schemas::validate_event(event) {
                    return Err(Error::InvalidEvent {
                        class: event["type"].as_str().unwrap_or("?").to_owned(),
                        reason: error.to_string(),
                    });
                }
            }
            Ok(mapped)
        });
        match outcome {
            Ok(mapped) => RecordOutcome {
                location: location.to_owned(),
                events: mapped.events,
                notes: mapped.notes,
                rejected: None,
            },
            Err(error) => RecordOutcome {
                location: location.to_owned(),
                events: Vec::new(),
                notes: Vec::new(),
                rejected: Some(error.to_string()),
            },
        }
    }

    /// Maps every record of a file's bytes: one JSON value, a JSON array of records, or NDJSON
    /// (auto-detected); an unreadable line is rejected and the rest are still mapped.
    pub fn map_file(&mut self, name: &str, bytes: &[u8]) -> Vec<RecordOutcome> {
        toolledger_wire::produce::read_events(name, bytes)
            .into_iter()
            .map(|record| match record.value {
                Ok(value) => self.map_record(&record.location, &value),
                Err(error) => RecordOutcome {
                    location: record.location,
                    events: Vec::new(),
                    notes: Vec::new(),
                    rejected: Some(
                        Error::Unreadable {
                            reason: error.to_string(),
                        }
                        .to_string(),
                    ),
                },
            })
            .collect()
    }
}

/// Maps a whole file with a fresh importer: the convenience most callers want.
pub fn map_file(format: Format, options: &Options, name: &str, bytes: &[u8]) -> Result<Vec<RecordOutcome>> {
    Ok(Importer::new(format, options)?.map_file(name, bytes))
}
