//! `toolledger project` and `toolledger rebuild`: the SQLite projections of the ledger, one per
//! partition (`--partition K` for some; default every partition of `ledger.partitions`).
//!
//! ```text
//! project: connect ─▶ serve /metrics, /healthz ─▶ follow each partition's stream into its
//!          <data_dir>/projections[-p<K>]/ (current generation, from its own stored position)
//!          until Ctrl-C / SIGTERM
//! rebuild: connect ─▶ per partition: new generation from seq 1 up to the stream's last entry
//!          ─▶ switch its `current`
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
    /// Only this partition of a partitioned ledger (0 is `ATL_LEDGER`); repeat for several. The
    /// default is every partition, so several processes share the work by naming disjoint sets
    /// (`docs/scaling.md`).
    #[arg(long = "partition", value_name = "K")]
    pub partitions: Vec<u16>,
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
    let partitions = super::chosen_partitions(&config, &args.partitions)?;
    let options = options(&config, &args).with_telemetry(telemetry);
    for &partition in &partitions {
        say(&format!(
            "projecting {} at {} into {}",
            partition.stream(),
            super::init::redacted(&url),
            toolledger_projector::Generations::of(&config.data_dir, partition)
                .root()
                .display()
        ));
    }
    say(&format!("metrics at http://{metrics_addr}/metrics"));
    let result = toolledger_projector::run_partitions(client, &options, &partitions, shutdown).await;
    let _ = stop_metrics.send(());
    let _ = metrics_task.await;
    for (partition, summary) in partitions.iter().zip(result?) {
        say(&format!(
            "{}: stopped at seq {} in {}",
            partition.stream(),
            summary.position,
            summary.generation.name()
        ));
    }
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
    let partitions = super::chosen_partitions(&config, &args.partitions)?;
    let mut shutdown = std::pin::pin!(shutdown);
    // One partition after another: each rebuild already keeps SQLite's one writer busy.
    for partition in partitions {
        let started = std::time::Instant::now();
        let options = Options {
            partition,
            ..options(&config, &args)
        };
        let summary = toolledger_projector::rebuild(client.clone(), &options, shutdown.as_mut()).await?;
        anyhow::ensure!(
            summary.switched,
            "rebuild of {} interrupted; its current left unchanged",
            partition.stream()
        );
        say(&format!(
            "rebuilt {} of {} up to seq {} in {:.1}s; current switched (readers switch when they reopen)",
            summary.generation.name(),
            partition.stream(),
            summary.position,
            started.elapsed().as_secs_f64()
        ));
    }
    Ok(())
}

fn say(line: &str) {
    println!("toolledger project: {line}");
}
