//! Invocation events: the state machine's step, the merged invocation, its four inputs and their
//! mutations, and the records that belong to an invocation (decisions, hooks, progress, results).

use rusqlite::{OptionalExtension, Transaction, params};
use serde_json::{Map, Value};
use toolledger_schemas::model::{
    Loose, ToolError, ToolHook, ToolInvocation, ToolPermissionDecision, ToolProgress, ToolResult,
    ToolResultPersistence,
};
use toolledger_schemas::state::{self, Config as StateConfig, InvocationTrack};
use toolledger_schemas::{Data, EventClass, EventFacts};

use super::{Ctx, load_object, merge, scalar_text, to_json, typed};
use crate::error::{Result, SqlContext};

/// The four inputs, upstream first.
const INPUTS: [&str; 4] = [
    "model_input",
    "observable_input",
    "permission_input",
    "call_input",
];

/// An invocation row as loaded, changed by one event, and saved.
struct InvocationRow {
    tenant: String,
    invocation_id: String,
    session_id: Option<String>,
    tool_id: Option<String>,
    first_seq: i64,
    result_id: Option<String>,
    /// The error of the first result, used when the invocation's own data carries none.
    result_error: Option<(Option<String>, Option<String>, Option<String>)>,
    /// The four inputs (JSON text), in [`INPUTS`] order.
    inputs: [Option<String>; 4],
    /// Their `*_ref`s.
    input_refs: [Option<String>; 4],
    snapshot: Map<String, Value>,
    track: InvocationTrack,
}

impl InvocationRow {
    fn load(tx: &Transaction<'_>, tenant: &str, invocation_id: &str) -> Result<Option<InvocationRow>> {
        tx.prepare_cached(
            "SELECT session_id, tool_id, first_seq, result_id, error_source, error_class, error_code,
                error_message, model_input, observable_input, permission_input, call_input,
                model_input_ref, observable_input_ref, permission_input_ref, call_input_ref, snapshot, track
             FROM invocations WHERE tenant = ?1 AND invocation_id = ?2",
        )
        .sql("prepare load invocation")?
        .query_row(params![tenant, invocation_id], |row| {
            let error_source: Option<String> = row.get(4)?;
            let result_error = if error_source.as_deref() == Some("result") {
                Some((row.get(5)?, row.get(6)?, row.get(7)?))
            } else {
                None
            };
            let snapshot: String = row.get(16)?;
            let track: String = row.get(17)?;
            Ok(InvocationRow {
                tenant: tenant.to_owned(),
                invocation_id: invocation_id.to_owned(),
                session_id: row.get(0)?,
                tool_id: row.get(1)?,
                first_seq: row.get(2)?,
                result_id: row.get(3)?,
                result_error,
                inputs: [row.get(8)?, row.get(9)?, row.get(10)?, row.get(11)?],
                input_refs: [row.get(12)?, row.get(13)?, row.get(14)?, row.get(15)?],
                snapshot: match serde_json::from_str(&snapshot) {
                    Ok(Value::Object(map)) => map,
                    _ => Map::new(),
                },
                track: serde_json::from_str(&track).unwrap_or_default(),
            })
        })
        .optional()
        .sql("load invocation")
    }

    fn save(&self, tx: &Transaction<'_>, last_seq: i64) -> Result<()> {
        let invocation = ToolInvocation::deserialize_opt(&self.snapshot);
        let text = |key: &str| self.snapshot.get(key).and_then(Value::as_str).map(str::to_owned);
        let own_error = invocation.as_ref().and_then(ToolInvocation::error);
        let (error_source, error_class, error_code, error_message) = match (&own_error, &self.result_error) {
            (Some(error), _) => (
                Some("invocation"),
                error.error_class.as_ref().map(|c| c.as_str().to_owned()),
                error.error_code.clone(),
                error.message.clone(),
            ),
            (None, Some((class, code, message))) => {
                (Some("result"), class.clone(), code.clone(), message.clone())
            }
            (None, None) => (None, None, None, None),
        };
        let retry_of = invocation.as_ref().and_then(|i| i.retry_of().map(str::to_owned));
        let attempt = invocation
            .as_ref()
            .and_then(ToolInvocation::attempt)
            .and_then(|a| i64::try_from(a).ok());
        tx.prepare_cached(
            "INSERT OR REPLACE INTO invocations (tenant, invocation_id, session_id, tool_id, surface_id, state,
                planned, terminal, native_call_id, retry_of, attempt, error_class, error_code, error_message,
                error_source, actor_ref, created_at, started_at, ended_at, first_seq, last_seq, latest_time_ns,
                event_count, result_id, model_input, model_input_ref, observable_input, observable_input_ref,
                permission_input, permission_input_ref, call_input, call_input_ref, snapshot, track)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
                ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34)",
        )
        .sql("prepare save invocation")?
        .execute(params![
            self.tenant,
            self.invocation_id,
            self.session_id,
            self.tool_id,
            text("surface_id"),
            self.track.state.as_str(),
            self.track.planned,
            self.track.is_terminal(),
            text("native_call_id"),
            retry_of,
            attempt,
            error_class,
            error_code,
            error_message,
            error_source,
            text("actor_ref"),
            text("created_at"),
            text("started_at"),
            text("ended_at"),
            self.first_seq,
            last_seq,
            self.track.latest_time.map(|t| t.0),
            i64::try_from(self.track.events).unwrap_or(i64::MAX),
            self.result_id,
            self.inputs[0],
            self.input_refs[0],
            self.inputs[1],
            self.input_refs[1],
            self.inputs[2],
            self.input_refs[2],
            self.inputs[3],
            self.input_refs[3],
            Value::Object(self.snapshot.clone()).to_string(),
            serde_json::to_string(&self.track).unwrap_or_default(),
        ])
        .sql("save invocation")?;
        Ok(())
    }

    /// The nearest input upstream of `to` that is present.
    fn upstream_of(&self, to: usize) -> Option<usize> {
        (0..to).rev().find(|i| self.inputs[*i].is_some())
    }
}

trait DeserializeOpt: Sized {
    fn deserialize_opt(map: &Map<String, Value>) -> Option<Self>;
}

impl DeserializeOpt for ToolInvocation {
    fn deserialize_opt(map: &Map<String, Value>) -> Option<Self> {
        serde::Deserialize::deserialize(Value::Object(map.clone())).ok()
    }
}

/// Top-level fields that differ between two inputs (both objects); empty otherwise.
fn changed_fields(from: Option<&str>, to: &Value) -> Vec<String> {
    let from: Option<Value> = from.and_then(|text| serde_json::from_str(text).ok());
    let (Some(Value::Object(from)), Value::Object(to)) = (from, to) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = from
        .keys()
        .chain(to.keys())
        .filter(|k| from.get(*k) != to.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Applies one invocation event.
pub(super) fn apply(ctx: &mut Ctx<'_>, data: &Data, facts: &EventFacts, config: &StateConfig) -> Result<()> {
    let Some(invocation_id) = data
        .subject()
        .map(str::to_owned)
        .or_else(|| ctx.ext_invocation.clone())
        .or_else(|| ctx.subject.clone())
    else {
        ctx.tx
            .execute(
                "UPDATE events SET problem = 'an invocation event without invocation_id' WHERE seq = ?1",
                [ctx.seq],
            )
            .sql("flag event")?;
        return Ok(());
    };
    let tx = ctx.tx;
    let mut row = match InvocationRow::load(tx, &ctx.tenant, &invocation_id)? {
        Some(row) => row,
        None => InvocationRow {
            tenant: ctx.tenant.clone(),
            invocation_id: invocation_id.clone(),
            session_id: None,
            tool_id: None,
            first_seq: ctx.seq,
            result_id: None,
            result_error: None,
            inputs: Default::default(),
            input_refs: Default::default(),
            snapshot: Map::new(),
            track: InvocationTrack::default(),
        },
    };
    if row.session_id.is_none() {
        row.session_id.clone_from(&ctx.session);
    }

    let outcome = state::step(&row.track, facts, config);
    row.track = outcome.track;
    ctx.record_anomalies(Some(&invocation_id), &outcome.anomalies)?;
    if let Some(transition) = outcome.transition {
        tx.prepare_cached(
            "INSERT INTO invocation_transitions (seq, tenant, invocation_id, from_state, to_state, class, event_time)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .sql("prepare transition")?
        .execute(params![
            ctx.seq,
            ctx.tenant,
            invocation_id,
            transition.from.as_str(),
            transition.to.as_str(),
            ctx.class.as_str(),
            ctx.time
        ])
        .sql("insert transition")?;
    }

    let mut mutation_idx = 0i64;
    match data {
        Data::Invocation(invocation) => {
            merge(&mut row.snapshot, &ctx.raw, &["model_input", "model_input_ref"]);
            for (i, stage) in INPUTS.iter().enumerate() {
                let first_only = i == 0;
                if let Some(value) = ctx.raw.get(*stage)
                    && (!first_only || row.inputs[i].is_none())
                {
                    row.inputs[i] = Some(value.to_string());
                }
                let key = format!("{stage}_ref");
                if let Some(value) = ctx.raw.get(&key).and_then(Value::as_str)
                    && (!first_only || row.input_refs[i].is_none())
                {
                    row.input_refs[i] = Some(value.to_owned());
                }
            }
            for mutation in invocation.input_mutations() {
                insert_mutation(
                    ctx,
                    &invocation_id,
                    &Mutation {
                        source: mutation.source_type.as_str(),
                        source_id: &mutation.mutation_id,
                        idx: mutation_idx,
                        source_ref: mutation.source_ref.as_deref(),
                        from: mutation.from_input_ref.as_deref(),
                        to: mutation.to_input_ref.as_deref(),
                        changed_fields: mutation.changed_fields.clone().unwrap_or_default(),
                        reason: mutation.reason.as_deref(),
                        created_at: Some(&mutation.created_at),
                        value: None,
                    },
                )?;
                mutation_idx += 1;
            }
            external_ids(ctx, &invocation_id, invocation)?;
        }
        Data::Hook(hook) => {
            let hook = upsert_hook(ctx, &invocation_id, hook)?;
            if let Some(updated) = &hook.updated_input
                && ctx.raw.contains_key("updated_input")
            {
                // Before any permission decision a hook's update is what the permission check
                // sees; after one, it is what the executor gets.
                let decided: bool = tx
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM permission_decisions WHERE tenant = ?1 AND invocation_id = ?2)",
                    )
                    .sql("prepare decided")?
                    .query_row(params![ctx.tenant, invocation_id], |r| r.get(0))
                    .sql("decided")?;
                let to = if decided { 3 } else { 2 };
                mutate(ctx, &mut row, "hook", &hook.hook_id, to, updated, mutation_idx)?;
            }
        }
        Data::PermissionRequest(request) => {
            let (merged, _) = merged_with(ctx, "permission_requests", "decision_id", &request.decision_id)?;
            let request: toolledger_schemas::model::PermissionRequest = typed(&merged, request.as_ref());
            tx.prepare_cached(
                "INSERT OR REPLACE INTO permission_requests (tenant, decision_id, invocation_id, tool_id,
                    permission_input, permission_profile_ref, mode, reason, requested_at, seq, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .sql("prepare permission request")?
            .execute(params![
                ctx.tenant,
                request.decision_id,
                invocation_id,
                request.tool_id,
                to_json(&request.permission_input),
                request.permission_profile_ref,
                request.mode,
                to_json(&request.reason),
                request.requested_at,
                ctx.seq,
                Value::Object(merged).to_string()
            ])
            .sql("insert permission request")?;
            if let Some(input) = ctx.raw.get("permission_input") {
                row.inputs[2] = Some(input.to_string());
            }
        }
        Data::PermissionDecision(decision) => {
            insert_decision(ctx, &invocation_id, decision)?;
            if let Some(updated) = &decision.updated_input
                && ctx.raw.contains_key("updated_input")
            {
                mutate(
                    ctx,
                    &mut row,
                    "permission_decision",
                    &decision.decision_id,
                    3,
                    updated,
                    mutation_idx,
                )?;
            }
        }
        Data::Progress(progress) => upsert_progress(ctx, &invocation_id, progress)?,
        Data::Result(result) => {
            let duplicate = ctx.class == EventClass::ResultCreated
                && row
                    .result_id
                    .as_ref()
                    .is_some_and(|first| *first != result.result_id);
            if ctx.class == EventClass::ResultCreated && row.result_id.is_none() {
                row.result_id = Some(result.result_id.clone());
                row.result_error = result.error.as_ref().and_then(Loose::typed).map(|e: &ToolError| {
                    (
                        e.error_class.as_ref().map(|c| c.as_str().to_owned()),
                        e.error_code.clone(),
                        e.message.clone(),
                    )
                });
            }
            upsert_result(ctx, &invocation_id, result, duplicate)?;
        }
        Data::ResultPersistence(persistence) => upsert_persistence(ctx, &invocation_id, persistence)?,
        _ => {}
    }
    if row.tool_id.is_none() {
        row.tool_id = row
            .snapshot
            .get("tool_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| ctx.raw.get("tool_id").and_then(Value::as_str).map(str::to_owned))
            .or_else(|| ctx.ext_tool.clone());
    } else if let Some(tool) = row.snapshot.get("tool_id").and_then(Value::as_str) {
        row.tool_id = Some(tool.to_owned());
    }
    row.save(tx, ctx.seq)
}

/// One input mutation to record.
struct Mutation<'a> {
    source: &'a str,
    source_id: &'a str,
    idx: i64,
    source_ref: Option<&'a str>,
    from: Option<&'a str>,
    to: Option<&'a str>,
    changed_fields: Vec<String>,
    reason: Option<&'a str>,
    created_at: Option<&'a str>,
    value: Option<String>,
}

fn insert_mutation(ctx: &Ctx<'_>, invocation_id: &str, m: &Mutation<'_>) -> Result<()> {
    // The same source again (a hook's started and completed snapshots, a repeated
    // input-mutation object) updates the mutation in place; its place in the order stays.
    ctx.tx
        .prepare_cached(
            "INSERT INTO input_mutations (tenant, invocation_id, source, source_id, seq, idx, source_ref,
                from_input, to_input, changed_fields, reason, created_at, value)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             ON CONFLICT (tenant, invocation_id, source, source_id) DO UPDATE SET
                source_ref = excluded.source_ref, from_input = excluded.from_input,
                to_input = excluded.to_input, changed_fields = excluded.changed_fields,
                reason = excluded.reason, created_at = excluded.created_at, value = excluded.value",
        )
        .sql("prepare mutation")?
        .execute(params![
            ctx.tenant,
            invocation_id,
            m.source,
            m.source_id,
            ctx.seq,
            m.idx,
            m.source_ref,
            m.from,
            m.to,
            serde_json::to_string(&m.changed_fields).unwrap_or_default(),
            m.reason,
            m.created_at,
            m.value
        ])
        .sql("insert mutation")?;
    Ok(())
}

/// A hook's or a decision's `updated_input`: a mutation into input `to` from the nearest input
/// upstream of it, which becomes the new value of `to`.
fn mutate(
    ctx: &Ctx<'_>,
    row: &mut InvocationRow,
    source: &str,
    source_id: &str,
    to: usize,
    updated: &Value,
    idx: i64,
) -> Result<()> {
    let from = row.upstream_of(to);
    let changed = changed_fields(from.and_then(|i| row.inputs[i].as_deref()), updated);
    insert_mutation(
        ctx,
        &row.invocation_id.clone(),
        &Mutation {
            source,
            source_id,
            idx,
            source_ref: None,
            from: from.map(|i| INPUTS[i]),
            to: Some(INPUTS[to]),
            changed_fields: changed,
            reason: None,
            created_at: None,
            value: Some(updated.to_string()),
        },
    )?;
    row.inputs[to] = Some(updated.to_string());
    Ok(())
}

/// Native ids: `native_call_id`, every scalar of `external_mappings` (object or array) and of
/// `telemetry_refs`, and top-level `jsonrpc_request_id` / `tool_call_id` / `request_id`.
fn external_ids(ctx: &Ctx<'_>, invocation_id: &str, invocation: &ToolInvocation) -> Result<()> {
    let mut ids: Vec<(String, String, String)> = Vec::new();
    if let Some(native) = &invocation.native_call_id {
        ids.push(("native".to_owned(), "native_call_id".to_owned(), native.clone()));
    }
    let mut from_object = |source_default: &str, object: &Map<String, Value>| {
        let source = object
            .get("source")
            .or_else(|| object.get("protocol"))
            .and_then(Value::as_str)
            .unwrap_or(source_default)
            .to_owned();
        for (key, value) in object {
            if key == "source" || key == "protocol" {
                continue;
            }
            if let Some(text) = scalar_text(value) {
                ids.push((source.clone(), key.clone(), text));
            }
        }
    };
    match ctx
        .raw
        .get("external_mappings")
        .or_else(|| ctx.raw.get("external_mapping"))
    {
        Some(Value::Array(items)) => {
            for item in items {
                if let Value::Object(object) = item {
                    from_object("unspecified", object);
                }
            }
        }
        Some(Value::Object(object)) => from_object("unspecified", object),
        _ => {}
    }
    for object in invocation.telemetry_refs.iter().flatten() {
        from_object("telemetry", object);
    }
    for key in ["jsonrpc_request_id", "tool_call_id", "request_id"] {
        if let Some(text) = ctx.raw.get(key).and_then(scalar_text) {
            ids.push(("data".to_owned(), key.to_owned(), text));
        }
    }
    let mut stmt = ctx
        .tx
        .prepare_cached(
            "INSERT OR IGNORE INTO invocation_external_ids (tenant, invocation_id, source, key, value, seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .sql("prepare external id")?;
    // An empty string names nothing (e.g. Tool Protocol's `_activity: ""`, a latent call): not an id.
    for (source, key, value) in ids.into_iter().filter(|(_, _, value)| !value.is_empty()) {
        stmt.execute(params![ctx.tenant, invocation_id, source, key, value, ctx.seq])
            .sql("insert external id")?;
    }
    Ok(())
}

/// The stored `data` of the row keyed (tenant, `key_column` = `key`) merged with this event's data,
/// and the row's first sequence (this one for a new row).
fn merged_with(ctx: &Ctx<'_>, table: &str, key_column: &str, key: &str) -> Result<(Map<String, Value>, i64)> {
    merged_keeping(ctx, table, key_column, key, &[])
}

/// [`merged_with`], keeping the stored value of the `keep` fields when the row exists.
fn merged_keeping(
    ctx: &Ctx<'_>,
    table: &str,
    key_column: &str,
    key: &str,
    keep: &[&str],
) -> Result<(Map<String, Value>, i64)> {
    let found = load_object(
        ctx.tx,
        table,
        &format!("tenant = ?1 AND {key_column} = ?2"),
        &[&ctx.tenant, &key],
    )?;
    let (mut merged, first_seq) = found.unwrap_or_else(|| (Map::new(), ctx.seq));
    merge(&mut merged, &ctx.raw, keep);
    Ok((merged, first_seq))
}

fn upsert_hook(ctx: &Ctx<'_>, invocation_id: &str, hook: &ToolHook) -> Result<ToolHook> {
    let (merged, first_seq) = merged_with(ctx, "hooks", "hook_id", &hook.hook_id)?;
    let merged_hook: ToolHook = typed(&merged, hook);
    let phase = match ctx.class {
        EventClass::HookPreStarted | EventClass::HookPreCompleted => "pre",
        _ => "post",
    };
    ctx.tx
        .prepare_cached(
            "INSERT OR REPLACE INTO hooks (tenant, hook_id, invocation_id, tool_id, phase, hook_event, matcher,
                outputs, permission_result, updated_input, additional_context, stop, updated_output,
                started_at, ended_at, first_seq, last_seq, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        )
        .sql("prepare hook")?
        .execute(params![
            ctx.tenant,
            merged_hook.hook_id,
            invocation_id,
            merged_hook.tool_id,
            phase,
            merged_hook.hook_event.as_str(),
            to_json(&merged_hook.matcher),
            to_json(&merged_hook.outputs),
            to_json(&merged_hook.permission_result),
            to_json(&merged_hook.updated_input),
            to_json(&merged_hook.additional_context),
            to_json(&merged_hook.stop),
            to_json(&merged_hook.updated_output),
            merged_hook.started_at,
            merged_hook.ended_at,
            first_seq,
            ctx.seq,
            Value::Object(merged).to_string()
        ])
        .sql("insert hook")?;
    // This event's own updated_input is the mutation (not one merged in from an earlier snapshot).
    let mut own = merged_hook;
    own.updated_input = hook.updated_input.clone();
    Ok(own)
}

fn insert_decision(ctx: &Ctx<'_>, invocation_id: &str, d: &ToolPermissionDecision) -> Result<()> {
    let reason = d.reason.as_ref();
    let typed_reason = reason.and_then(Loose::typed);
    ctx.tx
        .prepare_cached(
            "INSERT INTO permission_decisions (seq, tenant, decision_id, invocation_id, behavior, mode, source,
                reason_type, reason_message, reason, rule_refs, policy_refs, updated_input, user_modified,
                decided_at, expires_at, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        )
        .sql("prepare decision")?
        .execute(params![
            ctx.seq,
            ctx.tenant,
            d.decision_id,
            invocation_id,
            d.behavior.as_str(),
            d.mode,
            d.source.as_ref().map(|s| s.as_str().to_owned()),
            typed_reason.and_then(|r| r.reason_type.as_ref().map(|t| t.as_str().to_owned())),
            typed_reason.and_then(|r| r.message.clone()),
            to_json(&d.reason),
            to_json(&d.rule_refs),
            to_json(&d.policy_refs),
            to_json(&d.updated_input),
            d.user_modified,
            d.decided_at,
            d.expires_at,
            Value::Object(ctx.raw.clone()).to_string()
        ])
        .sql("insert decision")?;
    Ok(())
}

fn number(n: &Option<serde_json::Number>) -> Option<f64> {
    n.as_ref().and_then(serde_json::Number::as_f64)
}

fn upsert_progress(ctx: &Ctx<'_>, invocation_id: &str, progress: &ToolProgress) -> Result<()> {
    let (merged, _) = merged_with(ctx, "progress", "progress_id", &progress.progress_id)?;
    let p: ToolProgress = typed(&merged, progress);
    ctx.tx
        .prepare_cached(
            "INSERT OR REPLACE INTO progress (tenant, progress_id, invocation_id, sequence, status, message,
                percent, current_step, total_steps, elapsed_ms, bytes_read, bytes_written, line_count, task_id,
                timestamp, seq, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        )
        .sql("prepare progress")?
        .execute(params![
            ctx.tenant,
            p.progress_id,
            invocation_id,
            p.sequence.as_f64(),
            p.status.as_str(),
            p.message,
            number(&p.percent),
            p.current_step,
            number(&p.total_steps),
            number(&p.elapsed_ms),
            number(&p.bytes_read),
            number(&p.bytes_written),
            number(&p.line_count),
            p.task_id,
            p.timestamp,
            ctx.seq,
            Value::Object(merged).to_string()
        ])
        .sql("insert progress")?;
    Ok(())
}

/// Bytes of the text blocks of a result's `content`.
fn content_bytes(result: &ToolResult) -> Option<i64> {
    let content = result.content.as_ref()?;
    let bytes: usize = content
        .iter()
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .map(str::len)
        .sum();
    i64::try_from(bytes).ok()
}

fn upsert_result(ctx: &Ctx<'_>, invocation_id: &str, result: &ToolResult, duplicate: bool) -> Result<()> {
    let existing: Option<(String, Option<i64>, Option<i64>, bool)> = ctx
        .tx
        .prepare_cached(
            "SELECT kind, content_bytes, redacted_seq, duplicate FROM results WHERE tenant = ?1 AND result_id = ?2",
        )
        .sql("prepare result lookup")?
        .query_row(params![ctx.tenant, result.result_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
        .sql("result lookup")?;
    let redacting = ctx.class == EventClass::ResultRedacted;
    // A producer's redaction replaces the content it redacts (content, summaries, redaction state);
    // the result's status and creation stay those of the result it redacts.
    let keep: &[&str] = if redacting {
        &["status", "is_error", "created_at"]
    } else {
        &[]
    };
    let (merged, first_seq) = merged_keeping(ctx, "results", "result_id", &result.result_id, keep)?;
    let merged_result: ToolResult = typed(&merged, result);
    let kind = match (ctx.class, &existing) {
        (EventClass::InvocationPartialResult, None) => "partial".to_owned(),
        (EventClass::ResultCreated, _) => "final".to_owned(),
        (_, Some((kind, ..))) => kind.clone(),
        _ => "final".to_owned(),
    };
    // The size as created: a producer's redaction replaces the content, not the fact of its size.
    let size = match &existing {
        Some((_, size, ..)) if redacting => *size,
        _ => content_bytes(result),
    };
    let redacted_seq = if redacting {
        Some(ctx.seq)
    } else {
        existing.as_ref().and_then(|e| e.2)
    };
    let redaction_state = merged_result
        .redaction_state
        .clone()
        .or_else(|| redacting.then(|| "redacted".to_owned()));
    let error = merged_result.error.as_ref().and_then(Loose::typed);
    let duplicate = duplicate || existing.as_ref().is_some_and(|e| e.3);
    ctx.tx
        .prepare_cached(
            "INSERT OR REPLACE INTO results (tenant, result_id, invocation_id, kind, status, is_error, content_bytes,
                summary, ui_facing_summary, redaction_state, redacted_seq, error_class, error_code,
                persistence_refs, created_at, first_seq, last_seq, duplicate, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
        )
        .sql("prepare result")?
        .execute(params![
            ctx.tenant,
            merged_result.result_id,
            invocation_id,
            kind,
            merged_result.status.as_str(),
            merged_result.is_error,
            size,
            merged_result.summary,
            merged_result.ui_facing_summary,
            redaction_state,
            redacted_seq,
            error.and_then(|e| e.error_class.as_ref().map(|c| c.as_str().to_owned())),
            error.and_then(|e| e.error_code.clone()),
            to_json(&merged_result.persistence_refs),
            merged_result.created_at,
            first_seq,
            ctx.seq,
            duplicate,
            Value::Object(merged).to_string()
        ])
        .sql("insert result")?;
    Ok(())
}

fn upsert_persistence(ctx: &Ctx<'_>, invocation_id: &str, persistence: &ToolResultPersistence) -> Result<()> {
    let (merged, _) = merged_with(ctx, "result_persistence", "decision_id", &persistence.decision_id)?;
    let p: ToolResultPersistence = typed(&merged, persistence);
    ctx.tx
        .prepare_cached(
            "INSERT OR REPLACE INTO result_persistence (tenant, decision_id, invocation_id, result_id, strategy,
                threshold, original_size_bytes, preview_size_bytes, persisted_ref, redaction_state, reason,
                created_at, seq, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )
        .sql("prepare persistence")?
        .execute(params![
            ctx.tenant,
            p.decision_id,
            invocation_id,
            p.result_id,
            p.strategy.as_str(),
            to_json(&p.threshold),
            p.original_size_bytes.as_ref().and_then(serde_json::Number::as_i64),
            p.preview_size_bytes.as_ref().and_then(serde_json::Number::as_i64),
            to_json(&p.persisted_ref),
            p.redaction_state,
            p.reason,
            p.created_at,
            ctx.seq,
            Value::Object(merged).to_string()
        ])
        .sql("insert persistence")?;
    Ok(())
}
