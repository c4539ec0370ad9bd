//! `toolledger project` and `toolledger rebuild`: the SQLite projections of ATL_LEDGER.
//!
//! ```text
//! project: connect ─▶ serve /metrics, /healthz ─▶ follow the ledger into <data_dir>/projections/
//!          (current generation, from its stored position) until Ctrl-C / SIGTERM
//! rebuild: connect ─▶ new generation from seq 1 up to the ledger's last entry ─▶ switch `current`
//! ```

use std::time::Duration;

use toolledger_core::config::Config;
use toolledger_core::telemetry::{self, Telemetry};
use toolledger_projector::Options;

use super::init::{connect, nats_url};

/// Flags of `toolledger project`.
#[derive(clap::Args)]
pub struct Args {
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// Most ledger entries applied per SQLite transaction.
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub batch_size: usize,
    /// Seconds between progress lines while entries are applied.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub progress_every: u64,
}

fn options(config: &Config, args: &Args) -> Options {
    Options {
        batch_size: args.batch_size.max(1),
        progress_every: Duration::from_secs(args.progress_every.max(1)),
        ..Options::new(config.data_dir.clone())
    }
}

/// Follows the ledger until `shutdown`.
pub async fn run(
    config: Config,
    args: Args,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let client = connect(&url, "toolledger-project").await?;
    let telemetry = Telemetry::new();
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let (metrics_addr, metrics_task) =
        telemetry::serve(config.telemetry.metrics_listen, telemetry.clone(), async {
            let _ = metrics_stopped.await;
        })
        .await?;
    let options = Options {
        telemetry: Some(telemetry),
        ..options(&config, &args)
    };
    say(&format!(
        "projecting ATL_LEDGER at {} into {}; metrics at http://{metrics_addr}/metrics",
        super::init::redacted(&url),
        toolledger_projector::Generations::new(&config.data_dir)
            .root()
            .display()
    ));
    let result = toolledger_projector::run(client, &options, shutdown).await;
    let _ = stop_metrics.send(());
    let _ = metrics_task.await;
    let summary = result?;
    say(&format!(
        "stopped at seq {} in {}",
        summary.position,
        summary.generation.name()
    ));
    Ok(())
}

/// Builds a new generation from seq 1 and switches `current` to it.
pub async fn rebuild(
    config: Config,
    args: Args,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let client = connect(&url, "toolledger-rebuild").await?;
    let started = std::time::Instant::now();
    let summary = toolledger_projector::rebuild(client, &options(&config, &args), shutdown).await?;
    if summary.switched {
        say(&format!(
            "rebuilt {} up to seq {} in {:.1}s; current switched (readers switch when they reopen)",
            summary.generation.name(),
            summary.position,
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    } else {
        anyhow::bail!("rebuild interrupted; current left unchanged")
    }
}

fn say(line: &str) {
    println!("toolledger project: {line}");
}
