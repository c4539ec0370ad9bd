//! From an inbound NATS message to a checked CloudEvent, or a typed reason to quarantine it.
//!
//! ```text
//! subject ─▶ InboundSubject::parse ───────────────────────────── unsafe_tenant / bad_envelope
//! headers ─▶ NatsMessage::new ─▶ encoding?
//!              structured: I-JSON body ─▶ attribute checks ─▶ Event    bad_envelope / not_ijson
//!              binary:     ce-* headers ─▶ Event; I-JSON payload ─▶ data
//!              neither:    I-JSON body ─▶ agenttool-event ─▶ Event (a body with `specversion` and no
//!                          `event_id` is taken as a structured CloudEvent sent without its content type)
//! Event ─▶ contract: type is a known class ─────────────────────────────── unknown_class
//!                    type equals the subject's class ───────────────────── bad_envelope (type)
//!                    tenant extension present, a string, equal to the subject's ── tenant_mismatch
//! ```
//!
//! The subject-class rule is what keeps producers from forging the ledger's own `toolledger.*`
//! classes: their credentials reach only `atl.in.<tenant>.tool.>`, and an event may not claim a class
//! other than the one its subject names. The decoder cannot see credentials, so the rule it can
//! enforce is that equality; NATS permissions do the rest.

use std::str::FromStr;

use cloudevents::message::{Encoding, MessageDeserializer};
use cloudevents::{AttributesReader, Data, Event};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolledger_schemas::EventClass;

use crate::binding::{NatsMessage, is_attribute_name, is_json_content_type};
use crate::envelope::{is_agenttool_event, map_agenttool_event};
use crate::subject::{InboundSubject, Tenant};
use crate::{Error, Result, ijson};

/// How an event arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// CloudEvents binary mode.
    Binary,
    /// CloudEvents structured mode.
    Structured,
    /// The spec's own envelope as a plain JSON body.
    AgenttoolEvent,
    /// Written by the ledger itself (quarantine receipts, access and erasure records).
    Ledger,
}

impl Origin {
    /// The name recorded in ledger entries: `binary`, `structured`, `agenttool-event`, `ledger`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Binary => "binary",
            Self::Structured => "structured",
            Self::AgenttoolEvent => "agenttool-event",
            Self::Ledger => "ledger",
        }
    }
}

/// The extensions the contract names; each must be a string when present.
pub const CONTRACT_EXTENSIONS: &[&str] = &[
    "tenant",
    "sessionid",
    "invocationid",
    "toolid",
    "traceparent",
    "tracestate",
];

/// A decoded, contract-checked inbound event.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedEvent {
    /// The CloudEvent; its data, when present, is JSON.
    pub event: Event,
    /// Its class, the CloudEvents `type`.
    pub class: EventClass,
    /// Its tenant, from the subject (and equal to the `tenant` extension).
    pub tenant: Tenant,
    /// How it arrived.
    pub origin: Origin,
    /// An agenttool-event envelope's whole `trace_refs`.
    pub trace_refs: Option<Vec<Value>>,
    /// An agenttool-event envelope's fields with no CloudEvents counterpart.
    pub envelope_fields: Option<Map<String, Value>>,
}

impl DecodedEvent {
    /// The data as JSON, if the event has any.
    pub fn data(&self) -> Option<&Value> {
        match self.event.data() {
            Some(Data::Json(value)) => Some(value),
            _ => None,
        }
    }
}

/// Decodes one inbound message published on `subject`.
pub fn decode(
    subject: &str,
    headers: Option<&async_nats::HeaderMap>,
    payload: &[u8],
) -> Result<DecodedEvent> {
    let inbound = InboundSubject::parse(subject)?;
    let message = NatsMessage::new(headers, payload)?;
    let (origin, event, trace_refs, envelope_fields) = match message.encoding() {
        Encoding::STRUCTURED => (
            Origin::Structured,
            structured_event(ijson::parse(payload)?)?,
            None,
            None,
        ),
        Encoding::BINARY => (Origin::Binary, binary_event(message)?, None, None),
        _ => {
            let Value::Object(object) = ijson::parse(payload)? else {
                return Err(Error::bad_envelope("body", "not a JSON object"));
            };
            if is_agenttool_event(&object) {
                let mapped = map_agenttool_event(object, &inbound.tenant)?;
                (
                    Origin::AgenttoolEvent,
                    mapped.event,
                    mapped.trace_refs,
                    mapped.other_fields,
                )
            } else {
                (
                    Origin::Structured,
                    structured_event(Value::Object(object))?,
                    None,
                    None,
                )
            }
        }
    };
    let class = check_contract(&event, &inbound)?;
    Ok(DecodedEvent {
        event,
        class,
        tenant: inbound.tenant,
        origin,
        trace_refs,
        envelope_fields,
    })
}

/// A binary-mode event: attributes from the headers, the payload parsed as I-JSON data.
fn binary_event(message: NatsMessage<'_>) -> Result<Event> {
    let mut event = message.into_binary_event()?;
    let content_type = event.datacontenttype().map(str::to_owned);
    if let Some(content_type) = content_type.as_deref().filter(|ct| !is_json_content_type(ct)) {
        return Err(Error::bad_envelope(
            "datacontenttype",
            format!("`{content_type}`: data must be JSON"),
        ));
    }
    if let Some(Data::Binary(bytes)) = event.data() {
        let data = ijson::parse(bytes).map_err(|e| e.under("/data"))?;
        event.set_data_unchecked(Data::Json(data));
    }
    Ok(event)
}

/// A structured-mode event from its (I-JSON) body.
pub fn structured_event(body: Value) -> Result<Event> {
    let Value::Object(object) = body else {
        return Err(Error::bad_envelope("body", "not a JSON object"));
    };
    match object.get("specversion") {
        Some(Value::String(v)) if v == "1.0" => {}
        Some(other) => {
            return Err(Error::bad_envelope(
                "specversion",
                format!("{other} is not \"1.0\""),
            ));
        }
        None => return Err(Error::bad_envelope("specversion", "missing")),
    }
    for required in ["id", "type", "source"] {
        match object.get(required) {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(Value::String(_)) => return Err(Error::bad_envelope(required, "empty")),
            Some(_) => return Err(Error::bad_envelope(required, "must be a string")),
            None => return Err(Error::bad_envelope(required, "missing")),
        }
    }
    for optional in ["subject", "datacontenttype", "dataschema", "time"] {
        match object.get(optional) {
            None | Some(Value::Null | Value::String(_)) => {}
            Some(_) => return Err(Error::bad_envelope(optional, "must be a string")),
        }
    }
    if let Some(Value::String(time)) = object.get("time") {
        chrono::DateTime::parse_from_rfc3339(time)
            .map_err(|e| Error::bad_envelope("time", format!("not an RFC 3339 time: {e}")))?;
    }
    if let Some(Value::String(content_type)) = object.get("datacontenttype")
        && !is_json_content_type(content_type)
    {
        return Err(Error::bad_envelope(
            "datacontenttype",
            format!("`{content_type}`: data must be JSON"),
        ));
    }
    if object.contains_key("data_base64") {
        return Err(Error::bad_envelope(
            "data_base64",
            "data must be JSON, not base64",
        ));
    }
    let attributes = cloudevents::event::SpecVersion::V10.attribute_names();
    for name in object.keys() {
        if name != "data" && !attributes.contains(&name.as_str()) && !is_attribute_name(name) {
            return Err(Error::bad_envelope(
                name.as_str(),
                "not a CloudEvents extension name (a-z, 0-9)",
            ));
        }
    }
    Event::deserialize(Value::Object(object)).map_err(|e| Error::bad_envelope("envelope", e.to_string()))
}

/// The contract every decoded event meets, whatever its origin; returns its class.
fn check_contract(event: &Event, inbound: &InboundSubject) -> Result<EventClass> {
    let class = EventClass::from_str(event.ty()).map_err(|_| Error::UnknownClass {
        class: event.ty().to_owned(),
    })?;
    if inbound.class.is_empty() {
        return Err(Error::bad_envelope(
            "nats_subject",
            "has no event class after the tenant",
        ));
    }
    if inbound.class != class.as_str() {
        return Err(Error::bad_envelope(
            "type",
            format!("`{class}` differs from the subject's class `{}`", inbound.class),
        ));
    }
    match event.data() {
        None | Some(Data::Json(_)) => {}
        Some(_) => return Err(Error::bad_envelope("data", "must be JSON")),
    }
    for name in CONTRACT_EXTENSIONS {
        match event.extension(name) {
            None | Some(cloudevents::event::ExtensionValue::String(_)) => {}
            Some(_) => return Err(Error::bad_envelope(*name, "must be a string")),
        }
    }
    match event.extension("tenant") {
        Some(cloudevents::event::ExtensionValue::String(tenant)) if tenant == inbound.tenant.as_str() => {
            Ok(class)
        }
        Some(other) => Err(Error::TenantMismatch {
            subject: inbound.tenant.to_string(),
            extension: other.to_string(),
        }),
        None => Err(Error::bad_envelope(
            "tenant",
            "missing (the tenant extension is required)",
        )),
    }
}
