//! Decoding cases, each typed reason, and the ledger entry's bytes.

use chrono::{DateTime, Utc};
use serde_json::json;
use toolledger_wire::ijson::JsonProblem;
use toolledger_wire::{Error, LedgerEntry, Origin, QuarantineReason, decode};

use super::{body, headers};

const SUBJECT: &str = "atl.in.acme.tool.invocation.started";

fn structured(extra: serde_json::Value) -> Vec<u8> {
    let mut event = json!({
        "specversion": "1.0", "id": "e1", "source": "agent://a", "type": "tool.invocation.started",
        "tenant": "acme", "data": {"invocation_id": "inv-1", "status": "running"}
    });
    for (k, v) in extra.as_object().expect("object") {
        if v.is_null() {
            event.as_object_mut().expect("object").remove(k);
        } else {
            event[k] = v.clone();
        }
    }
    serde_json::to_vec(&event).expect("json")
}

fn ce_json() -> async_nats::HeaderMap {
    headers(&[("Content-Type", "application/cloudevents+json; charset=utf-8")])
}

fn reason(result: Result<toolledger_wire::DecodedEvent, Error>) -> (QuarantineReason, String) {
    let error = result.expect_err("should be refused");
    (
        error.quarantine_reason().expect("a content error"),
        error.to_string(),
    )
}

#[test]
fn binary_mode_is_case_insensitive_and_takes_an_unprefixed_content_type() {
    let h = headers(&[
        ("CE-SpecVersion", "1.0"),
        ("Ce-Id", "e%201"),
        ("ce-SOURCE", "agent%3A%2F%2Fa"),
        ("CE-TYPE", "tool.invocation.started"),
        ("ce-tenant", "acme"),
        ("ce-subject", "caf%C3%A9%20%22x%22%25"),
        ("ce-time", "2026-01-02T03:04:05.25+02:00"),
        ("Content-Type", "application/json"),
    ]);
    let decoded = decode(SUBJECT, Some(&h), &body(r#"{"invocation_id":"inv-1","n":1E30}"#)).unwrap();
    assert_eq!(decoded.origin, Origin::Binary);
    let e = &decoded.event;
    assert_eq!(e.id(), "e 1");
    assert_eq!(e.source(), "agent://a");
    assert_eq!(e.subject(), Some("café \"x\"%"));
    assert_eq!(e.datacontenttype(), Some("application/json"));
    assert_eq!(
        *e.time().unwrap(),
        "2026-01-02T01:04:05.25Z".parse::<DateTime<Utc>>().unwrap()
    );
    assert_eq!(decoded.data().unwrap()["n"].as_f64(), Some(1e30));
    assert_eq!(decoded.tenant.as_str(), "acme");
}

#[test]
fn structured_mode_with_parameters_and_a_plain_structured_body() {
    let decoded = decode(SUBJECT, Some(&ce_json()), &structured(json!({}))).unwrap();
    assert_eq!(decoded.origin, Origin::Structured);
    assert_eq!(decoded.event.id(), "e1");
    // Lenient: a structured CloudEvent sent without its content type.
    let decoded = decode(SUBJECT, None, &structured(json!({}))).unwrap();
    assert_eq!(decoded.origin, Origin::Structured);
}

#[test]
fn agenttool_event_envelope_becomes_an_entry_that_keeps_its_trace_refs() {
    let envelope = json!({
        "schema_version": "0.2.0", "event_id": "ev-9", "event_type": "tool.invocation.started",
        "source": "agent://a", "time": "2026-01-02T03:04:05Z", "invocation_id": "inv-1",
        "data": {"invocation_id": "inv-1", "session_id": "s-1"},
        "trace_refs": [{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}]
    });
    let decoded = decode(SUBJECT, None, &serde_json::to_vec(&envelope).unwrap()).unwrap();
    assert_eq!(decoded.origin, Origin::AgenttoolEvent);
    let at = "2026-02-03T04:05:06.789Z".parse::<DateTime<Utc>>().unwrap();
    let entry = LedgerEntry::new(decoded, at);
    let bytes = entry.canonical_bytes().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    // The golden form of an entry: JCS, event then ledger, keys sorted.
    assert_eq!(
        text,
        concat!(
            r#"{"event":{"data":{"invocation_id":"inv-1","session_id":"s-1"},"datacontenttype":"application/json","#,
            r#""id":"ev-9","invocationid":"inv-1","sessionid":"s-1","source":"agent://a","specversion":"1.0","#,
            r#""tenant":"acme","time":"2026-01-02T03:04:05Z","#,
            r#""traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","type":"tool.invocation.started"},"#,
            r#""ledger":{"envelope_fields":{"schema_version":"0.2.0"},"ingested_at":"2026-02-03T04:05:06.789Z","#,
            r#""origin":"agenttool-event","payload_refs":[],"scrubbed_paths":[],"#,
            r#""trace_refs":[{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}]}}"#
        )
    );
    assert_eq!(entry.leaf_hash().unwrap(), toolledger_merkle::leaf_hash(&bytes));
    let back = LedgerEntry::parse(&bytes).unwrap();
    assert_eq!(back, entry);
    assert_eq!(back.canonical_bytes().unwrap(), bytes);
}

#[test]
fn content_digest_ignores_ledger_metadata() {
    let decoded = decode(SUBJECT, Some(&ce_json()), &structured(json!({}))).unwrap();
    let a = LedgerEntry::new(decoded.clone(), DateTime::<Utc>::from_timestamp(1, 0).unwrap());
    let b = LedgerEntry::new(decoded, DateTime::<Utc>::from_timestamp(2, 0).unwrap());
    assert_ne!(a.canonical_bytes().unwrap(), b.canonical_bytes().unwrap());
    assert_eq!(a.content_digest().unwrap(), b.content_digest().unwrap());
}

#[test]
fn unknown_class() {
    let subject = "atl.in.acme.tool.invocation.exploded";
    let (r, text) = reason(decode(
        subject,
        Some(&ce_json()),
        &structured(json!({"type": "tool.invocation.exploded"})),
    ));
    assert_eq!(r, QuarantineReason::UnknownClass);
    assert!(text.contains("tool.invocation.exploded"), "{text}");
}

#[test]
fn a_ledger_class_on_a_producer_subject_is_refused() {
    let (r, text) = reason(decode(
        SUBJECT,
        Some(&ce_json()),
        &structured(json!({"type": "toolledger.access.read"})),
    ));
    assert_eq!(r, QuarantineReason::BadEnvelope);
    assert!(
        text.contains("`type`") && text.contains("toolledger.access.read"),
        "{text}"
    );
    // The ledger's own services publish them on their own subjects.
    let own = "atl.in.acme.toolledger.access.read";
    assert!(
        decode(
            own,
            Some(&ce_json()),
            &structured(json!({"type": "toolledger.access.read"}))
        )
        .is_ok()
    );
}

#[test]
fn unsafe_tenants_are_refused_not_rewritten() {
    for subject in [
        "atl.in._system.tool.invocation.started",
        "atl.in._unroutable.tool.invocation.started",
        "atl.in.-x.tool.invocation.started",
        "atl.in..tool.invocation.started",
    ] {
        let (r, _) = reason(decode(subject, Some(&ce_json()), &structured(json!({}))));
        assert_eq!(r, QuarantineReason::UnsafeTenant, "{subject}");
    }
}

#[test]
fn tenant_extension_must_match_the_subject() {
    let (r, text) = reason(decode(
        SUBJECT,
        Some(&ce_json()),
        &structured(json!({"tenant": "globex"})),
    ));
    assert_eq!(r, QuarantineReason::TenantMismatch);
    assert!(text.contains("globex") && text.contains("acme"), "{text}");
    let (r, text) = reason(decode(
        SUBJECT,
        Some(&ce_json()),
        &structured(json!({"tenant": null})),
    ));
    assert_eq!(r, QuarantineReason::BadEnvelope);
    assert!(text.contains("`tenant`"), "{text}");
}

#[test]
fn bad_envelopes_name_the_attribute() {
    for (extra, attribute) in [
        (json!({"id": null}), "id"),
        (json!({"source": ""}), "source"),
        (json!({"specversion": "0.3"}), "specversion"),
        (json!({"time": "noon"}), "time"),
        (json!({"datacontenttype": "text/plain"}), "datacontenttype"),
        (json!({"data_base64": "e30=", "data": null}), "data_base64"),
        (json!({"Bad_Name": 1}), "Bad_Name"),
        (json!({"sessionid": 7}), "sessionid"),
    ] {
        match decode(SUBJECT, Some(&ce_json()), &structured(extra.clone())) {
            Err(Error::BadEnvelope { attribute: named, .. }) => assert_eq!(named, attribute, "{extra}"),
            other => panic!("{extra}: {other:?}"),
        }
    }
}

#[test]
fn binary_header_values_must_be_percent_encoded_utf8() {
    let h = headers(&[
        ("ce-specversion", "1.0"),
        ("ce-id", "%FF%FE"),
        ("ce-source", "s"),
        ("ce-type", "tool.invocation.started"),
        ("ce-tenant", "acme"),
    ]);
    match decode(SUBJECT, Some(&h), b"{}") {
        Err(Error::BadEnvelope { attribute, .. }) => assert_eq!(attribute, "id"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ids_with_a_control_character_or_over_a_kib_are_bad_id_naming_where_not_what() {
    let binary = |id: &str, data: &str| {
        let h = headers(&[
            ("ce-specversion", "1.0"),
            ("ce-id", id),
            ("ce-source", "s"),
            ("ce-type", "tool.invocation.started"),
            ("ce-tenant", "acme"),
            ("ce-invocationid", "inv%201"),
        ]);
        decode(SUBJECT, Some(&h), &body(data))
    };
    // Percent-decoded first: a control character may arrive encoded.
    let (why, text) = reason(binary("e%0D%0A1", "{}"));
    assert_eq!(why, QuarantineReason::BadId);
    assert_eq!(text, "bad id at `/id`: control character U+000D at byte 1");
    let long = "x".repeat(1025);
    let (why, text) = reason(binary("e1", &format!(r#"{{"invocation_id":"{long}"}}"#)));
    assert_eq!(why, QuarantineReason::BadId);
    assert_eq!(
        text,
        "bad id at `/data/invocation_id`: 1025 bytes, over the 1024-byte limit for ids"
    );
    let (why, _) = reason(decode(
        SUBJECT,
        Some(&ce_json()),
        &structured(json!({"subject": "a\u{7f}"})),
    ));
    assert_eq!(why, QuarantineReason::BadId);
    // Any other text is an id, however odd.
    let odd = binary(
        "e%20%3C1%3E%2F%25",
        r#"{"invocation_id":"inv 1","retry_of":"会話 <0>/%"}"#,
    )
    .unwrap();
    assert_eq!(odd.event.id(), "e <1>/%");
}

#[test]
fn binary_data_that_is_not_ijson_names_its_path_under_data() {
    let h = headers(&[
        ("ce-specversion", "1.0"),
        ("ce-id", "1"),
        ("ce-source", "s"),
        ("ce-type", "tool.invocation.started"),
        ("ce-tenant", "acme"),
    ]);
    match decode(SUBJECT, Some(&h), br#"{"a": {"n": 9007199254740993}}"#) {
        Err(Error::NotIJson {
            problem: JsonProblem::IntegerOutOfRange { .. },
            path,
        }) => assert_eq!(path, "/data/a/n"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn binary_and_structured_encodings_golden() {
    use toolledger_wire::{Event, Mode, binding};
    let mut event = Event::new("a b", "tool.invocation.started", "agent://a");
    event.subject = Some("é\"%".to_owned());
    event.time = Some("2026-01-02T03:04:05.25+00:00".parse::<DateTime<Utc>>().unwrap());
    event.set_extension("tenant", "acme");
    event.datacontenttype = Some("application/json".to_owned());
    event.data = Some(json!({"k": 1}));

    let (h, payload) = binding::encode(&event, Mode::Binary).unwrap();
    let mut pairs: Vec<(String, String)> = h
        .iter()
        .flat_map(|(n, vs)| vs.iter().map(move |v| (n.to_string(), v.as_str().to_owned())))
        .collect();
    pairs.sort();
    let expected = [
        ("ce-datacontenttype", "application/json"),
        ("ce-id", "a%20b"),
        ("ce-source", "agent://a"),
        ("ce-specversion", "1.0"),
        ("ce-subject", "%C3%A9%22%25"),
        ("ce-tenant", "acme"),
        ("ce-time", "2026-01-02T03:04:05.250Z"),
        ("ce-type", "tool.invocation.started"),
    ];
    assert_eq!(pairs, expected.map(|(n, v)| (n.to_owned(), v.to_owned())));
    assert_eq!(&payload[..], br#"{"k":1}"#);

    let (h, payload) = binding::encode(&event, Mode::Structured).unwrap();
    assert_eq!(
        binding::header(&h, "Content-Type"),
        Some("application/cloudevents+json")
    );
    let body: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(
        body,
        json!({"specversion": "1.0", "id": "a b", "source": "agent://a", "type": "tool.invocation.started",
               "subject": "é\"%", "time": "2026-01-02T03:04:05.250Z", "tenant": "acme",
               "datacontenttype": "application/json", "data": {"k": 1}})
    );
}
