//! Serving proofs and roots from tiles, and checking stored tiles against a signed root.
//!
//! A proof is a list of leaf ranges (see [`crate::proof`]); each range is a few perfect subtrees; a
//! perfect subtree of height `8·L + r` is the root of `2^r` consecutive hashes in one tile at level `L`.
//! So a proof for any tree size reads O(log n) tiles, each at most once.

use std::collections::{BTreeMap, BTreeSet};

use crate::proof::{ConsistencyProof, InclusionProof, consistency_ranges, inclusion_ranges};
use crate::store::TileStore;
use crate::tile::{TILE_HEIGHT, TileId, tile_for, tiles_for_size};
use crate::tree::{CompactRange, NodeId, fold_range, range_nodes, root_of};
use crate::{Error, Hash, Result};

/// Reads tiles to answer proof and root requests for any tree size the tiles were flushed at.
#[derive(Clone, Debug)]
pub struct TileReader {
    tiles: TileStore,
}

impl TileReader {
    /// A reader over the tiles in `tiles`.
    pub fn new(tiles: TileStore) -> Self {
        Self { tiles }
    }

    /// The inclusion proof of leaf `index` in the tree of `size`.
    pub async fn inclusion_proof(&self, index: u64, size: u64) -> Result<InclusionProof> {
        if index >= size {
            return Err(Error::IndexOutOfRange { index, size });
        }
        let hashes = self.range_hashes(&inclusion_ranges(index, size), size).await?;
        Ok(InclusionProof {
            leaf_index: index,
            tree_size: size,
            hashes,
        })
    }

    /// The consistency proof from the tree of `old_size` to the tree of `new_size`.
    pub async fn consistency_proof(&self, old_size: u64, new_size: u64) -> Result<ConsistencyProof> {
        if old_size > new_size {
            return Err(Error::SizeOutOfRange {
                requested: old_size,
                size: new_size,
            });
        }
        let ranges = if old_size == 0 || old_size == new_size {
            Vec::new()
        } else {
            consistency_ranges(old_size, new_size)
        };
        let hashes = self.range_hashes(&ranges, new_size).await?;
        Ok(ConsistencyProof {
            old_size,
            new_size,
            hashes,
        })
    }

    /// The root of the tree of `size`, from the tiles of its right edge.
    pub async fn root(&self, size: u64) -> Result<Hash> {
        let mut roots = self.range_hashes(&[(0, size)], size).await?;
        Ok(roots.pop().unwrap_or_else(crate::tree::empty_root))
    }

    /// The compact range of the tree of `size` (one perfect subtree root per set bit of `size`, the
    /// largest first): what appending leaves after `size` starts from.
    pub async fn compact_range(&self, size: u64) -> Result<CompactRange> {
        let mut ranges = Vec::new();
        let mut start = 0u64;
        for bit in (0..64).rev() {
            let width = 1u64 << bit;
            if size & width != 0 {
                ranges.push((start, start + width));
                start += width;
            }
        }
        let nodes = self.range_hashes(&ranges, size).await?;
        CompactRange::from_parts(size, nodes).ok_or(Error::SizeOutOfRange {
            requested: size,
            size,
        })
    }

    /// The leaf hash at `index`, read from the tree of `size`'s level-0 tiles.
    pub async fn leaf_hash(&self, index: u64, size: u64) -> Result<Hash> {
        if index >= size {
            return Err(Error::IndexOutOfRange { index, size });
        }
        let mut hashes = self.range_hashes(&[(index, index + 1)], size).await?;
        hashes.pop().ok_or(Error::IndexOutOfRange { index, size })
    }

    /// The Merkle Tree Hash of each range, reading each tile it needs once.
    async fn range_hashes(&self, ranges: &[(u64, u64)], size: u64) -> Result<Vec<Hash>> {
        let per_range: Vec<Vec<NodeId>> = ranges
            .iter()
            .map(|&(start, end)| range_nodes(start, end))
            .collect();
        let wanted: BTreeSet<NodeId> = per_range.iter().flatten().copied().collect();
        let tiles: BTreeSet<TileId> = wanted.iter().map(|node| locate(node, size).0).collect();
        let mut loaded = BTreeMap::new();
        for tile in tiles {
            loaded.insert(tile, self.tiles.read_at_least(&tile).await?);
        }
        let mut node_hashes = BTreeMap::new();
        for node in wanted {
            let (tile, offset, count) = locate(&node, size);
            let hashes = loaded
                .get(&tile)
                .and_then(|h| h.get(offset..offset + count))
                .ok_or_else(|| Error::TileCorrupt {
                    path: self.tiles.location(&tile).to_string(),
                    reason: format!(
                        "too short for node at height {} index {}",
                        node.height, node.index
                    ),
                })?;
            node_hashes.insert(node, root_of(hashes));
        }
        Ok(per_range
            .iter()
            .map(|nodes| {
                fold_range(
                    &nodes
                        .iter()
                        .filter_map(|n| node_hashes.get(n).copied())
                        .collect::<Vec<_>>(),
                )
            })
            .collect())
    }

    /// Checks the stored tiles of the tree of `size` against its signed `root`, top down: the right
    /// edge against the root, then every full tile against the hash the tile above holds for it. The
    /// error names the first bad tile found.
    pub async fn check_tiles(&self, size: u64, root: &Hash) -> Result<()> {
        let computed = self.root(size).await?;
        if computed != *root {
            return Err(Error::RootMismatch {
                size,
                expected: *root,
                computed,
            });
        }
        // Top level first: a level's tiles are trusted once the level above (or the root) vouched.
        let parents: Vec<TileId> = tiles_for_size(size).filter(|t| t.level > 0).collect();
        for parent in parents {
            let hashes = self.tiles.read_at_least(&parent).await?;
            for (offset, expected) in hashes.iter().enumerate() {
                let child = TileId {
                    level: parent.level - 1,
                    index: parent.index * crate::tile::TILE_WIDTH + offset as u64,
                    width: crate::tile::TILE_WIDTH as u16,
                };
                let child_hashes = self.tiles.read(&child).await?;
                if root_of(&child_hashes) != *expected {
                    return Err(Error::TileCorrupt {
                        path: self.tiles.location(&child).to_string(),
                        reason: format!(
                            "does not hash to entry {offset} of {}",
                            self.tiles.location(&parent)
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Where a perfect subtree lives: its tile (as wide as the tree of `size` has it), the offset of its
/// first hash in the tile, and how many hashes it spans.
fn locate(node: &NodeId, size: u64) -> (TileId, usize, usize) {
    let level = node.height / TILE_HEIGHT;
    let r = node.height % TILE_HEIGHT;
    let first = node.index << r;
    let tile = tile_for(level as u8, first, size);
    (tile, (first % crate::tile::TILE_WIDTH) as usize, 1usize << r)
}
