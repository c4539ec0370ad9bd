//! `toolledger bench`: the end-to-end benchmark suite. Every figure is measured over several runs
//! (three by default) beside a baseline measured in the same round on the same machine, with the
//! realistic event mix of the generator; the result is a Markdown + JSON report naming the exact
//! command and the machine (`docs/benchmarks/` holds the committed one).
//!
//! ```text
//! suites: ingest   ingest vs a pass-through relay vs raw JetStream publish
//!         otlp     tool-call spans through the OTLP receiver into the ledger vs ingest's own rate
//!                  for the same events published straight
//!         latency  publish ─▶ queryable p50/p99/p99.9 at offered loads; maximum sustained rate
//!         rebuild  projector rebuild vs raw SQLite insert
//!         export   Parquet export vs raw arrow write
//!         verify   verify vs raw SHA-256
//!         reads    a 1M-entry projection: rebuild and export at that size, bytes/entry, and the
//!                  API's reads (reconstruct, listings) idle and while the projector applies
//!         bulk     a 10M-entry ledger built quickly; size-dependent figures (bytes/entry, proofs)
//!         soak     RSS of each service over a long run at a steady load
//!         sdk      the producer SDKs' emit into the durable spool vs raw appends, per fsync policy
//! ```
//! The report is rewritten after each suite, so an interrupted run keeps what it measured. A run of
//! some suites (`--only`) into a directory that holds a report replaces those suites' sections and
//! keeps the others, each marked with the run that measured it.

pub mod machine;
pub mod report;
pub mod workload;

mod bulk;
mod offline;
mod otlp;
mod partitions;
mod pipeline;
mod reads;
mod sdk;

use std::path::PathBuf;
use std::time::Instant;

use report::{Report, Section};

/// Every suite, in the order a full run takes them.
pub const SUITES: [&str; 13] = [
    "ingest",
    "partitions",
    "otlp",
    "latency",
    "poison",
    "burst",
    "rebuild",
    "export",
    "verify",
    "reads",
    "bulk",
    "soak",
    "sdk",
];

/// What to run and how big.
#[derive(Debug, Clone)]
pub struct Options {
    /// Suites to run (subset of [`SUITES`]), in [`SUITES`] order.
    pub suites: Vec<String>,
    /// Runs per figure (at least 3 for a report; fewer only for trying things).
    pub runs: usize,
    /// Where the report goes (`report.md`, `report.json`).
    pub out: PathBuf,
    /// Where temporary servers, ledgers and databases go (its filesystem needs the free space the
    /// bulk suite asks for).
    pub work_dir: PathBuf,
    /// The pinned nats-server.
    pub nats_server: PathBuf,
    /// The `toolledger` binary to run services with (the running one).
    pub toolledger: PathBuf,
    /// Sizes.
    pub scale: Scale,
    /// The command line, as the report will print it.
    pub command: String,
}

/// Sizes of each suite.
#[derive(Debug, Clone)]
pub struct Scale {
    /// Events per run for ingest, rebuild, export and verify.
    pub events: usize,
    /// Offered loads for the latency suite, events/s.
    pub loads: Vec<u64>,
    /// Seconds each offered load is held.
    pub load_secs: u64,
    /// Events of the latency suite's saturation burst (maximum sustained end-to-end rate).
    pub burst_events: usize,
    /// Events of one tenant's burst in the burst suite.
    pub tenant_burst: usize,
    /// Distinct entries of the reads suite's ledger.
    pub reads_entries: usize,
    /// Entries/s appended while the reads suite reads beside the projector.
    pub reads_apply_rate: u64,
    /// Seconds of those appends, per run.
    pub reads_apply_secs: u64,
    /// Entries of the bulk-built ledger.
    pub bulk_entries: u64,
    /// Seconds of the soak run.
    pub soak_secs: u64,
    /// Soak runs, when not `Options::runs` (a 10-minute soak three times is half an hour).
    pub soak_runs: Option<usize>,
    /// Offered load of the soak run, events/s.
    pub soak_rate: u64,
}

impl Scale {
    /// The sizes the committed report uses.
    pub fn full() -> Self {
        Self {
            events: 50_000,
            loads: vec![1_000, 5_000, 10_000],
            load_secs: 10,
            burst_events: 30_000,
            tenant_burst: 200_000,
            reads_entries: 1_000_000,
            reads_apply_rate: 20_000,
            reads_apply_secs: 10,
            bulk_entries: 10_000_000,
            soak_secs: 600,
            soak_runs: None,
            soak_rate: 1_000,
        }
    }

    /// Tiny sizes that exercise every code path in seconds (the test suite runs these).
    pub fn smoke() -> Self {
        Self {
            events: 2_000,
            loads: vec![200, 500],
            load_secs: 2,
            burst_events: 500,
            tenant_burst: 3_000,
            reads_entries: 5_000,
            reads_apply_rate: 1_000,
            reads_apply_secs: 2,
            bulk_entries: 20_000,
            soak_secs: 6,
            soak_runs: None,
            soak_rate: 200,
        }
    }
}

/// Runs the chosen suites, rewriting the report after each; returns the final report.
pub async fn run(options: Options) -> anyhow::Result<Report> {
    let started = Instant::now();
    let machine = machine::Machine::describe(&options.nats_server, &options.work_dir);
    let mut report = Report {
        command: options.command.clone(),
        machine,
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        seconds: 0.0,
        runs: options.runs,
        sections: Vec::new(),
    };
    // A run of some suites updates the report in `--out` rather than dropping the others.
    if SUITES
        .iter()
        .any(|suite| !options.suites.iter().any(|o| o == suite))
        && let Ok(text) = std::fs::read(options.out.join("report.json"))
    {
        let earlier: Report = serde_json::from_slice(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", options.out.join("report.json").display()))?;
        report.sections = Report::kept_sections(earlier, &options.suites);
        if !report.sections.is_empty() {
            eprintln!(
                "bench: keeping {} section(s) of the report in {} that this run does not measure",
                report.sections.len(),
                options.out.display()
            );
        }
    }
    for suite in SUITES.iter().filter(|s| options.suites.iter().any(|o| o == *s)) {
        eprintln!("bench: {suite} …");
        let suite_started = Instant::now();
        let mut section: Section = match *suite {
            "ingest" => pipeline::ingest(&options).await?,
            "partitions" => partitions::partitions(&options).await?,
            "otlp" => otlp::otlp(&options).await?,
            "latency" => pipeline::latency(&options).await?,
            "poison" => pipeline::poison(&options).await?,
            "burst" => pipeline::burst(&options).await?,
            "soak" => pipeline::soak(&options).await?,
            "rebuild" => offline::rebuild(&options).await?,
            "export" => offline::export(&options).await?,
            "verify" => offline::verify(&options).await?,
            "reads" => reads::reads(&options).await?,
            "bulk" => bulk::bulk(&options).await?,
            "sdk" => sdk::sdk(&options).await?,
            other => anyhow::bail!("unknown suite {other}"),
        };
        section.seconds = suite_started.elapsed().as_secs_f64();
        eprintln!("bench: {suite} done in {:.0} s", section.seconds);
        report.sections.push(section);
        report
            .sections
            .sort_by_key(|section| SUITES.iter().position(|suite| *suite == section.id));
        report.seconds = started.elapsed().as_secs_f64();
        report.write(&options.out)?;
    }
    Ok(report)
}
