//! Conformance: the project's schemas accept exactly what the official Agent Tool schemas accept.
//!
//! Runs when `AGENTTOOL_SCHEMAS` names the folder of official schemas (`.ci/run` sets it); skipped
//! with a message otherwise. Every generated object and a few thousand variants of hand-written
//! samples (each required field removed, each property set to values of every JSON type, values
//! outside closed enums, out-of-range numbers, unknown fields) go through both schema sets, and any
//! disagreement fails the test.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use toolledger_schemas::EventClass;
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_schemas::validate::{ObjectKind, validate_event, validate_object};

use crate::samples;

struct Official {
    validators: BTreeMap<&'static str, jsonschema::Validator>,
    schemas: BTreeMap<&'static str, Value>,
}

impl Official {
    fn load() -> Option<Official> {
        let Some(dir) = std::env::var_os("AGENTTOOL_SCHEMAS") else {
            println!("AGENTTOOL_SCHEMAS is not set: skipping conformance with the official schemas");
            return None;
        };
        let dir = PathBuf::from(dir);
        let mut validators = BTreeMap::new();
        let mut schemas = BTreeMap::new();
        for kind in ObjectKind::ALL {
            let Some(file) = kind.official_file() else {
                continue;
            };
            let text = std::fs::read_to_string(dir.join(file))
                .unwrap_or_else(|e| panic!("reading {file} from {}: {e}", dir.display()));
            let schema: Value = serde_json::from_str(&text).expect("official schema is JSON");
            let validator = jsonschema::validator_for(&schema).expect("official schema compiles");
            validators.insert(file, validator);
            schemas.insert(file, schema);
        }
        Some(Official { validators, schemas })
    }

    fn accepts(&self, kind: ObjectKind, value: &Value) -> bool {
        let file = kind.official_file().expect("official kind");
        self.validators[file].is_valid(value)
    }

    /// Asserts both schema sets agree on `value`; returns what they said.
    fn agree(&self, kind: ObjectKind, value: &Value, what: &str) -> bool {
        let official = self.accepts(kind, value);
        let ours = validate_object(kind, value);
        assert_eq!(
            official,
            ours.is_ok(),
            "{what}: official {} but ours {} for {kind:?}: {value}\n{ours:?}",
            if official { "accepts" } else { "rejects" },
            if ours.is_ok() { "accepts" } else { "rejects" },
        );
        official
    }
}

/// Values of every JSON type, plus numbers at and beyond common bounds.
fn probes() -> Vec<Value> {
    vec![
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(100),
        json!(101),
        json!(""),
        json!("not_in_any_enum"),
        json!([]),
        json!(["s"]),
        json!([1]),
        json!([{}]),
        json!({}),
        json!({"k": "v"}),
    ]
}

#[test]
fn hand_written_samples_and_variants_agree_with_the_official_schemas() {
    let Some(official) = Official::load() else { return };
    let mut checked = 0usize;
    let mut rejected = 0usize;
    let mut bases: Vec<(ObjectKind, Value)> = ObjectKind::ALL
        .iter()
        .filter(|k| k.official_file().is_some())
        .map(|k| (*k, samples::minimal(*k).0))
        .collect();
    bases.extend(samples::full());
    for (kind, base) in &bases {
        assert!(
            official.agree(*kind, base, "sample"),
            "sample must be valid: {kind:?} {base}"
        );
        checked += 1;
        let schema = &official.schemas[kind.official_file().expect("official")];
        let required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let properties = schema["properties"].as_object().expect("properties");
        let mut variants: Vec<(String, Value)> = Vec::new();
        for field in &required {
            let mut v = base.clone();
            v.as_object_mut().expect("object").remove(*field);
            variants.push((format!("without {field}"), v));
        }
        for (name, prop) in properties {
            let mut values = probes();
            if let Some(options) = prop["enum"].as_array() {
                values.extend(options.iter().cloned());
            }
            for value in values {
                let mut v = base.clone();
                v[name.as_str()] = value.clone();
                variants.push((format!("{name} = {value}"), v));
            }
        }
        let mut unknown = base.clone();
        unknown["x_vendor_extension"] = json!({"nested": [1, 2, 3]});
        variants.push(("unknown field".to_owned(), unknown));
        for not_object in [json!([]), json!("doc"), json!(null), json!(7)] {
            variants.push(("not an object".to_owned(), not_object));
        }
        for (what, v) in variants {
            if !official.agree(*kind, &v, &what) {
                rejected += 1;
            }
            checked += 1;
        }
    }
    assert!(
        rejected > 1_000,
        "the variants must include many invalid documents ({rejected})"
    );
    println!(
        "conformance: {checked} hand-written documents checked against both schema sets ({rejected} invalid under both)"
    );
}

/// The spec's own envelope for a structured CloudEvent (the mapping ingest reverses).
fn as_agenttool_event(event: &Value) -> Value {
    let mut e = json!({
        "schema_version": "0.2.0",
        "event_id": event["id"],
        "event_type": event["type"],
        "source": event["source"],
        "subject": event["subject"],
        "time": event["time"],
        "data": event["data"],
    });
    if let Some(inv) = event.get("invocationid") {
        e["invocation_id"] = inv.clone();
    }
    if let Some(tool) = event.get("toolid") {
        e["tool_id"] = tool.clone();
    }
    if let Some(tp) = event.get("traceparent") {
        e["trace_refs"] = json!([{"type": "w3c", "traceparent": tp}]);
    }
    e
}

#[test]
fn every_generated_object_is_valid_under_both_schema_sets() {
    let Some(official) = Official::load() else { return };
    let generated = generate(&GeneratorConfig {
        seed: 7,
        sessions: 4,
        tenants: vec!["acme".into(), "globex".into()],
        plant_anomalies: true,
        ..GeneratorConfig::default()
    });
    let mut checked = 0usize;
    for event in &generated.events {
        let class: EventClass = event["type"]
            .as_str()
            .expect("type")
            .parse()
            .expect("known class");
        validate_event(event).unwrap_or_else(|e| panic!("{class}: {e}\n{event}"));
        let kind = ObjectKind::for_class(class);
        let data = &event["data"];
        if kind.official_file().is_some() {
            assert!(
                official.agree(kind, data, class.as_str()),
                "official rejects generated {class}: {data}"
            );
        } else {
            validate_object(kind, data).unwrap_or_else(|e| panic!("{class}: {e}"));
        }
        checked += 1;
        if let Some(mutations) = data.get("input_mutations").and_then(Value::as_array) {
            for m in mutations {
                assert!(official.agree(ObjectKind::InputMutation, m, "input mutation"));
                checked += 1;
            }
        }
        let envelope = as_agenttool_event(event);
        assert!(official.agree(ObjectKind::AgentToolEvent, &envelope, "agenttool-event"));
        checked += 1;
    }
    println!(
        "conformance: {checked} generated objects ({} events) valid under both schema sets",
        generated.events.len()
    );
}
