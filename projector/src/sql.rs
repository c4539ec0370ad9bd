//! Read-only SQL for analysts over a projection: confined to one tenant's rows, bounded in time and
//! in size whatever the statement does.
//!
//! ```text
//! open read-only ─▶ one TEMP view per exposed table (TENANT_TABLES, an allow-list), named like it:
//!                   CREATE TEMP VIEW invocations AS SELECT * FROM main.invocations WHERE tenant = 'acme'
//!   ─▶ limits: statement 100 000 bytes, any string or blob 4 MiB, LIKE/GLOB pattern 1 000 bytes,
//!      expression depth, compound SELECTs; SQLite's heap in this process at most 256 MiB
//!   ─▶ functions: an allow-list; those whose cost is the product of their inputs' sizes (instr,
//!      replace, trim with a set, like, glob) replaced by ports that watch the interrupt (`functions`)
//!   ─▶ authorizer, at prepare: SELECT, allowed functions, recursive CTEs; a tenant reads stored
//!      tables only through its views; writes, DDL, ATTACH, PRAGMA, transactions denied
//!   ─▶ a tenant's statement only: its EXPLAIN — every b-tree it opens must be an exposed table or one
//!      of its indexes, every virtual table json_each or json_tree
//!   ─▶ run: a watchdog thread interrupts it at the deadline, a caller's SqlInterrupt at any time
//!      (client gone, shutdown); rows up to max_rows, the answer's JSON up to max_bytes
//! ```
//!
//! Unqualified names resolve to TEMP first, so `SELECT … FROM invocations` reads the view; a query that
//! names `main.invocations` would read the table without a view in between and is refused. Isolation
//! is decided by allow-lists, so it holds for tables added later: a table is a tenant's only when it is
//! in [`TENANT_TABLES`] (and has a `tenant` column to filter on); anything else — `meta`, `position`,
//! SQLite's own tables, any future table — is refused, by the authorizer when the statement names a
//! column of it and by the EXPLAIN check when it does not (SQLite reports no column read for a table
//! joined only through `USING (…)`). No statement can change anything: the connection is read-only too.
//!
//! Time: SQLite sees an interrupt only between its VM operations, so every single operation must be
//! short. Strings and blobs are at most 4 MiB, which keeps every linear function to milliseconds; the
//! few built-ins whose work is the product of two inputs are replaced by ports that check the interrupt
//! as they go. The deadline is kept by a watchdog thread (`sqlite3_interrupt`), by the progress handler
//! (between VM operations) and by those ports.
//!
//! Memory: a value is at most 4 MiB, the answer at most `max_bytes` of JSON, and SQLite's heap in the
//! whole process at most 256 MiB (`PRAGMA hard_heap_limit`, process-wide: it bounds the JSON
//! aggregates and `json_pretty`, which grow their text without consulting the length limit).

mod functions;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::Serialize;
use serde_json::Value;

use crate::error::SqlContext;
use crate::{Error, Result};

/// The tables a tenant's statements may read, each through a view of its rows (`WHERE tenant = …`).
/// An allow-list: a table not named here — `meta`, `position`, SQLite's own, any table added later —
/// is not readable by a tenant, whatever the statement does. Every one must have a `tenant` column
/// that says whose row it is (a listed table without one is refused at open, never exposed whole).
pub const TENANT_TABLES: &[&str] = &[
    "events",
    "sessions",
    "invocations",
    "invocation_transitions",
    "invocation_external_ids",
    "input_mutations",
    "permission_requests",
    "permission_decisions",
    "hooks",
    "progress",
    "results",
    "result_persistence",
    "tools",
    "tool_versions",
    "tool_aliases",
    "tool_lifecycle",
    "tool_external_mappings",
    "surfaces",
    "surface_revisions",
    "surface_tools",
    "deferred_tools",
    "deferred_loading",
    "quarantine_receipts",
    "access_reads",
    "erasures",
    "erased_blobs",
    "anomalies",
];

/// The longest string or blob a statement may read or make (`SQLITE_LIMIT_LENGTH`): twice the largest
/// ledger entry NATS carries by default (1 MiB), and small enough that a linear function over it takes
/// milliseconds. Past it SQLite stops the statement with "string or blob too big".
pub const MAX_VALUE_BYTES: usize = 4 * 1024 * 1024;
/// The longest statement accepted.
pub const MAX_STATEMENT_BYTES: usize = 100_000;
/// The longest LIKE or GLOB pattern: the match is recursive in the pattern's wildcards.
pub const MAX_PATTERN_BYTES: usize = 1_000;
/// SQLite's heap in this process (every connection, not only the sandbox's): statements that need
/// more fail with `SqlTooLarge` instead of taking the machine's memory. Set once, only ever lowered.
pub const SQLITE_HEAP_LIMIT_BYTES: u64 = 256 * 1024 * 1024;
/// The answer's JSON when the caller names no bound.
pub const DEFAULT_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Functions a statement may call: SQLite's core, date, JSON, aggregate and window functions. Not
/// listed, so refused: extension loading, full-text and R-tree helpers (no such tables here),
/// `sqlite_log`, `zeroblob`/`randomblob`, and `json_patch`/`jsonb_patch`, whose merge compares every
/// key of one object with every key of the other in one uninterruptible call.
const ALLOWED_FUNCTIONS: &[&str] = &[
    "->",
    "->>",
    "abs",
    "avg",
    "char",
    "coalesce",
    "concat",
    "concat_ws",
    "count",
    "cume_dist",
    "current_date",
    "current_time",
    "current_timestamp",
    "date",
    "datetime",
    "dense_rank",
    "first_value",
    "format",
    "glob",
    "group_concat",
    "hex",
    "if",
    "ifnull",
    "iif",
    "instr",
    "json",
    "json_array",
    "json_array_length",
    "json_error_position",
    "json_extract",
    "json_group_array",
    "json_group_object",
    "json_insert",
    "json_object",
    "json_pretty",
    "json_quote",
    "json_remove",
    "json_replace",
    "json_set",
    "json_type",
    "json_valid",
    "jsonb",
    "jsonb_array",
    "jsonb_extract",
    "jsonb_group_array",
    "jsonb_group_object",
    "jsonb_insert",
    "jsonb_object",
    "jsonb_remove",
    "jsonb_replace",
    "jsonb_set",
    "julianday",
    "lag",
    "last_value",
    "lead",
    "length",
    "like",
    "likelihood",
    "likely",
    "lower",
    "ltrim",
    "max",
    "min",
    "nth_value",
    "ntile",
    "nullif",
    "octet_length",
    "percent_rank",
    "printf",
    "quote",
    "random",
    "rank",
    "replace",
    "round",
    "row_number",
    "rtrim",
    "sign",
    "soundex",
    "sqlite_version",
    "strftime",
    "string_agg",
    "substr",
    "substring",
    "subtype",
    "sum",
    "time",
    "timediff",
    "total",
    "trim",
    "typeof",
    "unhex",
    "unicode",
    "unistr",
    "unistr_quote",
    "unixepoch",
    "unlikely",
    "upper",
];

/// Table-valued functions a statement may read: JSON walked as rows.
const ALLOWED_VIRTUAL_TABLES: [&str; 2] = ["json_each", "json_tree"];

/// `OPFLAG_P2ISREG`: an `OpenRead` whose P2 is a register, not a root page.
const P2_IS_REGISTER: i64 = 0x10;

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
    /// The answer's rows as JSON, at most; past it the statement fails with `SqlTooLarge` (cutting
    /// rows silently would hide that the answer is incomplete for another reason than `max_rows`).
    pub max_bytes: usize,
}

impl Default for SqlLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            max_rows: 10_000,
            max_bytes: DEFAULT_MAX_BYTES,
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

/// Why a statement stopped early.
const RUNNING: u8 = 0;
const PAST_DEADLINE: u8 = 1;
const CANCELED: u8 = 2;

/// Stops a statement from another thread, whatever it is doing: the caller keeps a clone and calls
/// [`SqlInterrupt::cancel`] when the answer is no longer wanted (the client went away, the server
/// stops). Canceled before the statement starts, the statement does not start.
#[derive(Clone, Default)]
pub struct SqlInterrupt {
    state: Arc<InterruptState>,
}

#[derive(Default)]
struct InterruptState {
    /// `RUNNING`, or why it was stopped; the first reason stays.
    reason: AtomicU8,
    /// The connection's handle while the statement runs.
    handle: Mutex<Option<rusqlite::InterruptHandle>>,
}

impl std::fmt::Debug for SqlInterrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlInterrupt")
            .field("reason", &self.reason())
            .finish()
    }
}

impl SqlInterrupt {
    /// An interrupt for one statement.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the statement now, or before it starts; it ends with [`Error::SqlCanceled`].
    pub fn cancel(&self) {
        self.stop(CANCELED);
    }

    /// Whether [`SqlInterrupt::cancel`] was called before anything else stopped the statement.
    pub fn is_canceled(&self) -> bool {
        self.reason() == CANCELED
    }

    fn reason(&self) -> u8 {
        self.state.reason.load(Ordering::SeqCst)
    }

    fn stop(&self, reason: u8) {
        if self
            .state
            .reason
            .compare_exchange(RUNNING, reason, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            && let Some(handle) = self.handle().as_ref()
        {
            handle.interrupt();
        }
    }

    /// Keeps the connection's handle for [`SqlInterrupt::stop`]; false when already stopped. An
    /// interrupt that arrives before SQLite starts the statement is lost by SQLite (it clears the flag
    /// when a statement starts), so the progress handler and the ported functions check `reason` too.
    fn attach(&self, handle: rusqlite::InterruptHandle) -> bool {
        *self.handle() = Some(handle);
        self.reason() == RUNNING
    }

    fn detach(&self) {
        self.handle().take();
    }

    fn handle(&self) -> std::sync::MutexGuard<'_, Option<rusqlite::InterruptHandle>> {
        self.state.handle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The interrupt and the deadline, as the statement's own code checks them (the progress handler
/// between VM operations, the ported functions as they work).
#[derive(Clone)]
struct Guard {
    interrupt: SqlInterrupt,
    deadline: Instant,
}

impl Guard {
    fn should_stop(&self) -> bool {
        if self.interrupt.reason() != RUNNING {
            return true;
        }
        if Instant::now() >= self.deadline {
            self.interrupt.stop(PAST_DEADLINE);
            return true;
        }
        false
    }
}

/// Interrupts the statement at its deadline from a thread of its own, so the deadline holds whatever
/// the statement is doing; dropping it (the statement ended) wakes the thread, which then exits.
struct Watchdog {
    _ended: mpsc::Sender<()>,
}

fn watchdog(interrupt: &SqlInterrupt, deadline: Instant) -> Option<Watchdog> {
    let (ended, wait) = mpsc::channel::<()>();
    let interrupt = interrupt.clone();
    let spawned = std::thread::Builder::new()
        .name("sql-watchdog".to_owned())
        .spawn(move || {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(left) {
                interrupt.stop(PAST_DEADLINE);
            }
        });
    match spawned {
        Ok(_) => Some(Watchdog { _ended: ended }),
        Err(error) => {
            // The progress handler and the ported functions still keep the deadline.
            tracing::warn!(%error, "no sql watchdog thread");
            None
        }
    }
}

/// Runs one read-only statement against the projection at `database` within `scope` and `limits`.
pub fn run_sql(database: &Path, scope: &SqlScope, statement: &str, limits: SqlLimits) -> Result<SqlResult> {
    run_sql_interruptible(database, scope, statement, limits, &SqlInterrupt::new())
}

/// [`run_sql`], stoppable from another thread through `interrupt` (then [`Error::SqlCanceled`]).
pub fn run_sql_interruptible(
    database: &Path,
    scope: &SqlScope,
    statement: &str,
    limits: SqlLimits,
    interrupt: &SqlInterrupt,
) -> Result<SqlResult> {
    let refused = |reason: String| Error::SqlRefused { reason };
    if statement.len() > MAX_STATEMENT_BYTES {
        return Err(refused(format!(
            "the statement is longer than {MAX_STATEMENT_BYTES} bytes"
        )));
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
    let started = Instant::now();
    let guard = Guard {
        interrupt: interrupt.clone(),
        deadline: started + limits.timeout,
    };
    let conn = Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .sql("open read-only")?;
    conn.busy_timeout(limits.timeout.min(Duration::from_secs(5)))
        .sql("busy_timeout")?;
    let catalog = match scope {
        SqlScope::Tenant(tenant) => Some(Arc::new(Catalog::read(&conn, tenant)?)),
        SqlScope::Admin => None,
    };
    bound(&conn)?;
    let denied = Arc::new(Mutex::new(None::<String>));
    functions::install(&conn, &guard, &denied).sql("install bounded functions")?;
    let record = Arc::clone(&denied);
    let rules = catalog.clone();
    conn.authorizer(Some(move |context: AuthContext<'_>| {
        let verdict = authorize(&context, rules.as_deref());
        if let Err(reason) = &verdict {
            record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(|| reason.clone());
        }
        match verdict {
            Ok(()) => Authorization::Allow,
            Err(_) => Authorization::Deny,
        }
    }));
    let checks = guard.clone();
    conn.progress_handler(1_000, Some(move || checks.should_stop()));

    let classify = |error: rusqlite::Error| classify(error, interrupt, &denied, limits.timeout);
    if !interrupt.attach(conn.get_interrupt_handle()) {
        return Err(classify(rusqlite::Error::InvalidQuery));
    }
    let _watchdog = watchdog(interrupt, guard.deadline);
    let result = execute(&conn, statement, catalog.as_deref(), limits, started, &classify);
    interrupt.detach();
    result
}

/// Bounds a statement cannot raise: string and blob sizes, statement length, expression depth,
/// compound SELECTs, LIKE patterns, attached databases; and SQLite's heap in this process.
fn bound(conn: &Connection) -> Result<()> {
    let limits = [
        (Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES),
        // Room for the EXPLAIN the tenant check prepares in front of the statement.
        (Limit::SQLITE_LIMIT_SQL_LENGTH, MAX_STATEMENT_BYTES + 16),
        (Limit::SQLITE_LIMIT_EXPR_DEPTH, 200),
        (Limit::SQLITE_LIMIT_COMPOUND_SELECT, 50),
        (Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_PATTERN_BYTES),
        (Limit::SQLITE_LIMIT_ATTACHED, 0),
    ];
    for (limit, value) in limits {
        conn.set_limit(limit, i32::try_from(value).unwrap_or(i32::MAX))
            .sql("set limit")?;
    }
    // Lowers the process's limit to this, or keeps a lower one already set.
    conn.query_row(
        &format!("PRAGMA hard_heap_limit = {SQLITE_HEAP_LIMIT_BYTES}"),
        [],
        |row| row.get::<_, i64>(0),
    )
    .sql("hard heap limit")?;
    Ok(())
}

/// What stopped a statement, in the caller's terms: the interrupt's reason first (an interrupted
/// statement fails with whatever SQLite was doing), then the authorizer's refusal, then size limits.
fn classify(
    error: rusqlite::Error,
    interrupt: &SqlInterrupt,
    denied: &Mutex<Option<String>>,
    timeout: Duration,
) -> Error {
    let timed_out = || Error::SqlTimeout {
        limit_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    };
    match interrupt.reason() {
        PAST_DEADLINE => return timed_out(),
        CANCELED => return Error::SqlCanceled,
        _ => {}
    }
    if let Some(reason) = denied.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Error::SqlRefused { reason };
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::TooBig) => Error::SqlTooLarge {
            what: "a string or blob",
            limit_bytes: MAX_VALUE_BYTES as u64,
        },
        Some(ErrorCode::OutOfMemory) => Error::SqlTooLarge {
            what: "SQLite's memory in this process",
            limit_bytes: SQLITE_HEAP_LIMIT_BYTES,
        },
        Some(ErrorCode::OperationInterrupted) => timed_out(),
        _ => Error::SqlInvalid {
            reason: error.to_string(),
        },
    }
}

fn execute(
    conn: &Connection,
    statement: &str,
    catalog: Option<&Catalog>,
    limits: SqlLimits,
    started: Instant,
    classify: &dyn Fn(rusqlite::Error) -> Error,
) -> Result<SqlResult> {
    let mut prepared = conn.prepare(statement).map_err(classify)?;
    if !prepared.readonly() {
        return Err(Error::SqlRefused {
            reason: "only read-only statements (SELECT, WITH … SELECT) are allowed".to_owned(),
        });
    }
    if let Some(catalog) = catalog {
        catalog.check_opens(conn, statement, classify)?;
    }
    let columns: Vec<String> = prepared.column_names().iter().map(|c| (*c).to_owned()).collect();
    let width = columns.len();
    let mut answer = AnswerSize::new(limits.max_bytes);
    for column in &columns {
        answer.add(&Value::from(column.as_str()))?;
    }
    let mut rows = prepared.query([]).map_err(classify)?;
    let mut out = Vec::new();
    let mut truncated = false;
    while let Some(row) = rows.next().map_err(classify)? {
        if out.len() == limits.max_rows {
            truncated = true;
            break;
        }
        let mut values = Vec::with_capacity(width);
        for index in 0..width {
            let value = json_value(row.get_ref(index).map_err(classify)?);
            answer.add(&value)?;
            values.push(value);
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

/// The answer's JSON so far: each value as it serializes, plus its separator.
struct AnswerSize {
    bytes: usize,
    limit: usize,
}

impl AnswerSize {
    fn new(limit: usize) -> Self {
        Self { bytes: 0, limit }
    }

    fn add(&mut self, value: &Value) -> Result<()> {
        let mut counter = ByteCounter(0);
        // Writing to a counter cannot fail; a failure would only undercount by this value.
        let _ = serde_json::to_writer(&mut counter, value);
        self.bytes = self.bytes.saturating_add(counter.0 + 1);
        if self.bytes > self.limit {
            return Err(Error::SqlTooLarge {
                what: "the answer",
                limit_bytes: self.limit as u64,
            });
        }
        Ok(())
    }
}

struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the sandbox knows of a tenant's database before the statement: its views, every stored
/// name, and the b-trees and virtual tables the tenant's statements may open.
struct Catalog {
    /// The tenant's views: the exposed tables this projection has, lowercase.
    views: Vec<String>,
    /// Lowercase names of everything stored in `main` (tables, indexes, views, triggers) and of every
    /// virtual-table module: names a recursive CTE's own table cannot be taken for.
    stored: HashSet<String>,
    /// Root pages of the exposed tables and of their indexes.
    readable_roots: HashSet<i64>,
    /// Every b-tree of `main` by root page, for refusals that name what was reached.
    root_names: HashMap<i64, String>,
    /// json_each's and json_tree's handles on this connection, as EXPLAIN prints them (`vtab:…`).
    virtual_tables: HashSet<String>,
}

impl Catalog {
    /// Reads the schema and creates the tenant's TEMP views (before the authorizer is installed).
    fn read(conn: &Connection, tenant: &str) -> Result<Self> {
        // Tenant tokens are [A-Za-z0-9][A-Za-z0-9_-]{0,63}: safe inside a quoted literal; anything
        // else is refused before it gets near SQL.
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
        let objects: Vec<(String, String, String, i64)> = conn
            .prepare("SELECT type, name, tbl_name, coalesce(rootpage, 0) FROM sqlite_master")
            .sql("read schema")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
            .sql("read schema")?
            .collect::<rusqlite::Result<_>>()
            .sql("read schema")?;
        let modules: Vec<String> = conn
            .prepare("SELECT name FROM pragma_module_list")
            .sql("read modules")?
            .query_map([], |row| row.get(0))
            .sql("read modules")?
            .collect::<rusqlite::Result<_>>()
            .sql("read modules")?;
        let mut views = Vec::new();
        for table in TENANT_TABLES {
            let present = objects
                .iter()
                .any(|(kind, name, _, _)| kind == "table" && name == table);
            if !present {
                continue;
            }
            let filtered: bool = conn
                .query_row(
                    "SELECT count(*) > 0 FROM pragma_table_info(?1) WHERE name = 'tenant'",
                    [table],
                    |row| row.get(0),
                )
                .sql("read tenant column")?;
            if !filtered {
                return Err(Error::SqlRefused {
                    reason: format!(
                        "table {table} has no tenant column to confine it by: no tenant statement runs on this projection"
                    ),
                });
            }
            conn.execute_batch(&format!(
                "CREATE TEMP VIEW \"{table}\" AS SELECT * FROM main.\"{table}\" WHERE tenant = '{tenant}'"
            ))
            .sql("create tenant view")?;
            views.push((*table).to_owned());
        }
        let readable_roots = objects
            .iter()
            .filter(|(_, _, owner, root)| *root > 0 && views.iter().any(|v| v == owner))
            .map(|(_, _, _, root)| *root)
            .collect();
        let root_names = objects
            .iter()
            .filter(|(_, _, _, root)| *root > 0)
            .map(|(_, name, _, root)| (*root, name.clone()))
            .chain([(1, "sqlite_master".to_owned())])
            .collect();
        let mut virtual_tables = HashSet::new();
        for name in ALLOWED_VIRTUAL_TABLES {
            virtual_tables.extend(virtual_table_handles(
                conn,
                &format!("SELECT * FROM {name}('[]')"),
            )?);
        }
        let stored = objects
            .iter()
            .map(|(_, name, _, _)| name.to_ascii_lowercase())
            .chain(modules.iter().map(|m| m.to_ascii_lowercase()))
            .collect();
        Ok(Self {
            views,
            stored,
            readable_roots,
            root_names,
            virtual_tables,
        })
    }

    /// Refuses the statement when its program opens a b-tree other than an exposed table or one of
    /// its indexes, or a virtual table other than json_each/json_tree. This is what decides what a
    /// tenant reaches: the authorizer sees only the columns a statement names, and SQLite reports no
    /// column of a table joined only through `USING (…)`.
    fn check_opens(
        &self,
        conn: &Connection,
        statement: &str,
        classify: &dyn Fn(rusqlite::Error) -> Error,
    ) -> Result<()> {
        let refused = |what: String| Error::SqlRefused {
            reason: format!(
                "the statement reads {what}, which is not one of the tenant's tables ({})",
                self.views.join(", ")
            ),
        };
        let mut explain = conn.prepare(&format!("EXPLAIN {statement}")).map_err(classify)?;
        let mut program = explain.query([]).map_err(classify)?;
        while let Some(op) = program.next().map_err(classify)? {
            let opcode: String = op.get(1).map_err(classify)?;
            match opcode.as_str() {
                "OpenRead" | "ReopenIdx" | "OpenWrite" => {
                    let root: i64 = op.get(3).map_err(classify)?;
                    let database: i64 = op.get(4).map_err(classify)?;
                    let flags: i64 = op.get(6).map_err(classify)?;
                    let readable = opcode != "OpenWrite"
                        && database == 0
                        && flags & P2_IS_REGISTER == 0
                        && self.readable_roots.contains(&root);
                    if !readable {
                        let name = match (database, self.root_names.get(&root)) {
                            (0, Some(name)) => format!("table or index {name}"),
                            _ => format!("b-tree {root} of database {database}"),
                        };
                        return Err(refused(name));
                    }
                }
                "VOpen" => {
                    let handle = match op.get_ref(5).map_err(classify)? {
                        rusqlite::types::ValueRef::Text(text) => String::from_utf8_lossy(text).into_owned(),
                        _ => String::new(),
                    };
                    if !self.virtual_tables.contains(&handle) {
                        return Err(refused(
                            "a virtual table other than json_each or json_tree".to_owned(),
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The `vtab:…` handles a statement's program opens (eponymous virtual tables have one per connection).
fn virtual_table_handles(conn: &Connection, statement: &str) -> Result<Vec<String>> {
    let mut explain = conn
        .prepare(&format!("EXPLAIN {statement}"))
        .sql("explain a virtual table")?;
    let mut program = explain.query([]).sql("explain a virtual table")?;
    let mut handles = Vec::new();
    while let Some(op) = program.next().sql("explain a virtual table")? {
        let opcode: String = op.get(1).sql("explain a virtual table")?;
        if opcode == "VOpen"
            && let rusqlite::types::ValueRef::Text(text) = op.get_ref(5).sql("explain a virtual table")?
        {
            handles.push(String::from_utf8_lossy(text).into_owned());
        }
    }
    Ok(handles)
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
/// The exposed tables' b-trees are open to a tenant's statement (its views read them), so the EXPLAIN
/// check cannot tell `main.sessions` from the view `sessions`, and SQLite reports no column read for a
/// table joined only through `USING (…)`: `JOIN main.sessions USING (session_id)` would reach another
/// tenant's rows as an existence oracle (the test caught it). Unqualified names resolve to the TEMP
/// views and ATTACH is denied, so `main` is the only way to name a stored table: refusing it closes
/// every such path.
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

/// The rule for one action the statement needs; `catalog` is the tenant's (`None`: an admin).
fn authorize(context: &AuthContext<'_>, catalog: Option<&Catalog>) -> std::result::Result<(), String> {
    match context.action {
        AuthAction::Select | AuthAction::Recursive => Ok(()),
        AuthAction::Function { function_name } => {
            if ALLOWED_FUNCTIONS
                .iter()
                .any(|f| f.eq_ignore_ascii_case(function_name))
            {
                Ok(())
            } else {
                Err(format!("function {function_name}() is not allowed"))
            }
        }
        AuthAction::Read { table_name, .. } => {
            let Some(catalog) = catalog else {
                return Ok(());
            };
            let database = context.database_name.unwrap_or("main");
            let lower = table_name.to_ascii_lowercase();
            // TEMP holds only the views; json_each/json_tree are table-valued functions over values.
            if database == "temp" || ALLOWED_VIRTUAL_TABLES.contains(&lower.as_str()) {
                return Ok(());
            }
            if lower.starts_with("pragma_") {
                return Err(format!("PRAGMA function {table_name} is not allowed"));
            }
            if catalog.views.contains(&lower) {
                return match context.accessor {
                    Some(view) if view.eq_ignore_ascii_case(table_name) => Ok(()),
                    _ => Err(format!(
                        "table {database}.{table_name} is readable only through the tenant's view `{table_name}`"
                    )),
                };
            }
            // A recursive CTE's own table is read as `main.<cte>`: fine unless the name is stored
            // (a table, index or view), SQLite's own, or a virtual table.
            if catalog.stored.contains(&lower) || lower.starts_with("sqlite_") {
                return Err(format!(
                    "table {table_name} is not one of the tenant's tables: statements are readable only through the tenant's views ({})",
                    catalog.views.join(", ")
                ));
            }
            Ok(())
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
