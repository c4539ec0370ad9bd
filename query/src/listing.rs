//! Lists with cursor pagination: sessions, one session's timeline, and invocation search.
//!
//! Every list is ordered by a ledger sequence (a session's or invocation's first entry, an event's
//! own), which is unique and stable, so the cursor is that sequence and a page never repeats or skips
//! a row while the projection grows.

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
}

/// Filters of the session list.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Tenant scope (`None`: all, admin only).
    pub tenant: Option<String>,
    /// Sessions active within this range.
    pub range: TimeRange,
    /// Page size.
    pub limit: u32,
    /// From a previous page.
    pub cursor: Option<String>,
}

/// Sessions in order of their first entry.
pub fn sessions(conn: &Connection, filter: &SessionFilter) -> Result<Page<SessionSummary>> {
    let after = cursor(filter.cursor.as_deref(), "sessions")?;
    let mut statement = conn
        .prepare_cached(
            "SELECT s.tenant, s.session_id, s.first_seq, s.last_seq, s.first_time, s.last_time, s.event_count,
                    (SELECT count(*) FROM invocations i WHERE i.tenant = s.tenant AND i.session_id = s.session_id)
             FROM sessions s
             WHERE (?1 IS NULL OR s.tenant = ?1) AND s.first_seq > ?2
               AND (?3 IS NULL OR s.last_time_ns >= ?3) AND (?4 IS NULL OR s.first_time_ns <= ?4)
             ORDER BY s.first_seq LIMIT ?5",
        )
        .sql("sessions")?;
    let items = statement
        .query_map(
            params![
                filter.tenant,
                after,
                filter.range.from_ns,
                filter.range.to_ns,
                i64::from(filter.limit) + 1
            ],
            |r| {
                Ok(SessionSummary {
                    tenant: r.get(0)?,
                    session_id: r.get(1)?,
                    first_seq: r.get(2)?,
                    last_seq: r.get(3)?,
                    first_time: r.get(4)?,
                    last_time: r.get(5)?,
                    event_count: r.get(6)?,
                    invocation_count: r.get(7)?,
                })
            },
        )
        .sql("sessions")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("sessions")?;
    Ok(page(items, filter.limit, "sessions", |s| s.first_seq))
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
    const COLUMNS: &str = "SELECT s.tenant, s.session_id, s.first_seq, s.last_seq, s.first_time, s.last_time,
        s.event_count,
        (SELECT count(*) FROM invocations i WHERE i.tenant = s.tenant AND i.session_id = s.session_id)
        FROM sessions s";
    let map = |r: &rusqlite::Row<'_>| {
        Ok(SessionSummary {
            tenant: r.get(0)?,
            session_id: r.get(1)?,
            first_seq: r.get(2)?,
            last_seq: r.get(3)?,
            first_time: r.get(4)?,
            last_time: r.get(5)?,
            event_count: r.get(6)?,
            invocation_count: r.get(7)?,
        })
    };
    // Two statements, not `(?2 IS NULL OR tenant = ?2)`, so a tenant's lookup uses the key.
    let rows = match tenant {
        Some(tenant) => conn
            .prepare_cached(&format!("{COLUMNS} WHERE s.tenant = ?1 AND s.session_id = ?2"))
            .sql("session")?
            .query_map(params![tenant, session_id], map)
            .sql("session")?
            .collect::<rusqlite::Result<Vec<_>>>(),
        None => conn
            .prepare_cached(&format!("{COLUMNS} WHERE s.session_id = ?1 LIMIT 2"))
            .sql("session")?
            .query_map(params![session_id], map)
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
    let after = cursor(filter.cursor.as_deref(), "invocations")?;
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
    // Conditions are fixed text; only their values are bound.
    let mut sql = String::from(
        "SELECT i.tenant, i.invocation_id, i.session_id, i.tool_id, i.state, i.terminal, i.error_class,
                i.actor_ref, i.native_call_id, i.retry_of, i.attempt, i.created_at, i.ended_at,
                e.event_time, i.first_seq, i.event_count
         FROM invocations i JOIN events e ON e.seq = i.first_seq
         WHERE i.first_seq > ?",
    );
    let mut values: Vec<Sql> = vec![Sql::Integer(after)];
    let mut add = |condition: &str, value: Option<Sql>| {
        if let Some(value) = value {
            sql.push_str(" AND ");
            sql.push_str(condition);
            values.push(value);
        }
    };
    let text = |v: &Option<String>| v.clone().map(Sql::Text);
    add("i.tenant = ?", text(&filter.tenant));
    add("i.session_id = ?", text(&filter.session_id));
    add("i.tool_id = ?", text(&filter.tool_id));
    add(
        "EXISTS (SELECT 1 FROM tools t WHERE t.tenant = i.tenant AND t.tool_id = i.tool_id AND t.namespace = ?)",
        text(&filter.namespace),
    );
    add("i.state = ?", text(&filter.status));
    add("i.error_class = ?", text(&filter.error_class));
    add(
        "EXISTS (SELECT 1 FROM permission_decisions d WHERE d.tenant = i.tenant
                 AND d.invocation_id = i.invocation_id AND d.behavior = ?)",
        text(&filter.behavior),
    );
    add("i.actor_ref = ?", text(&filter.actor));
    add(
        "EXISTS (SELECT 1 FROM invocation_external_ids x WHERE x.tenant = i.tenant
                 AND x.invocation_id = i.invocation_id AND x.value = ?)",
        text(&filter.native_id),
    );
    add(
        "EXISTS (SELECT 1 FROM invocation_external_ids x WHERE x.tenant = i.tenant
                 AND x.invocation_id = i.invocation_id AND x.key = ?)",
        text(&filter.native_key),
    );
    add("e.event_time_ns >= ?", filter.range.from_ns.map(Sql::Integer));
    add("e.event_time_ns <= ?", filter.range.to_ns.map(Sql::Integer));
    sql.push_str(" ORDER BY i.first_seq LIMIT ?");
    values.push(Sql::Integer(i64::from(filter.limit) + 1));

    let mut statement = conn.prepare_cached(&sql).sql("search")?;
    let items = statement
        .query_map(params_from_iter(values), |r| {
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
