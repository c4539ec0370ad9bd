//! `toolledger ingest`: the only writer of the ledger, until Ctrl-C or SIGTERM.

use std::future::Future;

use toolledger_core::config::Config;
use toolledger_core::telemetry::{self, Telemetry};
use toolledger_ingest::metrics::IngestMetrics;
use toolledger_ingest::session::{self, IngestSettings};

use super::init::{connect, nats_url};

/// Flags of `toolledger ingest`.
#[derive(clap::Args)]
pub struct Args {
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// Inbound messages fetched and appended together (one atomic batch of the ledger at most 1,000;
    /// a larger batch is appended as several).
    #[arg(long, default_value_t = toolledger_ingest::append::MAX_ATOMIC_BATCH)]
    pub batch_size: usize,
    /// How long a delivered message may stay unacked before redelivery; after a crash the next
    /// ingest waits this long so redeliveries keep their order.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub ack_wait_ms: u64,
    /// How long the single-writer lease lasts unless renewed; a crashed ingest's successor waits
    /// at most this long.
    #[arg(long, default_value_t = 15_000, value_name = "MS")]
    pub lease_ttl_ms: u64,
}

/// Runs ingest with its `/metrics` and `/healthz` until `shutdown` completes.
pub async fn run(
    config: Config,
    args: Args,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    // Fail fast on a wrong URL; the service makes its own connections.
    connect(&url, "toolledger-ingest").await?;
    let connector = session::Connector {
        url,
        name: "toolledger-ingest".to_owned(),
    };
    let telemetry = Telemetry::new();
    let metrics = telemetry.register(IngestMetrics::register);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = telemetry::serve(config.telemetry.metrics_listen, telemetry.clone(), async {
        let _ = stop_rx.await;
    })
    .await?;
    println!("toolledger ingest: metrics at http://{addr}/metrics, health at http://{addr}/healthz");
    let mut settings = IngestSettings::from_config(&config)?;
    settings.batch_size = args.batch_size.max(1);
    settings.ack_wait = std::time::Duration::from_millis(args.ack_wait_ms.max(100));
    settings.lease_ttl = std::time::Duration::from_millis(args.lease_ttl_ms.max(300));
    let result = session::run(connector, settings, metrics, telemetry.health().clone(), shutdown).await;
    let _ = stop_tx.send(());
    let _ = server.await;
    println!("toolledger ingest: stopped");
    Ok(result?)
}
