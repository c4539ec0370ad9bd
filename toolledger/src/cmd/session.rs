//! `toolledger session [SESSION_ID]`: without an id, the sessions (newest last); with one, its
//! invocations and its event timeline. Exit codes as in `show`.

use toolledger_core::config::Config;
use toolledger_query::SessionFilter;

use super::show::{cell, exit_for, nothing_matched, print_table, reader};

/// Flags of `toolledger session`.
#[derive(clap::Args)]
pub struct Args {
    /// The session to show; omit to list sessions.
    pub session_id: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Sessions active at or after this RFC 3339 time (listing only).
    #[arg(long)]
    pub from: Option<String>,
    /// Sessions active at or before this RFC 3339 time (listing only).
    #[arg(long)]
    pub to: Option<String>,
    /// Page size (1..=1000): sessions listed, or events of the session shown.
    #[arg(long)]
    pub limit: Option<u64>,
    /// The next page, as printed by the previous one.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Print JSON (the API's body).
    #[arg(long)]
    pub json: bool,
}

/// Lists sessions or shows one.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    if let Some(tenant) = &args.tenant {
        toolledger_query::params::tenant(tenant).map_err(exit_for)?;
    }
    let limit = toolledger_query::params::limit(args.limit).map_err(exit_for)?;
    let reader = reader(&config, args.tenant.as_deref())?;
    match args.session_id {
        Some(session_id) => {
            let tenant = args.tenant.clone();
            let cursor = args.cursor.clone();
            let timeline = reader
                .read(move |conn| {
                    toolledger_query::session_timeline(
                        conn,
                        tenant.as_deref(),
                        &session_id,
                        limit,
                        cursor.as_deref(),
                    )
                })
                .await
                .map_err(exit_for)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&timeline)?);
                return Ok(());
            }
            let s = &timeline.session;
            println!(
                "session {}  tenant {}  {} events  {} invocations  {} … {}",
                s.session_id,
                s.tenant,
                s.event_count,
                s.invocation_count,
                cell(s.first_time.as_deref()),
                cell(s.last_time.as_deref())
            );
            println!();
            print_table(
                &["INVOCATION", "TOOL", "STATE", "ERROR", "EVENTS"],
                &timeline
                    .invocations
                    .iter()
                    .map(|i| {
                        vec![
                            i.invocation_id.clone(),
                            cell(i.tool_id.as_deref()),
                            i.state.clone(),
                            cell(i.error_class.as_deref()),
                            i.event_count.to_string(),
                        ]
                    })
                    .collect::<Vec<_>>(),
            );
            println!();
            print_table(
                &["SEQ", "TIME", "CLASS", "TRANSITION"],
                &timeline
                    .events
                    .items
                    .iter()
                    .map(|e| {
                        vec![
                            e.seq.to_string(),
                            cell(e.time.as_deref()),
                            cell(e.class.as_deref()),
                            e.transition
                                .as_ref()
                                .map(|t| format!("{} → {}", t.from, t.to))
                                .unwrap_or_default(),
                        ]
                    })
                    .collect::<Vec<_>>(),
            );
            if let Some(next) = &timeline.events.next_cursor {
                println!("more events: --cursor {next}");
            }
            Ok(())
        }
        None => {
            let filter = SessionFilter {
                tenant: args.tenant.clone(),
                range: toolledger_query::params::time_range(args.from.as_deref(), args.to.as_deref())
                    .map_err(exit_for)?,
                limit,
                cursor: args.cursor.clone(),
                ..SessionFilter::default()
            };
            let page = reader
                .read(move |conn| toolledger_query::sessions(conn, &filter))
                .await
                .map_err(exit_for)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&page)?);
            } else {
                print_table(
                    &["TENANT", "SESSION", "FIRST", "LAST", "EVENTS", "INVOCATIONS"],
                    &page
                        .items
                        .iter()
                        .map(|s| {
                            vec![
                                s.tenant.clone(),
                                s.session_id.clone(),
                                cell(s.first_time.as_deref()),
                                cell(s.last_time.as_deref()),
                                s.event_count.to_string(),
                                s.invocation_count.to_string(),
                            ]
                        })
                        .collect::<Vec<_>>(),
                );
                if let Some(next) = &page.next_cursor {
                    println!("more: --cursor {next}");
                }
            }
            if page.items.is_empty() {
                return Err(nothing_matched("session"));
            }
            Ok(())
        }
    }
}
