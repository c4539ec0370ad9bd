//! Ingest: the only writer of ATL_LEDGER.
//!
//! ```text
//! ATL_INBOUND ─▶ decode ▸ validate ▸ scrub ▸ dedupe ▸ offload ▸ canonicalize ▸ leaf hash ▸ append ─▶ ATL_LEDGER
//!                  └─ rejects ─▶ ATL_QUARANTINE (+ a receipt entry in the ledger)
//! ```
//!
//! - [`lease`]: the single-writer lease in the `ATL_LEASES` bucket.
//! - [`append`]: pipelined appends conditional on the ledger's last sequence, with read-back
//!   reconciliation by leaf hash after any failure.
#![warn(missing_docs)]

pub mod append;
pub mod lease;

mod error;
pub use error::{Error, Result};
