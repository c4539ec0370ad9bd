//! Where an inclusion proof's time goes on a large ledger: the requests and reads it is made of, each
//! timed alone over random entries, and the whole proof through a proof source as `serve` runs it.
//! A JetStream get by sequence loads the file-store block around the message, which is why proofs
//! read their entry from an entry bundle instead.
//!
//! ```sh
//! cargo run --release -p toolledger-bench --example proof_parts -- [ENTRIES (1000000)] [NATS_SERVER]
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use rand::{Rng, SeedableRng};
use toolledger_bench::workload::{self, LedgerLoader, ORIGIN, Server};
use toolledger_merkle::TileReader;
use toolledger_verify::prove::{ProveSource, prove_inclusion};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};

/// Samples of each part.
const SAMPLES: usize = 200;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(Ok(1_000_000), |s| s.parse())
        .context("ENTRIES")?;
    let bin = args
        .next()
        .map_or_else(|| PathBuf::from(".tools/nats/bin/nats-server"), PathBuf::from);
    let work = PathBuf::from("target/bench-work");
    std::fs::create_dir_all(&work)?;
    let base = workload::ledger_entries(&workload::events(100_000.min(n as usize), 1_000))?;
    let server = Server::start(&bin, &work)?;
    let js = server.jetstream().await?;
    let tiles_dir = tempfile::tempdir_in(&work)?;
    let mut loader = LedgerLoader::open(js.clone(), tiles_dir.path()).await?;
    let mut next = base.iter().cycle();
    while loader.appended < n {
        let chunk: Vec<_> = next
            .by_ref()
            .take((n - loader.appended).min(10_000) as usize)
            .cloned()
            .collect();
        loader.append(&chunk).await?;
    }
    loader.finish().await?;
    println!("{n} entries loaded");

    let stream = js.get_stream(LEDGER).await?;
    let reader = TileReader::new(loader.tiles.clone());
    let source = ProveSource::new(
        LEDGER.to_owned(),
        CHECKPOINTS.to_owned(),
        loader.verifiers.clone(),
        ORIGIN.to_owned(),
        Some(loader.tiles.clone()),
    );
    // The first proof reads and checks every signed checkpoint; the rest read only the tail.
    prove_inclusion(&js, &source, 1, None).await?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let parts = [
        "stream info request",
        "message get by sequence",
        "tree root from the tiles",
        "audit path from the tiles",
        "entry bundle read and decoded",
        "whole inclusion proof",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(SAMPLES); parts.len()];
    for _ in 0..SAMPLES {
        // A fresh random entry for each part, so no part finds another's block or file cached.
        let mut seq = || rng.random_range(1..=n);
        let started = Instant::now();
        js.get_stream(LEDGER).await?;
        times[0].push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        stream.get_raw_message(seq()).await?;
        times[1].push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        reader.root(n).await?;
        times[2].push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        reader.inclusion_proof(seq() - 1, n).await?;
        times[3].push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        loader.tiles.read_bundle((seq() - 1) / 256).await?;
        times[4].push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        prove_inclusion(&js, &source, seq(), None).await?;
        times[5].push(started.elapsed().as_secs_f64() * 1e3);
    }
    for (part, mut samples) in parts.into_iter().zip(times) {
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        println!("{part:32} p50 {:7.3} ms   p99 {:7.3} ms", at(0.5), at(0.99));
    }
    Ok(())
}
