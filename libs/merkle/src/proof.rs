//! Inclusion and consistency proofs: which subtrees a proof is made of (RFC 6962 §2.1.1 and §2.1.2,
//! used by [`crate::TileReader`] to serve proofs from tiles) and pure functions that verify them
//! (RFC 9162 §2.1.3.2 and §2.1.4.2) with nothing but hashes, for `verify`, `prove`, evidence bundles and
//! offline checks.

use crate::tree::node_hash;
use crate::{Error, Hash, Result};

/// A proof that the leaf at `leaf_index` is in the tree of size `tree_size`: the sibling subtree roots
/// from the leaf up to the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InclusionProof {
    /// The leaf's position in the log (0-based).
    pub leaf_index: u64,
    /// The size of the tree the proof leads to.
    pub tree_size: u64,
    /// The audit path, bottom-up.
    pub hashes: Vec<Hash>,
}

impl InclusionProof {
    /// Checks that `leaf` (a leaf hash) is at `leaf_index` in the tree of `tree_size` with `root`.
    pub fn verify(&self, leaf: &Hash, root: &Hash) -> Result<()> {
        verify_inclusion(leaf, self.leaf_index, self.tree_size, &self.hashes, root)
    }
}

/// A proof that the tree of size `old_size` is a prefix of the tree of size `new_size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsistencyProof {
    /// The older tree size.
    pub old_size: u64,
    /// The newer tree size.
    pub new_size: u64,
    /// The consistency path (RFC 6962 §2.1.2 order).
    pub hashes: Vec<Hash>,
}

impl ConsistencyProof {
    /// Checks that the tree with `old_root` is a prefix of the tree with `new_root`.
    pub fn verify(&self, old_root: &Hash, new_root: &Hash) -> Result<()> {
        verify_consistency(self.old_size, self.new_size, &self.hashes, old_root, new_root)
    }
}

/// Verifies an inclusion proof (RFC 9162 §2.1.3.2): `leaf` is the leaf hash at `index` in the tree of
/// `size` whose root is `root`.
pub fn verify_inclusion(leaf: &Hash, index: u64, size: u64, proof: &[Hash], root: &Hash) -> Result<()> {
    let invalid = || Error::InclusionProofInvalid { index, size };
    if index >= size {
        return Err(Error::IndexOutOfRange { index, size });
    }
    let mut f_n = index;
    let mut s_n = size - 1;
    let mut r = *leaf;
    for p in proof {
        if s_n == 0 {
            return Err(invalid());
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node_hash(p, &r);
            while f_n & 1 == 0 && f_n != 0 {
                f_n >>= 1;
                s_n >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    if s_n == 0 && r == *root {
        Ok(())
    } else {
        Err(invalid())
    }
}

/// Verifies a consistency proof (RFC 9162 §2.1.4.2): the tree of `old_size` with `old_root` is a
/// prefix of the tree of `new_size` with `new_root`. Equal sizes need an empty proof and equal roots;
/// the empty tree (whose root is [`crate::empty_root`]) is a prefix of every tree.
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    proof: &[Hash],
    old_root: &Hash,
    new_root: &Hash,
) -> Result<()> {
    let invalid = || Error::ConsistencyProofInvalid { old_size, new_size };
    if old_size > new_size {
        return Err(Error::SizeOutOfRange {
            requested: old_size,
            size: new_size,
        });
    }
    if old_size == new_size {
        return if proof.is_empty() && old_root == new_root {
            Ok(())
        } else {
            Err(invalid())
        };
    }
    if old_size == 0 {
        let empty = proof.is_empty() && *old_root == crate::tree::empty_root();
        return if empty { Ok(()) } else { Err(invalid()) };
    }
    // When the old tree is a perfect subtree its root is the proof's implicit first element.
    let path: Vec<Hash> = if old_size.is_power_of_two() {
        std::iter::once(*old_root).chain(proof.iter().copied()).collect()
    } else {
        proof.to_vec()
    };
    let Some((first, rest)) = path.split_first() else {
        return Err(invalid());
    };
    let mut f_n = old_size - 1;
    let mut s_n = new_size - 1;
    while f_n & 1 == 1 {
        f_n >>= 1;
        s_n >>= 1;
    }
    let mut f_r = *first;
    let mut s_r = *first;
    for c in rest {
        if s_n == 0 {
            return Err(invalid());
        }
        if f_n & 1 == 1 || f_n == s_n {
            f_r = node_hash(c, &f_r);
            s_r = node_hash(c, &s_r);
            while f_n & 1 == 0 && f_n != 0 {
                f_n >>= 1;
                s_n >>= 1;
            }
        } else {
            s_r = node_hash(&s_r, c);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    if s_n == 0 && f_r == *old_root && s_r == *new_root {
        Ok(())
    } else {
        Err(invalid())
    }
}

/// The largest power of two strictly below `n` (n ≥ 2): RFC 6962's split point `k`.
fn split(n: u64) -> u64 {
    1u64 << (63 - (n - 1).leading_zeros())
}

/// The leaf ranges `[start, end)` whose Merkle Tree Hashes form the audit path of leaf `index` in a tree
/// of `size` (RFC 6962 §2.1.1 PATH), bottom-up. Requires `index < size`.
pub(crate) fn inclusion_ranges(index: u64, size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    path(index, 0, size, &mut out);
    out
}

fn path(m: u64, lo: u64, hi: u64, out: &mut Vec<(u64, u64)>) {
    if hi - lo <= 1 {
        return;
    }
    let k = split(hi - lo);
    if m < k {
        path(m, lo, lo + k, out);
        out.push((lo + k, hi));
    } else {
        path(m - k, lo + k, hi, out);
        out.push((lo, lo + k));
    }
}

/// The leaf ranges whose Merkle Tree Hashes form the consistency proof from `old_size` to `new_size`
/// (RFC 6962 §2.1.2 PROOF). Requires `0 < old_size < new_size`.
pub(crate) fn consistency_ranges(old_size: u64, new_size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    subproof(old_size, 0, new_size, true, &mut out);
    out
}

fn subproof(m: u64, lo: u64, hi: u64, whole: bool, out: &mut Vec<(u64, u64)>) {
    let n = hi - lo;
    if m == n {
        if !whole {
            out.push((lo, hi));
        }
        return;
    }
    let k = split(n);
    if m <= k {
        subproof(m, lo, lo + k, whole, out);
        out.push((lo + k, hi));
    } else {
        subproof(m - k, lo + k, hi, false, out);
        out.push((lo, lo + k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf_hash;
    use crate::tree::{fold_range, range_nodes, root_of};

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n).map(|i| leaf_hash(&i.to_le_bytes())).collect()
    }

    fn range_hash(leaves: &[Hash], (start, end): (u64, u64)) -> Hash {
        let nodes: Vec<Hash> = range_nodes(start, end)
            .iter()
            .map(|n| {
                let lo = (n.index << n.height) as usize;
                root_of(&leaves[lo..lo + (1usize << n.height)])
            })
            .collect();
        fold_range(&nodes)
    }

    #[test]
    fn every_inclusion_and_consistency_proof_up_to_40_leaves_verifies() {
        let all = leaves(40);
        let roots: Vec<Hash> = (0..=40).map(|n| root_of(&all[..n])).collect();
        for size in 1..=40u64 {
            for index in 0..size {
                let proof: Vec<Hash> = inclusion_ranges(index, size)
                    .into_iter()
                    .map(|r| range_hash(&all, r))
                    .collect();
                verify_inclusion(&all[index as usize], index, size, &proof, &roots[size as usize]).unwrap();
                let wrong = (index + 1) % size;
                if wrong != index {
                    assert!(
                        verify_inclusion(&all[wrong as usize], index, size, &proof, &roots[size as usize])
                            .is_err()
                    );
                }
            }
            for old in 1..size {
                let proof: Vec<Hash> = consistency_ranges(old, size)
                    .into_iter()
                    .map(|r| range_hash(&all, r))
                    .collect();
                let (old_root, new_root) = (&roots[old as usize], &roots[size as usize]);
                verify_consistency(old, size, &proof, old_root, new_root).unwrap();
                assert!(verify_consistency(old, size, &proof, new_root, new_root).is_err());
            }
        }
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        let h = [7u8; 32];
        assert!(matches!(
            verify_inclusion(&h, 5, 5, &[], &h),
            Err(Error::IndexOutOfRange { index: 5, size: 5 })
        ));
        assert!(verify_inclusion(&h, 0, 1, &[h], &h).is_err());
        assert!(verify_inclusion(&h, u64::MAX - 1, u64::MAX, &[h; 70], &h).is_err());
        assert!(verify_consistency(3, 2, &[], &h, &h).is_err());
        assert!(verify_consistency(3, 3, &[h], &h, &h).is_err());
        assert!(verify_consistency(3, 4, &[], &h, &h).is_err());
        assert!(verify_consistency(3, u64::MAX, &[h; 70], &h, &h).is_err());
        verify_consistency(0, 9, &[], &crate::tree::empty_root(), &[1; 32]).unwrap();
        assert!(verify_consistency(0, 9, &[], &h, &[1; 32]).is_err());
    }
}
