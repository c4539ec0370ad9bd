//! Projections: ATL_LEDGER read in order into SQLite, with the position stored in the same
//! transaction as the rows it covers, so a rebuild equals the incremental result (DESIGN §6).
//!
//! ```text
//! ATL_LEDGER ─(ordered consumer from position+1)─▶ runner ─(bounded channel)─▶ writer thread
//!     ─▶ Store::apply_batch ─▶ apply::apply_entry per entry ─▶ SQLite (WAL) in gen-<n>/
//! ```
//!
//! Modules:
//! - [`runner`]: the services — [`run`] follows one ledger partition into its current generation
//!   ([`run_partitions`] several in one process, each from its own position), [`rebuild`] writes a
//!   new generation from seq 1 and switches `current` to it. NATS enters here.
//! - [`store`]: one projection database — schema ([`SCHEMA_SQL`], documented in
//!   `docs/projections.md`), position, [`Store::apply_batch`], [`Store::table_contents`].
//! - `apply` (private): what one entry does to the tables — the events index, the invocation
//!   through the one invocation fold ([`toolledger_schemas::fold`]: state, snapshot, inputs and
//!   mutations, error, tool; anomalies recorded, never dropped; each invocation's row written once
//!   per batch, or once per rebuild for most), decisions, hooks, progress, results, catalog,
//!   surfaces, deferred refs, sessions and the ledger's own records. Partial snapshots are merged field by field.
//! - [`generation`]: the generation directories and the atomically switched `current` pointer,
//!   `<data_dir>/projections/gen-<n>/` (`projections-p<K>/` for partition K ≥ 1).
//! - [`heartbeat`]: the running projector's state in `<data_dir>/projections/projector.heartbeat`
//!   (each partition's in its own projections directory),
//!   rewritten every few seconds, so the query service and `doctor` can tell whether it projects.
//! - [`sql`]: analysts' read-only SQL over one tenant's views of allow-listed tables, under an
//!   authorizer, a check of the compiled program, and bounds on time, value and answer size and
//!   SQLite's memory; stoppable from another thread ([`run_sql`], [`run_sql_interruptible`]).
//!
//! Data leaves as SQLite files that readers open read-only ([`Store::open_readonly`]) and reopen
//! to follow a rebuild.
#![warn(missing_docs)]

mod apply;
mod error;
pub mod generation;
pub mod heartbeat;
pub mod runner;
pub mod sql;
pub mod store;

pub use error::{Error, Result, is_damaged};
pub use generation::{Generation, Generations};
pub use heartbeat::{Heartbeat, ProjectorState};
pub use runner::{Metrics, Options, RebuildSummary, RunSummary, rebuild, run, run_partitions};
pub use sql::{SqlInterrupt, SqlLimits, SqlResult, SqlScope, TENANT_TABLES, run_sql, run_sql_interruptible};
pub use store::{DecodedBatch, RawEntry, SCHEMA_SQL, SCHEMA_VERSION, Store};
