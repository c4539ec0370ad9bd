//! Opening the tile store (the Merkle tree's C2SP tiles, DESIGN §4) from a location as the
//! configuration names it. The [`TileStore`] itself lives in `toolledger-merkle`, which knows nothing of
//! configuration or URLs.

use std::sync::Arc;

use object_store::ObjectStoreScheme;
use toolledger_merkle::TileStore;

use crate::{BoxError, Error, Result};

/// Opens the tile store at `location`: a directory path (created if missing), `file:///dir`,
/// `memory://` (process-local, for tests) or `s3://bucket/prefix` (credentials and endpoint from the
/// standard `AWS_*` environment variables).
pub fn open_tiles(location: &str) -> Result<TileStore> {
    let bad = |reason: &str, source: Option<BoxError>| Error::TileStoreConfig {
        location: location.to_owned(),
        reason: reason.to_owned(),
        source,
    };
    let local = |dir: &std::path::Path| {
        std::fs::create_dir_all(dir).map_err(|e| bad("creating the directory", Some(e.into())))?;
        TileStore::local(dir).map_err(|e| bad("opening the directory", Some(e.into())))
    };
    if !location.contains("://") {
        return local(std::path::Path::new(location));
    }
    let url = url::Url::parse(location).map_err(|e| bad("not a URL", Some(e.into())))?;
    let (scheme, prefix) =
        ObjectStoreScheme::parse(&url).map_err(|e| bad("not an object store URL", Some(e.into())))?;
    match scheme {
        ObjectStoreScheme::Memory => Ok(TileStore::in_memory()),
        ObjectStoreScheme::Local => {
            let dir = url.to_file_path().map_err(|()| bad("not a local path", None))?;
            local(&dir)
        }
        ObjectStoreScheme::AmazonS3 => {
            let store = object_store::aws::AmazonS3Builder::from_env()
                .with_url(location)
                .build()
                .map_err(|e| bad("building the S3 client", Some(e.into())))?;
            Ok(TileStore::new(Arc::new(store), prefix.as_ref()))
        }
        _ => Err(bad(
            "unsupported tile store (a directory, file://, memory:// or s3://)",
            None,
        )),
    }
}
