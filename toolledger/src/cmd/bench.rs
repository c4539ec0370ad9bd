//! `toolledger bench`: the end-to-end benchmark suite (bench/), writing a Markdown + JSON report.
//!
//! ```text
//! toolledger bench [--only SUITE,…] [--runs 3] [--out DIR] [--work-dir DIR] [--smoke]
//! ```
//! `scripts/bench` builds the release binary and runs this with the committed report's settings.

use std::path::PathBuf;

use anyhow::Context as _;
use toolledger_bench::{Options, SUITES, Scale};
use toolledger_core::config::Config;

/// Flags of `toolledger bench`.
#[derive(clap::Args)]
pub struct Args {
    /// Suites to run, comma-separated (default: all): ingest, latency, rebuild, export, verify, bulk, soak.
    #[arg(long, value_delimiter = ',', value_name = "SUITE")]
    only: Vec<String>,
    /// Runs per figure.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Directory for report.md and report.json.
    #[arg(long, default_value = "target/bench-report", value_name = "DIR")]
    out: PathBuf,
    /// Directory for temporary servers, ledgers and databases (the bulk suite checks its free space).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Tiny sizes that run every code path in seconds (figures mean nothing).
    #[arg(long)]
    smoke: bool,
    /// Events per run for the ingest, rebuild, export and verify suites.
    #[arg(long, value_name = "N")]
    events: Option<usize>,
    /// Entries of the reads suite's ledger.
    #[arg(long, value_name = "N")]
    reads_entries: Option<usize>,
    /// Entries of the bulk-built ledger.
    #[arg(long, value_name = "N")]
    bulk_entries: Option<u64>,
    /// Seconds of each soak run.
    #[arg(long, value_name = "SECS")]
    soak_secs: Option<u64>,
    /// Soak runs (default: --runs).
    #[arg(long, value_name = "N")]
    soak_runs: Option<usize>,
    /// Seconds each offered load of the latency suite is held.
    #[arg(long, value_name = "SECS")]
    load_secs: Option<u64>,
}

/// Runs the suites and prints where the report went and the targets' verdicts.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    for suite in &args.only {
        anyhow::ensure!(
            SUITES.contains(&suite.as_str()),
            "unknown suite {suite:?}; suites: {}",
            SUITES.join(", ")
        );
    }
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let mut scale = if args.smoke { Scale::smoke() } else { Scale::full() };
    if let Some(n) = args.events {
        scale.events = n;
    }
    if let Some(n) = args.reads_entries {
        scale.reads_entries = n;
    }
    if let Some(n) = args.bulk_entries {
        scale.bulk_entries = n;
    }
    if let Some(n) = args.soak_secs {
        scale.soak_secs = n;
    }
    if let Some(n) = args.soak_runs {
        anyhow::ensure!(n >= 1, "--soak-runs must be at least 1");
        scale.soak_runs = Some(n);
    }
    if let Some(n) = args.load_secs {
        scale.load_secs = n;
    }
    let work_dir = match args.work_dir {
        Some(dir) => dir,
        None => config.data_dir.join("bench"),
    };
    std::fs::create_dir_all(&work_dir).with_context(|| format!("creating {}", work_dir.display()))?;
    let command = std::iter::once("toolledger".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let options = Options {
        suites: if args.only.is_empty() {
            SUITES.iter().map(|s| (*s).to_owned()).collect()
        } else {
            args.only
        },
        runs: args.runs,
        out: args.out.clone(),
        work_dir,
        nats_server: config.nats.server_bin.clone(),
        toolledger: std::env::current_exe().context("locating the toolledger binary")?,
        scale,
        command,
    };
    let report = toolledger_bench::run(options).await?;
    for target in report.targets() {
        println!(
            "{} {}: {:.3} {}",
            if target.met { "met   " } else { "MISSED" },
            target.target,
            target.measured,
            target.unit
        );
    }
    println!(
        "report: {} and {}",
        args.out.join("report.md").display(),
        args.out.join("report.json").display()
    );
    Ok(())
}
