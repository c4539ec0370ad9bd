//! Scrubbing against the generator's planted secrets, declarations, and arbitrary JSON.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{Value, json};
use toolledger_ingest::scrub::{ScrubConfig, ScrubKey, Scrubber, is_marker};
use toolledger_schemas::generator::{GeneratorConfig, SECRET_MARKER, generate};

fn scrubber(config: &ScrubConfig) -> Scrubber {
    Scrubber::new(ScrubKey::from_bytes([7; 32]), config)
}

fn generated() -> toolledger_schemas::generator::Generated {
    generate(&GeneratorConfig {
        seed: 11,
        sessions: 4,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        ..GeneratorConfig::default()
    })
}

/// Replaces the value at each pointer by null (when it exists), for comparing what is left.
fn blank(mut value: Value, pointers: &[String]) -> Value {
    for p in pointers {
        if let Some(slot) = value.pointer_mut(p) {
            *slot = Value::Null;
        }
    }
    value
}

#[test]
fn every_planted_secret_is_gone_and_everything_else_is_untouched() {
    let generated = generated();
    assert!(
        generated.truth.secrets.len() >= 8,
        "the generator plants secrets of every kind"
    );
    let mut scrubber = scrubber(&ScrubConfig::default());
    let mut paths_by_event: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut scrubbed_events = Vec::new();
    for event in &generated.events {
        let mut scrubbed = event.clone();
        let paths = scrubber.scrub(&mut scrubbed);
        let mut sorted = paths.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(paths, sorted, "scrubbed paths are sorted and unique");
        for p in &paths {
            assert!(is_marker(scrubbed.pointer(p).unwrap()), "{p} holds a marker");
        }
        // Nothing but the scrubbed values changed.
        assert_eq!(blank(event.clone(), &paths), blank(scrubbed.clone(), &paths));
        let id = event["id"].as_str().unwrap().to_owned();
        paths_by_event.insert(id, paths);
        scrubbed_events.push(scrubbed);
    }
    let text = serde_json::to_string(&scrubbed_events).unwrap();
    assert!(
        !text.contains(SECRET_MARKER),
        "a planted secret survived scrubbing"
    );
    for secret in &generated.truth.secrets {
        assert!(!text.contains(&secret.value), "{:?} survived", secret.kind);
        assert!(!secret.locations.is_empty());
        // Every place the secret was is listed, itself or through an enclosing value.
        for location in &secret.locations {
            let listed = &paths_by_event[&location.event_id];
            assert!(
                listed
                    .iter()
                    .any(|p| location.pointer == *p || location.pointer.starts_with(&format!("{p}/"))),
                "{} in {} is not among {listed:?}",
                location.pointer,
                location.event_id
            );
        }
    }
    // Non-secret content survives: the events still carry their ids, inputs and results.
    assert!(text.contains("cargo test --workspace"));
    assert!(text.contains("https://billing.example.com/v1/refunds"));
}

#[test]
fn equal_secrets_give_equal_markers_and_other_keys_other_markers() {
    let generated = generated();
    let mut scrubber = scrubber(&ScrubConfig::default());
    let scrubbed: BTreeMap<String, Value> = generated
        .events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            scrubber.scrub(&mut e);
            (e["id"].as_str().unwrap().to_owned(), e)
        })
        .collect();
    let mut checked = 0;
    for secret in &generated.truth.secrets {
        // Locations where the secret was the whole scrubbed value (`api_key`, `DEPLOY_TOKEN`, a bearer header).
        let markers: BTreeSet<String> = secret
            .locations
            .iter()
            .filter_map(|l| scrubbed[&l.event_id].pointer(&l.pointer))
            .filter(|v| is_marker(v))
            .map(|v| v["$scrubbed"].as_str().unwrap().to_owned())
            .collect();
        if secret.locations.len() > 1 && !markers.is_empty() {
            assert_eq!(markers.len(), 1, "{:?} gave different markers", secret.kind);
            checked += 1;
        }
    }
    assert!(checked > 0, "some secret appears in several places");

    let value = json!({"token": "abc"});
    let a = Scrubber::new(ScrubKey::from_bytes([1; 32]), &ScrubConfig::default());
    let b = Scrubber::new(ScrubKey::from_bytes([2; 32]), &ScrubConfig::default());
    assert_eq!(a.marker(&value), a.marker(&json!({"token": "abc"})));
    assert_ne!(a.marker(&value), b.marker(&value));
    assert_ne!(a.marker(&value), a.marker(&json!({"token": "abd"})));
}

fn declared(tenant: &str, tool: &str, version: &str, sensitive: Value) -> Value {
    json!({"specversion": "1.0", "id": format!("decl-{version}"), "source": "urn:test",
        "type": "tool.declared", "tenant": tenant, "subject": tool, "toolid": tool,
        "data": {"schema_version": "0.2.0", "tool_id": tool, "namespace": "t", "name": "t",
            "description": "d", "lifecycle": "available", "tool_kind": "function", "version": version,
            "input_contract": {"sensitive_fields": sensitive}}})
}

fn planned(tenant: &str, tool: &str, invocation: &str, input: Value) -> Value {
    json!({"specversion": "1.0", "id": format!("ev-{invocation}"), "source": "urn:test",
        "type": "tool.invocation.planned", "tenant": tenant, "subject": invocation,
        "invocationid": invocation, "toolid": tool,
        "data": {"schema_version": "0.2.0", "invocation_id": invocation, "tool_id": tool,
            "status": "planned", "created_at": "2026-05-08T09:00:00Z", "model_input": input}})
}

#[test]
fn a_declarations_sensitive_fields_drive_scrubbing_of_later_invocations() {
    let mut scrubber = scrubber(&ScrubConfig::default());
    let input = json!({"user": "ann", "pin": "1234", "nested": {"pin": "5678"},
        "conn": {"password": "hunter2", "host": "db"}});

    // Before the declaration: not scrubbed by declared sensitivity (the documented ordering caveat).
    let mut early = planned("acme", "bank.pay", "inv-1", input.clone());
    assert!(scrubber.scrub(&mut early).is_empty());

    let mut declaration = declared("acme", "bank.pay", "1", json!(["pin", "/conn/password"]));
    scrubber.scrub(&mut declaration);
    assert_eq!(
        scrubber
            .registry()
            .fields("acme", "bank.pay")
            .unwrap()
            .names
            .len(),
        1
    );

    let mut later = planned("acme", "bank.pay", "inv-2", input.clone());
    let paths = scrubber.scrub(&mut later);
    assert_eq!(
        paths,
        vec![
            "/data/model_input/conn/password",
            "/data/model_input/nested/pin",
            "/data/model_input/pin"
        ]
    );
    assert_eq!(later["data"]["model_input"]["user"], "ann");
    assert_eq!(later["data"]["model_input"]["conn"]["host"], "db");

    // An event naming only the invocation is found through the invocation's tool.
    let mut decided = json!({"specversion": "1.0", "id": "dec-1", "source": "urn:test",
        "type": "tool.permission.decided", "tenant": "acme", "subject": "inv-2", "invocationid": "inv-2",
        "data": {"schema_version": "0.2.0", "decision_id": "d1", "invocation_id": "inv-2",
            "behavior": "allow", "decided_at": "2026-05-08T09:00:01Z", "updated_input": {"pin": "9999"}}});
    assert_eq!(scrubber.scrub(&mut decided), vec!["/data/updated_input/pin"]);

    // Another tenant's tool of the same id is not affected.
    let mut other = planned("globex", "bank.pay", "inv-3", input.clone());
    assert!(scrubber.scrub(&mut other).is_empty());

    // A new version replaces the list.
    let mut v2 = declared("acme", "bank.pay", "2", json!(["user"]));
    scrubber.scrub(&mut v2);
    let mut after = planned("acme", "bank.pay", "inv-4", input);
    assert_eq!(scrubber.scrub(&mut after), vec!["/data/model_input/user"]);

    // Quarantined originals are scrubbed but teach nothing.
    let mut rejected = declared("acme", "bank.pay", "3", json!([]));
    scrubber.scrub_only(&mut rejected);
    assert!(!scrubber.registry().fields("acme", "bank.pay").unwrap().is_empty());
}

#[test]
fn configured_paths_headers_and_bearer_tokens_are_scrubbed() {
    let config = ScrubConfig {
        paths: vec!["/data/call_input/db/*/password".to_owned()],
    };
    let mut scrubber = scrubber(&config);
    let mut event = json!({"type": "tool.invocation.queued", "tenant": "acme",
        "data": {"call_input": {
            "db": [{"password": "a", "user": "x"}, {"password": "b", "user": "y"}],
            "request_headers": [{"name": "X-Api-Key", "value": "k1"}, {"name": "Accept", "value": "*/*"}],
            "headers": {"Cookie": "sid=1", "Content-Type": "text/plain"},
            "note": "Bearer tokens expire hourly",
            "auth": "bearer eyJhbGciOiJIUzI1NiJ9.payload"}}});
    let paths = scrubber.scrub(&mut event);
    assert_eq!(
        paths,
        vec![
            "/data/call_input/auth",
            "/data/call_input/db/0/password",
            "/data/call_input/db/1/password",
            "/data/call_input/headers/Cookie",
            "/data/call_input/request_headers/0/value",
        ]
    );
    let input = &event["data"]["call_input"];
    assert_eq!(input["db"][0]["user"], "x");
    assert_eq!(input["headers"]["Content-Type"], "text/plain");
    assert_eq!(input["request_headers"][1]["value"], "*/*");
    assert_eq!(input["note"], "Bearer tokens expire hourly");
}

#[test]
fn the_key_file_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let a = Scrubber::open(dir.path(), &ScrubConfig::default()).unwrap();
    let b = Scrubber::open(dir.path(), &ScrubConfig::default()).unwrap();
    let secret = json!("Bearer abcdefgh12345");
    assert_eq!(a.marker(&secret), b.marker(&secret));
}

fn arb_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("context".to_owned()),
        Just("authorization".to_owned()),
        Just("secrets".to_owned()),
        Just("headers".to_owned()),
        Just("Cookie".to_owned()),
        Just("pin".to_owned()),
        Just("$scrubbed".to_owned()),
        Just("name".to_owned()),
        Just("value".to_owned()),
        Just("model_input".to_owned()),
        "[a-z~/]{0,4}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!("Bearer abcdefghijkl")),
        Just(json!("hmac-sha256:00")),
        "\\PC{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map(key.clone(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn scrubbing_never_panics_and_is_idempotent(data in arb_json(), top in arb_json()) {
        let config = ScrubConfig { paths: vec!["/data/*/pin".to_owned(), "/data/0".to_owned()] };
        let mut scrubber = scrubber(&config);
        let mut declaration = declared("acme", "t", "1", json!(["pin", "/context/authorization", "/~1x"]));
        scrubber.scrub(&mut declaration);

        // Arbitrary whole documents, not only events.
        let mut anything = top;
        scrubber.scrub(&mut anything);

        let mut event = json!({"type": "tool.invocation.planned", "tenant": "acme", "toolid": "t",
            "data": {"model_input": data.clone(), "other": data}});
        let first = scrubber.scrub(&mut event);
        let once = event.clone();
        let second = scrubber.scrub(&mut event);
        prop_assert_eq!(&once, &event);
        prop_assert_eq!(first, second);
    }
}
