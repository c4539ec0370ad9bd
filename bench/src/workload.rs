//! What every suite measures with: the generator's realistic sessions (all 27 event classes, three
//! tenants, planted secrets and anomalies, realistic sizes), as producer events or as the ledger
//! entries ingest would append for them; and fresh nats-servers under the work directory.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use bytes::Bytes;
use chrono::{TimeZone, Utc};
use rayon::prelude::*;
use serde_json::Value;
use toolledger_core::nats_server::{NatsServer, NatsServerSpec};
use toolledger_ingest::append::PendingEntry;
use toolledger_wire::{LedgerEntry, Mode, produce};

/// The tenants of every generated workload.
pub const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

/// `count` producer events from consecutive generator seeds starting at `seed`: distinct ids, the
/// generator's mix of classes and sizes, sessions kept whole except the last.
pub fn events(count: usize, seed: u64) -> Vec<Value> {
    events_of(&TENANTS, count, seed)
}

/// [`events`] of `tenants` instead of the workload's own.
pub fn events_of(tenants: &[&str], count: usize, seed: u64) -> Vec<Value> {
    toolledger_schemas::generator::workload(tenants, count, seed)
}

/// The ledger entries ingest appends for `events` (canonical RFC 8785 bytes, subject
/// `atl.ledger.<tenant>.<class>`), ingested at a fixed time so runs are byte-identical.
pub fn ledger_entries(events: &[Value]) -> anyhow::Result<Vec<PendingEntry>> {
    let at = Utc
        .timestamp_opt(1_778_230_900, 0)
        .single()
        .context("fixed ingest time")?;
    events
        .par_iter()
        .map(|event| {
            let out = produce::prepare(event.clone(), None, Mode::Binary)?;
            let decoded = toolledger_wire::decode(&out.subject, Some(&out.headers), &out.payload)?;
            let subject = format!("atl.ledger.{}.{}", decoded.tenant.as_str(), decoded.event.ty());
            let bytes = LedgerEntry::new(decoded, at).canonical_bytes()?;
            Ok(PendingEntry::new(subject, Bytes::from(bytes)))
        })
        .collect()
}

/// `count` ledger entries of generated events from distinct generator seeds (unlike a cycled base
/// set; an id repeats only where two seeds' 32 random bits collide), generated and converted in
/// chunks so the JSON values of a million events are never all held at once.
pub fn distinct_entries(count: usize, seed: u64) -> anyhow::Result<Vec<PendingEntry>> {
    const CHUNK: usize = 20_000;
    // A generator seed yields hundreds of events, so a chunk takes well under this many seeds and
    // chunks never share one.
    const SEEDS_PER_CHUNK: u64 = 1_000;
    let mut entries = Vec::with_capacity(count);
    let mut chunk_seed = seed;
    while entries.len() < count {
        let events = events(CHUNK.min(count - entries.len()), chunk_seed);
        entries.extend(ledger_entries(&events)?);
        chunk_seed += SEEDS_PER_CHUNK;
    }
    Ok(entries)
}

/// A nats-server with JetStream storing under a fresh directory in `work_dir`; both go away on drop.
pub struct Server {
    /// The running server (stopped on drop).
    pub server: NatsServer,
    /// Its store and log (deleted on drop, after the server).
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts one.
    pub fn start(bin: &Path, work_dir: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("nats-")
            .tempdir_in(work_dir)
            .with_context(|| format!("temp dir in {}", work_dir.display()))?;
        let server = NatsServer::start(NatsServerSpec {
            bin: bin.to_owned(),
            host: std::net::Ipv4Addr::LOCALHOST.into(),
            port: None,
            store_dir: dir.path().join("store"),
            log_file: Some(dir.path().join("nats-server.log")),
            config_file: None,
            pid_file: None,
        })?;
        Ok(Self { server, dir })
    }

    /// Its client URL.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// A connected JetStream context.
    pub async fn jetstream(&self) -> anyhow::Result<async_nats::jetstream::Context> {
        let client = async_nats::connect(self.url()).await?;
        Ok(async_nats::jetstream::new(client))
    }

    /// The store directory (for bytes-per-event figures).
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }
}

/// Total size of the files under `dir`, in bytes.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// A ledger with signed checkpoints, built the way ingest's appender builds it but without the
/// inbound side: entries published to ATL_LEDGER in pipelined batches of 1,000, each batch handed
/// to the checkpointer (tiles in `tiles`, a signed checkpoint every 1,000 entries).
pub struct LedgerLoader {
    js: async_nats::jetstream::Context,
    checkpointer: toolledger_ingest::checkpoint::Checkpointer,
    /// The key that signs this ledger's checkpoints.
    pub verifiers: toolledger_merkle::Verifiers,
    /// Where the tiles are.
    pub tiles: toolledger_merkle::TileStore,
    /// Entries appended so far.
    pub appended: u64,
    /// Bytes of entries appended so far.
    pub bytes: u64,
}

/// The origin line of bench ledgers' checkpoints.
pub const ORIGIN: &str = "toolledger/bench";

impl LedgerLoader {
    /// Creates the contract's streams on `js` and a checkpointer writing tiles under `tiles_dir`.
    pub async fn open(js: async_nats::jetstream::Context, tiles_dir: &Path) -> anyhow::Result<Self> {
        toolledger_wire::streams::ensure_contract(
            &js,
            &toolledger_wire::streams::ContractSettings::default(),
        )
        .await?;
        let tiles = toolledger_merkle::TileStore::local(tiles_dir)?;
        let signer = toolledger_merkle::NoteSigner::from_seed(ORIGIN, [9; 32])?;
        let verifiers = toolledger_merkle::Verifiers::new([signer.verifier()]);
        let settings = toolledger_ingest::checkpoint::CheckpointSettings {
            every: 1000,
            interval: std::time::Duration::from_secs(3600),
            ..toolledger_ingest::checkpoint::CheckpointSettings::new(ORIGIN)
        };
        let checkpointer =
            toolledger_ingest::checkpoint::Checkpointer::open(js.clone(), settings, signer, tiles.clone(), 0)
                .await?;
        Ok(Self {
            js,
            checkpointer,
            verifiers,
            tiles,
            appended: 0,
            bytes: 0,
        })
    }

    /// Appends `entries` (published without message ids, so repeats of a base set are kept).
    pub async fn append(&mut self, entries: &[PendingEntry]) -> anyhow::Result<()> {
        for batch in entries.chunks(1000) {
            let mut acks = Vec::with_capacity(batch.len());
            for entry in batch {
                acks.push(
                    self.js
                        .publish(entry.subject.clone(), entry.bytes.clone())
                        .await?,
                );
            }
            let mut seqs = Vec::with_capacity(batch.len());
            for ack in acks {
                seqs.push(ack.await?.sequence);
            }
            self.checkpointer.appended(&seqs, batch).await?;
            self.appended += batch.len() as u64;
            self.bytes += batch.iter().map(|e| e.bytes.len() as u64).sum::<u64>();
        }
        Ok(())
    }

    /// Signs a checkpoint over everything appended.
    pub async fn finish(&mut self) -> anyhow::Result<()> {
        self.checkpointer.checkpoint().await?;
        Ok(())
    }
}
