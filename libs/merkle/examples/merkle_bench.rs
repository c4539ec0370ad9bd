//! Merkle log benchmark: append rate beside raw SHA-256 of the same bytes, and proof latency and size
//! with tiles on the local filesystem.
//!
//! ```text
//! cargo run --release -p toolledger-merkle --example merkle_bench -- --leaves 10000000
//!     [--runs 3] [--entry-bytes 512] [--checkpoint-every 10000] [--proofs 2000] [--seed N] [--dir PATH]
//! ```
//!
//! Each run: hash N synthetic entries with plain SHA-256 (the floor), then append the same entries to
//! a fresh log (leaf hash + tree + tile writes to a temp dir, flushing partial tiles at every
//! checkpoint as ingest would), then serve random inclusion and consistency proofs between checkpoint
//! sizes from those tiles, timing each and verifying it. Every figure is reported as the median over
//! the runs with the min–max spread.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use toolledger_merkle::{Hash, TileReader, TileStore, TiledLog, leaf_hash};

struct Args {
    leaves: u64,
    runs: usize,
    entry_bytes: usize,
    checkpoint_every: u64,
    proofs: usize,
    seed: u64,
    dir: Option<std::path::PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        leaves: 1_000_000,
        runs: 3,
        entry_bytes: 512,
        checkpoint_every: 10_000,
        proofs: 2_000,
        seed: 0x5eed,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.replace('_', "").parse::<u64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--leaves" => args.leaves = num(value()?)?,
            "--runs" => args.runs = num(value()?)? as usize,
            "--entry-bytes" => args.entry_bytes = num(value()?)? as usize,
            "--checkpoint-every" => args.checkpoint_every = num(value()?)?.max(1),
            "--proofs" => args.proofs = num(value()?)? as usize,
            "--seed" => args.seed = num(value()?)?,
            "--dir" => args.dir = Some(value()?.into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.leaves < 2 || args.entry_bytes < 8 || args.runs == 0 {
        return Err("need --leaves >= 2, --entry-bytes >= 8, --runs >= 1".to_owned());
    }
    Ok(args)
}

/// splitmix64: a tiny seeded generator, so sampled proofs can be replayed from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Synthetic entry `i`: the index in the first 8 bytes, a fixed filler after.
fn fill_entry(buf: &mut [u8], i: u64) {
    buf[..8].copy_from_slice(&i.to_le_bytes());
}

struct RunResult {
    sha_secs: f64,
    append_secs: f64,
    inclusion: Latencies,
    consistency: Latencies,
}

struct Latencies {
    p50: Duration,
    p99: Duration,
    mean_hashes: f64,
    max_hashes: usize,
}

fn latencies(mut samples: Vec<(Duration, usize)>) -> Latencies {
    samples.sort_by_key(|s| s.0);
    let n = samples.len().max(1);
    let at = |q: usize| {
        samples
            .get((n * q / 100).min(n - 1))
            .map_or(Duration::ZERO, |s| s.0)
    };
    Latencies {
        p50: at(50),
        p99: at(99),
        mean_hashes: samples.iter().map(|s| s.1 as f64).sum::<f64>() / n as f64,
        max_hashes: samples.iter().map(|s| s.1).max().unwrap_or(0),
    }
}

async fn run(args: &Args, run: usize) -> Result<RunResult, Box<dyn std::error::Error>> {
    let mut entry = vec![0xa5u8; args.entry_bytes];

    // The floor: plain SHA-256 over the same entry bytes.
    let start = Instant::now();
    let mut sink = [0u8; 32];
    for i in 0..args.leaves {
        fill_entry(&mut entry, i);
        let digest: Hash = Sha256::digest(&entry).into();
        sink[(i % 32) as usize] ^= digest[0];
    }
    let sha_secs = start.elapsed().as_secs_f64();
    std::hint::black_box(sink);

    // The log: leaf hash, tree, full tiles as they fill, partial tiles at every checkpoint.
    let dir = match &args.dir {
        Some(parent) => tempfile::tempdir_in(parent)?,
        None => tempfile::tempdir()?,
    };
    let tiles = TileStore::local(dir.path())?;
    let mut log = TiledLog::new(tiles.clone());
    let mut checkpoints: Vec<(u64, Hash)> = Vec::new();
    let start = Instant::now();
    for i in 0..args.leaves {
        fill_entry(&mut entry, i);
        log.append(leaf_hash(&entry)).await?;
        if (i + 1) % args.checkpoint_every == 0 || i + 1 == args.leaves {
            log.flush().await?;
            checkpoints.push((log.size(), log.root()));
        }
    }
    let append_secs = start.elapsed().as_secs_f64();

    // Proofs between checkpointed sizes, served from the tiles on disk.
    let reader = TileReader::new(tiles);
    let mut rng = Rng(args.seed ^ run as u64);
    let mut inclusion = Vec::with_capacity(args.proofs);
    let mut consistency = Vec::with_capacity(args.proofs);
    for _ in 0..args.proofs {
        let (size, root) = checkpoints[rng.below(checkpoints.len() as u64) as usize];
        let index = rng.below(size);
        let t = Instant::now();
        let proof = reader.inclusion_proof(index, size).await?;
        inclusion.push((t.elapsed(), proof.hashes.len()));
        fill_entry(&mut entry, index);
        proof.verify(&leaf_hash(&entry), &root)?;

        let a = checkpoints[rng.below(checkpoints.len() as u64) as usize];
        let b = checkpoints[rng.below(checkpoints.len() as u64) as usize];
        let ((old, old_root), (new, new_root)) = if a.0 <= b.0 { (a, b) } else { (b, a) };
        let t = Instant::now();
        let proof = reader.consistency_proof(old, new).await?;
        consistency.push((t.elapsed(), proof.hashes.len()));
        proof.verify(&old_root, &new_root)?;
    }
    Ok(RunResult {
        sha_secs,
        append_secs,
        inclusion: latencies(inclusion),
        consistency: latencies(consistency),
    })
}

/// "median [min – max]" of per-run figures.
fn spread(values: impl IntoIterator<Item = f64>, fmt: impl Fn(f64) -> String) -> String {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    let (min, max, median) = (v[0], v[v.len() - 1], v[v.len() / 2]);
    format!("{} [{} – {}]", fmt(median), fmt(min), fmt(max))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().inspect_err(|_| {
        eprintln!("usage: merkle_bench --leaves N [--runs 3] [--entry-bytes 512] [--checkpoint-every 10000] [--proofs 2000] [--seed N] [--dir PATH]");
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    println!(
        "merkle_bench: leaves={} entry_bytes={} runs={} checkpoint_every={} proofs_per_run={} seed={} (tiles on local fs)",
        args.leaves, args.entry_bytes, args.runs, args.checkpoint_every, args.proofs, args.seed
    );
    let mut results = Vec::new();
    for r in 0..args.runs {
        let res = runtime.block_on(run(&args, r))?;
        let n = args.leaves as f64;
        println!(
            "run {}: sha-256 {:.0} k/s, append {:.0} k/s (x{:.2}), inclusion p50 {:?} p99 {:?}, consistency p50 {:?} p99 {:?}",
            r + 1,
            n / res.sha_secs / 1e3,
            n / res.append_secs / 1e3,
            res.append_secs / res.sha_secs,
            res.inclusion.p50,
            res.inclusion.p99,
            res.consistency.p50,
            res.consistency.p99
        );
        results.push(res);
    }

    let n = args.leaves as f64;
    let mb = n * args.entry_bytes as f64 / 1e6;
    let rate = |x: f64| format!("{:.0} k entries/s", x / 1e3);
    let us = |x: f64| format!("{x:.1} µs");
    println!(
        "\nsummary: median [min – max] over {} runs, {} leaves of {} bytes",
        args.runs, args.leaves, args.entry_bytes
    );
    println!(
        "  raw sha-256 of the entries     {}",
        spread(results.iter().map(|r| n / r.sha_secs), rate)
    );
    println!(
        "                                 {}",
        spread(results.iter().map(|r| mb / r.sha_secs), |x| format!(
            "{x:.0} MB/s"
        ))
    );
    println!(
        "  append (leaf+tree+tiles)       {}",
        spread(results.iter().map(|r| n / r.append_secs), rate)
    );
    println!(
        "  append time / sha-256 time     {}",
        spread(results.iter().map(|r| r.append_secs / r.sha_secs), |x| format!(
            "{x:.2}x"
        ))
    );
    for (name, get) in [
        (
            "inclusion",
            (|r: &RunResult| &r.inclusion) as fn(&RunResult) -> &Latencies,
        ),
        ("consistency", |r: &RunResult| &r.consistency),
    ] {
        println!(
            "  {name:<11} proof latency p50 {}",
            spread(results.iter().map(|r| get(r).p50.as_secs_f64() * 1e6), us)
        );
        println!(
            "  {name:<11} proof latency p99 {}",
            spread(results.iter().map(|r| get(r).p99.as_secs_f64() * 1e6), us)
        );
        println!(
            "  {name:<11} proof size        mean {} hashes, max {} hashes ({} bytes)",
            spread(results.iter().map(|r| get(r).mean_hashes), |x| format!("{x:.1}")),
            results.iter().map(|r| get(r).max_hashes).max().unwrap_or(0),
            results.iter().map(|r| get(r).max_hashes).max().unwrap_or(0) * 32
        );
    }
    Ok(())
}
