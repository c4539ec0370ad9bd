//! What the issue 28 detectors (credential names, secret shapes inside strings, extension attributes,
//! `source`) cost ingest, per event.
//!
//! ```text
//! cargo run --release --offline -p toolledger-ingest --example scrub_cost [events] [runs] [generator|heavy]
//! ```
//!
//! Runs ingest's per-event work on one thread (decode ▸ validate ▸ scrub ▸ seal ▸ offload ▸
//! canonicalize, [`entry_for_message`]: everything but NATS, the identity index and the append) over
//! the bench's workload (the generator's sessions: 10 a seed, three tenants, 5 extra invocations, in
//! binary and structured mode in turn), once with the full scrubber and once with the scrubber as it
//! was before issue 28 ([`Scrubber::without_shapes`]); then the scrub stage alone, both ways, and the
//! same over a shape-heavy variant of the workload where every event carries a command line, a URL
//! and an `env` object with secrets in them. Each figure is the median of `runs` (at least 3) with its
//! spread. The share is the detectors' cost over the per-event work measured here, which leaves out
//! NATS and SQLite: the share of ingest's whole CPU is smaller.

use std::time::Instant;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use toolledger_ingest::payload::{BlobStore, OffloadConfig, Offloader};
use toolledger_ingest::pipeline::entry_for_message;
use toolledger_ingest::quarantine::Original;
use toolledger_ingest::scrub::{ScrubConfig, ScrubKey, Scrubber};
use toolledger_wire::{Mode, produce};

/// The bench workload's tenants (bench/src/workload.rs).
const TENANTS: [&str; 3] = ["acme", "globex", "initech"];

fn workload(count: usize) -> Vec<Value> {
    toolledger_schemas::generator::workload(&TENANTS, count, 1)
}

/// Every event with a command line, a URL and an `env` object holding secrets (under `data`, where
/// unknown members are kept).
fn shape_heavy(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .enumerate()
        .map(|(i, event)| {
            let mut event = event.clone();
            event["data"]["debug"] = json!({
                "command": format!("curl -sS -H 'Authorization: Bearer tok{i:08}abcdefgh' https://api.example.com/v1/items?api_key=key{i:08}&page=2"),
                "deploy": format!("API_KEY=dep{i:08}xyz ./deploy.sh && export GITHUB_TOKEN=ghp_{i:08}abcdefghijklmnopqrstuvwxyz1234"),
                "env": {"OPENAI_API_KEY": format!("sk-{i:08}abcdefghijklmnopqrstuv"), "RUST_LOG": "info"},
            });
            event
        })
        .collect()
}

fn originals(events: &[Value], published: DateTime<Utc>) -> Vec<Original> {
    events
        .iter()
        .enumerate()
        .map(|(i, event)| {
            let mode = if i % 2 == 0 {
                Mode::Binary
            } else {
                Mode::Structured
            };
            let out = produce::prepare(event.clone(), None, mode).expect("a generated event encodes");
            Original {
                subject: out.subject,
                headers: Some(out.headers),
                raw_headers: None,
                payload: out.payload,
                inbound_seq: i as u64 + 1,
                published,
            }
        })
        .collect()
}

fn scrubber(shapes: bool) -> Scrubber {
    let scrubber = Scrubber::new(ScrubKey::from_bytes([7; 32]), &ScrubConfig::default());
    if shapes {
        scrubber
    } else {
        scrubber.without_shapes()
    }
}

/// Median, minimum and maximum of µs per event over the runs.
struct Figure {
    median: f64,
    min: f64,
    max: f64,
}

impl Figure {
    fn of(mut samples: Vec<f64>) -> Self {
        samples.sort_by(f64::total_cmp);
        Self {
            median: samples[samples.len() / 2],
            min: samples[0],
            max: samples[samples.len() - 1],
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:7.2} µs/event ({:.2}–{:.2})",
            self.median, self.min, self.max
        )
    }
}

/// µs per event of ingest's per-event work with the scrubber before issue 28 and with the detectors,
/// one sample of each per run, the two interleaved so drift in the machine hits both alike.
async fn pipeline(originals: &[Original], runs: usize, at: DateTime<Utc>) -> (Figure, Figure) {
    let store = BlobStore::open("memory://").expect("a memory store");
    let offloader = Offloader::new(store, &OffloadConfig::default());
    let (mut before, mut after) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        for (shapes, samples) in [(false, &mut before), (true, &mut after)] {
            let mut scrubber = scrubber(shapes);
            let started = Instant::now();
            for original in originals {
                let outcome = entry_for_message(original, &mut scrubber, &offloader, at)
                    .await
                    .expect("the memory store works");
                std::hint::black_box(outcome.ok());
            }
            samples.push(started.elapsed().as_secs_f64() * 1e6 / originals.len() as f64);
        }
    }
    (Figure::of(before), Figure::of(after))
}

/// µs per event of the scrub stage alone, before issue 28 and with the detectors, interleaved (the
/// events are copied before the clock starts).
fn scrub_only(events: &[Value], runs: usize) -> (Figure, Figure) {
    let (mut before, mut after) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        for (shapes, samples) in [(false, &mut before), (true, &mut after)] {
            let mut scrubber = scrubber(shapes);
            let mut copies = events.to_vec();
            let started = Instant::now();
            for event in &mut copies {
                std::hint::black_box(scrubber.scrub(event));
            }
            samples.push(started.elapsed().as_secs_f64() * 1e6 / events.len() as f64);
        }
    }
    (Figure::of(before), Figure::of(after))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5).max(3);
    // `generator` or `heavy` runs one workload only (for a profile).
    let only = args.next();
    let at: DateTime<Utc> = "2026-06-01T12:00:00Z".parse().expect("a time");
    let generated = workload(count);
    let heavy = shape_heavy(&generated);
    println!("{count} events, {runs} runs each, one thread; median (min–max)");
    for (key, name, events) in [
        ("generator", "generator workload", &generated),
        ("heavy", "shape-heavy workload", &heavy),
    ] {
        if only.as_deref().is_some_and(|only| only != key) {
            continue;
        }
        let messages = originals(events, at);
        // A warm-up pass: the detectors' regexes compile on first use.
        pipeline(&messages[..messages.len().min(500)], 1, at).await;
        let (before, after) = pipeline(&messages, runs, at).await;
        let (scrub_before, scrub_after) = scrub_only(events, runs);
        let added = after.median - before.median;
        let scrub_added = scrub_after.median - scrub_before.median;
        println!("{name}:");
        println!("  per-event work, scrubber before issue 28  {before}");
        println!("  per-event work, scrubber with detectors   {after}");
        println!("  scrub stage alone, before                 {scrub_before}");
        println!("  scrub stage alone, with detectors         {scrub_after}");
        println!(
            "  detectors: +{scrub_added:.2} µs/event in the scrub stage = {:.1} % of the per-event work; \
             per-event work {:+.2} µs/event ({:+.1} %)",
            100.0 * scrub_added / after.median,
            added,
            100.0 * added / before.median
        );
    }
}
