//! Ingest: the only writer of ATL_LEDGER.
//!
//! ```text
//! ATL_INBOUND ─▶ decode ▸ validate ▸ scrub ▸ dedupe ▸ offload ▸ canonicalize ▸ leaf hash ▸ append ─▶ ATL_LEDGER
//!                  └─ rejects ─▶ ATL_QUARANTINE (+ a receipt entry in the ledger)
//! ```
//!
//! - [`session`]: the loop that fetches, appends and acks around the pipeline (entry point:
//!   [`session::run`]).
//! - [`pipeline`]: what happens to each inbound message: decode ▸ validate ▸ scrub ▸ seal ▸ dedupe,
//!   offload, and the scrubbed original of a rejection.
//! - [`lease`]: the single-writer lease in the `ATL_LEASES` bucket.
//! - [`append`]: pipelined appends conditional on the ledger's last sequence, with read-back
//!   reconciliation by leaf hash after any failure.
//! - [`checkpoint`]: the Merkle tree over the ledger (tiles) and signed checkpoints to ATL_CHECKPOINTS.
//! - [`witnessing`]: each new checkpoint sent to the configured witnesses; their cosignatures to
//!   ATL_COSIGNATURES.
//! - [`directory`]: the directory of a partitioned ledger, one entry per change of any partition's
//!   latest checkpoint, signed as a log of its own.
//! - [`dedupe`]: the identity index, duplicate detection for all time, rebuildable from the ledger.
//! - [`quarantine`]: rejected originals to ATL_QUARANTINE and their receipts.
//! - [`partition_rule`]: the partition rule's record, appended to p0 of a partitioned ledger.
//! - [`poison`]: messages the client cannot read, caught after `max_deliver` and fetched raw.
//! - [`metrics`]: what `/metrics` shows of ingest.
//! - [`scrub`]: secrets replaced by HMAC markers; declared sensitive fields per tool.
//! - [`payload`]: large and erasable fields and producer uploads moved to the blob store.
//!
//! Ledger reads (the appender's read-back, the tree's restore), the blob store and the tile store
//! come from `toolledger-ledger`, which every reader shares; so do erasure and quarantine
//! administration, which ingest only records and publishes for.
//!
//! Data enters as ATL_INBOUND messages and leaves as ATL_LEDGER entries, ATL_QUARANTINE originals
//! and inbound acks.
#![warn(missing_docs)]

pub mod append;
pub mod checkpoint;
pub mod dedupe;
pub mod directory;
pub mod lease;
pub mod metrics;
pub mod partition_rule;
pub mod payload;
pub mod pipeline;
pub mod poison;
pub mod quarantine;
pub mod scrub;
pub mod session;
pub mod witnessing;

mod error;
pub use error::{Error, Result};
