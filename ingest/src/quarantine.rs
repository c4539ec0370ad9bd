//! Rejections: the original to ATL_QUARANTINE, a receipt entry to the ledger.
//!
//! A rejected message is republished to `atl.quarantine.<tenant>.<reason>` with its payload and
//! headers as `pipeline::reject` keeps them (scrubbed; a body that is not I-JSON reduced to
//! its pattern-scrubbed text, with the original's digest and size in `Atl-Quarantine-Body-Digest` and
//! `Atl-Quarantine-Body-Size`; JetStream's own `Nats-*` headers renamed `Atl-Orig-Nats-*` so they
//! cannot steer the quarantine publish) plus the reason, a detail and where it came from. Its receipt, a
//! `toolledger.quarantine.recorded` entry, makes the rejection tamper-evident. Both are
//! deterministic functions of the inbound message (the receipt's time is the message's publish
//! time, the quarantine publish carries `Nats-Msg-Id: quarantine-<inbound seq>`), so a redelivery
//! after a crash yields the same receipt, which duplicate detection then drops.
//!
//! The message format (the `Atl-*` headers) is shared with the `quarantine` tool, which lists, shows
//! and redrives these messages through [`toolledger_ledger::quarantine`].

use async_nats::HeaderMap;
use async_nats::header::HeaderValue;
use async_nats::jetstream;
use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolledger_ledger::quarantine::{
    DETAIL, INBOUND_SEQ, INBOUND_SUBJECT, ORIGINAL_HEADERS_BASE64, ORIGINAL_PREFIX, REASON, header_safe,
    insert_header as insert,
};
use toolledger_wire::entry::hex;
use toolledger_wire::{QuarantineReason, Tenant, subject::quarantine_subject};

use crate::{Error, Result};

pub use toolledger_wire::entry::LEDGER_SOURCE;

/// Why and whose: what a rejection needs besides the message itself.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// The machine-readable reason.
    pub reason: QuarantineReason,
    /// What exactly was wrong, for the producer.
    pub detail: String,
    /// The message's tenant, or `_unroutable` when it had none or an unsafe one.
    pub tenant: Tenant,
    /// The rejected event's id, when it parsed that far.
    pub event_id: Option<String>,
}

/// An inbound message as quarantine needs it.
#[derive(Debug, Clone)]
pub struct Original {
    /// The subject it arrived on.
    pub subject: String,
    /// Its headers, if any could be parsed.
    pub headers: Option<HeaderMap>,
    /// The raw header block of a message whose headers could not be parsed (a poison message).
    pub raw_headers: Option<Bytes>,
    /// Its raw bytes.
    pub payload: Bytes,
    /// Its ATL_INBOUND sequence.
    pub inbound_seq: u64,
    /// When the server stored it in ATL_INBOUND.
    pub published: DateTime<Utc>,
}

/// Where a quarantined original landed.
#[derive(Debug, Clone)]
pub struct Quarantined {
    /// The quarantine subject.
    pub subject: String,
    /// Its sequence in ATL_QUARANTINE.
    pub seq: u64,
}

/// Publishes the original to ATL_QUARANTINE and waits for the ack.
pub async fn publish(
    js: &jetstream::Context,
    original: &Original,
    rejection: &Rejection,
) -> Result<Quarantined> {
    let subject = quarantine_subject(&rejection.tenant, rejection.reason);
    let mut headers = HeaderMap::new();
    if let Some(theirs) = &original.headers {
        for (name, values) in theirs.iter() {
            let name = name.to_string();
            let renamed = if name.to_ascii_lowercase().starts_with("nats-") {
                format!("{ORIGINAL_PREFIX}{name}")
            } else {
                name
            };
            for value in values {
                insert(&mut headers, &renamed, value.as_str());
            }
        }
    }
    if let Some(raw) = &original.raw_headers {
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(raw);
        if let Ok(value) = encoded.parse::<HeaderValue>() {
            headers.insert(ORIGINAL_HEADERS_BASE64, value);
        }
    }
    insert(&mut headers, REASON, rejection.reason.as_str());
    insert(&mut headers, DETAIL, &rejection.detail);
    insert(&mut headers, INBOUND_SUBJECT, &original.subject);
    insert(&mut headers, INBOUND_SEQ, &original.inbound_seq.to_string());
    insert(
        &mut headers,
        "Nats-Msg-Id",
        &format!("quarantine-{}", original.inbound_seq),
    );
    let failed = |e: &dyn std::fmt::Display| Error::Quarantine {
        inbound_seq: original.inbound_seq,
        reason: e.to_string(),
    };
    let ack = js
        .publish_with_headers(subject.clone(), headers, original.payload.clone())
        .await
        .map_err(|e| failed(&e))?
        .await
        .map_err(|e| failed(&e))?;
    Ok(Quarantined {
        subject,
        seq: ack.sequence,
    })
}

/// The receipt event (a structured CloudEvent) for a quarantined message.
pub fn receipt_event(original: &Original, rejection: &Rejection, quarantined: &Quarantined) -> Value {
    let digest = hex(&Sha256::digest(&original.payload));
    let receipt_id = format!("quarantine-{}-{}", original.inbound_seq, &digest[..16]);
    let time = original.published.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    let mut data = json!({
        "receipt_id": receipt_id,
        "digest": format!("sha256:{digest}"),
        "size_bytes": original.payload.len(),
        "tenant": rejection.tenant.as_str(),
        "reason": rejection.reason.as_str(),
        "detail": header_safe(&rejection.detail),
        "quarantine_subject": quarantined.subject,
        "quarantine_seq": quarantined.seq,
        "inbound_subject": original.subject,
        "quarantined_at": time,
    });
    if let Some(id) = &rejection.event_id {
        data["event_id"] = Value::String(id.clone());
    }
    json!({
        "specversion": "1.0",
        "id": receipt_id,
        "source": LEDGER_SOURCE,
        "type": "toolledger.quarantine.recorded",
        "subject": receipt_id,
        "time": time,
        "datacontenttype": "application/json",
        "tenant": rejection.tenant.as_str(),
        "data": data,
    })
}
