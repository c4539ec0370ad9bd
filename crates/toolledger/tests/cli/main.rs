//! The `toolledger` binary, run as a child process against real parts.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod faults;
mod init;
mod project;
mod tools;
mod up;
mod wire;

use std::path::Path;

/// The binary under test.
pub fn toolledger() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_toolledger"))
}
