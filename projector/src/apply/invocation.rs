//! Invocation events: the one invocation fold ([`toolledger_schemas::fold`]) for the invocation
//! itself — its row, transitions, anomalies and input mutations — and the records that belong to an
//! invocation (decisions, hooks, progress, results, persistence).
//!
//! A batch keeps the folds of the invocations it touches in memory ([`Invocations`]): the first
//! event of an invocation in a batch loads its stored fold (`invocations.fold`), every event of the
//! batch applies to it, and [`Invocations::write`] writes each changed invocation's row once, with
//! an UPDATE (or an INSERT for a new one), before the batch's position. A rebuild keeps them across
//! batches instead ([`Invocations::spill`]): its generation is read by nobody until it is complete,
//! so a row is written when its fold leaves memory — once, for most invocations. Transitions,
//! anomalies and mutations are written as their entries come, from what the fold says each entry
//! did.

use std::borrow::Cow;
use std::collections::HashMap;

use rusqlite::{OptionalExtension, Transaction, params};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use toolledger_schemas::fold::{
    FoldEntry, InputMutationRecord, InputStage, InvocationFold, TransitionRecord,
};
use toolledger_schemas::model::{
    Loose, ToolHook, ToolInvocation, ToolPermissionDecision, ToolProgress, ToolResult, ToolResultPersistence,
};
use toolledger_schemas::state::Config as StateConfig;
use toolledger_schemas::{Data, EventClass};

use super::{Ctx, load_object, merge, scalar_text, to_json, typed};
use crate::error::{Error, Result, SqlContext};

/// One invocation a batch touched.
struct Pending {
    tenant: String,
    invocation_id: String,
    fold: InvocationFold,
    /// Whether its row exists in the database (UPDATE) or not yet (INSERT).
    stored: bool,
    /// When it was last touched (a count of touches), so [`Invocations::spill`] keeps the recent.
    touched: u64,
}

/// The folds of the invocations a batch touched, in the order first touched.
#[derive(Default)]
pub(crate) struct Invocations {
    index: HashMap<(String, String), usize>,
    pending: Vec<Pending>,
    touches: u64,
}

impl Invocations {
    /// The fold of (tenant, invocation), loaded from its row on the batch's first touch.
    fn fold(
        &mut self,
        tx: &Transaction<'_>,
        tenant: &str,
        invocation_id: &str,
    ) -> Result<&mut InvocationFold> {
        let key = (tenant.to_owned(), invocation_id.to_owned());
        self.touches += 1;
        let at = match self.index.get(&key) {
            Some(at) => *at,
            None => {
                let stored: Option<String> = tx
                    .prepare_cached("SELECT fold FROM invocations WHERE tenant = ?1 AND invocation_id = ?2")
                    .sql("prepare load fold")?
                    .query_row(params![tenant, invocation_id], |row| row.get(0))
                    .optional()
                    .sql("load fold")?;
                let fold = match &stored {
                    Some(text) => serde_json::from_str(text).map_err(|source| Error::StoredFold {
                        tenant: tenant.to_owned(),
                        invocation_id: invocation_id.to_owned(),
                        source,
                    })?,
                    None => InvocationFold::default(),
                };
                self.pending.push(Pending {
                    tenant: key.0.clone(),
                    invocation_id: key.1.clone(),
                    fold,
                    stored: stored.is_some(),
                    touched: 0,
                });
                self.index.insert(key, self.pending.len() - 1);
                self.pending.len() - 1
            }
        };
        let pending = &mut self.pending[at];
        pending.touched = self.touches;
        Ok(&mut pending.fold)
    }

    /// Writes the row of every invocation the batch touched, once each, from its fold.
    pub(crate) fn write(&self, tx: &Transaction<'_>) -> Result<()> {
        for pending in &self.pending {
            write_row(tx, pending)?;
        }
        Ok(())
    }

    /// The number of folds held.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Writes and forgets the least recently touched folds beyond `keep`: all of them for 0.
    /// An invocation touched again later loads its fold back from the row written here.
    pub(crate) fn spill(&mut self, tx: &Transaction<'_>, keep: usize) -> Result<()> {
        if self.pending.len() <= keep {
            return Ok(());
        }
        let mut pending = std::mem::take(&mut self.pending);
        // The most recently touched first; the ones past `keep` leave.
        pending.sort_unstable_by_key(|p| std::cmp::Reverse(p.touched));
        let leaving = pending.split_off(keep);
        for left in &leaving {
            write_row(tx, left)?;
        }
        self.index = pending
            .iter()
            .enumerate()
            .map(|(at, p)| ((p.tenant.clone(), p.invocation_id.clone()), at))
            .collect();
        self.pending = pending;
        Ok(())
    }
}

/// Text of an optional JSON value (`None` stays NULL).
fn json_text(value: Option<&Value>) -> Option<String> {
    value.map(Value::to_string)
}

fn write_row(tx: &Transaction<'_>, pending: &Pending) -> Result<()> {
    let fold = &pending.fold;
    let snapshot = fold.snapshot();
    let error = fold.error();
    let inputs = fold.inputs();
    let input = |stage| json_text(inputs.value(stage));
    let reference = |stage| inputs.reference(stage);
    // Through a `Value`, so the stored snapshot's keys are sorted as they were when it was a merged
    // JSON object (readers compare and diff it).
    let snapshot_text = snapshot
        .and_then(|s| serde_json::to_value(s).ok())
        .map_or_else(|| "{}".to_owned(), |s| s.to_string());
    let fold_text = serde_json::to_string(fold).map_err(|source| Error::StoredFold {
        tenant: pending.tenant.clone(),
        invocation_id: pending.invocation_id.clone(),
        source,
    })?;
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let sql = if pending.stored {
        "UPDATE invocations SET session_id = ?3, tool_id = ?4, surface_id = ?5, state = ?6, planned = ?7,
            terminal = ?8, native_call_id = ?9, retry_of = ?10, attempt = ?11, error_class = ?12,
            error_code = ?13, error_message = ?14, error_source = ?15, actor_ref = ?16, created_at = ?17,
            started_at = ?18, ended_at = ?19, first_seq = ?20, last_seq = ?21, latest_time_ns = ?22,
            event_count = ?23, result_id = ?24, model_input = ?25, model_input_ref = ?26,
            observable_input = ?27, observable_input_ref = ?28, permission_input = ?29,
            permission_input_ref = ?30, call_input = ?31, call_input_ref = ?32, snapshot = ?33, fold = ?34
         WHERE tenant = ?1 AND invocation_id = ?2"
    } else {
        "INSERT INTO invocations (tenant, invocation_id, session_id, tool_id, surface_id, state, planned,
            terminal, native_call_id, retry_of, attempt, error_class, error_code, error_message, error_source,
            actor_ref, created_at, started_at, ended_at, first_seq, last_seq, latest_time_ns, event_count,
            result_id, model_input, model_input_ref, observable_input, observable_input_ref, permission_input,
            permission_input_ref, call_input, call_input_ref, snapshot, fold)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
            ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34)"
    };
    tx.prepare_cached(sql)
        .sql("prepare write invocation")?
        .execute(params![
            pending.tenant,
            pending.invocation_id,
            fold.session_id(),
            fold.tool_id(),
            snapshot.and_then(|s| s.surface_id.as_deref()),
            fold.state().as_str(),
            fold.track().planned,
            fold.is_terminal(),
            snapshot.and_then(|s| s.native_call_id.as_deref()),
            fold.retry_of(),
            fold.attempt().and_then(|a| i64::try_from(a).ok()),
            error.as_ref().and_then(|e| e.class()),
            error.as_ref().and_then(|e| e.code()),
            error.as_ref().and_then(|e| e.message()),
            error.as_ref().map(|e| e.source.as_str()),
            snapshot.and_then(|s| s.actor_ref.as_deref()),
            snapshot.map(|s| s.created_at.as_str()),
            snapshot.and_then(|s| s.started_at.as_deref()),
            snapshot.and_then(|s| s.ended_at.as_deref()),
            fold.first_seq().map(as_i64),
            fold.last_seq().map(as_i64),
            fold.latest_time().map(|t| t.0),
            as_i64(fold.event_count()),
            fold.result_id(),
            input(InputStage::ModelInput),
            reference(InputStage::ModelInput),
            input(InputStage::ObservableInput),
            reference(InputStage::ObservableInput),
            input(InputStage::PermissionInput),
            reference(InputStage::PermissionInput),
            input(InputStage::CallInput),
            reference(InputStage::CallInput),
            snapshot_text,
            fold_text,
        ])
        .sql("write invocation")?;
    Ok(())
}

/// Applies one invocation event: folds it into its invocation, writes what it did (transition,
/// anomalies, mutations) and the record it carries.
pub(super) fn apply(
    ctx: &mut Ctx<'_>,
    data: &Data,
    invocations: &mut Invocations,
    config: &StateConfig,
) -> Result<()> {
    let Some(invocation_id) = ctx.ext_invocation.clone() else {
        ctx.tx
            .execute(
                "UPDATE events SET problem = 'an invocation event without invocation_id' WHERE seq = ?1",
                [ctx.seq],
            )
            .sql("flag event")?;
        return Ok(());
    };
    let fold = invocations.fold(ctx.tx, &ctx.tenant, &invocation_id)?;
    let applied = fold.apply(
        &FoldEntry {
            seq: u64::try_from(ctx.seq).unwrap_or(0),
            class: ctx.class,
            data,
            time: ctx.time.as_deref(),
            session_id: ctx.session.as_deref(),
            tool_id: ctx.ext_tool.as_deref(),
        },
        config,
    );
    ctx.record_anomalies(Some(&invocation_id), &applied.anomalies)?;
    if let Some(transition) = &applied.transition {
        insert_transition(ctx, &invocation_id, transition)?;
    }
    for at in &applied.mutations {
        if let Some(mutation) = fold.mutations().get(*at) {
            upsert_mutation(ctx, &invocation_id, mutation)?;
        }
    }
    let first_result = fold.result_id().map(str::to_owned);
    match data {
        Data::Invocation(invocation) => external_ids(ctx, &invocation_id, invocation)?,
        Data::Hook(hook) => upsert_hook(ctx, &invocation_id, hook)?,
        Data::PermissionRequest(request) => {
            // A request without its decision id (a `missing_field` anomaly) has no row: requests
            // are keyed by the decision that answers them. Its event, its move to awaiting_approval
            // and its permission input (in the fold's four inputs) are all kept.
            let Some(decision_id) = request.decision_id.as_deref() else {
                return Ok(());
            };
            let (merged, _) = merged_with(ctx, "permission_requests", "decision_id", decision_id)?;
            let request = merged.typed(request.as_ref());
            ctx.tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO permission_requests (tenant, decision_id, invocation_id, tool_id,
                        permission_input, permission_profile_ref, mode, reason, requested_at, seq, data)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .sql("prepare permission request")?
                .execute(params![
                    ctx.tenant,
                    decision_id,
                    invocation_id,
                    request.tool_id,
                    to_json(&request.permission_input),
                    request.permission_profile_ref,
                    request.mode,
                    to_json(&request.reason),
                    request.requested_at,
                    ctx.seq,
                    merged.text()
                ])
                .sql("insert permission request")?;
        }
        Data::PermissionDecision(decision) => insert_decision(ctx, &invocation_id, decision)?,
        Data::Progress(progress) => upsert_progress(ctx, &invocation_id, progress)?,
        Data::Result(result) => {
            // The fold names the invocation's first final result; another one is a duplicate.
            let duplicate = ctx.class == EventClass::ResultCreated
                && first_result.as_deref() != Some(result.result_id.as_str());
            upsert_result(ctx, &invocation_id, result, duplicate)?;
        }
        Data::ResultPersistence(persistence) => upsert_persistence(ctx, &invocation_id, persistence)?,
        _ => {}
    }
    Ok(())
}

fn insert_transition(ctx: &Ctx<'_>, invocation_id: &str, transition: &TransitionRecord) -> Result<()> {
    ctx.tx
        .prepare_cached(
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
            transition.class.as_str(),
            transition.time
        ])
        .sql("insert transition")?;
    Ok(())
}

fn upsert_mutation(ctx: &Ctx<'_>, invocation_id: &str, m: &InputMutationRecord) -> Result<()> {
    // The fold keeps a mutation's first place (seq, idx) when the same source comes again (a hook's
    // started and completed snapshots, a repeated input-mutation object); the row follows it.
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
            i64::try_from(m.seq).unwrap_or(i64::MAX),
            m.idx,
            m.source_ref,
            m.from_input,
            m.to_input,
            serde_json::to_string(&m.changed_fields).unwrap_or_default(),
            m.reason,
            m.created_at,
            json_text(m.value.as_ref())
        ])
        .sql("insert mutation")?;
    Ok(())
}

/// Native ids: `native_call_id`, every scalar of `external_mappings` (object or array) and of
/// `telemetry_refs`, and top-level `jsonrpc_request_id` / `tool_call_id` / `request_id` (fields the
/// invocation schema does not name, so they are in `extra`).
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
    let extra = &invocation.extra;
    match extra
        .get("external_mappings")
        .or_else(|| extra.get("external_mapping"))
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
        if let Some(text) = extra.get(key).and_then(scalar_text) {
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
fn merged_with<'c>(ctx: &'c Ctx<'_>, table: &str, key_column: &str, key: &str) -> Result<(Merged<'c>, i64)> {
    merged_keeping(ctx, table, key_column, key, &[])
}

/// [`merged_with`], keeping the stored value of the `keep` fields when the row exists.
fn merged_keeping<'c>(
    ctx: &'c Ctx<'_>,
    table: &str,
    key_column: &str,
    key: &str,
    keep: &[&str],
) -> Result<(Merged<'c>, i64)> {
    let found = load_object(
        ctx.tx,
        table,
        &format!("tenant = ?1 AND {key_column} = ?2"),
        &[&ctx.tenant, &key],
    )?;
    Ok(match found {
        Some((mut stored, first_seq)) => {
            merge(&mut stored, ctx.raw, keep);
            (Merged::Stored(stored), first_seq)
        }
        None => (Merged::Fresh(ctx.raw), ctx.seq),
    })
}

/// A record's object after an event: the stored one with the event's fields merged in, or the
/// event's own data when nothing was stored (the common case: most records have one event), which
/// needs neither a copy nor a second typed decode.
enum Merged<'c> {
    Fresh(&'c Map<String, Value>),
    Stored(Map<String, Value>),
}

impl Merged<'_> {
    /// The merged record in its typed form: `event` itself (decoded from this very object) when
    /// fresh.
    fn typed<'t, T: DeserializeOwned + Clone>(&self, event: &'t T) -> Cow<'t, T> {
        match self {
            Merged::Fresh(_) => Cow::Borrowed(event),
            Merged::Stored(merged) => Cow::Owned(typed(merged, event)),
        }
    }

    /// The merged object as JSON text, for the row's `data`.
    fn text(&self) -> String {
        let object = match self {
            Merged::Fresh(object) => object,
            Merged::Stored(object) => object,
        };
        serde_json::to_string(object).unwrap_or_default()
    }
}

fn upsert_hook(ctx: &Ctx<'_>, invocation_id: &str, hook: &ToolHook) -> Result<()> {
    let (merged, first_seq) = merged_with(ctx, "hooks", "hook_id", &hook.hook_id)?;
    let merged_hook = merged.typed(hook);
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
            merged.text()
        ])
        .sql("insert hook")?;
    Ok(())
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
    let p = merged.typed(progress);
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
            merged.text()
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
    let merged_result = merged.typed(result);
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
            merged.text()
        ])
        .sql("insert result")?;
    Ok(())
}

fn upsert_persistence(ctx: &Ctx<'_>, invocation_id: &str, persistence: &ToolResultPersistence) -> Result<()> {
    let (merged, _) = merged_with(ctx, "result_persistence", "decision_id", &persistence.decision_id)?;
    let p = merged.typed(persistence);
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
            merged.text()
        ])
        .sql("insert persistence")?;
    Ok(())
}
