//! The OTLP traces receiver: agents already instrumented with OpenTelemetry land in the ledger
//! unchanged.
//!
//! ```text
//! exporter ─▶ POST /v1/traces (protobuf | JSON, gzip)  ─┐
//!          ─▶ gRPC TraceService/Export (gzip)          ─┴▶ Receiver::export
//!   bearer token ─▶ its one tenant (401 / UNAUTHENTICATED otherwise)
//!   ─▶ spans (spans.rs) ─▶ toolledger_import::otlp::map_spans: tool-call spans ─▶ Agent Tool
//!      events, nested spans of one call ─▶ one invocation, other spans ignored and counted
//!   ─▶ publish to atl.in.<tenant>.<class> as that tenant's producer, wait for every ack
//!   ─▶ OK (with partial_success.rejected_spans for spans that could not be mapped)
//!    | inbox refused ─▶ 429 + Retry-After / RESOURCE_EXHAUSTED + RetryInfo (nothing remembered,
//!      so the exporter's retry maps and publishes the same events again)
//! ```
//!
//! The receiver is a producer like any other: ingest validates, scrubs, offloads, dedupes and
//! quarantines what it publishes. Events are deterministic functions of the spans, so a re-sent
//! batch is a duplicate, not a second invocation. One tenant's requests are mapped and published
//! one at a time (the tenant's memory of recent tool spans is their lock); tenants run in parallel.

#![warn(missing_docs)]

mod grpc;
mod http;
mod metrics;
mod spans;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use toolledger_core::config::{Config, OtlpConfig};
use toolledger_core::tokens::TokenDigests;
use toolledger_import::otlp::{Hold, Recent, SpanBatch, map_spans};
use toolledger_wire::produce;
use toolledger_wire::{Mode, Tenant};

pub use metrics::OtlpMetrics;
pub use spans::spans_of;

/// Why the receiver cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is unusable.
    #[error("otlp.{key}: {reason}")]
    Config {
        /// The key under `[otlp]`.
        key: &'static str,
        /// Why.
        reason: String,
    },
    /// A listener could not bind.
    #[error("otlp: binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// Why a request was refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or not a write token.
    Unauthenticated,
    /// The body is not an OTLP traces request.
    Malformed(String),
    /// The body is larger than `otlp.max_request_bytes`.
    TooLarge(usize),
    /// The inbox refused (full) or could not be reached: retry later; nothing was remembered.
    Busy {
        /// Whether the inbox said it is full (rather than unreachable).
        full: bool,
        /// The first publish failure.
        reason: String,
    },
}

impl Refusal {
    fn message(&self) -> String {
        match self {
            Refusal::Unauthenticated => "a write token is required: `Authorization: Bearer <token>`".into(),
            Refusal::Malformed(why) => format!("not an OTLP traces request: {why}"),
            Refusal::TooLarge(limit) => format!("request larger than {limit} bytes (otlp.max_request_bytes)"),
            Refusal::Busy { reason, .. } => {
                format!("the ledger's inbox refused the events; retry later: {reason}")
            }
        }
    }
}

/// Who a write token writes as.
#[derive(Debug, Clone)]
struct Writer {
    name: String,
    tenant: Tenant,
    nats_url: String,
}

/// One tenant's state: where its events go, and its memory of recent tool spans (whose lock makes
/// one request at a time).
struct TenantState {
    tenant: Tenant,
    nats_url: String,
    recent: tokio::sync::Mutex<Recent>,
}

/// The receiver shared by its HTTP and gRPC front ends.
pub struct Receiver {
    tokens: TokenDigests<Writer>,
    max_request_bytes: usize,
    retry_after: Duration,
    recent_spans: usize,
    /// How long a held server-side span waits for its caller's span.
    caller_grace: Duration,
    /// Per tenant: the memory of recent tool spans, and the lock that makes one request at a time.
    tenants: std::sync::Mutex<HashMap<String, Arc<TenantState>>>,
    /// JetStream contexts by NATS URL, connected on first use.
    producers: tokio::sync::Mutex<HashMap<String, async_nats::jetstream::Context>>,
    metrics: OtlpMetrics,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

impl Receiver {
    /// A receiver for `config.otlp`, publishing with each token's `nats_url`, else `default_url`.
    pub fn new(config: &Config, default_url: &str, metrics: OtlpMetrics) -> Result<Receiver, Error> {
        let otlp: &OtlpConfig = &config.otlp;
        if otlp.tokens.is_empty() {
            return Err(Error::Config {
                key: "tokens",
                reason: "no write token is configured ([[otlp.tokens]] with name, sha256, tenant)".into(),
            });
        }
        let mut tokens = TokenDigests::default();
        for token in &otlp.tokens {
            let tenant = Tenant::parse(&token.tenant).map_err(|e| Error::Config {
                key: "tokens",
                reason: format!("token `{}`: {e}", token.name),
            })?;
            let writer = Writer {
                name: token.name.clone(),
                tenant,
                nats_url: token.nats_url.clone().unwrap_or_else(|| default_url.to_owned()),
            };
            tokens
                .insert_digest(&token.sha256, writer)
                .ok_or_else(|| Error::Config {
                    key: "tokens",
                    reason: format!("token `{}`: sha256 must be 64 hex digits", token.name),
                })?;
        }
        Ok(Receiver {
            tokens,
            max_request_bytes: otlp.max_request_bytes,
            retry_after: Duration::from_secs(otlp.retry_after_secs),
            recent_spans: otlp.recent_spans,
            caller_grace: Duration::from_secs(otlp.caller_grace_secs),
            tenants: std::sync::Mutex::new(HashMap::new()),
            producers: tokio::sync::Mutex::new(HashMap::new()),
            metrics,
        })
    }

    fn writer(&self, bearer: Option<&str>) -> Result<&Writer, Refusal> {
        bearer
            .and_then(|token| self.tokens.find(token))
            .ok_or(Refusal::Unauthenticated)
    }

    fn state(&self, writer: &Writer) -> Arc<TenantState> {
        let mut tenants = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tenants
            .entry(writer.tenant.as_str().to_owned())
            .or_insert_with(|| {
                Arc::new(TenantState {
                    tenant: writer.tenant.clone(),
                    nats_url: writer.nats_url.clone(),
                    recent: tokio::sync::Mutex::new(Recent::new(self.recent_spans)),
                })
            })
            .clone()
    }

    async fn producer(&self, url: &str) -> Result<async_nats::jetstream::Context, Refusal> {
        let mut producers = self.producers.lock().await;
        if let Some(js) = producers.get(url) {
            return Ok(js.clone());
        }
        let client = toolledger_wire::connect::connect(url, "toolledger-otlp")
            .await
            .map_err(|e| Refusal::Busy {
                full: false,
                reason: e.to_string(),
            })?;
        let js = async_nats::jetstream::new(client);
        producers.insert(url.to_owned(), js.clone());
        Ok(js)
    }

    /// Records `request` for the tenant of the token `bearer`: maps its tool-call spans, publishes
    /// the events and waits for every ack. The response's partial success counts spans that could
    /// not be mapped.
    pub async fn export(
        &self,
        bearer: Option<&str>,
        request: &ExportTraceServiceRequest,
    ) -> Result<ExportTraceServiceResponse, Refusal> {
        let writer = self.writer(bearer)?;
        let (spans, malformed) = spans::spans_of(request);
        tracing::debug!(token = %writer.name, spans = spans.len(), "otlp export");
        let state = self.state(writer);
        let mut recent = state.recent.lock().await;
        let options = toolledger_import::Options::new(state.tenant.as_str());
        let batch = map_spans(&options, &spans, &recent, Hold::Servers);
        let mut rejected = malformed;
        rejected.extend(self.publish(&state, &batch).await?);
        recent.record(&batch, now_ms());
        self.metrics.count(&batch, rejected.len());
        let partial_success = (!rejected.is_empty()).then(|| ExportTracePartialSuccess {
            rejected_spans: i64::try_from(rejected.len()).unwrap_or(i64::MAX),
            error_message: rejected.join("; "),
        });
        Ok(ExportTraceServiceResponse { partial_success })
    }

    /// Publishes `batch`'s events as the tenant's producer and waits for every ack; returns what
    /// could not be mapped or prepared.
    async fn publish(&self, state: &TenantState, batch: &SpanBatch) -> Result<Vec<String>, Refusal> {
        let mut rejected: Vec<String> = batch
            .rejected
            .iter()
            .map(|(span, why)| format!("span {span}: {why}"))
            .collect();
        let mut outgoing = Vec::with_capacity(batch.events.len());
        for (index, event) in batch.events.iter().enumerate() {
            match produce::prepare(event.clone(), Some(&state.tenant), Mode::Binary) {
                Ok(message) => outgoing.push((format!("event {index}"), message)),
                Err(error) => rejected.push(format!("event {index}: {error}")),
            }
        }
        if outgoing.is_empty() {
            return Ok(rejected);
        }
        let js = self.producer(&state.nats_url).await?;
        let report = produce::publish_all(&js, outgoing).await;
        if let Some((_, reason)) = report.failed.first() {
            let full = reason.contains("maximum") || reason.contains("insufficient resources");
            self.metrics.refused.inc();
            tracing::warn!(tenant = %state.tenant, failed = report.failed.len(), %reason,
                "otlp: the inbox refused events; the exporter is asked to retry");
            return Err(Refusal::Busy {
                full,
                reason: reason.clone(),
            });
        }
        self.metrics.events.inc_by(report.published as u64);
        Ok(rejected)
    }

    /// Maps and publishes the held server-side spans whose caller did not come within the grace
    /// (every held span when `all`, as the receiver stops). A tenant whose publish fails keeps
    /// them for the next try.
    async fn flush_held(&self, all: bool) {
        let states: Vec<Arc<TenantState>> = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let grace = if all {
            0
        } else {
            self.caller_grace.as_millis().max(1) as i64
        };
        for state in states {
            let mut recent = state.recent.lock().await;
            let spans = recent.expired(now_ms(), grace);
            if spans.is_empty() {
                continue;
            }
            let options = toolledger_import::Options::new(state.tenant.as_str());
            let batch = map_spans(&options, &spans, &recent, Hold::Nothing);
            match self.publish(&state, &batch).await {
                Ok(rejected) => {
                    recent.record(&batch, now_ms());
                    self.metrics.count(&batch, rejected.len());
                }
                Err(refusal) => tracing::warn!(tenant = %state.tenant, reason = %refusal.message(),
                    "otlp: held server spans not published yet; retrying"),
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The receiver's listeners once bound.
#[derive(Debug)]
pub struct Running {
    /// Where OTLP/HTTP listens.
    pub http_addr: SocketAddr,
    /// Where OTLP/gRPC listens.
    pub grpc_addr: SocketAddr,
    /// Both servers; ends when `shutdown` completes and in-flight requests finished.
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds `config.otlp`'s listeners and serves `receiver` on both until `shutdown` completes.
pub async fn start(
    config: &OtlpConfig,
    receiver: Arc<Receiver>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Running, Error> {
    let bind = |addr: SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })
    };
    let http_listener = bind(config.http_listen).await?;
    let grpc_listener = bind(config.grpc_listen).await?;
    let local = |listener: &tokio::net::TcpListener, addr| {
        listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })
    };
    let http_addr = local(&http_listener, config.http_listen)?;
    let grpc_addr = local(&grpc_listener, config.grpc_listen)?;
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut http_stop = stop.subscribe();
    let mut grpc_stop = stop.subscribe();
    let http = tokio::spawn(http::serve(http_listener, receiver.clone(), async move {
        let _ = http_stop.recv().await;
    }));
    let grpc = tokio::spawn(grpc::serve(grpc_listener, receiver.clone(), async move {
        let _ = grpc_stop.recv().await;
    }));
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = tick.tick() => receiver.flush_held(false).await,
            }
        }
        let _ = stop.send(());
        match http.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "the otlp http server ended with an error"),
            Err(error) => tracing::error!(%error, "the otlp http server task failed"),
        }
        match grpc.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "the otlp grpc server ended with an error"),
            Err(error) => tracing::error!(%error, "the otlp grpc server task failed"),
        }
        // Nothing held is lost to a stop: what waited for its caller is recorded on its own.
        receiver.flush_held(true).await;
    });
    Ok(Running {
        http_addr,
        grpc_addr,
        task,
    })
}
