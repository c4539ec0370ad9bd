//! `toolledger quarantine list|show|redrive`: what ingest refused, and a way back in.

use std::path::PathBuf;

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_ledger::quarantine;

use super::init::{connect, nats_url};

/// Flags of `toolledger quarantine`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, global = true, value_name = "URL")]
    nats_url: Option<String>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Quarantined messages, newest first.
    List {
        /// Only this tenant's (`_unroutable` for messages without a usable tenant).
        #[arg(long)]
        tenant: Option<String>,
        /// Only this reason (`schema_violation`, `duplicate_conflict`, `poison_message`, …).
        #[arg(long)]
        reason: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One quarantined message: reason, detail, headers and body.
    Show {
        /// Its ATL_QUARANTINE sequence (from `list`).
        seq: u64,
    },
    /// Publish a quarantined original, or a corrected body, back to the subject it arrived on.
    Redrive {
        /// Its ATL_QUARANTINE sequence (from `list`).
        seq: u64,
        /// A corrected body to publish instead of the original.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

/// Runs the chosen action.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-quarantine").await?);
    match args.action {
        Action::List {
            tenant,
            reason,
            limit,
            json,
        } => {
            let records = quarantine::list(&js, tenant.as_deref(), reason.as_deref(), limit).await?;
            for record in &records {
                if json {
                    println!("{}", serde_json::to_string(record)?);
                } else {
                    let detail: String = record.detail.chars().take(80).collect();
                    println!(
                        "{:>8}  {}  {:<40}  {:>7} B  {}",
                        record.seq,
                        record.time.format("%Y-%m-%dT%H:%M:%SZ"),
                        record.subject,
                        record.size,
                        detail
                    );
                }
            }
            if !json {
                eprintln!("{} quarantined message(s) shown", records.len());
            }
        }
        Action::Show { seq } => {
            let record = quarantine::show(&js, seq)
                .await?
                .with_context(|| format!("no quarantined message {seq}"))?;
            let mut value = serde_json::to_value(&record)?;
            value["body"] = match std::str::from_utf8(&record.payload) {
                Ok(text) => serde_json::Value::String(text.to_owned()),
                Err(_) => serde_json::json!({ "hex": hex_of(&record.payload) }),
            };
            println!("{}", serde_json::to_string_pretty(&value)?);
        }
        Action::Redrive { seq, file } => {
            let body = file
                .map(|path| std::fs::read(&path).with_context(|| format!("reading {}", path.display())))
                .transpose()?;
            let inbound = quarantine::redrive(&js, seq, body.map(Into::into)).await?;
            println!("toolledger quarantine: redrove {seq} as ATL_INBOUND seq {inbound}");
        }
    }
    Ok(())
}

fn hex_of(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}
