//! `toolledger emit FILE…`: publish events to ATL_INBOUND as a producer would.
//!
//! ```text
//! read files (JSON value, array or NDJSON) ─▶ prepare each (subject, encoding, Nats-Msg-Id)
//!   ─▶ publish, wait for every ack ─▶ summary: published, duplicates, failed with reasons
//! ```
//!
//! Exits non-zero when any event failed.

use std::path::PathBuf;

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_wire::produce::{self, Outgoing};
use toolledger_wire::{Mode, Tenant};

use super::init::{connect, nats_url};

/// How CloudEvents go on the wire.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WireMode {
    /// Attributes in `ce-*` headers (percent-encoded), data as the body.
    Binary,
    /// The whole event as `application/cloudevents+json`.
    Structured,
}

/// Flags of `toolledger emit`.
#[derive(clap::Args)]
pub struct Args {
    /// Files of events: one JSON value, a JSON array, or NDJSON (one event per line). Each event is a
    /// structured CloudEvent (JSON with `specversion`) or an agenttool-event envelope.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// How CloudEvents are published; agenttool-event envelopes are always sent as their plain JSON
    /// body, so their trace_refs and other fields reach the ledger whole.
    #[arg(long, value_enum, default_value = "binary")]
    pub mode: WireMode,
    /// Tenant for agenttool-event envelopes (they name none) and for CloudEvents without a `tenant`
    /// extension; a CloudEvent naming another tenant is refused.
    #[arg(long, value_name = "TENANT")]
    pub tenant: Option<String>,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// Publishes every event in `args.files` and prints the summary.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let tenant = args.tenant.as_deref().map(Tenant::parse).transpose()?;
    let mode = match args.mode {
        WireMode::Binary => Mode::Binary,
        WireMode::Structured => Mode::Structured,
    };
    let files = args.files.clone();
    let read = tokio::task::spawn_blocking(move || {
        files
            .iter()
            .map(|path| {
                let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                Ok(produce::read_events(&path.display().to_string(), &bytes))
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })
    .await??;

    let mut failed = Vec::new();
    let mut outgoing: Vec<(String, Outgoing)> = Vec::new();
    for event in read.into_iter().flatten() {
        match event
            .value
            .and_then(|value| produce::prepare(value, tenant.as_ref(), mode))
        {
            Ok(message) => outgoing.push((event.location, message)),
            Err(error) => failed.push((event.location, describe(&error))),
        }
    }

    let js = async_nats::jetstream::new(connect(&url, "toolledger-emit").await?);
    let report = produce::publish_all(&js, outgoing).await;
    failed.extend(report.failed);
    println!(
        "toolledger emit: published {}, duplicates {}, failed {}",
        report.published,
        report.duplicates,
        failed.len()
    );
    for (location, reason) in &failed {
        println!("  failed {location}: {reason}");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{} event(s) failed", failed.len())
    }
}

fn describe(error: &toolledger_wire::Error) -> String {
    match error.quarantine_reason() {
        Some(reason) => format!("{reason}: {error}"),
        None => error.to_string(),
    }
}
