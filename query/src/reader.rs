//! Read-only connections to the current projection generation, used on blocking threads.
//!
//! Each read takes a connection from a small pool (or opens one), runs on a `spawn_blocking`
//! thread, and returns it. A connection is reused only while `current` still names its generation,
//! so readers follow a rebuild on their next read.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use toolledger_projector::{Generations, Store};
use toolledger_wire::partition::Partition;

use crate::error::{Error, Result};

/// Connections kept for reuse; enough for the API's concurrent reads on a small machine, and each
/// idle one holds only SQLite's page cache.
const POOL_SIZE: usize = 8;

/// Opens and pools read-only connections to `<data_dir>/projections/current`.
#[derive(Debug)]
pub struct Reader {
    generations: Generations,
    pool: Mutex<Vec<Store>>,
}

impl Reader {
    /// A reader of the projections under `data_dir` (a single ledger's, or partition p0's).
    pub fn new(data_dir: impl Into<PathBuf>) -> Arc<Self> {
        Self::of(data_dir, Partition::ZERO)
    }

    /// A reader of `partition`'s projections under `data_dir` (`docs/projections.md`).
    pub fn of(data_dir: impl Into<PathBuf>, partition: Partition) -> Arc<Self> {
        let data_dir = data_dir.into();
        Arc::new(Self {
            generations: Generations::of(&data_dir, partition),
            pool: Mutex::new(Vec::new()),
        })
    }

    /// Runs `read` on a blocking thread with a connection to the current generation.
    pub async fn read<T, F>(self: &Arc<Self>, read: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || this.read_blocking(read))
            .await
            .map_err(|e| Error::Task(e.to_string()))?
    }

    /// Runs `read` on this thread (benchmarks, or callers already on a blocking thread).
    pub fn read_blocking<T>(&self, read: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let store = self.checkout()?;
        let result = read(store.connection());
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL_SIZE {
            pool.push(store);
        }
        result
    }

    /// The current generation's database file (analysts' SQL opens its own sandboxed connection).
    pub fn database(&self) -> Result<PathBuf> {
        Ok(self
            .generations
            .current()?
            .ok_or_else(|| Error::NoProjection {
                path: self.generations.root().to_path_buf(),
            })?
            .database())
    }

    fn checkout(&self) -> Result<Store> {
        let current = self
            .generations
            .current()?
            .ok_or_else(|| Error::NoProjection {
                path: self.generations.root().to_path_buf(),
            })?
            .database();
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        // Connections to an older generation are dropped here: that is how readers follow a rebuild.
        pool.retain(|s| s.path() == current);
        if let Some(store) = pool.pop() {
            return Ok(store);
        }
        drop(pool);
        Ok(Store::open_readonly(&current)?)
    }
}
