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
}

/// Exports until `shutdown` (or until caught up).
pub async fn run(
    config: Config,
    args: Args,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let client = connect(&url, "toolledger-export").await?;
    let prefix = args.prefix.clone().unwrap_or_else(|| config.export_prefix());
    let archive = Archive::open(&prefix, &[])?;
    let reporter = Arc::new(Mutex::new(ProgressReport::new()));
    let progress = {
        let reporter = reporter.clone();
        Arc::new(move |p: Progress| {
            if let Ok(mut reporter) = reporter.lock() {
                reporter.update(p);
            }
        })
    };
    let options = Options {
        rows_per_file: args.rows_per_file.unwrap_or(config.export.rows_per_file).max(1),
        max_delay: Duration::from_millis(args.max_delay_ms.unwrap_or(config.export.max_delay_ms)),
        row_group_rows: config.export.row_group_rows.max(1),
        until_caught_up: args.until_caught_up,
        progress: Some(progress),
        ..Options::new(archive.clone())
    };
    println!(
        "toolledger export: ATL_LEDGER at {} into {}",
        super::init::redacted(&url),
        archive.url()
    );
    let started = Instant::now();
    let result = toolledger_export::run(client, options, shutdown).await;
    if let Ok(reporter) = reporter.lock() {
        reporter.finish();
    }
    let summary = result?;
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    println!(
        "toolledger export: exported through seq {} (checkpoints through {}); {} entries, {} ranges, {} files, {:.1} MB in {secs:.1}s ({:.0} entries/s)",
        summary.position,
        summary.checkpoint_position,
        summary.entries,
        summary.ranges,
        summary.files,
        summary.bytes as f64 / 1e6,
        summary.entries as f64 / secs
    );
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
    let started = Instant::now();
    let report = verify_archive(&archive, verifiers, Some(&config.ledger.origin)).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "toolledger verify: {} entries in {} files of {} in {:.1}s; root {}",
            report.entries,
            report.files,
            report.archive,
            started.elapsed().as_secs_f64(),
            report.root
        );
        println!(
            "toolledger verify: {} of {} checkpoints trusted, the tree matches them through size {}",
            report.trusted_checkpoints, report.checkpoints, report.signed_size
        );
        for finding in report.findings.iter().take(50) {
            println!("toolledger verify: BAD {finding}");
        }
    }
    match report.first_bad() {
        None => {
            if !json {
                println!("toolledger verify: ok");
            }
            Ok(())
        }
        Some(first) => anyhow::bail!(
            "verification failed ({} findings); first bad position: {first}",
            report.findings.len()
        ),
    }
}

/// A progress bar with events/s on a terminal, a log line every few seconds otherwise.
struct ProgressReport {
    bar: Option<indicatif::ProgressBar>,
    logged: Instant,
    started: Instant,
    first_seq: Option<u64>,
}

impl ProgressReport {
    fn new() -> Self {
        let bar = std::io::stdout().is_terminal().then(|| {
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
