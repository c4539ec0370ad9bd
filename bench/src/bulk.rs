//! The bulk loader: a large ledger (10M entries for the report) built quickly — entries published
//! straight to ATL_LEDGER with the checkpointer, as ingest's appender does, without the inbound side —
//! and the figures that depend on the ledger's size: bytes per entry in JetStream and in tiles,
//! inclusion and consistency proof latency and size, and a verify pass over all of it.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use toolledger_ingest::append::PendingEntry;
use toolledger_verify::prove::{ProveSource, TrustedCache, prove_consistency, prove_inclusion};
use toolledger_verify::{VerifyOptions, verify_ledger};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};

use crate::Options;
use crate::report::{Better, Bound, Figure, Section, TargetCheck, percentile};
use crate::workload::{self, LedgerLoader, Server};

/// Distinct generated entries the bulk ledger cycles through.
const BASE_ENTRIES: usize = 100_000;
/// Proofs of each kind per run (enough that a p99 is not simply the slowest).
const PROOFS: usize = 200;
/// Events of the invocation whose evidence bundle each run builds, and how far apart they lie in
/// the ledger (other sessions' events between them; each in its own entry bundle and level-0 tile).
const INVOCATION_EVENTS: u64 = 100;
const INVOCATION_STRIDE: u64 = 997;
/// Space left free beyond the estimate, so the machine is not filled to the last byte.
const RESERVE_BYTES: u64 = 2 << 30;
/// JetStream's per-message overhead in its file store (record header, subject, index), measured on
/// 2.15.1 and rounded up; plus 33 bytes of tiles per entry (a leaf hash and its share of interior
/// nodes) and its compressed copy in an entry bundle (the generator's entries shrink 7.7×: 160 bytes
/// with room).
const OVERHEAD_PER_ENTRY: u64 = 120 + 33 + 160;

/// Builds a `bulk_entries` ledger and measures what depends on its size.
pub async fn bulk(options: &Options) -> anyhow::Result<Section> {
    let n = options.scale.bulk_entries;
    // The estimate comes from a sample, so a ledger that cannot fit is refused before anything is built.
    let sample = workload::ledger_entries(&workload::events(1_000, 1_000))?;
    let mean = sample.iter().map(|e| e.bytes.len() as u64).sum::<u64>() / sample.len() as u64;
    let need = (mean + OVERHEAD_PER_ENTRY) * n * 5 / 4;
    let (available, _) = toolledger_core::disk_space(&options.work_dir)?;
    eprintln!(
        "bench: bulk: {n} entries of {mean} bytes on average need about {:.1} GiB in {} ({:.1} GiB free)",
        gib(need),
        options.work_dir.display(),
        gib(available)
    );
    anyhow::ensure!(
        available >= need + RESERVE_BYTES,
        "the bulk ledger of {n} entries needs about {:.1} GiB free in {} (plus {:.0} GiB kept free), and \
         {:.1} GiB are: pass a smaller --bulk-entries or a --work-dir on a larger filesystem",
        gib(need),
        options.work_dir.display(),
        gib(RESERVE_BYTES),
        gib(available)
    );

    let base = workload::ledger_entries(&workload::events(BASE_ENTRIES.min(n as usize).max(1), 1_000))?;
    let mean = base.iter().map(|e| e.bytes.len() as u64).sum::<u64>() / base.len() as u64;
    let server = Server::start(&options.nats_server, &options.work_dir)?;
    let js = server.jetstream().await?;
    let tiles_dir = tempfile::Builder::new()
        .prefix("tiles-")
        .tempdir_in(&options.work_dir)?;
    let mut loader = LedgerLoader::open(js.clone(), tiles_dir.path()).await?;
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut chunk: Vec<PendingEntry> = Vec::with_capacity(10_000);
    let mut next = base.iter().cycle();
    while loader.appended < n {
        chunk.clear();
        let take = (n - loader.appended).min(10_000) as usize;
        chunk.extend(next.by_ref().take(take).cloned());
        loader.append(&chunk).await?;
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            let rate = loader.appended as f64 / secs;
            eprintln!(
                "bench: bulk: {}/{n} entries, {rate:.0}/s, about {:.0} s to go",
                loader.appended,
                (n - loader.appended) as f64 / rate.max(1.0)
            );
        }
    }
    loader.finish().await?;
    let load_secs = started.elapsed().as_secs_f64();
    eprintln!("bench: bulk: {n} entries loaded in {load_secs:.0} s");

    let info = js.get_stream(LEDGER).await?.info().await?.clone();
    let store_bytes = workload::dir_bytes(&server.store_dir());
    let tile_bytes = workload::dir_bytes(tiles_dir.path());

    let source = ProveSource {
        ledger_stream: LEDGER.to_owned(),
        checkpoint_stream: CHECKPOINTS.to_owned(),
        verifiers: loader.verifiers.clone(),
        origin: None,
        tiles: Some(loader.tiles.clone()),
        trusted: Default::default(),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let (mut inclusion_p50, mut inclusion_p99, mut inclusion_bytes) = (Vec::new(), Vec::new(), Vec::new());
    let (mut consistency_p50, mut consistency_p99, mut consistency_bytes) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut verify_rates, mut sha_rates) = (Vec::new(), Vec::new());
    let (mut badge_ms, mut badge_bytes) = (Vec::new(), Vec::new());
    let mut first_proof = Vec::new();
    let checkpoint_sizes: Vec<u64> = (1..=n / 1000).map(|k| k * 1000).chain([n]).collect();
    for run in 0..options.runs {
        // A new source, as a fresh `serve` or `toolledger prove` has: its first proof reads and checks
        // every signed checkpoint once; the proofs after it read only what was signed since.
        let source = ProveSource {
            trusted: TrustedCache::default(),
            ..source.clone()
        };
        let started = Instant::now();
        prove_inclusion(&js, &source, n, None).await?;
        first_proof.push(started.elapsed().as_secs_f64() * 1e3);
        let mut latencies = Vec::with_capacity(PROOFS);
        let mut sizes = Vec::with_capacity(PROOFS);
        for _ in 0..PROOFS {
            let seq = rng.random_range(1..=n);
            let started = Instant::now();
            let proof = prove_inclusion(&js, &source, seq, None).await?;
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
            proof.check(&loader.verifiers)?;
            sizes.push((proof.proof.len() * 32) as f64);
        }
        inclusion_p50.push(percentile(&mut latencies, 0.5));
        inclusion_p99.push(percentile(&mut latencies, 0.99));
        inclusion_bytes.push(percentile(&mut sizes, 1.0));

        let mut latencies = Vec::with_capacity(PROOFS);
        let mut sizes = Vec::with_capacity(PROOFS);
        for _ in 0..PROOFS {
            let new = checkpoint_sizes[rng.random_range(0..checkpoint_sizes.len())];
            let old = rng.random_range(1..=new);
            let started = Instant::now();
            let proof = prove_consistency(&js, &source, old, new).await?;
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
            proof.check(&loader.verifiers)?;
            sizes.push((proof.proof.len() * 32) as f64);
        }
        consistency_p50.push(percentile(&mut latencies, 0.5));
        consistency_p99.push(percentile(&mut latencies, 0.99));
        consistency_bytes.push(percentile(&mut sizes, 1.0));

        // The web view's badge for a long invocation: one bundle request, built and checked.
        let span = (INVOCATION_EVENTS - 1) * INVOCATION_STRIDE;
        if n > span {
            let first = rng.random_range(1..=n - span);
            let seqs = (0..INVOCATION_EVENTS)
                .map(|i| first + i * INVOCATION_STRIDE)
                .collect();
            let (build, check, bytes) = crate::offline::timed_bundle(&js, &source, seqs).await?;
            badge_ms.push(build + check);
            badge_bytes.push(bytes);
        }

        let started = Instant::now();
        let mut acc = 0u8;
        for entry in base.iter().cycle().take(n as usize) {
            let digest: [u8; 32] = Sha256::digest(&entry.bytes).into();
            acc ^= digest[0];
        }
        std::hint::black_box(acc);
        sha_rates.push(n as f64 / started.elapsed().as_secs_f64());

        eprintln!(
            "bench: bulk run {}/{}: inclusion p50 {:.2} ms, consistency p50 {:.2} ms, SHA-256 {:.0}/s",
            run + 1,
            options.runs,
            inclusion_p50[run],
            consistency_p50[run],
            sha_rates[run]
        );
    }
    // One verify pass over the whole ledger: at 10M entries a pass takes minutes, so the suite
    // makes one and says so; the verify suite has the three-run rate beside raw SHA-256.
    let verify_options = VerifyOptions {
        tiles: Some(loader.tiles.clone()),
        ..VerifyOptions::default()
    };
    // Its memory: the peak resident size during the pass above the size before it (the kernel's
    // high-water mark, reset first), so what the suite itself holds is not counted.
    let resident_before = own_memory_kib("VmRSS:");
    let peak_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let started = Instant::now();
    let mut last_report = Instant::now();
    let report = verify_ledger(
        &js,
        LEDGER,
        CHECKPOINTS,
        &loader.verifiers,
        &verify_options,
        &mut |p| {
            if last_report.elapsed() >= Duration::from_secs(10) {
                last_report = Instant::now();
                eprintln!("bench: bulk: verify {}/{}", p.done, p.total);
            }
        },
    )
    .await?;
    anyhow::ensure!(
        report.is_ok() && report.entries == n,
        "verify of the bulk ledger found {:?}",
        report.findings
    );
    verify_rates.push(n as f64 / started.elapsed().as_secs_f64());
    let verify_peak_mib = match (peak_reset, resident_before, own_memory_kib("VmHWM:")) {
        (true, Some(before), Some(peak)) => vec![(peak.saturating_sub(before)) as f64 / 1024.0],
        _ => Vec::new(),
    };

    let mut section = Section::new(
        "bulk",
        &format!("A {} ledger: size-dependent figures", count(n)),
        format!(
            "The bulk loader cycles {} distinct generated entries (the generator's mix, mean {mean} bytes) \
             into ATL_LEDGER on a fresh nats-server, each batch of 1,000 published pipelined and handed to the \
             checkpointer (tiles on the local filesystem, a signed checkpoint every 1,000 entries) — ingest's \
             append path without the inbound side. Before loading it checks the work directory's free space \
             against its estimate ((mean entry + {OVERHEAD_PER_ENTRY} bytes) × entries × 1.25, plus {:.0} GiB \
             kept free) and refuses, saying how much it needs. The ledger is built once; each of the {} runs \
             then times a new proof source's first proof (it reads and checks every signed checkpoint \
             once), draws {PROOFS} random inclusion proofs (newest checkpoint) and {PROOFS} consistency proofs \
             (random older size to a random signed size) through that source (`serve`'s code path: a source \
             keeps the checkpoints it has checked), checks each offline, builds the evidence bundle of a \
             {INVOCATION_EVENTS}-event invocation whose events lie {INVOCATION_STRIDE} entries apart at a random place (the one \
             request the web view's verified badge waits on) and checks it offline, and hashes the same {} entries' bytes in memory with SHA-256; after the runs, one full \
             `verify` pass over the ledger (one only: at this size a pass takes minutes; the verify suite \
             above has its rate over three runs), with its peak resident memory above the process's \
             before it (the kernel's high-water mark, reset just before the pass).",
            base.len(),
            gib(RESERVE_BYTES),
            options.runs,
            count(n)
        ),
    );
    section.figure(Figure::new(
        "bulk.load_rate",
        "bulk load (one build, the suite's setup)",
        "entries/s",
        Better::Higher,
        vec![n as f64 / load_secs],
    ));
    section.figure(Figure::new(
        "bulk.ledger_bytes_per_entry",
        "JetStream stream bytes per entry",
        "bytes/entry",
        Better::Lower,
        vec![info.state.bytes as f64 / info.state.messages.max(1) as f64],
    ));
    section.figure(Figure::new(
        "bulk.store_bytes_per_entry",
        "nats-server store on disk per entry (all streams)",
        "bytes/entry",
        Better::Lower,
        vec![store_bytes as f64 / n as f64],
    ));
    section.figure(Figure::new(
        "bulk.tile_bytes_per_entry",
        "Merkle tiles and entry bundles on disk per entry",
        "bytes/entry",
        Better::Lower,
        vec![tile_bytes as f64 / n as f64],
    ));
    section.figure(Figure::new(
        "bulk.first_proof",
        "a new proof source's first inclusion proof (reads every signed checkpoint)",
        "ms",
        Better::Lower,
        first_proof,
    ));
    section.figure(Figure::new(
        "bulk.inclusion_p50",
        "inclusion proof p50",
        "ms",
        Better::Lower,
        inclusion_p50,
    ));
    let inclusion_p99 = section.figure(Figure::new(
        "bulk.inclusion_p99",
        "inclusion proof p99",
        "ms",
        Better::Lower,
        inclusion_p99,
    ));
    section.figure(Figure::new(
        "bulk.inclusion_bytes",
        "largest inclusion path",
        "bytes",
        Better::Lower,
        inclusion_bytes,
    ));
    section.figure(Figure::new(
        "bulk.consistency_p50",
        "consistency proof p50",
        "ms",
        Better::Lower,
        consistency_p50,
    ));
    let consistency_p99 = section.figure(Figure::new(
        "bulk.consistency_p99",
        "consistency proof p99",
        "ms",
        Better::Lower,
        consistency_p99,
    ));
    for (what, figure) in [("inclusion", &inclusion_p99), ("consistency", &consistency_p99)] {
        section.targets.push(
            TargetCheck::new(
                &format!("{what} proof p99 ≤ 5 ms in a {} ledger", count(n)),
                &figure.id,
                figure.median,
                "ms",
                Bound::AtMost,
                5.0,
            )
            .explain_miss(
                "a proof is one request for the checkpoint stream's tail, the tree root and the audit path \
             from the tiles (a few 8 KiB reads) and, for inclusion, its entry's bundle; where its time \
             goes at a given size: `cargo run --release -p toolledger-bench --example proof_parts -- \
             ENTRIES`",
            ),
        );
    }
    section.figure(Figure::new(
        "bulk.consistency_bytes",
        "largest consistency path",
        "bytes",
        Better::Lower,
        consistency_bytes,
    ));
    // A ledger shorter than the invocation's span has no such invocation: no figure, no target.
    if !badge_ms.is_empty() {
        let badge = section.figure(Figure::new(
            "bulk.invocation_bundle",
            &format!(
                "evidence bundle of a {INVOCATION_EVENTS}-event invocation ({INVOCATION_STRIDE} entries \
                 apart): built as `serve` builds it and checked offline"
            ),
            "ms",
            Better::Lower,
            badge_ms,
        ));
        section.figure(Figure::new(
            "bulk.invocation_bundle_bytes",
            &format!("evidence bundle of a {INVOCATION_EVENTS}-event invocation: size"),
            "bytes",
            Better::Lower,
            badge_bytes,
        ));
        section.targets.push(
            TargetCheck::new(
                &format!(
                    "the badge of a {INVOCATION_EVENTS}-event invocation in a {} ledger in ≤ 1 s (its \
                     bundle built and checked)",
                    count(n)
                ),
                &badge.id,
                badge.median,
                "ms",
                Bound::AtMost,
                1000.0,
            )
            .explain_miss(
                "the web view's badge waits on one bundle request: an inclusion proof per entry, 16 at \
                 a time, each its entry's bundle and a few tiles",
            ),
        );
    }
    let verify = section.figure(Figure::new(
        "bulk.verify_rate",
        "verify, whole ledger (one pass)",
        "entries/s",
        Better::Higher,
        verify_rates,
    ));
    if !verify_peak_mib.is_empty() {
        section.figure(Figure::new(
            "bulk.verify_peak_rss",
            "verify, whole ledger: peak resident memory above the process's before the pass",
            "MiB",
            Better::Lower,
            verify_peak_mib,
        ));
    }
    let sha = section.figure(Figure::new(
        "bulk.raw_sha256",
        "raw SHA-256 of the same bytes",
        "entries/s",
        Better::Higher,
        sha_rates,
    ));
    section.compare("bulk_verify_vs_raw_sha256", &verify, &sha);
    section.notes.push(format!(
        "The size figures are read once from the one ledger the suite builds (they do not vary between \
         runs); the load rate is that one build. Ledger: {:.2} GB in JetStream's accounting, {:.2} GB on \
         disk, {:.2} GB of tiles and entry bundles; {} signed checkpoints.",
        info.state.bytes as f64 / 1e9,
        store_bytes as f64 / 1e9,
        tile_bytes as f64 / 1e9,
        checkpoint_sizes.len()
    ));
    section.notes.push(format!(
        "A proof source (one per `serve`, one per `toolledger prove` run) reads the checkpoint stream and \
         checks every signature once ({} notes here; the first-proof figure), so that no untrusted or \
         out-of-order note is ever served, then keeps the trusted checkpoints (a signed checkpoint never \
         changes) and reads only notes signed since; a proof is then the checkpoint stream's tail, the entry \
         from its entry bundle (256 entries in a zstd frame beside the level-0 tile; a JetStream get would \
         load the whole file-store block around the message) and a few tile reads.",
        checkpoint_sizes.len()
    ));
    drop(js);
    drop(loader);
    Ok(section)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// `10000000` ─▶ `10M`, `20000` ─▶ `20k`.
pub(crate) fn count(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M-entry", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}k-entry", n / 1_000)
    } else {
        format!("{n}-entry")
    }
}

/// A memory figure of this process from /proc/self/status (`VmRSS:`, `VmHWM:`), in KiB.
fn own_memory_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
