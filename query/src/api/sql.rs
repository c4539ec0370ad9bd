//! `POST /v1/sql`: one read-only statement over the projection, under the projector's sandbox
//! (`toolledger_projector::run_sql`).
//!
//! ```text
//! body {sql, tenant?, max_rows?, timeout_ms?} ─▶ scope: the token's tenant (views), or admin (main)
//!   ─▶ a SQL slot (semaphore; waits up to SLOT_WAIT, else 503 sql_busy)
//!   ─▶ run_sql on a blocking thread (authorizer, time limit, row cap)
//!   ─▶ {columns, rows, truncated, elapsed_ms}  + one access read per tenant read
//! refused ─▶ 400 sql_refused · bad SQL ─▶ 400 sql_invalid · past the time limit ─▶ 422 sql_timeout
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use toolledger_projector::{SqlLimits, SqlResult, SqlScope};

use super::{ApiState, Shared, finish, json_response};
use crate::access::AccessRead;
use crate::auth::Principal;
use crate::error::{Error, Result};

/// Statements allowed to run at once (see `ApiState::sql_slots`).
pub(super) const SLOTS: usize = 2;
/// How long a request waits for a slot before it is told to retry.
const SLOT_WAIT: Duration = Duration::from_secs(10);
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
        })
    }
}

pub(super) async fn sql(State(state): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let request: SqlRequest = serde_json::from_slice(&body).map_err(|e| {
            Error::invalid(
                "body",
                format!("expected {{\"sql\": …, \"tenant\"?, \"max_rows\"?, \"timeout_ms\"?}}: {e}"),
            )
        })?;
        let limits = request.limits()?;
        let scope = match principal.scope(request.tenant.as_deref())? {
            Some(tenant) => SqlScope::Tenant(tenant),
            None => SqlScope::Admin,
        };
        let _slot = tokio::time::timeout(SLOT_WAIT, state.sql_slots.acquire())
            .await
            .map_err(|_| Error::SqlBusy { running: SLOTS })?
            .map_err(|_| Error::SqlBusy { running: SLOTS })?;
        let database = state.reader.database()?;
        let statement = request.sql.clone();
        let run_scope = scope.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            toolledger_projector::run_sql(&database, &run_scope, &statement, limits)
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))?
        .map_err(Error::from)?;
        record(&state, &principal, &scope, &request.sql, &outcome).await?;
        Ok(json_response(&outcome))
    }
    .await;
    finish(&state, "sql", result)
}

/// One access read per tenant whose rows the statement may have returned: the scope's tenant; for an
/// admin, the values of a `tenant` column when the result has one, else every tenant in the
/// projection (the statement could have read any of them).
async fn record(
    state: &Arc<ApiState>,
    principal: &Principal,
    scope: &SqlScope,
    statement: &str,
    outcome: &SqlResult,
) -> Result<()> {
    let Some(log) = &state.access_log else {
        return Ok(());
    };
    let rows = outcome.rows.len() as u64;
    let mut by_tenant: BTreeMap<String, u64> = BTreeMap::new();
    match scope {
        SqlScope::Tenant(tenant) => {
            by_tenant.insert(tenant.clone(), rows);
        }
        SqlScope::Admin => {
            let column = outcome.columns.iter().position(|c| c == "tenant");
            if let Some(column) = column {
                for row in &outcome.rows {
                    if let Some(Value::String(tenant)) = row.get(column)
                        && crate::params::tenant(tenant).is_ok()
                    {
                        *by_tenant.entry(tenant.clone()).or_default() += 1;
                    }
                }
            }
            if column.is_none() || (by_tenant.is_empty() && rows > 0) {
                for tenant in state.reader.read(known_tenants).await? {
                    by_tenant.insert(tenant, rows);
                }
            }
        }
    }
    for (tenant, row_count) in by_tenant {
        log.record(AccessRead {
            tenant,
            principal: principal.name.clone(),
            endpoint: "POST /v1/sql",
            invocation_ids: Vec::new(),
            session_ids: Vec::new(),
            query: Some(statement.to_owned()),
            row_count,
        })
        .await;
    }
    Ok(())
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
