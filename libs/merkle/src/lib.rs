//! The tamper-evidence engine: the RFC 6962 Merkle tree over ledger entries, its C2SP tiles, signed
//! checkpoints and proofs. Independent of NATS, so it can be tested on its own.
//!
//! # Data flow
//!
//! ```text
//! entry bytes ─leaf_hash─▶ TiledLog::append ─▶ tiles (tile/<L>/<N>[.p/<W>]) in an object store
//!                               │ flush + root
//!                               ▼
//!                 Checkpoint { origin, size, root } ─sign(NoteSigner)─▶ signed note text
//!
//! signed note ─Checkpoint::open(Verifiers)─▶ trusted size + root
//! signed note ─witness (consistency proof from its last)─▶ CosignatureSigner::cosign ─▶ `— w …` line
//! note + witness lines ─Cosigners::verify─▶ which witnesses vouched for this tree, and when
//! tiles ─TileReader─▶ InclusionProof / ConsistencyProof ─verify_*(root)─▶ Ok or a named failure
//! ```
//!
//! Entries enter as canonical bytes (hashed by the caller with [`leaf_hash`]); tiles leave through the
//! `object_store` crate (local filesystem, memory, S3, …); checkpoints leave as C2SP signed-note text
//! that the caller publishes. Verification needs no store: only hashes, proofs and a verifier key.
//!
//! # Modules
//!
//! - [`tree`]: node hashing and the [`CompactRange`], the O(log n) state of an append-only tree.
//! - [`proof`]: proof shapes and the pure functions [`verify_inclusion`] and [`verify_consistency`].
//! - [`tile`]: C2SP tile addressing ([`TileId`]) and arithmetic.
//! - [`store`]: tiles in an object store ([`TileStore`]), create-only writes.
//! - [`bundle`]: entry bundles beside the level-0 tiles, so a proof reads its entry from the store.
//! - [`log`]: the writer ([`TiledLog`]): appends, flushes tiles, resumes, rebuilds from leaf hashes.
//! - [`reader`]: proofs and roots served from tiles ([`TileReader`]) and checking tiles against a root.
//! - [`note`]: C2SP signed notes, Ed25519 signer and verifier keys, the trusted key set.
//! - [`checkpoint`]: the C2SP tlog checkpoint body and its signing and opening.
//! - [`cosignature`]: C2SP `cosignature/v1` witness keys, cosigning and checking cosignatures.
#![warn(missing_docs)]

pub mod bundle;
pub mod checkpoint;
pub mod cosignature;
mod error;
pub mod log;
pub mod note;
pub mod proof;
pub mod reader;
pub mod store;
pub mod tile;
pub mod tree;

pub use checkpoint::Checkpoint;
pub use cosignature::{
    CosignatureSigner, CosignatureVerifier, Cosigners, VerifiedCosignature, WitnessPolicy, WitnessVerdict,
};
pub use error::{Error, Result};
pub use log::TiledLog;
pub use note::{Note, NoteSigner, NoteVerifier, Verifiers, sign_note};
pub use proof::{ConsistencyProof, InclusionProof, verify_consistency, verify_inclusion};
pub use reader::TileReader;
pub use store::{TileStore, WriteMode};
pub use tile::TileId;
pub use tree::{CompactRange, empty_root, node_hash};

/// A SHA-256 digest: a leaf hash, an interior node, a root.
pub type Hash = [u8; 32];

/// The RFC 6962 leaf hash of a ledger entry's canonical bytes: `SHA-256(0x00 || entry)`.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    hasher.update([0u8]);
    hasher.update(entry);
    hasher.finalize().into()
}
