//! What the API depends on, checked for `/healthz` and `/metrics` (a telemetry probe, so both say
//! the same, at the moment they are asked):
//!
//! ```text
//! projection  the current generation opens read-only and its schema version and position read;
//!             a read that met a damaged file keeps it failing until `current` names another
//!             generation (a damaged page can sit where the check does not look)
//! projector   its heartbeat (toolledger_projector::heartbeat) is fresh and says it is running
//! access_log  access records are being published (only when reads are recorded)
//! ```
//!
//! Each failing component's detail says what is wrong and what to run.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use toolledger_core::telemetry::{Health, Telemetry};
use toolledger_projector::heartbeat::{COMPONENT as PROJECTOR, Heartbeat};
use toolledger_projector::{Generations, Store};

use crate::access::PublishHealth;
use crate::error::Error;

const PROJECTION: &str = "projection";
const ACCESS_LOG: &str = "access_log";

/// The API's dependencies and what reads found out about them.
pub(crate) struct Dependencies {
    generations: Generations,
    access_log: Option<PublishHealth>,
    /// A damaged file a read met: the generation it was in and what SQLite said.
    damaged: Mutex<Option<(Option<u64>, String)>>,
}

impl Dependencies {
    /// The dependencies of an API over the projections in `data_dir`, checked whenever `telemetry`
    /// reports.
    pub(crate) fn watch(
        data_dir: &Path,
        access_log: Option<PublishHealth>,
        telemetry: &Telemetry,
    ) -> Arc<Self> {
        let dependencies = Arc::new(Self {
            generations: Generations::new(data_dir),
            access_log,
            damaged: Mutex::new(None),
        });
        let probe = Arc::clone(&dependencies);
        let health = telemetry.health().clone();
        telemetry.add_probe(Arc::new(move || {
            let dependencies = Arc::clone(&probe);
            let health = health.clone();
            Box::pin(async move {
                // Opening the database and two small reads: file I/O, so off the async workers.
                let _ = tokio::task::spawn_blocking(move || dependencies.check(&health)).await;
            })
        }));
        dependencies
    }

    /// Notes an error a read returned: a damaged projection keeps `projection` failing.
    pub(crate) fn read_failed(&self, error: &Error) {
        if let Error::ProjectionUnavailable { .. } = error {
            let generation = self.generations.current().ok().flatten().map(|g| g.number);
            *self.damaged.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((generation, error.to_string()));
        }
    }

    fn check(&self, health: &Health) {
        match self.projection() {
            Ok(detail) => health.ok(PROJECTION, detail),
            Err(detail) => health.failing(PROJECTION, detail),
        }
        match Heartbeat::read(&self.generations) {
            Ok(Some(beat)) => match beat.verdict() {
                (true, detail) => health.ok(PROJECTOR, detail),
                (false, detail) => health.failing(PROJECTOR, detail),
            },
            Ok(None) => health.failing(
                PROJECTOR,
                format!(
                    "no projector has run on {} (no heartbeat): start `toolledger project`",
                    self.generations.root().display()
                ),
            ),
            Err(error) => health.failing(PROJECTOR, error.to_string()),
        }
        if let Some(log) = &self.access_log {
            match log.check() {
                Ok(()) => health.ok(ACCESS_LOG, "publishing access records"),
                Err(detail) => health.failing(ACCESS_LOG, detail),
            }
        }
    }

    /// The projection's state: `Ok` with its generation and position, or what is wrong and what to do.
    fn projection(&self) -> Result<String, String> {
        let rebuild = "run `toolledger rebuild` to build a new generation from the ledger";
        let generation = match self.generations.current() {
            Ok(Some(generation)) => generation,
            Ok(None) => {
                return Err(format!(
                    "no projection in {} yet: run `toolledger project` (or `toolledger up`)",
                    self.generations.root().display()
                ));
            }
            Err(error) => return Err(format!("{error}; {rebuild}")),
        };
        {
            let mut damaged = self.damaged.lock().unwrap_or_else(PoisonError::into_inner);
            match &*damaged {
                Some((number, detail)) if *number == Some(generation.number) => return Err(detail.clone()),
                // `current` moved on (a rebuild): the damage was the old generation's.
                Some(_) => *damaged = None,
                None => {}
            }
        }
        let database = generation.database();
        match Store::open_readonly(&database).and_then(|store| store.position()) {
            Ok(position) => Ok(format!("{} at seq {position}", generation.name())),
            Err(error) => Err(format!(
                "{} ({}) cannot be read: {error}; {rebuild}",
                generation.name(),
                database.display()
            )),
        }
    }
}
