//! The generator's promises: determinism by seed, all 27 classes, realistic envelopes, and a truth
//! consistent with the events it describes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use toolledger_schemas::EventClass;
use toolledger_schemas::generator::{
    Generated, GeneratorConfig, SECRET_MARKER, Scenario, SecretKind, Truth, generate,
};
use toolledger_schemas::validate::validate_event;

fn config(seed: u64) -> GeneratorConfig {
    GeneratorConfig {
        seed,
        sessions: 3,
        tenants: vec!["acme".into(), "globex".into()],
        plant_anomalies: true,
        ..GeneratorConfig::default()
    }
}

fn by_id(g: &Generated) -> BTreeMap<&str, &Value> {
    g.events
        .iter()
        .map(|e| (e["id"].as_str().expect("id"), e))
        .collect()
}

#[test]
fn same_seed_same_output_other_seed_other_output() {
    let a = generate(&config(42));
    let b = generate(&config(42));
    assert_eq!(a, b);
    let c = generate(&config(43));
    assert_ne!(a.events, c.events);
}

#[test]
fn one_session_covers_all_27_classes_and_every_event_is_valid() {
    let g = generate(&GeneratorConfig::default());
    let seen: BTreeSet<&str> = g.events.iter().filter_map(|e| e["type"].as_str()).collect();
    for class in EventClass::agent_tool() {
        assert!(seen.contains(class.as_str()), "{class} not generated");
    }
    assert_eq!(g.truth.class_counts.len(), 27);
    for e in &g.events {
        validate_event(e).unwrap_or_else(|err| panic!("{err}\n{e}"));
    }
}

#[test]
fn envelopes_follow_the_event_contract() {
    let g = generate(&config(5));
    let mut ids = BTreeSet::new();
    let mut last_time: BTreeMap<&str, &str> = BTreeMap::new();
    let backdated: BTreeSet<&str> = g
        .truth
        .anomalies
        .iter()
        .filter(|a| a.kind == "out_of_order")
        .map(|a| a.event_id.as_str())
        .collect();
    for e in &g.events {
        let id = e["id"].as_str().expect("id");
        assert!(ids.insert(id), "duplicate id {id}");
        let class: EventClass = e["type"].as_str().expect("type").parse().expect("class");
        let data = &e["data"];
        let subject = e["subject"].as_str().expect("subject");
        let expected_subject = match class {
            EventClass::ToolDeclared | EventClass::DeferredDiscovered | EventClass::DeferredLoaded => {
                &data["tool_id"]
            }
            EventClass::SurfaceCreated | EventClass::SurfaceUpdated => &data["surface_id"],
            _ => &data["invocation_id"],
        };
        assert_eq!(Some(subject), expected_subject.as_str(), "{class} subject");
        if expected_subject == &data["invocation_id"] {
            assert_eq!(e["invocationid"].as_str(), Some(subject), "{class} invocationid");
            assert!(
                e["toolid"].is_string() && e["sessionid"].is_string(),
                "{class} extensions"
            );
        }
        if let Some(tool) = data.get("tool_id") {
            assert_eq!(&e["toolid"], tool, "{class} toolid");
        }
        // Times increase within a session (apart from the planted out_of_order event).
        if let Some(session) = e["sessionid"].as_str() {
            let time = e["time"].as_str().expect("time");
            if !backdated.contains(id)
                && let Some(prev) = last_time.insert(session, time)
            {
                assert!(prev < time, "time went back in {session}: {prev} then {time}");
            }
        }
    }
    // Sessions are interleaved in publish order, and there are real durations.
    assert_eq!(g.truth.sessions.len(), 3);
    for s in &g.truth.sessions {
        assert!(s.ended_at > s.started_at);
    }
}

fn check_truth(g: &Generated) {
    let events = by_id(g);
    let truth: &Truth = &g.truth;
    let mut per_invocation: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in &g.events {
        if let Some(inv) = e["invocationid"].as_str() {
            per_invocation
                .entry(inv)
                .or_default()
                .push(e["id"].as_str().expect("id"));
        }
    }
    for inv in &truth.invocations {
        let listed: Vec<&str> = inv.event_ids.iter().map(String::as_str).collect();
        assert_eq!(
            per_invocation.get(inv.invocation_id.as_str()),
            Some(&listed),
            "{}",
            inv.invocation_id
        );
        assert_eq!(inv.states.last(), Some(&inv.final_state));
        assert_eq!(inv.states.first().map(String::as_str), Some("planned"));
        let first = events[listed[0]];
        assert_eq!(first["type"], "tool.invocation.planned");
        assert_eq!(
            first["data"]["model_input"],
            Value::Null,
            "planned carries no input yet"
        );
        if let Some(of) = &inv.retry_of {
            let earlier = truth.invocation(of).expect("retried invocation exists");
            assert!(earlier.terminal || earlier.final_state == "schema_parse_failed");
            assert!(inv.attempt >= 2);
            assert_eq!(first["data"]["retry_of"].as_str(), Some(of.as_str()));
        }
        // Mutations chain the four inputs: each ends where the inputs say.
        let text: String = listed.iter().map(|id| events[id].to_string()).collect();
        for m in &inv.mutations {
            assert!(["adapter", "runtime", "hook", "permission_decision"].contains(&m.source.as_str()));
            assert!(!m.changed_fields.is_empty());
            assert!(
                text.contains(&m.source_id),
                "mutation source {} not in events",
                m.source_id
            );
        }
        if let Some(last_decision) = inv.permission_decisions.last() {
            let expected = match last_decision.behavior.as_str() {
                "deny" => "denied",
                _ => "",
            };
            if !expected.is_empty() {
                assert_eq!(inv.final_state, expected);
            }
        }
        if let Some(result) = &inv.result {
            let created = inv
                .event_ids
                .iter()
                .map(|id| events[id.as_str()])
                .find(|e| {
                    e["type"] == "tool.result.created" && e["data"]["result_id"] == result.result_id.as_str()
                })
                .expect("result event");
            assert_eq!(created["data"]["status"].as_str(), Some(result.status.as_str()));
        }
        match inv.scenario {
            Scenario::Denied => assert_eq!(inv.result.as_ref().map(|r| r.status.as_str()), Some("denied")),
            Scenario::HookStop => assert_eq!(inv.final_state, "blocked"),
            Scenario::ValidationFailed => assert_eq!(inv.final_state, "validation_failed"),
            Scenario::SchemaParseFailed => {
                assert_eq!(inv.final_state, "schema_parse_failed");
                let ready = inv
                    .event_ids
                    .iter()
                    .map(|id| events[id.as_str()])
                    .find(|e| e["type"] == "tool.invocation.arguments_ready")
                    .expect("arguments_ready");
                assert_eq!(ready["data"]["status"], "schema_parse_failed");
            }
            Scenario::TimedOut => assert_eq!(inv.final_state, "timed_out"),
            Scenario::Canceled => assert_eq!(inv.final_state, "canceled"),
            Scenario::FailedThenRetry => assert_eq!(inv.final_state, "failed"),
            Scenario::AskThenAllow => {
                let behaviors: Vec<&str> = inv
                    .permission_decisions
                    .iter()
                    .map(|d| d.behavior.as_str())
                    .collect();
                assert_eq!(behaviors, ["ask", "allow"]);
                assert!(inv.states.contains(&"awaiting_approval".to_owned()));
                assert_eq!(inv.final_state, "succeeded");
                assert_ne!(
                    inv.inputs.call_input, inv.inputs.permission_input,
                    "the user edited the input"
                );
            }
            Scenario::HookMutation => {
                assert!(inv.mutations.iter().any(|m| m.source == "hook"));
                assert_ne!(inv.inputs.permission_input, inv.inputs.observable_input);
            }
            Scenario::Yielded => assert!(inv.states.contains(&"yielded".to_owned())),
            Scenario::NeedsInput => assert!(inv.states.contains(&"needs_input".to_owned())),
            Scenario::PartialResults => assert!(inv.partial_results >= 2),
            Scenario::LargeResult => {
                let r = inv.result.as_ref().expect("result");
                assert!(r.content_bytes > 32 * 1024);
                assert_eq!(r.persistence.as_deref(), Some("preview_and_persist"));
            }
            Scenario::Redacted => {
                assert_eq!(
                    inv.result.as_ref().and_then(|r| r.redaction_state.as_deref()),
                    Some("redacted")
                );
            }
            _ => {}
        }
        // The model input is what the model sent, in arguments_ready.
        if let Some(model) = &inv.inputs.model_input {
            let ready = inv
                .event_ids
                .iter()
                .map(|id| events[id.as_str()])
                .find(|e| e["type"] == "tool.invocation.arguments_ready")
                .expect("arguments_ready");
            if inv.scenario != Scenario::SchemaParseFailed {
                assert_eq!(&ready["data"]["model_input"], model);
            }
        }
    }
    let scenarios: BTreeSet<Scenario> = truth.invocations.iter().map(|i| i.scenario).collect();
    assert!(scenarios.len() >= 17, "{scenarios:?}");
    // Secrets: recognizable, located exactly, all kinds planted.
    let kinds: BTreeSet<SecretKind> = truth.secrets.iter().map(|s| s.kind).collect();
    assert_eq!(kinds.len(), 4);
    for secret in &truth.secrets {
        assert!(secret.value.contains(SECRET_MARKER));
        assert!(!secret.locations.is_empty(), "{} planted nowhere", secret.value);
        for loc in &secret.locations {
            let e = events[loc.event_id.as_str()];
            let at = e
                .pointer(&loc.pointer)
                .and_then(Value::as_str)
                .expect("pointer resolves");
            assert!(at.contains(&secret.value));
        }
    }
    let otc: Vec<_> = truth
        .secrets
        .iter()
        .filter(|s| s.kind == SecretKind::OtcAuthorization)
        .collect();
    assert!(otc.iter().all(|s| {
        s.locations
            .iter()
            .any(|l| l.pointer.contains("/context/authorization"))
    }));
}

#[test]
fn truth_agrees_with_the_events() {
    let g = generate(&config(11));
    check_truth(&g);
    // Every anomaly kind of DESIGN.md §6 is planted once per tenant.
    let kinds: BTreeSet<&str> = g.truth.anomalies.iter().map(|a| a.kind.as_str()).collect();
    for kind in [
        "status_mismatch",
        "event_after_terminal",
        "illegal_transition",
        "orphan_event",
        "out_of_order",
        "unknown_value",
        "duplicate_result",
    ] {
        assert!(kinds.contains(kind), "{kind} not planted");
    }
    assert_eq!(g.truth.anomalies.len(), 2 * 7);
    let events = by_id(&g);
    for a in &g.truth.anomalies {
        assert!(events.contains_key(a.event_id.as_str()));
    }
    // Without planting, the truth records none.
    let clean = generate(&GeneratorConfig {
        plant_anomalies: false,
        ..config(11)
    });
    check_truth(&clean);
    assert!(clean.truth.anomalies.is_empty());
    assert!(clean.truth.invocations.iter().all(|i| i.anomalies.is_empty()));
    // The truth survives serialization.
    let text = serde_json::to_string(&g.truth).expect("serialize");
    let back: Truth = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, g.truth);
}

#[test]
fn catalog_declares_a_new_version_and_deferred_tools_load() {
    let g = generate(&config(3));
    let read = g
        .truth
        .tools
        .iter()
        .find(|t| t.tenant == "acme" && t.tool_id == "fs.read_file")
        .expect("tool");
    assert_eq!(read.versions, ["1.0.0", "1.1.0"]);
    let declared: Vec<&str> = g
        .events
        .iter()
        .filter(|e| e["type"] == "tool.declared" && e["tenant"] == "acme" && e["subject"] == "fs.read_file")
        .filter_map(|e| e["data"]["version"].as_str())
        .collect();
    assert_eq!(declared, ["1.0.0", "1.1.0"]);
    let shell = g
        .truth
        .tools
        .iter()
        .find(|t| t.tool_id == "shell.run")
        .expect("shell");
    assert!(!shell.sensitive_fields.is_empty());
    assert!(g.truth.deferred.iter().all(|d| d.loading_state == "loaded"));
    let surface = &g.truth.surfaces[0];
    assert_eq!(surface.revisions, 2);
    assert!(!surface.blocked.is_empty() && !surface.excluded.is_empty());
    assert!(surface.loaded.contains(&"github.create_issue".to_owned()));
}

/// Writes a generated run as NDJSON (and its truth beside it) when `TOOLLEDGER_GENERATOR_DUMP`
/// names a file, for eyeballing or for feeding `toolledger validate`; otherwise does nothing.
#[test]
fn dump_when_asked() {
    let Some(path) = std::env::var_os("TOOLLEDGER_GENERATOR_DUMP") else {
        return;
    };
    let g = generate(&config(1));
    let ndjson: String = g.events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(&path, ndjson).expect("write events");
    let truth = serde_json::to_string_pretty(&g.truth).expect("truth");
    std::fs::write(format!("{}.truth.json", path.to_string_lossy()), truth).expect("write truth");
}

/// The state each event sets by DESIGN.md §3's table (read from the contract table, not the state
/// machine), with the table's refinements by data.
fn state_set_by(event: &Value) -> Option<String> {
    use toolledger_schemas::contract::{Effect, contract};
    let class: EventClass = event["type"].as_str()?.parse().ok()?;
    let data = &event["data"];
    match contract(class).effect {
        Effect::Transition(state) => Some(
            if class == EventClass::InvocationArgumentsReady && data["status"] == "schema_parse_failed" {
                "schema_parse_failed".to_owned()
            } else if class == EventClass::HookPreCompleted && data.get("stop").is_some() {
                "blocked".to_owned()
            } else {
                state.as_str().to_owned()
            },
        ),
        Effect::PermissionDecision => match data["behavior"].as_str()? {
            "allow" => Some("approved".to_owned()),
            "ask" => Some("awaiting_approval".to_owned()),
            "deny" => Some("denied".to_owned()),
            _ => None,
        },
        Effect::Progress if data["status"] == "needs_input" => Some("needs_input".to_owned()),
        Effect::Result if data["status"] == "denied" => Some("denied".to_owned()),
        _ => None,
    }
}

#[test]
fn transitions_are_exactly_the_events_the_contract_says_move_the_state() {
    let g = generate(&config(9));
    let events = by_id(&g);
    for inv in &g.truth.invocations {
        let expected: Vec<(String, String)> = inv
            .event_ids
            .iter()
            .filter_map(|id| state_set_by(events[id.as_str()]).map(|s| (id.clone(), s)))
            .collect();
        let recorded: Vec<(String, String)> = inv
            .transitions
            .iter()
            .map(|t| (t.event_id.clone(), t.state.clone()))
            .collect();
        assert_eq!(recorded, expected, "{} ({:?})", inv.invocation_id, inv.scenario);
    }
}
