//! The Parquet exporter: ATL_LEDGER and ATL_CHECKPOINTS ─▶ an analyst's archive in an object store
//! (DESIGN §6), and the offline check of such an archive (`toolledger verify --parquet`).
//!
//! ```text
//! ATL_LEDGER ─ordered consumer─▶ exporter ─spawn_blocking─▶ rows::Tracker (entry ─▶ rows; the invocation fold)
//!                                   │ range closed (rows_per_file entries or max_delay)
//!                                   ▼
//!      <prefix>/<table>/_manifest/<first>-<last>.json          written first: the file boundary
//!      <prefix>/<table>/tenant=<t>/event_date=<d>/part-<first>-<last>.parquet   create-only, zstd
//! ATL_CHECKPOINTS ─▶ <prefix>/checkpoints/part-<first>-<last>.parquet   (sizes the archive covers)
//!
//! archive ─verify::verify_archive(Verifiers)─▶ ArchiveReport (first bad ledger position)
//! ```
//!
//! Modules:
//! - [`exporter`]: the service ([`run`]): recovery from manifests, following, rotation, puts.
//! - [`rows`]: one entry ─▶ its `events` row, decision and result rows; a range ─▶ a version of each
//!   invocation it changed (`invocations`), read from [`toolledger_schemas::fold`] (the projector's
//!   too).
//! - [`tables`]: the versioned Arrow schemas ([`tables::SCHEMA_VERSION`], `docs/parquet.md`), batches
//!   and the deterministic Parquet encoding.
//! - [`manifest`]: manifests, their names and the recovered position.
//! - [`store`]: the archive's object store ([`Archive`]): opening by URL, create-only puts.
//! - [`verify`]: [`verify_archive`] from `events` and `checkpoints` alone.
//!
//! Data enters from NATS (the two streams) and leaves as objects in the archive; verification reads
//! only the archive.
#![warn(missing_docs)]

mod error;
pub mod exporter;
pub mod manifest;
pub mod rows;
pub mod store;
pub mod tables;
pub mod verify;

pub use error::{Error, Result};
pub use exporter::{Options, Progress, ProgressFn, Summary, run};
pub use store::{Archive, PutOutcome};
pub use tables::{SCHEMA_VERSION, Table};
pub use verify::{ArchiveReport, Finding, verify_archive};
