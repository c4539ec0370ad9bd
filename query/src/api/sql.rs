//! `POST /v1/sql`: one read-only statement over the projection, under the projector's sandbox
//! (`toolledger_projector::run_sql_interruptible`).
//!
//! ```text
//! body {sql, tenant?, max_rows?, timeout_ms?} ─▶ scope: the token's tenant (views), or admin (main)
//!   ─▶ a slot of its owner (the tenant; all admins share one), then one of the server's;
//!      each waited for up to SLOT_WAIT, else 503 sql_busy
//!   ─▶ run_sql_interruptible on a blocking thread, which holds both slots until the statement has
//!      stopped; the request dropped (client gone) or the server stopping interrupts it
//!   ─▶ {columns, rows, truncated, elapsed_ms}  + the access records (`crate::access::Reads`)
//! refused ─▶ 400 sql_refused · bad SQL ─▶ 400 sql_invalid · past the time limit ─▶ 422 sql_timeout
//! a value, the answer or SQLite's memory past its bound ─▶ 422 sql_too_large · stopping ─▶ 503 sql_canceled
//! ```
//!
//! Slots are fair between tenants rather than first come: a tenant runs at most [`TENANT_SLOTS`]
//! statements and the server [`SERVER_SLOTS`], so a tenant's runaway statements leave the others
//! slots; every running statement is on the `toolledger_api_sql_running` gauge.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolledger_core::telemetry::Telemetry;
use toolledger_projector::{SqlInterrupt, SqlLimits, SqlResult, SqlScope};
use toolledger_wire::partition::Partition;

use super::{ApiState, Shared, finish, json_response};
use crate::access::Reads;
use crate::auth::{Access, Principal};
use crate::error::{Error, Result};

/// Statements one tenant (or all admins together) runs at once.
pub(super) const TENANT_SLOTS: usize = 2;
/// Statements the server runs at once: each holds a blocking thread and a core for up to its time
/// limit. Twice a tenant's share, so one tenant's runaway statements leave as many for the others.
pub(super) const SERVER_SLOTS: usize = 4;
/// How long a request waits for a slot before it is told to retry.
const SLOT_WAIT: Duration = Duration::from_secs(10);
/// Whose slots admins' statements take: a reserved name no tenant can have.
const ADMINS: &str = "_admin";
/// Row cap when the request names none, and the most a request may ask for.
const DEFAULT_ROWS: usize = 1_000;
const MAX_ROWS: usize = 10_000;
/// Time limit when the request names none, and the most a request may ask for.
const DEFAULT_TIMEOUT_MS: u64 = 5_000;
const MAX_TIMEOUT_MS: u64 = 10_000;

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlRequest {
    sql: String,
    tenant: Option<String>,
    /// An admin's statement over a partitioned ledger: the partition whose projection it reads.
    partition: Option<u16>,
    max_rows: Option<u64>,
    timeout_ms: Option<u64>,
}

impl SqlRequest {
    fn limits(&self) -> Result<SqlLimits> {
        let max_rows = match self.max_rows {
            None => DEFAULT_ROWS,
            Some(n @ 1..=10_000) => usize::try_from(n).unwrap_or(MAX_ROWS),
            Some(_) => return Err(Error::invalid("max_rows", format!("must be 1..={MAX_ROWS}"))),
        };
        let timeout_ms = match self.timeout_ms {
            None => DEFAULT_TIMEOUT_MS,
            Some(ms @ 1..=MAX_TIMEOUT_MS) => ms,
            Some(_) => {
                return Err(Error::invalid(
                    "timeout_ms",
                    format!("must be 1..={MAX_TIMEOUT_MS}"),
                ));
            }
        };
        Ok(SqlLimits {
            timeout: Duration::from_millis(timeout_ms),
            max_rows,
            ..SqlLimits::default()
        })
    }
}

/// The SQL slots: each owner's, the server's, and the statements running in them.
pub(super) struct SqlSlots {
    server: Arc<Semaphore>,
    owners: Mutex<HashMap<String, Arc<Semaphore>>>,
    running: Mutex<Running>,
    /// Statements running, i.e. blocking threads busy with one.
    gauge: Gauge,
}

#[derive(Default)]
struct Running {
    next: u64,
    statements: HashMap<u64, SqlInterrupt>,
    stopping: bool,
}

impl SqlSlots {
    /// Slots for a server whose metrics are `telemetry`'s.
    pub(super) fn new(telemetry: &Telemetry) -> Arc<Self> {
        let gauge = Gauge::default();
        telemetry.register(|registry| {
            registry.register(
                "api_sql_running",
                "Analysts' SQL statements running, each on a blocking thread",
                gauge.clone(),
            );
        });
        Arc::new(Self {
            server: Arc::new(Semaphore::new(SERVER_SLOTS)),
            owners: Mutex::new(HashMap::new()),
            running: Mutex::new(Running::default()),
            gauge,
        })
    }

    /// A slot of `owner` and one of the server's, waiting up to [`SLOT_WAIT`] in all.
    async fn acquire(self: &Arc<Self>, owner: &str) -> Result<SqlSlot> {
        let deadline = tokio::time::Instant::now() + SLOT_WAIT;
        let owners = Arc::clone(
            lock(&self.owners)
                .entry(owner.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(TENANT_SLOTS))),
        );
        let take = |semaphore: Arc<Semaphore>, slots: usize, whose: &'static str| async move {
            match tokio::time::timeout_at(deadline, semaphore.acquire_owned()).await {
                Ok(Ok(permit)) => Ok(permit),
                // Closed: the server is stopping.
                Ok(Err(_)) => Err(Error::SqlCanceled),
                Err(_) => Err(Error::SqlBusy { slots, whose }),
            }
        };
        let owner_permit = take(owners, TENANT_SLOTS, "this tenant").await?;
        let server_permit = take(Arc::clone(&self.server), SERVER_SLOTS, "the server").await?;
        let mut running = lock(&self.running);
        if running.stopping {
            return Err(Error::SqlCanceled);
        }
        let id = running.next;
        running.next += 1;
        let interrupt = SqlInterrupt::new();
        running.statements.insert(id, interrupt.clone());
        self.gauge.inc();
        Ok(SqlSlot {
            slots: Arc::clone(self),
            id,
            interrupt,
            _owner: owner_permit,
            _server: server_permit,
        })
    }

    /// Stops every running statement and turns away those waiting for a slot and any new one: the
    /// server is stopping, and the runtime would wait for the blocking threads they hold.
    pub(super) fn shut_down(&self) {
        let interrupts: Vec<SqlInterrupt> = {
            let mut running = lock(&self.running);
            running.stopping = true;
            running.statements.values().cloned().collect()
        };
        self.server.close();
        for semaphore in lock(&self.owners).values() {
            semaphore.close();
        }
        for interrupt in interrupts {
            interrupt.cancel();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One statement's hold on its slots. It moves into the blocking task and is released when the
/// statement has stopped running, not when the request ends.
struct SqlSlot {
    slots: Arc<SqlSlots>,
    id: u64,
    interrupt: SqlInterrupt,
    _owner: OwnedSemaphorePermit,
    _server: OwnedSemaphorePermit,
}

impl Drop for SqlSlot {
    fn drop(&mut self) {
        lock(&self.slots.running).statements.remove(&self.id);
        self.slots.gauge.dec();
    }
}

/// Interrupts the statement when the request is dropped before its answer: the client went away.
struct CancelOnDrop(Option<SqlInterrupt>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(interrupt) = self.0.take() {
            interrupt.cancel();
        }
    }
}

pub(super) async fn sql(State(state): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let request: SqlRequest = serde_json::from_slice(&body).map_err(|e| {
            Error::invalid(
                "body",
                format!("expected {{\"sql\": …, \"tenant\"?, \"partition\"?, \"max_rows\"?, \"timeout_ms\"?}}: {e}"),
            )
        })?;
        let limits = request.limits()?;
        let scope = match principal.scope(request.tenant.as_deref())? {
            Some(tenant) => SqlScope::Tenant(tenant),
            None => SqlScope::Admin,
        };
        let owner = match (&principal.access, &scope) {
            (Access::Tenants(_), SqlScope::Tenant(tenant)) => tenant.as_str(),
            _ => ADMINS,
        };
        let reader = statement_reader(&state, &scope, request.partition)?;
        let database = reader.database()?;
        let slot = state.sql_slots.acquire(owner).await?;
        let interrupt = slot.interrupt.clone();
        let client_gone = CancelOnDrop(Some(interrupt.clone()));
        let (statement, run_scope) = (request.sql.clone(), scope.clone());
        let outcome = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            toolledger_projector::run_sql_interruptible(&database, &run_scope, &statement, limits, &interrupt)
        })
        .await;
        client_gone.disarm();
        let outcome = outcome
            .map_err(|e| Error::Task(e.to_string()))?
            .map_err(Error::from)
            .inspect_err(|error| reader.failed(error))?;
        record(&state, &principal, (&scope, request.partition), &request.sql, &outcome).await?;
        Ok(json_response(&outcome))
    }
    .await;
    finish(&state, "sql", result)
}

/// The statement's access records ([`Reads`]: a tenant's records never carry another's text): for a
/// tenant scope, that tenant's; for an admin, the tenants in a `tenant` result column, or, when the
/// result has none, every tenant in the projection (it could have read any), each with the
/// statement's digest, and the statement itself in a record of the ledger's own tenant.
async fn record(
    state: &Arc<ApiState>,
    principal: &Principal,
    (scope, partition): (&SqlScope, Option<u16>),
    statement: &str,
    outcome: &SqlResult,
) -> Result<()> {
    if state.access_log.is_none() {
        return Ok(());
    }
    let rows = outcome.rows.len() as u64;
    let tenant_scope = match scope {
        SqlScope::Tenant(tenant) => Some(tenant.as_str()),
        SqlScope::Admin => None,
    };
    let mut reads = Reads::new(principal, "POST /v1/sql", tenant_scope, Some(statement));
    match scope {
        SqlScope::Tenant(tenant) => reads.rows(tenant.clone(), rows),
        SqlScope::Admin => {
            let column = outcome.columns.iter().position(|c| c == "tenant");
            let mut found = false;
            if let Some(column) = column {
                for row in &outcome.rows {
                    if let Some(Value::String(tenant)) = row.get(column)
                        && crate::params::tenant(tenant).is_ok()
                    {
                        reads.rows(tenant.clone(), 1);
                        found = true;
                    }
                }
            }
            if column.is_none() || (!found && rows > 0) {
                let reader = statement_reader(state, scope, partition)?;
                for tenant in reader.read(known_tenants).await? {
                    reads.rows(tenant, rows);
                }
            }
        }
    }
    state.publish(reads).await
}

/// The projection a statement reads: its tenant's partition's, or the one an admin names (`partition`,
/// required over a partitioned ledger: each partition has its own projection).
fn statement_reader<'a>(
    state: &'a ApiState,
    scope: &SqlScope,
    partition: Option<u16>,
) -> Result<&'a Arc<crate::reader::Reader>> {
    let readers = &state.readers;
    match (scope, partition) {
        (SqlScope::Tenant(tenant), None) => readers.scoped(Some(tenant)),
        // Its own partition, or p0, which holds the ledger's records about it (`access_reads`,
        // `erasures`): its views show its rows only, wherever they are read.
        (SqlScope::Tenant(tenant), Some(index)) => {
            let named = readers.partition("partition", &index.to_string())?;
            let home = readers.partitions().of(tenant);
            if named == home || named == Partition::ZERO {
                Ok(readers.of(named))
            } else {
                Err(Error::invalid(
                    "partition",
                    format!(
                        "tenant `{tenant}` lives in partition {} (the ledger's records about it in 0), not {index}",
                        home.index()
                    ),
                ))
            }
        }
        (SqlScope::Admin, Some(index)) => Ok(readers.of(readers.partition("partition", &index.to_string())?)),
        (SqlScope::Admin, None) if readers.partitions().count() == 1 => readers.scoped(None),
        (SqlScope::Admin, None) => Err(Error::invalid(
            "partition",
            format!(
                "required: the ledger has {} partitions (ledger.partitions), each with its own \
                 projection; name the tenant or the partition the statement reads (docs/scaling.md)",
                readers.partitions().count()
            ),
        )),
    }
}

/// Every producer tenant with entries in the projection.
fn known_tenants(conn: &rusqlite::Connection) -> Result<Vec<String>> {
    let sql = |source| Error::Sql {
        context: "known tenants",
        source,
    };
    let mut statement = conn
        .prepare_cached("SELECT DISTINCT tenant FROM events WHERE tenant NOT LIKE '\\_%' ESCAPE '\\'")
        .map_err(sql)?;
    statement
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(sql)?
        .collect::<rusqlite::Result<_>>()
        .map_err(sql)
}
