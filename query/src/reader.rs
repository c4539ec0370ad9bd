//! Read-only connections to the current projection generation, used on blocking threads.
//!
//! Each read takes a connection from a small pool (or opens one), runs on a `spawn_blocking`
//! thread, and returns it. A connection is reused only while `current` still names its generation,
//! so readers follow a rebuild on their next read. A read that meets a damaged file is noted, so
//! `/healthz` keeps saying so until `current` names another generation.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;
use toolledger_projector::{Generations, Store};
use toolledger_wire::partition::{Partition, Partitions};

use crate::error::{Error, Result};

/// Connections kept for reuse; enough for the API's concurrent reads on a small machine, and each
/// idle one holds only SQLite's page cache.
const POOL_SIZE: usize = 8;

/// Opens and pools read-only connections to `<data_dir>/projections/current`.
#[derive(Debug)]
pub struct Reader {
    generations: Generations,
    pool: Mutex<Vec<Store>>,
    /// A damaged file a read met: the generation it was in and what SQLite said.
    damaged: Mutex<Option<(Option<u64>, String)>>,
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
            damaged: Mutex::new(None),
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
        let store = self.checkout().inspect_err(|error| self.failed(error))?;
        let result = read(store.connection());
        if let Err(error) = &result {
            self.failed(error);
        }
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL_SIZE {
            pool.push(store);
        }
        result
    }

    /// The generations read.
    pub fn generations(&self) -> &Generations {
        &self.generations
    }

    /// Notes an error a read of this projection returned (by this reader, or over [`Reader::database`]):
    /// a damaged file is reported by [`Reader::damage`] until `current` names another generation
    /// (a damaged page can sit where a health check does not look).
    pub fn failed(&self, error: &Error) {
        if let Error::ProjectionUnavailable { .. } = error {
            let generation = self.generations.current().ok().flatten().map(|g| g.number);
            *self.damaged.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((generation, error.to_string()));
        }
    }

    /// What a read found damaged in the generation `current` names now, if anything.
    pub fn damage(&self, current: Option<u64>) -> Option<String> {
        let mut damaged = self.damaged.lock().unwrap_or_else(PoisonError::into_inner);
        match &*damaged {
            Some((number, detail)) if *number == current => Some(detail.clone()),
            // `current` moved on (a rebuild): the damage was the old generation's.
            Some(_) => {
                *damaged = None;
                None
            }
            None => None,
        }
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

/// One [`Reader`] per partition of the ledger (`docs/scaling.md`): a tenant's rows are in its
/// partition's projection only, so every tenant-scoped read goes to that partition's reader.
#[derive(Debug, Clone)]
pub struct Readers {
    partitions: Partitions,
    readers: Vec<Arc<Reader>>,
}

impl Readers {
    /// The readers of every partition's projections under `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>, partitions: Partitions) -> Self {
        let data_dir = data_dir.into();
        Self {
            partitions,
            readers: partitions
                .all()
                .map(|p| Reader::of(data_dir.clone(), p))
                .collect(),
        }
    }

    /// How many partitions the ledger has.
    pub fn partitions(&self) -> Partitions {
        self.partitions
    }

    /// The reader of `partition` (one below the count: [`Readers::partition`] checks what a caller sends).
    pub fn of(&self, partition: Partition) -> &Arc<Reader> {
        &self.readers[usize::from(partition.index())]
    }

    /// Every partition's reader, p0 first.
    pub fn all(&self) -> impl Iterator<Item = (Partition, &Arc<Reader>)> {
        self.partitions.all().zip(&self.readers)
    }

    /// The reader of `tenant`'s partition. With no tenant, a ledger of one partition has one
    /// projection to read; a partitioned one answers which tenant's: `tenant` is then required.
    pub fn scoped(&self, tenant: Option<&str>) -> Result<&Arc<Reader>> {
        match (tenant, self.partitions.count()) {
            (_, 1) => Ok(&self.readers[0]),
            (Some(tenant), _) => Ok(self.of(self.partitions.of(tenant))),
            (None, count) => Err(Error::invalid(
                "tenant",
                format!(
                    "required: the ledger has {count} partitions (ledger.partitions), each with its own \
                     projection; name the tenant to read (docs/scaling.md)"
                ),
            )),
        }
    }

    /// `reconstruction` with its payloads' erasures from p0's projection, where erasure records
    /// (tenant `_system`) are projected whichever partition the tenant is in; unchanged for a
    /// tenant of p0, whose own read already found them.
    pub async fn with_erasures(
        &self,
        mut reconstruction: crate::Reconstruction,
    ) -> Result<crate::Reconstruction> {
        if self.partitions.of(&reconstruction.tenant) == Partition::ZERO || reconstruction.payloads.is_empty()
        {
            return Ok(reconstruction);
        }
        self.of(Partition::ZERO)
            .read(move |conn| {
                crate::reconstruct::erasures(conn, &mut reconstruction)?;
                Ok(reconstruction)
            })
            .await
    }

    /// A partition a caller names by index, refused unless the ledger has it.
    pub fn partition(&self, field: &str, value: &str) -> Result<Partition> {
        value
            .parse::<u16>()
            .ok()
            .filter(|index| *index < self.partitions.count())
            .map(Partition::new)
            .ok_or_else(|| {
                Error::invalid(
                    field,
                    format!(
                        "`{value}`: the ledger has partitions 0 to {} (ledger.partitions)",
                        self.partitions.count() - 1
                    ),
                )
            })
    }
}
