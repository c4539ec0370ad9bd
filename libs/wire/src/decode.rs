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
//!          ─▶ ids: no control character, at most 1 KiB (crate::id) ───────────── bad_id
//! ```
//!
//! The subject-class rule is what keeps producers from forging the ledger's own `toolledger.*`
//! classes: their credentials reach only `atl.in.<tenant>.tool.>`, and an event may not claim a class
//! other than the one its subject names. The decoder cannot see credentials, so the rule it can
//! enforce is that equality; NATS permissions do the rest.

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolledger_schemas::EventClass;

use crate::binding::{Encoding, NatsMessage, is_json_content_type};
use crate::envelope::{is_agenttool_event, map_agenttool_event};
use crate::event::{Event, ExtensionValue};
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
        self.event.data()
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
        Encoding::Structured => (
            Origin::Structured,
            structured_event(ijson::parse(payload)?)?,
            None,
            None,
        ),
        Encoding::Binary => (Origin::Binary, binary_event(message)?, None, None),
        Encoding::Unknown => {
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
    if let Some((pointer, problem)) = crate::id::first_bad_id(&event) {
        return Err(Error::BadId { pointer, problem });
    }
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
    let payload = message.payload();
    let mut event = message.into_binary_event()?;
    if event
        .datacontenttype
        .as_deref()
        .is_some_and(|ct| !is_json_content_type(ct))
    {
        return Err(Error::bad_envelope(
            "datacontenttype",
            "must name JSON (`application/json`, `text/json` or `…+json`): data must be JSON",
        ));
    }
    if !payload.is_empty() {
        event.data = Some(ijson::parse(payload).map_err(|e| e.under("/data"))?);
    }
    Ok(event)
}

/// A structured-mode event from its (I-JSON) body.
pub fn structured_event(body: Value) -> Result<Event> {
    Event::from_json(body)
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
    for name in CONTRACT_EXTENSIONS {
        match event.extension(name) {
            None | Some(ExtensionValue::String(_)) => {}
            Some(_) => return Err(Error::bad_envelope(*name, "must be a string")),
        }
    }
    match event.extension("tenant") {
        Some(ExtensionValue::String(tenant)) if tenant == inbound.tenant.as_str() => Ok(class),
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
