//! RFC 6962 tree hashing and the compact range, the O(log n) state of an append-only tree.
//!
//! A tree of size `n` is, left to right, one perfect subtree per set bit of `n`, largest first. The
//! compact range keeps only those subtree roots; appending a leaf merges equal-height subtrees like
//! carrying in binary addition, and the root is their right-to-left fold.

use sha2::{Digest, Sha256};

use crate::Hash;

/// The RFC 6962 interior node hash: `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([1u8]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// The root of the empty tree: `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The Merkle Tree Hash (RFC 6962 §2.1) of a sequence of leaf hashes (or of any equal-height subtree
/// roots: a tile's hashes give the root of the subtree the tile spans).
pub fn root_of(hashes: &[Hash]) -> Hash {
    let mut range = CompactRange::new();
    for hash in hashes {
        range.append(*hash);
    }
    range.root()
}

/// The roots of the perfect subtrees covering an append-only tree: the whole state needed to append
/// leaves and to compute the root, `popcount(size)` hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactRange {
    size: u64,
    /// One root per set bit of `size`, highest bit (leftmost, largest subtree) first.
    nodes: Vec<Hash>,
}

impl CompactRange {
    /// The empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a compact range from its subtree roots, left to right; `None` unless there is exactly
    /// one per set bit of `size`.
    pub fn from_parts(size: u64, nodes: Vec<Hash>) -> Option<Self> {
        (nodes.len() == size.count_ones() as usize).then_some(Self { size, nodes })
    }

    /// The number of leaves appended.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The perfect subtree roots, left to right.
    pub fn nodes(&self) -> &[Hash] {
        &self.nodes
    }

    /// Appends a leaf hash.
    pub fn append(&mut self, leaf: Hash) {
        self.append_with(leaf, |_, _| {});
    }

    /// Appends a leaf hash, calling `on_node(height, hash)` for every interior node the append
    /// completes, lowest first. Tiles use this to collect the hashes they store without hashing twice.
    pub fn append_with(&mut self, leaf: Hash, mut on_node: impl FnMut(u32, &Hash)) {
        let mut hash = leaf;
        let mut height = 0u32;
        while height < 64 && (self.size >> height) & 1 == 1 {
            // A set bit always has its subtree root on the stack: popcount(size) == nodes.len().
            let Some(left) = self.nodes.pop() else { break };
            hash = node_hash(&left, &hash);
            height += 1;
            on_node(height, &hash);
        }
        self.nodes.push(hash);
        self.size += 1;
    }

    /// The tree's root hash (RFC 6962 MTH).
    pub fn root(&self) -> Hash {
        let mut nodes = self.nodes.iter().rev();
        let Some(last) = nodes.next() else {
            return empty_root();
        };
        nodes.fold(*last, |acc, left| node_hash(left, &acc))
    }
}

/// A perfect subtree: the `index`-th node at `height`, spanning leaves
/// `[index * 2^height, (index + 1) * 2^height)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// Height above the leaves (0 = a leaf hash).
    pub height: u32,
    /// Position among the nodes of that height, left to right.
    pub index: u64,
}

/// The perfect subtrees whose right-to-left fold is the Merkle Tree Hash of leaves `[start, end)`, for
/// the ranges RFC 6962 proofs use: `start` aligned to the largest power of two not above `end - start`.
pub(crate) fn range_nodes(start: u64, end: u64) -> Vec<NodeId> {
    let mut nodes = Vec::new();
    let mut at = start;
    let len = end.saturating_sub(start);
    for height in (0..64u32).rev() {
        if (len >> height) & 1 == 1 {
            nodes.push(NodeId {
                height,
                index: at >> height,
            });
            at += 1u64 << height;
        }
    }
    nodes
}

/// Folds perfect subtree roots, left to right, into the root of the range they cover.
pub(crate) fn fold_range(hashes: &[Hash]) -> Hash {
    let mut iter = hashes.iter().rev();
    let Some(last) = iter.next() else {
        return empty_root();
    };
    iter.fold(*last, |acc, left| node_hash(left, &acc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leaf_hash;

    /// RFC 6962 §2.1 MTH, written recursively as the RFC states it, as an independent reference.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    #[test]
    fn compact_range_root_equals_recursive_mth() {
        let leaves: Vec<Hash> = (0..300u32).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let mut range = CompactRange::new();
        for n in 0..=leaves.len() {
            assert_eq!(range.root(), mth(&leaves[..n]), "size {n}");
            assert_eq!(range.nodes().len(), n.count_ones() as usize);
            if n < leaves.len() {
                range.append(leaves[n]);
            }
        }
    }

    #[test]
    fn range_nodes_fold_to_mth_of_the_range() {
        let leaves: Vec<Hash> = (0..64u32).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        for (start, end) in [(0u64, 64u64), (32, 63), (48, 61), (8, 13), (5, 6)] {
            let hashes: Vec<Hash> = range_nodes(start, end)
                .iter()
                .map(|node| {
                    let lo = (node.index << node.height) as usize;
                    mth(&leaves[lo..lo + (1 << node.height)])
                })
                .collect();
            assert_eq!(fold_range(&hashes), mth(&leaves[start as usize..end as usize]));
        }
    }

    #[test]
    fn from_parts_rejects_wrong_node_count() {
        assert!(CompactRange::from_parts(3, vec![[0; 32]]).is_none());
        assert!(CompactRange::from_parts(3, vec![[0; 32]; 2]).is_some());
    }
}
