//! Property tests: encode → decode is identity in both modes; the event writes the same RFC 8785 bytes
//! as the CloudEvents SDK's JSON form canonicalized (what every entry held before toolledger owned
//! its event type); arbitrary bytes and headers never panic the decoder; canonicalization is idempotent
//! and blind to key order and whitespace, and the canonical-form check accepts exactly its output;
//! scanning an entry reads the outline serde read before the scan kept it.

use std::borrow::Cow;

use async_nats::HeaderMap;
use async_nats::header::{HeaderName, HeaderValue};
use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Number, Value, json};
use toolledger_schemas::EventClass;
use toolledger_wire::event::ATTRIBUTES;
use toolledger_wire::subject::inbound_subject;
use toolledger_wire::{
    Error, Event, ExtensionValue, LedgerEntry, LedgerMetadata, Mode, Tenant, binding, decode, ijson, jcs,
};

use super::TENANT;

/// The contract's extensions, which generated extensions avoid (as they avoid the CloudEvents
/// attributes and `data`).
const CONTRACT_EXTENSIONS: &[&str] = &[
    "tenant",
    "sessionid",
    "invocationid",
    "toolid",
    "traceparent",
    "tracestate",
];

fn reserved(name: &str) -> bool {
    name == "data" || ATTRIBUTES.contains(&name) || CONTRACT_EXTENSIONS.contains(&name)
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|n| Value::Number(n.into())),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        any::<String>().prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(any::<String>(), json_value(), 0..6)
        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
}

fn nonempty_text() -> impl Strategy<Value = String> {
    // Any characters, spaces, quotes, percent signs, CR/LF: everything percent-encoding must survive.
    prop_oneof!["[ -~]{1,20}", "\\PC{1,12}", "[a\r\n %\"é€😀]{1,10}"]
}

/// Text for ids (`id`, `subject`, `sessionid`): anything the id grammar takes (no control
/// characters), spaces, quotes and percent signs included. CR/LF go in `source` and other extensions.
fn id_text() -> impl Strategy<Value = String> {
    prop_oneof!["[ -~]{1,20}", "\\PC{1,12}", "[a %\"é€😀<>/]{1,10}"]
}

fn time() -> impl Strategy<Value = DateTime<Utc>> {
    (0i64..4_102_444_800, 0u32..1_000_000_000)
        .prop_map(|(secs, nanos)| DateTime::<Utc>::from_timestamp(secs, nanos).expect("in range"))
}

fn extension_value(binary: bool) -> BoxedStrategy<ExtensionValue> {
    if binary {
        // Headers carry text; a binary-mode extension comes back as a string.
        nonempty_text().prop_map(ExtensionValue::String).boxed()
    } else {
        prop_oneof![
            nonempty_text().prop_map(ExtensionValue::String),
            any::<bool>().prop_map(ExtensionValue::Boolean),
            (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(ExtensionValue::Integer),
        ]
        .boxed()
    }
}

prop_compose! {
    fn event(binary: bool)(
        id in id_text(),
        source in nonempty_text(),
        class in prop::sample::select(EventClass::ALL.to_vec()),
        subject in prop::option::of(id_text()),
        time in prop::option::of(time()),
        content_type in prop::option::of(Just("application/json")),
        session in prop::option::of(id_text()),
        extensions in prop::collection::btree_map("[a-z0-9]{1,12}", extension_value(binary), 0..4),
        data in prop::option::of(json_object()),
    ) -> Event {
        let mut event = Event::new(id, class.as_str(), source);
        event.set_extension("tenant", TENANT);
        event.subject = subject;
        event.time = time;
        if let Some(session) = session { event.set_extension("sessionid", session.as_str()); }
        for (name, value) in extensions {
            if !reserved(&name) { event.extensions.insert(name, value); }
        }
        if let Some(data) = data {
            event.datacontenttype = content_type.map(str::to_owned);
            event.data = Some(data);
        }
        event
    }
}

fn subject_of(event: &Event) -> String {
    let class: EventClass = event.ty().parse().expect("known class");
    inbound_subject(&Tenant::parse(TENANT).expect("tenant"), class)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn binary_round_trip_is_identity(event in event(true)) {
        let (headers, payload) = binding::encode(&event, Mode::Binary).expect("encodes");
        let decoded = decode(&subject_of(&event), Some(&headers), &payload).expect("decodes");
        prop_assert_eq!(decoded.origin, toolledger_wire::Origin::Binary);
        prop_assert_eq!(decoded.event, event);
    }

    #[test]
    fn structured_round_trip_is_identity(event in event(false)) {
        let (headers, payload) = binding::encode(&event, Mode::Structured).expect("encodes");
        let decoded = decode(&subject_of(&event), Some(&headers), &payload).expect("decodes");
        prop_assert_eq!(decoded.origin, toolledger_wire::Origin::Structured);
        prop_assert_eq!(decoded.event, event);
    }

    #[test]
    fn event_bytes_equal_the_sdk_json_form_canonicalized(event in event(false)) {
        let sdk = cloudevents::Event::deserialize(event.to_json()).expect("the SDK reads the JSON form");
        let sdk_json = serde_json::to_value(&sdk).expect("the SDK writes its JSON form");
        let bytes = event.canonical_bytes().expect("writes");
        prop_assert_eq!(&bytes, &jcs::to_vec(&sdk_json).expect("canonicalizes"));
        prop_assert_eq!(&bytes, &jcs::to_vec(&event.to_json()).expect("canonicalizes"));
        // The JSON form reads back to the same event.
        prop_assert_eq!(Event::from_json(sdk_json).expect("reads"), event);
    }

    #[test]
    fn canonical_form_check_accepts_canonical_bytes_and_refuses_any_other_spelling(
        value in json_value(), rotate in 0usize..7, ws in 0usize..4,
    ) {
        let canonical = jcs::to_vec(&value).expect("canonicalizes");
        prop_assert!(ijson::parse_checked_canonical(&canonical).is_ok(), "{}", String::from_utf8_lossy(&canonical));
        let mut other = String::new();
        write_shuffled(&value, rotate, [" ", "\n", "\t", "\r\n "][ws], &mut other);
        // Whitespace around every token makes any value that has a token boundary non-canonical.
        let refused = ijson::parse_checked_canonical(other.as_bytes()).is_err();
        prop_assert_eq!(refused, other.as_bytes() != canonical.as_slice());
    }

    #[test]
    fn sealing_equals_digesting_then_canonicalizing(event in event(false), scrubbed in any::<bool>()) {
        let (headers, payload) = binding::encode(&event, Mode::Structured).expect("encodes");
        let decoded = decode(&subject_of(&event), Some(&headers), &payload).expect("decodes");
        let at = DateTime::<Utc>::from_timestamp(1_700_000_000, 123_000_000).expect("time");
        let mut sealed = toolledger_wire::LedgerEntry::new(decoded, at);
        if scrubbed {
            sealed.ledger.scrubbed_paths = vec!["/data/token".to_owned()];
        }
        let mut separately = sealed.clone();
        let digest = separately.content_digest().expect("digests");
        separately.ledger.content_digest = Some(format!("sha256:{}", toolledger_wire::entry::hex(&digest)));
        let (sealed_digest, bytes) = sealed.seal().expect("seals");
        prop_assert_eq!(sealed_digest, digest);
        prop_assert_eq!(&sealed, &separately);
        prop_assert_eq!(bytes, separately.canonical_bytes().expect("canonicalizes"));
    }

    #[test]
    fn sealing_the_json_form_equals_sealing_the_event(event in event(false), binary in any::<bool>()) {
        // What ingest does: the decoded event taken as JSON, the entry written from that value.
        let mode = if binary { Mode::Binary } else { Mode::Structured };
        let (headers, payload) = binding::encode(&event, mode).expect("encodes");
        let decoded = decode(&subject_of(&event), Some(&headers), &payload).expect("decodes");
        let at = DateTime::<Utc>::from_timestamp(1_700_000_000, 123_000_000).expect("time");
        let mut entry = toolledger_wire::LedgerEntry::new(decoded, at);
        let json = entry.event.to_json();
        let mut ledger = entry.ledger.clone();
        let (json_digest, json_bytes) = toolledger_wire::LedgerEntry::seal_json(&json, &mut ledger).expect("seals");
        prop_assert_eq!(toolledger_wire::LedgerEntry::content_digest_json(&json).expect("digests"), json_digest);
        let (digest, bytes) = entry.seal().expect("seals");
        prop_assert_eq!(json_digest, digest);
        prop_assert_eq!(&ledger, &entry.ledger);
        prop_assert_eq!(json_bytes, bytes);
    }

    #[test]
    fn scanning_an_entry_reads_what_parsing_it_does(event in event(false), respace in any::<bool>()) {
        let mut bytes = entry_of(&event).canonical_bytes().expect("canonicalizes");
        if respace {
            bytes.insert(1, b' ');
        }
        let parsed = toolledger_wire::LedgerEntry::parse_canonical(&bytes);
        match toolledger_wire::LedgerEntry::scan_canonical(&bytes) {
            Ok(scanned) => {
                let parsed = parsed.expect("the parse accepts a sealed entry the scan accepts");
                prop_assert_eq!(scanned.ty.as_ref(), parsed.event.ty());
                prop_assert_eq!(scanned.tenant.as_deref(), parsed.event.extension_str("tenant"));
                prop_assert_eq!(&scanned.ledger, &parsed.ledger);
            }
            Err(error) => prop_assert_eq!(Some(error.to_string()), parsed.err().map(|e| e.to_string())),
        }
        prop_assert_eq!(respace, toolledger_wire::LedgerEntry::scan_canonical(&bytes).is_err());
    }

    #[test]
    fn scanning_an_entry_reads_the_outline_serde_read(
        event in event(false),
        fields in prop::option::of(json_object()),
        sealed in any::<bool>(),
        (edit, change) in prop::sample::select(OUTLINE_EDITS),
    ) {
        let mut entry = entry_of(&event);
        entry.ledger.envelope_fields = fields.and_then(|f| f.as_object().cloned());
        if sealed {
            entry.ledger.scrubbed_paths = vec!["/data/a\"b".to_owned()];
            entry.seal().expect("seals");
        }
        let Value::Object(mut value) = ijson::parse_canonical(&entry.canonical_bytes().expect("canonicalizes"))
            .expect("reads back") else { unreachable!("an entry is an object") };
        change(&mut value);
        let bytes = jcs::to_vec(&Value::Object(value)).expect("canonicalizes");
        prop_assert_eq!(scanned(&bytes), serde_outline(&bytes), "{}: {}", edit, String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn arbitrary_payloads_never_panic(
        payload in prop::collection::vec(any::<u8>(), 0..256),
        mode in 0u8..3,
    ) {
        let headers = match mode {
            0 => None,
            1 => Some(super::headers(&[("content-type", "application/cloudevents+json")])),
            _ => Some(super::headers(&[("ce-specversion", "1.0"), ("ce-id", "1"), ("ce-source", "s"),
                ("ce-type", "tool.declared"), ("ce-tenant", TENANT)])),
        };
        let _ = decode("atl.in.acme.tool.declared", headers.as_ref(), &payload);
    }

    #[test]
    fn arbitrary_json_bodies_never_panic(value in json_value(), structured in any::<bool>()) {
        let payload = serde_json::to_vec(&value).expect("serializes");
        let headers = structured.then(|| super::headers(&[("content-type", "application/cloudevents+json")]));
        let _ = decode("atl.in.acme.tool.declared", headers.as_ref(), &payload);
    }

    #[test]
    fn arbitrary_headers_never_panic(
        pairs in prop::collection::vec((
            prop_oneof!["(ce|CE|Ce)-[a-zA-Z0-9_-]{0,12}", "[a-zA-Z-]{1,12}", Just("content-type".to_owned()),
                Just("CE-SPECVERSION".to_owned())],
            prop_oneof![any::<String>(), "[%0-9A-Fa-f\r\n]{0,12}", Just("1.0".to_owned()),
                Just("%FF%FE".to_owned()), Just("application/cloudevents+json".to_owned())],
        ), 0..10),
        payload in prop::collection::vec(any::<u8>(), 0..64),
        subject in prop_oneof![Just("atl.in.acme.tool.declared".to_owned()), "[a-z._>*-]{0,24}"],
    ) {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            // Only what a HeaderMap can hold: the fallible constructors refuse CR/LF and bad names.
            if let (Ok(name), Ok(value)) = (name.parse::<HeaderName>(), value.parse::<HeaderValue>()) {
                headers.append(name, value);
            }
        }
        let _ = decode(&subject, Some(&headers), &payload);
    }

    #[test]
    fn canonicalization_is_idempotent(value in json_value()) {
        let text = serde_json::to_vec(&value).expect("serializes");
        let once = jcs::canonicalize(&text).expect("canonicalizes");
        let twice = jcs::canonicalize(&once).expect("canonicalizes again");
        prop_assert_eq!(&once, &twice);
        // Canonical bytes read back to the same numbers and strings.
        let back = toolledger_wire::ijson::parse_canonical(&once).expect("canonical bytes are JSON");
        prop_assert!(same_meaning(&back, &value), "{back} vs {value}");
    }

    #[test]
    fn canonicalization_ignores_key_order_and_whitespace(value in json_value(), rotate in 0usize..7, ws in 0usize..4) {
        let compact = serde_json::to_vec(&value).expect("serializes");
        let mut shuffled = String::new();
        write_shuffled(&value, rotate, [" ", "\n", "\t", "\r\n "][ws], &mut shuffled);
        prop_assert_eq!(
            jcs::canonicalize(&compact).expect("compact"),
            jcs::canonicalize(shuffled.as_bytes()).expect("shuffled")
        );
    }
}

/// The entry ingest writes for a structured event, ingested at a fixed time.
fn entry_of(event: &Event) -> LedgerEntry {
    let (headers, payload) = binding::encode(event, Mode::Structured).expect("encodes");
    let decoded = decode(&subject_of(event), Some(&headers), &payload).expect("decodes");
    LedgerEntry::new(
        decoded,
        DateTime::<Utc>::from_timestamp(1_700_000_000, 0).expect("time"),
    )
}

/// A change to an entry, and its name.
type OutlineEdit = (&'static str, fn(&mut Map<String, Value>));

/// Changes to a sealed entry (the object `{"event":…,"ledger":…}`) that its outline must read the
/// way serde read it: attributes of other types, escaped, empty or missing; `event` and `ledger`
/// missing or not objects; and members of the outline's names where they are not the entry's.
const OUTLINE_EDITS: &[OutlineEdit] = &[
    ("as written", |_| {}),
    ("tenant a number", |e| set(e, "tenant", json!(5))),
    ("tenant an object", |e| set(e, "tenant", json!({"a": "acme"}))),
    ("tenant an array", |e| set(e, "tenant", json!(["acme"]))),
    ("tenant null", |e| set(e, "tenant", Value::Null)),
    ("tenant false", |e| set(e, "tenant", json!(false))),
    ("tenant escaped", |e| set(e, "tenant", json!("ac\"me\n"))),
    ("tenant empty", |e| set(e, "tenant", json!(""))),
    ("no tenant", |e| unset(e, "tenant")),
    ("id escaped", |e| set(e, "id", json!("x\ny\"z\\\u{1}"))),
    ("type escaped", |e| set(e, "type", json!("tool.\"declared\"\t"))),
    ("source escaped", |e| set(e, "source", json!("s\r\n"))),
    ("specversion escaped", |e| set(e, "specversion", json!("1.0\n"))),
    ("id empty", |e| set(e, "id", json!(""))),
    ("source empty", |e| set(e, "source", json!(""))),
    ("type empty", |e| set(e, "type", json!(""))),
    ("id a number", |e| set(e, "id", json!(5))),
    ("source true", |e| set(e, "source", json!(true))),
    ("type an array", |e| set(e, "type", json!(["tool.declared"]))),
    ("type an object", |e| set(e, "type", json!({}))),
    ("specversion a number", |e| set(e, "specversion", json!(1.5))),
    ("id null", |e| set(e, "id", Value::Null)),
    ("specversion null", |e| set(e, "specversion", Value::Null)),
    ("no id", |e| unset(e, "id")),
    ("no source", |e| unset(e, "source")),
    ("no type", |e| unset(e, "type")),
    ("no specversion", |e| unset(e, "specversion")),
    ("specversion 0.3", |e| set(e, "specversion", json!("0.3"))),
    ("no event", |e| unset_member(e, "event")),
    ("no ledger", |e| unset_member(e, "ledger")),
    ("neither", |e| e.clear()),
    ("event null", |e| set_member(e, "event", Value::Null)),
    ("event a string", |e| set_member(e, "event", json!("{}"))),
    ("event a number", |e| set_member(e, "event", json!(1))),
    ("event empty", |e| set_member(e, "event", json!({}))),
    ("ledger null", |e| set_member(e, "ledger", Value::Null)),
    ("ledger a string", |e| set_member(e, "ledger", json!("ledger"))),
    ("ledger empty", |e| set_member(e, "ledger", json!({}))),
    ("ledger a short array", |e| {
        set_member(e, "ledger", json!(["2026-01-01T00:00:00Z", "ledger"]))
    }),
    ("ledger origin unknown", |e| {
        set_metadata(e, "origin", json!("post"))
    }),
    ("ledger ingested_at a number", |e| {
        set_metadata(e, "ingested_at", json!(1))
    }),
    ("id a number, no ledger", |e| {
        set(e, "id", json!(5));
        unset_member(e, "ledger");
    }),
    ("no event, a bad ledger", |e| {
        unset_member(e, "event");
        set_member(e, "ledger", json!(7));
    }),
    ("the event only inside the ledger", |e| {
        let event = take_member(e, "event");
        set_member(
            e,
            "ledger",
            json!({"envelope_fields": {"event": event},
            "ingested_at": "2026-01-01T00:00:00Z", "origin": "ledger"}),
        );
    }),
    ("the ledger only inside the event", |e| {
        let ledger = take_member(e, "ledger");
        set(e, "data", json!({"ledger": ledger}));
    }),
    ("the attributes only inside data", |e| {
        let attributes = ["id", "source", "specversion", "tenant", "type"];
        let data: Map<String, Value> = attributes
            .iter()
            .map(|name| ((*name).to_owned(), take(e, name)))
            .collect();
        set(e, "data", Value::Object(data));
    }),
    ("the tenant only inside data", |e| {
        let tenant = take(e, "tenant");
        set(e, "data", json!({"tenant": tenant}));
    }),
    ("an event inside the event", |e| {
        let inner = e["event"].clone();
        set(e, "event", inner);
        unset(e, "id");
    }),
    ("data as deep as the parse takes", |e| {
        set(e, "data", nested(ijson::MAX_DEPTH - 2))
    }),
    ("metadata as deep as serde took it", |e| {
        set_metadata(e, "envelope_fields", nested(ijson::MAX_DEPTH - 3))
    }),
    ("members around them", |e| {
        set_member(e, "a", json!({"event": {"id": 1}, "ledger": 2}));
        set_member(e, "z", json!([{"event": null}]));
    }),
];

/// Objects nested `levels` deep.
fn nested(levels: usize) -> Value {
    (1..levels).fold(json!({}), |inner, _| json!({ "a": inner }))
}

/// Sets the event's attribute `name` (the entry's `event` stays an object).
fn set(entry: &mut Map<String, Value>, name: &str, value: Value) {
    if let Some(event) = entry["event"].as_object_mut() {
        event.insert(name.to_owned(), value);
    }
}

/// Removes the event's attribute `name`, giving it back (`null` when it had none).
fn take(entry: &mut Map<String, Value>, name: &str) -> Value {
    entry["event"]
        .as_object_mut()
        .and_then(|event| event.remove(name))
        .unwrap_or_default()
}

fn unset(entry: &mut Map<String, Value>, name: &str) {
    take(entry, name);
}

/// Sets the metadata's member `name` (the entry's `ledger` stays an object).
fn set_metadata(entry: &mut Map<String, Value>, name: &str, value: Value) {
    if let Some(ledger) = entry["ledger"].as_object_mut() {
        ledger.insert(name.to_owned(), value);
    }
}

/// Sets the entry's own member `name` (`event`, `ledger`, or any other).
fn set_member(entry: &mut Map<String, Value>, name: &str, value: Value) {
    entry.insert(name.to_owned(), value);
}

/// Removes the entry's own member `name`, giving it back (`null` when it had none).
fn take_member(entry: &mut Map<String, Value>, name: &str) -> Value {
    entry.remove(name).unwrap_or_default()
}

fn unset_member(entry: &mut Map<String, Value>, name: &str) {
    entry.remove(name);
}

/// What reading an entry's outline came to: its class, tenant and metadata, or, refused, the error's
/// kind and attribute for `bad_envelope` (whose text may differ) and its text for anything else.
type Outlined = Result<(String, Option<String>, LedgerMetadata), String>;

fn refusal(error: Error) -> String {
    match error {
        Error::BadEnvelope { attribute, .. } => format!("bad_envelope {attribute}"),
        other => other.to_string(),
    }
}

fn scanned(bytes: &[u8]) -> Outlined {
    LedgerEntry::scan_canonical(bytes)
        .map(|scanned| {
            let tenant = scanned.tenant.map(Cow::into_owned);
            (scanned.ty.into_owned(), tenant, scanned.ledger)
        })
        .map_err(refusal)
}

/// The oracle: how `LedgerEntry::scan_canonical` read an entry's outline before the scan kept it,
/// with a second pass of serde over the whole entry.
fn serde_outline(bytes: &[u8]) -> Outlined {
    ijson::scan_checked_canonical(bytes).map_err(|e| refusal(e.into()))?;
    let body = |_| "bad_envelope body".to_owned();
    let outline: SerdeOutline<'_> = serde_json::from_slice(bytes).map_err(body)?;
    let event = outline.event.ok_or("bad_envelope event")?;
    let ledger = outline.ledger.ok_or("bad_envelope ledger")?;
    if event.specversion.as_deref() != Some("1.0") {
        return Err("bad_envelope specversion".to_owned());
    }
    for (name, value) in [("id", &event.id), ("source", &event.source), ("type", &event.ty)] {
        if value.as_deref().is_none_or(str::is_empty) {
            return Err(format!("bad_envelope {name}"));
        }
    }
    let tenant = event.tenant.map(Cow::into_owned);
    Ok((event.ty.unwrap_or_default().into_owned(), tenant, ledger))
}

/// An entry's outline as serde read it: every member optional, so that what is missing is named in
/// the entry's own order.
#[derive(Deserialize)]
struct SerdeOutline<'a> {
    #[serde(borrow, default)]
    event: Option<SerdeEventOutline<'a>>,
    #[serde(default)]
    ledger: Option<LedgerMetadata>,
}

#[derive(Deserialize)]
struct SerdeEventOutline<'a> {
    #[serde(borrow, default)]
    specversion: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    source: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    ty: Option<Cow<'a, str>>,
    /// Another type than a string is no tenant.
    #[serde(borrow, default, deserialize_with = "string_or_none")]
    tenant: Option<Cow<'a, str>>,
}

fn string_or_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Cow<'de, str>>, D::Error> {
    struct StringOrNone;
    impl<'de> serde::de::Visitor<'de> for StringOrNone {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_borrowed_str<E>(self, text: &'de str) -> std::result::Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(text)))
        }
        fn visit_str<E>(self, text: &str) -> std::result::Result<Self::Value, E> {
            Ok(Some(Cow::Owned(text.to_owned())))
        }
        fn visit_bool<E>(self, _: bool) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(None)
        }
    }
    deserializer.deserialize_any(StringOrNone)
}

/// Where the scan's outline no longer reads what serde read, it reads what the canonical parse
/// does: serde took an entry or an event written as an array (its structs read sequences too), and
/// refused metadata nested past its own limit, which it counted from the entry, not the metadata.
#[test]
fn scanning_an_entry_refuses_and_takes_what_the_parse_does_where_serde_did_not() {
    let mut event = Event::new("e1", "tool.declared", "s");
    event.set_extension("tenant", super::TENANT);
    let bytes = entry_of(&event).canonical_bytes().expect("canonicalizes");
    let written = ijson::parse_canonical(&bytes).expect("reads");
    let mut deep_metadata = written.clone();
    // The entry, `ledger` and `envelope_fields` nested as deep as the parse takes.
    deep_metadata["ledger"]["envelope_fields"] = nested(ijson::MAX_DEPTH - 2);
    let as_array = json!([written["event"], written["ledger"]]);
    let mut event_array = written.clone();
    event_array["event"] = json!(["1.0", "e1", "s", "tool.declared", super::TENANT]);
    for (case, entry, serde_took_it) in [
        ("deep metadata", deep_metadata, false),
        ("the entry an array", as_array, true),
        ("the event an array", event_array, true),
    ] {
        let bytes = jcs::to_vec(&entry).expect("canonicalizes");
        let parsed = LedgerEntry::parse_canonical(&bytes);
        assert_eq!(serde_outline(&bytes).is_ok(), serde_took_it, "{case}");
        assert_eq!(scanned(&bytes).is_ok(), parsed.is_ok(), "{case}: {parsed:?}");
        assert_eq!(parsed.is_ok(), !serde_took_it, "{case}");
        if serde_took_it {
            assert_eq!(scanned(&bytes), Err("bad_envelope body".to_owned()), "{case}");
        }
    }
}

/// Equal, comparing numbers as doubles (canonical form writes `1.0` as `1`).
fn same_meaning(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_meaning(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_meaning(v, w)))
        }
        (x, y) => x == y,
    }
}

/// Writes `value` as JSON with each object's keys rotated by `rotate` and `ws` around every token.
fn write_shuffled(value: &Value, rotate: usize, ws: &str, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                write_shuffled(item, rotate, ws, out);
            }
            out.push_str(ws);
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.reverse();
            if !entries.is_empty() {
                let by = rotate % entries.len();
                entries.rotate_left(by);
            }
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                out.push_str(&serde_json::to_string(key).expect("key"));
                out.push_str(ws);
                out.push(':');
                out.push_str(ws);
                write_shuffled(item, rotate, ws, out);
            }
            out.push_str(ws);
            out.push('}');
        }
        leaf => out.push_str(&serde_json::to_string(leaf).expect("leaf")),
    }
}

#[test]
fn header_map_refuses_cr_lf_through_the_fallible_constructor() {
    assert!("a\r\nb".parse::<HeaderValue>().is_err());
    // Percent-encoding keeps such values off the header line entirely.
    let mut event = Event::new("a\r\nb", "tool.declared", "s");
    event.set_extension("tenant", TENANT);
    let (headers, _) = binding::encode(&event, Mode::Binary).expect("encodes");
    assert_eq!(binding::header(&headers, "CE-ID"), Some("a%0D%0Ab"));
}
