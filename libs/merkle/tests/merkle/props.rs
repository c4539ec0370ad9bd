//! Property tests: proofs served from in-memory tiles for random tree sizes up to 100,000 leaves
//! verify, and stop verifying after any one-bit change or against a forged root.
//!
//! One log of 100,000 leaves is built once and flushed at its final size; a smaller tree is a prefix
//! of it, served from the same tiles (full tiles, or a prefix of a wider partial tile). Roots come
//! from the compact range, not from the tile reader under test.

use std::sync::OnceLock;

use proptest::prelude::*;
use toolledger_merkle::{
    CompactRange, Hash, TileReader, TileStore, TiledLog, verify_consistency, verify_inclusion,
};

use crate::common::{flip_bit, leaves, runtime};

const MAX_SIZE: u64 = 100_000;
/// Bounded so the suite stays fast in debug builds; raise with PROPTEST_CASES for a longer run.
const CASES: u32 = 32;

struct Fixture {
    leaves: Vec<Hash>,
    tiles: TileStore,
    /// Compact ranges every 1,024 leaves, so a root for any size costs at most 1,023 appends.
    snapshots: Vec<CompactRange>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let leaves = leaves(MAX_SIZE);
        let tiles = TileStore::in_memory();
        let mut snapshots = Vec::new();
        runtime().block_on(async {
            let mut log = TiledLog::new(tiles.clone());
            for (i, leaf) in leaves.iter().enumerate() {
                if i % 1024 == 0 {
                    snapshots.push(log.compact_range().clone());
                }
                log.append(*leaf).await.unwrap();
            }
            log.flush().await.unwrap();
        });
        Fixture {
            leaves,
            tiles,
            snapshots,
        }
    })
}

fn root_at(f: &Fixture, size: u64) -> Hash {
    let mut range = f.snapshots[(size / 1024) as usize].clone();
    for leaf in &f.leaves[range.size() as usize..size as usize] {
        range.append(*leaf);
    }
    range.root()
}

fn size_and_index() -> impl Strategy<Value = (u64, u64)> {
    (1..=MAX_SIZE).prop_flat_map(|size| (Just(size), 0..size))
}

fn size_pair() -> impl Strategy<Value = (u64, u64)> {
    (1..=MAX_SIZE).prop_flat_map(|new| (1..=new, Just(new)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn inclusion_proofs_verify_and_any_bit_flip_breaks_them(
        (size, index) in size_and_index(),
        target in any::<prop::sample::Index>(),
        bit in 0usize..256,
    ) {
        let f = fixture();
        let proof = runtime().block_on(TileReader::new(f.tiles.clone()).inclusion_proof(index, size)).unwrap();
        let root = root_at(f, size);
        let leaf = f.leaves[index as usize];
        prop_assert!(verify_inclusion(&leaf, index, size, &proof.hashes, &root).is_ok());
        prop_assert!(proof.hashes.len() <= 64 - (size - 1).leading_zeros() as usize);

        // Flip one bit in the leaf, the root, or one proof hash.
        let (mut leaf2, mut root2, mut hashes2) = (leaf, root, proof.hashes.clone());
        match target.index(proof.hashes.len() + 2) {
            0 => flip_bit(&mut leaf2, bit),
            1 => flip_bit(&mut root2, bit),
            k => flip_bit(&mut hashes2[k - 2], bit),
        }
        prop_assert!(verify_inclusion(&leaf2, index, size, &hashes2, &root2).is_err());
    }

    #[test]
    fn consistency_proofs_verify_and_forged_roots_fail(
        (old, new) in size_pair(),
        target in any::<prop::sample::Index>(),
        bit in 0usize..256,
    ) {
        let f = fixture();
        let proof = runtime().block_on(TileReader::new(f.tiles.clone()).consistency_proof(old, new)).unwrap();
        let (old_root, new_root) = (root_at(f, old), root_at(f, new));
        prop_assert!(verify_consistency(old, new, &proof.hashes, &old_root, &new_root).is_ok());

        let (mut old2, mut new2) = (old_root, new_root);
        if target.index(2) == 0 { flip_bit(&mut old2, bit) } else { flip_bit(&mut new2, bit) }
        prop_assert!(verify_consistency(old, new, &proof.hashes, &old2, &new2).is_err());
        if !proof.hashes.is_empty() {
            let mut hashes2 = proof.hashes.clone();
            let k = target.index(hashes2.len());
            flip_bit(&mut hashes2[k], bit);
            prop_assert!(verify_consistency(old, new, &hashes2, &old_root, &new_root).is_err());
        }
    }
}
