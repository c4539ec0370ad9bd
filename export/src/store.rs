//! The archive's object store: opened from a URL the way the blob store is
//! (`toolledger_ledger::BlobStore::open_with`: a directory, `file:///dir`, `s3://bucket/prefix`,
//! `memory://`), with create-only puts that tolerate an identical re-run.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutMode, PutOptions, PutPayload};
use url::Url;

use crate::{Error, Result};

/// What a create-only put found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was new and is now written.
    Written,
    /// The object existed with exactly these bytes (a re-run after a crash).
    AlreadyEqual,
}

/// A Parquet archive's root in an object store.
#[derive(Debug, Clone)]
pub struct Archive {
    store: Arc<dyn ObjectStore>,
    prefix: StorePath,
    url: String,
    /// The directory of a local archive.
    local_dir: Option<std::path::PathBuf>,
}

impl Archive {
    /// Opens the archive at `location` (a directory, `file:///dir`, `s3://bucket/prefix` or `memory://`);
    /// `options` are object_store S3 keys (`aws_endpoint`, …) that override the `AWS_*` variables.
    pub fn open(location: &str, options: &[(String, String)]) -> Result<Self> {
        let url_text = if location.contains("://") {
            location.to_owned()
        } else {
            let path = std::path::absolute(location).map_err(|e| Error::ArchiveConfig {
                url: location.to_owned(),
                reason: e.to_string(),
            })?;
            format!("file://{}", path.display())
        };
        let bad = |reason: String| Error::ArchiveConfig {
            url: location.to_owned(),
            reason,
        };
        let url = Url::parse(&url_text).map_err(|e| bad(e.to_string()))?;
        let (scheme, prefix) = ObjectStoreScheme::parse(&url).map_err(|e| bad(e.to_string()))?;
        let mut local_dir = None;
        let (store, prefix): (Arc<dyn ObjectStore>, StorePath) = match scheme {
            ObjectStoreScheme::Memory => (Arc::new(object_store::memory::InMemory::new()), prefix),
            ObjectStoreScheme::Local => {
                let dir = url
                    .to_file_path()
                    .map_err(|()| bad("not a local path".to_owned()))?;
                std::fs::create_dir_all(&dir).map_err(|e| bad(e.to_string()))?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?;
                local_dir = Some(dir);
                (Arc::new(local), StorePath::default())
            }
            ObjectStoreScheme::AmazonS3 => {
                let mut builder = object_store::aws::AmazonS3Builder::from_env().with_url(url_text.clone());
                for (key, value) in options {
                    let key = key
                        .to_ascii_lowercase()
                        .parse()
                        .map_err(|e: object_store::Error| bad(e.to_string()))?;
                    builder = builder.with_config(key, value);
                }
                (Arc::new(builder.build().map_err(|e| bad(e.to_string()))?), prefix)
            }
            other => return Err(bad(format!("unsupported store {other:?}"))),
        };
        Ok(Self {
            store,
            prefix,
            url: url_text,
            local_dir,
        })
    }

    /// Removes what interrupted puts left in a local archive, returning how many files.
    ///
    /// The local object store stages a put in `<name>#<digits>` beside `<name>` and then renames or
    /// links it into place, so a kill -9 during a put leaves the staging file. The store's own
    /// listing skips such names, but a Parquet reader pointed at a table's folder (pyarrow, DuckDB)
    /// tries to read them and fails. Only staging files whose object exists are removed: call it
    /// after recovery has rewritten the newest range, so every interrupted put's object exists; one
    /// beside a missing object may be another writer's put in flight.
    pub async fn remove_interrupted_puts(&self) -> Result<usize> {
        let Some(dir) = self.local_dir.clone() else {
            return Ok(0);
        };
        let walk_error = |e: &dyn std::fmt::Display| Self::store_error("", e);
        tokio::task::spawn_blocking(move || remove_staging_files(&dir))
            .await
            .map_err(|e| walk_error(&e))?
            .map_err(|e| walk_error(&e))
    }

    /// The URL the archive was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn full(&self, relative: &str) -> StorePath {
        let mut path = self.prefix.clone();
        for part in relative.split('/').filter(|p| !p.is_empty()) {
            path = path.join(part);
        }
        path
    }

    fn store_error(relative: &str, e: &dyn std::fmt::Display) -> Error {
        Error::Store {
            path: relative.to_owned(),
            reason: e.to_string(),
        }
    }

    /// Writes `bytes` at `relative` only if nothing is there; an existing object with the same bytes
    /// is fine (an idempotent re-run), one with other bytes is [`Error::Conflict`].
    pub async fn put_create(&self, relative: &str, bytes: Bytes) -> Result<PutOutcome> {
        let path = self.full(relative);
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from_bytes(bytes.clone()), options)
            .await
        {
            Ok(_) => Ok(PutOutcome::Written),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                let existing = self
                    .get(relative)
                    .await?
                    .ok_or_else(|| Self::store_error(relative, &"exists, then vanished"))?;
                if existing == bytes {
                    Ok(PutOutcome::AlreadyEqual)
                } else {
                    Err(Error::Conflict {
                        path: relative.to_owned(),
                        existing: existing.len(),
                        new: bytes.len(),
                    })
                }
            }
            Err(e) => Err(Self::store_error(relative, &e)),
        }
    }

    /// The object at `relative`, `None` when there is none.
    pub async fn get(&self, relative: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.full(relative)).await {
            Ok(result) => Ok(Some(
                result
                    .bytes()
                    .await
                    .map_err(|e| Self::store_error(relative, &e))?,
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Self::store_error(relative, &e)),
        }
    }

    /// Writes a cache object (the exporter's tracker snapshots), replacing any earlier one.
    pub async fn put_cache(&self, relative: &str, bytes: Bytes) -> Result<()> {
        self.store
            .put(&self.full(relative), PutPayload::from_bytes(bytes))
            .await
            .map_err(|e| Self::store_error(relative, &e))?;
        Ok(())
    }

    /// Removes a cache object (an old tracker snapshot); one already gone is fine.
    pub async fn delete_cache(&self, relative: &str) -> Result<()> {
        match self.store.delete(&self.full(relative)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Self::store_error(relative, &e)),
        }
    }

    /// Overwrites an object unconditionally: only for tests that tamper with an archive.
    pub async fn overwrite_for_tests(&self, relative: &str, bytes: Bytes) -> Result<()> {
        self.store
            .put(&self.full(relative), PutPayload::from_bytes(bytes))
            .await
            .map_err(|e| Self::store_error(relative, &e))?;
        Ok(())
    }

    /// Every object under the folder `relative`, as paths relative to the archive root, sorted.
    pub async fn list(&self, relative: &str) -> Result<Vec<String>> {
        let dir = self.full(relative);
        let prefix_parts = self.prefix.parts().count();
        let mut out: Vec<String> = self
            .store
            .list(Some(&dir))
            .map_ok(|meta| {
                meta.location
                    .parts()
                    .skip(prefix_parts)
                    .map(|p| p.as_ref().to_owned())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .try_collect()
            .await
            .map_err(|e| Self::store_error(relative, &e))?;
        out.sort();
        Ok(out)
    }
}

/// [`Archive::remove_interrupted_puts`] under `dir`.
fn remove_staging_files(dir: &std::path::Path) -> std::io::Result<usize> {
    let mut removed = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                dirs.push(path);
                continue;
            }
            let name = entry.file_name();
            let Some((object, suffix)) = name.to_str().and_then(|name| name.rsplit_once('#')) else {
                continue;
            };
            if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) && dir.join(object).is_file()
            {
                std::fs::remove_file(&path)?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}
