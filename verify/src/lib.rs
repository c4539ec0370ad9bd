//! Verification of the ledger against its signed checkpoints, and proofs anyone can check offline.
//!
//! ```text
//! ATL_CHECKPOINTS ─read─▶ signed notes ─Checkpoint::open(Verifiers)─▶ trusted sizes + roots ─┐
//! ATL_LEDGER ─ordered consumer─▶ entry bytes ─leaf_hash─▶ CompactRange ─root at each size───┼─▶ Report
//! tile store (optional) ─check_tiles, leaf by leaf, consistency proofs───────────────────────┤   (findings,
//! live stream configs ─weaknesses against DESIGN §2──────────────────────────────────────────┘    first bad position)
//!
//! prove_inclusion(seq) / prove_consistency(a, b) ─▶ JSON: entry, leaf hash, proof hashes (hex),
//!                                                     signed checkpoint note(s)
//!                                                   ─▶ checked with toolledger_merkle functions alone
//! ```
//!
//! Modules:
//! - [`mod@verify`]: [`verify_ledger`], the [`Report`] and its typed [`Finding`]s.
//! - [`prove`]: [`prove_inclusion`] and [`prove_consistency`], their JSON outputs and offline checks.
//! - [`bundle`]: evidence bundles (`docs/evidence-bundles.md`): [`bundle::build_bundle`] from NATS and a
//!   blob store, [`bundle::verify_bundle`] offline with the verifier key alone.
//!
//! - [`directory`]: a partitioned ledger's directory entries against the checkpoints they name.
//! - [`backup`]: the two streams to files and back into a fresh contract, byte for byte.
//!
//! Data enters from NATS (the two streams and their live configurations), read through
//! `toolledger-ledger`'s ordered reader, and an optional tile and blob store; it leaves as a report
//! and as JSON proofs. Only [`backup::restore`] writes (into empty streams).
#![warn(missing_docs)]

pub mod backup;
pub mod bundle;
pub mod directory;
mod error;
pub mod prove;
pub mod verify;

pub use error::{Error, Result};
pub use prove::{
    ConsistencyOutput, InclusionOutput, ProveSource, SignedCheckpoint, TrustedCache, WitnessedCheckpoint,
    prove_consistency, prove_inclusion, signed_checkpoint, witnessed_checkpoint,
};
pub use verify::{Finding, MonitorEvent, Placement, Progress, Report, VerifyOptions, monitor, verify_ledger};

/// Lowercase hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    toolledger_wire::entry::hex(bytes)
}

/// Parses a 32-byte hash from lowercase or uppercase hex.
pub fn parse_hash(text: &str) -> Option<toolledger_merkle::Hash> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(hash)
}
