//! A test ledger: generated events, canonical entries appended with the ingest appender, the tree and
//! checkpoints kept by the checkpointer, tiles in a temp directory.

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use chrono::{TimeZone, Utc};
use toolledger_ingest::append::{Appender, PendingEntry};
use toolledger_ingest::checkpoint::{CheckpointSettings, Checkpointer};
use toolledger_merkle::{NoteSigner, TileStore, Verifiers};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::NatsFixture;
use toolledger_verify::{Report, VerifyOptions, verify_ledger};
use toolledger_wire::streams::{self, ContractSettings, LEDGER};
use toolledger_wire::{LedgerEntry, Mode, produce};

/// The test log's origin and key name.
pub const ORIGIN: &str = "toolledger/test";
/// Checkpoints every this many entries.
pub const EVERY: u64 = 100;

/// The signing key (deterministic, so several checkpointers can hold it).
pub fn signer() -> NoteSigner {
    NoteSigner::from_seed(ORIGIN, [7; 32]).unwrap()
}

/// The keys a verifier trusts.
pub fn verifiers() -> Verifiers {
    Verifiers::new([signer().verifier()])
}

/// The first `count` canonical ledger entries of generated events, as ingest would append them
/// (generated once per test binary).
pub fn generated_entries(count: usize) -> Vec<PendingEntry> {
    static ENTRIES: std::sync::OnceLock<Vec<PendingEntry>> = std::sync::OnceLock::new();
    let all = ENTRIES.get_or_init(|| generate_entries(5));
    assert!(all.len() >= count, "only {} generated entries", all.len());
    all[..count].to_vec()
}

fn generate_entries(sessions: usize) -> Vec<PendingEntry> {
    let events = generate(&GeneratorConfig {
        seed: 42,
        sessions,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        ..GeneratorConfig::default()
    })
    .events;
    let ingested_at = Utc.timestamp_opt(1_778_230_900, 0).unwrap();
    events
        .into_iter()
        .map(|event| {
            let outgoing = produce::prepare(event, None, Mode::Binary).unwrap();
            let decoded =
                toolledger_wire::decode(&outgoing.subject, Some(&outgoing.headers), &outgoing.payload)
                    .unwrap();
            let subject = format!("atl.ledger.{}.{}", decoded.tenant.as_str(), decoded.event.ty());
            let bytes = LedgerEntry::new(decoded, ingested_at).canonical_bytes().unwrap();
            PendingEntry::new(subject, Bytes::from(bytes))
        })
        .collect()
}

/// A ledger on a fresh server with its tree, checkpoints and tiles.
pub struct TestLedger {
    /// Kept for the server's lifetime.
    pub _nats: NatsFixture,
    pub js: jetstream::Context,
    pub tiles_dir: tempfile::TempDir,
    pub entries: Vec<PendingEntry>,
}

impl TestLedger {
    /// Starts a server, creates the contract's streams, and appends `entries` in batches of 50 through
    /// the appender and the checkpointer (a checkpoint every [`EVERY`] entries and one at the end).
    pub async fn build(entries: Vec<PendingEntry>) -> Self {
        let nats = NatsFixture::start();
        let js = jetstream::new(nats.client().await);
        streams::ensure_contract(&js, &ContractSettings::default())
            .await
            .unwrap();
        let tiles_dir = tempfile::tempdir().unwrap();
        let ledger = Self {
            _nats: nats,
            js,
            tiles_dir,
            entries: Vec::new(),
        };
        let mut appender = Appender::open(ledger.js.clone(), LEDGER).await.unwrap();
        let mut checkpointer = ledger.checkpointer(appender.last_seq()).await;
        for batch in entries.chunks(50) {
            let seqs = appender.append(batch).await.unwrap();
            checkpointer.appended(&seqs, batch).await.unwrap();
        }
        checkpointer.checkpoint().await.unwrap();
        Self { entries, ..ledger }
    }

    /// The tile store.
    pub fn tiles(&self) -> TileStore {
        TileStore::local(self.tiles_dir.path()).unwrap()
    }

    /// A checkpointer over ATL_LEDGER at `tail`.
    pub async fn checkpointer(&self, tail: u64) -> Checkpointer {
        Checkpointer::open(self.js.clone(), settings(), signer(), self.tiles(), tail)
            .await
            .unwrap()
    }

    /// Every entry's bytes in ledger order.
    pub fn entry_bytes(&self) -> Vec<Bytes> {
        self.entries.iter().map(|e| e.bytes.clone()).collect()
    }

    /// Verifies `stream` against `checkpoints` with the ledger's tiles, or without tiles.
    pub async fn verify(&self, stream: &str, checkpoints: &str, with_tiles: bool) -> Report {
        let options = VerifyOptions {
            tiles: with_tiles.then(|| self.tiles()),
            ..VerifyOptions::default()
        };
        verify_ledger(&self.js, stream, checkpoints, &verifiers(), &options, &mut |_| {})
            .await
            .unwrap()
    }

    /// Copies `messages` into a new stream with the contract's immutable configuration under `name`
    /// and subjects `<prefix>.>`, publishing each on `<prefix>.x`.
    pub async fn copy_stream(&self, name: &str, prefix: &str, messages: &[Bytes]) {
        let mut config = streams::ledger_config(&ContractSettings::default());
        config.name = name.to_owned();
        config.subjects = vec![format!("{prefix}.>")];
        self.js.create_stream(config).await.unwrap();
        for message in messages {
            self.js
                .publish(format!("{prefix}.x"), message.clone())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    }
}

/// The checkpointer's settings in tests: every [`EVERY`] entries, never by time.
pub fn settings() -> CheckpointSettings {
    CheckpointSettings {
        every: EVERY,
        interval: Duration::from_secs(3600),
        ..CheckpointSettings::new(ORIGIN)
    }
}
