//! The fold's rules, one test each, and the property that a fold stored and restored between any
//! two entries continues exactly as one that was not.

use super::*;
use crate::model::ErrorClass;
use crate::state::AnomalyKind;
use proptest::prelude::*;
use serde_json::json;

use EventClass as C;

fn invocation(status: &str, extra: Value) -> Value {
    let mut object = json!({
        "schema_version": "0.2.0",
        "invocation_id": "inv_1",
        "tool_id": "tool_a",
        "status": status,
        "created_at": "2026-05-08T00:00:00Z",
    });
    if let (Some(object), Value::Object(extra)) = (object.as_object_mut(), extra) {
        object.extend(extra);
    }
    object
}

fn hook(id: &str, extra: Value) -> Value {
    let mut object = json!({"schema_version": "0.2.0", "hook_id": id, "hook_event": "pre_tool_use",
        "invocation_id": "inv_1"});
    if let (Some(object), Value::Object(extra)) = (object.as_object_mut(), extra) {
        object.extend(extra);
    }
    object
}

fn decision(id: &str, behavior: &str, extra: Value) -> Value {
    let mut object = json!({"schema_version": "0.2.0", "decision_id": id, "invocation_id": "inv_1",
        "behavior": behavior, "decided_at": "2026-05-08T00:00:01Z"});
    if let (Some(object), Value::Object(extra)) = (object.as_object_mut(), extra) {
        object.extend(extra);
    }
    object
}

fn result(id: &str, extra: Value) -> Value {
    let mut object = json!({"schema_version": "0.2.0", "result_id": id, "invocation_id": "inv_1",
        "status": "success", "created_at": "2026-05-08T00:00:03Z"});
    if let (Some(object), Value::Object(extra)) = (object.as_object_mut(), extra) {
        object.extend(extra);
    }
    object
}

/// Folds `(class, data)` with sequences 1.. and times one second apart.
fn fold(events: &[(EventClass, Value)]) -> (InvocationFold, InvocationLog) {
    fold_with(events, |_| None)
}

fn fold_with(
    events: &[(EventClass, Value)],
    toolid: impl Fn(usize) -> Option<&'static str>,
) -> (InvocationFold, InvocationLog) {
    let mut fold = InvocationFold::default();
    let mut log = InvocationLog::default();
    for (i, (class, data)) in events.iter().enumerate() {
        let data = Data::decode_for(*class, data).expect("test data decodes");
        let time = format!("2026-05-08T00:00:{:02}Z", i.min(59));
        let applied = fold.apply(
            &FoldEntry {
                seq: i as u64 + 1,
                class: *class,
                data: &data,
                time: Some(&time),
                session_id: (i > 0).then_some("sess_1"),
                tool_id: toolid(i),
            },
            &Config::default(),
        );
        log.record(&applied);
    }
    (fold, log)
}

#[test]
fn model_input_is_first_seen_and_the_others_the_last_carried() {
    let (fold, _) = fold(&[
        (
            C::InvocationPlanned,
            invocation(
                "planned",
                json!({"model_input": {"q": 1}, "model_input_ref": "r1"}),
            ),
        ),
        (
            C::InvocationArgumentsReady,
            invocation(
                "arguments_ready",
                json!({"model_input": {"q": 2}, "model_input_ref": "r2",
                    "observable_input": {"q": 2}, "call_input": null}),
            ),
        ),
        (
            C::PermissionRequested,
            json!({"decision_id": "d1", "invocation_id": "inv_1", "permission_input": {"q": 3},
                "requested_at": "2026-05-08T00:00:02Z"}),
        ),
    ]);
    let inputs = fold.inputs();
    assert_eq!(inputs.value(InputStage::ModelInput), Some(&json!({"q": 1})));
    assert_eq!(inputs.reference(InputStage::ModelInput), Some("r1"));
    assert_eq!(inputs.value(InputStage::ObservableInput), Some(&json!({"q": 2})));
    assert_eq!(inputs.value(InputStage::PermissionInput), Some(&json!({"q": 3})));
    assert_eq!(
        inputs.value(InputStage::CallInput),
        Some(&Value::Null),
        "an explicit null is carried"
    );
    let snapshot = fold.snapshot().expect("merged");
    assert_eq!(
        snapshot.model_input,
        Some(json!({"q": 1})),
        "the snapshot keeps it too"
    );
    assert_eq!(snapshot.status.as_str(), "arguments_ready");
    assert!(fold.mutations().is_empty(), "carrying an input is not a mutation");
}

#[test]
fn hooks_and_decisions_mutate_the_input_their_place_in_the_lifecycle_names() {
    let (fold, _) = fold(&[
        (
            C::InvocationPlanned,
            invocation("planned", json!({"model_input": {"cmd": "rm", "cwd": "/"}})),
        ),
        (
            C::HookPreStarted,
            hook("h1", json!({"updated_input": {"cmd": "ls", "cwd": "/"}})),
        ),
        (
            C::HookPreCompleted,
            hook("h1", json!({"updated_input": {"cmd": "ls -l", "cwd": "/"}})),
        ),
        (
            C::PermissionDecided,
            decision(
                "d1",
                "allow",
                json!({"updated_input": {"cmd": "ls -l", "cwd": "/tmp"}}),
            ),
        ),
        (
            C::HookPreCompleted,
            hook("h2", json!({"updated_input": {"cmd": "ls -la"}})),
        ),
    ]);
    let m = fold.mutations();
    assert_eq!(m.len(), 3, "{m:?}");
    assert_eq!((m[0].source.as_str(), m[0].source_id.as_str()), ("hook", "h1"));
    assert_eq!(
        m[0].seq, 2,
        "the same hook again updates it in place, keeping its place"
    );
    assert_eq!(m[0].from_input.as_deref(), Some("model_input"));
    assert_eq!(
        m[0].to_input.as_deref(),
        Some("permission_input"),
        "before any decision"
    );
    assert_eq!(m[0].changed_fields, ["cmd"]);
    assert_eq!(m[0].value, Some(json!({"cmd": "ls -l", "cwd": "/"})));
    assert_eq!(m[1].source, "permission_decision");
    assert_eq!(m[1].from_input.as_deref(), Some("permission_input"));
    assert_eq!(m[1].to_input.as_deref(), Some("call_input"));
    assert_eq!(m[1].changed_fields, ["cwd"]);
    assert_eq!(m[2].to_input.as_deref(), Some("call_input"), "after a decision");
    assert_eq!(m[2].from_input.as_deref(), Some("permission_input"));
    assert_eq!(m[2].changed_fields, ["cmd", "cwd"]);
    assert_eq!(
        fold.inputs().value(InputStage::CallInput),
        Some(&json!({"cmd": "ls -la"}))
    );
    assert_eq!(fold.decision_count(), 1);
    assert_eq!(fold.last_behavior(), Some(PermissionBehavior::Allow));
}

#[test]
fn official_input_mutation_objects_are_recorded_as_stated() {
    let mutation = |id: &str, reason: &str| {
        json!({"schema_version": "0.2.0", "mutation_id": id, "invocation_id": "inv_1",
            "source_type": "adapter", "from_input_ref": "model_input", "to_input_ref": "call_input",
            "reason": reason, "created_at": "2026-05-08T00:00:01Z"})
    };
    let (fold, _) = fold(&[
        (
            C::InvocationPlanned,
            invocation(
                "planned",
                json!({"input_mutations": [mutation("m1", "a"), {"not": "one"}, mutation("m2", "b")]}),
            ),
        ),
        (
            C::InvocationStarted,
            invocation("running", json!({"input_mutations": [mutation("m1", "again")]})),
        ),
    ]);
    let m = fold.mutations();
    assert_eq!(m.len(), 2);
    assert_eq!(
        (m[0].seq, m[0].idx, m[0].reason.as_deref()),
        (1, 0, Some("again"))
    );
    assert_eq!((m[1].seq, m[1].idx), (1, 1));
    assert_eq!(m[1].source, "adapter");
    assert_eq!(m[1].from_input.as_deref(), Some("model_input"));
}

#[test]
fn the_invocations_own_error_wins_over_its_first_results() {
    let failed = json!({"error": {"error_class": "timeout", "error_code": "E1", "message": "own"}});
    let result_error = json!({"error": {"error_class": "execution_failed", "message": "result's"}});
    let (fold_a, _) = fold(&[
        (C::InvocationPlanned, invocation("planned", json!({}))),
        (C::ResultCreated, result("r1", result_error.clone())),
        (C::InvocationFailed, invocation("failed", failed)),
    ]);
    let error = fold_a.error().expect("an error");
    assert_eq!(error.source, ErrorSource::Invocation);
    assert_eq!(
        (error.class(), error.code(), error.message()),
        (Some("timeout"), Some("E1"), Some("own"))
    );

    let (fold_b, _) = fold(&[
        (
            C::InvocationPlanned,
            invocation("planned", json!({"error": "not an object"})),
        ),
        (
            C::InvocationPartialResult,
            result("p1", json!({"error": {"message": "partial"}})),
        ),
        (C::ResultCreated, result("r1", result_error)),
        (
            C::ResultCreated,
            result("r2", json!({"error": {"message": "second"}})),
        ),
        (
            C::ResultRedacted,
            result("r1", json!({"error": {"message": "redacted"}})),
        ),
        (C::InvocationFailed, invocation("failed", json!({}))),
    ]);
    let error = fold_b.error().expect("the first result's");
    assert_eq!(error.source, ErrorSource::Result);
    assert_eq!(error.error.error_class, Some(ErrorClass::ExecutionFailed));
    assert_eq!(error.message(), Some("result's"));
    assert_eq!(fold_b.result_id(), Some("r1"));

    let (fold_c, _) = fold(&[
        (C::InvocationPlanned, invocation("planned", json!({}))),
        (C::ResultCreated, result("r1", json!({}))),
        (
            C::ResultCreated,
            result("r2", json!({"error": {"message": "second"}})),
        ),
    ]);
    assert_eq!(fold_c.error(), None, "only the first final result stands in");
}

#[test]
fn the_tool_is_the_snapshots_else_the_first_one_an_entry_names() {
    let (orphan, _) = fold_with(
        &[
            (C::PermissionDecided, decision("d1", "ask", json!({}))),
            (
                C::HookPreStarted,
                hook("h1", json!({"tool_id": "tool_from_hook"})),
            ),
            (C::HookPreCompleted, hook("h1", json!({"tool_id": "tool_later"}))),
        ],
        |i| (i == 0).then_some("tool_from_extension"),
    );
    assert_eq!(orphan.tool_id(), Some("tool_from_extension"));
    assert_eq!(orphan.state(), InvocationState::Unknown);

    let (planned, _) = fold_with(
        &[
            (
                C::HookPreStarted,
                hook("h1", json!({"tool_id": "tool_from_hook"})),
            ),
            (C::InvocationPlanned, invocation("planned", json!({}))),
        ],
        |_| Some("tool_from_extension"),
    );
    assert_eq!(planned.tool_id(), Some("tool_a"), "an invocation object names it");
}

#[test]
fn the_track_transitions_and_anomalies_are_the_state_machines() {
    let (fold, log) = fold(&[
        (C::InvocationStarted, invocation("running", json!({}))),
        (
            C::InvocationPlanned,
            invocation("planned", json!({"retry_of": "inv_0", "attempt": 2})),
        ),
        (C::InvocationStarted, invocation("queued", json!({}))),
        (
            C::InvocationSucceeded,
            invocation("succeeded", json!({"ended_at": "2026-05-08T00:00:09Z"})),
        ),
        (C::InvocationQueued, invocation("queued", json!({}))),
    ]);
    assert_eq!(fold.state(), InvocationState::Succeeded);
    assert_eq!(
        (fold.first_seq(), fold.last_seq(), fold.event_count()),
        (Some(1), Some(5), 5)
    );
    assert_eq!(fold.session_id(), Some("sess_1"), "the first one an entry names");
    assert_eq!((fold.retry_of(), fold.attempt()), (Some("inv_0"), Some(2)));
    assert_eq!(
        fold.snapshot().and_then(|s| s.ended_at.as_deref()),
        Some("2026-05-08T00:00:09Z")
    );
    let moves: Vec<(u64, InvocationState)> = log.transitions.iter().map(|t| (t.seq, t.to)).collect();
    assert_eq!(
        moves,
        [
            (2, InvocationState::Planned),
            (3, InvocationState::Running),
            (4, InvocationState::Succeeded)
        ]
    );
    assert_eq!(log.transitions[1].class, C::InvocationStarted);
    assert_eq!(log.transitions[1].time.as_deref(), Some("2026-05-08T00:00:02Z"));
    let kinds: Vec<(u64, AnomalyKind)> = log.anomalies.iter().map(|a| (a.seq, a.anomaly.kind())).collect();
    assert_eq!(
        kinds,
        [
            (1, AnomalyKind::OrphanEvent),
            (3, AnomalyKind::StatusMismatch),
            (5, AnomalyKind::EventAfterTerminal)
        ]
    );
}

#[test]
fn records_serialize_flat_and_round_trip() {
    let (fold, log) = fold(&[
        (C::InvocationStarted, invocation("bogus", json!({}))),
        (C::InvocationPlanned, invocation("planned", json!({}))),
    ]);
    let text = serde_json::to_string(&log).expect("serializes");
    assert!(text.contains(r#"{"seq":1,"kind":"unknown_value","#), "{text}");
    assert_eq!(serde_json::from_str::<InvocationLog>(&text).expect("parses"), log);
    let text = serde_json::to_string(&fold).expect("serializes");
    assert_eq!(
        serde_json::from_str::<InvocationFold>(&text).expect("parses"),
        fold
    );
    assert!(
        serde_json::from_str::<InvocationFold>(r#"{"track":{},"snapshot":{},"session_id":null}"#).is_err(),
        "a stored shape of another kind is refused, not half read"
    );
}

/// Every kind of entry an invocation can see, odd ones included; the property picks from these.
fn menu() -> Vec<(EventClass, Value)> {
    vec![
        (
            C::InvocationPlanned,
            invocation("planned", json!({"model_input": {"a": 1}})),
        ),
        (
            C::InvocationPlanned,
            invocation("planned", json!({"model_input": null, "retry_of": "x"})),
        ),
        (
            C::InvocationSelected,
            invocation("selected", json!({"surface_id": "s1"})),
        ),
        (
            C::InvocationArgumentsReady,
            invocation("schema_parse_failed", json!({"observable_input": {"a": 2}})),
        ),
        (
            C::InvocationArgumentsReady,
            invocation("arguments_ready", json!({"call_input": null})),
        ),
        (C::HookPreStarted, hook("h1", json!({"updated_input": {"a": 3}}))),
        (
            C::HookPreCompleted,
            hook("h1", json!({"updated_input": null, "tool_id": "tool_h"})),
        ),
        (C::HookPreCompleted, hook("h2", json!({"stop": {"reason": "no"}}))),
        (
            C::PermissionRequested,
            json!({"decision_id": "d1", "invocation_id": "inv_1", "permission_input": {"a": 4},
                "requested_at": "2026-05-08T00:00:02Z"}),
        ),
        (
            C::PermissionDecided,
            decision("d1", "allow", json!({"updated_input": {"a": 5, "b": 1}})),
        ),
        (C::PermissionDecided, decision("d2", "deny", json!({}))),
        (
            C::PermissionDecided,
            decision("d3", "passthrough", json!({"updated_input": null})),
        ),
        (
            C::InvocationQueued,
            invocation("queued", json!({"x_extra": [1, {"y": null}]})),
        ),
        (
            C::InvocationStarted,
            invocation("running", json!({"started_at": "2026-05-08T00:00:03Z"})),
        ),
        (C::InvocationStarted, invocation("queued", json!({}))),
        (
            C::InvocationProgress,
            json!({"schema_version": "0.2.0", "progress_id": "p1", "invocation_id": "inv_1",
                "sequence": 1, "status": "needs_input", "timestamp": "2026-05-08T00:00:04Z"}),
        ),
        (
            C::InvocationPartialResult,
            result("p1", json!({"error": {"message": "partial"}})),
        ),
        (
            C::ResultCreated,
            result("r1", json!({"error": {"error_class": "tool_error"}})),
        ),
        (C::ResultCreated, result("r2", json!({"status": "denied"}))),
        (
            C::ResultRedacted,
            result("r1", json!({"redaction_state": "redacted"})),
        ),
        (
            C::InvocationFailed,
            invocation(
                "failed",
                json!({"error": {"error_code": "E1"}, "ended_at": "2026-05-08T00:00:09Z"}),
            ),
        ),
        (
            C::InvocationSucceeded,
            invocation("succeeded", json!({"attempt": 3})),
        ),
        (
            C::InvocationCanceled,
            invocation(
                "canceled",
                json!({"input_mutations": [{"schema_version": "0.2.0", "mutation_id": "m1",
                    "invocation_id": "inv_1", "source_type": "runtime", "created_at": "2026-05-08T00:00:01Z"}]}),
            ),
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Cutting the fold anywhere, storing it as JSON and going on from the stored copy gives the
    /// same fold and the same per-entry effects: where a reader cuts its batches never shows.
    #[test]
    fn a_stored_fold_continues_as_the_one_in_memory(
        picks in proptest::collection::vec(0usize..23, 1..24),
        cut in 0usize..24,
    ) {
        let menu = menu();
        let events: Vec<(EventClass, Value)> = picks.iter().map(|i| menu[*i % menu.len()].clone()).collect();
        let decoded: Vec<(EventClass, Data)> = events
            .iter()
            .map(|(class, data)| (*class, Data::decode_for(*class, data).expect("menu decodes")))
            .collect();
        let entry = |i: usize| FoldEntry {
            seq: i as u64 + 1,
            class: decoded[i].0,
            data: &decoded[i].1,
            time: None,
            session_id: None,
            tool_id: None,
        };
        let config = Config::default();
        let mut whole = InvocationFold::default();
        let mut whole_effects = Vec::new();
        for i in 0..decoded.len() {
            whole_effects.push(whole.apply(&entry(i), &config));
        }
        let mut cut_fold = InvocationFold::default();
        let mut cut_effects = Vec::new();
        for i in 0..decoded.len() {
            if i == cut {
                let stored = serde_json::to_string(&cut_fold).expect("serializes");
                cut_fold = serde_json::from_str(&stored).expect("parses");
            }
            cut_effects.push(cut_fold.apply(&entry(i), &config));
        }
        prop_assert_eq!(&whole, &cut_fold);
        prop_assert_eq!(whole_effects, cut_effects);
        prop_assert_eq!(
            serde_json::to_string(&whole).expect("serializes"),
            serde_json::to_string(&cut_fold).expect("serializes")
        );
    }
}
