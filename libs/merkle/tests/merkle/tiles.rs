//! The tile store suite, written once and run against every backend (local filesystem, memory):
//! C2SP layout, resume, rebuild, create-only writes, and checking tiles against a signed root.

use tempfile::TempDir;
use toolledger_merkle::tile::tiles_for_size;
use toolledger_merkle::{CompactRange, Error, Hash, TileId, TileReader, TileStore, TiledLog};

use crate::common::leaves;

/// Full and partial tiles at level 0, a partial tile at level 1 (hashing is slow in debug builds: the
/// three-level case runs once, on memory, in `three_tile_levels`).
const SIZE: u64 = 20 * 256 + 77;

/// Every backend the tiles must work on; the temp dir lives as long as the store.
fn backends() -> Vec<(&'static str, TileStore, Option<TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let local = TileStore::local(dir.path()).unwrap();
    vec![
        ("memory", TileStore::in_memory(), None),
        ("local", local, Some(dir)),
    ]
}

async fn write_log(tiles: &TileStore, leaves: &[Hash]) -> TiledLog {
    let mut log = TiledLog::new(tiles.clone());
    for leaf in leaves {
        log.append(*leaf).await.unwrap();
    }
    log.flush().await.unwrap();
    log
}

fn root_of(leaves: &[Hash]) -> Hash {
    let mut range = CompactRange::new();
    leaves.iter().for_each(|l| range.append(*l));
    range.root()
}

#[tokio::test]
async fn layout_resume_rebuild_and_check_on_every_backend() {
    let all = leaves(SIZE + 300);
    let expected_root = root_of(&all[..SIZE as usize]);
    for (backend, tiles, dir) in backends() {
        let log = write_log(&tiles, &all[..SIZE as usize]).await;
        if let Some(dir) = &dir {
            // The files are where a C2SP client would fetch them.
            for file in ["tile/0/000", "tile/0/019", "tile/0/020.p/77", "tile/1/000.p/20"] {
                let len = std::fs::metadata(dir.path().join(file)).unwrap().len();
                assert_eq!(
                    len,
                    if file.contains(".p/") {
                        file.rsplit('/').next().unwrap().parse::<u64>().unwrap() * 32
                    } else {
                        8192
                    }
                );
            }
        }
        assert_eq!(log.root(), expected_root, "{backend}");
        assert!(
            log.compact_range().nodes().len() <= 64,
            "{backend}: state stays O(log n)"
        );

        // C2SP layout: every tile of the tree exists at its path with the right length.
        for tile in tiles_for_size(SIZE) {
            assert_eq!(
                tiles.read(&tile).await.unwrap().len(),
                usize::from(tile.width),
                "{backend} {}",
                tile.path()
            );
        }
        assert_eq!(
            tiles
                .location(&TileId {
                    level: 1,
                    index: 0,
                    width: 20
                })
                .to_string(),
            "tile/1/000.p/20"
        );

        // Level-0 tiles hold the leaf hashes; the reader's root agrees.
        let reader = TileReader::new(tiles.clone());
        assert_eq!(reader.leaf_hash(4_000, SIZE).await.unwrap(), all[4_000]);
        assert_eq!(reader.root(SIZE).await.unwrap(), expected_root);
        reader.check_tiles(SIZE, &expected_root).await.unwrap();

        // Resume at the checkpointed size and keep appending: same tree as never stopping.
        let mut resumed = TiledLog::open(tiles.clone(), SIZE, &expected_root).await.unwrap();
        assert_eq!(resumed.compact_range(), log.compact_range());
        for leaf in &all[SIZE as usize..] {
            resumed.append(*leaf).await.unwrap();
        }
        resumed.flush().await.unwrap();
        assert_eq!(resumed.root(), root_of(&all), "{backend}");
        reader.check_tiles(resumed.size(), &resumed.root()).await.unwrap();
        // Proofs for the older size still come out of the grown tiles.
        reader
            .inclusion_proof(SIZE - 1, SIZE)
            .await
            .unwrap()
            .verify(&all[SIZE as usize - 1], &expected_root)
            .unwrap();

        // Opening with another root is refused.
        let err = TiledLog::open(tiles.clone(), SIZE, &[0; 32]).await.unwrap_err();
        assert!(
            matches!(err, Error::RootMismatch { size: SIZE, .. }),
            "{backend}: {err}"
        );

        // Rebuilding into a fresh store gives the same bytes for every tile.
        let (_, rebuilt_tiles, _dir2) = backends().remove(if backend == "memory" { 0 } else { 1 });
        let rebuilt = TiledLog::rebuild(rebuilt_tiles.clone(), all[..SIZE as usize].iter().copied())
            .await
            .unwrap();
        assert_eq!(rebuilt.root(), expected_root);
        for tile in tiles_for_size(SIZE) {
            assert_eq!(
                rebuilt_tiles.read(&tile).await.unwrap(),
                tiles.read(&tile).await.unwrap(),
                "{backend} {}",
                tile.path()
            );
        }
    }
}

#[tokio::test]
async fn three_tile_levels() {
    // 65,536 + 700 leaves: full tiles at levels 0 and 1, partial tiles at levels 0, 1 and 2.
    let size = 65_536 + 700;
    let all = leaves(size);
    let tiles = TileStore::in_memory();
    let log = write_log(&tiles, &all).await;
    for tile in [
        TileId {
            level: 2,
            index: 0,
            width: 1,
        },
        TileId {
            level: 1,
            index: 1,
            width: 2,
        },
        TileId {
            level: 1,
            index: 0,
            width: 256,
        },
    ] {
        assert_eq!(
            tiles.read(&tile).await.unwrap().len(),
            usize::from(tile.width),
            "{}",
            tile.path()
        );
    }
    let reader = TileReader::new(tiles.clone());
    assert_eq!(reader.root(size).await.unwrap(), log.root());
    reader.check_tiles(size, &log.root()).await.unwrap();
    let resumed = TiledLog::open(tiles, size, &log.root()).await.unwrap();
    assert_eq!(resumed.compact_range(), log.compact_range());
}

#[tokio::test]
async fn damaged_tiles_are_named() {
    let all = leaves(SIZE);
    let root = root_of(&all);
    for (backend, tiles, _dir) in backends() {
        write_log(&tiles, &all).await;
        let reader = TileReader::new(tiles.clone());

        // A flipped byte in a full level-0 tile: named by the level-1 tile that vouches for it.
        let victim = TileId {
            level: 0,
            index: 7,
            width: 256,
        };
        let mut hashes = tiles.read(&victim).await.unwrap();
        hashes[5][0] ^= 1;
        tiles.put_raw(&victim, hashes.concat()).await.unwrap();
        match reader.check_tiles(SIZE, &root).await {
            Err(Error::TileCorrupt { path, .. }) => assert_eq!(path, victim.path(), "{backend}"),
            other => panic!("{backend}: expected TileCorrupt, got {other:?}"),
        }

        // Truncated: corrupt by length.
        tiles.put_raw(&victim, vec![0; 100]).await.unwrap();
        assert!(
            matches!(
                reader.check_tiles(SIZE, &root).await,
                Err(Error::TileCorrupt { .. })
            ),
            "{backend}"
        );

        // Deleted: missing.
        tiles.delete(&victim).await.unwrap();
        match reader.check_tiles(SIZE, &root).await {
            Err(Error::TileMissing { path }) => assert_eq!(path, victim.path(), "{backend}"),
            other => panic!("{backend}: expected TileMissing, got {other:?}"),
        }

        // Rebuilding from the leaves (overwrite) repairs the store.
        TiledLog::rebuild(tiles.clone(), all.iter().copied())
            .await
            .unwrap();
        reader.check_tiles(SIZE, &root).await.unwrap();

        // A damaged right edge no longer hashes to the signed root.
        let edge = TileId {
            level: 1,
            index: 0,
            width: 20,
        };
        let mut hashes = tiles.read(&edge).await.unwrap();
        hashes[0][31] ^= 0x80;
        tiles.put_raw(&edge, hashes.concat()).await.unwrap();
        assert!(
            matches!(
                reader.check_tiles(SIZE, &root).await,
                Err(Error::RootMismatch { .. })
            ),
            "{backend}"
        );
    }
}

#[tokio::test]
async fn tiles_are_create_only() {
    for (backend, tiles, _dir) in backends() {
        write_log(&tiles, &leaves(600)).await;
        // The same history again is an idempotent retry.
        write_log(&tiles, &leaves(600)).await;
        // Another history over the same store is refused.
        let mut other = TiledLog::new(tiles.clone());
        let mut result = Ok(0);
        for i in 0..600u32 {
            result = other.append(toolledger_merkle::leaf_hash(&[b'x', i as u8])).await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Err(Error::TileConflict { path }) => assert_eq!(path, "tile/0/000", "{backend}"),
            other => panic!("{backend}: expected TileConflict, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn missing_tiles_and_bad_ranges_are_errors() {
    let tiles = TileStore::in_memory();
    let reader = TileReader::new(tiles.clone());
    assert!(matches!(
        reader.inclusion_proof(0, 10).await,
        Err(Error::TileMissing { .. })
    ));
    write_log(&tiles, &leaves(10)).await;
    assert!(matches!(
        reader.inclusion_proof(10, 10).await,
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        reader.consistency_proof(11, 10).await,
        Err(Error::SizeOutOfRange { .. })
    ));
    // Tiles were flushed at size 10 only: a larger size has no tiles.
    assert!(matches!(
        reader.inclusion_proof(0, 11).await,
        Err(Error::TileMissing { .. })
    ));
    assert!(reader.consistency_proof(0, 10).await.unwrap().hashes.is_empty());
}

/// The compact range read from the tiles at any size up to the one they were flushed at is the one
/// appending the same leaves makes: a verification can continue from a trusted size.
#[tokio::test]
async fn compact_ranges_from_tiles_equal_appending_the_leaves() {
    let all = leaves(SIZE);
    let tiles = TileStore::in_memory();
    write_log(&tiles, &all).await;
    let reader = TileReader::new(tiles);
    let mut appended = CompactRange::new();
    for (i, leaf) in all.iter().enumerate() {
        appended.append(*leaf);
        let size = i as u64 + 1;
        if [1, 2, 3, 255, 256, 257, 511, 4096, 4097, SIZE].contains(&size) {
            let read = reader.compact_range(size).await.unwrap();
            assert_eq!(read, appended, "size {size}");
            assert_eq!(read.root(), appended.root());
        }
    }
}
