//! One invocation reconstructed from the projection: its ordered timeline (seq and leaf hash of every
//! event), the four inputs with a diff per mutation and its source, permission requests and
//! decisions, hooks, progress, results, the error with retry guidance, native ids and anomalies.
//!
//! ```text
//! invocations row ─▶ events (tenant, invocation_id) in seq order + transitions by seq
//!   ─▶ input_mutations in (seq, idx) order, each diffed against the input it changed
//!   ─▶ permission_requests / permission_decisions / hooks / progress / results / result_persistence
//!   ─▶ error (+ retry guidance) ─▶ external ids ─▶ anomalies ─▶ payload refs (checked by `payloads`)
//! ```

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result, SqlContext};
use crate::rows::{json, objects};

/// An invocation as the ledger recorded it.
#[derive(Debug, Clone, Serialize)]
pub struct Reconstruction {
    /// Its tenant.
    pub tenant: String,
    /// Its id.
    pub invocation_id: String,
    /// Its session, when known.
    pub session_id: Option<String>,
    /// The tool called.
    pub tool_id: Option<String>,
    /// The surface it was offered on.
    pub surface_id: Option<String>,
    /// Its state (`unknown` while only orphan events arrived).
    pub state: String,
    /// Whether the state is terminal.
    pub terminal: bool,
    /// Whether `tool.invocation.planned` arrived.
    pub planned: bool,
    /// The attempt number of a retry.
    pub attempt: Option<i64>,
    /// The invocation this one retries.
    pub retry_of: Option<String>,
    /// Invocations that retry this one.
    pub retried_by: Vec<String>,
    /// Who acted.
    pub actor_ref: Option<String>,
    /// Times from the merged snapshot.
    pub created_at: Option<String>,
    /// When it started running.
    pub started_at: Option<String>,
    /// When it ended.
    pub ended_at: Option<String>,
    /// Every event about it, in ledger order.
    pub timeline: Vec<TimelineEvent>,
    /// The four inputs as last carried, and the diff between each and the next.
    pub inputs: Inputs,
    /// Every change between the inputs, in ledger order, with its source and a diff.
    pub mutations: Vec<Mutation>,
    /// `tool.permission.requested` records.
    pub permission_requests: Vec<Value>,
    /// `tool.permission.decided` records: behavior, reason, rules and policies.
    pub permission_decisions: Vec<Value>,
    /// Hook runs, pre and post.
    pub hooks: Vec<Value>,
    /// Progress records.
    pub progress: Vec<Value>,
    /// Results, final and partial.
    pub results: Vec<Value>,
    /// Result persistence decisions.
    pub persistence: Vec<Value>,
    /// The error, when it failed.
    pub error: Option<ErrorReport>,
    /// Native protocol ids (native_call_id, MCP jsonrpc ids, tool_call_id …).
    pub native_ids: Vec<Value>,
    /// Anomalies the projector recorded for it.
    pub anomalies: Vec<Value>,
    /// Offloaded payloads referenced by its events; `status` is `not_checked` until checked.
    pub payloads: Vec<PayloadReport>,
}

/// One event of the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineEvent {
    /// ATL_LEDGER sequence.
    pub seq: i64,
    /// Hex leaf hash of the entry.
    pub leaf_hash: String,
    /// Event class.
    pub class: Option<String>,
    /// CloudEvents id.
    pub event_id: Option<String>,
    /// CloudEvents source.
    pub source: Option<String>,
    /// The event's own time.
    pub time: Option<String>,
    /// When ingest accepted it.
    pub ingested_at: Option<String>,
    /// The state change it caused, if any.
    pub transition: Option<Transition>,
}

/// A state change.
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    /// Before.
    pub from: String,
    /// After.
    pub to: String,
}

/// The four inputs.
#[derive(Debug, Clone, Serialize)]
pub struct Inputs {
    /// As the model produced it (first seen, never overwritten).
    pub model_input: Value,
    /// As shown to observers.
    pub observable_input: Value,
    /// As the permission system saw it.
    pub permission_input: Value,
    /// As the tool was called.
    pub call_input: Value,
    /// `*_ref` fields carried instead of (or besides) values.
    pub refs: BTreeMap<String, String>,
    /// model → observable → permission → call, each diff between neighbours.
    pub diffs: Vec<InputDiff>,
}

/// The difference between two of the four inputs.
#[derive(Debug, Clone, Serialize)]
pub struct InputDiff {
    /// From this input …
    pub from: String,
    /// … to this one.
    pub to: String,
    /// What changed.
    pub changes: Vec<Change>,
}

/// One changed JSON value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// JSON Pointer of the value.
    pub path: String,
    /// `added`, `removed` or `changed`.
    pub op: &'static str,
    /// The value before (absent when added).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// The value after (absent when removed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// One input mutation.
#[derive(Debug, Clone, Serialize)]
pub struct Mutation {
    /// The entry that carried it.
    pub seq: i64,
    /// `hook`, `permission_decision` or an input-mutation `source_type`.
    pub source: String,
    /// The hook id, decision id or mutation id.
    pub source_id: String,
    /// The mutation's own source reference, if any.
    pub source_ref: Value,
    /// The input it started from.
    pub from_input: Option<String>,
    /// The input it produced.
    pub to_input: Option<String>,
    /// Top-level fields it changed.
    pub changed_fields: Value,
    /// Why, when stated.
    pub reason: Value,
    /// When.
    pub created_at: Option<String>,
    /// The diff against the input it changed, when the new value is known (hooks and decisions);
    /// `null` when only the changed field names were recorded.
    pub diff: Option<Vec<Change>>,
}

/// The error of a failed invocation, with what a caller should do about it.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorReport {
    /// The error class (`timeout`, `permission_denied`, …).
    pub class: Option<String>,
    /// The stable error code.
    pub code: Option<String>,
    /// The message.
    pub message: Option<String>,
    /// `invocation` or `result`.
    pub source: Option<String>,
    /// Retry guidance.
    pub retry: RetryGuidance,
}

/// Whether and how to retry.
#[derive(Debug, Clone, Serialize)]
pub struct RetryGuidance {
    /// Whether retrying can help without changing anything outside the call.
    pub retryable: bool,
    /// What to do: the error's `recoverability`, else the class mapping (docs/query.md).
    pub guidance: String,
    /// The error's `retry_after`, when given.
    pub retry_after: Value,
    /// `error` when the error object said so, `class` when derived from the class.
    pub from: &'static str,
}

/// One offloaded payload and whether its blob still matches its commitment.
#[derive(Debug, Clone, Serialize)]
pub struct PayloadReport {
    /// The entry that references it.
    pub seq: i64,
    /// JSON Pointer of the moved field.
    pub path: String,
    /// The blob.
    pub blob_id: String,
    /// `sha256:<hex>` of nonce || content.
    pub commitment: String,
    /// Content bytes.
    pub size: u64,
    /// Media type.
    pub content_type: String,
    /// `not_checked`, `ok`, `missing`, `erased`, `commitment_mismatch` or `unavailable`.
    pub status: String,
    /// The erasure record's id when erased.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub erasure_id: Option<String>,
    /// The content, when asked for and verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// What went wrong, for statuses other than ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

const INPUTS: [&str; 4] = [
    "model_input",
    "observable_input",
    "permission_input",
    "call_input",
];

/// The tenants holding an invocation id (an admin's reconstruct names none); `invocations_by_id`.
pub(crate) const INVOCATION_BY_ID: &str = "SELECT tenant FROM invocations WHERE invocation_id = ?1 LIMIT 2";

/// An invocation's retries, in order; `invocations_by_retry`.
pub(crate) const RETRIES: &str =
    "SELECT invocation_id FROM invocations WHERE tenant = ?1 AND retry_of = ?2 ORDER BY first_seq";

/// Reconstructs `invocation_id`. With `tenant` `None` (admin) the id must be unique across tenants.
pub fn reconstruct(conn: &Connection, tenant: Option<&str>, invocation_id: &str) -> Result<Reconstruction> {
    crate::params::id("invocation_id", invocation_id)?;
    // Two statements, not `(?2 IS NULL OR tenant = ?2)`: that form keeps SQLite from using the
    // (tenant, invocation_id) key and scans every invocation.
    let mut tenants = match tenant {
        Some(tenant) => conn
            .prepare_cached("SELECT tenant FROM invocations WHERE tenant = ?1 AND invocation_id = ?2")
            .sql("find invocation")?
            .query_map(params![tenant, invocation_id], |r| r.get::<_, String>(0))
            .sql("find invocation")?
            .collect::<rusqlite::Result<Vec<_>>>(),
        None => conn
            .prepare_cached(INVOCATION_BY_ID)
            .sql("find invocation")?
            .query_map(params![invocation_id], |r| r.get::<_, String>(0))
            .sql("find invocation")?
            .collect::<rusqlite::Result<Vec<_>>>(),
    }
    .sql("find invocation")?;
    let tenant = match tenants.len() {
        0 => {
            return Err(Error::NotFound {
                what: "invocation",
                id: invocation_id.to_owned(),
            });
        }
        1 => tenants.remove(0),
        _ => {
            return Err(Error::invalid(
                "tenant",
                "required: this invocation id exists in several tenants",
            ));
        }
    };
    let t = tenant.as_str();
    let row = conn
        .query_row(
            "SELECT session_id, tool_id, surface_id, state, planned, terminal, attempt, retry_of, actor_ref,
                    created_at, started_at, ended_at, model_input, observable_input, permission_input,
                    call_input, model_input_ref, observable_input_ref, permission_input_ref, call_input_ref,
                    snapshot, error_class, error_code, error_message, error_source
             FROM invocations WHERE tenant = ?1 AND invocation_id = ?2",
            params![t, invocation_id],
            |r| {
                Ok((
                    (
                        r.get::<_, Option<String>>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, bool>(4)?,
                        r.get::<_, bool>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                        r.get::<_, Option<String>>(7)?,
                        r.get::<_, Option<String>>(8)?,
                    ),
                    (
                        r.get::<_, Option<String>>(9)?,
                        r.get::<_, Option<String>>(10)?,
                        r.get::<_, Option<String>>(11)?,
                    ),
                    [
                        r.get::<_, Option<String>>(12)?,
                        r.get::<_, Option<String>>(13)?,
                        r.get::<_, Option<String>>(14)?,
                        r.get::<_, Option<String>>(15)?,
                    ],
                    [
                        r.get::<_, Option<String>>(16)?,
                        r.get::<_, Option<String>>(17)?,
                        r.get::<_, Option<String>>(18)?,
                        r.get::<_, Option<String>>(19)?,
                    ],
                    r.get::<_, String>(20)?,
                    [
                        r.get::<_, Option<String>>(21)?,
                        r.get::<_, Option<String>>(22)?,
                        r.get::<_, Option<String>>(23)?,
                        r.get::<_, Option<String>>(24)?,
                    ],
                ))
            },
        )
        .sql("invocation row")?;
    let (
        (session_id, tool_id, surface_id, state, planned, terminal, attempt, retry_of, actor_ref),
        (created_at, started_at, ended_at),
        input_texts,
        input_refs,
        snapshot,
        error_columns,
    ) = row;
    let snapshot = json(Some(snapshot));

    let timeline = timeline(conn, t, invocation_id)?;
    let input_values: Vec<Value> = input_texts.into_iter().map(json).collect();
    let mut refs = BTreeMap::new();
    for (name, value) in INPUTS.iter().zip(input_refs) {
        if let Some(value) = value {
            refs.insert(format!("{name}_ref"), value);
        }
    }
    let diffs = INPUTS
        .windows(2)
        .zip(input_values.windows(2))
        .map(|(names, values)| InputDiff {
            from: names[0].to_owned(),
            to: names[1].to_owned(),
            changes: diff(&values[0], &values[1]),
        })
        .collect();
    let mutations = mutations(conn, t, invocation_id, &input_values[0])?;
    let [model_input, observable_input, permission_input, call_input]: [Value; 4] = input_values
        .try_into()
        .unwrap_or([Value::Null, Value::Null, Value::Null, Value::Null]);
    let by_invocation = params![t, invocation_id];
    let permission_requests = objects(
        conn,
        "permission requests",
        "SELECT decision_id, tool_id, permission_input, permission_profile_ref, mode, reason, requested_at, seq
         FROM permission_requests WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq",
        by_invocation,
    )?;
    let permission_decisions = objects(
        conn,
        "permission decisions",
        "SELECT seq, decision_id, behavior, mode, source, reason_type, reason_message, reason, rule_refs,
                policy_refs, updated_input, user_modified, decided_at, expires_at
         FROM permission_decisions WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq",
        by_invocation,
    )?;
    let hooks = objects(
        conn,
        "hooks",
        "SELECT hook_id, phase, hook_event, matcher, outputs, permission_result, updated_input,
                additional_context, stop, updated_output, started_at, ended_at, first_seq, last_seq
         FROM hooks WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY first_seq",
        by_invocation,
    )?;
    let progress = objects(
        conn,
        "progress",
        "SELECT progress_id, seq, sequence, status, message, percent, current_step, total_steps,
                elapsed_ms, task_id, timestamp
         FROM progress WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq",
        by_invocation,
    )?;
    let results = objects(
        conn,
        "results",
        "SELECT result_id, kind, status, is_error, content_bytes, summary, ui_facing_summary,
                redaction_state, redacted_seq, error_class, error_code, persistence_refs, created_at,
                first_seq, last_seq, duplicate
         FROM results WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY first_seq",
        by_invocation,
    )?;
    let persistence = objects(
        conn,
        "persistence",
        "SELECT decision_id, result_id, strategy, threshold, original_size_bytes, preview_size_bytes,
                persisted_ref, redaction_state, reason, created_at, seq
         FROM result_persistence WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq",
        by_invocation,
    )?;
    let native_ids = objects(
        conn,
        "native ids",
        "SELECT source, key, value, seq FROM invocation_external_ids
         WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq, source, key",
        by_invocation,
    )?;
    let anomalies = objects(
        conn,
        "anomalies",
        "SELECT seq, kind, details FROM anomalies WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq, idx",
        by_invocation,
    )?;
    let retried_by = conn
        .prepare_cached(RETRIES)
        .sql("retries")?
        .query_map(by_invocation, |r| r.get::<_, String>(0))
        .sql("retries")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("retries")?;
    let error = error_report(&snapshot, &error_columns, conn, t, invocation_id)?;
    let payloads = payload_refs(conn, t, invocation_id)?;

    Ok(Reconstruction {
        tenant,
        invocation_id: invocation_id.to_owned(),
        session_id,
        tool_id,
        surface_id,
        state,
        terminal,
        planned,
        attempt,
        retry_of,
        retried_by,
        actor_ref,
        created_at,
        started_at,
        ended_at,
        timeline,
        inputs: Inputs {
            model_input,
            observable_input,
            permission_input,
            call_input,
            refs,
            diffs,
        },
        mutations,
        permission_requests,
        permission_decisions,
        hooks,
        progress,
        results,
        persistence,
        error,
        native_ids,
        anomalies,
        payloads,
    })
}

fn timeline(conn: &Connection, tenant: &str, invocation_id: &str) -> Result<Vec<TimelineEvent>> {
    let mut statement = conn
        .prepare_cached(
            "SELECT e.seq, e.leaf_hash, e.class, e.event_id, e.source, e.event_time, e.ingested_at,
                    t.from_state, t.to_state
             FROM events e LEFT JOIN invocation_transitions t ON t.seq = e.seq
             WHERE e.tenant = ?1 AND e.invocation_id = ?2 ORDER BY e.seq",
        )
        .sql("timeline")?;
    let rows = statement
        .query_map(params![tenant, invocation_id], |r| {
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
                transition: from.zip(to).map(|(from, to)| Transition { from, to }),
            })
        })
        .sql("timeline")?;
    rows.collect::<rusqlite::Result<Vec<_>>>().sql("timeline")
}

/// Mutations in ledger order. Each known new value is diffed against the value of the input it
/// started from as of that point: every input starts as the model input, and each mutation with a
/// value replaces the input it produced.
fn mutations(
    conn: &Connection,
    tenant: &str,
    invocation_id: &str,
    model_input: &Value,
) -> Result<Vec<Mutation>> {
    let mut statement = conn
        .prepare_cached(
            "SELECT seq, source, source_id, source_ref, from_input, to_input, changed_fields, reason,
                    created_at, value
             FROM input_mutations WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq, idx",
        )
        .sql("mutations")?;
    let rows = statement
        .query_map(params![tenant, invocation_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, String>(6)?,
                r.get::<_, Option<String>>(7)?,
                r.get::<_, Option<String>>(8)?,
                r.get::<_, Option<String>>(9)?,
            ))
        })
        .sql("mutations")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("mutations")?;
    let mut current: BTreeMap<String, Value> = INPUTS
        .iter()
        .map(|name| ((*name).to_owned(), model_input.clone()))
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    for (seq, source, source_id, source_ref, from_input, to_input, changed, reason, created_at, value) in rows
    {
        let diff = value.map(|text| {
            let after = json(Some(text));
            let start = from_input.as_deref().unwrap_or("model_input");
            let before = current.get(start).cloned().unwrap_or(Value::Null);
            let changes = diff(&before, &after);
            current.insert(to_input.clone().unwrap_or_else(|| "call_input".to_owned()), after);
            changes
        });
        out.push(Mutation {
            seq,
            source,
            source_id,
            source_ref: json(source_ref),
            from_input,
            to_input,
            changed_fields: json(Some(changed)),
            reason: json(reason),
            created_at,
            diff,
        });
    }
    Ok(out)
}

/// A structural diff: objects compared key by key (recursively), anything else as a whole.
pub fn diff(before: &Value, after: &Value) -> Vec<Change> {
    let mut changes = Vec::new();
    diff_into("", before, after, &mut changes);
    changes
}

fn diff_into(path: &str, before: &Value, after: &Value, out: &mut Vec<Change>) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, old) in a {
                let child = format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"));
                match b.get(key) {
                    Some(new) => diff_into(&child, old, new, out),
                    None => out.push(Change {
                        path: child,
                        op: "removed",
                        before: Some(old.clone()),
                        after: None,
                    }),
                }
            }
            for (key, new) in b {
                if !a.contains_key(key) {
                    out.push(Change {
                        path: format!("{path}/{}", key.replace('~', "~0").replace('/', "~1")),
                        op: "added",
                        before: None,
                        after: Some(new.clone()),
                    });
                }
            }
        }
        (a, b) if a == b => {}
        (Value::Null, b) => out.push(Change {
            path: path.to_owned(),
            op: "added",
            before: None,
            after: Some(b.clone()),
        }),
        (a, Value::Null) => out.push(Change {
            path: path.to_owned(),
            op: "removed",
            before: Some(a.clone()),
            after: None,
        }),
        (a, b) => out.push(Change {
            path: path.to_owned(),
            op: "changed",
            before: Some(a.clone()),
            after: Some(b.clone()),
        }),
    }
}

fn error_report(
    snapshot: &Value,
    columns: &[Option<String>; 4],
    conn: &Connection,
    tenant: &str,
    invocation_id: &str,
) -> Result<Option<ErrorReport>> {
    let [class, code, message, source] = columns.clone();
    if class.is_none() && code.is_none() && message.is_none() {
        return Ok(None);
    }
    // The error object itself: the invocation's, else the first result's that carries one.
    let mut object = snapshot.get("error").cloned().unwrap_or(Value::Null);
    if !object.is_object() {
        let data: Option<String> = conn
            .query_row(
                "SELECT data FROM results WHERE tenant = ?1 AND invocation_id = ?2
                   AND json_extract(data, '$.error') IS NOT NULL ORDER BY first_seq LIMIT 1",
                params![tenant, invocation_id],
                |r| r.get(0),
            )
            .optional()
            .sql("result error")?;
        object = json(data).get("error").cloned().unwrap_or(Value::Null);
    }
    Ok(Some(ErrorReport {
        retry: retry_guidance(class.as_deref(), &object),
        class,
        code,
        message,
        source,
    }))
}

/// Retry guidance from the error object's `retryable`/`recoverability`/`retry_after` when present,
/// else from the class (the mapping is documented in docs/query.md).
pub fn retry_guidance(class: Option<&str>, error: &Value) -> RetryGuidance {
    let retry_after = error.get("retry_after").cloned().unwrap_or(Value::Null);
    let stated = error
        .get("recoverability")
        .or_else(|| error.get("retry"))
        .and_then(Value::as_str);
    let explicit = error.get("retryable").and_then(Value::as_bool);
    if stated.is_some() || explicit.is_some() {
        let guidance = stated.map_or_else(
            || {
                if explicit == Some(true) {
                    "retry"
                } else {
                    "not_retryable"
                }
                .to_owned()
            },
            str::to_owned,
        );
        let retryable = explicit.unwrap_or_else(|| guidance.starts_with("retry"));
        return RetryGuidance {
            retryable,
            guidance,
            retry_after,
            from: "error",
        };
    }
    let (retryable, guidance) = match class.unwrap_or("") {
        "timeout"
        | "rate_limited"
        | "dependency_unavailable"
        | "sibling_canceled"
        | "streaming_fallback_discarded"
        | "partial_failure" => (true, "retry_later"),
        "execution_failed" => (true, "retry_once_then_investigate"),
        "invalid_arguments" | "schema_validation_failed" => (false, "retry_with_valid_arguments"),
        "result_too_large" => (false, "retry_with_narrower_arguments"),
        "schema_not_loaded" => (false, "load_the_tool_schema_then_retry"),
        "setup_required" | "credential_missing" => (false, "complete_setup_then_retry"),
        "permission_denied" | "approval_rejected" | "policy_blocked" | "hook_blocked" => {
            (false, "do_not_retry_without_a_policy_or_approval_change")
        }
        _ => (false, "not_retryable"),
    };
    RetryGuidance {
        retryable,
        guidance: guidance.to_owned(),
        retry_after,
        from: "class",
    }
}

/// The erasure that removed `blob_id` of `tenant`, if one did.
fn erasure_of(conn: &Connection, tenant: &str, blob_id: &str) -> Result<Option<String>> {
    conn.prepare_cached("SELECT erasure_id FROM erased_blobs WHERE tenant = ?1 AND blob_id = ?2")
        .and_then(|mut s| s.query_row(params![tenant, blob_id], |row| row.get(0)).optional())
        .sql("erasures")
}

/// Fills in the erasures of `reconstruction`'s payloads from `conn`'s `erased_blobs`: in a
/// partitioned ledger erasure records (tenant `_system`) are projected in p0's projection, not in
/// the tenant's partition's the reconstruction was read from (docs/scaling.md).
pub fn erasures(conn: &Connection, reconstruction: &mut Reconstruction) -> Result<()> {
    for payload in reconstruction
        .payloads
        .iter_mut()
        .filter(|p| p.erasure_id.is_none())
    {
        payload.erasure_id = erasure_of(conn, &reconstruction.tenant, &payload.blob_id)?;
    }
    Ok(())
}

fn payload_refs(conn: &Connection, tenant: &str, invocation_id: &str) -> Result<Vec<PayloadReport>> {
    let mut statement = conn
        .prepare_cached(
            "SELECT seq, payload_refs FROM events
             WHERE tenant = ?1 AND invocation_id = ?2 AND payload_refs != '[]' ORDER BY seq",
        )
        .sql("payload refs")?;
    let rows = statement
        .query_map(params![tenant, invocation_id], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .sql("payload refs")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("payload refs")?;
    let mut out = Vec::new();
    for (seq, text) in rows {
        let refs: Vec<toolledger_wire::PayloadRef> = serde_json::from_str(&text).unwrap_or_default();
        for r in refs {
            let erasure_id = erasure_of(conn, tenant, &r.blob_id)?;
            out.push(PayloadReport {
                seq,
                path: r.path,
                blob_id: r.blob_id,
                commitment: r.commitment,
                size: r.size,
                content_type: r.content_type,
                status: "not_checked".to_owned(),
                erasure_id,
                content: None,
                detail: None,
            });
        }
    }
    Ok(out)
}
