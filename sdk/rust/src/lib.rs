//! The Rust producer SDK of toolledger: Agent Tool v0.2.0 lifecycle events as binary-mode CloudEvents on
//! NATS JetStream (`atl.in.<tenant>.<event class>`), stored in a durable local spool before `emit`
//! returns and removed only once ATL_INBOUND has acknowledged them. It mirrors the Python SDK
//! (`sdk/python`), and its spool is byte-compatible with it (`docs/sdk/spool.md`).
//!
//! ```text
//! Tool, Invocation, Hook, …  ─▶ events::EventBuilder ─▶ Event (structured CloudEvent, stable id)
//! InvocationGuard (planned ─▶ started ─▶ succeeded | failed | timed_out | canceled, on drop: canceled)
//!        │
//!        ▼
//! Producer::emit ─▶ wire::binary_message (checks; ce-* headers, percent-encoded; Nats-Msg-Id)
//!                ─▶ uploads::extract (large values become {"$upload": …} references)
//!                ─▶ spool::Spool::append (sidecars fdatasync'ed first; one write(2), fdatasync per
//!                   policy) ─▶ emit returns
//! sender task    ─▶ Spool::head ─▶ object store puts of a record's uploads
//!                ─▶ JetStream publish (in order, up to max_in_flight) ─▶ PubAck
//!                ─▶ Spool::ack (ack file, compaction) ─▶ on failure: capped backoff, window 1
//! ```
//!
//! Modules:
//! - [`events`]: the data objects of the official schemas (typed, unknown fields kept), [`Tool`] and its
//!   declaration, [`EventBuilder`] and [`Event`], stable ids exactly as the Python SDK computes them.
//! - [`wire`]: the NATS side of the contract: tenant and id grammar, I-JSON checks, the binary-mode
//!   headers, `Nats-Msg-Id`, the inbound subject.
//! - [`spool`]: the durable spool (segments, ack file, compaction, torn-tail recovery, lock, bounded
//!   disk with a block or fail policy, fsync every event or every N ms).
//! - [`uploads`]: which values of an event travel through the tenant's payload bucket
//!   (`ATL_PAYLOADS_<tenant>`) as `{"$upload": …}` references, and the object names, exactly as the
//!   Python SDK chooses them; the spool keeps their bytes in durable sidecars until the sender puts
//!   them.
//! - [`producer`]: [`Producer`]: `emit`, the background sender, `flush`, `close`, metrics.
//! - [`invocation`]: [`InvocationGuard`], one tool call's lifecycle, with permission, hook and progress
//!   helpers.
//!
//! Data enters as values the caller builds (or the guard builds for it) and leaves as NATS messages
//! published to ATL_INBOUND; in between it lives only in the spool directory, 0700 with 0600 files,
//! because records hold events before ingest scrubs them.
//!
//! W3C trace context: pass a [`TraceContext`] (from your OpenTelemetry propagator or an incoming
//! `traceparent` header) to [`EventBuilder::with_trace`], [`Stamp`] or [`InvocationOptions`]; with the
//! `opentelemetry` feature, events given none carry the ambient span's (`TraceContext::current`).
#![warn(missing_docs)]

pub mod events;
pub mod invocation;
pub mod producer;
pub mod spool;
pub mod uploads;
pub mod wire;

use std::path::PathBuf;

pub use events::{
    Behavior, Event, EventBuilder, Hook, HookEvent, HookPhase, HookStage, Invocation, InvocationClass,
    Lifecycle, PermissionDecision, PermissionRequest, Progress, ResultClass, Stamp, Tool, ToolError,
    ToolResult, TraceContext,
};
pub use invocation::{Finished, InvocationGuard, InvocationOptions, ToolFailure, error_of};
pub use producer::{Metrics, Producer, ProducerConfig};
pub use spool::{FsyncPolicy, FullPolicy, SpoolConfig, Upload};

/// What can go wrong producing an event. An `emit` that returned an error stored nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event the ledger would refuse (quarantine): `path` names the field, `reason` says why.
    #[error("invalid event: {path}: {reason}")]
    InvalidEvent {
        /// The attribute or JSON Pointer into the event (`/tenant`, `/data/model_input/n`).
        path: String,
        /// Why the ledger would refuse it.
        reason: String,
    },
    /// The spool holds `max_bytes` and no room was freed in time (or the policy is `fail`): the event
    /// was NOT stored. Retry later, or raise `max_bytes`.
    #[error("spool {dir} is full: {used} of {max} bytes ({reason})")]
    SpoolFull {
        /// The spool directory.
        dir: PathBuf,
        /// Bytes of segment files and upload sidecars on disk.
        used: u64,
        /// The configured bound.
        max: u64,
        /// What was waited for, or why the event can never fit.
        reason: String,
    },
    /// Another process (or another `Producer` in this one) has the spool directory open.
    #[error("spool {dir} is in use by another producer")]
    SpoolLocked {
        /// The spool directory.
        dir: PathBuf,
    },
    /// The producer or its spool was closed.
    #[error("the producer is closed")]
    Closed,
    /// A stored record that fails its checksum or cannot be decoded.
    #[error("spool {dir}: record at segment {segment} byte {offset} is corrupt: {reason}")]
    CorruptRecord {
        /// The spool directory.
        dir: PathBuf,
        /// The segment number.
        segment: u64,
        /// The record's first byte in the segment.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An upload sidecar whose bytes do not match the size and sha256 its record names: the sender
    /// reports it and retries; it never publishes a reference to bytes it could not check.
    #[error("upload sidecar {path}: {reason}")]
    CorruptUpload {
        /// The sidecar.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file operation on the spool failed.
    #[error("spool i/o on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidEvent {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
