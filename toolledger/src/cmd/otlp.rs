//! `toolledger otlp`: the OTLP traces receiver on its own (`up` runs it too when `[otlp]` has write
//! tokens).
//!
//! ```text
//! [[otlp.tokens]] (sha256, tenant, nats_url?) ─▶ bind otlp.http_listen (/v1/traces) and
//!   otlp.grpc_listen (TraceService) ─▶ tool-call spans ─▶ atl.in.<tenant>.<class>, acked
//!   ─▶ until Ctrl-C / SIGTERM; /metrics and /healthz on telemetry.metrics_listen
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use toolledger_core::config::Config;
use toolledger_core::telemetry::{self, Telemetry};
use toolledger_otlp::{OtlpMetrics, Receiver};

use super::init::nats_url;

/// Flags of `toolledger otlp`.
#[derive(clap::Args)]
pub struct Args {
    /// OTLP/HTTP listens here instead of `otlp.http_listen`.
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<SocketAddr>,
    /// OTLP/gRPC listens here instead of `otlp.grpc_listen`.
    #[arg(long, value_name = "ADDR")]
    pub grpc_listen: Option<SocketAddr>,
    /// NATS server URL for tokens without their own `nats_url`; overrides `nats.url`.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// Receives until `shutdown` completes.
pub async fn run(
    mut config: Config,
    args: Args,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    config.otlp.http_listen = args.http_listen.unwrap_or(config.otlp.http_listen);
    config.otlp.grpc_listen = args.grpc_listen.unwrap_or(config.otlp.grpc_listen);
    let telemetry = Telemetry::new();
    let metrics = telemetry.register(OtlpMetrics::register);
    let receiver = Arc::new(Receiver::new(&config, &url, metrics)?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (metrics_addr, metrics_task) =
        telemetry::serve(config.telemetry.metrics_listen, telemetry.clone(), async {
            let _ = stop_rx.await;
        })
        .await?;
    let running = toolledger_otlp::start(&config.otlp, receiver, shutdown).await?;
    println!("{}", listening(&running));
    println!("toolledger otlp: metrics at http://{metrics_addr}/metrics");
    running.task.await?;
    let _ = stop_tx.send(());
    let _ = metrics_task.await;
    println!("toolledger otlp: stopped");
    Ok(())
}

/// The line that says where the receiver listens (tests and people read it).
pub fn listening(running: &toolledger_otlp::Running) -> String {
    format!(
        "toolledger otlp: http at http://{}/v1/traces, grpc at http://{} (`Authorization: Bearer <token>`)",
        running.http_addr, running.grpc_addr
    )
}
