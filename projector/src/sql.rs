//! Read-only SQL for analysts over a projection, confined to one tenant's rows.
//!
//! ```text
//! open read-only ─▶ one TEMP view per table with a `tenant` column, named like the table:
//!                   CREATE TEMP VIEW invocations AS SELECT * FROM main.invocations WHERE tenant = 'acme'
//!   ─▶ limits (statement length, string/blob size, expression depth …)
//!   ─▶ authorizer: SELECT, function calls (minus a deny list) and recursive CTEs; reads of main
//!      tables only through those views (an admin reads main directly); everything else — writes,
//!      DDL, ATTACH, PRAGMA (pragma functions too), transactions — denied at prepare time
//!   ─▶ progress handler: interrupts past the time limit ─▶ rows up to the row limit
//! ```
//!
//! Unqualified names resolve to TEMP first, so `SELECT … FROM invocations` reads the view; a query that
//! names `main.invocations` reads the table without a view in between and is refused. A tenant's caller
//! can therefore never see another tenant's rows, whatever joins, subqueries or CTEs it writes, and no
//! statement can change anything (the connection is read-only as well).

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;
use serde_json::Value;

use crate::error::SqlContext;
use crate::{Error, Result};

/// Functions no analyst needs that could reach outside the database or exhaust memory.
const DENIED_FUNCTIONS: &[&str] = &[
    "load_extension",
    "fts3_tokenizer",
    "zeroblob",
    "randomblob",
    "readfile",
    "writefile",
    "edit",
];

/// Whose rows a statement may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlScope {
    /// One tenant's rows, through views.
    Tenant(String),
    /// Every table, every tenant.
    Admin,
}

/// Bounds on one statement.
#[derive(Debug, Clone, Copy)]
pub struct SqlLimits {
    /// Wall time before the statement is interrupted.
    pub timeout: Duration,
    /// Rows returned at most; the result says when more were cut.
    pub max_rows: usize,
}

impl Default for SqlLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            max_rows: 10_000,
        }
    }
}

/// What a statement returned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SqlResult {
    /// Column names.
    pub columns: Vec<String>,
    /// Rows, each value as JSON (blobs as lowercase hex).
    pub rows: Vec<Vec<Value>>,
    /// Whether rows beyond `max_rows` were cut.
    pub truncated: bool,
    /// How long the statement ran, in milliseconds.
    pub elapsed_ms: u64,
}

/// Runs one read-only statement against the projection at `database` within `scope` and `limits`.
pub fn run_sql(database: &Path, scope: &SqlScope, statement: &str, limits: SqlLimits) -> Result<SqlResult> {
    let refused = |reason: String| Error::SqlRefused { reason };
    if statement.len() > 100_000 {
        return Err(refused("the statement is longer than 100000 bytes".to_owned()));
    }
    let keyword = first_keyword(statement).to_ascii_uppercase();
    if !matches!(keyword.as_str(), "SELECT" | "WITH" | "VALUES") {
        return Err(refused(format!(
            "{} is not allowed: statements are read-only (SELECT, WITH … SELECT, VALUES)",
            if keyword.is_empty() {
                "an empty statement"
            } else {
                keyword.as_str()
            }
        )));
    }
    if *scope != SqlScope::Admin && names_main_schema(statement) {
        return Err(refused(
            "schema-qualified names (main.…) are not allowed: the tables are the tenant's views".to_owned(),
        ));
    }
    let conn = Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .sql("open read-only")?;
    conn.busy_timeout(Duration::from_secs(5)).sql("busy_timeout")?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        .sql("list tables")?
        .query_map([], |row| row.get(0))
        .sql("list tables")?
        .collect::<rusqlite::Result<_>>()
        .sql("list tables")?;
    let views = match scope {
        SqlScope::Tenant(tenant) => tenant_views(&conn, tenant)?,
        SqlScope::Admin => Vec::new(),
    };
    // Bounds a statement cannot raise: results of string functions, expression depth, columns …
    let _ = conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, 16 * 1024 * 1024);
    let _ = conn.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, 100_000);
    let _ = conn.set_limit(Limit::SQLITE_LIMIT_EXPR_DEPTH, 200);
    let _ = conn.set_limit(Limit::SQLITE_LIMIT_COMPOUND_SELECT, 50);
    let _ = conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0);
    let admin = *scope == SqlScope::Admin;
    let denied = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let record = denied.clone();
    conn.authorizer(Some(move |context: AuthContext<'_>| {
        let verdict = authorize(&context, admin, &views, &tables);
        if let Err(reason) = &verdict
            && let Ok(mut slot) = record.lock()
        {
            slot.get_or_insert_with(|| reason.clone());
        }
        match verdict {
            Ok(()) => Authorization::Allow,
            Err(_) => Authorization::Deny,
        }
    }));

    let started = Instant::now();
    let deadline = started + limits.timeout;
    conn.progress_handler(10_000, Some(move || Instant::now() > deadline));

    let denial = |error: rusqlite::Error| {
        let reason = denied.lock().ok().and_then(|mut slot| slot.take());
        match (reason, &error) {
            (Some(reason), _) => Error::SqlRefused { reason },
            (None, rusqlite::Error::SqliteFailure(failure, _))
                if failure.code == rusqlite::ErrorCode::OperationInterrupted =>
            {
                Error::SqlTimeout {
                    limit_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
                }
            }
            (None, _) => Error::SqlInvalid {
                reason: error.to_string(),
            },
        }
    };
    let mut prepared = conn.prepare(statement).map_err(denial)?;
    if !prepared.readonly() {
        return Err(refused(
            "only read-only statements (SELECT, WITH … SELECT) are allowed".to_owned(),
        ));
    }
    let columns: Vec<String> = prepared.column_names().iter().map(|c| (*c).to_owned()).collect();
    let width = columns.len();
    let mut rows = prepared.query([]).map_err(denial)?;
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(row) = rows.next().map_err(denial)? {
        if out.len() == limits.max_rows {
            truncated = true;
            break;
        }
        let mut values = Vec::with_capacity(width);
        for index in 0..width {
            values.push(json_value(row.get_ref(index).map_err(denial)?));
        }
        out.push(values);
    }
    Ok(SqlResult {
        columns,
        rows: out,
        truncated,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Creates one TEMP view per table that has a `tenant` column; returns their names.
fn tenant_views(conn: &Connection, tenant: &str) -> Result<Vec<String>> {
    // Tenant tokens are [A-Za-z0-9][A-Za-z0-9_-]{0,63}: safe inside a quoted literal; anything else is
    // refused before it gets near SQL.
    let valid = !tenant.is_empty()
        && tenant.len() <= 64
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && tenant.as_bytes()[0].is_ascii_alphanumeric();
    if !valid {
        return Err(Error::SqlRefused {
            reason: format!("`{tenant}` is not a tenant name"),
        });
    }
    let tables: Vec<String> = conn
        .prepare(
            "SELECT m.name FROM sqlite_master m
             WHERE m.type = 'table' AND EXISTS (SELECT 1 FROM pragma_table_info(m.name) WHERE name = 'tenant')
             ORDER BY m.name",
        )
        .sql("list tenant tables")?
        .query_map([], |row| row.get(0))
        .sql("list tenant tables")?
        .collect::<rusqlite::Result<_>>()
        .sql("list tenant tables")?;
    for table in &tables {
        conn.execute_batch(&format!(
            "CREATE TEMP VIEW \"{table}\" AS SELECT * FROM main.\"{table}\" WHERE tenant = '{tenant}'"
        ))
        .sql("create tenant view")?;
    }
    Ok(tables)
}

/// The statement's first word, after whitespace and comments.
fn first_keyword(statement: &str) -> &str {
    let mut rest = statement;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else {
            break;
        }
    }
    let end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    &rest[..end]
}

/// Whether `statement` qualifies a name with the `main` schema, in any quoting (`main.t`, `"MAIN".t`,
/// `[main].t`, and `'main'.t`, which SQLite reads as an identifier too).
///
/// The authorizer alone is not enough: SQLite reports no column read for a table joined only through
/// `USING (…)`, so `JOIN main.sessions USING (session_id)` would reach another tenant's rows as an
/// existence oracle (the test caught it). Unqualified names resolve to the TEMP views and ATTACH is
/// denied, so `main` is the only way to name a stored table: refusing it closes every such path.
fn names_main_schema(statement: &str) -> bool {
    let chars: Vec<char> = statement.chars().collect();
    let mut i = 0;
    let mut last_was_main = false;
    let quoted = |i: &mut usize, close: char| {
        let mut text = String::new();
        *i += 1;
        while *i < chars.len() {
            if chars[*i] == close {
                if chars.get(*i + 1) == Some(&close) && close != ']' {
                    text.push(close);
                    *i += 2;
                    continue;
                }
                *i += 1;
                break;
            }
            text.push(chars[*i]);
            *i += 1;
        }
        text
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
            continue;
        }
        if c == '.' && last_was_main {
            return true;
        }
        let token = match c {
            '\'' => Some(quoted(&mut i, '\'')),
            '"' => Some(quoted(&mut i, '"')),
            '`' => Some(quoted(&mut i, '`')),
            '[' => Some(quoted(&mut i, ']')),
            c if c.is_alphanumeric() || c == '_' || c == '$' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$') {
                    i += 1;
                }
                Some(chars[start..i].iter().collect())
            }
            _ => {
                i += 1;
                None
            }
        };
        last_was_main = token.is_some_and(|t| t.eq_ignore_ascii_case("main"));
    }
    false
}

/// The rule for one action the statement needs.
fn authorize(
    context: &AuthContext<'_>,
    admin: bool,
    views: &[String],
    tables: &[String],
) -> std::result::Result<(), String> {
    match context.action {
        AuthAction::Select | AuthAction::Recursive => Ok(()),
        AuthAction::Function { function_name } => {
            if DENIED_FUNCTIONS
                .iter()
                .any(|f| f.eq_ignore_ascii_case(function_name))
            {
                Err(format!("function {function_name}() is not allowed"))
            } else {
                Ok(())
            }
        }
        AuthAction::Read { table_name, .. } => {
            let database = context.database_name.unwrap_or("main");
            // TEMP holds only the views; json_each/json_tree are table-valued functions over values.
            if database == "temp" || matches!(table_name, "json_each" | "json_tree") {
                return Ok(());
            }
            if admin {
                return Ok(());
            }
            // A recursive CTE's own table is read as `main.<cte>`: fine unless the name is a stored
            // table, SQLite's own (sqlite_master, sqlite_dbpage …) or a virtual table over pages.
            let stored = tables.iter().any(|t| t.eq_ignore_ascii_case(table_name))
                || table_name.to_ascii_lowercase().starts_with("sqlite_")
                || table_name.to_ascii_lowercase().starts_with("pragma_")
                || table_name.eq_ignore_ascii_case("dbstat");
            if table_name.to_ascii_lowercase().starts_with("pragma_") {
                return Err(format!("PRAGMA function {table_name} is not allowed"));
            }
            if !stored {
                return Ok(());
            }
            match context.accessor {
                Some(view) if views.iter().any(|v| v == view) && view == table_name => Ok(()),
                _ => Err(format!(
                    "table {database}.{table_name} is readable only through the tenant's view `{table_name}`"
                )),
            }
        }
        AuthAction::Pragma { pragma_name, .. } => Err(format!("PRAGMA {pragma_name} is not allowed")),
        AuthAction::Attach { .. } | AuthAction::Detach { .. } => {
            Err("ATTACH and DETACH are not allowed".to_owned())
        }
        _ => Err(format!(
            "{:?} is not allowed: statements are read-only",
            context.action
        )),
    }
}

fn json_value(value: rusqlite::types::ValueRef<'_>) -> Value {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::String(toolledger_wire::entry::hex(b)),
    }
}
