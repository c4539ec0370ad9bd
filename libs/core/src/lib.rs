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
pub mod tokens;

mod error;
pub use error::{Error, Result};

/// Makes every file and directory this process creates from now on private to its user (umask
/// 0077), whatever umask it was started with: projections, blobs, the identity index, exports,
/// checkpoint keys and tiles hold audit data that no other local user may read. Children (the local
/// nats-server) inherit it. Returns the umask the process had.
///
/// The systemd units set `UMask=0077` too; this covers `toolledger up` and manual runs.
pub fn restrict_new_files() -> u32 {
    use nix::sys::stat::{Mode, umask};
    umask(Mode::from_bits_truncate(0o077)).bits()
}

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
