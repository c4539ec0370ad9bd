//! Round trips: every sample (hand-written, valid under its official schema; checked against the
//! schemas when written) decodes to its type and encodes back to the same JSON, unknown fields and
//! unknown vocabulary values included; and the unknown values are listed where they are.

use super::*;
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Decodes `text` as `T`, re-encodes it, asserts the identity, returns the unknown-value paths.
fn round_trip<T>(name: &str, text: &str) -> Vec<String>
where
    T: DeserializeOwned + Serialize + UnknownValues,
{
    let original: Value = serde_json::from_str(text).expect("sample is JSON");
    let typed: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|err| panic!("{name}: does not decode: {err}"));
    let back = serde_json::to_value(&typed).expect("encodes");
    assert_eq!(back, original, "{name}: JSON -> type -> JSON is not the identity");
    // Also from the text directly (serde_json's streaming path, not the Value path).
    let from_text: T = serde_json::from_str(text).expect("decodes from text");
    assert_eq!(
        serde_json::to_value(&from_text).expect("encodes"),
        original,
        "{name}: from text"
    );
    typed
        .unknown_values()
        .into_iter()
        .map(|u| format!("{}={}", u.path, u.value))
        .collect()
}

macro_rules! sample {
    ($file:literal) => {
        ($file, include_str!(concat!("samples/", $file)))
    };
}

#[test]
fn declarations_round_trip() {
    let (name, text) = sample!("tool-declaration.full.json");
    assert_eq!(
        round_trip::<ToolDeclaration>(name, text),
        [
            "/tool_kind=quantum_oracle",
            "/input_contract/argument_mode=telepathy"
        ]
    );
    let (name, text) = sample!("tool-declaration.loose.json");
    assert!(round_trip::<ToolDeclaration>(name, text).is_empty());
    let typed: ToolDeclaration = serde_json::from_str(text).expect("decodes");
    assert!(
        matches!(typed.input_contract, Some(Loose::Raw(_))),
        "a mistyped contract is kept raw"
    );
    assert!(typed.extra.contains_key("tool_interface"));
    assert_eq!(typed.version(), Some("2.1.0"));
}

#[test]
fn interface_surface_and_catalog_objects_round_trip() {
    let (name, text) = sample!("tool-interface.json");
    assert!(round_trip::<ToolInterface>(name, text).is_empty());
    let typed: ToolInterface = serde_json::from_str(text).expect("decodes");
    assert_eq!(
        typed.classifier_input,
        Some(Value::Null),
        "an explicit null is kept"
    );
    assert_eq!(typed.is_open_world, Some(SafetyFlag::Fixed(true)));

    let (name, text) = sample!("tool-surface.json");
    assert_eq!(
        round_trip::<ToolSurface>(name, text),
        ["/scope=galaxy", "/blocked_tools/1/reason=moon_phase_wrong"]
    );
    let (name, text) = sample!("deferred-tool.json");
    assert!(round_trip::<DeferredToolRef>(name, text).is_empty());
    let (name, text) = sample!("execution-profile.json");
    assert_eq!(
        round_trip::<ToolExecutionProfile>(name, text),
        ["/execution_kind=wasm_sandbox"]
    );
    let (name, text) = sample!("permission-profile.json");
    assert!(round_trip::<ToolPermissionProfile>(name, text).is_empty());
    let (name, text) = sample!("scheduler-policy.json");
    assert!(round_trip::<ToolSchedulerPolicy>(name, text).is_empty());
    let (name, text) = sample!("namespace.json");
    assert!(round_trip::<ToolNamespace>(name, text).is_empty());
}

#[test]
fn invocations_round_trip_and_expose_retries() {
    let (name, text) = sample!("invocation.full.json");
    assert_eq!(
        round_trip::<ToolInvocation>(name, text),
        ["/error/error_class=gremlins"]
    );
    let typed: ToolInvocation = serde_json::from_str(text).expect("decodes");
    assert_eq!(typed.status, InvocationStatus::Running);
    assert_eq!(typed.retry_of(), Some("inv_1"));
    assert_eq!(typed.attempt(), Some(2));
    assert_eq!(typed.session_id(), Some("sess_9"));
    let mutations = typed.input_mutations();
    assert_eq!(mutations.len(), 1, "the malformed entry is skipped");
    assert_eq!(mutations[0].source_type, MutationSourceType::Hook);
    assert_eq!(typed.error().and_then(|e| e.message), Some("nope".to_owned()));

    let (name, text) = sample!("invocation.unknown-status.json");
    assert_eq!(round_trip::<ToolInvocation>(name, text), ["/status=warming_up"]);
    let typed: ToolInvocation = serde_json::from_str(text).expect("decodes");
    assert_eq!(typed.model_input, Some(Value::Null));
    assert_eq!(
        typed.retry_of(),
        None,
        "a retry_of that is not a string is kept but not read"
    );
    assert_eq!(typed.attempt(), None);
}

#[test]
fn permissions_and_hooks_round_trip() {
    let (name, text) = sample!("permission-decision.json");
    assert!(round_trip::<ToolPermissionDecision>(name, text).is_empty());
    let typed: ToolPermissionDecision = serde_json::from_str(text).expect("decodes");
    assert_eq!(typed.behavior, PermissionBehavior::Deny);
    assert_eq!(typed.updated_input, Some(Value::Null));
    let (name, text) = sample!("permission-decision.unknown.json");
    assert_eq!(
        round_trip::<ToolPermissionDecision>(name, text),
        ["/source=ouija_board", "/reason/type=vibes"]
    );
    let (name, text) = sample!("hook.json");
    assert!(round_trip::<ToolHook>(name, text).is_empty());
    let (name, text) = sample!("input-mutation.json");
    assert!(round_trip::<InputMutation>(name, text).is_empty());
}

#[test]
fn progress_results_and_persistence_round_trip() {
    let (name, text) = sample!("progress.json");
    assert!(round_trip::<ToolProgress>(name, text).is_empty());
    let typed: ToolProgress = serde_json::from_str(text).expect("decodes");
    assert_eq!(
        serde_json::to_string(&typed.bytes_read).expect("encodes"),
        "1.0",
        "1.0 stays 1.0"
    );
    let (name, text) = sample!("progress.unknown.json");
    assert_eq!(round_trip::<ToolProgress>(name, text), ["/status=defragmenting"]);

    let (name, text) = sample!("result.denied.json");
    assert!(round_trip::<ToolResult>(name, text).is_empty());
    let typed: ToolResult = serde_json::from_str(text).expect("decodes");
    let error = typed.error.as_ref().and_then(Loose::typed).expect("typed error");
    assert_eq!(error.error_class, Some(ErrorClass::PermissionDenied));
    assert_eq!(error.retry_after, Some(Value::Null), "retry_after: null is kept");
    let (name, text) = sample!("result.full.json");
    assert_eq!(
        round_trip::<ToolResult>(name, text),
        [
            "/status=quarantined_by_antivirus",
            "/error/error_class=cosmic_ray"
        ]
    );
    let (name, text) = sample!("result.raw-error.json");
    assert!(round_trip::<ToolResult>(name, text).is_empty());
    let (name, text) = sample!("result-persistence.json");
    assert!(round_trip::<ToolResultPersistence>(name, text).is_empty());
}

#[test]
fn the_spec_event_envelope_round_trips() {
    let (name, text) = sample!("event.json");
    assert!(round_trip::<ToolEvent>(name, text).is_empty());
    let typed: ToolEvent = serde_json::from_str(text).expect("decodes");
    assert_eq!(typed.class(), Ok(crate::EventClass::InvocationStarted));
}

#[test]
fn the_ledger_shapes_round_trip() {
    let (name, text) = sample!("ledger.permission-request.json");
    assert!(round_trip::<PermissionRequest>(name, text).is_empty());
    let (name, text) = sample!("ledger.access-read.json");
    assert!(round_trip::<AccessRead>(name, text).is_empty());
    let (name, text) = sample!("ledger.quarantine-recorded.json");
    assert!(round_trip::<QuarantineRecorded>(name, text).is_empty());
    let (name, text) = sample!("ledger.erasure-completed.json");
    assert!(round_trip::<ErasureCompleted>(name, text).is_empty());
    let (name, text) = sample!("ledger.partitions-recorded.json");
    assert!(round_trip::<PartitionsRecorded>(name, text).is_empty());
}

#[test]
fn closed_vocabularies_reject_values_outside_the_schema_enum() {
    let mut declaration: Value =
        serde_json::from_str(include_str!("samples/tool-declaration.loose.json")).expect("JSON");
    declaration["lifecycle"] = json!("sunset");
    assert!(serde_json::from_value::<ToolDeclaration>(declaration).is_err());
    assert_eq!(Lifecycle::from_wire("sunset"), None);
    assert_eq!(
        PermissionBehavior::from_wire("ask"),
        Some(PermissionBehavior::Ask)
    );
}

#[test]
fn open_vocabularies_have_the_spec_counts_and_never_shadow_known_values() {
    assert_eq!(InvocationStatus::KNOWN.len(), 20);
    assert_eq!(ToolKind::KNOWN.len(), 17);
    assert_eq!(ErrorClass::KNOWN.len(), 22);
    assert_eq!(PermissionBehavior::ALL.len(), 4);
    for status in InvocationStatus::KNOWN {
        assert_eq!(&InvocationStatus::from_wire(status.as_str()), status);
        assert!(!status.is_other());
    }
    assert_eq!(
        DecisionReasonType::from_wire("other"),
        DecisionReasonType::OtherReason
    );
}

/// Arbitrary JSON for unknown fields: nested, with nulls, integers and non-integers.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1.0e6f64..1.0e6).prop_map(|f| json!(f)),
        "[a-z_ ]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any extra fields and any status string survive a round trip on an invocation, and an unknown
    /// status is reported exactly when it is outside the list.
    #[test]
    fn invocations_with_arbitrary_extras_round_trip(
        extras in prop::collection::btree_map("x_[a-z]{1,6}", any_json(), 0..4),
        status in prop_oneof![
            prop::sample::select(InvocationStatus::KNOWN.to_vec()).prop_map(|s| s.as_str().to_owned()),
            "[a-z_]{1,12}",
        ],
        model_input in prop::option::of(any_json()),
    ) {
        let mut document = json!({
            "schema_version": "0.2.0",
            "invocation_id": "inv_p",
            "tool_id": "tool_p",
            "status": status,
            "created_at": "2026-05-08T00:00:00Z",
        });
        if let Some(input) = model_input {
            document["model_input"] = input;
        }
        for (key, value) in extras {
            document[key.as_str()] = value;
        }
        let typed: ToolInvocation = serde_json::from_value(document.clone()).expect("decodes");
        prop_assert_eq!(serde_json::to_value(&typed).expect("encodes"), document);
        let unknown = typed.unknown_values();
        prop_assert_eq!(unknown.is_empty(), !InvocationStatus::from_wire(&status).is_other());
    }
}

// ---------------------------------------------------------------------------------------------------
// Schema-driven round trips: documents generated from the project's schemas (`schemas/objects/`,
// shaped after the official ones, and `schemas/ledger/`), kept only when the validator accepts them,
// must decode into their type and encode back unchanged. This ties the model to what ingest accepts.

use crate::validate::{ObjectKind, SCHEMA_FILES, validate_object};
use proptest::strategy::{BoxedStrategy, Union};

/// Known words of every open vocabulary, so generated strings hit typed variants as well as `Other`.
fn vocabulary_words() -> Vec<String> {
    fn words<T: Clone>(known: &[T], as_str: impl Fn(&T) -> String) -> Vec<String> {
        known.iter().map(as_str).collect()
    }
    [
        words(InvocationStatus::KNOWN, |v| v.as_str().to_owned()),
        words(ToolKind::KNOWN, |v| v.as_str().to_owned()),
        words(ErrorClass::KNOWN, |v| v.as_str().to_owned()),
        words(ResultStatus::KNOWN, |v| v.as_str().to_owned()),
        words(ProgressStatus::KNOWN, |v| v.as_str().to_owned()),
        words(ExecutionKind::KNOWN, |v| v.as_str().to_owned()),
        words(RuleSource::KNOWN, |v| v.as_str().to_owned()),
        words(SurfaceScope::KNOWN, |v| v.as_str().to_owned()),
    ]
    .concat()
}

fn integer() -> BoxedStrategy<Value> {
    const MAX_SAFE: i64 = (1 << 53) - 1;
    prop_oneof![
        (-MAX_SAFE..=MAX_SAFE).prop_map(|n| json!(n)),
        (-1000i64..1000).prop_map(|n| json!(n as f64)), // 3.0 is an integer to JSON Schema
    ]
    .boxed()
}

/// A strategy for values valid (or nearly: the validator filters) under `schema`.
fn value_for(schema: &Value) -> BoxedStrategy<Value> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return prop::sample::select(values.clone()).boxed();
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return any_json().boxed(),
    };
    let minimum = schema.get("minimum").and_then(Value::as_f64);
    let maximum = schema.get("maximum").and_then(Value::as_f64);
    let arms: Vec<BoxedStrategy<Value>> = types
        .into_iter()
        .map(|t| match t {
            "string" => match schema.get("pattern").and_then(Value::as_str) {
                Some(pattern) => {
                    let bare = pattern.trim_start_matches('^').trim_end_matches('$');
                    proptest::string::string_regex(bare)
                        .map(|s| s.prop_map(Value::String).boxed())
                        .unwrap_or_else(|_| any_json().boxed())
                }
                None => prop_oneof![
                    "[a-z_]{0,10}".prop_map(Value::String),
                    prop::sample::select(vocabulary_words()).prop_map(Value::String),
                ]
                .boxed(),
            },
            "integer" if minimum.is_some() => {
                let low = minimum.unwrap_or(0.0) as i64;
                (low..low + 1000).prop_map(|n| json!(n)).boxed()
            }
            "integer" => integer(),
            "number" => match (minimum, maximum) {
                (Some(low), Some(high)) => prop_oneof![
                    (low..=high).prop_map(|f| json!(f)),
                    ((low as i64)..=(high as i64)).prop_map(|n| json!(n)),
                ]
                .boxed(),
                _ => prop_oneof![integer(), (-1.0e9f64..1.0e9).prop_map(|f| json!(f))].boxed(),
            },
            "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
            "null" => Just(Value::Null).boxed(),
            "array" => {
                let item = schema.get("items").map_or_else(|| any_json().boxed(), value_for);
                let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
                prop::collection::vec(item, min..min + 3)
                    .prop_map(Value::Array)
                    .boxed()
            }
            "object" if schema.get("properties").is_some() => object_for(schema),
            "object" => prop::collection::btree_map("[a-z_]{1,6}", any_json(), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
                .boxed(),
            _ => any_json().boxed(),
        })
        .collect();
    Union::new(arms).boxed()
}

/// Objects with every required property, each optional one or not, and unknown `x_…` fields.
fn object_for(schema: &Value) -> BoxedStrategy<Value> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(name, sub)| {
                    let name = name.clone();
                    let value = value_for(sub);
                    if required.contains(&name.as_str()) {
                        value.prop_map(move |v| Some((name.clone(), v))).boxed()
                    } else {
                        prop::option::of(value)
                            .prop_map(move |v| v.map(|v| (name.clone(), v)))
                            .boxed()
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let extras = prop::collection::btree_map("x_[a-z]{1,5}", any_json(), 0..3);
    (fields, extras)
        .prop_map(|(fields, extras)| {
            let mut object = Object::new();
            object.extend(fields.into_iter().flatten());
            object.extend(extras);
            Value::Object(object)
        })
        .boxed()
}

/// Decodes `document` as the type the project schema of `kind` describes and encodes it back.
fn through_the_model(kind: ObjectKind, document: &Value) -> Result<Value, serde_json::Error> {
    fn again<T: DeserializeOwned + Serialize>(document: &Value) -> Result<Value, serde_json::Error> {
        serde_json::to_value(serde_json::from_value::<T>(document.clone())?)
    }
    match kind {
        ObjectKind::ToolDeclaration => again::<ToolDeclaration>(document),
        ObjectKind::ToolInterface => again::<ToolInterface>(document),
        ObjectKind::ToolSurface => again::<ToolSurface>(document),
        ObjectKind::Invocation => again::<ToolInvocation>(document),
        ObjectKind::PermissionProfile => again::<ToolPermissionProfile>(document),
        ObjectKind::PermissionDecision => again::<ToolPermissionDecision>(document),
        ObjectKind::InputMutation => again::<InputMutation>(document),
        ObjectKind::Hook => again::<ToolHook>(document),
        ObjectKind::SchedulerPolicy => again::<ToolSchedulerPolicy>(document),
        ObjectKind::DeferredTool => again::<DeferredToolRef>(document),
        ObjectKind::ToolResult => again::<ToolResult>(document),
        ObjectKind::ResultPersistence => again::<ToolResultPersistence>(document),
        ObjectKind::Progress => again::<ToolProgress>(document),
        ObjectKind::ExecutionProfile => again::<ToolExecutionProfile>(document),
        ObjectKind::AgentToolEvent => again::<ToolEvent>(document),
        ObjectKind::PermissionRequest => again::<PermissionRequest>(document),
        ObjectKind::AccessRead => again::<AccessRead>(document),
        ObjectKind::QuarantineRecorded => again::<QuarantineRecorded>(document),
        ObjectKind::ErasureCompleted => again::<ErasureCompleted>(document),
        ObjectKind::PartitionsRecorded => again::<PartitionsRecorded>(document),
    }
}

fn any_document() -> impl Strategy<Value = (ObjectKind, Value)> {
    prop::sample::select(ObjectKind::ALL.to_vec()).prop_flat_map(|kind| {
        let text = SCHEMA_FILES
            .iter()
            .find(|(path, _)| *path == kind.schema_path())
            .map_or("{}", |(_, text)| text);
        let schema: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        (Just(kind), object_for(&schema))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every document the project's schemas accept round-trips through its type unchanged.
    #[test]
    fn documents_the_schemas_accept_round_trip((kind, document) in any_document()) {
        prop_assume!(validate_object(kind, &document).is_ok());
        let back = through_the_model(kind, &document);
        prop_assert!(back.is_ok(), "{:?} does not decode: {:?}\n{}", kind, back, document);
        prop_assert_eq!(back.ok(), Some(document));
    }
}
