//! `toolledger up`: everything on one machine.
//!
//! ```text
//! start nats-server (unless nats.url is set) ─▶ connect, check JetStream ─▶ serve /metrics, /healthz
//!   ─▶ run until Ctrl-C / SIGTERM ─▶ stop the services, then the server
//! ```

use std::future::Future;
use std::net::SocketAddr;

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_core::nats_server::{NatsServer, NatsServerSpec};
use toolledger_core::telemetry::{self, Telemetry};

/// Flags of `toolledger up`.
#[derive(clap::Args)]
pub struct Args {
    /// Say what runs and how to reach it, for a first look at the system.
    #[arg(long)]
    demo: bool,
}

/// Runs until `shutdown` completes.
pub async fn run(config: Config, args: Args, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let telemetry = Telemetry::new();
    let mut local_server = None;
    let url = match &config.nats.url {
        Some(url) => url.clone(),
        None => {
            let server = start_local_server(&config).await?;
            say(&format!(
                "started nats-server {} with JetStream at {} (store {}, log {})",
                server.version(),
                server.url(),
                server.store_dir().display(),
                log_path(&config).display()
            ));
            let url = server.url();
            local_server = Some(server);
            url
        }
    };

    let health = telemetry.health().clone();
    let events_health = health.clone();
    let client = async_nats::ConnectOptions::new()
        .name("toolledger-up")
        .event_callback(move |event| {
            let health = events_health.clone();
            async move {
                match event {
                    async_nats::Event::Connected => health.ok("nats", "connected"),
                    async_nats::Event::Disconnected => health.failing("nats", "disconnected"),
                    other => tracing::info!(event = %other, "nats connection event"),
                }
            }
        })
        .connect(&url)
        .await
        .with_context(|| format!("connecting to NATS at {url}"))?;
    let jetstream = async_nats::jetstream::new(client.clone());
    let account = jetstream
        .query_account()
        .await
        .with_context(|| format!("JetStream is not available at {url}"))?;
    health.ok("nats", "connected");
    say(&format!(
        "connected to {url}: JetStream ready, {} streams",
        account.streams
    ));

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (metrics_addr, metrics_task) =
        telemetry::serve(config.telemetry.metrics_listen, telemetry.clone(), async {
            let _ = stop_rx.await;
        })
        .await?;
    say(&format!(
        "metrics at {}, health at {}",
        url_of(metrics_addr, "/metrics"),
        url_of(metrics_addr, "/healthz")
    ));
    match toolledger_wire::streams::ensure_inbound(&jetstream).await? {
        toolledger_wire::streams::Ensured::Created => say("created stream ATL_INBOUND"),
        toolledger_wire::streams::Ensured::Verified => say("stream ATL_INBOUND meets the contract"),
    }
    if args.demo {
        say(&format!("data directory: {}", config.data_dir.display()));
        publish_demo_session(&jetstream).await?;
    }
    say("running; Ctrl-C or SIGTERM stops");

    shutdown.await;
    say("stopping");
    let _ = stop_tx.send(());
    let _ = metrics_task.await;
    client.drain().await.ok();
    if let Some(mut server) = local_server {
        tokio::task::spawn_blocking(move || server.stop()).await.ok();
        say("nats-server stopped");
    }
    say("stopped");
    Ok(())
}

/// Publishes one generated session (every event class, binary-mode CloudEvents) as a producer would.
async fn publish_demo_session(js: &async_nats::jetstream::Context) -> anyhow::Result<()> {
    let generated =
        toolledger_schemas::generator::generate(&toolledger_schemas::generator::GeneratorConfig {
            seed: 1,
            ..Default::default()
        });
    let classes: std::collections::BTreeSet<&str> = generated
        .events
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    let mut outgoing = Vec::with_capacity(generated.events.len());
    for (i, event) in generated.events.iter().enumerate() {
        let message = toolledger_wire::produce::prepare(event.clone(), None, toolledger_wire::Mode::Binary)
            .with_context(|| format!("preparing generated event {i}"))?;
        outgoing.push((format!("event {i}"), message));
    }
    let report = toolledger_wire::produce::publish_all(js, outgoing).await;
    say(&format!(
        "demo: published a generated session to ATL_INBOUND: {} events of {} classes ({} new, {} duplicates, {} failed)",
        generated.events.len(),
        classes.len(),
        report.published,
        report.duplicates,
        report.failed.len()
    ));
    anyhow::ensure!(
        report.failed.is_empty(),
        "demo events failed: {:?}",
        report.failed
    );
    Ok(())
}

async fn start_local_server(config: &Config) -> anyhow::Result<NatsServer> {
    let spec = NatsServerSpec {
        bin: config.nats.server_bin.clone(),
        host: config.nats.listen.ip(),
        port: Some(config.nats.listen.port()).filter(|p| *p != 0),
        store_dir: config.nats_store_dir(),
        log_file: Some(log_path(config)),
        config_file: None,
        pid_file: Some(config.data_dir.join("nats-server.pid")),
    };
    Ok(tokio::task::spawn_blocking(move || NatsServer::start(spec)).await??)
}

fn log_path(config: &Config) -> std::path::PathBuf {
    config.data_dir.join("logs/nats-server.log")
}

fn url_of(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

/// Operator-facing progress goes to stdout, logs to stderr.
fn say(line: &str) {
    println!("toolledger up: {line}");
}
