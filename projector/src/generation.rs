//! Generations: every rebuild writes a new database, and readers switch when they reopen.
//!
//! ```text
//! <data_dir>/projections/
//!   current              "gen-2\n" — replaced atomically (write current.tmp, fsync, rename, fsync dir)
//!   gen-1/toolledger.sqlite   the previous generation, still readable by whoever has it open
//!   gen-2/toolledger.sqlite   the current one
//! <data_dir>/projections-p<K>/   the same for partition K ≥ 1 of a partitioned ledger (its own
//!                                 generations and position: DESIGN §8)
//! ```
//!
//! A generation that `current` does not name is either an older one or a rebuild that did not
//! finish (it is never switched to; the next rebuild takes a new number). A rebuild that switches
//! keeps the generation it replaced (readers that have not reopened yet still read it) and removes
//! every generation numbered below that one ([`Generations::prune_below`]): older generations, and
//! rebuilds that failed before it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use toolledger_wire::partition::Partition;

use crate::error::{Error, Result};

/// The database file inside a generation directory.
pub const DATABASE_FILE: &str = "toolledger.sqlite";
/// The pointer file naming the current generation.
pub const POINTER_FILE: &str = "current";

/// The projections directory of a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generations {
    root: PathBuf,
    partition: Partition,
}

/// One generation directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// Its number, `n` in `gen-<n>`.
    pub number: u64,
    /// Its directory.
    pub dir: PathBuf,
}

impl Generation {
    /// `gen-<n>`.
    pub fn name(&self) -> String {
        format!("gen-{}", self.number)
    }

    /// Its SQLite database.
    pub fn database(&self) -> PathBuf {
        self.dir.join(DATABASE_FILE)
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Generations {
    /// The projections of `data_dir` (`<data_dir>/projections`): a single ledger's, or partition
    /// p0's.
    pub fn new(data_dir: &Path) -> Generations {
        Generations::of(data_dir, Partition::ZERO)
    }

    /// The projections of `partition` (`<data_dir>/projections-p<K>`; p0's is `projections`).
    pub fn of(data_dir: &Path, partition: Partition) -> Generations {
        Generations {
            root: data_dir.join(partition.file_name("projections")),
            partition,
        }
    }

    /// The ledger partition these projections follow.
    pub fn partition(&self) -> Partition {
        self.partition
    }

    /// The projections directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn generation(&self, number: u64) -> Generation {
        Generation {
            number,
            dir: self.root.join(format!("gen-{number}")),
        }
    }

    /// The generation `current` names, if there is a pointer.
    pub fn current(&self) -> Result<Option<Generation>> {
        let pointer = self.root.join(POINTER_FILE);
        let text = match fs::read_to_string(&pointer) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Io {
                    path: pointer,
                    source,
                });
            }
        };
        let number = text
            .trim()
            .strip_prefix("gen-")
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| Error::BadPointer {
                path: pointer.clone(),
                reason: format!("{:?} is not gen-<n>", text.trim()),
            })?;
        let generation = self.generation(number);
        if !generation.dir.is_dir() {
            return Err(Error::BadPointer {
                path: pointer,
                reason: format!("{} does not exist", generation.dir.display()),
            });
        }
        Ok(Some(generation))
    }

    /// The current generation, creating `gen-1` (its database included, so `current` never names
    /// a generation without one, even if the process dies here) and pointing at it when there is
    /// none yet.
    pub fn current_or_init(&self) -> Result<Generation> {
        if let Some(generation) = self.current()? {
            return Ok(generation);
        }
        let generation = self.create_next()?;
        drop(crate::store::Store::open(
            &generation.database(),
            toolledger_schemas::state::Config::default(),
        )?);
        self.switch_to(&generation)?;
        Ok(generation)
    }

    /// Every generation directory, by number.
    pub fn list(&self) -> Result<Vec<Generation>> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(Error::Io {
                    path: self.root.clone(),
                    source,
                });
            }
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io(&self.root))?;
            let name = entry.file_name();
            if let Some(number) = name
                .to_str()
                .and_then(|n| n.strip_prefix("gen-"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                found.push(self.generation(number));
            }
        }
        found.sort_by_key(|g| g.number);
        Ok(found)
    }

    /// Creates the directory of a new generation, numbered after every existing one.
    pub fn create_next(&self) -> Result<Generation> {
        fs::create_dir_all(&self.root).map_err(io(&self.root))?;
        let next = self.list()?.last().map_or(1, |g| g.number + 1);
        let generation = self.generation(next);
        fs::create_dir(&generation.dir).map_err(io(&generation.dir))?;
        Ok(generation)
    }

    /// Removes every generation numbered below `kept` (the one a rebuild just replaced): the
    /// generations before it and rebuilds that failed before it. Returns those removed.
    pub fn prune_below(&self, kept: &Generation) -> Result<Vec<Generation>> {
        let mut removed = Vec::new();
        for generation in self.list()? {
            if generation.number < kept.number {
                fs::remove_dir_all(&generation.dir).map_err(io(&generation.dir))?;
                removed.push(generation);
            }
        }
        Ok(removed)
    }

    /// Points `current` at `generation`, atomically: readers see the old pointer or the new one.
    pub fn switch_to(&self, generation: &Generation) -> Result<()> {
        let tmp = self.root.join(format!("{POINTER_FILE}.tmp"));
        let pointer = self.root.join(POINTER_FILE);
        {
            let mut file = fs::File::create(&tmp).map_err(io(&tmp))?;
            writeln!(file, "{}", generation.name()).map_err(io(&tmp))?;
            file.sync_all().map_err(io(&tmp))?;
        }
        fs::rename(&tmp, &pointer).map_err(io(&pointer))?;
        fs::File::open(&self.root)
            .and_then(|dir| dir.sync_all())
            .map_err(io(&self.root))?;
        Ok(())
    }
}
