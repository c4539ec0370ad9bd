//! `validate` reports every violation with its JSON Pointer: missing required fields and wrong types
//! for each official object, bare and inside a CloudEvent.

use serde_json::{Value, json};
use toolledger_schemas::EventClass;
use toolledger_schemas::contract::contract;
use toolledger_schemas::validate::{
    DocumentAt, EventError, ObjectKind, Outcome, validate_event, validate_object, validate_stream,
};

use crate::samples;

/// A class that carries `kind`, to wrap samples in events.
fn class_for(kind: ObjectKind) -> Option<EventClass> {
    EventClass::ALL
        .iter()
        .copied()
        .find(|c| ObjectKind::for_class(*c) == kind)
}

fn event(class: EventClass, data: Value) -> Value {
    let subject = contract(class).subject.read(&data).unwrap_or("s").to_owned();
    json!({"specversion": "1.0", "id": "evt_1", "source": "urn:test", "type": class.as_str(),
        "subject": subject, "time": "2026-05-08T09:00:00.000Z", "datacontenttype": "application/json",
        "tenant": "acme", "sessionid": "sess_1", "data": data})
}

#[test]
fn every_kind_reports_each_missing_required_field_at_its_pointer() {
    for kind in ObjectKind::ALL {
        let (sample, required) = samples::minimal(*kind);
        validate_object(*kind, &sample).unwrap_or_else(|e| panic!("{kind:?} sample: {e}"));
        if required.is_empty() {
            // Nothing required (an object the official schemas do not define): nothing can be missing.
            validate_object(*kind, &json!({})).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            continue;
        }
        // All required fields missing at once: every one is reported.
        let err = validate_object(*kind, &json!({})).expect_err("empty object is invalid");
        for field in required {
            let pointer = format!("/{field}");
            assert!(
                err.violations
                    .iter()
                    .any(|v| v.pointer == pointer && v.keyword == "required"),
                "{kind:?}: {pointer} missing not reported: {err}"
            );
        }
        assert_eq!(err.violations.len(), required.len(), "{kind:?}: {err}");
        // Inside an event, the pointer is under /data.
        if let Some(class) = class_for(*kind) {
            validate_event(&event(class, sample.clone())).unwrap_or_else(|e| panic!("{class}: {e}"));
            match validate_event(&event(class, json!({}))) {
                Err(EventError::SchemaViolation {
                    class: Some(c),
                    violations,
                }) => {
                    assert_eq!(c, class);
                    for field in required {
                        let pointer = format!("/data/{field}");
                        assert!(
                            violations.iter().any(|v| v.pointer == pointer),
                            "{class}: {pointer}"
                        );
                    }
                }
                other => panic!("{class}: unexpected {other:?}"),
            }
        }
    }
}

#[test]
fn every_kind_reports_wrong_types_at_their_pointers() {
    for kind in ObjectKind::ALL {
        let (sample, required) = samples::minimal(*kind);
        let mut broken = sample.clone();
        // Every required field here is a string or an array or any JSON, none is an object:
        // an object is the wrong type for all but `permission_input` (any JSON). Where nothing is
        // required, the sample's fields are typed all the same.
        let fields: Vec<&str> = if required.is_empty() {
            sample.as_object().unwrap().keys().map(String::as_str).collect()
        } else {
            required.to_vec()
        };
        let typed: Vec<&str> = fields.into_iter().filter(|f| *f != "permission_input").collect();
        for field in &typed {
            broken[*field] = json!({"wrong": "type"});
        }
        let err = validate_object(*kind, &broken).expect_err("wrong types are invalid");
        for field in &typed {
            let pointer = format!("/{field}");
            assert!(
                err.violations.iter().any(|v| v.pointer == pointer),
                "{kind:?}: wrong type of {pointer} not reported: {err}"
            );
        }
        assert!(err.violations.iter().all(|v| !v.reason.is_empty()));
    }
}

#[test]
fn closed_enums_reject_values_outside_them_and_open_strings_do_not() {
    let (mut decision, _) = samples::minimal(ObjectKind::PermissionDecision);
    decision["behavior"] = json!("maybe");
    let err = validate_object(ObjectKind::PermissionDecision, &decision).expect_err("closed enum");
    assert_eq!(err.violations.len(), 1);
    assert_eq!(err.violations[0].pointer, "/behavior");
    assert_eq!(err.violations[0].keyword, "enum");

    let (mut invocation, _) = samples::minimal(ObjectKind::Invocation);
    invocation["status"] = json!("teleported");
    invocation["x_vendor"] = json!({"kept": true});
    validate_object(ObjectKind::Invocation, &invocation).expect("open status, unknown fields allowed");
}

#[test]
fn envelope_violations_are_reported_with_data_violations() {
    let (mut data, _) = samples::minimal(ObjectKind::Progress);
    data["percent"] = json!(140);
    data["sequence"] = json!("first");
    let mut e = event(EventClass::InvocationProgress, data);
    e["specversion"] = json!("0.3");
    e["tenant"] = json!("_system!");
    e["time"] = json!("yesterday");
    e["traceparent"] = json!("not-a-traceparent");
    e["Bad-Name"] = json!(1);
    let Err(EventError::SchemaViolation { violations, .. }) = validate_event(&e) else {
        panic!("invalid event accepted");
    };
    let pointers: Vec<&str> = violations.iter().map(|v| v.pointer.as_str()).collect();
    for p in [
        "/specversion",
        "/tenant",
        "/time",
        "/traceparent",
        "/data/percent",
        "/data/sequence",
        "/Bad-Name",
    ] {
        assert!(pointers.contains(&p), "{p} not in {pointers:?}");
    }
    // A missing tenant and a wrong class-constant type are reported too.
    let mut e = event(
        EventClass::ToolDeclared,
        samples::minimal(ObjectKind::ToolDeclaration).0,
    );
    e.as_object_mut().expect("object").remove("tenant");
    let Err(EventError::SchemaViolation { violations, .. }) = validate_event(&e) else {
        panic!("event without tenant accepted");
    };
    assert!(
        violations
            .iter()
            .any(|v| v.pointer == "/tenant" && v.keyword == "required")
    );
}

#[test]
fn stream_reports_per_document() {
    let good = event(
        EventClass::ToolDeclared,
        samples::minimal(ObjectKind::ToolDeclaration).0,
    );
    let unknown =
        json!({"specversion": "1.0", "id": "u", "source": "s", "type": "tool.exploded", "tenant": "acme"});
    let input = format!("{good}\n{unknown}\n{{\"broken\": \n");
    let report = validate_stream(input.as_bytes()).expect("read");
    assert_eq!(report.documents.len(), 3);
    assert!(report.documents[0].is_valid());
    assert_eq!(report.documents[1].at, DocumentAt::Line(2));
    assert_eq!(
        report.documents[1].outcome,
        Outcome::UnknownClass {
            class: "tool.exploded".into()
        }
    );
    assert!(matches!(report.documents[2].outcome, Outcome::Unparseable { .. }));
    assert!(!report.is_ok());
    assert!(report.to_string().contains("line 2"));
}

mod properties {
    use std::sync::OnceLock;

    use proptest::prelude::*;
    use serde_json::Value;
    use toolledger_schemas::generator::{GeneratorConfig, generate};
    use toolledger_schemas::validate::{DocumentAt, Outcome, validate_stream};

    fn events() -> &'static [Value] {
        static EVENTS: OnceLock<Vec<Value>> = OnceLock::new();
        EVENTS.get_or_init(|| generate(&GeneratorConfig::default()).events)
    }

    fn unparseable(outcome: &Outcome) -> bool {
        matches!(outcome, Outcome::Unparseable { .. })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any bytes at all: a report, never a panic, and noise is never a valid event.
        #[test]
        fn arbitrary_input_is_reported_not_panicked_on(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let report = validate_stream(bytes.as_slice()).expect("reading a slice cannot fail");
            prop_assert!(report.documents.iter().all(|d| !d.is_valid()));
        }

        /// NDJSON with some lines cut short: one entry per line, exactly the cut lines
        /// unparseable, at their line numbers; the others valid.
        #[test]
        fn ndjson_lines_are_reported_where_they_are(
            start in 0usize..400,
            len in 2usize..12,
            cuts in proptest::collection::btree_set(0usize..12, 0..4),
        ) {
            let events = events();
            let mut text = String::new();
            for (i, e) in events.iter().cycle().skip(start).take(len).enumerate() {
                let line = e.to_string();
                text.push_str(if cuts.contains(&i) { &line[..line.len() / 2] } else { &line });
                text.push('\n');
            }
            let report = validate_stream(text.as_bytes()).expect("read");
            prop_assert_eq!(report.documents.len(), len);
            for (i, doc) in report.documents.iter().enumerate() {
                prop_assert_eq!(doc.at, DocumentAt::Line(i + 1));
                let cut = cuts.contains(&i);
                prop_assert_eq!(unparseable(&doc.outcome), cut);
                prop_assert_eq!(doc.is_valid(), !cut);
            }
        }
    }
}

/// The accept-and-flag rule for the ledger's own shapes: only what the official schemas require may
/// cause a rejection. The spec defines no object for `tool.permission.requested`, so a request
/// without `permission_input` (what an independent producer sends), or without any field the
/// ledger expects, is valid; the model names what is missing for the `missing_field` anomaly.
#[test]
fn a_permission_request_without_its_input_is_valid() {
    let request = json!({"decision_id": "perm_1", "invocation_id": "inv_1",
        "requested_at": "2026-05-08T00:00:00Z"});
    validate_object(ObjectKind::PermissionRequest, &request).unwrap();
    assert_eq!(
        validate_event(&event(EventClass::PermissionRequested, request.clone())).unwrap(),
        EventClass::PermissionRequested
    );
    let missing = |data: &serde_json::Value| {
        toolledger_schemas::Data::decode_for(EventClass::PermissionRequested, data)
            .unwrap()
            .missing_fields()
    };
    assert_eq!(missing(&request), ["/permission_input"]);
    let bare = json!({"schema_version": "0.2.0"});
    validate_object(ObjectKind::PermissionRequest, &bare).unwrap();
    assert_eq!(
        missing(&bare),
        [
            "/decision_id",
            "/invocation_id",
            "/permission_input",
            "/requested_at"
        ]
    );
    // `null` is a value the producer sent, not an absence.
    assert!(
        missing(
            &json!({"decision_id": "d", "invocation_id": "i", "permission_input": null,
        "requested_at": "2026-05-08T00:00:00Z"})
        )
        .is_empty()
    );
}
