//! Verify benchmark: `verify_ledger`'s rate over a real ledger on a local nats-server, beside raw
//! SHA-256 over the same entry bytes in the same run.
//!
//! ```text
//! cargo run --release -p toolledger-verify --example verify_bench -- [--entries 200000] [--runs 3]
//! ```
//!
//! Setup (once): a nats-server fixture, the contract's streams, `--entries` canonical entries
//! (generated sessions, repeated) appended to ATL_LEDGER with the checkpointer signing every 1000 and
//! writing tiles to a temp dir. Each run: SHA-256 of every entry's bytes in memory (the floor), then
//! `verify_ledger` with tiles (read from NATS, parse, leaf hash, tree, checkpoints, tiles), then
//! without parsing entries. Figures are medians over the runs with the min–max spread.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use bytes::Bytes;
use chrono::{TimeZone, Utc};
use sha2::{Digest, Sha256};
use toolledger_ingest::append::PendingEntry;
use toolledger_ingest::checkpoint::{CheckpointSettings, Checkpointer};
use toolledger_merkle::{NoteSigner, TileStore, Verifiers};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::NatsFixture;
use toolledger_verify::{VerifyOptions, verify_ledger};
use toolledger_wire::cloudevents::AttributesReader;
use toolledger_wire::streams::{self, CHECKPOINTS, ContractSettings, LEDGER};
use toolledger_wire::{LedgerEntry, Mode, produce};

struct Args {
    entries: usize,
    runs: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        entries: 200_000,
        runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: usize = value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a number"))?;
        match flag.as_str() {
            "--entries" => args.entries = n,
            "--runs" => args.runs = n.max(1),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

fn entries() -> Vec<PendingEntry> {
    let events = generate(&GeneratorConfig {
        seed: 7,
        sessions: 8,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        ..GeneratorConfig::default()
    })
    .events;
    let at = Utc.timestamp_opt(1_778_230_900, 0).single().unwrap_or_default();
    events
        .into_iter()
        .filter_map(|event| {
            let out = produce::prepare(event, None, Mode::Binary).ok()?;
            let decoded = toolledger_wire::decode(&out.subject, Some(&out.headers), &out.payload).ok()?;
            let subject = format!("atl.ledger.{}.{}", decoded.tenant.as_str(), decoded.event.ty());
            let bytes = LedgerEntry::new(decoded, at).canonical_bytes().ok()?;
            Some(PendingEntry::new(subject, Bytes::from(bytes)))
        })
        .collect()
}

fn spread(values: &[f64], unit: &str) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    format!(
        "{median:>12.0} {unit}  (min {:.0}, max {:.0}, spread {:.1}%)",
        sorted[0],
        sorted[sorted.len() - 1],
        100.0 * (sorted[sorted.len() - 1] - sorted[0]) / median.max(1e-9)
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    streams::ensure_contract(&js, &ContractSettings::default()).await?;
    let tiles_dir = tempfile::tempdir()?;
    let tiles = TileStore::local(tiles_dir.path())?;
    let signer = NoteSigner::from_seed("toolledger/bench", [9; 32])?;
    let verifiers = Verifiers::new([signer.verifier()]);
    let settings = CheckpointSettings {
        every: 1000,
        interval: Duration::from_secs(3600),
        ..CheckpointSettings::new("toolledger/bench")
    };
    let mut checkpointer = Checkpointer::open(js.clone(), settings, signer, tiles.clone(), 0).await?;

    // The ledger: generated entries repeated. Published without message ids (the appender's leaf-hash
    // ids would deduplicate the repeats); verification reads payloads only.
    let base = entries();
    let ledger: Vec<PendingEntry> = base.iter().cycle().take(args.entries).cloned().collect();
    let bytes_total: usize = ledger.iter().map(|e| e.bytes.len()).sum();
    let started = Instant::now();
    for batch in ledger.chunks(1000) {
        let mut acks = Vec::with_capacity(batch.len());
        for entry in batch {
            acks.push(js.publish(entry.subject.clone(), entry.bytes.clone()).await?);
        }
        let mut seqs = Vec::with_capacity(batch.len());
        for ack in acks {
            seqs.push(ack.await?.sequence);
        }
        checkpointer.appended(&seqs, batch).await?;
    }
    checkpointer.checkpoint().await?;
    println!(
        "ledger: {} entries, {:.1} MB ({} distinct, mean {} bytes), built in {:.1}s",
        args.entries,
        bytes_total as f64 / 1e6,
        base.len(),
        bytes_total / args.entries.max(1),
        started.elapsed().as_secs_f64()
    );

    let (mut sha, mut full, mut hash_only) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=args.runs {
        let t = Instant::now();
        let mut digest = [0u8; 32];
        for entry in &ledger {
            let d: [u8; 32] = Sha256::digest(&entry.bytes).into();
            digest[0] ^= d[0];
        }
        std::hint::black_box(digest);
        sha.push(args.entries as f64 / t.elapsed().as_secs_f64());

        for (parse, rates) in [(true, &mut full), (false, &mut hash_only)] {
            let options = VerifyOptions {
                tiles: Some(tiles.clone()),
                check_entries: parse,
                ..VerifyOptions::default()
            };
            let t = Instant::now();
            let report = verify_ledger(&js, LEDGER, CHECKPOINTS, &verifiers, &options, &mut |_| {}).await?;
            let secs = t.elapsed().as_secs_f64();
            if !report.is_ok() || report.entries != args.entries as u64 {
                return Err(format!("run {run}: unexpected report {:?}", report.findings).into());
            }
            rates.push(args.entries as f64 / secs);
        }
        println!(
            "run {run}: sha256 {:.0}/s, verify {:.0}/s, verify without parsing {:.0}/s",
            sha[run - 1],
            full[run - 1],
            hash_only[run - 1]
        );
    }
    let mean = bytes_total as f64 / args.entries as f64;
    let mb = |rates: &[f64]| rates.iter().map(|r| r * mean / 1e6).collect::<Vec<_>>();
    println!("\n{} runs, median (min–max):", args.runs);
    println!("raw SHA-256 (memory)          {}", spread(&sha, "entries/s"));
    println!("                              {}", spread(&mb(&sha), "MB/s"));
    println!("verify (parse + hash + tiles) {}", spread(&full, "entries/s"));
    println!("                              {}", spread(&mb(&full), "MB/s"));
    println!(
        "verify without parsing        {}",
        spread(&hash_only, "entries/s")
    );
    let ratio: Vec<f64> = sha.iter().zip(&full).map(|(s, v)| s / v).collect();
    let ratio_hash: Vec<f64> = sha.iter().zip(&hash_only).map(|(s, v)| s / v).collect();
    let fmt = |r: &[f64]| {
        let mut r = r.to_vec();
        r.sort_by(f64::total_cmp);
        format!(
            "{:.1}x (min {:.1}x, max {:.1}x)",
            r[r.len() / 2],
            r[0],
            r[r.len() - 1]
        )
    };
    println!("SHA-256 / verify              {}", fmt(&ratio));
    println!("SHA-256 / verify w/o parsing  {}", fmt(&ratio_hash));
    drop(nats);
    Ok(())
}
