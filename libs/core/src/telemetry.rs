//! Logging, metrics and health, set up the same way by every service.
//!
//! A service builds one [`Telemetry`], registers its metrics in [`Telemetry::registry`], reports the
//! state of its parts through [`Telemetry::health`], and calls [`serve`] to expose both:
//!
//! ```text
//! GET /metrics  Prometheus text exposition (OpenMetrics 1.0); toolledger_health_ok{component} is 1 or 0
//! GET /healthz  200 {"status":"ok",...} when every component is ok, 503 with the failing ones otherwise
//! ```
//!
//! Most components report themselves as they change (a connection drops, a task fails). What cannot
//! report itself — a file some other process writes, a heartbeat that stopped — is checked by a
//! probe ([`Telemetry::add_probe`]) that both endpoints run before they answer, so a scrape and a
//! health check never show a state older than the request.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, TelemetryConfig};
use crate::{Error, Result};

/// An error and its causes on one line, `outer: cause: root cause`: how an error is logged or shown
/// on the health board, since `Display` alone prints only the outermost message and errors keep
/// their cause as a `#[source]`.
///
/// ```
/// # use toolledger_core::telemetry::ErrorChain;
/// #[derive(Debug, thiserror::Error)]
/// #[error("stream ATL_INBOUND: fetching")]
/// struct Fetch(#[source] std::io::Error);
/// let error = Fetch(std::io::Error::other("connection refused"));
/// assert_eq!(ErrorChain(&error).to_string(), "stream ATL_INBOUND: fetching: connection refused");
/// ```
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut line = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            // Some messages already end with their cause's text; it is not repeated.
            if !line.ends_with(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            source = cause.source();
        }
        f.write_str(&line)
    }
}

/// Sets up the global `tracing` subscriber once. Later calls (tests run many services in one process)
/// keep the first subscriber and return `Ok`.
///
/// Text logs are coloured only when stderr is a terminal and `NO_COLOR` is unset: written to a file,
/// a pipe or journald, escape codes are noise that log searches trip over.
pub fn init_tracing(config: &TelemetryConfig) -> Result<()> {
    let filter = EnvFilter::try_new(&config.log_filter).map_err(|e| Error::Config {
        key: "telemetry.log_filter".to_owned(),
        reason: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(std::io::stderr().is_terminal()))
        .with_writer(std::io::stderr);
    let _already_set = match config.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    Ok(())
}

/// Whether log lines are coloured: on a terminal, unless `NO_COLOR` is set to something (no-color.org).
fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A check run before `/healthz` and `/metrics` answer; it updates the health board itself.
pub type Probe = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A process's metrics registry and health board, shared by its services and its HTTP endpoint.
#[derive(Clone)]
pub struct Telemetry {
    registry: Arc<Mutex<Registry>>,
    health: Health,
    probes: Arc<Mutex<Vec<Probe>>>,
}

impl Telemetry {
    /// A registry with the `toolledger_build_info` gauge already in it.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("toolledger");
        let build_info = Family::<Vec<(String, String)>, Gauge>::default();
        build_info
            .get_or_create(&vec![(
                "version".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            )])
            .set(1);
        registry.register("build_info", "Build of the running toolledger binary", build_info);
        let health = Health::default();
        registry.register(
            "health_ok",
            "Whether each component on the health board is ok (1) or failing (0), as /healthz says",
            health.gauges.clone(),
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
            health,
            probes: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Adds a probe that `/healthz` and `/metrics` run (all probes, concurrently) before answering.
    /// A probe must be quick — it delays every scrape — and put blocking work on a blocking thread.
    pub fn add_probe(&self, probe: Probe) {
        self.probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(probe);
    }

    /// Runs every probe, so the board is current.
    pub async fn refresh(&self) {
        let probes: Vec<Probe> = self.probes.lock().unwrap_or_else(PoisonError::into_inner).clone();
        futures::future::join_all(probes.iter().map(|probe| probe())).await;
    }

    /// Runs `f` with the registry so a service can register its metrics.
    pub fn register<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.registry.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The health board.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The registry in Prometheus text format.
    pub fn encode_metrics(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &registry);
        text
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}

/// The state of each named component of a process, as `/healthz` reports it.
#[derive(Clone, Default)]
pub struct Health {
    components: Arc<Mutex<BTreeMap<String, ComponentHealth>>>,
    /// `toolledger_health_ok{component}`, kept beside the board so a scrape says what `/healthz` says.
    gauges: Family<Vec<(String, String)>, Gauge>,
}

/// One component's health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentHealth {
    /// Whether the component is working.
    pub ok: bool,
    /// What it is doing or what is wrong.
    pub detail: String,
}

/// The body of `/healthz`.
#[derive(Debug, Clone, Serialize)]
pub struct HealthReport {
    /// `ok` when every component is ok, else `failing`.
    pub status: &'static str,
    /// Each component by name.
    pub components: BTreeMap<String, ComponentHealth>,
}

impl Health {
    /// Marks `component` as working.
    pub fn ok(&self, component: &str, detail: impl Into<String>) {
        self.set(
            component,
            ComponentHealth {
                ok: true,
                detail: detail.into(),
            },
        );
    }

    /// Marks `component` as failing, with the reason.
    pub fn failing(&self, component: &str, reason: impl Into<String>) {
        self.set(
            component,
            ComponentHealth {
                ok: false,
                detail: reason.into(),
            },
        );
    }

    fn set(&self, component: &str, health: ComponentHealth) {
        self.gauges
            .get_or_create(&vec![("component".to_owned(), component.to_owned())])
            .set(i64::from(health.ok));
        self.components
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(component.to_owned(), health);
    }

    /// The current report.
    pub fn report(&self) -> HealthReport {
        let components = self
            .components
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let status = if components.values().all(|c| c.ok) {
            "ok"
        } else {
            "failing"
        };
        HealthReport { status, components }
    }
}

/// Serves `/metrics` and `/healthz` on `addr` until `shutdown` completes. Returns the bound address
/// (so port 0 works) and the server task.
pub async fn serve(
    addr: SocketAddr,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Telemetry {
            addr: addr.to_string(),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| Error::Telemetry {
        addr: addr.to_string(),
        source,
    })?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(telemetry);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(%error, "telemetry server stopped");
        }
    });
    Ok((bound, task))
}

async fn metrics(State(telemetry): State<Telemetry>) -> Response {
    telemetry.refresh().await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        telemetry.encode_metrics(),
    )
        .into_response()
}

async fn healthz(State(telemetry): State<Telemetry>) -> Response {
    telemetry.refresh().await;
    let report = telemetry.health().report();
    let code = if report.status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(report)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal() {
        assert!(!colour(false));
        // NO_COLOR is not set by the test runner; when it is, colour is off even on a terminal.
        assert_eq!(
            colour(true),
            std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        );
    }

    #[tokio::test]
    async fn metrics_say_what_the_board_says_after_the_probes_ran() {
        let telemetry = Telemetry::new();
        telemetry.health().ok("api", "serving");
        let health = telemetry.health().clone();
        telemetry.add_probe(Arc::new(move || {
            let health = health.clone();
            Box::pin(async move { health.failing("projection", "unreadable") })
        }));
        assert_eq!(telemetry.health().report().status, "ok");
        telemetry.refresh().await;
        assert_eq!(telemetry.health().report().status, "failing");
        let text = telemetry.encode_metrics();
        assert!(
            text.contains("toolledger_health_ok{component=\"api\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("toolledger_health_ok{component=\"projection\"} 0"),
            "{text}"
        );
    }
}
