//! Ingest: the only writer of ATL_LEDGER.
//!
//! ```text
//! ATL_INBOUND ─▶ decode ▸ validate ▸ scrub ▸ dedupe ▸ offload ▸ canonicalize ▸ leaf hash ▸ append ─▶ ATL_LEDGER
//!                  └─ rejects ─▶ ATL_QUARANTINE (+ a receipt entry in the ledger)
//! ```
#![warn(missing_docs)]
