//! Projections: ATL_LEDGER read in order into SQLite, with the position stored in the same
//! transaction as the rows it covers, so a rebuild equals the incremental result (DESIGN §6).
//!
//! ```text
//! ATL_LEDGER ─(ordered consumer from position+1)─▶ runner ─(bounded channel)─▶ writer thread
//!     ─▶ Store::apply_batch ─▶ apply::apply_entry per entry ─▶ SQLite (WAL) in gen-<n>/
//! ```
//!
//! Modules:
//! - [`runner`]: the services — [`run`] follows the ledger into the current generation, [`rebuild`]
//!   writes a new generation from seq 1 and switches `current` to it. NATS enters here.
//! - [`store`]: one projection database — schema ([`SCHEMA_SQL`], documented in
//!   `docs/projections.md`), position, [`Store::apply_batch`], [`Store::table_contents`].
//! - `apply` (private): what one entry does to the tables — the events index, the invocation
//!   through the one invocation fold ([`toolledger_schemas::fold`]: state, snapshot, inputs and
//!   mutations, error, tool; anomalies recorded, never dropped; each invocation's row written once
//!   per batch, or once per rebuild for most), decisions, hooks, progress, results, catalog,
//!   surfaces, deferred refs, sessions and the ledger's own records. Partial snapshots are merged field by field.
//! - [`generation`]: `<data_dir>/projections/gen-<n>/` and the atomically switched `current` pointer.
//! - [`sql`]: analysts' read-only SQL over one tenant's views, under an authorizer and time and row
//!   limits ([`run_sql`]).
//!
//! Data leaves as SQLite files that readers open read-only ([`Store::open_readonly`]) and reopen
//! to follow a rebuild.
#![warn(missing_docs)]

mod apply;
mod error;
pub mod generation;
pub mod runner;
pub mod sql;
pub mod store;

pub use error::{Error, Result};
pub use generation::{Generation, Generations};
pub use runner::{Options, RebuildSummary, RunSummary, rebuild, run};
pub use sql::{SqlLimits, SqlResult, SqlScope, run_sql};
pub use store::{RawEntry, SCHEMA_SQL, SCHEMA_VERSION, Store};
