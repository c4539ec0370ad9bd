//! Rejections: the original to ATL_QUARANTINE, a receipt entry to the ledger.
//!
//! A rejected message is republished to `atl.quarantine.<tenant>.<reason>` with its original
//! payload and headers (JetStream's own `Nats-*` headers renamed `Atl-Orig-Nats-*` so they cannot
//! steer the quarantine publish) plus the reason, a detail and where it came from. Its receipt, a
//! `toolledger.quarantine.recorded` entry, makes the rejection tamper-evident. Both are
//! deterministic functions of the inbound message (the receipt's time is the message's publish
//! time, the quarantine publish carries `Nats-Msg-Id: quarantine-<inbound seq>`), so a redelivery
//! after a crash yields the same receipt, which duplicate detection then drops.

use async_nats::HeaderMap;
use async_nats::header::{HeaderName, HeaderValue};
use async_nats::jetstream;
use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolledger_wire::entry::hex;
use toolledger_wire::{QuarantineReason, Tenant, subject::quarantine_subject};

use crate::{Error, Result};

/// The source of every event the ledger writes itself.
pub const LEDGER_SOURCE: &str = "toolledger://ingest";
/// How much of a rejection's detail goes into headers and receipts.
const MAX_DETAIL: usize = 2000;

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

/// Keeps header values single-line and bounded; header values cannot hold CR or LF.
fn header_safe(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > MAX_DETAIL {
        let mut end = MAX_DETAIL;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

fn insert(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        name.parse::<HeaderName>(),
        header_safe(value).parse::<HeaderValue>(),
    ) {
        headers.insert(name, value);
    }
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
                format!("Atl-Orig-{name}")
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
            headers.insert("Atl-Orig-Headers-Base64", value);
        }
    }
    insert(&mut headers, "Atl-Quarantine-Reason", rejection.reason.as_str());
    insert(&mut headers, "Atl-Quarantine-Detail", &rejection.detail);
    insert(&mut headers, "Atl-Inbound-Subject", &original.subject);
    insert(&mut headers, "Atl-Inbound-Seq", &original.inbound_seq.to_string());
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

/// A quarantined message as operators see it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QuarantineRecord {
    /// Its ATL_QUARANTINE sequence.
    pub seq: u64,
    /// When it was quarantined.
    pub time: DateTime<Utc>,
    /// `atl.quarantine.<tenant>.<reason>`.
    pub subject: String,
    /// The reason token.
    pub reason: String,
    /// What was wrong.
    pub detail: String,
    /// The subject it arrived on.
    pub inbound_subject: String,
    /// Its headers as stored (the original's, plus the `Atl-*` ones).
    pub headers: Vec<(String, String)>,
    /// The original body.
    #[serde(skip)]
    pub payload: Bytes,
    /// The body's size in bytes.
    pub size: usize,
}

impl QuarantineRecord {
    fn from_raw(raw: crate::poison::RawStored) -> Self {
        let headers: Vec<(String, String)> = String::from_utf8_lossy(&raw.headers)
            .split("\r\n")
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
            .collect();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        Self {
            seq: raw.seq,
            time: raw.time,
            reason: header("Atl-Quarantine-Reason"),
            detail: header("Atl-Quarantine-Detail"),
            inbound_subject: header("Atl-Inbound-Subject"),
            subject: raw.subject,
            size: raw.payload.len(),
            payload: raw.payload,
            headers,
        }
    }

    /// The headers to republish with: the original's, `Atl-Orig-Nats-*` restored to `Nats-*`
    /// except the producer's message id (a redrive is a new publish), the quarantine's own dropped.
    pub fn original_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if lower.starts_with("atl-orig-nats-msg-id")
                || (lower.starts_with("atl-") && !lower.starts_with("atl-orig-"))
            {
                continue;
            }
            let restored = name.strip_prefix("Atl-Orig-").unwrap_or(name);
            insert(&mut headers, restored, value);
        }
        headers
    }
}

/// Quarantined messages, newest first, at most `limit`, optionally only one tenant's or reason's.
pub async fn list(
    js: &jetstream::Context,
    tenant: Option<&str>,
    reason: Option<&str>,
    limit: usize,
) -> Result<Vec<QuarantineRecord>> {
    use toolledger_wire::streams::QUARANTINE;
    let stream_error = |e: &dyn std::fmt::Display| Error::Stream {
        stream: QUARANTINE.to_owned(),
        reason: e.to_string(),
    };
    let mut stream = js.get_stream(QUARANTINE).await.map_err(|e| stream_error(&e))?;
    let state = &stream.info().await.map_err(|e| stream_error(&e))?.state;
    let (first, last) = (state.first_sequence.max(1), state.last_sequence);
    let mut out = Vec::new();
    let mut seq = last;
    while seq >= first && out.len() < limit {
        if let Some(raw) = crate::poison::get_raw(js, QUARANTINE, seq).await? {
            let record = QuarantineRecord::from_raw(raw);
            let mut tokens = record.subject.split('.').skip(2);
            let matches_tenant = tenant.is_none_or(|t| tokens.next() == Some(t));
            let matches_reason = reason.is_none_or(|r| record.reason == r);
            if matches_tenant && matches_reason {
                out.push(record);
            }
        }
        seq -= 1;
    }
    Ok(out)
}

/// One quarantined message.
pub async fn show(js: &jetstream::Context, seq: u64) -> Result<Option<QuarantineRecord>> {
    Ok(
        crate::poison::get_raw(js, toolledger_wire::streams::QUARANTINE, seq)
            .await?
            .map(QuarantineRecord::from_raw),
    )
}

/// Republishes a quarantined original to the subject it arrived on, with its original headers; or a
/// corrected `body` — a structured CloudEvent or an agenttool-event envelope, JSON — in place of
/// the original, without the original's CloudEvents headers. Ingest then judges it afresh. Returns
/// the new ATL_INBOUND sequence.
pub async fn redrive(js: &jetstream::Context, seq: u64, body: Option<Bytes>) -> Result<u64> {
    let record = show(js, seq).await?.ok_or_else(|| Error::Quarantine {
        inbound_seq: seq,
        reason: "no quarantined message with that sequence".to_owned(),
    })?;
    if record.inbound_subject.is_empty() {
        return Err(Error::Quarantine {
            inbound_seq: seq,
            reason: "the record names no inbound subject".to_owned(),
        });
    }
    let failed = |e: &dyn std::fmt::Display| Error::Quarantine {
        inbound_seq: seq,
        reason: format!("redrive: {e}"),
    };
    let mut headers = record.original_headers();
    if body.is_some() {
        let mut kept = HeaderMap::new();
        for (name, values) in headers.iter() {
            let lower = name.to_string().to_ascii_lowercase();
            if lower.starts_with("ce-") || lower == "content-type" {
                continue;
            }
            for value in values {
                kept.append(name.clone(), value.clone());
            }
        }
        let structured = body
            .as_deref()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .is_some_and(|v| v.get("specversion").is_some());
        if structured {
            insert(&mut kept, "content-type", "application/cloudevents+json");
        }
        headers = kept;
    }
    let ack = js
        .publish_with_headers(
            record.inbound_subject.clone(),
            headers,
            body.unwrap_or(record.payload),
        )
        .await
        .map_err(|e| failed(&e))?
        .await
        .map_err(|e| failed(&e))?;
    Ok(ack.sequence)
}
