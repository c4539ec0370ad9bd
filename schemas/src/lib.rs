//! The Agent Tool v0.2.0 model and the ledger's event contract (DESIGN.md §3) as code.
//!
//! Every other crate speaks in these types: producers' events are decoded into them, ingest validates
//! against them, and the projector and exporter share the invocation state machine and the invocation fold
//! defined here.
//! Nothing here does I/O beyond reading a caller's reader ([`validate::validate_stream`]).
//!
//! - [`class`]: the event classes (CloudEvents `type`).
//! - [`model`]: the spec's objects and the ledger's own shapes, typed and round-trippable, with their
//!   open and closed vocabularies.
//! - [`contract`]: DESIGN.md §3's table — class → data object → subject → effect; decodes `data`.
//! - [`state`]: the invocation state machine, `step(track, facts) → (track, anomalies)`.
//! - [`fold`]: the one invocation fold — an invocation's entries in ledger order give its track,
//!   merged snapshot, four inputs and their mutations, error, tool id and anomalies. The projector's
//!   SQLite rows and the exporter's Parquet rows both come from it.
//! - [`validate`]: the project's JSON Schemas (`schemas/`, embedded) — validates CloudEvents, plain
//!   `agenttool-event` bodies and bare objects, reporting every violation with its JSON Pointer;
//!   `validate_stream` reads JSON, JSON arrays or NDJSON for `toolledger validate` (`validate_stream_with`
//!   lets it put ingest's own refusals, such as the id grammar, first).
//! - [`generator`]: seeded, realistic sessions of all 27 classes, with the scenario script's own
//!   [`generator::Truth`] for tests (never derived from [`state`]).
#![warn(missing_docs)]

pub mod class;
pub mod contract;
pub mod fold;
pub mod generator;
pub mod model;
pub mod state;
pub mod validate;

pub use class::{EventClass, UnknownClass};
pub use contract::{
    ClassifiedEvent, Contract, Data, DataObject, Effect, EventAttributes, SubjectField, contract,
};
pub use fold::{Applied, FoldEntry, InvocationFold, InvocationLog};
pub use model::{UnknownValue, UnknownValues};
pub use state::{Anomaly, AnomalyKind, EventFacts, EventTime, InvocationState, InvocationTrack, step};
pub use validate::{
    EventError, ObjectKind, Report, Violation, validate_event, validate_stream, validate_stream_with,
};
