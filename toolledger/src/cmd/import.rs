//! `toolledger import --format F FILE…`: native records from the seed systems mapped to Agent Tool
//! events (import/) and published to ATL_INBOUND as `emit` publishes.
//!
//! ```text
//! read files (JSON value, array or NDJSON) ─▶ map each record (validated events | rejection)
//!   ─▶ --dry-run: events as NDJSON on stdout, the report on stderr
//!   ─▶ else: prepare (subject, Nats-Msg-Id) ─▶ publish, wait for every ack
//!   ─▶ per-record report (stdout; --report FILE as JSON)
//! ```
//!
//! Exit codes: 0 when every record mapped (and every event was acked), 1 when any record was rejected
//! or any event failed to publish (the rest are still published), 2 for usage errors.

use std::io::IsTerminal;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;
use toolledger_core::config::Config;
use toolledger_import::{Format, Importer, Options, RecordOutcome};
use toolledger_wire::produce::{self, Outgoing};
use toolledger_wire::{Mode, Tenant};

use super::init::{connect, nats_url};

/// Events published per `publish_all` call: bounds the messages held before their acks and lets the
/// progress bar move on large files.
const PUBLISH_CHUNK: usize = 1024;

/// The source systems.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ImportFormat {
    /// N-ACT tool signatures and `:invoke` request/response exchanges.
    Nact,
    /// Open Tool Calling definitions, tool requests and tool responses.
    Otc,
    /// Tool Protocol schemas (`_tool`, `_activity`, `_output`) and calls.
    Toolproto,
    /// MCP `tools/list` and `tools/call` JSON-RPC logs.
    Mcp,
    /// Function-calling logs (`tool_calls`, `tool` messages by `tool_call_id`).
    Openai,
}

impl From<ImportFormat> for Format {
    fn from(format: ImportFormat) -> Format {
        match format {
            ImportFormat::Nact => Format::Nact,
            ImportFormat::Otc => Format::Otc,
            ImportFormat::Toolproto => Format::ToolProto,
            ImportFormat::Mcp => Format::Mcp,
            ImportFormat::Openai => Format::OpenAi,
        }
    }
}

/// Flags of `toolledger import`.
#[derive(clap::Args)]
pub struct Args {
    /// The source system of every FILE.
    #[arg(long, value_enum)]
    pub format: ImportFormat,
    /// Files of native records: one JSON value, a JSON array, or NDJSON (auto-detected).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Tenant of every event.
    #[arg(long, value_name = "TENANT")]
    pub tenant: String,
    /// Session for records that name none (an MCP session or an OTC run_id wins); default
    /// `import-<file stem>`.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// RFC 3339 time from which times are synthesized, 1 ms apart, for records without timestamps.
    /// The fixed default keeps a re-import identical (and so deduplicated).
    #[arg(long, value_name = "TIME", default_value = toolledger_import::DEFAULT_START)]
    pub start: String,
    /// Print the mapped events as NDJSON on stdout (the report goes to stderr); publish nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also write the per-record report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). Needed unless --dry-run.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// One record in the report.
#[derive(Serialize)]
struct RecordReport {
    location: String,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    events: Vec<EventRef>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    publish_failures: Vec<String>,
}

#[derive(Serialize)]
struct EventRef {
    id: String,
    #[serde(rename = "type")]
    class: String,
    subject: String,
}

#[derive(Serialize)]
struct Summary {
    records: usize,
    mapped: usize,
    rejected: usize,
    events: usize,
    published: usize,
    duplicates: usize,
    failed: usize,
    dry_run: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    format: &'static str,
    tenant: &'a str,
    summary: Summary,
    records: Vec<RecordReport>,
}

/// Maps every file, publishes (unless --dry-run) and prints the report.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let format: Format = args.format.into();
    let start_ms = toolledger_import::parse_start(&args.start)?;
    let tenant = Tenant::parse(&args.tenant)?;
    let url = if args.dry_run {
        None
    } else {
        Some(nats_url(&config, args.nats_url.as_deref())?)
    };
    let bar = progress_bar();

    // Mapping validates every event against the schemas: CPU work off the async workers.
    let files = args.files.clone();
    let (session, tenant_name) = (args.session.clone(), args.tenant.clone());
    let map_bar = bar.clone();
    let outcomes = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<RecordOutcome>> {
        let mut all = Vec::new();
        for path in &files {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let options = Options {
                tenant: tenant_name.clone(),
                session: Some(session.clone().unwrap_or_else(|| default_session(path))),
                start_ms,
            };
            let mut importer = Importer::new(format, &options)?;
            let outcomes = importer.map_file(&path.display().to_string(), &bytes);
            if let Some(bar) = &map_bar {
                bar.inc_length(outcomes.len() as u64);
            }
            all.extend(outcomes);
        }
        Ok(all)
    })
    .await??;

    let mut records: Vec<RecordReport> = outcomes.iter().map(record_report).collect();
    let events = outcomes.iter().map(|o| o.events.len()).sum();
    let mut summary = Summary {
        records: outcomes.len(),
        mapped: outcomes.iter().filter(|o| o.is_ok()).count(),
        rejected: outcomes.iter().filter(|o| !o.is_ok()).count(),
        events,
        published: 0,
        duplicates: 0,
        failed: 0,
        dry_run: args.dry_run,
    };

    if let Some(url) = url {
        let js = async_nats::jetstream::new(connect(&url, "toolledger-import").await?);
        let mut batch: Vec<(String, Outgoing)> = Vec::new();
        for (index, outcome) in outcomes.iter().enumerate() {
            for event in &outcome.events {
                match produce::prepare(event.clone(), Some(&tenant), Mode::Binary) {
                    Ok(message) => batch.push((index.to_string(), message)),
                    Err(error) => records[index].publish_failures.push(error.to_string()),
                }
            }
            if let Some(bar) = &bar {
                bar.inc(1);
            }
            if batch.len() >= PUBLISH_CHUNK || index + 1 == outcomes.len() {
                let report = produce::publish_all(&js, std::mem::take(&mut batch)).await;
                summary.published += report.published;
                summary.duplicates += report.duplicates;
                for (at, reason) in report.failed {
                    if let Some(record) = at.parse::<usize>().ok().and_then(|i| records.get_mut(i)) {
                        record.publish_failures.push(reason);
                    }
                }
            }
        }
        summary.failed = records.iter().map(|r| r.publish_failures.len()).sum();
    } else {
        let mut stdout = std::io::stdout().lock();
        for event in outcomes.iter().flat_map(|o| &o.events) {
            writeln!(stdout, "{event}")?;
        }
        if let Some(bar) = &bar {
            bar.inc(outcomes.len() as u64);
        }
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }

    let text = human_report(&summary, &records);
    if args.dry_run {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    let (rejected, failed) = (summary.rejected, summary.failed);
    if let Some(path) = &args.report {
        let report = Report {
            format: format.as_str(),
            tenant: &args.tenant,
            summary,
            records,
        };
        let json = serde_json::to_vec_pretty(&report)?;
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))
        })
        .await??;
    }
    anyhow::ensure!(
        rejected == 0 && failed == 0,
        "{rejected} record(s) rejected, {failed} event(s) not published"
    );
    Ok(())
}

/// `import-<file stem>`, with characters outside `[A-Za-z0-9._-]` replaced by `_`.
fn default_session(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("import-{clean}")
}

fn record_report(outcome: &RecordOutcome) -> RecordReport {
    let text = |event: &Value, key: &str| event[key].as_str().unwrap_or("").to_owned();
    RecordReport {
        location: outcome.location.clone(),
        status: if outcome.is_ok() { "ok" } else { "rejected" },
        reason: outcome.rejected.clone(),
        events: outcome
            .events
            .iter()
            .map(|e| EventRef {
                id: text(e, "id"),
                class: text(e, "type"),
                subject: text(e, "subject"),
            })
            .collect(),
        notes: outcome.notes.clone(),
        publish_failures: Vec::new(),
    }
}

fn human_report(summary: &Summary, records: &[RecordReport]) -> String {
    let mut out = String::new();
    for record in records {
        match &record.reason {
            Some(reason) => out.push_str(&format!("  rejected {}: {reason}\n", record.location)),
            None => {
                let classes: Vec<&str> = record.events.iter().map(|e| e.class.as_str()).collect();
                out.push_str(&format!(
                    "  ok {}: {} event(s){}{}\n",
                    record.location,
                    classes.len(),
                    if classes.is_empty() {
                        String::new()
                    } else {
                        format!(" [{}]", classes.join(", "))
                    },
                    if record.notes.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", record.notes.join("; "))
                    }
                ));
            }
        }
        for failure in &record.publish_failures {
            out.push_str(&format!("  not published {}: {failure}\n", record.location));
        }
    }
    out.push_str(&format!(
        "toolledger import: {} records, {} mapped, {} rejected; {} events{}\n",
        summary.records,
        summary.mapped,
        summary.rejected,
        summary.events,
        if summary.dry_run {
            " (dry run, nothing published)".to_owned()
        } else {
            format!(
                ", published {}, duplicates {}, failed {}",
                summary.published, summary.duplicates, summary.failed
            )
        }
    ));
    out
}

/// A bar over records on a terminal; nothing otherwise (the report follows anyway).
fn progress_bar() -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} importing [{bar:40}] {human_pos}/{human_len} records {per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    })
}
