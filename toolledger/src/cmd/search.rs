//! `toolledger search`: invocations by tenant, session, tool, namespace, status, error class,
//! permission behavior, actor, native id and time range. Exit 1 when nothing matched.

use toolledger_core::config::Config;
use toolledger_query::SearchFilter;

use super::show::{cell, exit_for, nothing_matched, print_table, reader};

/// Flags of `toolledger search`.
#[derive(clap::Args)]
pub struct Args {
    /// Tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Session id.
    #[arg(long)]
    pub session: Option<String>,
    /// Tool id.
    #[arg(long)]
    pub tool: Option<String>,
    /// The tool's namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// State (succeeded, failed, denied, timed_out, …).
    #[arg(long)]
    pub status: Option<String>,
    /// Error class (timeout, permission_denied, …).
    #[arg(long)]
    pub error_class: Option<String>,
    /// A permission decision with this behavior (allow, ask, deny, passthrough).
    #[arg(long)]
    pub behavior: Option<String>,
    /// Actor ref.
    #[arg(long)]
    pub actor: Option<String>,
    /// A native id (native_call_id, MCP jsonrpc_request_id, tool_call_id, task id …).
    #[arg(long)]
    pub native_id: Option<String>,
    /// Only invocations carrying this native id key.
    #[arg(long)]
    pub native_key: Option<String>,
    /// First event at or after this RFC 3339 time.
    #[arg(long)]
    pub from: Option<String>,
    /// First event at or before this RFC 3339 time.
    #[arg(long)]
    pub to: Option<String>,
    /// Page size (1..=1000, default 100).
    #[arg(long)]
    pub limit: Option<u64>,
    /// The next page, as printed by the previous one.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Print JSON (the API's body).
    #[arg(long)]
    pub json: bool,
}

/// Searches and prints a page.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    if let Some(tenant) = &args.tenant {
        toolledger_query::params::tenant(tenant).map_err(exit_for)?;
    }
    let filter = SearchFilter {
        tenant: args.tenant,
        session_id: args.session,
        tool_id: args.tool,
        namespace: args.namespace,
        status: args.status,
        error_class: args.error_class,
        behavior: args.behavior,
        actor: args.actor,
        native_id: args.native_id,
        native_key: args.native_key,
        range: toolledger_query::params::time_range(args.from.as_deref(), args.to.as_deref())
            .map_err(exit_for)?,
        limit: toolledger_query::params::limit(args.limit).map_err(exit_for)?,
        cursor: args.cursor,
    };
    let page = reader(&config, filter.tenant.as_deref())?
        .read(move |conn| toolledger_query::search(conn, &filter))
        .await
        .map_err(exit_for)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&page)?);
    } else {
        print_table(
            &[
                "TENANT",
                "INVOCATION",
                "SESSION",
                "TOOL",
                "STATE",
                "ERROR",
                "FIRST EVENT",
            ],
            &page
                .items
                .iter()
                .map(|i| {
                    vec![
                        i.tenant.clone(),
                        i.invocation_id.clone(),
                        cell(i.session_id.as_deref()),
                        cell(i.tool_id.as_deref()),
                        i.state.clone(),
                        cell(i.error_class.as_deref()),
                        cell(i.first_time.as_deref()),
                    ]
                })
                .collect::<Vec<_>>(),
        );
        if let Some(next) = &page.next_cursor {
            println!("more: --cursor {next}");
        }
    }
    if page.items.is_empty() {
        return Err(nothing_matched("invocation"));
    }
    Ok(())
}
