//! What the API depends on, checked for `/healthz` and `/metrics` (a telemetry probe, so both say
//! the same, at the moment they are asked):
//!
//! ```text
//! projection  the current generation opens read-only and its schema version and position read;
//!             a read that met a damaged file keeps it failing until `current` names another
//!             generation (a damaged page can sit where the check does not look: Reader::failed)
//! projector   its heartbeat (toolledger_projector::heartbeat) is fresh and says it is running
//! access_log  access records are being published (only when reads are recorded)
//! ```
//!
//! In a partitioned ledger every partition has its own `projection-p<K>` and `projector-p<K>`
//! (p0's keep the single-ledger names), so `/healthz` names the partition that is behind.
//!
//! Each failing component's detail says what is wrong and what to run.

use std::sync::Arc;

use toolledger_core::telemetry::{Health, Telemetry};
use toolledger_projector::Store;
use toolledger_projector::heartbeat::{self, Heartbeat};

use crate::access::PublishHealth;
use crate::reader::{Reader, Readers};

const ACCESS_LOG: &str = "access_log";

/// The API's dependencies: every partition's projection and projector, and the access log.
pub(crate) struct Dependencies {
    readers: Readers,
    access_log: Option<PublishHealth>,
}

impl Dependencies {
    /// Checks the dependencies of an API reading `readers` whenever `telemetry` reports.
    pub(crate) fn watch(readers: Readers, access_log: Option<PublishHealth>, telemetry: &Telemetry) {
        let probe = Arc::new(Self { readers, access_log });
        let health = telemetry.health().clone();
        telemetry.add_probe(Arc::new(move || {
            let dependencies = Arc::clone(&probe);
            let health = health.clone();
            Box::pin(async move {
                // Opening the databases and two small reads each: file I/O, so off the async workers.
                let _ = tokio::task::spawn_blocking(move || dependencies.check(&health)).await;
            })
        }));
    }

    /// Each partition's components are its own (`projection`, `projector` for p0 or a single
    /// ledger; `projection-p<K>`, `projector-p<K>`), so one lagging partition is named.
    fn check(&self, health: &Health) {
        for (partition, reader) in self.readers.all() {
            let projection = partition.file_name("projection");
            match projection_state(reader) {
                Ok(detail) => health.ok(&projection, detail),
                Err(detail) => health.failing(&projection, detail),
            }
            let projector = heartbeat::component(partition);
            let generations = reader.generations();
            match Heartbeat::read(generations) {
                Ok(Some(beat)) => match beat.verdict() {
                    (true, detail) => health.ok(&projector, detail),
                    (false, detail) => health.failing(&projector, detail),
                },
                Ok(None) => health.failing(
                    &projector,
                    format!(
                        "no projector has run on {} (no heartbeat): start `toolledger project`",
                        generations.root().display()
                    ),
                ),
                Err(error) => health.failing(&projector, error.to_string()),
            }
        }
        if let Some(log) = &self.access_log {
            match log.check() {
                Ok(()) => health.ok(ACCESS_LOG, "publishing access records"),
                Err(detail) => health.failing(ACCESS_LOG, detail),
            }
        }
    }
}

/// A projection's state: `Ok` with its generation and position, or what is wrong and what to do.
fn projection_state(reader: &Reader) -> Result<String, String> {
    let rebuild = "run `toolledger rebuild` to build a new generation from the ledger";
    let generations = reader.generations();
    let generation = match generations.current() {
        Ok(Some(generation)) => generation,
        Ok(None) => {
            return Err(format!(
                "no projection in {} yet: run `toolledger project` (or `toolledger up`)",
                generations.root().display()
            ));
        }
        Err(error) => return Err(format!("{error}; {rebuild}")),
    };
    if let Some(detail) = reader.damage(Some(generation.number)) {
        return Err(detail);
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
