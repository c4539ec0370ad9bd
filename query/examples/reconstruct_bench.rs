//! Reconstruct latency at size, while a writer keeps applying new entries to the same projection.
//!
//! ```text
//! cargo run --release -p toolledger-query --example reconstruct_bench -- [EVENTS] [RATE]
//! ```
//!
//! 1. Bulk: generated sessions (three tenants, all 27 classes) canonicalized as ledger entries and
//!    applied with `Store::apply_batch` until the projection holds EVENTS entries (default 50 000).
//!    This skips NATS and ingest for the bulk, which at ~2.6k entries/s would take minutes per 1M.
//! 2. Steady load: a writer thread applies fresh generated entries through the same projector code
//!    at RATE entries/s (default 2 600, about what ingest sustains) in batches of 100, so reads run
//!    against a growing WAL database with a live writer, as under `toolledger up`.
//! 3. For 3 runs: the same 1 000 random invocations, each read (a) by the baseline — a bare
//!    indexed lookup of its `invocations` row and its `events` rows — and (b) by
//!    `toolledger_query::reconstruct` (every table, diffs, retry guidance; no payload fetch).
//!    Prints p50/p99 of each per run, the spread over runs, and the ratio to the baseline.
//! 4. In the same runs, the lists the web view pages through, each for random samples: the first
//!    page of `GET /v1/sessions?tenant=…&limit=20` (`listing::sessions`), the same filtered by a
//!    tool and a state, and the tool/state-filtered invocation list
//!    `GET /v1/invocations?tenant=…&tool_id=…&status=…&limit=50` (`listing::search`): the query
//!    functions serve calls, on its read-only connections, without HTTP.

#![allow(clippy::unwrap_used, clippy::print_stdout)] // a benchmark: a panic is the report of failure

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::params;
use toolledger_projector::{Generations, RawEntry, Store};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::entry_bytes;

const SAMPLES: usize = 1000;
/// Reads of each list per run.
const LIST_SAMPLES: usize = 300;
const RUNS: usize = 3;

/// Generated entries, a chunk (one seed) at a time, made on their own thread so generation and
/// canonicalization overlap with applying.
struct Source {
    chunks: std::sync::mpsc::Receiver<Vec<Vec<u8>>>,
    pending: Vec<Vec<u8>>,
}

impl Source {
    fn start() -> Self {
        // Four chunks (~3k entries) ahead: enough to keep the applier busy, little memory.
        let (tx, chunks) = std::sync::mpsc::sync_channel(4);
        std::thread::spawn(move || {
            for seed in 10_000.. {
                let generated = generate(&GeneratorConfig {
                    seed,
                    sessions: 4,
                    tenants: vec!["acme".to_owned(), "globex".to_owned(), "initech".to_owned()],
                    extra_invocations: 3,
                    ..GeneratorConfig::default()
                });
                let chunk: Vec<Vec<u8>> = generated.events.iter().rev().map(entry_bytes).collect();
                if tx.send(chunk).is_err() {
                    return;
                }
            }
        });
        Self {
            chunks,
            pending: Vec::new(),
        }
    }

    fn next(&mut self) -> Vec<u8> {
        if self.pending.is_empty() {
            self.pending = self.chunks.recv().unwrap();
        }
        self.pending.pop().unwrap()
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let events: u64 = args.next().map_or(50_000, |a| a.parse().unwrap());
    let rate: u64 = args.next().map_or(2_600, |a| a.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let generation = Generations::new(dir.path()).current_or_init().unwrap();
    let mut store = Store::open(&generation.database(), Default::default()).unwrap();
    let mut source = Source::start();

    let started = Instant::now();
    let mut seq = 0u64;
    while seq < events {
        let batch: Vec<RawEntry> = (0..500.min(events - seq))
            .map(|i| RawEntry {
                seq: seq + 1 + i,
                bytes: source.next(),
            })
            .collect();
        seq = store.apply_batch(&batch).unwrap();
        if seq % 50_000 < 500 {
            eprintln!("bulk: {seq} entries in {:.0}s", started.elapsed().as_secs_f64());
        }
    }
    let bulk_secs = started.elapsed().as_secs_f64();
    let invocations: i64 = store
        .connection()
        .query_row("SELECT count(*) FROM invocations", [], |r| r.get(0))
        .unwrap();
    println!(
        "bulk: {events} entries ({invocations} invocations) applied in {bulk_secs:.1}s ({:.0} entries/s)",
        events as f64 / bulk_secs
    );

    // A fixed random sample of invocations.
    let mut sample: Vec<(String, String)> = {
        let mut statement = store
            .connection()
            .prepare("SELECT tenant, invocation_id FROM invocations ORDER BY random() LIMIT ?1")
            .unwrap();
        statement
            .query_map([SAMPLES as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    sample.sort();
    // A fixed random sample of (tenant, tool, state) as the web view filters by.
    let filters: Vec<(String, String, String)> = {
        let mut statement = store
            .connection()
            .prepare(
                "SELECT tenant, tool_id, state FROM invocations WHERE tool_id IS NOT NULL \
                 ORDER BY random() LIMIT ?1",
            )
            .unwrap();
        statement
            .query_map([LIST_SAMPLES as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };

    // The steady writer.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let stop = Arc::clone(&stop);
        let written = Arc::clone(&written);
        std::thread::spawn(move || {
            let tick = Duration::from_secs_f64(100.0 / rate as f64);
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let batch: Vec<RawEntry> = (0..100)
                    .map(|i| RawEntry {
                        seq: seq + 1 + i,
                        bytes: source.next(),
                    })
                    .collect();
                seq = store.apply_batch(&batch).unwrap();
                written.fetch_add(100, Ordering::Relaxed);
                next += tick;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
        })
    };

    let reader = toolledger_query::Reader::new(dir.path());
    let load_started = Instant::now();
    let mut phases = Vec::new();
    let mut lists: Vec<(List, Vec<(f64, f64)>)> = LISTS.iter().map(|list| (*list, Vec::new())).collect();
    // One phase since the projector indexes permission requests by invocation (this benchmark found
    // the missing index: reconstruct p50 25 ms -> 0.18 ms at 400k entries); a second phase that
    // created the index under the live writer locked it out.
    for phase in ["schema as projected"] {
        println!("phase: {phase}");
        let mut baseline_runs = Vec::new();
        let mut reconstruct_runs = Vec::new();
        for run in 1..=RUNS {
            let mut baseline = Vec::with_capacity(SAMPLES);
            let mut full = Vec::with_capacity(SAMPLES);
            for (tenant, id) in &sample {
                let t = Instant::now();
                let rows = reader
                    .read_blocking(|conn| {
                        let mut n = conn
                            .prepare_cached(
                                "SELECT * FROM invocations WHERE tenant = ?1 AND invocation_id = ?2",
                            )
                            .unwrap()
                            .query_map(params![tenant, id], |r| r.get::<_, String>(0))
                            .unwrap()
                            .count();
                        n += conn
                            .prepare_cached(
                                "SELECT * FROM events WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq",
                            )
                            .unwrap()
                            .query_map(params![tenant, id], |r| r.get::<_, i64>(0))
                            .unwrap()
                            .count();
                        Ok(n)
                    })
                    .unwrap();
                baseline.push(t.elapsed().as_secs_f64() * 1e3);
                assert!(rows > 1);

                let t = Instant::now();
                let r = reader
                    .read_blocking(|conn| toolledger_query::reconstruct(conn, Some(tenant), id))
                    .unwrap();
                full.push(t.elapsed().as_secs_f64() * 1e3);
                assert!(!r.timeline.is_empty());
            }
            baseline.sort_by(f64::total_cmp);
            full.sort_by(f64::total_cmp);
            let b = (percentile(&baseline, 50.0), percentile(&baseline, 99.0));
            let f = (percentile(&full, 50.0), percentile(&full, 99.0));
            println!(
                "run {run}: baseline p50 {:.3} ms p99 {:.3} ms | reconstruct p50 {:.3} ms p99 {:.3} ms | ratio p50 {:.1}x p99 {:.1}x",
                b.0,
                b.1,
                f.0,
                f.1,
                f.0 / b.0,
                f.1 / b.1
            );
            baseline_runs.push(b);
            reconstruct_runs.push(f);
            for (list, runs) in lists.iter_mut() {
                let mut latencies = Vec::with_capacity(filters.len());
                // An invocation sampled before the writer moved it on may match nothing now.
                let mut empty = 0;
                for (tenant, tool, state) in &filters {
                    let t = Instant::now();
                    let items = reader
                        .read_blocking(|conn| list.read(conn, tenant, tool, state))
                        .unwrap();
                    latencies.push(t.elapsed().as_secs_f64() * 1e3);
                    empty += usize::from(items == 0);
                }
                latencies.sort_by(f64::total_cmp);
                let l = (percentile(&latencies, 50.0), percentile(&latencies, 99.0));
                println!(
                    "run {run}: {} p50 {:.3} ms p99 {:.3} ms ({empty} empty pages)",
                    list.name(),
                    l.0,
                    l.1
                );
                runs.push(l);
            }
        }
        phases.push((phase, baseline_runs, reconstruct_runs));
    }
    let load_secs = load_started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let spread = |runs: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
        let values: Vec<f64> = runs.iter().map(pick).collect();
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(0.0, f64::max);
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        (sorted[sorted.len() / 2], min, max)
    };
    let report = |name: &str, runs: &[(f64, f64)]| {
        let (p50, p50_min, p50_max) = spread(runs, |r| r.0);
        let (p99, p99_min, p99_max) = spread(runs, |r| r.1);
        println!(
            "{name}: p50 {p50:.3} ms (runs {p50_min:.3}..{p50_max:.3}), p99 {p99:.3} ms (runs {p99_min:.3}..{p99_max:.3})"
        );
        (p50, p99)
    };
    println!(
        "at {events} entries + a writer at {rate} entries/s ({} applied, {:.0}/s achieved) over {RUNS} runs of {} invocations:",
        written.load(Ordering::Relaxed),
        written.load(Ordering::Relaxed) as f64 / load_secs,
        sample.len()
    );
    for (phase, baseline_runs, reconstruct_runs) in &phases {
        println!("{phase}:");
        let b = report("  baseline (indexed invocation row + its events)", baseline_runs);
        let f = report("  reconstruct", reconstruct_runs);
        println!(
            "  ratio reconstruct/baseline: p50 {:.1}x, p99 {:.1}x",
            f.0 / b.0,
            f.1 / b.1
        );
    }
    for (list, runs) in &lists {
        report(
            &format!("  {} ({} filters a run)", list.name(), filters.len()),
            runs,
        );
    }
}

/// The lists measured.
#[derive(Debug, Clone, Copy)]
enum List {
    Sessions,
    SessionsOfToolInState,
    InvocationsOfToolInState,
}

const LISTS: [List; 3] = [
    List::Sessions,
    List::SessionsOfToolInState,
    List::InvocationsOfToolInState,
];

impl List {
    fn name(self) -> &'static str {
        match self {
            Self::Sessions => "sessions, first page of 20",
            Self::SessionsOfToolInState => "sessions with a tool's invocations in a state, first page of 20",
            Self::InvocationsOfToolInState => "invocations of a tool in a state, first page of 50",
        }
    }

    /// Reads the list's first page for the filter; returns how many items it holds.
    fn read(
        self,
        conn: &rusqlite::Connection,
        tenant: &str,
        tool: &str,
        state: &str,
    ) -> toolledger_query::Result<usize> {
        use toolledger_query::listing::{SearchFilter, SessionFilter, search, sessions};
        let tenant = Some(tenant.to_owned());
        let (tool_id, status) = (Some(tool.to_owned()), Some(state.to_owned()));
        let sessions_of = |filter| Ok(sessions(conn, &filter)?.items.len());
        match self {
            Self::Sessions => sessions_of(SessionFilter {
                tenant,
                limit: 20,
                ..Default::default()
            }),
            Self::SessionsOfToolInState => sessions_of(SessionFilter {
                tenant,
                tool_id,
                status,
                limit: 20,
                ..Default::default()
            }),
            Self::InvocationsOfToolInState => Ok(search(
                conn,
                &SearchFilter {
                    tenant,
                    tool_id,
                    status,
                    limit: 50,
                    ..Default::default()
                },
            )?
            .items
            .len()),
        }
    }
}
