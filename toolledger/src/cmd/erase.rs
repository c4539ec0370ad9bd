//! `toolledger erase`: erase offloaded content by invocation, session, blob or tenant, or run the
//! retention job once. The fact of the call, its entry and its commitment stay; `verify` passes.
//!
//! ```text
//! plan (read the tenant's entries and earlier erasure records; ask the blob store whether the blobs
//!       a record names are really gone) ─▶ legal hold? refuse unless --force
//!   ─▶ delete blobs ─▶ publish toolledger.erasure.completed ─▶ wait until ingest appended it
//! ```
//!
//! Exit codes: 0 erased (or nothing left to erase), 1 refused or failed, 2 usage.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use toolledger_core::config::Config;
use toolledger_ledger::BlobStore;
use toolledger_ledger::erasure::{self as erase, ErasureOutcome, ErasureRequest, ErasureTarget};
use toolledger_wire::Tenant;
use toolledger_wire::partition::Partitions;
use toolledger_wire::streams::LEDGER;

use super::init::{connect, nats_url};

/// How long to wait for ingest to append the record before saying it is still on its way.
const RECORD_WAIT: Duration = Duration::from_secs(30);

/// Flags of `toolledger erase`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["invocation", "session", "blob", "all", "retention"])))]
pub struct Args {
    /// The tenant whose content is erased (not with --retention).
    #[arg(long, value_name = "TENANT", required_unless_present = "retention")]
    pub tenant: Option<String>,
    /// Erase the payloads of this invocation.
    #[arg(long, value_name = "ID")]
    pub invocation: Option<String>,
    /// Erase the payloads of this session.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Erase these blobs (repeatable).
    #[arg(long, value_name = "BLOB_ID")]
    pub blob: Vec<String>,
    /// Erase every payload of the tenant.
    #[arg(long)]
    pub all: bool,
    /// Run the retention job once for every tenant (`[retention]` in the configuration).
    #[arg(long, conflicts_with_all = ["tenant", "force"])]
    pub retention: bool,
    /// Why (recorded in the ledger). Required except with --retention.
    #[arg(long, value_name = "TEXT", required_unless_present = "retention")]
    pub reason: Option<String>,
    /// Under whose authority: ticket, legal basis, approver (recorded).
    #[arg(long, value_name = "TEXT", default_value = "unspecified")]
    pub authority: String,
    /// Who asks (recorded). Default: $USER.
    #[arg(long, value_name = "NAME")]
    pub actor: Option<String>,
    /// Erase inside the tenant's legal hold too (an admin's decision; --reason says why).
    #[arg(long)]
    pub force: bool,
    /// Show what would be erased, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The clock: the instant legal holds and maximum ages are measured from (RFC 3339; default now).
    #[arg(long, value_name = "TIME")]
    pub now: Option<DateTime<Utc>>,
    /// The blob store; default `payloads.blob_store`.
    #[arg(long, value_name = "URL")]
    pub blobs: Option<String>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// Erases and reports.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-erase").await?);
    let blobs = BlobStore::open_configured(&config, args.blobs.as_deref())?;
    let now = args.now.unwrap_or_else(Utc::now);
    // A tenant's entries are in its partition; the count must be the ledger's own to find them.
    // (With one partition configured a tenant found nowhere is reported as nothing matching.)
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    if partitions.count() > 1 {
        toolledger_wire::streams::check_partition_count(&js, partitions)
            .await
            .context("ledger.partitions")?;
    }

    if args.retention {
        let runs = erase::run_retention(&js, partitions, &blobs, &config.retention, now).await?;
        for run in &runs {
            report(&args, run.tenant.as_str(), &run.outcome);
            if let Some(id) = &run.outcome.erasure_id {
                wait_for_record(&js, id).await?;
            }
        }
        if runs.is_empty() {
            println!("toolledger erase: no tenant has a maximum age; nothing to do");
        }
        return Ok(());
    }

    let tenant = Tenant::parse(args.tenant.as_deref().unwrap_or_default())?;
    let target = if let Some(id) = &args.invocation {
        ErasureTarget::Invocation(id.clone())
    } else if let Some(id) = &args.session {
        ErasureTarget::Session(id.clone())
    } else if !args.blob.is_empty() {
        ErasureTarget::Blobs(args.blob.clone())
    } else {
        ErasureTarget::Tenant
    };
    let request = ErasureRequest {
        tenant: tenant.clone(),
        target,
        reason: args.reason.clone().unwrap_or_default(),
        authority: args.authority.clone(),
        requested_by: args
            .actor
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "unknown".to_owned()),
        force: args.force,
    };
    let plan = erase::plan(&js, partitions, &blobs, &request).await?;
    if !plan.still_stored.is_empty() {
        println!(
            "toolledger erase: {} blobs an earlier erasure record names are still in the blob store; erasing them again",
            plan.still_stored.len()
        );
    }
    let retention = config.retention.for_tenant(tenant.as_str());
    if args.dry_run {
        let held = plan.held(retention, now).len();
        println!(
            "toolledger erase: would erase {} blobs of {} entries ({} inside the legal hold; {} already erased)",
            plan.payloads.len(),
            plan.entries_matched,
            held,
            plan.already_erased.len()
        );
        return Ok(());
    }
    if plan.entries_matched == 0 && plan.already_erased.is_empty() {
        anyhow::bail!("nothing of tenant {tenant} matches: no entry with payloads for that target");
    }
    let outcome = erase::execute(&js, &blobs, &request, &plan, retention, now).await?;
    report(&args, tenant.as_str(), &outcome);
    if let Some(id) = &outcome.erasure_id {
        wait_for_record(&js, id).await?;
    }
    Ok(())
}

fn report(args: &Args, tenant: &str, outcome: &ErasureOutcome) {
    if args.json {
        let value = serde_json::json!({
            "tenant": tenant,
            "erasure_id": outcome.erasure_id,
            "deleted": outcome.deleted,
            "record": outcome.record,
        });
        println!("{value}");
        return;
    }
    match &outcome.erasure_id {
        Some(id) => println!(
            "toolledger erase: tenant {tenant}: erased {} blobs; recorded as {id}",
            outcome.deleted.len()
        ),
        None => println!("toolledger erase: tenant {tenant}: nothing left to erase (already erased)"),
    }
}

/// Waits until ingest appended the erasure record, so a following `verify` or query sees it.
async fn wait_for_record(js: &async_nats::jetstream::Context, erasure_id: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + RECORD_WAIT;
    loop {
        let records = erase::erasure_records(js, LEDGER)
            .await
            .context("reading erasure records")?;
        if let Some(record) = records.iter().find(|r| r.erasure_id == erasure_id) {
            println!("toolledger erase: recorded at ledger seq {}", record.seq);
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            println!(
                "toolledger erase: the record {erasure_id} is published; ingest has not appended it yet (is it running?)"
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
