//! Applying one ledger entry to the projection, inside the caller's transaction.
//!
//! ```text
//! entry bytes ─▶ decode_entry (parse, classify; on a second thread) ─▶ events row (always; `problem` when it goes no further)
//!             ─▶ ClassifiedEvent (class, typed data, session, invocation) ─▶ sessions
//!                  ├─ invocation classes ─▶ the batch's InvocationFold of that invocation
//!                  │      ├─ per entry: transitions, anomalies, input mutations, decisions, hooks,
//!                  │      │             progress, results, persistence, native ids
//!                  │      └─ once per batch (Invocations::write): the invocations row
//!                  ├─ tool.declared / surface / deferred ─▶ catalog (unknown values ─▶ anomalies)
//!                  └─ toolledger.* of tenant `_system` or appended by ingest itself ─▶ quarantine
//!                     receipts, access reads, erasures (any other: the events row with its problem)
//! ```
//!
//! Events carry snapshots that may be partial. The invocation's own snapshot is merged by the fold
//! ([`toolledger_schemas::fold`]); the records an invocation owns (hooks, results, …) are merged
//! field by field in ledger order here ([`merge`]), and their typed columns read from the merged
//! object.

mod catalog;
mod invocation;

use std::collections::HashMap;

pub(crate) use invocation::Invocations;

use rusqlite::{Transaction, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use toolledger_ledger::DecodedEntry;
use toolledger_schemas::contract::LedgerRecord;
use toolledger_schemas::state::{self, Config as StateConfig, InvocationTrack};
use toolledger_schemas::{Anomaly, Data, Effect, EventClass, EventFacts, EventTime, contract};
use toolledger_wire::entry::json_text;
use toolledger_wire::event::format_time;
use toolledger_wire::{LedgerEntry, Origin, Tenant};

use crate::error::{Result, SqlContext};

/// What every part of the projection knows about the entry being applied.
pub(crate) struct Ctx<'t> {
    pub tx: &'t Transaction<'t>,
    pub seq: i64,
    pub class: EventClass,
    pub tenant: String,
    pub session: Option<String>,
    pub subject: Option<String>,
    pub time: Option<String>,
    /// The invocation the entry belongs to ([`ClassifiedEvent::invocation_id`]).
    pub ext_invocation: Option<String>,
    pub ext_tool: Option<String>,
    /// The raw `data` object (merging works on it, so unknown fields are kept).
    pub raw: &'t Map<String, Value>,
    /// Anomalies recorded for this entry so far (their `idx`).
    pub anomalies: i64,
}

impl Ctx<'_> {
    /// Records anomalies for this entry, in order.
    pub fn record_anomalies(&mut self, invocation_id: Option<&str>, anomalies: &[Anomaly]) -> Result<()> {
        for anomaly in anomalies {
            let details = serde_json::to_string(anomaly).unwrap_or_default();
            self.tx
                .prepare_cached(
                    "INSERT INTO anomalies (seq, idx, kind, tenant, invocation_id, subject, details)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .sql("prepare anomaly")?
                .execute(params![
                    self.seq,
                    self.anomalies,
                    anomaly.kind().as_str(),
                    self.tenant,
                    invocation_id,
                    self.subject,
                    details
                ])
                .sql("insert anomaly")?;
            self.anomalies += 1;
        }
        Ok(())
    }
}

/// Applies the entry at `seq`, decoded by [`toolledger_ledger::decode_entry`]; returns its leaf
/// hash (hex). Invocation rows are written by
/// [`Invocations::write`] at the end of the batch. The entry is only read (it is freed where it
/// was decoded, and a batch whose transaction failed can be applied again).
pub(crate) fn apply_decoded(
    tx: &Transaction<'_>,
    seq: u64,
    decoded: &DecodedEntry,
    state: &StateConfig,
    invocations: &mut Invocations,
    sessions: &mut Sessions,
) -> Result<String> {
    let leaf = decoded.leaf.clone();
    let seq = i64::try_from(seq).unwrap_or(i64::MAX);
    let (entry, classified) = match &decoded.entry {
        Ok(entry) => entry,
        Err(error) => {
            tracing::warn!(seq, %error, "ledger entry does not decode; indexed with its problem");
            insert_problem_event(tx, seq, &leaf, &format!("not a ledger entry: {error}"))?;
            return Ok(leaf);
        }
    };
    let class = classified.class;
    let problem = classified.problem.clone();
    let session = classified.session_id.clone();
    let invocation_id = classified.invocation_id.clone();
    let LedgerEntry { event, ledger } = entry;
    let text = |value: Option<&str>| value.map(str::to_owned);
    let tenant = event.extension_str("tenant").unwrap_or_default().to_owned();
    let time = event.time().map(format_time);
    let time_ns = event.time().and_then(|t| t.timestamp_nanos_opt());
    let subject = text(event.subject());
    let tool = text(event.extension_str("toolid"));
    let is_invocation_event = class.is_some_and(|c| contract(c).is_invocation_event());
    // The ledger's own records vouch for things (content erased, a read recorded, a rejection), so
    // only the ledger writes them: under its own tenant `_system` (access and erasure records, which
    // come through ingest), or appended by ingest itself (origin `ledger`: the quarantine receipts it
    // files under the rejected message's tenant). Ingest refuses these classes from any other tenant,
    // but an older ledger may hold such an entry from before it did: it is indexed with its problem
    // and applied nowhere, so a forged erasure record cannot mark content erased.
    let foreign_record = class.is_some_and(EventClass::is_ledger_own)
        && tenant != Tenant::SYSTEM
        && ledger.origin != Origin::Ledger;
    let problem = if foreign_record {
        Some(format!(
            "`{}` is the ledger's own class but this entry came from tenant `{tenant}`, not `{}`: not applied",
            event.ty(),
            Tenant::SYSTEM
        ))
    } else {
        problem
    };
    tx.prepare_cached(
        "INSERT INTO events (seq, leaf_hash, event_id, source, class, tenant, session_id, subject,
            invocation_id, tool_id, event_time, event_time_ns, ingested_at, origin, traceparent, tracestate,
            trace_refs, payload_refs, scrubbed_paths, problem)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
    )
    .sql("prepare event")?
    .execute(params![
        seq,
        leaf,
        event.id(),
        event.source(),
        event.ty(),
        tenant,
        session,
        subject,
        invocation_id,
        tool,
        time,
        time_ns,
        format_time(&ledger.ingested_at),
        ledger.origin.as_str(),
        event.extension_str("traceparent"),
        event.extension_str("tracestate"),
        ledger.trace_refs.as_deref().map(json_text),
        json_text(&ledger.payload_refs),
        json_text(&ledger.scrubbed_paths),
        problem
    ])
    .sql("insert event")?;
    if foreign_record {
        return Ok(leaf);
    }

    if let Some(session) = &session {
        sessions.saw(&tenant, session, seq, time.as_deref(), time_ns);
    }
    let (Some(class), Some(decoded)) = (class, &classified.decoded) else {
        return Ok(leaf);
    };
    let no_data = Map::new();
    let mut ctx = Ctx {
        tx,
        seq,
        class,
        tenant,
        session,
        subject,
        time,
        ext_invocation: invocation_id,
        ext_tool: tool,
        raw: match event.data() {
            Some(Value::Object(map)) => map,
            _ => &no_data,
        },
        anomalies: 0,
    };
    if is_invocation_event {
        invocation::apply(&mut ctx, decoded, invocations, state)?;
        return Ok(leaf);
    }
    let facts = EventFacts::from_data(
        class,
        seq.try_into().unwrap_or(0),
        time_ns.map(EventTime),
        decoded,
    );
    // Declarations, surfaces, deferred refs and the ledger's own records: the state machine only
    // reports their unknown values.
    let outcome = state::step(&InvocationTrack::default(), &facts, state);
    ctx.record_anomalies(None, &outcome.anomalies)?;
    match (contract(class).effect, decoded) {
        (Effect::CatalogDeclaration, Data::ToolDeclaration(declaration)) => {
            catalog::declare(&mut ctx, declaration)?;
        }
        (Effect::SurfaceRevision, Data::ToolSurface(_)) => catalog::surface(&mut ctx)?,
        (Effect::DeferredRef, Data::DeferredTool(_)) => catalog::deferred(&mut ctx)?,
        (Effect::LedgerOwn(LedgerRecord::Quarantine), Data::QuarantineRecorded(receipt)) => {
            let data = Value::Object(ctx.raw.clone()).to_string();
            tx.prepare_cached(
                "INSERT OR REPLACE INTO quarantine_receipts (receipt_id, tenant, reason, detail, digest,
                    size_bytes, quarantine_subject, quarantine_seq, inbound_subject, event_id, event_source,
                    quarantined_at, seq, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )
            .sql("prepare quarantine receipt")?
            .execute(params![
                receipt.receipt_id,
                receipt.tenant,
                receipt.reason,
                receipt.detail,
                receipt.digest,
                receipt.size_bytes.as_i64(),
                receipt.quarantine_subject,
                receipt
                    .quarantine_seq
                    .as_ref()
                    .and_then(serde_json::Number::as_i64),
                receipt.inbound_subject,
                receipt.event_id,
                receipt.event_source,
                receipt.quarantined_at,
                seq,
                data
            ])
            .sql("insert quarantine receipt")?;
        }
        (Effect::LedgerOwn(LedgerRecord::Access), Data::AccessRead(read)) => {
            let data = Value::Object(ctx.raw.clone()).to_string();
            tx.prepare_cached(
                "INSERT OR REPLACE INTO access_reads (access_id, tenant, principal, endpoint, invocation_ids,
                    session_ids, query, row_count, read_at, seq, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .sql("prepare access read")?
            .execute(params![
                read.access_id,
                read.tenant,
                read.principal,
                read.endpoint,
                to_json(&read.invocation_ids),
                to_json(&read.session_ids),
                read.query,
                read.row_count.as_ref().and_then(serde_json::Number::as_i64),
                read.read_at,
                seq,
                data
            ])
            .sql("insert access read")?;
        }
        (Effect::LedgerOwn(LedgerRecord::Erasure), Data::ErasureCompleted(erasure)) => {
            let data = Value::Object(ctx.raw.clone()).to_string();
            tx.prepare_cached(
                "INSERT OR REPLACE INTO erasures (erasure_id, blob_ids, invocation_ids, session_ids, reason,
                    authority, requested_by, completed_at, seq, data, tenant)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .sql("prepare erasure")?
            .execute(params![
                erasure.erasure_id,
                serde_json::to_string(&erasure.blob_ids).unwrap_or_default(),
                to_json(&erasure.invocation_ids),
                to_json(&erasure.session_ids),
                erasure.reason,
                erasure.authority,
                erasure.requested_by,
                erasure.completed_at,
                seq,
                data,
                erasure.tenant
            ])
            .sql("insert erasure")?;
            let tenant = erasure.tenant.as_deref().unwrap_or_default();
            let mut erased = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO erased_blobs (tenant, blob_id, erasure_id, seq) VALUES (?1, ?2, ?3, ?4)",
                )
                .sql("prepare erased blob")?;
            for blob in &erasure.blob_ids {
                erased
                    .execute(params![tenant, blob, erasure.erasure_id, seq])
                    .sql("insert erased blob")?;
            }
        }
        _ => {}
    }
    Ok(leaf)
}

fn insert_problem_event(tx: &Transaction<'_>, seq: i64, leaf: &str, problem: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO events (seq, leaf_hash, payload_refs, scrubbed_paths, problem)
         VALUES (?1, ?2, '[]', '[]', ?3)",
    )
    .sql("prepare problem event")?
    .execute(params![seq, leaf, problem])
    .sql("insert problem event")?;
    Ok(())
}

/// The sessions a batch's entries belong to, each summed over the batch and written once at its end
/// ([`Sessions::write`]): a row per session touched, not an upsert per entry.
#[derive(Default)]
pub(crate) struct Sessions(HashMap<String, HashMap<String, SessionSpan>>);

/// One session's entries in a batch.
struct SessionSpan {
    first_seq: i64,
    last_seq: i64,
    /// The earliest event time; the first entry's among equal times.
    first: SessionTime,
    /// The latest event time; the first entry's among equal times.
    last: SessionTime,
    count: i64,
}

/// An event time as the sessions table keeps it: its text, and its nanoseconds when it has them
/// (a time outside 1677–2262 has text but no nanoseconds, and only the first entry's is kept).
struct SessionTime {
    text: Option<String>,
    ns: Option<i64>,
}

impl SessionTime {
    fn new(text: Option<&str>, ns: Option<i64>) -> SessionTime {
        SessionTime {
            text: text.map(str::to_owned),
            ns,
        }
    }

    /// Takes the entry's time when `wins(its ns, this ns)`, as the upsert does: a time without
    /// nanoseconds never replaces one, and one with them always replaces one without.
    fn take_if(&mut self, text: Option<&str>, ns: Option<i64>, wins: impl Fn(i64, i64) -> bool) {
        if let Some(ns) = ns
            && self.ns.is_none_or(|kept| wins(ns, kept))
        {
            *self = SessionTime::new(text, Some(ns));
        }
    }
}

impl Sessions {
    /// Counts the entry at `seq` (entries come in ledger order) into its session.
    fn saw(&mut self, tenant: &str, session: &str, seq: i64, time: Option<&str>, time_ns: Option<i64>) {
        let sessions = match self.0.get_mut(tenant) {
            Some(sessions) => sessions,
            None => self.0.entry(tenant.to_owned()).or_default(),
        };
        let Some(span) = sessions.get_mut(session) else {
            sessions.insert(
                session.to_owned(),
                SessionSpan {
                    first_seq: seq,
                    last_seq: seq,
                    first: SessionTime::new(time, time_ns),
                    last: SessionTime::new(time, time_ns),
                    count: 1,
                },
            );
            return;
        };
        span.last_seq = seq;
        span.count += 1;
        span.first.take_if(time, time_ns, |ns, kept| ns < kept);
        span.last.take_if(time, time_ns, |ns, kept| ns > kept);
    }

    /// Writes every session the batch touched into `tx`, merged with its stored row, in the order
    /// of their first entries (so rows are inserted in the same order however entries are batched).
    pub(crate) fn write(self, tx: &Transaction<'_>) -> Result<()> {
        let mut spans: Vec<(String, String, SessionSpan)> = self
            .0
            .into_iter()
            .flat_map(|(tenant, sessions)| {
                sessions
                    .into_iter()
                    .map(move |(session, span)| (tenant.clone(), session, span))
            })
            .collect();
        spans.sort_unstable_by_key(|(_, _, span)| span.first_seq);
        for (tenant, session, span) in &spans {
            upsert_session(tx, tenant, session, span)?;
        }
        Ok(())
    }
}

fn upsert_session(tx: &Transaction<'_>, tenant: &str, session: &str, span: &SessionSpan) -> Result<()> {
    // In an upsert the bare column names are the stored row, `excluded.*` the batch's: the stored
    // row's entries come first, so it keeps its times where the batch's are equal.
    tx.prepare_cached(
        "INSERT INTO sessions (tenant, session_id, first_seq, last_seq, first_time, first_time_ns,
            last_time, last_time_ns, event_count)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (tenant, session_id) DO UPDATE SET
            last_seq = excluded.last_seq,
            event_count = event_count + excluded.event_count,
            first_time = CASE WHEN excluded.first_time_ns < coalesce(first_time_ns, excluded.first_time_ns + 1)
                THEN excluded.first_time ELSE first_time END,
            first_time_ns = CASE WHEN excluded.first_time_ns < coalesce(first_time_ns, excluded.first_time_ns + 1)
                THEN excluded.first_time_ns ELSE first_time_ns END,
            last_time = CASE WHEN excluded.last_time_ns > coalesce(last_time_ns, excluded.last_time_ns - 1)
                THEN excluded.last_time ELSE last_time END,
            last_time_ns = CASE WHEN excluded.last_time_ns > coalesce(last_time_ns, excluded.last_time_ns - 1)
                THEN excluded.last_time_ns ELSE last_time_ns END",
    )
    .sql("prepare session")?
    .execute(params![
        tenant,
        session,
        span.first_seq,
        span.last_seq,
        span.first.text,
        span.first.ns,
        span.last.text,
        span.last.ns,
        span.count
    ])
    .sql("upsert session")?;
    Ok(())
}

/// Merges `update` into `base` field by field: later fields win, except the `keep_first` ones,
/// which keep the value first seen.
pub(crate) fn merge(base: &mut Map<String, Value>, update: &Map<String, Value>, keep_first: &[&str]) {
    for (key, value) in update {
        if keep_first.contains(&key.as_str()) && base.contains_key(key) {
            continue;
        }
        base.insert(key.clone(), value.clone());
    }
}

/// The stored JSON object in `column` of the row `where_sql` selects, with the row's `first_seq`.
pub(crate) fn load_object(
    tx: &Transaction<'_>,
    table: &str,
    where_sql: &str,
    keys: &[&dyn rusqlite::ToSql],
) -> Result<Option<(Map<String, Value>, i64)>> {
    // Tables with one row per record keep the record's first entry as `first_seq`; the others have
    // one entry per row (`seq`).
    let first = match table {
        "permission_requests" | "progress" | "result_persistence" => "seq",
        _ => "first_seq",
    };
    let sql = format!("SELECT data, {first} FROM {table} WHERE {where_sql}");
    let mut stmt = tx.prepare_cached(&sql).sql("prepare load")?;
    let mut rows = stmt.query(keys).sql("load")?;
    let Some(row) = rows.next().sql("load row")? else {
        return Ok(None);
    };
    let data: String = row.get(0).sql("load data")?;
    let first_seq: i64 = row.get(1).sql("load first_seq")?;
    let object = match serde_json::from_str(&data) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    Ok(Some((object, first_seq)))
}

/// Decodes a merged object into its typed form; falls back to `fallback` when the merge made it
/// undecodable (it cannot, for objects valid under their schema, but a bad merge must not panic).
pub(crate) fn typed<T: DeserializeOwned + Clone>(merged: &Map<String, Value>, fallback: &T) -> T {
    T::deserialize(Value::Object(merged.clone())).unwrap_or_else(|_| fallback.clone())
}

/// JSON text of an optional value (`None` stays NULL).
pub(crate) fn to_json<T: Serialize>(value: &Option<T>) -> Option<String> {
    value.as_ref().and_then(|v| serde_json::to_string(v).ok())
}

/// A scalar JSON value as text (strings verbatim); `None` for arrays, objects and null.
pub(crate) fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
