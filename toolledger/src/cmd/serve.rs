//! `toolledger serve`: the `/v1` query API over this machine's projections, with `/healthz` and
//! `/metrics` on the same port.
//!
//! ```text
//! [api] tokens (sha256) ─▶ bind [api] listen (or --listen) ─▶ serve until Ctrl-C / SIGTERM
//! no tokens: refuse, unless --insecure-local on a loopback address (tokenless admin)
//! nats url (flag or config): access reads published, and the ledger (verifier key, tiles) wired in
//!   for replay, checkpoints, proofs and bundles
//! ```

use std::future::Future;
use std::net::SocketAddr;

use toolledger_core::config::Config;
use toolledger_core::telemetry::Telemetry;
use toolledger_query::{ApiOptions, Tokens};
use toolledger_wire::partition::Partitions;

/// Flags of `toolledger serve`.
#[derive(clap::Args)]
pub struct Args {
    /// Listen here instead of `api.listen`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// With no tokens configured, serve every tenant without a token — on a loopback address only.
    #[arg(long)]
    pub insecure_local: bool,
    /// NATS server URL for recording reads as `toolledger.access.read`; overrides `nats.url`.
    /// Without either, reads are not recorded (and `serve` says so).
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// The API options from the configuration.
pub fn options(
    config: &Config,
    listen: Option<SocketAddr>,
    insecure_local: bool,
) -> anyhow::Result<ApiOptions> {
    Ok(ApiOptions {
        listen: listen.unwrap_or(config.api.listen),
        tokens: Tokens::from_config(&config.api.tokens)?,
        insecure_local,
        blob_store_url: Some(config.blob_store_url()),
        access_log: None,
        ledger: None,
        partitions: Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?,
    })
}

/// The ledger as the API's replay, checkpoint, proof and bundle routes read it: every partition's
/// log (stream, origin, tiles) and the directory's over them, with the configured verifier keys,
/// over `js`.
pub fn ledger_access(
    config: &Config,
    js: async_nats::jetstream::Context,
) -> anyhow::Result<toolledger_query::LedgerAccess> {
    let verifiers = super::verify::load_verifiers(config, None)?;
    let source = |(stream, origin, tiles): (String, String, Option<toolledger_merkle::TileStore>)| {
        toolledger_verify::ProveSource::new(
            stream,
            toolledger_wire::streams::CHECKPOINTS.to_owned(),
            verifiers.clone(),
            origin,
            tiles,
        )
    };
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    let logs = partitions
        .all()
        .map(|partition| super::prove::partition_log(config, partition, None).map(source))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let directory = if partitions.count() > 1 {
        Some(source(super::prove::directory_log(config, None)?))
    } else {
        None
    };
    Ok(toolledger_query::LedgerAccess {
        js,
        logs,
        directory,
        witness_policy: super::verify::WitnessPolicyArgs::default().policy(Some(config))?,
    })
}

/// Serves until `shutdown` completes.
pub async fn run(
    config: Config,
    args: Args,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut options = options(&config, args.listen, args.insecure_local)?;
    let mut publisher = None;
    match args.nats_url.as_deref().or(config.nats.url.as_deref()) {
        Some(url) => {
            let client = super::init::connect(url, "toolledger-serve").await?;
            let (log, reads) = toolledger_query::AccessLog::channel();
            options.access_log = Some(log);
            let js = async_nats::jetstream::new(client);
            // Routing tenants to partitions needs the ledger's own count: a lower one would send
            // them to the wrong projections.
            super::verify::check_count(&js, toolledger_wire::streams::CHECKPOINTS, &config).await?;
            match ledger_access(&config, js.clone()) {
                Ok(ledger) => options.ledger = Some(ledger),
                Err(error) => tracing::warn!(%error, "replay, checkpoints, proofs and bundles unavailable"),
            }
            publisher = Some(tokio::spawn(toolledger_query::access::publish(js, reads)));
        }
        None => tracing::warn!("no nats url: reads are not recorded as toolledger.access.read"),
    }
    let telemetry = Telemetry::new();
    let (addr, task) = toolledger_query::serve(&config.data_dir, options, telemetry, shutdown).await?;
    println!("toolledger serve: api at http://{addr}/v1 (health /healthz, metrics /metrics)");
    task.await?;
    if let Some(publisher) = publisher {
        // The router is gone, so the queue closes once the last records are published.
        publisher.await?;
    }
    println!("toolledger serve: stopped");
    Ok(())
}
