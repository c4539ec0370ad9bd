//! The pieces every toolledger stage shares.
//!
//! - [`config`]: one TOML file plus `TOOLLEDGER_*` environment overrides, validated at start with
//!   errors that name the offending key.
//! - [`telemetry`]: `tracing` set up once per process, a Prometheus registry, and the small HTTP server
//!   every long-running service exposes for `/metrics` and `/healthz`.
//! - [`nats_server`]: a managed local `nats-server` child process with JetStream, used by
//!   `toolledger up` when no NATS URL is configured and by the test fixtures.
//!
//! Data enters here only as configuration files and environment variables; nothing in this crate
//! touches the ledger itself.
#![warn(missing_docs)]

pub mod config;
pub mod nats_server;
pub mod telemetry;

mod error;
pub use error::{Error, Result};

/// Free and total bytes of the file system that holds `path` (for `toolledger doctor` and bulk
/// loaders that check space before they start).
pub fn disk_space(path: &std::path::Path) -> std::io::Result<(u64, u64)> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    let block = stat.fragment_size();
    Ok((
        stat.blocks_available().saturating_mul(block),
        stat.blocks().saturating_mul(block),
    ))
}
