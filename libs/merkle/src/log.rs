//! The append-only log writer: leaf hashes in, tiles and roots out.
//!
//! ```text
//!  push(leaf) ──▶ compact range (root)          append(leaf) = push + write any tile it completed
//!       │            │ every node of height 8·k
//!       ▼            ▼
//!  open tile at level 0, 1, … (≤ 255 hashes each) ──full──▶ pending ──▶ tile/<L>/<N>
//!                                   flush() ──▶ pending + tile/<L>/<N>.p/<W> for the current size
//! ```
//!
//! The writer's memory is the compact range plus one open tile per level: at most 255 hashes for each
//! of the ≤ 8 levels, whatever the size of the log.

use crate::store::{TileStore, WriteMode};
use crate::tile::{TILE_HEIGHT, TILE_WIDTH, TileId, hashes_at_level};
use crate::tree::{CompactRange, root_of};
use crate::{Error, Hash, Result};

/// Tile levels a 64-bit tree can have: heights 0..64 in steps of 8.
const MAX_LEVELS: usize = 8;

/// An append-only RFC 6962 tree whose interior nodes are written as C2SP tiles.
#[derive(Debug)]
pub struct TiledLog {
    tiles: TileStore,
    mode: WriteMode,
    range: CompactRange,
    /// `open[L]`: the hashes of height `8·L` in the not yet full tile at level `L`.
    open: Vec<Vec<Hash>>,
    /// Full tiles completed by `push` and not written yet.
    pending: Vec<(TileId, Vec<Hash>)>,
}

impl TiledLog {
    /// An empty log writing create-only tiles to `tiles`.
    pub fn new(tiles: TileStore) -> Self {
        Self {
            tiles,
            mode: WriteMode::CreateOnly,
            range: CompactRange::new(),
            open: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Resumes the log at a checkpointed `size`, loading the open tiles from the store, and checks the
    /// tree they describe has `root` ([`Error::RootMismatch`] if not).
    pub async fn open(tiles: TileStore, size: u64, root: &Hash) -> Result<Self> {
        let mut open = Vec::new();
        for level in 0..MAX_LEVELS as u8 {
            let count = hashes_at_level(level, size);
            if count == 0 {
                break;
            }
            let width = (count % TILE_WIDTH) as u16;
            let hashes = if width == 0 {
                Vec::new()
            } else {
                tiles
                    .read_at_least(&TileId {
                        level,
                        index: count / TILE_WIDTH,
                        width,
                    })
                    .await?
            };
            open.push(hashes);
        }
        // The compact range: each open tile's hashes split by the bits of its width, top level first.
        let mut nodes = Vec::new();
        for hashes in open.iter().rev() {
            let mut at = 0usize;
            for bit in (0..TILE_HEIGHT).rev() {
                let len = 1usize << bit;
                if hashes.len() & len != 0 {
                    nodes.push(root_of(&hashes[at..at + len]));
                    at += len;
                }
            }
        }
        let range = CompactRange::from_parts(size, nodes).ok_or_else(|| Error::TileCorrupt {
            path: "tile/".to_owned(),
            reason: format!("open tiles do not describe a tree of size {size}"),
        })?;
        let computed = range.root();
        if computed != *root {
            return Err(Error::RootMismatch {
                size,
                expected: *root,
                computed,
            });
        }
        Ok(Self {
            tiles,
            mode: WriteMode::CreateOnly,
            range,
            open,
            pending: Vec::new(),
        })
    }

    /// Rebuilds every tile from the ledger's leaf hashes in order, replacing what the store holds, and
    /// returns the log ready to append at the end. Full tiles are written as they fill, so memory stays
    /// bounded; the partial tiles are written for the final size.
    pub async fn rebuild(tiles: TileStore, leaves: impl IntoIterator<Item = Hash>) -> Result<Self> {
        let mut log = Self::new(tiles);
        log.mode = WriteMode::Overwrite;
        for leaf in leaves {
            log.append(leaf).await?;
        }
        log.flush().await?;
        log.mode = WriteMode::CreateOnly;
        Ok(log)
    }

    /// The number of leaves in the log.
    pub fn size(&self) -> u64 {
        self.range.size()
    }

    /// The current root hash.
    pub fn root(&self) -> Hash {
        self.range.root()
    }

    /// The compact range: the O(log n) summary of the tree.
    pub fn compact_range(&self) -> &CompactRange {
        &self.range
    }

    /// The tile store the log writes to.
    pub fn tiles(&self) -> &TileStore {
        &self.tiles
    }

    /// Full tiles completed and not yet written.
    pub fn pending_tiles(&self) -> usize {
        self.pending.len()
    }

    /// Appends a leaf hash in memory and returns its index. Completed full tiles wait for
    /// [`TiledLog::append`] or [`TiledLog::flush`] (8 KiB per 256 leaves: flush regularly).
    pub fn push(&mut self, leaf: Hash) -> u64 {
        let index = self.range.size();
        self.open_level(0).push(leaf);
        let (open, pending) = (&mut self.open, &mut self.pending);
        self.range.append_with(leaf, |height, hash| {
            if height % TILE_HEIGHT != 0 {
                return;
            }
            // A node of height 8·k is the root of the tile at level k − 1 that just filled up.
            let level = (height / TILE_HEIGHT) as usize;
            let full = std::mem::take(&mut open[level - 1]);
            let tile_index = ((index + 1) >> (TILE_HEIGHT * level as u32)) - 1;
            pending.push((
                TileId {
                    level: (level - 1) as u8,
                    index: tile_index,
                    width: TILE_WIDTH as u16,
                },
                full,
            ));
            if open.len() <= level {
                open.resize_with(level + 1, Vec::new);
            }
            open[level].push(*hash);
        });
        index
    }

    fn open_level(&mut self, level: usize) -> &mut Vec<Hash> {
        if self.open.len() <= level {
            self.open.resize_with(level + 1, Vec::new);
        }
        &mut self.open[level]
    }

    /// Appends a leaf hash, writes any full tile it completed, and returns the leaf's index.
    pub async fn append(&mut self, leaf: Hash) -> Result<u64> {
        let index = self.push(leaf);
        self.write_pending().await?;
        Ok(index)
    }

    async fn write_pending(&mut self) -> Result<()> {
        // Lower levels first, so a tile above never exists before the tiles it hashes.
        while let Some((tile, hashes)) = self.pending.first() {
            self.tiles.write(tile, hashes, self.mode).await?;
            self.pending.remove(0);
        }
        Ok(())
    }

    /// Writes pending full tiles and the partial tiles of the current size, so proofs for this size can
    /// be served. Call it before signing a checkpoint for the size.
    pub async fn flush(&mut self) -> Result<()> {
        self.write_pending().await?;
        let size = self.size();
        for (level, hashes) in self.open.iter().enumerate() {
            if hashes.is_empty() {
                continue;
            }
            let level = level as u8;
            let index = hashes_at_level(level, size) / TILE_WIDTH;
            let tile = TileId {
                level,
                index,
                width: hashes.len() as u16,
            };
            self.tiles.write(&tile, hashes, self.mode).await?;
        }
        Ok(())
    }
}
