//! Export rate of `toolledger_export::run` (ATL_LEDGER on a real nats-server ─▶ Parquet files on the
//! local filesystem, all five tables) beside a raw arrow-rs `ArrowWriter` write of the same ledger
//! entries' `events` rows to a file, measured in the same run. Each figure is the mean of `RUNS`
//! runs with the spread (min–max).
//!
//! `cargo run --release -p toolledger-export --example export_bench -- [sessions]`

#![allow(clippy::unwrap_used)] // a benchmark reports failure by panicking

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::json;
use toolledger_export::rows::Tracker;
use toolledger_export::tables::{self, Table};
use toolledger_export::{Archive, Options};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::NatsFixture;
use toolledger_wire::streams::{self, ContractSettings};
use toolledger_wire::{LedgerEntry, LedgerMetadata};

const RUNS: usize = 3;

fn stats(samples: &[f64]) -> String {
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    let max = samples.iter().copied().fold(0.0, f64::max);
    format!("{mean:>9.1} (min {min:.1}, max {max:.1})")
}

#[tokio::main]
async fn main() {
    let sessions: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let events = generate(&GeneratorConfig {
        seed: 1,
        sessions,
        tenants: vec!["acme".to_owned(), "globex".to_owned(), "initech".to_owned()],
        extra_invocations: 3,
        ..GeneratorConfig::default()
    })
    .events;
    let entries: Vec<Vec<u8>> = events
        .iter()
        .map(|event| {
            let subject = format!("atl.in.{}.{}", event["tenant"].as_str().unwrap(), event["type"].as_str().unwrap());
            let decoded = toolledger_wire::decode(&subject, None, &serde_json::to_vec(event).unwrap()).unwrap();
            let ledger: LedgerMetadata = serde_json::from_value(json!({
                "ingested_at": event["time"], "origin": "structured", "payload_refs": [], "scrubbed_paths": [],
            }))
            .unwrap();
            LedgerEntry {
                event: decoded.event,
                ledger,
            }
            .canonical_bytes()
            .unwrap()
        })
        .collect();
    let entry_bytes: usize = entries.iter().map(Vec::len).sum();
    let n = entries.len();
    println!(
        "{n} ledger entries, {:.1} MB of canonical entry bytes",
        entry_bytes as f64 / 1e6
    );

    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let settings = ContractSettings::default();
    js.create_stream(streams::ledger_config(&settings)).await.unwrap();
    js.create_stream(streams::checkpoints_config(&settings))
        .await
        .unwrap();
    let indices: Vec<usize> = (0..n).collect();
    for chunk in indices.chunks(500) {
        let mut acks = Vec::new();
        for &i in chunk {
            let event = &events[i];
            let subject = format!(
                "atl.ledger.{}.{}",
                event["tenant"].as_str().unwrap(),
                event["type"].as_str().unwrap()
            );
            acks.push(js.publish(subject, entries[i].clone().into()).await.unwrap());
        }
        for ack in acks {
            ack.await.unwrap();
        }
    }

    // The same rows, extracted once, for the raw baseline.
    let mut tracker = Tracker::default();
    let rows: Vec<_> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, bytes)| tracker.apply(i as u64 + 1, bytes, true).event)
        .collect();

    let (mut export_rate, mut export_mb, mut raw_rate, mut raw_mb) = (vec![], vec![], vec![], vec![]);
    let mut parquet_bytes = 0u64;
    for run in 0..RUNS {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().to_str().unwrap(), &[]).unwrap();
        let options = Options {
            until_caught_up: true,
            max_delay: Duration::from_secs(3600),
            ..Options::new(archive)
        };
        let started = Instant::now();
        let summary = toolledger_export::run(nats.client().await, options, std::future::pending())
            .await
            .unwrap();
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(summary.entries as usize, n);
        parquet_bytes = summary.bytes;
        export_rate.push(n as f64 / secs);
        export_mb.push(entry_bytes as f64 / 1e6 / secs);

        let path = dir.path().join(format!("raw-{run}.parquet"));
        let started = Instant::now();
        let refs: Vec<_> = rows.iter().collect();
        let batch = tables::events_batch(&refs).unwrap();
        let bytes = tables::encode(Table::Events, &batch, tables::writer_properties(50_000)).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let secs = started.elapsed().as_secs_f64();
        raw_rate.push(n as f64 / secs);
        raw_mb.push(entry_bytes as f64 / 1e6 / secs);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!("{RUNS} runs each, mean (min, max):");
    println!(
        "export (NATS read, 5 tables, partitioned, manifests): {} events/s, {} MB/s of entries",
        stats(&export_rate),
        stats(&export_mb)
    );
    println!(
        "raw arrow-rs ArrowWriter, events rows only, one file:  {} events/s, {} MB/s of entries",
        stats(&raw_rate),
        stats(&raw_mb)
    );
    println!(
        "export / raw = {:.2}; archive {:.1} MB of Parquet for {:.1} MB of entries ({:.1}x smaller)",
        mean(&export_rate) / mean(&raw_rate),
        parquet_bytes as f64 / 1e6,
        entry_bytes as f64 / 1e6,
        entry_bytes as f64 / parquet_bytes.max(1) as f64
    );
}
