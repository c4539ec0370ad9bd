//! The tamper-evidence engine: the RFC 6962 Merkle tree over ledger entries, its C2SP tiles, signed
//! checkpoints and proofs. Independent of NATS, so it can be tested on its own.
#![warn(missing_docs)]

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
