//! The Agent Tool v0.2.0 model and the ledger's event contract (DESIGN.md §3) as code.
//!
//! Every other crate speaks in these types: producers' events are decoded into them, ingest validates
//! against them, and the projector and exporter share the invocation state machine defined here.
//! Nothing here does I/O.
#![warn(missing_docs)]

pub mod class;
pub mod contract;
pub mod generator;
pub mod model;
pub mod state;
pub mod validate;

pub use class::{EventClass, UnknownClass};
