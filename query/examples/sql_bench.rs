//! Whether analysts' SQL can stall the API: read latency with and without runaway statements.
//!
//! ```text
//! cargo run --release -p toolledger-query --example sql_bench -- [EVENTS]
//! ```
//!
//! 1. A projection of EVENTS generated entries (default 20 000; three tenants) applied with
//!    `Store::apply_batch`, and the API served over it (`insecure_local`, loopback).
//! 2. For 3 runs: 200 `GET /v1/sessions?tenant=acme&limit=50` one after another, (a) baseline with
//!    the API otherwise idle, (b) while 4 clients keep posting a runaway recursive CTE to
//!    `POST /v1/sql` (timeout 2 s; 2 run at once, the rest wait for a slot). Prints p50/p99 of each
//!    per run, the spread over runs, and the ratio to the baseline; also `POST /v1/sql`
//!    `SELECT count(*) FROM invocations` against `run_sql` called directly (the HTTP + slot cost).

#![allow(clippy::unwrap_used, clippy::print_stdout)] // a benchmark: a panic is the report of failure

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolledger_core::telemetry::Telemetry;
use toolledger_projector::{Generations, RawEntry, SqlLimits, SqlScope, Store};
use toolledger_query::ApiOptions;
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::entry_bytes;

const READS: usize = 200;
const RUNS: usize = 3;
const RUNAWAY_CLIENTS: usize = 4;

/// One HTTP/1.1 request with `Connection: close`; returns the status.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50 and p99 in ms of `READS` session listings.
fn reads(addr: SocketAddr) -> (f64, f64) {
    let mut ms: Vec<f64> = (0..READS)
        .map(|_| {
            let started = Instant::now();
            assert_eq!(http(addr, "GET", "/v1/sessions?tenant=acme&limit=50", ""), 200);
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 50.0), percentile(&ms, 99.0))
}

fn spread(values: &[f64]) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0.0, f64::max);
    format!("{min:.2}..{max:.2}")
}

fn main() {
    let events: u64 = std::env::args().nth(1).map_or(20_000, |a| a.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let generation = Generations::new(dir.path()).current_or_init().unwrap();
    let mut store = Store::open(&generation.database(), Default::default()).unwrap();
    let mut seq = 0u64;
    for seed in 10_000.. {
        if seq >= events {
            break;
        }
        let generated = generate(&GeneratorConfig {
            seed,
            sessions: 4,
            tenants: vec!["acme".to_owned(), "globex".to_owned(), "initech".to_owned()],
            extra_invocations: 3,
            ..GeneratorConfig::default()
        });
        let batch: Vec<RawEntry> = generated
            .events
            .iter()
            .enumerate()
            .map(|(i, e)| RawEntry {
                seq: seq + 1 + i as u64,
                bytes: entry_bytes(e),
            })
            .collect();
        seq = store.apply_batch(&batch).unwrap();
    }
    drop(store);
    println!("projection: {seq} entries");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let options = ApiOptions::insecure_local("127.0.0.1:0".parse().unwrap());
    let (addr, _task) = runtime
        .block_on(toolledger_query::serve(
            dir.path(),
            options,
            Telemetry::new(),
            std::future::pending(),
        ))
        .unwrap();

    // The API's cost over the sandbox itself.
    let count = json!({"sql": "SELECT count(*) FROM invocations"}).to_string();
    let mut direct = Vec::new();
    let mut api = Vec::new();
    for _ in 0..100 {
        let started = Instant::now();
        toolledger_projector::run_sql(
            &generation.database(),
            &SqlScope::Admin,
            "SELECT count(*) FROM invocations",
            SqlLimits::default(),
        )
        .unwrap();
        direct.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        assert_eq!(http(addr, "POST", "/v1/sql", &count), 200);
        api.push(started.elapsed().as_secs_f64() * 1e3);
    }
    direct.sort_by(f64::total_cmp);
    api.sort_by(f64::total_cmp);
    println!(
        "count(*): run_sql p50 {:.2} ms, POST /v1/sql p50 {:.2} ms (x{:.2})",
        percentile(&direct, 50.0),
        percentile(&api, 50.0),
        percentile(&api, 50.0) / percentile(&direct, 50.0)
    );

    let (mut base50, mut base99, mut load50, mut load99) = (vec![], vec![], vec![], vec![]);
    for run in 1..=RUNS {
        let (p50, p99) = reads(addr);
        base50.push(p50);
        base99.push(p99);
        let stop = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::new(AtomicU64::new(0));
        let runaway = json!({
            "sql": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
            "timeout_ms": 2000,
        })
        .to_string();
        let clients: Vec<_> = (0..RUNAWAY_CLIENTS)
            .map(|_| {
                let (stop, timed_out, runaway) = (Arc::clone(&stop), Arc::clone(&timed_out), runaway.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if http(addr, "POST", "/v1/sql", &runaway) == 422 {
                            timed_out.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let (l50, l99) = reads(addr);
        load50.push(l50);
        load99.push(l99);
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.join().unwrap();
        }
        println!(
            "run {run}: idle p50 {p50:.2} ms p99 {p99:.2} ms | with {RUNAWAY_CLIENTS} runaway SQL clients p50 {l50:.2} ms p99 {l99:.2} ms ({} statements cut off with 422)",
            timed_out.load(Ordering::Relaxed)
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "spread over {RUNS} runs: idle p50 {} p99 {} | loaded p50 {} p99 {}",
        spread(&base50),
        spread(&base99),
        spread(&load50),
        spread(&load99)
    );
    println!(
        "ratio loaded/idle (median of runs): p50 x{:.2}, p99 x{:.2}",
        median(&mut load50) / median(&mut base50),
        median(&mut load99) / median(&mut base99)
    );
}
