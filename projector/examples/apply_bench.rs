//! The projector's apply alone: generated ledger entries, already in memory, through
//! `Store::apply_batch` into a fresh SQLite file — no NATS, no ingest.
//!
//! ```text
//! cargo run --release -p toolledger-projector --example apply_bench -- [SESSIONS] [RUNS] [BATCH] [follow]
//! ```
//!
//! By default the store is a rebuild's (`Store::open_for_rebuild`, then `finish_rebuild`, timed);
//! `follow` applies as the live projector does (`Store::open`, every batch's invocation rows).
//! With `APPLY_ONTO=<generation directory>` (a projection's `gen-N`, e.g. one the bench's reads suite
//! kept with `TOOLLEDGER_BENCH_KEEP_PROJECTION`), each run applies in follow mode onto a copy of that
//! projection, from its position on: the live projector at the projection's size.
//!
//! Generates SESSIONS sessions (default 400: three tenants, all 27 classes, about 60 entries each),
//! canonicalizes them as ingest would, then applies them RUNS times (default 5) in batches of BATCH
//! (default 500, the projector's default) into a new database each time. Prints entries/s per run,
//! the median and the spread (min–max), so a change to the apply path can be compared before and
//! after on the same machine. Besides wall time it prints the rate per second of the applying
//! thread's CPU time (Linux: `/proc/thread-self/stat`), which other processes on a shared machine
//! disturb much less.

#![allow(clippy::unwrap_used, clippy::print_stdout)] // a benchmark: a panic is the report of failure

use std::time::{Duration, Instant};

use toolledger_projector::{RawEntry, Store};
use toolledger_schemas::generator::{GeneratorConfig, generate};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut next = |default: usize| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let sessions = next(400);
    let runs = next(5).max(1);
    let batch = next(500).max(1);
    let onto = std::env::var_os("APPLY_ONTO").map(std::path::PathBuf::from);
    let follow = onto.is_some() || std::env::args().nth(4).as_deref() == Some("follow");
    let start = onto.as_ref().map_or(0, |dir| {
        let store = Store::open_readonly(&dir.join("toolledger.sqlite")).unwrap();
        store.position().unwrap()
    });

    let generated = generate(&GeneratorConfig {
        // Onto a projection of generated entries, a seed far from the ones that built it.
        seed: if onto.is_some() { 999_983 } else { 23 },
        sessions,
        tenants: vec!["acme".to_owned(), "globex".to_owned(), "initech".to_owned()],
        extra_invocations: 3,
        plant_anomalies: true,
        ..GeneratorConfig::default()
    });
    let entries: Vec<RawEntry> = generated
        .events
        .iter()
        .zip(start + 1..)
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
    let mut cpu_rates = Vec::with_capacity(runs);
    for run in 1..=runs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apply.sqlite");
        if let Some(onto) = &onto {
            for suffix in ["", "-wal"] {
                let from = onto.join(format!("toolledger.sqlite{suffix}"));
                if from.exists() {
                    std::fs::copy(from, dir.path().join(format!("apply.sqlite{suffix}"))).unwrap();
                }
            }
        }
        let mut store = if follow {
            Store::open(&path, Default::default()).unwrap()
        } else {
            Store::open_for_rebuild(&path, Default::default()).unwrap()
        };
        let started = Instant::now();
        let cpu_started = thread_cpu();
        for chunk in entries.chunks(batch) {
            store.apply_batch(chunk).unwrap();
        }
        if !follow {
            store.finish_rebuild().unwrap();
        }
        let elapsed = started.elapsed();
        let rate = entries.len() as f64 / elapsed.as_secs_f64();
        let cpu = thread_cpu()
            .zip(cpu_started)
            .map(|(end, start)| end.saturating_sub(start));
        let cpu_rate = cpu.map(|cpu| entries.len() as f64 / cpu.as_secs_f64().max(1e-3));
        println!(
            "run {run}: {elapsed:?}, {rate:.0} entries/s; cpu {cpu:?}, {:.0} entries/cpu-s",
            cpu_rate.unwrap_or(f64::NAN)
        );
        rates.push(rate);
        cpu_rates.extend(cpu_rate);
    }
    summary("apply (wall)", &mut rates);
    summary("apply (thread cpu)", &mut cpu_rates);
}

fn summary(what: &str, rates: &mut [f64]) {
    if rates.is_empty() {
        return;
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "{what}: median {:.0} entries/s, spread {:.0}–{:.0} over {} runs",
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1],
        rates.len()
    );
}

/// The calling thread's user + system CPU time, from `/proc/thread-self/stat` (clock ticks of
/// 10 ms, the kernel's USER_HZ on Linux); `None` where that file does not exist.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
