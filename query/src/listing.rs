//! Lists with cursor pagination: sessions, one session's timeline, and invocation search; and the
//! search's matches counted by group.
//!
//! Every list is ordered by a ledger sequence (a session's or invocation's first entry, an event's
//! own), which is unique and stable, so the cursor is that sequence and a page never repeats or skips
//! a row while the projection grows.
//!
//! Each list is read in that order from an index that ends in it (`docs/projections.md`), so a page
//! costs its own rows, not the table's: the statement names only the filters given (a condition
//! like `?1 IS NULL OR tenant = ?1` would keep SQLite from any index), and [`query_plan`] shows the
//! plan SQLite chose, which the tests hold to those indexes.

use std::collections::BTreeMap;

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, params, params_from_iter};
use serde::Serialize;

use crate::error::{Error, Result, SqlContext};
use crate::params::{TimeRange, decode_cursor, encode_cursor};
use crate::reconstruct::TimelineEvent;

/// One page of a list.
#[derive(Debug, Clone, Serialize)]
pub struct Page<T> {
    /// The rows.
    pub items: Vec<T>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// One session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    /// Tenant.
    pub tenant: String,
    /// Session id.
    pub session_id: String,
    /// First ledger entry of the session.
    pub first_seq: i64,
    /// Last ledger entry.
    pub last_seq: i64,
    /// Earliest event time.
    pub first_time: Option<String>,
    /// Latest event time.
    pub last_time: Option<String>,
    /// Entries in the session.
    pub event_count: i64,
    /// Invocations in the session.
    pub invocation_count: i64,
    /// Its invocations that match the list's `tool_id`, `status` and time range, counted by
    /// state (of a session read alone, all of its invocations).
    pub states: BTreeMap<String, i64>,
}

/// Filters of the session list.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Tenant scope (`None`: all, admin only).
    pub tenant: Option<String>,
    /// Sessions active within this range; their invocations whose first event is within it.
    pub range: TimeRange,
    /// Only sessions with an invocation of this tool (and of `status`, when both are given).
    pub tool_id: Option<String>,
    /// Only sessions with an invocation in this state (`succeeded`, `denied`, …).
    pub status: Option<String>,
    /// Page size.
    pub limit: u32,
    /// From a previous page.
    pub cursor: Option<String>,
}

/// Sessions in order of their first entry. With `tool_id` or `status`, only the sessions holding
/// an invocation that matches them (and whose first event is within the range); each session's
/// `states` counts those invocations.
pub fn sessions(conn: &Connection, filter: &SessionFilter) -> Result<Page<SessionSummary>> {
    let statement = sessions_statement(filter)?;
    let items = conn
        .prepare_cached(&statement.sql)
        .sql("sessions")?
        .query_map(params_from_iter(statement.values), session_summary)
        .sql("sessions")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("sessions")?;
    Ok(page(items, filter.limit, "sessions", |s| s.first_seq))
}

fn sessions_statement(filter: &SessionFilter) -> Result<Statement> {
    let after = cursor(filter.cursor.as_deref(), "sessions")?;
    let narrowed = filter.tool_id.is_some() || filter.status.is_some();
    let matching = invocation_conditions(
        &SearchFilter {
            tool_id: filter.tool_id.clone(),
            status: filter.status.clone(),
            range: filter.range,
            ..SearchFilter::default()
        },
        InSession::Yes,
    )?;
    let mut statement = Statement::default();
    statement.push_sql(&session_columns(&matching));
    statement.values.extend(matching.values.iter().cloned());
    statement.push_sql(" FROM sessions s WHERE s.first_seq > ?");
    statement.values.push(Sql::Integer(after));
    let mut sessions = Conditions::default();
    sessions.and("s.tenant = ?", filter.tenant.clone().map(Sql::Text));
    sessions.and("s.last_time_ns >= ?", filter.range.from_ns.map(Sql::Integer));
    sessions.and("s.first_time_ns <= ?", filter.range.to_ns.map(Sql::Integer));
    statement.push_and(sessions);
    if narrowed {
        statement.push_sql(" AND EXISTS (SELECT 1 ");
        statement.push_sql(from_invocations(&matching));
        statement.push_sql(" WHERE i.tenant = s.tenant AND i.session_id = s.session_id");
        statement.push_and(matching);
        statement.push_sql(")");
    }
    statement.push_sql(" ORDER BY s.first_seq LIMIT ?");
    statement.values.push(Sql::Integer(i64::from(filter.limit) + 1));
    Ok(statement)
}

/// The columns of a [`SessionSummary`] over `sessions s`, its `states` counting the invocations
/// that meet `matching` (whose values the caller binds first).
fn session_columns(matching: &Conditions) -> String {
    format!(
        "SELECT s.tenant, s.session_id, s.first_seq, s.last_seq, s.first_time, s.last_time, s.event_count,
            (SELECT count(*) FROM invocations i WHERE i.tenant = s.tenant AND i.session_id = s.session_id),
            (SELECT json_group_object(state, n) FROM (SELECT i.state AS state, count(*) AS n {from}
                WHERE i.tenant = s.tenant AND i.session_id = s.session_id{conditions} GROUP BY +i.state))",
        from = from_invocations(matching),
        conditions = matching.and_text(),
    )
}

fn session_summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionSummary> {
    let states: String = r.get(8)?;
    Ok(SessionSummary {
        tenant: r.get(0)?,
        session_id: r.get(1)?,
        first_seq: r.get(2)?,
        last_seq: r.get(3)?,
        first_time: r.get(4)?,
        last_time: r.get(5)?,
        event_count: r.get(6)?,
        invocation_count: r.get(7)?,
        states: serde_json::from_str(&states).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(8, rusqlite::types::Type::Text, Box::new(e))
        })?,
    })
}

/// One session: its summary, its invocations in order, and a page of its events.
#[derive(Debug, Clone, Serialize)]
pub struct SessionTimeline {
    /// The session.
    pub session: SessionSummary,
    /// Its invocations (every one, in ledger order).
    pub invocations: Vec<InvocationSummary>,
    /// Its events, a page at a time.
    pub events: Page<TimelineEvent>,
}

/// A session's timeline; `tenant` `None` (admin) requires the session id to be unique.
pub fn session_timeline(
    conn: &Connection,
    tenant: Option<&str>,
    session_id: &str,
    limit: u32,
    cursor_text: Option<&str>,
) -> Result<SessionTimeline> {
    crate::params::id("session_id", session_id)?;
    let after = cursor(cursor_text, "session_events")?;
    let found = sessions_by_id(conn, tenant, session_id)?;
    let session = match found.len() {
        0 => {
            return Err(Error::NotFound {
                what: "session",
                id: session_id.to_owned(),
            });
        }
        1 => found
            .into_iter()
            .next()
            .ok_or_else(|| Error::Task("empty".to_owned()))?,
        _ => {
            return Err(Error::invalid(
                "tenant",
                "required: this session id exists in several tenants",
            ));
        }
    };
    let invocations = search(
        conn,
        &SearchFilter {
            tenant: Some(session.tenant.clone()),
            session_id: Some(session_id.to_owned()),
            limit: u32::MAX - 1,
            ..SearchFilter::default()
        },
    )?
    .items;
    let mut statement = conn
        .prepare_cached(
            "SELECT e.seq, e.leaf_hash, e.class, e.event_id, e.source, e.event_time, e.ingested_at,
                    t.from_state, t.to_state
             FROM events e LEFT JOIN invocation_transitions t ON t.seq = e.seq
             WHERE e.tenant = ?1 AND e.session_id = ?2 AND e.seq > ?3 ORDER BY e.seq LIMIT ?4",
        )
        .sql("session events")?;
    let events = statement
        .query_map(
            params![session.tenant, session_id, after, i64::from(limit) + 1],
            |r| {
                let from: Option<String> = r.get(7)?;
                let to: Option<String> = r.get(8)?;
                Ok(TimelineEvent {
                    seq: r.get(0)?,
                    leaf_hash: r.get(1)?,
                    class: r.get(2)?,
                    event_id: r.get(3)?,
                    source: r.get(4)?,
                    time: r.get(5)?,
                    ingested_at: r.get(6)?,
                    transition: from
                        .zip(to)
                        .map(|(from, to)| crate::reconstruct::Transition { from, to }),
                })
            },
        )
        .sql("session events")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("session events")?;
    Ok(SessionTimeline {
        session,
        invocations,
        events: page(events, limit, "session_events", |e| e.seq),
    })
}

fn sessions_by_id(conn: &Connection, tenant: Option<&str>, session_id: &str) -> Result<Vec<SessionSummary>> {
    let columns = format!("{} FROM sessions s", session_columns(&Conditions::default()));
    // Two statements, not `(?2 IS NULL OR tenant = ?2)`, so a tenant's lookup uses the key.
    let rows = match tenant {
        Some(tenant) => conn
            .prepare_cached(&format!("{columns} WHERE s.tenant = ?1 AND s.session_id = ?2"))
            .sql("session")?
            .query_map(params![tenant, session_id], session_summary)
            .sql("session")?
            .collect::<rusqlite::Result<Vec<_>>>(),
        None => conn
            .prepare_cached(&format!("{columns} WHERE s.session_id = ?1 LIMIT 2"))
            .sql("session")?
            .query_map(params![session_id], session_summary)
            .sql("session")?
            .collect::<rusqlite::Result<Vec<_>>>(),
    };
    rows.sql("session")
}

/// One invocation in a list.
#[derive(Debug, Clone, Serialize)]
pub struct InvocationSummary {
    /// Tenant.
    pub tenant: String,
    /// Invocation id.
    pub invocation_id: String,
    /// Session.
    pub session_id: Option<String>,
    /// Tool.
    pub tool_id: Option<String>,
    /// State.
    pub state: String,
    /// Whether terminal.
    pub terminal: bool,
    /// Error class, when it failed.
    pub error_class: Option<String>,
    /// Who acted.
    pub actor_ref: Option<String>,
    /// The invocation's native call id.
    pub native_call_id: Option<String>,
    /// Retry of.
    pub retry_of: Option<String>,
    /// Attempt.
    pub attempt: Option<i64>,
    /// Snapshot times.
    pub created_at: Option<String>,
    /// Ended.
    pub ended_at: Option<String>,
    /// Time of its first event.
    pub first_time: Option<String>,
    /// Its first ledger entry (the list's order and cursor).
    pub first_seq: i64,
    /// Entries about it.
    pub event_count: i64,
}

/// Filters of the invocation search; every one optional except the tenant scope for non-admins.
#[derive(Debug, Clone, Default)]
pub struct SearchFilter {
    /// Tenant scope (`None`: all, admin only).
    pub tenant: Option<String>,
    /// Session id.
    pub session_id: Option<String>,
    /// Tool id.
    pub tool_id: Option<String>,
    /// The tool's namespace in the catalog.
    pub namespace: Option<String>,
    /// State (`succeeded`, `denied`, …).
    pub status: Option<String>,
    /// Error class.
    pub error_class: Option<String>,
    /// Some permission decision had this behavior (`allow`, `ask`, `deny`, `passthrough`).
    pub behavior: Option<String>,
    /// Actor ref.
    pub actor: Option<String>,
    /// A native id value (native_call_id, jsonrpc_request_id, tool_call_id, task id …).
    pub native_id: Option<String>,
    /// Restrict `native_id` to this key (`jsonrpc_request_id`, `tool_call_id`, `native_call_id` …).
    pub native_key: Option<String>,
    /// The invocation's first event time within this range.
    pub range: TimeRange,
    /// Page size.
    pub limit: u32,
    /// From a previous page.
    pub cursor: Option<String>,
}

/// Invocations matching every given filter, in order of their first entry.
pub fn search(conn: &Connection, filter: &SearchFilter) -> Result<Page<InvocationSummary>> {
    let statement = search_statement(filter)?;
    let mut prepared = conn.prepare_cached(&statement.sql).sql("search")?;
    let items = prepared
        .query_map(params_from_iter(statement.values), |r| {
            Ok(InvocationSummary {
                tenant: r.get(0)?,
                invocation_id: r.get(1)?,
                session_id: r.get(2)?,
                tool_id: r.get(3)?,
                state: r.get(4)?,
                terminal: r.get(5)?,
                error_class: r.get(6)?,
                actor_ref: r.get(7)?,
                native_call_id: r.get(8)?,
                retry_of: r.get(9)?,
                attempt: r.get(10)?,
                created_at: r.get(11)?,
                ended_at: r.get(12)?,
                first_time: r.get(13)?,
                first_seq: r.get(14)?,
                event_count: r.get(15)?,
            })
        })
        .sql("search")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("search")?;
    Ok(page(items, filter.limit, "invocations", |i| i.first_seq))
}

fn search_statement(filter: &SearchFilter) -> Result<Statement> {
    let after = cursor(filter.cursor.as_deref(), "invocations")?;
    let mut statement = Statement::default();
    statement.push_sql(
        "SELECT i.tenant, i.invocation_id, i.session_id, i.tool_id, i.state, i.terminal, i.error_class,
                i.actor_ref, i.native_call_id, i.retry_of, i.attempt, i.created_at, i.ended_at,
                e.event_time, i.first_seq, i.event_count
         FROM invocations i JOIN events e ON e.seq = i.first_seq
         WHERE i.first_seq > ?",
    );
    statement.values.push(Sql::Integer(after));
    let mut tenant = Conditions::default();
    tenant.and("i.tenant = ?", filter.tenant.clone().map(Sql::Text));
    statement.push_and(tenant);
    statement.push_and(invocation_conditions(filter, InSession::No)?);
    statement.push_sql(" ORDER BY i.first_seq LIMIT ?");
    statement.values.push(Sql::Integer(i64::from(filter.limit) + 1));
    Ok(statement)
}

/// What [`counts`] groups invocations by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The invocation's state (`succeeded`, `failed`, …).
    State,
    /// Its error class (`null` for an invocation without one).
    ErrorClass,
    /// Its tool (`null` when no event named one).
    ToolId,
}

impl GroupBy {
    /// Every grouping, as the API names them.
    pub const ALL: [GroupBy; 3] = [GroupBy::State, GroupBy::ErrorClass, GroupBy::ToolId];

    /// The name the API uses, which is also the column.
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::State => "state",
            GroupBy::ErrorClass => "error_class",
            GroupBy::ToolId => "tool_id",
        }
    }
}

/// One group of [`Counts`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CountGroup {
    /// The value grouped by; `null` counts the invocations without one.
    pub key: Option<String>,
    /// Invocations with that value.
    pub count: i64,
}

/// Invocations counted by group.
#[derive(Debug, Clone, Serialize)]
pub struct Counts {
    /// What the groups are.
    pub group_by: GroupBy,
    /// One per value, in order of the value (`null` first).
    pub groups: Vec<CountGroup>,
    /// Every invocation counted: the sum of the groups.
    pub total: i64,
}

/// The invocations [`search`] matches, over all its pages, counted by `group_by`; `filter`'s
/// `limit` and `cursor` are not used.
pub fn counts(conn: &Connection, filter: &SearchFilter, group_by: GroupBy) -> Result<Counts> {
    let statement = counts_statement(filter, group_by)?;
    let groups = conn
        .prepare_cached(&statement.sql)
        .sql("counts")?
        .query_map(params_from_iter(statement.values), |r| {
            Ok(CountGroup {
                key: r.get(0)?,
                count: r.get(1)?,
            })
        })
        .sql("counts")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("counts")?;
    Ok(Counts {
        group_by,
        total: groups.iter().map(|g| g.count).sum(),
        groups,
    })
}

fn counts_statement(filter: &SearchFilter, group_by: GroupBy) -> Result<Statement> {
    let mut conditions = Conditions::default();
    conditions.and("i.tenant = ?", filter.tenant.clone().map(Sql::Text));
    let narrowing = invocation_conditions(filter, InSession::No)?;
    // With no other indexed filter, the index of the grouped column hands rows over already in
    // groups. With one, that filter's index reads far fewer rows, and `+` keeps SQLite (which has
    // no statistics to tell) from preferring the grouped column's index anyway.
    let group = if filter.session_id.is_some() || filter.tool_id.is_some() || filter.status.is_some() {
        format!("+i.{}", group_by.name())
    } else {
        format!("i.{}", group_by.name())
    };
    // Every tenant's rows are grouped per tenant first: the index holds them in (tenant, column)
    // order, where grouping by the column alone would sort every row.
    let every_tenant = filter.tenant.is_none();
    let mut statement = Statement::default();
    if every_tenant {
        statement.push_sql("SELECT key, sum(n) FROM (");
    }
    statement.push_sql(&format!(
        "SELECT i.{column} AS key, count(*) AS n {from} WHERE true",
        column = group_by.name(),
        from = from_invocations(&narrowing),
    ));
    statement.push_and(conditions);
    statement.push_and(narrowing);
    if every_tenant {
        statement.push_sql(&format!(" GROUP BY i.tenant, {group}) GROUP BY key ORDER BY key"));
    } else {
        statement.push_sql(&format!(" GROUP BY {group} ORDER BY {group}"));
    }
    Ok(statement)
}

/// A read whose plan [`query_plan`] shows.
#[derive(Debug, Clone, Copy)]
pub enum PlannedRead<'a> {
    /// [`sessions`].
    Sessions(&'a SessionFilter),
    /// [`search`].
    Search(&'a SearchFilter),
    /// [`counts`].
    Counts(&'a SearchFilter, GroupBy),
    /// [`crate::stats()`].
    Stats(&'a crate::stats::StatsFilter),
    /// [`crate::reconstruct()`] finding an invocation by id alone (an admin's, without a tenant).
    InvocationById(&'a str),
    /// [`crate::reconstruct()`] listing an invocation's retries: (tenant, invocation id).
    Retries(&'a str, &'a str),
}

/// The plan SQLite chooses for a read: its `EXPLAIN QUERY PLAN` lines, each indented two spaces per
/// level (`SEARCH i USING INDEX invocations_by_tool (tenant=? AND tool_id=? AND first_seq>?)`).
/// The tests hold the reads the web view makes to their indexes with it.
pub fn query_plan(conn: &Connection, read: PlannedRead<'_>) -> Result<Vec<String>> {
    let statement = match read {
        PlannedRead::Sessions(filter) => sessions_statement(filter)?,
        PlannedRead::Search(filter) => search_statement(filter)?,
        PlannedRead::Counts(filter, group_by) => counts_statement(filter, group_by)?,
        PlannedRead::Stats(filter) => crate::stats::statement(filter)?,
        PlannedRead::InvocationById(id) => Statement {
            sql: crate::reconstruct::INVOCATION_BY_ID.to_owned(),
            values: vec![Sql::Text(id.to_owned())],
        },
        PlannedRead::Retries(tenant, id) => Statement {
            sql: crate::reconstruct::RETRIES.to_owned(),
            values: vec![Sql::Text(tenant.to_owned()), Sql::Text(id.to_owned())],
        },
    };
    let mut prepared = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", statement.sql))
        .sql("query plan")?;
    let steps = prepared
        .query_map(params_from_iter(statement.values), |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(3)?))
        })
        .sql("query plan")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("query plan")?;
    let mut depth: BTreeMap<i64, usize> = BTreeMap::new();
    Ok(steps
        .into_iter()
        .map(|(id, parent, detail)| {
            let level = depth.get(&parent).map_or(0, |d| d + 1);
            depth.insert(id, level);
            format!("{}{detail}", "  ".repeat(level))
        })
        .collect())
}

/// A statement built from fixed text, with its values bound in the order of their `?`.
#[derive(Debug, Default)]
pub(crate) struct Statement {
    pub(crate) sql: String,
    pub(crate) values: Vec<Sql>,
}

impl Statement {
    pub(crate) fn push_sql(&mut self, text: &str) {
        self.sql.push_str(text);
    }

    /// Appends ` AND <each condition>` and their values.
    pub(crate) fn push_and(&mut self, conditions: Conditions) {
        self.sql.push_str(&conditions.and_text());
        self.values.extend(conditions.values);
    }
}

/// Conditions of fixed text and the values they bind; `e`, when one reads it, is the invocation's
/// first event.
#[derive(Debug, Default)]
pub(crate) struct Conditions {
    terms: Vec<String>,
    values: Vec<Sql>,
    reads_first_event: bool,
}

impl Conditions {
    /// Adds `term` (one `?`) when there is a value for it.
    pub(crate) fn and(&mut self, term: &str, value: Option<Sql>) {
        if let Some(value) = value {
            self.terms.push(term.to_owned());
            self.values.push(value);
        }
    }

    /// Adds `term`, which reads the first event `e`, when there is a value for it.
    fn and_on_first_event(&mut self, term: &str, value: Option<Sql>) {
        self.reads_first_event |= value.is_some();
        self.and(term, value);
    }

    fn and_text(&self) -> String {
        self.terms.iter().map(|t| format!(" AND {t}")).collect()
    }
}

/// `FROM invocations i`, joined to the first event when `conditions` read it.
fn from_invocations(conditions: &Conditions) -> &'static str {
    if conditions.reads_first_event {
        "FROM invocations i JOIN events e ON e.seq = i.first_seq"
    } else {
        "FROM invocations i"
    }
}

/// Whether invocation conditions are checked among one session's invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InSession {
    Yes,
    No,
}

/// The invocation filters of `filter` other than its tenant, each value checked first. Within a
/// session, the indexed columns are written `+i.column`: the session's own index is the one to read
/// there, and without statistics SQLite cannot tell that `(tenant, state)` matches far more rows.
fn invocation_conditions(filter: &SearchFilter, in_session: InSession) -> Result<Conditions> {
    for (field, value) in [
        ("session_id", &filter.session_id),
        ("tool_id", &filter.tool_id),
        ("namespace", &filter.namespace),
        ("status", &filter.status),
        ("error_class", &filter.error_class),
        ("behavior", &filter.behavior),
        ("actor", &filter.actor),
        ("native_id", &filter.native_id),
        ("native_key", &filter.native_key),
    ] {
        if let Some(value) = value {
            crate::params::id(field, value)?;
        }
    }
    let indexed = |column: &str| match in_session {
        InSession::Yes => format!("+i.{column} = ?"),
        InSession::No => format!("i.{column} = ?"),
    };
    let text = |v: &Option<String>| v.clone().map(Sql::Text);
    let mut c = Conditions::default();
    c.and(&indexed("session_id"), text(&filter.session_id));
    c.and(&indexed("tool_id"), text(&filter.tool_id));
    c.and(
        "EXISTS (SELECT 1 FROM tools t WHERE t.tenant = i.tenant AND t.tool_id = i.tool_id AND t.namespace = ?)",
        text(&filter.namespace),
    );
    c.and(&indexed("state"), text(&filter.status));
    c.and("i.error_class = ?", text(&filter.error_class));
    c.and(
        "EXISTS (SELECT 1 FROM permission_decisions d WHERE d.tenant = i.tenant
                 AND d.invocation_id = i.invocation_id AND d.behavior = ?)",
        text(&filter.behavior),
    );
    c.and("i.actor_ref = ?", text(&filter.actor));
    c.and(
        "EXISTS (SELECT 1 FROM invocation_external_ids x WHERE x.tenant = i.tenant
                 AND x.invocation_id = i.invocation_id AND x.value = ?)",
        text(&filter.native_id),
    );
    c.and(
        "EXISTS (SELECT 1 FROM invocation_external_ids x WHERE x.tenant = i.tenant
                 AND x.invocation_id = i.invocation_id AND x.key = ?)",
        text(&filter.native_key),
    );
    c.and_on_first_event("e.event_time_ns >= ?", filter.range.from_ns.map(Sql::Integer));
    c.and_on_first_event("e.event_time_ns <= ?", filter.range.to_ns.map(Sql::Integer));
    Ok(c)
}

fn cursor(text: Option<&str>, listing: &str) -> Result<i64> {
    text.map_or(Ok(0), |c| decode_cursor(listing, c))
}

/// Trims the one extra row fetched to learn whether another page exists.
fn page<T>(mut items: Vec<T>, limit: u32, listing: &str, key: impl Fn(&T) -> i64) -> Page<T> {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next_cursor = more
        .then(|| items.last().map(|last| encode_cursor(listing, key(last))))
        .flatten();
    Page { items, next_cursor }
}
