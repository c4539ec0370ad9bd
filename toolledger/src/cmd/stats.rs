//! `toolledger stats`: per tool and time bucket, calls, outcome rates and latency p50/p95/p99.
//! Exit 1 when no invocation is in range.

use toolledger_core::config::Config;
use toolledger_query::StatsFilter;

use super::show::{exit_for, nothing_matched, print_table, reader};

/// Flags of `toolledger stats`.
#[derive(clap::Args)]
pub struct Args {
    /// Tenant (all tenants when absent).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only this tool.
    #[arg(long)]
    pub tool: Option<String>,
    /// Invocations whose first event is at or after this RFC 3339 time.
    #[arg(long)]
    pub from: Option<String>,
    /// … and at or before this one.
    #[arg(long)]
    pub to: Option<String>,
    /// Bucket width: 1m, 15m, 1h, 1d … (1m..=31d).
    #[arg(long, default_value = "1h")]
    pub bucket: String,
    /// Print JSON (the API's body).
    #[arg(long)]
    pub json: bool,
}

/// Computes and prints the stats.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    if let Some(tenant) = &args.tenant {
        toolledger_query::params::tenant(tenant).map_err(exit_for)?;
    }
    let (bucket, bucket_ns) = toolledger_query::params::bucket(Some(&args.bucket)).map_err(exit_for)?;
    let filter = StatsFilter {
        tenant: args.tenant,
        tool_id: args.tool,
        range: toolledger_query::params::time_range(args.from.as_deref(), args.to.as_deref())
            .map_err(exit_for)?,
        bucket,
        bucket_ns,
    };
    let stats = reader(&config, filter.tenant.as_deref())?
        .read(move |conn| toolledger_query::stats(conn, &filter))
        .await
        .map_err(exit_for)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        let pct = |r: f64| format!("{:.1}%", r * 100.0);
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
        print_table(
            &[
                "TOOL", "BUCKET", "CALLS", "OK", "FAIL", "DENY", "TIMEOUT", "P50 MS", "P95 MS", "P99 MS",
            ],
            &stats
                .rows
                .iter()
                .map(|r| {
                    vec![
                        r.tool_id.clone(),
                        r.bucket_start.clone(),
                        r.calls.to_string(),
                        pct(r.success_rate),
                        pct(r.failure_rate),
                        pct(r.denial_rate),
                        pct(r.timeout_rate),
                        ms(r.latency_p50_ms),
                        ms(r.latency_p95_ms),
                        ms(r.latency_p99_ms),
                    ]
                })
                .collect::<Vec<_>>(),
        );
    }
    if stats.rows.is_empty() {
        return Err(nothing_matched("invocation"));
    }
    Ok(())
}
