//! Tiles in an object store: where each tile lives under the log's prefix, reading with validation,
//! and create-only writes (an existing tile must hold the same bytes, or the store holds another
//! history).

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};

use bytes::Bytes;

use crate::bundle::{MAX_DECODED, bundle_of, bundle_path, decode_bundle, decode_bundle_entry, encode_bundle};
use crate::tile::{TileId, decode_hashes, encode_hashes};
use crate::{Error, Hash, Result};

/// How a tile write treats a tile that already exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Tiles are immutable: an existing tile must hold the same bytes ([`Error::TileConflict`] if not).
    CreateOnly,
    /// Replace whatever is there: used when rebuilding tiles from the ledger, the source of truth.
    Overwrite,
}

/// The tiles of one log (one ledger partition) in an object store, under a prefix.
#[derive(Clone, Debug)]
pub struct TileStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
}

impl TileStore {
    /// Tiles under `prefix` (e.g. `ledger/p0`; empty for the store's root) in `store`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self {
            store,
            prefix: prefix.trim_matches('/').to_owned(),
        }
    }

    /// Tiles in a fresh in-memory store (tests, proptests, scratch rebuilds).
    pub fn in_memory() -> Self {
        Self::new(Arc::new(InMemory::new()), "")
    }

    /// Tiles in a local directory, which must exist.
    pub fn local(dir: &std::path::Path) -> Result<Self> {
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir).map_err(|source| {
            Error::TileStore {
                path: dir.display().to_string(),
                source,
            }
        })?;
        Ok(Self::new(Arc::new(store), ""))
    }

    /// The object path of a tile.
    pub fn location(&self, tile: &TileId) -> Path {
        self.join(&tile.path())
    }

    fn join(&self, rel: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(rel)
        } else {
            Path::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// Reads exactly this tile. A missing tile is [`Error::TileMissing`]; one of the wrong length is
    /// [`Error::TileCorrupt`].
    pub async fn read(&self, tile: &TileId) -> Result<Vec<Hash>> {
        match self.read_raw(tile).await? {
            Some(hashes) => Ok(hashes),
            None => Err(Error::TileMissing {
                path: self.location(tile).to_string(),
            }),
        }
    }

    /// Reads the first `tile.width` hashes of the tile from the narrowest stored version that holds
    /// them: the partial tile itself, else the full tile, else a wider partial tile (partial tiles only
    /// exist at sizes the log was flushed at).
    pub async fn read_at_least(&self, tile: &TileId) -> Result<Vec<Hash>> {
        let width = usize::from(tile.width);
        if let Some(hashes) = self.read_raw(tile).await? {
            return Ok(hashes);
        }
        if !tile.is_full() {
            if let Some(mut hashes) = self.read_raw(&tile.full()).await? {
                hashes.truncate(width);
                return Ok(hashes);
            }
            if let Some(wider) = self.wider_partial(tile).await? {
                let mut hashes = self.read(&wider).await?;
                hashes.truncate(width);
                return Ok(hashes);
            }
        }
        Err(Error::TileMissing {
            path: self.location(tile).to_string(),
        })
    }

    async fn wider_partial(&self, tile: &TileId) -> Result<Option<TileId>> {
        let full_path = tile.full().path();
        let dir = self.join(&format!("{full_path}.p"));
        let listing = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|source| Error::TileStore {
                path: dir.to_string(),
                source,
            })?;
        let prefix_len = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        Ok(listing
            .objects
            .iter()
            .filter_map(|meta| TileId::parse(meta.location.as_ref().get(prefix_len..)?))
            .filter(|t| t.level == tile.level && t.index == tile.index && t.width > tile.width)
            .min_by_key(|t| t.width))
    }

    async fn read_raw(&self, tile: &TileId) -> Result<Option<Vec<Hash>>> {
        let location = self.location(tile);
        let Some(bytes) = self.get(&location, None).await? else {
            return Ok(None);
        };
        if bytes.len() != tile.byte_len() {
            return Err(Error::TileCorrupt {
                path: location.to_string(),
                reason: format!("{} bytes, expected {}", bytes.len(), tile.byte_len()),
            });
        }
        decode_hashes(&bytes).map(Some).ok_or_else(|| Error::TileCorrupt {
            path: location.to_string(),
            reason: "not a whole number of hashes".to_owned(),
        })
    }

    /// Writes a tile. With [`WriteMode::CreateOnly`] an existing tile with the same bytes is fine (a
    /// retry after a crash) and one with other bytes is [`Error::TileConflict`].
    pub async fn write(&self, tile: &TileId, hashes: &[Hash], mode: WriteMode) -> Result<()> {
        let location = self.location(tile);
        let bytes = encode_hashes(hashes);
        let opts = PutOptions::from(match mode {
            WriteMode::CreateOnly => PutMode::Create,
            WriteMode::Overwrite => PutMode::Overwrite,
        });
        match self.store.put_opts(&location, bytes.into(), opts).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => match self.read_raw(tile).await {
                Ok(Some(existing)) if existing == hashes => Ok(()),
                Ok(_) | Err(Error::TileCorrupt { .. }) => Err(Error::TileConflict {
                    path: location.to_string(),
                }),
                Err(e) => Err(e),
            },
            Err(source) => Err(Error::TileStore {
                path: location.to_string(),
                source,
            }),
        }
    }

    /// Writes the entry bundle `index` (ledger seqs `256·index + 1 ..= 256·index + 256`), replacing
    /// whatever is there: a bundle is a cache of the ledger that every reader checks, written only
    /// by the log's single writer.
    pub async fn write_bundle<E: AsRef<[u8]>>(&self, index: u64, entries: &[E]) -> Result<()> {
        let bytes = encode_bundle(entries).map_err(|error| match error {
            Error::BundleCorrupt { reason, .. } => Error::BundleCorrupt {
                path: self.join(&bundle_path(index)).to_string(),
                reason,
            },
            other => other,
        })?;
        self.put_bundle(index, bytes).await
    }

    /// Writes the entry bundle `index` already encoded ([`crate::bundle::encode_bundle`], which a
    /// writer may run off its own thread), replacing whatever is there.
    pub async fn put_bundle(&self, index: u64, encoded: Vec<u8>) -> Result<()> {
        self.put(&self.join(&bundle_path(index)), encoded).await
    }

    /// Reads the entry bundle `index`: `None` when there is none, [`Error::BundleCorrupt`] when it
    /// does not decode to 256 entries. The entries are not checked here: hash them against the tree.
    pub async fn read_bundle(&self, index: u64) -> Result<Option<Vec<Bytes>>> {
        let location = self.join(&bundle_path(index));
        match self.get(&location, Some(MAX_DECODED)).await? {
            Some(bytes) => decode_bundle(location.as_ref(), &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Reads ledger entry `seq` from its bundle: `None` when the bundle is not there,
    /// [`Error::BundleCorrupt`] when it cannot hold the entry. Only that entry is decoded and held.
    /// Unchecked: hash it against the tree.
    pub async fn read_bundled_entry(&self, seq: u64) -> Result<Option<Bytes>> {
        let (index, at) = bundle_of(seq);
        let location = self.join(&bundle_path(index));
        match self.get(&location, Some(MAX_DECODED)).await? {
            Some(bytes) => decode_bundle_entry(location.as_ref(), &bytes, at).map(Some),
            None => Ok(None),
        }
    }

    /// The object at `location`; `None` when there is none. An object larger than `limit` is
    /// refused before it is read ([`Error::BundleCorrupt`]: only bundles are read with a limit).
    async fn get(&self, location: &Path, limit: Option<u64>) -> Result<Option<Bytes>> {
        let bytes = match self.store.get(location).await {
            Ok(result) => match limit {
                Some(limit) if result.meta.size > limit => {
                    return Err(Error::BundleCorrupt {
                        path: location.to_string(),
                        reason: format!("{} bytes, more than {limit}", result.meta.size),
                    });
                }
                _ => result.bytes().await,
            },
            Err(e) => Err(e),
        };
        match bytes {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(Error::TileStore {
                path: location.to_string(),
                source,
            }),
        }
    }

    /// Puts `bytes` at `location`, replacing what is there.
    async fn put(&self, location: &Path, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(location, bytes.into())
            .await
            .map(|_| ())
            .map_err(|source| Error::TileStore {
                path: location.to_string(),
                source,
            })
    }

    /// Deletes a tile (tests that damage tiles on purpose; operators deleting a cache).
    pub async fn delete(&self, tile: &TileId) -> Result<()> {
        let location = self.location(tile);
        self.store
            .delete(&location)
            .await
            .map_err(|source| Error::TileStore {
                path: location.to_string(),
                source,
            })
    }

    /// Writes raw bytes where a tile belongs, bypassing every check (tests that corrupt tiles).
    pub async fn put_raw(&self, tile: &TileId, bytes: Vec<u8>) -> Result<()> {
        self.put(&self.location(tile), bytes).await
    }
}
