//! The projector's apply alone: generated ledger entries, already in memory, through
//! `Store::apply_batch` into a fresh SQLite file — no NATS, no ingest.
//!
//! ```text
//! cargo run --release -p toolledger-projector --example apply_bench -- [SESSIONS] [RUNS] [BATCH]
//! ```
//!
//! Generates SESSIONS sessions (default 400: three tenants, all 27 classes, about 60 entries each),
//! canonicalizes them as ingest would, then applies them RUNS times (default 5) in batches of BATCH
//! (default 500, the projector's default) into a new database each time. Prints entries/s per run,
//! the median and the spread (min–max), so a change to the apply path can be compared before and
//! after on the same machine.

#![allow(clippy::unwrap_used, clippy::print_stdout)] // a benchmark: a panic is the report of failure

use std::time::Instant;

use toolledger_projector::{RawEntry, Store};
use toolledger_schemas::generator::{GeneratorConfig, generate};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut next = |default: usize| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let sessions = next(400);
    let runs = next(5).max(1);
    let batch = next(500).max(1);

    let generated = generate(&GeneratorConfig {
        seed: 23,
        sessions,
        tenants: vec!["acme".to_owned(), "globex".to_owned(), "initech".to_owned()],
        extra_invocations: 3,
        plant_anomalies: true,
        ..GeneratorConfig::default()
    });
    let entries: Vec<RawEntry> = generated
        .events
        .iter()
        .zip(1u64..)
        .map(|(event, seq)| RawEntry {
            seq,
            bytes: toolledger_wire::LedgerEntry::for_structured_event(event, chrono::DateTime::UNIX_EPOCH)
                .unwrap()
                .canonical_bytes()
                .unwrap(),
        })
        .collect();
    println!(
        "{} entries ({sessions} sessions), batches of {batch}, {runs} runs",
        entries.len()
    );

    let mut rates = Vec::with_capacity(runs);
    for run in 1..=runs {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("apply.sqlite"), Default::default()).unwrap();
        let started = Instant::now();
        for chunk in entries.chunks(batch) {
            store.apply_batch(chunk).unwrap();
        }
        let elapsed = started.elapsed();
        let rate = entries.len() as f64 / elapsed.as_secs_f64();
        println!("run {run}: {elapsed:?}, {rate:.0} entries/s");
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "apply: median {:.0} entries/s, spread {:.0}–{:.0} over {runs} runs",
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1]
    );
}
