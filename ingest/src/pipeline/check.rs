//! decode ▸ validate: an inbound message becomes a checked event, or the rejection that says why not.

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolledger_schemas::EventClass;
use toolledger_wire::{LedgerMetadata, QuarantineReason, Tenant};

use crate::quarantine::{Original, Rejection};
use crate::scrub::Scrubber;

/// A decoded event that passed validation: its CloudEvents JSON form (taken from the decoded event,
/// not copied), what the ledger's metadata says of it, and its identity.
pub(crate) struct Checked {
    /// The event as JSON: what scrubbing and offloading work on.
    pub(crate) json: Value,
    /// The entry's metadata so far (origin, time, envelope fields).
    pub(crate) ledger: LedgerMetadata,
    pub(crate) class: EventClass,
    pub(crate) tenant: Tenant,
    pub(crate) source: String,
    pub(crate) event_id: String,
    /// Whether scrubbing listed anything outside `data` (an attribute, or a configured path into
    /// one): only then can `json` have stopped being [`toolledger_wire::Event::into_json`]'s form
    /// of a CloudEvent, which sealing must check.
    pub(crate) attributes_scrubbed: bool,
}

impl Checked {
    /// Replaces secrets with their markers and records where (DESIGN §5): in the event, and in an
    /// agenttool-event's envelope fields, which the entry keeps beside it.
    ///
    /// The identity follows the scrubbed `source` (credentials in its userinfo are scrubbed): the
    /// identity index is rebuilt from the entries' `source`, so the identity must be computed from
    /// the same value when the entry is appended.
    pub(crate) fn scrub(&mut self, scrubber: &mut Scrubber) {
        let mut paths = scrubber.scrub_accepted(&mut self.json);
        self.attributes_scrubbed = paths
            .iter()
            .any(|path| path != "/data" && !path.starts_with("/data/"));
        if let Some(fields) = self.ledger.envelope_fields.as_mut() {
            let envelope = scrubber.scrub_envelope_fields(fields);
            if !envelope.is_empty() {
                // One order for all: the scrubber's, by reference tokens.
                paths.extend(envelope);
                paths.sort_by_cached_key(|p| crate::scrub::pointer_tokens(p));
            }
        }
        if let Some(source) = self.json.get("source").and_then(Value::as_str)
            && source != self.source
        {
            self.source = source.to_owned();
        }
        self.ledger.scrubbed_paths = paths;
    }
}

/// The tenant a rejection is filed under when the message did not decode: the subject's, if safe
/// and followed by a class. A subject with no class (`atl.in.<x>`) is read by no tenant's lane (see
/// `session::lanes`), so its receipt is `_unroutable`'s, which lives in the first partition with
/// the lane that read it, never in another tenant's partition.
pub(crate) fn tenant_of_subject(subject: &str) -> Tenant {
    toolledger_wire::subject::InboundSubject::parse(subject)
        .ok()
        .filter(|s| !s.class.is_empty())
        .map_or_else(Tenant::unroutable, |s| s.tenant)
}

/// The rejection for a decode or encode error of an event of `tenant`: its detail names where and
/// the rule, never the value ([`toolledger_wire::Error::quarantine_detail`]).
pub(crate) fn reject(tenant: &Tenant, error: &toolledger_wire::Error, event_id: Option<String>) -> Rejection {
    Rejection {
        reason: error.quarantine_reason().unwrap_or(QuarantineReason::BadEnvelope),
        detail: error.quarantine_detail(),
        tenant: tenant.clone(),
        event_id,
    }
}

/// decode ▸ validate `original`, received at `received` (the entry's `ingested_at`).
pub(crate) fn check(original: &Original, received: DateTime<Utc>) -> Result<Checked, Rejection> {
    if original.raw_headers.is_some() {
        return Err(Rejection {
            reason: QuarantineReason::PoisonMessage,
            detail: "headers the NATS client cannot parse (invalid UTF-8, or a bare CR or LF)".to_owned(),
            tenant: tenant_of_subject(&original.subject),
            event_id: None,
        });
    }
    let decoded = toolledger_wire::decode(&original.subject, original.headers.as_ref(), &original.payload)
        .map_err(|e| reject(&tenant_of_subject(&original.subject), &e, None))?;
    let event_id = decoded.event.id.clone();
    let source = decoded.event.source.clone();
    let tenant = decoded.tenant;
    let class = decoded.class;
    // The ledger's own records (access, erasure, quarantine receipts) come from the ledger alone,
    // whatever the NATS permissions let a producer publish: a forged erasure record must not be able
    // to vouch that content is gone, nor a forged access record to show in another tenant's audit.
    if class.is_ledger_own() && tenant != Tenant::system() {
        return Err(Rejection {
            reason: QuarantineReason::ReservedClass,
            detail: format!("`{class}` is the ledger's own class; only the `_system` tenant writes it"),
            tenant,
            event_id: Some(event_id),
        });
    }
    // The partition rule's record is appended by p0's writer itself, never taken from the inbox: a
    // record published there (even as `_system`) would take its identity and stand in for it.
    if class == EventClass::PartitionsRecorded {
        return Err(Rejection {
            reason: QuarantineReason::ReservedClass,
            detail: format!("`{class}` is written by ingest itself, not published"),
            tenant,
            event_id: Some(event_id),
        });
    }
    let ledger = LedgerMetadata::received(
        received,
        decoded.origin,
        decoded.trace_refs,
        decoded.envelope_fields,
    );
    let json = decoded.event.into_json();
    if let Some((pointer, key)) = json.get("data").and_then(reserved_marker) {
        return Err(Rejection {
            reason: QuarantineReason::ReservedMarker,
            detail: format!("{pointer}: a `{key}` object is the ledger's own marker; only ingest writes it"),
            tenant,
            event_id: Some(event_id),
        });
    }
    if let Err(error) = toolledger_schemas::validate_event(&json) {
        // A violation names its pointer and rule; an unknown class's text would repeat the `type`.
        let (reason, detail) = match error {
            toolledger_schemas::EventError::UnknownClass(_) => (
                QuarantineReason::UnknownClass,
                toolledger_wire::Error::UnknownClass { class: String::new() }.quarantine_detail(),
            ),
            other => (QuarantineReason::SchemaViolation, other.to_string()),
        };
        return Err(Rejection {
            reason,
            detail,
            tenant,
            event_id: Some(event_id),
        });
    }
    Ok(Checked {
        json,
        ledger,
        class,
        tenant,
        source,
        event_id,
        attributes_scrubbed: false,
    })
}

/// The JSON Pointer (under `/data`) of the first object in an event's `data` holding a marker key
/// only ingest writes (`$scrubbed`, `$payload`), and the key. Nothing is allocated unless one is
/// found.
fn reserved_marker(data: &Value) -> Option<(String, &'static str)> {
    let (mut tokens, key) = find_reserved(data)?;
    tokens.push("data".to_owned());
    tokens.reverse();
    Some((crate::scrub::to_pointer(&tokens), key))
}

/// [`reserved_marker`]'s walk: the path to the marker object, innermost segment first.
fn find_reserved(value: &Value) -> Option<(Vec<String>, &'static str)> {
    const RESERVED: [&str; 2] = [crate::scrub::SCRUBBED_KEY, toolledger_ledger::PAYLOAD_KEY];
    let (mut path, key, segment) = match value {
        Value::Object(map) => {
            if let Some(key) = RESERVED.into_iter().find(|key| map.contains_key(*key)) {
                return Some((Vec::new(), key));
            }
            map.iter()
                .find_map(|(name, child)| find_reserved(child).map(|(path, key)| (path, key, name.clone())))?
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, child)| find_reserved(child).map(|(path, key)| (path, key, i.to_string())))?,
        _ => return None,
    };
    path.push(segment);
    Some((path, key))
}
