//! `toolledger verify`: recompute the ledger's tree and check it against the signed checkpoints, the
//! tiles and the live stream configurations; exit non-zero naming the first bad position.
//!
//! ```text
//! connect ─▶ verifier keys (--key, else <data_dir>/keys/checkpoint.pub)
//!   ─▶ toolledger_verify::verify_ledger(--stream, --checkpoints, tiles, blobs, --from-checkpoint)
//!      progress on stderr
//!   ─▶ summary on stdout (or --json) ─▶ clean? --save-checkpoint writes the newest trusted note
//!   ─▶ findings? exit 1 naming the first bad position
//! --monitor: toolledger_verify::monitor ─▶ a line per newly signed checkpoint; exit 1 at the first
//!   finding, 0 on SIGTERM / Ctrl-C
//! ```

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_merkle::{TileStore, Verifiers, WitnessPolicy};
use toolledger_verify::{MonitorEvent, Placement, Progress, VerifyOptions, verify_ledger};
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::{CHECKPOINTS, CHECKPOINTS_SUBJECT};

use super::init::{connect, nats_url};

/// Findings printed in full before the rest are only counted.
const MAX_PRINTED: usize = 50;
/// How often progress is logged when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Flags of `toolledger verify`.
#[derive(clap::Args)]
pub struct Args {
    /// The ledger stream to verify (a copy, say) as the partition --partition names (default p0):
    /// against that partition's checkpoints, origin and tiles. Default: every partition of the
    /// ledger (`ledger.partitions`; `ATL_LEDGER` alone for one), each against its own.
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// Verify one partition only (0 is `ATL_LEDGER`; `docs/scaling.md`).
    #[arg(long, value_name = "K")]
    pub partition: Option<u16>,
    /// The stream of signed checkpoints to verify it against.
    #[arg(long, value_name = "NAME", default_value = CHECKPOINTS)]
    pub checkpoints: String,
    /// Verifier key file: one C2SP verifier key per line (keep retired keys after a rotation).
    /// Default: the `.pub` beside `ledger.key_file` (`<data_dir>/keys/checkpoint.pub`).
    #[arg(long, value_name = "PUBKEY_FILE")]
    pub key: Option<PathBuf>,
    /// The tiles to check: a directory, `file:///dir` or `s3://bucket/prefix`. Default `ledger.tiles`
    /// (`<data_dir>/tiles`) when it exists.
    #[arg(long, value_name = "LOCATION", conflicts_with = "no_tiles")]
    pub tiles: Option<String>,
    /// Do not check tiles (an altered entry is then located between two checkpoints).
    #[arg(long)]
    pub no_tiles: bool,
    /// The blob store whose payloads are checked against their commitments. Default
    /// `payloads.blob_store` (`<data_dir>/blobs`).
    #[arg(long, value_name = "URL", conflicts_with = "no_payloads")]
    pub blobs: Option<String>,
    /// Do not fetch payload blobs (commitments stay unchecked).
    #[arg(long)]
    pub no_payloads: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// Verify a Parquet archive (a directory, `file:///dir` or `s3://bucket/prefix`) from its events
    /// and checkpoints alone, without NATS.
    #[arg(long, value_name = "PREFIX")]
    pub parquet: Option<String>,
    /// Continue from a trusted checkpoint instead of seq 1: FILE holds its signed C2SP note (e.g.
    /// what `--save-checkpoint` wrote after a clean run). It must verify with the keys; only the
    /// entries after it are read, and its tree must be the ledger's (from the tiles, else re-hashed).
    #[arg(long, value_name = "FILE", conflicts_with = "parquet")]
    pub from_checkpoint: Option<PathBuf>,
    /// After a clean run, write the newest trusted checkpoint's signed note to FILE, for the next
    /// `--from-checkpoint`.
    #[arg(long, value_name = "FILE", conflicts_with = "parquet")]
    pub save_checkpoint: Option<PathBuf>,
    /// After the pass, follow the checkpoint stream: every newly signed checkpoint must be trusted
    /// and the entries up to it must make its root. Prints a line per checkpoint; exits non-zero at
    /// the first finding (an altered entry, a forked or untrusted checkpoint), 0 on SIGTERM/Ctrl-C.
    /// Payload commitments are left to a full run.
    #[arg(long, conflicts_with_all = ["parquet", "json"])]
    pub monitor: bool,
    #[command(flatten)]
    pub witnesses: WitnessPolicyArgs,
}

/// A witness policy (`docs/witnesses.md`): flags, else the configuration's `[witness_policy]`.
#[derive(clap::Args, Debug, Default)]
pub struct WitnessPolicyArgs {
    /// A witness's verifier key (`<name>+<key id>+<key>`; repeat the flag): the checkpoint must be
    /// cosigned by at least --witness-quorum of them, or it is a finding. Default: the
    /// configuration's `[witness_policy]`, when there is one.
    #[arg(long = "witness", value_name = "VKEY")]
    pub witnesses: Vec<String>,
    /// How many of the --witness keys must have cosigned (default: a majority).
    #[arg(long, value_name = "K", requires = "witnesses")]
    pub witness_quorum: Option<usize>,
}

impl WitnessPolicyArgs {
    /// The policy from the flags, else from `config`'s `[witness_policy]`; `None` without either.
    pub fn policy(&self, config: Option<&Config>) -> anyhow::Result<Option<WitnessPolicy>> {
        if !self.witnesses.is_empty() {
            return Ok(Some(
                WitnessPolicy::new(&self.witnesses, self.witness_quorum).context("--witness")?,
            ));
        }
        config
            .and_then(|c| c.witness_policy.as_ref())
            .map(|p| WitnessPolicy::new(&p.witnesses, p.quorum).context("[witness_policy]"))
            .transpose()
    }
}

/// The trusted verifier keys from `--key` or the configured default.
pub fn load_verifiers(config: &Config, key: Option<&std::path::Path>) -> anyhow::Result<Verifiers> {
    let path = key.map_or_else(|| config.checkpoint_verifier_file(), std::path::Path::to_path_buf);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading verifier key file {} (see --key)", path.display()))?;
    let verifiers =
        Verifiers::parse(&text).with_context(|| format!("parsing verifier keys in {}", path.display()))?;
    anyhow::ensure!(
        !verifiers.keys().is_empty(),
        "no verifier key in {}",
        path.display()
    );
    Ok(verifiers)
}

/// The tile store from `--tiles`, else the configured one when it exists; `None` with `--no-tiles`.
pub fn tile_store(config: &Config, flag: Option<&str>, none: bool) -> anyhow::Result<Option<TileStore>> {
    if none {
        return Ok(None);
    }
    match flag {
        Some(location) => tiles_at(location, true),
        None => tiles_at(&config.tiles_location(), false),
    }
}

/// The tile store at `location`; one that was not asked for by name (`explicit`) and is a missing
/// directory is `None`, with a warning.
pub(crate) fn tiles_at(location: &str, explicit: bool) -> anyhow::Result<Option<TileStore>> {
    if !explicit && !location.contains("://") && !std::path::Path::new(location).is_dir() {
        tracing::warn!(%location, "no tiles there; checking the ledger and checkpoints only");
        return Ok(None);
    }
    Ok(Some(toolledger_ledger::open_tiles(location)?))
}

/// Verifies and reports; an error (non-zero exit) when anything is wrong.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let verifiers = load_verifiers(&config, args.key.as_deref())?;
    if args.parquet.is_some() {
        // A Parquet archive holds the checkpoints but not ATL_COSIGNATURES.
        anyhow::ensure!(
            args.witnesses.witnesses.is_empty(),
            "--witness cannot be checked with --parquet: the archive holds no cosignatures"
        );
        if config.witness_policy.is_some() {
            eprintln!(
                "toolledger verify: [witness_policy] is not checked with --parquet: the archive holds no cosignatures"
            );
        }
    }
    if let Some(prefix) = &args.parquet {
        return super::export::verify_parquet(&config, prefix, &verifiers, args.json).await;
    }
    let targets = targets(&config, &args)?;
    anyhow::ensure!(
        targets.len() == 1
            || !(args.monitor || args.from_checkpoint.is_some() || args.save_checkpoint.is_some()),
        "--monitor, --from-checkpoint and --save-checkpoint follow one partition's checkpoints: add --partition K"
    );
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-verify").await?);
    check_count(&js, &args.checkpoints, &config).await?;
    let blobs = if args.no_payloads {
        None
    } else {
        Some(toolledger_ledger::BlobStore::open_configured(
            &config,
            args.blobs.as_deref(),
        )?)
    };
    let from_checkpoint = match &args.from_checkpoint {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the checkpoint to continue from, {}", path.display()))?,
        ),
        None => None,
    };
    let witness_policy = args.witnesses.policy(Some(&config))?;
    let mut reports = Vec::new();
    for target in &targets {
        let options = VerifyOptions {
            origin: Some(target.origin.clone()),
            tiles: match (&target.tiles, args.no_tiles) {
                (_, true) => None,
                (Some(location), false) => tiles_at(location, args.tiles.is_some())?,
                (None, false) => tile_store(&config, None, false)?,
            },
            blobs: blobs.clone(),
            from_checkpoint: from_checkpoint.clone(),
            witness_policy: witness_policy.clone(),
            checkpoint_subject: target.checkpoint_subject.clone(),
            placement: target.placement.clone(),
            ..VerifyOptions::default()
        };
        if args.monitor {
            if options.witness_policy.is_some() {
                eprintln!(
                    "toolledger verify: --monitor checks the witness policy once, when it stops, not per checkpoint"
                );
            }
            return monitor(&js, &target.stream, &args, &verifiers, &options).await;
        }
        if let Some(partition) = target.partition.filter(|_| targets.len() > 1 && !args.json) {
            println!("toolledger verify: partition {partition} ({})", target.stream);
        }
        let mut progress = ProgressReport::new();
        let started = Instant::now();
        let report = verify_ledger(
            &js,
            &target.stream,
            &args.checkpoints,
            &verifiers,
            &options,
            &mut |p| progress.update(p),
        )
        .await?;
        progress.finish();
        if !args.json {
            print_report(&report, started.elapsed().as_secs_f64());
        }
        reports.push((target.partition, report));
    }
    // Every partition of several: the directory over them too.
    let whole = config.ledger.partitions > 1 && args.stream.is_none() && args.partition.is_none();
    let directory = if whole {
        let checked: Vec<u64> = reports.iter().map(|(_, report)| report.signed_size).collect();
        Some(verify_directory(&config, &args, &js, &verifiers, witness_policy, &checked).await?)
    } else {
        None
    };
    if args.json {
        match (reports.as_slice(), &directory) {
            ([(_, report)], None) => println!("{}", serde_json::to_string_pretty(report)?),
            _ => {
                let partitions: Vec<_> = reports
                    .iter()
                    .map(|(partition, report)| {
                        serde_json::json!({ "partition": partition.map(|p| p.index()), "report": report })
                    })
                    .collect();
                let mut out = serde_json::json!({ "partitions": partitions });
                if let Some(directory) = &directory {
                    out["directory"] = serde_json::to_value(directory)?;
                }
                println!("{}", serde_json::to_string_pretty(&out)?);
            }
        }
    }
    let findings: usize = reports
        .iter()
        .map(|(_, report)| report.findings.len())
        .sum::<usize>()
        + directory.as_ref().map_or(0, |report| report.findings.len());
    let first_bad = reports
        .iter()
        .find_map(|(partition, report)| {
            report
                .first_bad()
                .map(|first| match partition.filter(|_| reports.len() > 1) {
                    Some(partition) => format!("{partition}: {first}"),
                    None => first.to_string(),
                })
        })
        .or_else(|| {
            let directory = directory.as_ref()?;
            directory.first_bad().map(|first| format!("directory: {first}"))
        });
    match first_bad {
        None => {
            if let (Some(path), [(_, report)]) = (&args.save_checkpoint, reports.as_slice())
                && let Some(note) = &report.newest_checkpoint
            {
                std::fs::write(path, note)
                    .with_context(|| format!("writing the newest checkpoint to {}", path.display()))?;
            }
            if !args.json {
                println!("toolledger verify: ok");
            }
            Ok(())
        }
        Some(first) => {
            anyhow::bail!("verification failed ({findings} findings); first bad position: {first}")
        }
    }
}

/// The directory of a partitioned ledger (`docs/scaling.md`): its tree and checkpoints like a
/// partition's (its entries are not ledger entries), then each entry against the partition
/// checkpoints it names.
async fn verify_directory(
    config: &Config,
    args: &Args,
    js: &async_nats::jetstream::Context,
    verifiers: &toolledger_merkle::Verifiers,
    witness_policy: Option<WitnessPolicy>,
    checked_sizes: &[u64],
) -> anyhow::Result<toolledger_verify::Report> {
    use toolledger_wire::directory;
    if js.get_stream(directory::STREAM).await.is_err() {
        anyhow::bail!(
            "{} cannot be read: a ledger of {} partitions has a directory over them (run \
             `toolledger init` to make it)",
            directory::STREAM,
            config.ledger.partitions
        );
    }
    if !args.json {
        println!("toolledger verify: directory ({})", directory::STREAM);
    }
    let base_tiles = args.tiles.clone().unwrap_or_else(|| config.tiles_location());
    let options = VerifyOptions {
        origin: Some(directory::origin(&config.ledger.origin)),
        tiles: if args.no_tiles {
            None
        } else {
            tiles_at(&directory::tiles(&base_tiles), args.tiles.is_some())?
        },
        checkpoint_subject: Some(directory::CHECKPOINT_SUBJECT.to_owned()),
        check_entries: false,
        witness_policy,
        ..VerifyOptions::default()
    };
    let mut progress = ProgressReport::new();
    let started = Instant::now();
    let mut report = verify_ledger(
        js,
        directory::STREAM,
        &args.checkpoints,
        verifiers,
        &options,
        &mut |p| progress.update(p),
    )
    .await?;
    progress.finish();
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    let check = toolledger_verify::directory::check_directory(
        js,
        &args.checkpoints,
        partitions,
        &config.ledger.origin,
        verifiers,
        checked_sizes,
    )
    .await?;
    report.findings.extend(check.findings);
    if check.beyond_passes > 0 {
        report.notes.push(format!(
            "{} directory reference(s) name partition checkpoints signed after the partitions' passes \
             read theirs: signed and as the directory says, but held against the ledger only by the \
             next run",
            check.beyond_passes
        ));
    }
    if !args.json {
        print_report(&report, started.elapsed().as_secs_f64());
    }
    Ok(report)
}

/// One ledger stream to verify and where its checkpoints, origin and tiles are.
struct Target {
    /// The partition it is, when it is one (not a `--stream` copy).
    partition: Option<Partition>,
    stream: String,
    checkpoint_subject: Option<String>,
    origin: String,
    /// `--tiles`, or the partition's under it (or under the configured ones); `None`: the
    /// configured ones.
    tiles: Option<String>,
    /// Which partition of several it is: its entries' tenants and, for p0, the recorded rule.
    placement: Option<Placement>,
}

/// What `verify` checks: `--stream` (as `--partition K`, default p0), `--partition K`, else every
/// partition of the ledger.
fn targets(config: &Config, args: &Args) -> anyhow::Result<Vec<Target>> {
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    let chosen = match args.partition {
        None if args.stream.is_some() => vec![Partition::ZERO],
        named => super::chosen_partitions(config, named.as_slice())?,
    };
    let base_tiles = args.tiles.clone().unwrap_or_else(|| config.tiles_location());
    Ok(chosen
        .into_iter()
        .map(|partition| Target {
            partition: args.stream.is_none().then_some(partition),
            stream: args.stream.clone().unwrap_or_else(|| partition.stream()),
            // One partition's checkpoints are the whole stream, as they always were.
            checkpoint_subject: (partitions.count() > 1).then(|| partition.checkpoint_subject()),
            origin: partition.origin(&config.ledger.origin),
            tiles: (args.tiles.is_some() || partition != Partition::ZERO)
                .then(|| partition.tiles(&base_tiles)),
            // A partition of several (not a `--stream` copy, which may be anything's).
            placement: (args.stream.is_none() && partitions.count() > 1).then(|| Placement {
                partitions,
                partition,
                origin: config.ledger.origin.clone(),
            }),
        })
        .collect())
}

/// Refuses a `ledger.partitions` below the ledger's own count: checkpoints signed for a partition
/// at or past it (`atl.checkpoints.<K>`) mean partitions this run would not look at.
pub(crate) async fn check_count(
    js: &async_nats::jetstream::Context,
    stream: &str,
    config: &Config,
) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    let count = config.ledger.partitions;
    // A stream that cannot be read is the pass's finding, not this check's.
    let Ok(checkpoints) = js.get_stream(stream).await else {
        return Ok(());
    };
    let mut subjects = checkpoints
        .info_with_subjects(format!("{}.*", CHECKPOINTS_SUBJECT))
        .await
        .with_context(|| format!("listing {stream}'s subjects"))?;
    while let Some(subject) = subjects.next().await {
        let (subject, _) = subject.with_context(|| format!("listing {stream}'s subjects"))?;
        let index = subject.rsplit_once('.').and_then(|(_, k)| k.parse::<u16>().ok());
        if let Some(index) = index.filter(|k| *k >= count) {
            anyhow::bail!(
                "{stream} holds checkpoints of partition p{index}, but ledger.partitions = {count}: \
                 set the ledger's own count so that every partition is verified"
            );
        }
    }
    Ok(())
}

/// The summary of one ledger's report on stdout.
fn print_report(report: &toolledger_verify::Report, secs: f64) {
    println!(
        "toolledger verify: {} entries of {} in {secs:.1}s ({:.0} entries/s); root {}",
        report.entries - report.from_size,
        report.ledger_stream,
        (report.entries - report.from_size) as f64 / secs.max(1e-9),
        report.root
    );
    if report.from_size > 0 {
        println!(
            "toolledger verify: continued from the trusted checkpoint of size {}; the ledger holds {}",
            report.from_size, report.entries
        );
    }
    println!(
        "toolledger verify: {} of {} checkpoints in {} trusted, newest signs {} entries; tiles {}",
        report.trusted_checkpoints,
        report.checkpoints,
        report.checkpoint_stream,
        report.signed_size,
        if report.tiles_checked {
            "checked"
        } else {
            "not checked"
        }
    );
    println!(
        "toolledger verify: {} payload commitments checked ({} erased)",
        report.payloads_checked, report.payloads_erased
    );
    for note in &report.notes {
        println!("toolledger verify: note {note}");
    }
    if let Some(witnessed) = report.witnessed.as_ref().filter(|w| w.verdict.met()) {
        println!(
            "toolledger verify: witnessed: the checkpoint of size {} is cosigned by {} ({} of {}, quorum {})",
            witnessed.checkpoint.size,
            witnessed.verdict.names(),
            witnessed.verdict.cosigned_by.len(),
            witnessed.verdict.of,
            witnessed.verdict.quorum
        );
    }
    for finding in report.findings.iter().take(MAX_PRINTED) {
        println!("toolledger verify: BAD {finding}");
    }
    if report.findings.len() > MAX_PRINTED {
        println!(
            "toolledger verify: … and {} more findings",
            report.findings.len() - MAX_PRINTED
        );
    }
}

/// `--monitor`: the pass, then a line per newly signed checkpoint until a finding or a signal.
async fn monitor(
    js: &async_nats::jetstream::Context,
    stream: &str,
    args: &Args,
    verifiers: &Verifiers,
    options: &VerifyOptions,
) -> anyhow::Result<()> {
    let report = toolledger_verify::monitor(
        js,
        stream,
        &args.checkpoints,
        verifiers,
        options,
        &mut |event| match event {
            MonitorEvent::CaughtUp { entries, size } => {
                println!("toolledger verify: caught up: {entries} entries, newest trusted checkpoint signs {size}");
            }
            MonitorEvent::Checkpoint {
                checkpoint_seq,
                size,
                root,
                entries,
            } => println!(
                "toolledger verify: checkpoint seq {checkpoint_seq}: size {size} root {root} consistent ({entries} new entries checked)"
            ),
        },
        super::shutdown_signal(),
    )
    .await?;
    for finding in report.findings.iter().take(MAX_PRINTED) {
        println!("toolledger verify: BAD {finding}");
    }
    match report.first_bad() {
        None => {
            if let (Some(path), Some(note)) = (&args.save_checkpoint, &report.newest_checkpoint) {
                std::fs::write(path, note)
                    .with_context(|| format!("writing the newest checkpoint to {}", path.display()))?;
            }
            println!(
                "toolledger verify: stopped; ok through {} entries",
                report.entries
            );
            Ok(())
        }
        Some(first) => anyhow::bail!("monitor stopped at the first finding: {first}"),
    }
}

/// A progress bar with rate and ETA on a terminal, a log line every few seconds otherwise.
struct ProgressReport {
    bar: Option<indicatif::ProgressBar>,
    logged: Instant,
    started: Instant,
}

impl ProgressReport {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} verifying [{bar:40}] {human_pos}/{human_len} entries {per_sec} eta {eta}",
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
        }
    }

    fn update(&mut self, progress: Progress) {
        if let Some(bar) = &self.bar {
            bar.set_length(progress.total);
            bar.set_position(progress.done);
        } else if self.logged.elapsed() >= LOG_EVERY {
            self.logged = Instant::now();
            let rate = progress.done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
            let eta = progress.total.saturating_sub(progress.done) as f64 / rate.max(1e-9);
            tracing::info!(
                done = progress.done,
                total = progress.total,
                rate = format!("{rate:.0}/s"),
                eta = format!("{eta:.0}s"),
                "verifying"
            );
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
