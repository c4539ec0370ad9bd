//! Helpers shared by the test modules.

use toolledger_merkle::Hash;

pub fn hex_decode(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn hash_from_hex(s: &str) -> Hash {
    Hash::try_from(hex_decode(s).as_slice()).unwrap()
}

/// Deterministic, distinct leaf hashes.
pub fn leaves(n: u64) -> Vec<Hash> {
    (0..n)
        .map(|i| toolledger_merkle::leaf_hash(&i.to_be_bytes()))
        .collect()
}

/// A current-thread runtime for the async tile APIs inside synchronous tests (proptest).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

pub fn flip_bit(hash: &mut Hash, bit: usize) {
    hash[bit / 8 % 32] ^= 1 << (bit % 8);
}
