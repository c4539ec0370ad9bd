//! Scrubbing against the generator's planted secrets, declarations, and arbitrary JSON.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{Value, json};
use toolledger_ingest::scrub::{ScrubConfig, ScrubKey, Scrubber, is_marker};
use toolledger_schemas::generator::{GeneratorConfig, SECRET_MARKER, generate};
use toolledger_testkit::secrets::{SHAPES_SCRUBBED_PATHS, SecretShapes, ordinary_event, shapes_event};

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
            let value = scrubbed.pointer(p).unwrap();
            let text_marker = value
                .as_str()
                .is_some_and(|s| s.contains("[scrubbed:hmac-sha256:"));
            assert!(is_marker(value) || text_marker, "{p} holds a marker");
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

    // Before the declaration: not scrubbed by declared sensitivity (the documented ordering caveat);
    // only the undeclared `password`, by its name.
    let mut early = planned("acme", "bank.pay", "inv-1", input.clone());
    assert_eq!(
        scrubber.scrub(&mut early),
        vec!["/data/model_input/conn/password"]
    );

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

    // Another tenant's tool of the same id is not affected (but for the password's name).
    let mut other = planned("globex", "bank.pay", "inv-3", input.clone());
    assert_eq!(
        scrubber.scrub(&mut other),
        vec!["/data/model_input/conn/password"]
    );

    // A new version replaces the list.
    let mut v2 = declared("acme", "bank.pay", "2", json!(["user"]));
    scrubber.scrub(&mut v2);
    let mut after = planned("acme", "bank.pay", "inv-4", input);
    assert_eq!(
        scrubber.scrub(&mut after),
        vec!["/data/model_input/conn/password", "/data/model_input/user"]
    );

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
        Just("password".to_owned()),
        Just("OPENAI_API_KEY".to_owned()),
        Just("requestHeaders".to_owned()),
        "[a-z~/]{0,4}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!("Bearer abcdefghijkl")),
        Just(json!("hmac-sha256:00")),
        Just(json!(
            "API_KEY=abc123xyz ./run && curl -H 'Authorization: Bearer abc123def456' https://u:p4ss@h/x"
        )),
        Just(json!(
            "Cookie: sid=1; Basic dXNlcjpodW50ZXIy sk-0123456789abcdefghijk"
        )),
        Just(json!(
            "[scrubbed:hmac-sha256:0123456789abcdef] token=[scrubbed:hmac-sha256:0123"
        )),
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
            "source": "https://u:p4ss@h/x", "apikey": data.clone(), "authorization": 12345678,
            "data": {"model_input": data.clone(), "other": data}});
        let first = scrubber.scrub(&mut event);
        let once = event.clone();
        let second = scrubber.scrub(&mut event);
        prop_assert_eq!(&once, &event);
        prop_assert_eq!(first, second);
    }
}

#[test]
fn every_issue_28_shape_is_scrubbed_and_only_the_secret_goes() {
    let SecretShapes { event, secrets } = shapes_event();
    let scrubber = scrubber(&ScrubConfig::default());
    let mut scrubbed = event.clone();
    let paths = scrubber.scrub_only(&mut scrubbed);
    assert_eq!(paths, SHAPES_SCRUBBED_PATHS);
    let text = serde_json::to_string(&scrubbed).unwrap();
    for secret in &secrets {
        assert!(!text.contains(secret), "{secret} survived: {text}");
    }
    // A secret inside a string: only its span, by a textual marker that is the prefix of the marker
    // the same secret would get whole.
    let input = &scrubbed["data"]["model_input"];
    let text_marker = scrubber.text_marker("curlTok3n0123456789");
    assert_eq!(
        input["command"],
        format!("curl -sS -H 'Authorization: Bearer {text_marker}' https://billing.example.com/v1/refunds")
    );
    let whole = scrubber.marker(&json!("curlTok3n0123456789"));
    let hex = text_marker
        .strip_prefix("[scrubbed:hmac-sha256:")
        .unwrap()
        .strip_suffix(']')
        .unwrap();
    assert!(whole["$scrubbed"].as_str().unwrap()[12..].starts_with(hex));
    assert_eq!(hex.len(), 16);
    assert_eq!(
        input["url"],
        format!(
            "https://api.example.com/v1/items?limit=10&api_key={}&sort=asc",
            scrubber.text_marker("qK3yAPIsecret99")
        )
    );
    assert_eq!(
        input["deploy"],
        format!(
            "API_KEY={} ./deploy.sh --prod",
            scrubber.text_marker("dep1oyKEYvalue77")
        )
    );
    assert_eq!(
        input["log"],
        format!(
            "setting up\nexport GITHUB_TOKEN={}\ndone",
            scrubber.text_marker("ghp_0123456789abcdefghijABCDEFGHIJklmnop")
        )
    );
    assert_eq!(
        input["config"],
        format!(
            "db:\n  host: db.internal\n  password: {}\n  port: 5432",
            scrubber.text_marker("yamlPassw0rd-42")
        )
    );
    // Values under credential names and headers go whole; their neighbours stay.
    assert!(is_marker(&input["env"]["OPENAI_API_KEY"]));
    assert_eq!(input["env"]["RUST_LOG"], "info");
    assert!(is_marker(&input["login"]["password"]));
    assert_eq!(input["login"]["user"], "ann");
    assert!(is_marker(&input["requestHeaders"]["Authorization"]));
    assert_eq!(input["requestHeaders"]["Accept"], "application/json");
    // Attributes stay strings; the ones the ledger reads and ordinary extensions are untouched.
    assert_eq!(
        scrubbed["source"],
        format!(
            "https://{}@ci.example.com/jobs/42",
            scrubber.text_marker("ci-bot:s0urcePassw0rd")
        )
    );
    assert_eq!(
        scrubbed["authorization"],
        scrubber.text_marker("Bearer extTok3n-ABCDEF0123456789")
    );
    assert_eq!(
        scrubbed["apikey"],
        scrubber.text_marker("apikey-0123456789abcdef")
    );
    assert_eq!(scrubbed["partitionkey"], "user-42");
    for kept in [
        "tenant",
        "invocationid",
        "toolid",
        "sessionid",
        "subject",
        "id",
        "type",
    ] {
        assert_eq!(scrubbed[kept], event[kept], "{kept}");
    }
    // The scrubbed event is still a CloudEvent.
    toolledger_wire::Event::from_json(scrubbed.clone()).unwrap();

    // Idempotent: the same event and the same paths again.
    let mut again = scrubbed.clone();
    assert_eq!(scrubber.scrub_only(&mut again), paths);
    assert_eq!(again, scrubbed);
}

#[test]
fn ordinary_text_that_names_credentials_stays_intact() {
    let scrubber = scrubber(&ScrubConfig::default());
    let event = ordinary_event();
    let mut scrubbed = event.clone();
    assert_eq!(scrubber.scrub_only(&mut scrubbed), Vec::<String>::new());
    assert_eq!(scrubbed, event);
}

#[test]
fn an_envelopes_own_fields_are_scrubbed_like_extensions() {
    let scrubber = scrubber(&ScrubConfig::default());
    let mut fields = serde_json::Map::new();
    fields.insert("schema_version".into(), json!("0.2.0"));
    fields.insert("authorization".into(), json!("Bearer envTok3n-0123456789"));
    fields.insert(
        "producer".into(),
        json!({"endpoint": "https://bot:envPassw0rd@agents.example.com", "name": "ci"}),
    );
    let paths = scrubber.scrub_envelope_fields(&mut fields);
    assert_eq!(
        paths,
        vec![
            "/ledger/envelope_fields/authorization",
            "/ledger/envelope_fields/producer/endpoint"
        ]
    );
    let text = serde_json::to_string(&fields).unwrap();
    assert!(
        !text.contains("envTok3n") && !text.contains("envPassw0rd"),
        "{text}"
    );
    assert_eq!(fields["schema_version"], "0.2.0");
    assert_eq!(fields["producer"]["name"], "ci");
}

#[test]
fn text_scrubbing_keeps_everything_but_the_secrets() {
    let scrubber = scrubber(&ScrubConfig::default());
    // A body that is not I-JSON: the first of two duplicate keys holds the secret.
    let body = r#"{"id":"q1","authorization":"Bearer dupTok3n-0123456789","authorization":"x","data":{"password":"hunter2"}}"#;
    let kept = scrubber.scrub_text(body);
    assert!(!kept.contains("dupTok3n") && !kept.contains("hunter2"), "{kept}");
    assert!(kept.starts_with(r#"{"id":"q1","authorization":"#), "{kept}");
    let ordinary = "commit 3f786850e387550fdab836ed7e6dc881de23001b: rotate the token, keep key=value";
    assert!(matches!(
        scrubber.scrub_text(ordinary),
        std::borrow::Cow::Borrowed(_)
    ));
}

async fn publish_raw(js: &async_nats::jetstream::Context, subject: &str, body: Vec<u8>) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("content-type", "application/cloudevents+json");
    js.publish_with_headers(subject.to_owned(), headers, body.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// The acceptance test of issue 28: through the real pipeline, every secret shape is absent from the
/// ledger (and so from every projection and export of it) and from quarantine, in structured and
/// binary mode, in accepted and rejected events, in bodies that are not I-JSON; ordinary text is
/// intact; and the identity of an event whose `source` was scrubbed survives an identity index
/// rebuilt from the ledger.
#[tokio::test]
async fn issue_28_secrets_reach_neither_the_ledger_nor_quarantine() {
    use crate::pipeline::{Running, contract_streams, drained, ledger, publish};
    use toolledger_ledger::quarantine;
    use toolledger_wire::Mode;

    let nats = toolledger_testkit::NatsFixture::start();
    let js = async_nats::jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());

    let SecretShapes { event, mut secrets } = shapes_event();
    let mut binary = event.clone();
    binary["id"] = json!("ev-shapes-binary");
    let ordinary = ordinary_event();
    publish(&js, &[event.clone(), ordinary.clone()], Mode::Structured, false).await;
    publish(&js, std::slice::from_ref(&binary), Mode::Binary, false).await;

    // Rejected: a schema violation in either mode (I-JSON: scrubbed as the event it would be) ...
    let mut violation = event.clone();
    violation["id"] = json!("ev-violation");
    violation["data"]["status"] = json!(7);
    publish(&js, std::slice::from_ref(&violation), Mode::Structured, false).await;
    violation["id"] = json!("ev-violation-binary");
    publish(&js, std::slice::from_ref(&violation), Mode::Binary, false).await;
    // ... and bodies that are not I-JSON: the secret in the first of two duplicate keys, and a valid
    // event followed by a stray byte.
    let subject = "atl.in.acme.tool.invocation.planned";
    let mut duplicate = event.clone();
    duplicate["id"] = json!("ev-duplicate-key");
    let duplicate = serde_json::to_string(&duplicate).unwrap().replacen(
        "\"apikey\":",
        "\"authorization\":\"Bearer dupTok3n-0123456789\",\"apikey\":",
        1,
    );
    secrets.push("dupTok3n-0123456789");
    let mut stray = serde_json::to_vec(&json!(event)).unwrap();
    stray.push(b'}');
    let not_ijson = [duplicate.into_bytes(), stray];
    for body in &not_ijson {
        publish_raw(&js, subject, body.clone()).await;
    }
    drained(&js).await;

    let entries = ledger(&js).await;
    for entry in &entries {
        let text = String::from_utf8(entry.canonical_bytes().unwrap()).unwrap();
        for secret in &secrets {
            assert!(!text.contains(secret), "{secret} reached the ledger: {text}");
        }
    }
    let entry = |id: &str| {
        entries
            .iter()
            .find(|e| e.event.id() == id)
            .unwrap_or_else(|| panic!("{id} is in the ledger"))
    };
    for id in ["ev-shapes", "ev-shapes-binary"] {
        let stored = entry(id);
        assert_eq!(stored.ledger.scrubbed_paths, SHAPES_SCRUBBED_PATHS, "{id}");
        let json = stored.event_json();
        assert!(
            json["data"]["model_input"]["command"]
                .as_str()
                .unwrap()
                .starts_with("curl -sS -H 'Authorization: Bearer [scrubbed:hmac-sha256:"),
            "{json}"
        );
        assert!(
            json["source"]
                .as_str()
                .unwrap()
                .ends_with("@ci.example.com/jobs/42")
        );
    }
    let stored = entry("ev-ordinary");
    assert!(stored.ledger.scrubbed_paths.is_empty());
    let json = stored.event_json();
    assert_eq!(json["data"], ordinary["data"], "ordinary text is intact");
    for attribute in ["source", "partitionkey", "region"] {
        assert_eq!(json[attribute], ordinary[attribute]);
    }

    let records = quarantine::list(&js, Some("acme"), None, 100).await.unwrap();
    assert_eq!(records.len(), 4, "{records:?}");
    for record in &records {
        let mut text = String::from_utf8_lossy(&record.payload).into_owned();
        for (name, value) in &record.headers {
            text.push_str(&format!("\n{name}: {value}"));
        }
        for secret in &secrets {
            assert!(!text.contains(secret), "{secret} reached quarantine: {text}");
        }
    }
    // A binary event's attribute headers keep the ids the ledger reads; credential-named ones go.
    let header = |record: &quarantine::QuarantineRecord, name: &str| {
        record
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let binary_violation = records
        .iter()
        .find(|r| header(r, "ce-id").as_deref() == Some("ev-violation-binary"))
        .expect("the binary violation is quarantined");
    assert_eq!(
        header(binary_violation, "ce-sessionid").as_deref(),
        Some("sess-9")
    );
    assert_eq!(
        header(binary_violation, "ce-invocationid").as_deref(),
        Some("inv-9")
    );
    assert!(
        header(binary_violation, "ce-apikey").is_some_and(|v| v.starts_with("hmac-sha256:")),
        "{:?}",
        binary_violation.headers
    );
    // Bodies that are not I-JSON keep their digest and size, and their text less the secrets.
    let reduced: Vec<_> = records.iter().filter(|r| r.original_digest.is_some()).collect();
    assert_eq!(reduced.len(), 2);
    for record in &reduced {
        let sent = not_ijson
            .iter()
            .find(|b| {
                let digest = toolledger_wire::entry::hex(&<sha2::Sha256 as sha2::Digest>::digest(b));
                record.original_digest.as_deref() == Some(&format!("sha256:{digest}"))
            })
            .expect("the digest of a body that was sent");
        assert_eq!(record.size, sent.len());
        let kept = String::from_utf8(record.payload.to_vec()).unwrap();
        assert!(kept.contains("https://billing.example.com/v1/refunds"), "{kept}");
        assert!(kept.contains("[scrubbed:hmac-sha256:"), "{kept}");
        assert!(!record.holds_original_body());
    }
    let refused = quarantine::redrive(&js, reduced[0].seq, None).await;
    assert!(refused.is_err(), "only the scrubbed text is left to redrive");
    ingest.stop().await;

    // The identity of an event whose `source` was scrubbed is the scrubbed one, the one the ledger
    // holds: an index rebuilt from the ledger still knows the event, and a resend is a duplicate.
    std::fs::remove_file(dir.path().join("ingest/identities.sqlite")).unwrap();
    let ingest = Running::start(&nats, dir.path());
    publish(&js, std::slice::from_ref(&event), Mode::Structured, false).await;
    drained(&js).await;
    assert_eq!(ledger(&js).await.len(), entries.len(), "a resend adds nothing");
    assert_eq!(
        quarantine::list(&js, Some("acme"), None, 100)
            .await
            .unwrap()
            .len(),
        4,
        "and is no conflict"
    );
    ingest.stop().await;
}

fn arb_text() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("Bearer ".to_owned()),
        Just("basic dXNlcjpodW50ZXIy".to_owned()),
        Just("Authorization: ".to_owned()),
        Just("Cookie: a=b".to_owned()),
        Just("API_KEY=".to_owned()),
        Just("password = \"".to_owned()),
        Just("\n  password: ".to_owned()),
        Just("\"token\": '".to_owned()),
        Just("https://u:".to_owned()),
        Just("@host/".to_owned()),
        Just("ghp_0123456789abcdefghijABCDEFGHIJklmnop".to_owned()),
        Just("-----BEGIN PRIVATE KEY-----".to_owned()),
        Just("[scrubbed:hmac-sha256:".to_owned()),
        Just("abc123def456".to_owned()),
        "[ =:'\"\\\\@/\n\t]".prop_map(String::from),
        "\\PC{0,6}",
    ];
    prop::collection::vec(fragment, 0..12).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn text_scrubbing_never_panics_and_is_idempotent(text in arb_text()) {
        let scrubber = scrubber(&ScrubConfig::default());
        let once = scrubber.scrub_text(&text).into_owned();
        let twice = scrubber.scrub_text(&once).into_owned();
        prop_assert_eq!(&once, &twice);
    }
}
