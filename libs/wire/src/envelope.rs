//! The spec's own `agenttool-event` envelope, accepted as a plain JSON body and mapped to a CloudEvent.
//!
//! | envelope | CloudEvent |
//! |---|---|
//! | `event_id` | `id` |
//! | `event_type` | `type` |
//! | `source`, `subject`, `time` | same |
//! | `invocation_id` | extension `invocationid` |
//! | `tool_id` | extension `toolid` |
//! | first W3C trace context in `trace_refs` | extensions `traceparent`, `tracestate` |
//! | `data` | `data` (`application/json`) |
//! | `data.session_id` | extension `sessionid` |
//! | the NATS subject's tenant | extension `tenant` |
//!
//! The full `trace_refs` array and every other envelope field (`schema_version`, unknown fields) are
//! returned beside the event so the ledger entry keeps them in its metadata.
//!
//! A trace ref carries W3C trace context either as `{"traceparent": "00-…", "tracestate": "…"}` or as
//! `{"trace_id": <32 hex>, "span_id": <16 hex>, "trace_flags": <2 hex>}` (flags default to `00`); refs
//! that are neither are kept but not mapped.

use serde_json::{Map, Value};

use crate::event::Event;

use crate::subject::Tenant;
use crate::{Error, Result};

/// Envelope fields that map onto the CloudEvent; everything else is kept in the entry's metadata.
const MAPPED: &[&str] = &[
    "event_id",
    "event_type",
    "source",
    "subject",
    "time",
    "invocation_id",
    "tool_id",
    "data",
    "trace_refs",
];

/// An agenttool-event envelope mapped to a CloudEvent.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedEnvelope {
    /// The CloudEvent.
    pub event: Event,
    /// The envelope's `trace_refs`, whole.
    pub trace_refs: Option<Vec<Value>>,
    /// Envelope fields with no CloudEvents counterpart (`schema_version`, unknown fields).
    pub other_fields: Option<Map<String, Value>>,
}

/// Whether a JSON object looks like an agenttool-event envelope rather than a structured CloudEvent.
pub fn is_agenttool_event(object: &Map<String, Value>) -> bool {
    object.contains_key("event_id") || !object.contains_key("specversion")
}

fn required_str<'a>(object: &'a Map<String, Value>, field: &str) -> Result<&'a str> {
    match object.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(Error::bad_envelope(field, "empty")),
        Some(_) => Err(Error::bad_envelope(field, "must be a string")),
        None => Err(Error::bad_envelope(field, "missing")),
    }
}

fn optional_str<'a>(object: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::bad_envelope(field, "must be a string")),
    }
}

/// Maps an envelope published on `tenant`'s subject.
pub fn map_agenttool_event(mut object: Map<String, Value>, tenant: &Tenant) -> Result<MappedEnvelope> {
    let id = required_str(&object, "event_id")?;
    let ty = required_str(&object, "event_type")?;
    let source = required_str(&object, "source")?;
    let time = required_str(&object, "time")?;
    // Required by the official envelope schema; kept in the entry's metadata, not in the event.
    required_str(&object, "schema_version")?;
    let time = chrono::DateTime::parse_from_rfc3339(time)
        .map_err(|e| Error::bad_envelope("time", format!("not an RFC 3339 time: {e}")))?;

    let mut event = Event::new(id, ty, source);
    event.time = Some(time.with_timezone(&chrono::Utc));
    event.set_extension("tenant", tenant.as_str());
    event.subject = optional_str(&object, "subject")?.map(str::to_owned);
    if let Some(invocation) = optional_str(&object, "invocation_id")? {
        event.set_extension("invocationid", invocation);
    }
    if let Some(tool) = optional_str(&object, "tool_id")? {
        event.set_extension("toolid", tool);
    }
    let trace_refs = match object.get("trace_refs") {
        None | Some(Value::Null) => None,
        Some(Value::Array(refs)) => {
            if let Some(index) = refs.iter().position(|r| !r.is_object()) {
                return Err(Error::bad_envelope(
                    format!("trace_refs/{index}"),
                    "must be an object",
                ));
            }
            Some(refs.clone())
        }
        Some(_) => return Err(Error::bad_envelope("trace_refs", "must be an array")),
    };
    if let Some((traceparent, tracestate)) = trace_refs.as_deref().and_then(trace_context) {
        event.set_extension("traceparent", traceparent.as_str());
        if let Some(tracestate) = tracestate {
            event.set_extension("tracestate", tracestate.as_str());
        }
    }
    // The data moves into the event; what is left of the envelope is kept beside it.
    match object.remove("data") {
        None | Some(Value::Null) => {}
        Some(Value::Object(data)) => {
            if let Some(Value::String(session)) = data.get("session_id") {
                event.set_extension("sessionid", session.as_str());
            }
            event.datacontenttype = Some("application/json".to_owned());
            event.data = Some(Value::Object(data));
        }
        Some(_) => return Err(Error::bad_envelope("data", "must be an object")),
    }

    let other: Map<String, Value> = object
        .into_iter()
        .filter(|(k, _)| !MAPPED.contains(&k.as_str()))
        .collect();
    Ok(MappedEnvelope {
        event,
        trace_refs,
        other_fields: (!other.is_empty()).then_some(other),
    })
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `s` is a W3C `traceparent` (version 00 form; ids not all zero).
pub fn is_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    matches!(parts.as_slice(), [version, trace, span, flags]
        if is_lower_hex(version, 2) && *version != "ff"
            && is_lower_hex(trace, 32) && trace.bytes().any(|b| b != b'0')
            && is_lower_hex(span, 16) && span.bytes().any(|b| b != b'0')
            && is_lower_hex(flags, 2))
}

/// The first W3C trace context among `refs`: `traceparent` and, when present, `tracestate`.
pub fn trace_context(refs: &[Value]) -> Option<(String, Option<String>)> {
    refs.iter().filter_map(Value::as_object).find_map(|r| {
        let tracestate = r.get("tracestate").and_then(Value::as_str).map(str::to_owned);
        if let Some(tp) = r.get("traceparent").and_then(Value::as_str) {
            return is_traceparent(tp).then(|| (tp.to_owned(), tracestate));
        }
        let trace = r.get("trace_id")?.as_str()?;
        let span = r.get("span_id")?.as_str()?;
        let flags = r.get("trace_flags").and_then(Value::as_str).unwrap_or("00");
        let tp = format!("00-{trace}-{span}-{flags}");
        is_traceparent(&tp).then_some((tp, tracestate))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tenant() -> Tenant {
        Tenant::parse("acme").unwrap()
    }

    fn envelope() -> Map<String, Value> {
        let Value::Object(map) = json!({
            "schema_version": "0.2.0",
            "event_id": "ev-1",
            "event_type": "tool.invocation.started",
            "source": "agent://runner",
            "subject": "inv-1",
            "time": "2026-01-02T03:04:05.5+01:00",
            "invocation_id": "inv-1",
            "tool_id": "tool-9",
            "data": {"invocation_id": "inv-1", "session_id": "sess-3", "status": "running"},
            "trace_refs": [
                {"kind": "otel-link", "trace_id": "zz"},
                {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "k=v"}
            ],
            "x_vendor": {"a": 1}
        }) else {
            unreachable!()
        };
        map
    }

    #[test]
    fn maps_every_field() {
        let mapped = map_agenttool_event(envelope(), &tenant()).unwrap();
        let e = &mapped.event;
        assert_eq!(e.id(), "ev-1");
        assert_eq!(e.ty(), "tool.invocation.started");
        assert_eq!(e.source(), "agent://runner");
        assert_eq!(e.subject(), Some("inv-1"));
        assert_eq!(e.time().unwrap().to_rfc3339(), "2026-01-02T02:04:05.500+00:00");
        let ext = |n: &str| e.extension(n).map(|v| v.to_string());
        assert_eq!(ext("tenant").as_deref(), Some("acme"));
        assert_eq!(ext("invocationid").as_deref(), Some("inv-1"));
        assert_eq!(ext("toolid").as_deref(), Some("tool-9"));
        assert_eq!(ext("sessionid").as_deref(), Some("sess-3"));
        assert_eq!(
            ext("traceparent").as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(ext("tracestate").as_deref(), Some("k=v"));
        assert_eq!(mapped.trace_refs.as_ref().unwrap().len(), 2);
        let other = mapped.other_fields.unwrap();
        assert_eq!(other.keys().collect::<Vec<_>>(), ["schema_version", "x_vendor"]);
    }

    #[test]
    fn trace_id_and_span_id_form() {
        let refs = [json!({"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"})];
        assert_eq!(
            trace_context(&refs).unwrap().0,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        );
        assert!(
            trace_context(&[
                json!({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"})
            ])
            .is_none()
        );
    }

    #[test]
    fn missing_or_mistyped_fields_are_bad_envelope_naming_them() {
        for (field, value, named) in [
            ("event_id", None, "event_id"),
            ("event_type", Some(json!(3)), "event_type"),
            ("time", Some(json!("yesterday")), "time"),
            ("data", Some(json!([1])), "data"),
            ("trace_refs", Some(json!([1])), "trace_refs/0"),
            ("schema_version", None, "schema_version"),
        ] {
            let mut object = envelope();
            match value {
                Some(v) => object.insert(field.to_owned(), v),
                None => object.remove(field),
            };
            match map_agenttool_event(object, &tenant()) {
                Err(Error::BadEnvelope { attribute, .. }) => assert_eq!(attribute, named),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
