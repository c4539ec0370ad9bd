//! `toolledger show <INVOCATION_ID>`: one invocation reconstructed from the projection (no server
//! needed), as a readable report or `--json` (the API's body). Also the helpers the other query
//! commands share: exit codes, opening the projection, tables.
//!
//! Exit codes of show, session, search and stats: 0 found; 1 not found / nothing matched;
//! 2 usage (a bad id, time, page size …); 3 the projection cannot be read.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use toolledger_core::config::Config;
use toolledger_query::reconstruct::Reconstruction;
use toolledger_query::{Error, Reader, Readers};
use toolledger_wire::partition::Partitions;

/// An outcome of a query command that maps to a meaningful exit code.
#[derive(Debug)]
pub struct QueryExit {
    /// 1 not found, 2 usage, 3 projection unavailable.
    pub code: u8,
    /// What to tell the operator (empty: nothing more to say).
    pub message: String,
}

impl fmt::Display for QueryExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for QueryExit {}

/// Maps a query error to its exit code.
pub fn exit_for(error: Error) -> anyhow::Error {
    let code = match &error {
        Error::NotFound { .. } => 1,
        Error::InvalidParameter { .. } => 2,
        _ => 3,
    };
    QueryExit {
        code,
        message: error.to_string(),
    }
    .into()
}

/// "Nothing matched": exit 1 after the (empty) output.
pub fn nothing_matched(what: &str) -> anyhow::Error {
    QueryExit {
        code: 1,
        message: format!("no {what} matched"),
    }
    .into()
}

/// The readers of every partition's projections under the configured data directory.
fn readers(config: &Config) -> anyhow::Result<Readers> {
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    Ok(Readers::new(config.data_dir.clone(), partitions))
}

/// The reader of the projection `tenant`'s rows are in: `<data_dir>/projections`, or in a
/// partitioned ledger its partition's (`projections-p<K>`), which needs the tenant.
pub fn reader(config: &Config, tenant: Option<&str>) -> anyhow::Result<Arc<Reader>> {
    let readers = readers(config)?;
    readers.scoped(tenant).cloned().map_err(|_| {
        QueryExit {
            code: 2,
            message: format!(
                "ledger.partitions = {}: each partition has its own projection; name the tenant \
                 with --tenant (docs/scaling.md)",
                readers.partitions().count()
            ),
        }
        .into()
    })
}

/// Prints rows under headers, columns padded to their widest cell.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// An optional text cell.
pub fn cell(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

/// Flags of `toolledger show`.
#[derive(clap::Args)]
pub struct Args {
    /// The invocation id.
    pub invocation_id: String,
    /// Its tenant (needed only when the id exists in several tenants).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Payloads: `none`, `check` (fetch and check each against its commitment) or `content`
    /// (also print it).
    #[arg(long, default_value = "check", value_parser = ["none", "check", "content"])]
    pub payloads: String,
    /// Print the reconstruction as JSON (the API's body).
    #[arg(long)]
    pub json: bool,
}

/// Reconstructs and prints one invocation.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let reconstruction = reconstruct(&config, args.tenant, args.invocation_id, &args.payloads).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reconstruction)?);
    } else {
        print!("{}", render(&reconstruction));
    }
    Ok(())
}

/// Reads one invocation and checks its payloads (`payloads`: none, check, content).
pub async fn reconstruct(
    config: &Config,
    tenant: Option<String>,
    invocation_id: String,
    payloads: &str,
) -> anyhow::Result<Reconstruction> {
    if let Some(tenant) = &tenant {
        toolledger_query::params::tenant(tenant).map_err(exit_for)?;
    }
    let mut reconstruction = reader(config, tenant.as_deref())?
        .read(move |conn| toolledger_query::reconstruct(conn, tenant.as_deref(), &invocation_id))
        .await
        .map_err(exit_for)?;
    reconstruction = readers(config)?
        .with_erasures(reconstruction)
        .await
        .map_err(exit_for)?;
    if payloads != "none" && !reconstruction.payloads.is_empty() {
        match toolledger_ledger::BlobStore::open(&config.blob_store_url()) {
            Ok(blobs) => {
                toolledger_query::payloads::check(&blobs, &mut reconstruction, payloads == "content").await
            }
            Err(error) => tracing::warn!(%error, "cannot open the blob store; payloads not checked"),
        }
    }
    Ok(reconstruction)
}

fn short(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > 100 {
        format!("{}…", text.chars().take(100).collect::<String>())
    } else {
        text
    }
}

fn field(value: &Value, key: &str) -> String {
    match value.get(key) {
        None | Some(Value::Null) => "-".to_owned(),
        Some(v) => short(v),
    }
}

/// The readable report of one invocation.
pub fn render(r: &Reconstruction) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "invocation {}  tenant {}  session {}  tool {}",
        r.invocation_id,
        r.tenant,
        cell(r.session_id.as_deref()),
        cell(r.tool_id.as_deref())
    );
    let _ = writeln!(
        out,
        "state {}{}{}{}",
        r.state,
        if r.terminal { " (terminal)" } else { "" },
        r.attempt.map(|a| format!("  attempt {a}")).unwrap_or_default(),
        r.retry_of
            .as_deref()
            .map(|p| format!("  retry of {p}"))
            .unwrap_or_default()
    );
    if !r.retried_by.is_empty() {
        let _ = writeln!(out, "retried by {}", r.retried_by.join(", "));
    }
    let _ = writeln!(
        out,
        "created {}  started {}  ended {}  actor {}",
        cell(r.created_at.as_deref()),
        cell(r.started_at.as_deref()),
        cell(r.ended_at.as_deref()),
        cell(r.actor_ref.as_deref())
    );
    let _ = writeln!(out, "\ntimeline ({} events)", r.timeline.len());
    for e in &r.timeline {
        let _ = writeln!(
            out,
            "  {:>7}  {:<24}  {:<36}  {:<34}  {}…",
            e.seq,
            cell(e.time.as_deref()),
            cell(e.class.as_deref()),
            e.transition
                .as_ref()
                .map(|t| format!("{} → {}", t.from, t.to))
                .unwrap_or_default(),
            e.leaf_hash.get(..16).unwrap_or(&e.leaf_hash)
        );
    }
    let _ = writeln!(out, "\ninputs");
    for (name, value) in [
        ("model_input", &r.inputs.model_input),
        ("observable_input", &r.inputs.observable_input),
        ("permission_input", &r.inputs.permission_input),
        ("call_input", &r.inputs.call_input),
    ] {
        let _ = writeln!(out, "  {name:<17} {}", short(value));
    }
    for d in &r.inputs.diffs {
        for c in &d.changes {
            let _ = writeln!(out, "  {} → {}: {}", d.from, d.to, change(c));
        }
    }
    if !r.mutations.is_empty() {
        let _ = writeln!(out, "\nmutations");
        for m in &r.mutations {
            let _ = writeln!(
                out,
                "  seq {}  {} {}  {} → {}  fields {}",
                m.seq,
                m.source,
                m.source_id,
                cell(m.from_input.as_deref()),
                cell(m.to_input.as_deref()),
                short(&m.changed_fields)
            );
            for c in m.diff.iter().flatten() {
                let _ = writeln!(out, "      {}", change(c));
            }
        }
    }
    if !r.permission_requests.is_empty() || !r.permission_decisions.is_empty() {
        let _ = writeln!(out, "\npermissions");
        for p in &r.permission_requests {
            let _ = writeln!(
                out,
                "  requested {}  seq {}  mode {}  reason {}",
                field(p, "decision_id"),
                field(p, "seq"),
                field(p, "mode"),
                field(p, "reason")
            );
        }
        for d in &r.permission_decisions {
            let _ = writeln!(
                out,
                "  decided {}  seq {}  {}  by {}  reason {} {}  rules {}",
                field(d, "decision_id"),
                field(d, "seq"),
                field(d, "behavior"),
                field(d, "source"),
                field(d, "reason_type"),
                field(d, "reason_message"),
                field(d, "rule_refs")
            );
        }
    }
    if !r.hooks.is_empty() {
        let _ = writeln!(out, "\nhooks");
        for h in &r.hooks {
            let _ = writeln!(
                out,
                "  {}  {} {}  stop {}  updated_input {}  updated_output {}",
                field(h, "hook_id"),
                field(h, "phase"),
                field(h, "hook_event"),
                field(h, "stop"),
                field(h, "updated_input"),
                field(h, "updated_output")
            );
        }
    }
    if !r.progress.is_empty() {
        let _ = writeln!(out, "\nprogress");
        for p in &r.progress {
            let _ = writeln!(
                out,
                "  seq {}  {}  {}  {}%",
                field(p, "seq"),
                field(p, "status"),
                field(p, "message"),
                field(p, "percent")
            );
        }
    }
    if !r.results.is_empty() {
        let _ = writeln!(out, "\nresults");
        for p in &r.results {
            let _ = writeln!(
                out,
                "  {}  {} {}  is_error {}  {} bytes  redaction {}  {}",
                field(p, "result_id"),
                field(p, "kind"),
                field(p, "status"),
                field(p, "is_error"),
                field(p, "content_bytes"),
                field(p, "redaction_state"),
                field(p, "summary")
            );
        }
    }
    if let Some(e) = &r.error {
        let _ = writeln!(
            out,
            "\nerror {} {}: {}\n  retry: {} ({}){}",
            cell(e.class.as_deref()),
            cell(e.code.as_deref()),
            cell(e.message.as_deref()),
            e.retry.guidance,
            if e.retry.retryable {
                "retryable"
            } else {
                "not retryable as is"
            },
            if e.retry.retry_after.is_null() {
                String::new()
            } else {
                format!(" after {}", short(&e.retry.retry_after))
            }
        );
    }
    if !r.native_ids.is_empty() {
        let _ = writeln!(out, "\nnative ids");
        for n in &r.native_ids {
            let _ = writeln!(
                out,
                "  {} {} = {}",
                field(n, "source"),
                field(n, "key"),
                field(n, "value")
            );
        }
    }
    if !r.anomalies.is_empty() {
        let _ = writeln!(out, "\nanomalies");
        for a in &r.anomalies {
            let _ = writeln!(out, "  seq {}  {}", field(a, "seq"), field(a, "kind"));
        }
    }
    if !r.payloads.is_empty() {
        let _ = writeln!(out, "\npayloads");
        for p in &r.payloads {
            let _ = writeln!(
                out,
                "  seq {}  {}  {} bytes {}  {}",
                p.seq, p.path, p.size, p.content_type, p.status
            );
        }
    }
    out
}

fn change(c: &toolledger_query::reconstruct::Change) -> String {
    let path = if c.path.is_empty() { "/" } else { &c.path };
    match (&c.before, &c.after) {
        (Some(b), Some(a)) => format!("{path} {} {} → {}", c.op, short(b), short(a)),
        (None, Some(a)) => format!("{path} {} {}", c.op, short(a)),
        (Some(b), None) => format!("{path} {} (was {})", c.op, short(b)),
        (None, None) => format!("{path} {}", c.op),
    }
}
