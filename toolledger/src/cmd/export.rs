//! `toolledger export` and `toolledger verify --parquet`: the Parquet archive of the ledger.
//!
//! ```text
//! export: connect ─▶ archive (--prefix, export.prefix, <data_dir>/parquet) ─▶ toolledger_export::run
//!         (recovers from the manifests, catches up with a progress bar, then follows until
//!          Ctrl-C / SIGTERM, or stops when caught up with --until-caught-up)
//! verify --parquet PREFIX: verifier keys ─▶ toolledger_export::verify_archive ─▶ report, exit 1 when bad
//! ```

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolledger_core::config::Config;
use toolledger_export::{Archive, Options, Progress, verify_archive};
use toolledger_merkle::Verifiers;
use toolledger_wire::partition::{Partition, Partitions};

use super::init::{connect, nats_url};

/// How often progress is logged when stdout is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Flags of `toolledger export`.
#[derive(clap::Args)]
pub struct Args {
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// The archive: a directory, `file:///dir` or `s3://bucket/prefix`; overrides `export.prefix`.
    #[arg(long, value_name = "URL")]
    pub prefix: Option<String>,
    /// Stop once everything the ledger held at start is exported (a backfill), instead of following.
    #[arg(long, visible_alias = "once")]
    pub until_caught_up: bool,
    /// Close a file range after this many entries; overrides `export.rows_per_file`.
    #[arg(long, value_name = "N")]
    pub rows_per_file: Option<u64>,
    /// Close a file range when its oldest entry waited this long; overrides `export.max_delay_ms`.
    #[arg(long, value_name = "MS")]
    pub max_delay_ms: Option<u64>,
    /// Only this partition of a partitioned ledger (0 is `ATL_LEDGER`); repeat for several. The
    /// default is every partition, each into the same archive (`docs/parquet.md`).
    #[arg(long = "partition", value_name = "K")]
    pub partitions: Vec<u16>,
}

/// Exports until `shutdown` (or until caught up).
pub async fn run(
    config: Config,
    args: Args,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let client = connect(&url, "toolledger-export").await?;
    // Every partition is exported only when the count is the ledger's own.
    super::verify::check_count(
        &async_nats::jetstream::new(client.clone()),
        toolledger_wire::streams::CHECKPOINTS,
        &config,
    )
    .await?;
    let prefix = args.prefix.clone().unwrap_or_else(|| config.export_prefix());
    let archive = Archive::open(&prefix, &[])?;
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    let chosen = super::chosen_partitions(&config, &args.partitions)?;
    // Several exporters share the archive: the staging files a killed put left are removed once,
    // here, before any of them puts (one exporter's clean-up must not take another's put).
    let shared = chosen.len() > 1;
    if shared {
        let removed = archive.remove_interrupted_puts().await?;
        if removed > 0 {
            tracing::info!(removed, "removed the staging files of interrupted puts");
        }
    }
    let base = Options {
        rows_per_file: args.rows_per_file.unwrap_or(config.export.rows_per_file).max(1),
        max_delay: Duration::from_millis(args.max_delay_ms.unwrap_or(config.export.max_delay_ms)),
        row_group_rows: config.export.row_group_rows.max(1),
        until_caught_up: args.until_caught_up,
        clean_staging: !shared,
        ..Options::new(archive.clone())
    };
    let shutdown = futures::FutureExt::shared(shutdown);
    let mut reporters = Vec::new();
    let mut runs = Vec::new();
    for &partition in &chosen {
        // One progress bar on a terminal for a single exporter; log lines for several.
        let reporter = Arc::new(Mutex::new(ProgressReport::new(!shared, partition)));
        reporters.push(reporter.clone());
        let progress = Arc::new(move |p: Progress| {
            if let Ok(mut reporter) = reporter.lock() {
                reporter.update(p);
            }
        });
        let options = Options {
            progress: Some(progress),
            ..base.clone().for_partition(partition, partitions)
        };
        println!(
            "toolledger export: {} at {} into {}",
            options.ledger_stream,
            super::init::redacted(&url),
            archive.url()
        );
        runs.push(toolledger_export::run(client.clone(), options, shutdown.clone()));
    }
    let started = Instant::now();
    let result = futures::future::try_join_all(runs).await;
    for reporter in &reporters {
        if let Ok(reporter) = reporter.lock() {
            reporter.finish();
        }
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    for (partition, summary) in chosen.iter().zip(result?) {
        println!(
            "toolledger export: {} exported through seq {} (checkpoints through {}); {} entries, {} ranges, {} files, {:.1} MB in {secs:.1}s ({:.0} entries/s)",
            partition.stream(),
            summary.position,
            summary.checkpoint_position,
            summary.entries,
            summary.ranges,
            summary.files,
            summary.bytes as f64 / 1e6,
            summary.entries as f64 / secs
        );
    }
    Ok(())
}

/// `verify --parquet PREFIX`: the archive checked from its events and checkpoints alone.
pub async fn verify_parquet(
    config: &Config,
    prefix: &str,
    verifiers: &Verifiers,
    json: bool,
) -> anyhow::Result<()> {
    let archive = Archive::open(prefix, &[])?;
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    // One log per partition out of the one archive (a single ledger: the one log).
    let logs: Vec<Option<Partition>> = match partitions.count() {
        1 => vec![None],
        _ => partitions.all().map(Some).collect(),
    };
    let mut reports = Vec::new();
    for partition in logs {
        if let (Some(partition), false) = (partition, json) {
            println!("toolledger verify: partition {partition} of {}", archive.url());
        }
        let started = Instant::now();
        let scope = partition.map(|p| (partitions, p));
        let report = verify_archive(&archive, verifiers, Some(&config.ledger.origin), scope).await?;
        if !json {
            print_archive_report(&report, started.elapsed().as_secs_f64());
        }
        reports.push((partition, report));
    }
    if json {
        match reports.as_slice() {
            [(None, report)] => println!("{}", serde_json::to_string_pretty(report)?),
            _ => {
                let partitions: Vec<_> = reports
                    .iter()
                    .map(|(partition, report)| {
                        serde_json::json!({ "partition": partition.map(Partition::index), "report": report })
                    })
                    .collect();
                let out = serde_json::json!({ "partitions": partitions });
                println!("{}", serde_json::to_string_pretty(&out)?);
            }
        }
    }
    let findings: usize = reports.iter().map(|(_, report)| report.findings.len()).sum();
    let first_bad = reports.iter().find_map(|(partition, report)| {
        report.first_bad().map(|first| match partition {
            Some(partition) => format!("{partition}: {first}"),
            None => first.to_string(),
        })
    });
    match first_bad {
        None => {
            if !json {
                println!("toolledger verify: ok");
            }
            Ok(())
        }
        Some(first) => {
            anyhow::bail!("verification failed ({findings} findings); first bad position: {first}")
        }
    }
}

fn print_archive_report(report: &toolledger_export::ArchiveReport, secs: f64) {
    println!(
        "toolledger verify: {} entries in {} files of {} in {secs:.1}s; root {}",
        report.entries, report.files, report.archive, report.root
    );
    println!(
        "toolledger verify: {} of {} checkpoints trusted, the tree matches them through size {}",
        report.trusted_checkpoints, report.checkpoints, report.signed_size
    );
    for finding in report.findings.iter().take(50) {
        println!("toolledger verify: BAD {finding}");
    }
}

/// A progress bar with events/s on a terminal, a log line every few seconds otherwise.
struct ProgressReport {
    bar: Option<indicatif::ProgressBar>,
    logged: Instant,
    started: Instant,
    first_seq: Option<u64>,
    partition: Partition,
}

impl ProgressReport {
    fn new(bar: bool, partition: Partition) -> Self {
        let bar = (bar && std::io::stdout().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} exporting [{bar:40}] {human_pos}/{human_len} entries {per_sec} eta {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar
        });
        Self {
            bar,
            logged: Instant::now(),
            started: Instant::now(),
            first_seq: None,
            partition,
        }
    }

    fn update(&mut self, progress: Progress) {
        let first = *self.first_seq.get_or_insert(progress.read_seq);
        if let Some(bar) = &self.bar {
            bar.set_length(progress.ledger_last.max(progress.read_seq));
            bar.set_position(progress.read_seq);
            bar.set_message(format!(
                "{:.1} MB written, exported through {}",
                progress.bytes as f64 / 1e6,
                progress.exported_seq
            ));
        } else if self.logged.elapsed() >= LOG_EVERY {
            self.logged = Instant::now();
            let rate = progress.read_seq.saturating_sub(first) as f64
                / self.started.elapsed().as_secs_f64().max(1e-9);
            tracing::info!(
                partition = %self.partition,
                read = progress.read_seq,
                exported = progress.exported_seq,
                ledger_last = progress.ledger_last,
                mb = format!("{:.1}", progress.bytes as f64 / 1e6),
                rate = format!("{rate:.0}/s"),
                "exporting"
            );
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
