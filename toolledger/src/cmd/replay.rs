//! `toolledger replay --tenant T --session S`: a session's events in ledger order at their original
//! pace (scaled by --speed, or --speed 0 for as fast as possible), as NDJSON on stdout, and with
//! --publish re-published under `atl.replay.<tenant>.>` for a debugging environment.
//!
//! ```text
//! projection (seqs, event times) ─▶ toolledger_query::replay ─▶ NDJSON lines ─▶ [atl.replay.<tenant>.<class>]
//! ```
//!
//! Exit codes: 0 replayed, 1 unknown session or a read failed, 2 usage (a --subject outside
//! `atl.replay.<tenant>.>` is refused before anything is read).

use std::io::Write;

use futures::StreamExt;
use toolledger_core::config::Config;
use toolledger_query::Reader;
use toolledger_query::replay::{self, Pace};
use toolledger_wire::partition::Partitions;

use super::init::{connect, nats_url};

/// Flags of `toolledger replay`.
#[derive(clap::Args)]
pub struct Args {
    /// The session's tenant.
    #[arg(long, value_name = "TENANT")]
    pub tenant: String,
    /// The session to replay.
    #[arg(long, value_name = "ID")]
    pub session: String,
    /// Divide the original gaps between events by this; 0 replays as fast as possible.
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
    pub speed: f64,
    /// Also re-publish each event (core NATS) to `<subject>.<class>`.
    #[arg(long)]
    pub publish: bool,
    /// The subject prefix for --publish: `atl.replay.<tenant>` (default) or deeper under it.
    #[arg(long, value_name = "PREFIX", requires = "publish")]
    pub subject: Option<String>,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// Replays the session.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let tenant = toolledger_wire::Tenant::parse(&args.tenant)?;
    let pace = Pace::from_speed(args.speed)?;
    let prefix = if args.publish {
        Some(replay::replay_prefix(tenant.as_str(), args.subject.as_deref())?)
    } else {
        None
    };
    // The session's tenant's partition: its projection plans, its stream holds the entries.
    let partition = Partitions::new(config.ledger.partitions)
        .map_err(anyhow::Error::msg)?
        .of(tenant.as_str());
    let reader = Reader::of(config.data_dir.clone(), partition);
    let (tenant_name, session) = (tenant.to_string(), args.session.clone());
    let planned = reader
        .read(move |conn| replay::plan(conn, &tenant_name, &session))
        .await?;
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let client = connect(&url, "toolledger-replay").await?;
    let js = async_nats::jetstream::new(client.clone());
    let total = planned.len();
    let mut events = std::pin::pin!(replay::replay(js, partition.stream(), planned, pace));
    while let Some(event) = events.next().await {
        let event = event?;
        {
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{}", serde_json::to_string(&event)?)?;
            stdout.flush()?;
        }
        if let Some(prefix) = &prefix {
            replay::republish(&client, prefix, &event).await?;
        }
    }
    client.flush().await?;
    eprintln!("toolledger replay: {total} events of session {}", args.session);
    Ok(())
}
