//! Shared helpers: a ledger written straight into ATL_LEDGER with signed checkpoints, the SQLite
//! projection of the same entries, and the exporter run until caught up.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use serde_json::Value;
use toolledger_export::{Archive, Options, Summary};
use toolledger_merkle::{Checkpoint, CompactRange, NoteSigner, Verifiers};
use toolledger_projector::{RawEntry, Store};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::NatsFixture;
pub use toolledger_testkit::entry_bytes;
use toolledger_wire::streams::{self, CHECKPOINTS_SUBJECT, ContractSettings};

/// The origin the test ledger's checkpoints name.
pub const ORIGIN: &str = "toolledger/ATL_LEDGER";

/// Generated sessions over three tenants, every class included.
pub fn generated_events(seed: u64, sessions: usize) -> Vec<Value> {
    generated(seed, sessions).events
}

/// Generated sessions with the scenario script's truth.
pub fn generated(seed: u64, sessions: usize) -> toolledger_schemas::generator::Generated {
    generate(&GeneratorConfig {
        seed,
        sessions,
        tenants: vec!["acme".to_owned(), "globex".to_owned(), "initech".to_owned()],
        extra_invocations: 3,
        plant_anomalies: true,
        // 2026-05-08T23:52:00Z: the sessions cross midnight, so there are two date partitions.
        start_unix_ms: 1_778_284_320_000,
        ..GeneratorConfig::default()
    })
}

/// A ledger the test writes itself: entries appended to ATL_LEDGER, checkpoints signed and
/// published to ATL_CHECKPOINTS as ingest would.
pub struct TestLedger {
    pub js: jetstream::Context,
    pub entries: Vec<RawEntry>,
    pub tree: CompactRange,
    pub signer: NoteSigner,
    pub checkpoints: u64,
}

impl TestLedger {
    pub async fn create(nats: &NatsFixture) -> Self {
        let js = jetstream::new(nats.client().await);
        let settings = ContractSettings::default();
        js.create_stream(streams::ledger_config(&settings)).await.unwrap();
        js.create_stream(streams::checkpoints_config(&settings))
            .await
            .unwrap();
        Self {
            js,
            entries: Vec::new(),
            tree: CompactRange::new(),
            signer: NoteSigner::generate(ORIGIN).unwrap(),
            checkpoints: 0,
        }
    }

    pub fn verifiers(&self) -> Verifiers {
        Verifiers::new([self.signer.verifier()])
    }

    /// Appends `events`, signing a checkpoint every `every` entries and at the end.
    pub async fn append(&mut self, events: &[Value], every: usize) {
        for chunk in events.chunks(every.max(1)) {
            let mut acks = Vec::new();
            for event in chunk {
                let subject = toolledger_testkit::ledger_subject(event);
                let bytes = entry_bytes(event);
                self.tree.append(toolledger_merkle::leaf_hash(&bytes));
                acks.push((
                    bytes.clone(),
                    self.js.publish(subject, bytes.into()).await.unwrap(),
                ));
            }
            for (bytes, ack) in acks {
                let seq = ack.await.unwrap().sequence;
                self.entries.push(RawEntry { seq, bytes });
            }
            self.checkpoint().await;
        }
    }

    /// Signs and publishes a checkpoint of the current tree.
    pub async fn checkpoint(&mut self) {
        let note = Checkpoint::new(ORIGIN, self.tree.size(), self.tree.root())
            .sign(&[&self.signer])
            .unwrap();
        self.js
            .publish(CHECKPOINTS_SUBJECT, note.into_bytes().into())
            .await
            .unwrap()
            .await
            .unwrap();
        self.checkpoints += 1;
    }

    /// The SQLite projection of every entry, built by the projector library.
    pub fn project(&self, path: &Path) {
        let mut store = Store::open(path, Default::default()).unwrap();
        for chunk in self.entries.chunks(500) {
            store.apply_batch(chunk).unwrap();
        }
    }
}

/// Exporter options for tests: ranges of `rows` entries, no delay-based rotation.
pub fn options(archive: &Archive, rows: u64) -> Options {
    Options {
        rows_per_file: rows,
        max_delay: Duration::from_secs(3600),
        row_group_rows: 100,
        until_caught_up: true,
        ..Options::new(archive.clone())
    }
}

/// Runs the exporter until it has caught up.
pub async fn export(nats: &NatsFixture, options: Options) -> toolledger_export::Result<Summary> {
    toolledger_export::run(nats.client().await, options, std::future::pending()).await
}

/// Every object of an archive, path → bytes.
pub async fn objects(archive: &Archive) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for path in archive.list("").await.unwrap() {
        out.insert(path.clone(), archive.get(&path).await.unwrap().unwrap().to_vec());
    }
    out
}

/// Copies an archive to a local directory (DuckDB cannot fetch its S3 extension here).
pub async fn download(archive: &Archive, dir: &Path) {
    for (path, bytes) in objects(archive).await {
        let target = dir.join(&path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, bytes).unwrap();
    }
}
