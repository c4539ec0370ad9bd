//! The `/v1` HTTP API (axum), described by `docs/openapi.json`.
//!
//! ```text
//! request ─▶ bearer token (sha256, constant-time) ─▶ principal ─▶ tenant scope
//!   ─▶ parameters checked (unknown ones refused) ─▶ Reader::read on a blocking thread
//!   ─▶ JSON (or NDJSON with format=ndjson / Accept: application/x-ndjson) ─▶ response
//! every error, 4xx or 5xx: {"error": {"code", "message", "field"}}
//! ```
//!
//! `/healthz`, `/metrics` and the web view's static assets (`/`, `/ui/…`, see [`crate::web`]) need
//! no token; everything under `/v1` does. `/healthz` and `/metrics` first check what the API depends
//! on (the projection, the projector's heartbeat, the access log: `crate::health`), and a read that
//! meets a damaged projection answers 503 `projection_unavailable`, one whose access record cannot be
//! queued 503 `audit_unavailable`: a server fault is never blamed on the caller. The routes over the ledger
//! itself live in submodules: `sql` (`POST /v1/sql`), `evidence` (checkpoints, proofs, bundles)
//! and `stream` (session replay as NDJSON or SSE).

mod evidence;
mod sql;
mod stream;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::Serialize;
use serde_json::json;
use toolledger_core::telemetry::Telemetry;
use toolledger_ledger::BlobStore;
use toolledger_wire::partition::Partitions;

use crate::access::{AccessLog, Reads};
use crate::auth::{Principal, Tokens};
use crate::error::{Error, Result};
use crate::listing::{SearchFilter, SessionFilter};
use crate::params;
use crate::reader::Readers;
use crate::stats::StatsFilter;

/// How the API is set up.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Accepted tokens.
    pub tokens: Tokens,
    /// With no tokens: serve every tenant without a token, on a loopback address only.
    pub insecure_local: bool,
    /// The blob store URL for payload checks (`None`: payloads reported `not_checked`).
    pub blob_store_url: Option<String>,
    /// Where reads of invocation and session data are recorded (`None`: not recorded; `serve`
    /// without NATS says so at start).
    pub access_log: Option<AccessLog>,
    /// The ledger for replay, checkpoints, proofs and bundles (`None`: those answer 503 `no_ledger`).
    pub ledger: Option<LedgerAccess>,
    /// How many partitions the ledger has (`ledger.partitions`): each has its own projection, and a
    /// tenant's reads go to its partition's.
    pub partitions: Partitions,
}

impl ApiOptions {
    /// Every tenant served without a token on the loopback address `listen`, with no blob store,
    /// access log or ledger: the API over a projection alone (benchmarks, examples).
    pub fn insecure_local(listen: SocketAddr) -> ApiOptions {
        ApiOptions {
            listen,
            tokens: Tokens::default(),
            insecure_local: true,
            blob_store_url: None,
            access_log: None,
            ledger: None,
            partitions: Partitions::default(),
        }
    }
}

/// The ledger as the evidence and replay routes read it.
#[derive(Debug, Clone)]
pub struct LedgerAccess {
    /// JetStream on the ledger's NATS.
    pub js: async_nats::jetstream::Context,
    /// Each partition's log (stream, trusted keys, origin, tiles) for proofs and bundles, p0 first:
    /// one for a ledger of one partition.
    pub logs: Vec<toolledger_verify::ProveSource>,
    /// The directory's log over a partitioned ledger's partitions (`None` with one partition).
    pub directory: Option<toolledger_verify::ProveSource>,
    /// The configured witness policy: bundles are proved in the newest checkpoint that meets it.
    pub witness_policy: Option<toolledger_merkle::WitnessPolicy>,
}

/// Request counts by endpoint and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    status: u16,
}

struct ApiState {
    readers: Readers,
    blobs: Option<BlobStore>,
    tokens: Tokens,
    insecure_local: bool,
    telemetry: Telemetry,
    requests: Family<RequestLabels, Counter>,
    access_log: Option<AccessLog>,
    ledger: Option<LedgerAccess>,
    /// Analysts' statements running at once, per tenant and in all, and the means to stop them.
    sql_slots: Arc<sql::SqlSlots>,
}

/// An error as the API returns it.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError(error)
    }
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match &self.0 {
            Error::InvalidParameter { .. } => StatusCode::BAD_REQUEST,
            Error::NotFound { .. } => StatusCode::NOT_FOUND,
            Error::Unauthenticated => StatusCode::UNAUTHORIZED,
            Error::Forbidden { .. } => StatusCode::FORBIDDEN,
            Error::NoProjection { .. }
            | Error::NoLedger { .. }
            | Error::SqlBusy { .. }
            | Error::SqlCanceled
            | Error::ProjectionUnavailable { .. }
            | Error::AuditUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::SqlRefused { .. } | Error::SqlInvalid { .. } => StatusCode::BAD_REQUEST,
            // The statement was fine but too costly: 422, not 408 (which blames a slow client).
            Error::SqlTimeout { .. } | Error::SqlTooLarge { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::Evidence(toolledger_verify::Error::NoSuchEntry { .. })
            | Error::Evidence(toolledger_verify::Error::NoCheckpoint { .. }) => StatusCode::NOT_FOUND,
            Error::Evidence(toolledger_verify::Error::BadSizes { .. }) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self.0, "api request failed");
        }
        let body = json!({"error": {
            "code": self.0.code(),
            "message": self.0.to_string(),
            "field": self.0.field(),
        }});
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Binds and serves the API until `shutdown`; returns the bound address (port 0 works) and the task.
pub async fn serve(
    data_dir: &std::path::Path,
    options: ApiOptions,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    if options.tokens.is_empty() && !(options.insecure_local && options.listen.ip().is_loopback()) {
        return Err(Error::Config(
            "no api tokens configured: add [[api.tokens]] or use --insecure-local on a loopback address"
                .to_owned(),
        ));
    }
    let (app, sql_slots) = routes(data_dir, options.clone(), telemetry)?;
    // Statements run on blocking threads the runtime waits for when it stops: stop them with the
    // server, and turn away those still waiting for a slot.
    let shutdown = async move {
        shutdown.await;
        sql_slots.shut_down();
    };
    let serve_error = |source| Error::Serve {
        addr: options.listen.to_string(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(serve_error)?;
    let bound = listener.local_addr().map_err(serve_error)?;
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(%error, "api server stopped");
        }
    });
    Ok((bound, task))
}

/// The API's routes over the projections in `data_dir`.
pub fn router(data_dir: &std::path::Path, options: ApiOptions, telemetry: Telemetry) -> Result<Router> {
    routes(data_dir, options, telemetry).map(|(router, _)| router)
}

/// The routes, and the SQL slots [`serve`] stops at shutdown.
fn routes(
    data_dir: &std::path::Path,
    options: ApiOptions,
    telemetry: Telemetry,
) -> Result<(Router, Arc<sql::SqlSlots>)> {
    let blobs = options
        .blob_store_url
        .as_deref()
        .map(BlobStore::open)
        .transpose()
        .map_err(Error::BlobStore)?;
    let requests = Family::<RequestLabels, Counter>::default();
    telemetry.register(|registry| {
        registry.register(
            "api_requests",
            "Query API requests by endpoint and status",
            requests.clone(),
        );
    });
    telemetry.health().ok("api", "serving");
    let readers = Readers::new(data_dir, options.partitions);
    crate::health::Dependencies::watch(
        readers.clone(),
        options.access_log.as_ref().map(AccessLog::health),
        &telemetry,
    );
    let sql_slots = sql::SqlSlots::new(&telemetry);
    let state = Arc::new(ApiState {
        readers,
        blobs,
        tokens: options.tokens,
        insecure_local: options.insecure_local,
        telemetry,
        requests,
        access_log: options.access_log,
        ledger: options.ledger,
        sql_slots: Arc::clone(&sql_slots),
    });
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        // The web view: static assets only, no token; its data calls go to /v1 like any client's.
        .route("/", get(crate::web::index))
        .route("/ui/{file}", get(crate::web::asset))
        .route("/v1/invocations", get(search))
        // Not `/v1/invocations/counts`: that would shadow the invocation whose id is `counts`.
        .route("/v1/invocation-counts", get(counts))
        .route("/v1/invocations/{invocation_id}", get(invocation))
        .route("/v1/sessions", get(sessions))
        .route("/v1/sessions/{session_id}", get(session))
        .route("/v1/stats", get(stats))
        .route("/v1/tools", get(tools))
        .route("/v1/sql", post(sql::sql))
        .route("/v1/sessions/{session_id}/replay", get(stream::replay))
        .route("/v1/sessions/{session_id}/bundle", get(evidence::session_bundle))
        .route(
            "/v1/invocations/{invocation_id}/bundle",
            get(evidence::invocation_bundle),
        )
        .route("/v1/checkpoints/latest", get(evidence::latest_checkpoint))
        .route("/v1/checkpoints/{size}", get(evidence::checkpoint))
        .route("/v1/proofs/inclusion", get(evidence::inclusion))
        .route("/v1/proofs/consistency", get(evidence::consistency))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    Ok((router, sql_slots))
}

type Shared = State<Arc<ApiState>>;

async fn not_found() -> Response {
    let body = json!({"error": {"code": "not_found", "message": "no such endpoint (see docs/openapi.json)", "field": null}});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

async fn method_not_allowed() -> Response {
    let body = json!({"error": {"code": "method_not_allowed", "message": "method not allowed here (POST /v1/sql, GET elsewhere)", "field": null}});
    (StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response()
}

async fn healthz(State(state): Shared) -> Response {
    state.telemetry.refresh().await;
    let report = state.telemetry.health().report();
    let code = if report.status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(report)).into_response()
}

async fn metrics(State(state): Shared) -> Response {
    state.telemetry.refresh().await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.telemetry.encode_metrics(),
    )
        .into_response()
}

impl ApiState {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Principal> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        match presented {
            Some(token) => self.tokens.authenticate(token.trim()),
            None if self.tokens.is_empty() && self.insecure_local => Ok(Principal::admin("local-admin")),
            None => Err(Error::Unauthenticated),
        }
    }

    /// Records a read of invocation or session data, one record per tenant read; an error when a
    /// record cannot be queued (the read must then be refused).
    async fn record(
        &self,
        principal: &Principal,
        endpoint: &'static str,
        query: Option<&str>,
        rows: impl IntoIterator<Item = (String, Option<String>, Option<String>)>,
    ) -> Result<()> {
        self.record_scoped(principal, endpoint, None, query, rows).await
    }

    /// [`ApiState::record`] of a read confined to `scope`: one that returned nothing is recorded too,
    /// for that tenant (or, unscoped, for the ledger's own), so probing leaves a trace.
    async fn record_scoped(
        &self,
        principal: &Principal,
        endpoint: &'static str,
        scope: Option<&str>,
        query: Option<&str>,
        rows: impl IntoIterator<Item = (String, Option<String>, Option<String>)>,
    ) -> Result<()> {
        let mut reads = Reads::new(principal, endpoint, scope, query);
        for (tenant, invocation, session) in rows {
            reads.row(tenant, invocation, session);
        }
        self.publish(reads).await
    }

    /// Queues the records of one read.
    async fn publish(&self, reads: Reads) -> Result<()> {
        let Some(log) = &self.access_log else {
            return Ok(());
        };
        for read in reads.records() {
            log.record(read).await?;
        }
        Ok(())
    }

    fn count(&self, endpoint: &'static str, response: &Response) {
        self.requests
            .get_or_create(&RequestLabels {
                endpoint,
                status: response.status().as_u16(),
            })
            .inc();
    }
}

/// The query string as a map; unknown or repeated parameters are refused so a typo is not a silent
/// "no filter".
struct Query(BTreeMap<String, String>);

impl Query {
    fn parse(raw: Option<String>, allowed: &[&str]) -> Result<Self> {
        let raw = raw.unwrap_or_default();
        if raw.len() > 8192 {
            return Err(Error::invalid(
                "query",
                "the query string is longer than 8192 bytes",
            ));
        }
        let mut map = BTreeMap::new();
        for (key, value) in url::form_urlencoded::parse(raw.as_bytes()) {
            if !allowed.contains(&key.as_ref()) {
                return Err(Error::invalid(
                    &key,
                    format!("unknown parameter (accepted: {})", allowed.join(", ")),
                ));
            }
            if map.insert(key.to_string(), value.into_owned()).is_some() {
                return Err(Error::invalid(&key, "given more than once"));
            }
        }
        Ok(Self(map))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn owned(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }

    fn limit(&self) -> Result<u32> {
        let value = self
            .get("limit")
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| Error::invalid("limit", format!("`{v}` is not a whole number")))
            })
            .transpose()?;
        params::limit(value)
    }

    fn ndjson(&self, headers: &HeaderMap) -> Result<bool> {
        match self.get("format") {
            Some("ndjson") => Ok(true),
            Some("json") => Ok(false),
            Some(other) => Err(Error::invalid("format", format!("`{other}`: use json or ndjson"))),
            None => Ok(headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("application/x-ndjson"))),
        }
    }
}

/// The id in the path; one that does not even decode (bad percent-encoding, not UTF-8) is a 400 too.
fn path_id(field: &str, path: Result<Path<String>, PathRejection>) -> Result<String> {
    path.map(|Path(id)| id)
        .map_err(|e| Error::invalid(field, format!("cannot be decoded: {e}")))
}

fn json_response(value: &impl Serialize) -> Response {
    (StatusCode::OK, Json(value)).into_response()
}

/// One JSON document per line; the next page's cursor travels in `x-next-cursor`.
fn ndjson_response<T: Serialize>(items: &[T], next_cursor: Option<&str>) -> Response {
    let mut body = String::new();
    for item in items {
        if let Ok(line) = serde_json::to_string(item) {
            body.push_str(&line);
            body.push('\n');
        }
    }
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        body,
    )
        .into_response();
    if let Some(cursor) = next_cursor.and_then(|c| HeaderValue::from_str(c).ok()) {
        response.headers_mut().insert("x-next-cursor", cursor);
    }
    response
}

fn finish(state: &ApiState, endpoint: &'static str, result: Result<Response>) -> Response {
    let response = result.unwrap_or_else(|error| ApiError(error).into_response());
    state.count(endpoint, &response);
    response
}

async fn invocation(
    State(state): Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let invocation_id = path_id("invocation_id", path)?;
        let query = Query::parse(raw, &["tenant", "payloads"])?;
        let tenant = principal.scope(query.get("tenant"))?;
        let (check, content) = match query.get("payloads").unwrap_or("check") {
            "none" => (false, false),
            "check" => (true, false),
            "content" => (true, true),
            other => {
                return Err(Error::invalid(
                    "payloads",
                    format!("`{other}`: use none, check or content"),
                ));
            }
        };
        params::id("invocation_id", &invocation_id)?;
        let asked = (tenant.clone(), format!("invocation_id={invocation_id}"));
        let id = invocation_id.clone();
        let read = state
            .read_id(
                tenant,
                "invocation_id",
                "invocation",
                &invocation_id,
                move |conn, tenant| crate::reconstruct::reconstruct(conn, tenant, &id),
            )
            .await;
        let mut reconstruction = match read {
            Err(error @ Error::NotFound { .. }) => {
                let (scope, query) = asked;
                let none = std::iter::empty();
                state
                    .record_scoped(
                        &principal,
                        "GET /v1/invocations/{invocation_id}",
                        scope.as_deref(),
                        Some(&query),
                        none,
                    )
                    .await?;
                return Err(error);
            }
            read => read?,
        };
        reconstruction = state.readers.with_erasures(reconstruction).await?;
        if check && let Some(blobs) = &state.blobs {
            crate::payloads::check(blobs, &mut reconstruction, content).await;
        }
        let row = (
            reconstruction.tenant.clone(),
            Some(reconstruction.invocation_id.clone()),
            reconstruction.session_id.clone(),
        );
        state
            .record(&principal, "GET /v1/invocations/{invocation_id}", None, [row])
            .await?;
        Ok(json_response(&reconstruction))
    }
    .await;
    finish(&state, "invocation", result)
}

/// The filters of an invocation search, which its counts take too.
const SEARCH_FILTERS: [&str; 12] = [
    "tenant",
    "session_id",
    "tool_id",
    "namespace",
    "status",
    "error_class",
    "behavior",
    "actor",
    "native_id",
    "native_key",
    "from",
    "to",
];

/// The search filters of `query`, under the tenant scope of `principal`.
fn search_filter(principal: &Principal, query: &Query) -> Result<SearchFilter> {
    Ok(SearchFilter {
        tenant: principal.scope(query.get("tenant"))?,
        session_id: query.owned("session_id"),
        tool_id: query.owned("tool_id"),
        namespace: query.owned("namespace"),
        status: query.owned("status"),
        error_class: query.owned("error_class"),
        behavior: query.owned("behavior"),
        actor: query.owned("actor"),
        native_id: query.owned("native_id"),
        native_key: query.owned("native_key"),
        range: params::time_range(query.get("from"), query.get("to"))?,
        ..SearchFilter::default()
    })
}

async fn search(State(state): Shared, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let query_text = raw.clone().unwrap_or_default();
        let query = Query::parse(
            raw,
            &[&SEARCH_FILTERS[..], &["limit", "cursor", "format"]].concat(),
        )?;
        let ndjson = query.ndjson(&headers)?;
        let filters = search_filter(&principal, &query)?;
        let scope = filters.tenant.clone();
        let filter = SearchFilter {
            limit: query.limit()?,
            cursor: query.owned("cursor"),
            ..filters
        };
        let page = state
            .readers
            .scoped(scope.as_deref())?
            .read(move |conn| crate::listing::search(conn, &filter))
            .await?;
        let rows = page.items.iter().map(|i| {
            (
                i.tenant.clone(),
                Some(i.invocation_id.clone()),
                i.session_id.clone(),
            )
        });
        state
            .record_scoped(
                &principal,
                "GET /v1/invocations",
                scope.as_deref(),
                Some(&query_text),
                rows,
            )
            .await?;
        Ok(if ndjson {
            ndjson_response(&page.items, page.next_cursor.as_deref())
        } else {
            json_response(&page)
        })
    }
    .await;
    finish(&state, "search", result)
}

/// Invocations counted by `group_by` under the search's filters. Like stats, counts are not recorded
/// as reads: they return no invocation or session, only how many match.
async fn counts(State(state): Shared, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let query = Query::parse(raw, &[&SEARCH_FILTERS[..], &["group_by"]].concat())?;
        let group_by = params::group_by(query.get("group_by"))?;
        let filter = search_filter(&principal, &query)?;
        let counts = state
            .readers
            .scoped(filter.tenant.as_deref())?
            .read(move |conn| crate::listing::counts(conn, &filter, group_by))
            .await?;
        Ok(json_response(&counts))
    }
    .await;
    finish(&state, "counts", result)
}

async fn sessions(State(state): Shared, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let query_text = raw.clone().unwrap_or_default();
        let query = Query::parse(
            raw,
            &[
                "tenant", "tool_id", "status", "from", "to", "limit", "cursor", "format",
            ],
        )?;
        let ndjson = query.ndjson(&headers)?;
        let filter = SessionFilter {
            tenant: principal.scope(query.get("tenant"))?,
            range: params::time_range(query.get("from"), query.get("to"))?,
            tool_id: query.owned("tool_id"),
            status: query.owned("status"),
            limit: query.limit()?,
            cursor: query.owned("cursor"),
        };
        let scope = filter.tenant.clone();
        let page = state
            .readers
            .scoped(scope.as_deref())?
            .read(move |conn| crate::listing::sessions(conn, &filter))
            .await?;
        let rows = page
            .items
            .iter()
            .map(|s| (s.tenant.clone(), None, Some(s.session_id.clone())));
        state
            .record_scoped(
                &principal,
                "GET /v1/sessions",
                scope.as_deref(),
                Some(&query_text),
                rows,
            )
            .await?;
        Ok(if ndjson {
            ndjson_response(&page.items, page.next_cursor.as_deref())
        } else {
            json_response(&page)
        })
    }
    .await;
    finish(&state, "sessions", result)
}

async fn session(
    State(state): Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let session_id = path_id("session_id", path)?;
        let query = Query::parse(raw, &["tenant", "limit", "cursor", "format"])?;
        let ndjson = query.ndjson(&headers)?;
        let tenant = principal.scope(query.get("tenant"))?;
        let limit = query.limit()?;
        let cursor = query.owned("cursor");
        params::id("session_id", &session_id)?;
        let asked = (tenant.clone(), format!("session_id={session_id}"));
        let id = session_id.clone();
        let read = state
            .read_id(
                tenant,
                "session_id",
                "session",
                &session_id,
                move |conn, tenant| {
                    crate::listing::session_timeline(conn, tenant, &id, limit, cursor.as_deref())
                },
            )
            .await;
        let timeline = match read {
            Err(error @ Error::NotFound { .. }) => {
                let (scope, query) = asked;
                let none = std::iter::empty();
                state
                    .record_scoped(
                        &principal,
                        "GET /v1/sessions/{session_id}",
                        scope.as_deref(),
                        Some(&query),
                        none,
                    )
                    .await?;
                return Err(error);
            }
            read => read?,
        };
        let session = &timeline.session;
        let rows = std::iter::once((session.tenant.clone(), None, Some(session.session_id.clone()))).chain(
            timeline.invocations.iter().map(|i| {
                (
                    i.tenant.clone(),
                    Some(i.invocation_id.clone()),
                    i.session_id.clone(),
                )
            }),
        );
        state
            .record(&principal, "GET /v1/sessions/{session_id}", None, rows)
            .await?;
        Ok(if ndjson {
            ndjson_response(&timeline.events.items, timeline.events.next_cursor.as_deref())
        } else {
            json_response(&timeline)
        })
    }
    .await;
    finish(&state, "session", result)
}

async fn stats(State(state): Shared, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let query = Query::parse(raw, &["tenant", "tool_id", "from", "to", "bucket"])?;
        let (bucket, bucket_ns) = params::bucket(query.get("bucket"))?;
        let filter = StatsFilter {
            tenant: principal.scope(query.get("tenant"))?,
            tool_id: query.owned("tool_id"),
            range: params::time_range(query.get("from"), query.get("to"))?,
            bucket,
            bucket_ns,
        };
        let stats = state
            .readers
            .scoped(filter.tenant.as_deref())?
            .read(move |conn| crate::stats::stats(conn, &filter))
            .await?;
        Ok(json_response(&stats))
    }
    .await;
    finish(&state, "stats", result)
}

async fn tools(State(state): Shared, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let query = Query::parse(raw, &["tenant"])?;
        let tenant = principal.scope(query.get("tenant"))?;
        let tools = state
            .readers
            .scoped(tenant.as_deref())?
            .read(move |conn| crate::catalog::catalog(conn, tenant.as_deref()))
            .await?;
        Ok(json_response(&json!({ "tools": tools })))
    }
    .await;
    finish(&state, "tools", result)
}
