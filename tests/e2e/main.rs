//! The `toolledger` binary, run as a child process against real parts.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod backup;
mod bench;
mod bundle;
mod cluster;
mod erase;
mod export;
mod faults;
mod fixture;
mod health;
mod ids;
mod import;
mod init;
mod missing_field;
mod otlp;
mod partitions;
mod producers;
mod project;
mod query;
mod replay;
mod sdk_python;
mod sdk_rust;
mod sdk_typescript;
mod secrets;
mod sql;
mod tools;
mod up;
mod web;
mod wire;
mod witness;

use std::path::Path;

/// The binary under test.
pub fn toolledger() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_toolledger"))
}
