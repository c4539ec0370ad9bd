//! The producer side, as `toolledger emit` uses it: read events from files, put them on the wire,
//! publish them to ATL_INBOUND and count the acks.
//!
//! ```text
//! file (JSON value, JSON array, or NDJSON) ─▶ read_events ─▶ prepare (per event)
//!   structured CloudEvent ─▶ encode in --mode binary | structured
//!   agenttool-event       ─▶ sent as-is, a plain JSON body (its trace_refs and extra fields survive)
//!   ─▶ subject atl.in.<tenant>.<class>, Nats-Msg-Id = digest(tenant, source, id) ─▶ publish_all ─▶ acks
//! ```

use std::future::IntoFuture;
use std::str::FromStr;

use async_nats::HeaderMap;
use async_nats::header::{HeaderValue, NATS_MESSAGE_ID};
use async_nats::jetstream;
use bytes::Bytes;
use serde_json::Value;
use sha2::Digest;
use toolledger_schemas::EventClass;

use crate::binding::{Mode, encode};
use crate::decode::structured_event;
use crate::entry::hex;
use crate::envelope::{is_agenttool_event, map_agenttool_event};
use crate::event::ExtensionValue;
use crate::subject::{Tenant, inbound_subject};
use crate::{Error, Result, ijson};

/// Publishes awaiting their acks at once: enough to keep a link busy, bounded so a large file does not
/// hold every message in memory.
const MAX_IN_FLIGHT: usize = 256;
/// How long one publish or its ack may take. The client's own timeouts do not cover every path: an
/// ack caught by a server crash was seen never to resolve, which would hang a producer for good.
const ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `Nats-Msg-Id` for an event: hex SHA-256 over the length-prefixed tenant, source and id, the same
/// whatever its encoding. ATL_INBOUND does not dedupe on it (any tenant could send another's id;
/// see `streams::INBOUND_SOURCE`): ingest drops a repeated event by its identity. It names the event
/// for [`publish_all`]'s own repeats and for servers and tools downstream.
pub fn msg_id(tenant: &Tenant, source: &str, id: &str) -> String {
    let mut hasher = sha2::Sha256::new();
    hasher.update(b"toolledger.msg-id.v1");
    for field in [tenant.as_str(), source, id] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    hex(&hasher.finalize())
}

/// One event from a file, with where it came from (`events.ndjson:3`).
#[derive(Debug)]
pub struct SourcedEvent {
    /// File and line or index.
    pub location: String,
    /// The parsed event or why it could not be read.
    pub value: Result<Value>,
}

/// Reads a file's events: one JSON value, a JSON array of them, or NDJSON (one per line).
pub fn read_events(name: &str, bytes: &[u8]) -> Vec<SourcedEvent> {
    let whole = ijson::parse(bytes);
    let lines: Vec<(usize, &[u8])> = bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, line)| line.iter().any(|b| !b.is_ascii_whitespace()))
        .collect();
    match whole {
        Ok(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| SourcedEvent {
                location: format!("{name}[{i}]"),
                value: Ok(v),
            })
            .collect(),
        Ok(value) => vec![SourcedEvent {
            location: name.to_owned(),
            value: Ok(value),
        }],
        Err(error) if lines.len() <= 1 => vec![SourcedEvent {
            location: name.to_owned(),
            value: Err(error.into()),
        }],
        Err(_) => lines
            .into_iter()
            .map(|(n, line)| SourcedEvent {
                location: format!("{name}:{}", n + 1),
                value: ijson::parse(line).map_err(Error::from),
            })
            .collect(),
    }
}

/// An event ready to publish.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// `atl.in.<tenant>.<class>`.
    pub subject: String,
    /// CloudEvents headers (binary mode), content type (structured) and `Nats-Msg-Id`.
    pub headers: HeaderMap,
    /// The body.
    pub payload: Bytes,
    /// The `Nats-Msg-Id`.
    pub msg_id: String,
}

impl Outgoing {
    /// The same message without its `Nats-Msg-Id`, so JetStream's duplicate window does not catch
    /// it: how a producer that lost its ids, or a test of ingest's own duplicate detection, sends.
    pub fn without_msg_id(mut self) -> Self {
        let mut headers = HeaderMap::new();
        for (name, values) in self.headers.iter() {
            if *name != NATS_MESSAGE_ID {
                for value in values {
                    headers.append(name.clone(), value.clone());
                }
            }
        }
        self.headers = headers;
        self
    }
}

/// Prepares one event. `tenant` is required for agenttool-event envelopes (they name none) and, for a
/// CloudEvent without a `tenant` extension, is added as one; a CloudEvent whose extension names
/// another tenant is refused.
pub fn prepare(value: Value, tenant: Option<&Tenant>, mode: Mode) -> Result<Outgoing> {
    let Value::Object(object) = value else {
        return Err(Error::bad_envelope("body", "an event is a JSON object"));
    };
    let (tenant, class, source, id, headers, payload) = if is_agenttool_event(&object) {
        let tenant = tenant.cloned().ok_or_else(|| {
            Error::bad_envelope("tenant", "an agenttool-event names no tenant; pass --tenant")
        })?;
        let payload = serde_json::to_vec(&object).map_err(|e| Error::Encode {
            reason: e.to_string(),
        })?;
        let mapped = map_agenttool_event(object, &tenant)?;
        let event = mapped.event;
        let class = class_of(event.ty())?;
        (
            tenant,
            class,
            event.source().to_owned(),
            event.id().to_owned(),
            HeaderMap::new(),
            Bytes::from(payload),
        )
    } else {
        let mut event = structured_event(Value::Object(object))?;
        let tenant = match (event.extension("tenant"), tenant) {
            (Some(ExtensionValue::String(own)), Some(given)) if own != given.as_str() => {
                return Err(Error::TenantMismatch {
                    subject: given.to_string(),
                    extension: own.clone(),
                });
            }
            (Some(ExtensionValue::String(own)), _) => Tenant::parse(own)?,
            (Some(_), _) => return Err(Error::bad_envelope("tenant", "must be a string")),
            (None, Some(given)) => {
                event.set_extension("tenant", given.as_str());
                given.clone()
            }
            (None, None) => {
                return Err(Error::bad_envelope(
                    "tenant",
                    "missing; set the extension or pass --tenant",
                ));
            }
        };
        let class = class_of(event.ty())?;
        let (headers, payload) = encode(&event, mode)?;
        (
            tenant,
            class,
            event.source().to_owned(),
            event.id().to_owned(),
            headers,
            payload,
        )
    };
    let msg_id = msg_id(&tenant, &source, &id);
    let mut headers = headers;
    let value: HeaderValue = msg_id.parse().map_err(|_| Error::Encode {
        reason: "message id".to_owned(),
    })?;
    headers.insert(NATS_MESSAGE_ID, value);
    Ok(Outgoing {
        subject: inbound_subject(&tenant, class),
        headers,
        payload,
        msg_id,
    })
}

/// Prepares every event of `events` — structured CloudEvents or agenttool-event envelopes, each
/// naming its own tenant — in `mode`, each named `event <index>` for the publish report.
pub fn prepare_all(events: &[Value], mode: Mode) -> Result<Vec<(String, Outgoing)>> {
    events
        .iter()
        .enumerate()
        .map(|(i, event)| Ok((format!("event {i}"), prepare(event.clone(), None, mode)?)))
        .collect()
}

fn class_of(ty: &str) -> Result<EventClass> {
    EventClass::from_str(ty).map_err(|_| Error::UnknownClass { class: ty.to_owned() })
}

/// What publishing a batch came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Stored by the stream.
    pub published: usize,
    /// Repeats of an event earlier in the same call (same `Nats-Msg-Id`), not sent again. An event
    /// sent by an earlier call is sent again; ingest drops it by its identity.
    pub duplicates: usize,
    /// `(location, reason)` for each event that was not acknowledged.
    pub failed: Vec<(String, String)>,
}

/// Publishes every `(location, message)` — a repeat of an earlier one in `messages` is counted,
/// not sent — and waits for each ack.
pub async fn publish_all(js: &jetstream::Context, messages: Vec<(String, Outgoing)>) -> PublishReport {
    let mut report = PublishReport::default();
    let mut in_flight = Vec::with_capacity(MAX_IN_FLIGHT);
    let mut sent = std::collections::HashSet::new();
    for (location, message) in messages {
        if !sent.insert(message.msg_id.clone()) {
            report.duplicates += 1;
            continue;
        }
        let publish = js.publish_with_headers(message.subject, message.headers, message.payload);
        match tokio::time::timeout(ACK_TIMEOUT, publish).await {
            Ok(Ok(ack)) => in_flight.push((location, ack)),
            Ok(Err(error)) => report.failed.push((location, error.to_string())),
            Err(_) => report.failed.push((location, "publish timed out".to_owned())),
        }
        if in_flight.len() >= MAX_IN_FLIGHT {
            drain(&mut in_flight, &mut report).await;
        }
    }
    drain(&mut in_flight, &mut report).await;
    report
}

async fn drain(
    in_flight: &mut Vec<(String, jetstream::context::PublishAckFuture)>,
    report: &mut PublishReport,
) {
    for (location, ack) in in_flight.drain(..) {
        match tokio::time::timeout(ACK_TIMEOUT, ack.into_future()).await {
            // A server that still dedupes (a contract before `init` switched it off) says so.
            Ok(Ok(ack)) if ack.duplicate => report.duplicates += 1,
            Ok(Ok(_)) => report.published += 1,
            Ok(Err(error)) => report.failed.push((location, error.to_string())),
            Err(_) => report.failed.push((location, "no publish ack".to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_id_is_stable_and_unambiguous() {
        let t = Tenant::parse("acme").unwrap();
        assert_eq!(msg_id(&t, "src", "1"), msg_id(&t, "src", "1"));
        assert_ne!(msg_id(&t, "src", "1"), msg_id(&t, "src1", ""));
        assert_eq!(msg_id(&t, "src", "1").len(), 64);
    }

    #[test]
    fn reads_value_array_and_ndjson() {
        assert_eq!(read_events("a", b"{\"x\":1}").len(), 1);
        assert_eq!(read_events("a", b"[{\"x\":1},{\"x\":2}]").len(), 2);
        let events = read_events("f", b"{\"x\":1}\n\n{\"x\":2, \"x\":3}\n{\"y\":1}\n");
        assert_eq!(events.len(), 3);
        assert_eq!(events[1].location, "f:3");
        assert!(matches!(events[1].value, Err(Error::NotIJson { .. })));
    }
}
