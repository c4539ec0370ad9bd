//! C2SP tlog tiles: addressing and arithmetic.
//!
//! A tile at level `L` holds up to 256 consecutive hashes of height `8·L`: level 0 holds leaf hashes,
//! each hash at level `L ≥ 1` is the root of a full tile at level `L − 1`. A tile is stored at
//! `tile/<L>/<N>` when full (8,192 bytes) and at `tile/<L>/<N>.p/<W>` while partial (W hashes), with
//! `N` written in 3-digit groups, all but the last prefixed with `x` (`1234067` → `x001/x234/067`).

use crate::Hash;

/// Tile height: each tile spans 8 tree levels, 256 hashes.
pub const TILE_HEIGHT: u32 = 8;
/// Hashes in a full tile.
pub const TILE_WIDTH: u64 = 1 << TILE_HEIGHT;
/// Bytes of a hash.
pub const HASH_SIZE: usize = 32;

/// One tile: its level, its index within the level, and its width (256 for a full tile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId {
    /// The tile level; its hashes have height `8 * level`.
    pub level: u8,
    /// The tile's index within its level.
    pub index: u64,
    /// How many hashes it holds, 1 to 256.
    pub width: u16,
}

impl TileId {
    /// Whether the tile is full (256 hashes).
    pub fn is_full(&self) -> bool {
        u64::from(self.width) == TILE_WIDTH
    }

    /// The same tile when full.
    pub fn full(&self) -> TileId {
        TileId {
            width: TILE_WIDTH as u16,
            ..*self
        }
    }

    /// The tile's path relative to the log's prefix, e.g. `tile/1/x001/234.p/17`.
    pub fn path(&self) -> String {
        let mut path = format!("tile/{}/{}", self.level, encode_index(self.index));
        if !self.is_full() {
            path.push_str(&format!(".p/{}", self.width));
        }
        path
    }

    /// Parses a tile path (`tile/<L>/<N>[.p/<W>]`); `None` for anything else.
    pub fn parse(path: &str) -> Option<TileId> {
        let rest = path.strip_prefix("tile/")?;
        let (level, rest) = rest.split_once('/')?;
        if level.is_empty() || (level.len() > 1 && level.starts_with('0')) {
            return None;
        }
        let level: u8 = level.parse().ok().filter(|l| *l <= 63)?;
        let (index, width) = match rest.split_once(".p/") {
            Some((index, width)) => {
                if width.starts_with('0') {
                    return None;
                }
                let width: u16 = width
                    .parse()
                    .ok()
                    .filter(|w| (1..TILE_WIDTH as u16).contains(w))?;
                (index, width)
            }
            None => (rest, TILE_WIDTH as u16),
        };
        Some(TileId {
            level,
            index: decode_index(index)?,
            width,
        })
    }

    /// The tile's byte length.
    pub fn byte_len(&self) -> usize {
        usize::from(self.width) * HASH_SIZE
    }
}

/// The tile at `level` holding hash number `n` (counted in hashes of height `8 * level`) in a tree of
/// `size` leaves: full if the tree has filled it, else partial with the width it has at that size.
pub fn tile_for(level: u8, n: u64, size: u64) -> TileId {
    let index = n / TILE_WIDTH;
    let hashes_at_level = hashes_at_level(level, size);
    let width = if hashes_at_level >= (index + 1) * TILE_WIDTH {
        TILE_WIDTH
    } else {
        hashes_at_level % TILE_WIDTH
    };
    TileId {
        level,
        index,
        width: width as u16,
    }
}

/// How many complete hashes of height `8 * level` a tree of `size` leaves has.
pub fn hashes_at_level(level: u8, size: u64) -> u64 {
    size.checked_shr(TILE_HEIGHT * u32::from(level)).unwrap_or(0)
}

/// Every tile of a tree of `size` leaves, level by level from the top, left to right within a level:
/// all full tiles plus the partial tile at each level that has one.
pub fn tiles_for_size(size: u64) -> impl Iterator<Item = TileId> {
    (0u8..8).rev().flat_map(move |level| {
        let count = hashes_at_level(level, size);
        let full = count / TILE_WIDTH;
        let partial = (count % TILE_WIDTH) as u16;
        (0..full)
            .map(move |index| TileId {
                level,
                index,
                width: TILE_WIDTH as u16,
            })
            .chain((partial > 0).then_some(TileId {
                level,
                index: full,
                width: partial,
            }))
    })
}

/// Splits tile bytes into hashes; `None` unless the length is a whole number of hashes.
pub(crate) fn decode_hashes(bytes: &[u8]) -> Option<Vec<Hash>> {
    if !bytes.len().is_multiple_of(HASH_SIZE) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(HASH_SIZE)
            .map(|c| {
                let mut h = [0u8; HASH_SIZE];
                h.copy_from_slice(c);
                h
            })
            .collect(),
    )
}

/// Concatenates hashes into tile bytes.
pub(crate) fn encode_hashes(hashes: &[Hash]) -> Vec<u8> {
    hashes.concat()
}

pub(crate) fn encode_index(mut n: u64) -> String {
    let mut groups = vec![format!("{:03}", n % 1000)];
    n /= 1000;
    while n > 0 {
        groups.push(format!("x{:03}", n % 1000));
        n /= 1000;
    }
    groups.reverse();
    groups.join("/")
}

fn decode_index(s: &str) -> Option<u64> {
    let groups: Vec<&str> = s.split('/').collect();
    let (last, init) = groups.split_last()?;
    let mut n: u64 = 0;
    for (i, group) in init
        .iter()
        .map(|g| g.strip_prefix('x'))
        .chain([Some(*last)])
        .enumerate()
    {
        let group = group?;
        if group.len() != 3
            || !group.bytes().all(|b| b.is_ascii_digit())
            || (i == 0 && !init.is_empty() && group == "000")
        {
            return None;
        }
        n = n.checked_mul(1000)?.checked_add(group.parse::<u64>().ok()?)?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_c2sp_examples() {
        assert_eq!(
            TileId {
                level: 0,
                index: 1234067,
                width: 256
            }
            .path(),
            "tile/0/x001/x234/067"
        );
        assert_eq!(
            TileId {
                level: 1,
                index: 5,
                width: 17
            }
            .path(),
            "tile/1/005.p/17"
        );
        assert_eq!(
            TileId {
                level: 2,
                index: 1000,
                width: 256
            }
            .path(),
            "tile/2/x001/000"
        );
        for id in [
            TileId {
                level: 0,
                index: 0,
                width: 1,
            },
            TileId {
                level: 3,
                index: 1234067,
                width: 256,
            },
            TileId {
                level: 7,
                index: u64::MAX,
                width: 255,
            },
        ] {
            assert_eq!(TileId::parse(&id.path()), Some(id));
        }
        for bad in [
            "tile/0/1",
            "tile/00/001",
            "tile/0/x000/001",
            "tile/0/001.p/0",
            "tile/0/001.p/256",
            "x",
        ] {
            assert_eq!(TileId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn size_70000_has_the_tiles_the_spec_lists() {
        let tiles: Vec<TileId> = tiles_for_size(70_000).collect();
        let full0 = tiles.iter().filter(|t| t.level == 0 && t.is_full()).count();
        assert_eq!(full0, 273);
        assert!(tiles.contains(&TileId {
            level: 0,
            index: 273,
            width: 112
        }));
        assert!(tiles.contains(&TileId {
            level: 1,
            index: 0,
            width: 256
        }));
        assert!(tiles.contains(&TileId {
            level: 1,
            index: 1,
            width: 17
        }));
        assert!(tiles.contains(&TileId {
            level: 2,
            index: 0,
            width: 1
        }));
        assert_eq!(tiles.len(), 273 + 1 + 1 + 1 + 1);
        assert_eq!(
            tiles_for_size(256).collect::<Vec<_>>(),
            vec![
                TileId {
                    level: 1,
                    index: 0,
                    width: 1
                },
                TileId {
                    level: 0,
                    index: 0,
                    width: 256
                }
            ]
        );
    }
}
