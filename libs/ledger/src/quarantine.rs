//! Quarantine administration: what ingest refused, read back from ATL_QUARANTINE, and a way back in.
//!
//! ```text
//! ingest (the writer) ─ rejected original + Atl-* headers ─▶ atl.quarantine.<tenant>.<reason>
//! list(tenant?, reason?, limit) ◀─ newest first, each message read raw (headers never parsed)
//! show(seq)                     ◀─ one message: reason, detail, headers, body
//! redrive(seq, body?)           ─▶ the subject it arrived on (atl.in.…), with its original headers,
//!                                  or a corrected body; ingest then judges it afresh
//! ```
//!
//! The message format is shared with ingest, which writes it: the original's headers, JetStream's
//! own `Nats-*` renamed `Atl-Orig-Nats-*` so they cannot steer the quarantine publish, and the
//! [`REASON`], [`DETAIL`], [`INBOUND_SUBJECT`] and [`INBOUND_SEQ`] headers. Publishing and receipts
//! stay in ingest's pipeline; this module only reads and republishes, so the `quarantine` tool needs
//! nothing of ingest.
//!
//! What the body holds (secrets never stay in it, DESIGN §5): an I-JSON body, scrubbed like the event
//! it would have been; a body that is not I-JSON (it did not parse, held a duplicate key, or had bytes
//! after the value), only its pattern-scrubbed text (lossy UTF-8), with the original's digest and size
//! in [`BODY_DIGEST`] and [`BODY_SIZE`]. Such a body has no structure to find a secret by, and a parser
//! may read it differently from ingest (the first of two duplicate keys), so no structural scrub of it
//! could be trusted. Ingest's own receipt in the ledger holds the same digest and size.

use async_nats::HeaderMap;
use async_nats::header::{HeaderName, HeaderValue};
use async_nats::jetstream;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolledger_wire::streams::QUARANTINE;

use crate::read::{StoredMessage, stored_message};
use crate::{Error, Result};

/// The header naming the machine-readable reason.
pub const REASON: &str = "Atl-Quarantine-Reason";
/// The header saying what exactly was wrong.
pub const DETAIL: &str = "Atl-Quarantine-Detail";
/// The header naming the subject the original arrived on.
pub const INBOUND_SUBJECT: &str = "Atl-Inbound-Subject";
/// The header with the original's ATL_INBOUND sequence.
pub const INBOUND_SEQ: &str = "Atl-Inbound-Seq";
/// The header with a poison message's raw header block, base64.
pub const ORIGINAL_HEADERS_BASE64: &str = "Atl-Orig-Headers-Base64";
/// The prefix of the original's `Nats-*` headers, renamed.
pub const ORIGINAL_PREFIX: &str = "Atl-Orig-";
/// The header with `sha256:<hex>` of an original body that was not kept: it was not I-JSON, and the
/// stored body is its pattern-scrubbed text.
pub const BODY_DIGEST: &str = "Atl-Quarantine-Body-Digest";
/// The header with the size in bytes of an original body that was not kept.
pub const BODY_SIZE: &str = "Atl-Quarantine-Body-Size";

/// How much of a rejection's detail goes into headers and receipts.
const MAX_DETAIL: usize = 2000;

/// `text` made a valid header value: single-line (header values cannot hold CR or LF) and at most
/// 2000 bytes.
pub fn header_safe(text: &str) -> String {
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

/// Sets header `name` to `value` made [`header_safe`]; a name that is not a valid header name is
/// skipped (it cannot be stored, and nothing depends on it).
pub fn insert_header(headers: &mut HeaderMap, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        name.parse::<HeaderName>(),
        header_safe(value).parse::<HeaderValue>(),
    ) {
        headers.insert(name, value);
    }
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
    /// Its headers as stored (the original's, plus the `Atl-*` ones), in stored order.
    pub headers: Vec<(String, String)>,
    /// The body as stored: the original, its scrubbed form, or (see [`Self::original_digest`]) its
    /// pattern-scrubbed text.
    #[serde(skip)]
    pub payload: Bytes,
    /// The original body's size in bytes.
    pub size: usize,
    /// `sha256:<hex>` of the original body when only its pattern-scrubbed text was kept (it was not
    /// I-JSON); `None` when the stored body is the original or its structurally scrubbed form.
    pub original_digest: Option<String>,
}

impl QuarantineRecord {
    fn from_stored(stored: StoredMessage) -> Self {
        let headers = stored.header_lines();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let original_digest = Some(header(BODY_DIGEST)).filter(|d| !d.is_empty());
        Self {
            seq: stored.seq,
            time: stored.time,
            reason: header(REASON),
            detail: header(DETAIL),
            inbound_subject: header(INBOUND_SUBJECT),
            subject: stored.subject,
            size: header(BODY_SIZE).parse().unwrap_or(stored.payload.len()),
            original_digest,
            payload: stored.payload,
            headers,
        }
    }

    /// Whether the stored body is byte for byte the original's: false only when the original was not
    /// I-JSON and its text lost a secret (or invalid UTF-8) to scrubbing.
    pub fn holds_original_body(&self) -> bool {
        self.original_digest.as_ref().is_none_or(|digest| {
            let stored = toolledger_wire::entry::hex(&Sha256::digest(&self.payload));
            digest.strip_prefix("sha256:") == Some(stored.as_str())
        })
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
            let restored = name.strip_prefix(ORIGINAL_PREFIX).unwrap_or(name);
            insert_header(&mut headers, restored, value);
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
    let mut stream = js
        .get_stream(QUARANTINE)
        .await
        .map_err(|e| Error::stream(QUARANTINE, "opening", e))?;
    let state = &stream
        .info()
        .await
        .map_err(|e| Error::stream(QUARANTINE, "reading its state", e))?
        .state;
    let (first, last) = (state.first_sequence.max(1), state.last_sequence);
    let mut out = Vec::new();
    let mut seq = last;
    while seq >= first && out.len() < limit {
        if let Some(stored) = stored_message(js, QUARANTINE, seq).await? {
            let record = QuarantineRecord::from_stored(stored);
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

/// One quarantined message; `None` when there is none at `seq`.
pub async fn show(js: &jetstream::Context, seq: u64) -> Result<Option<QuarantineRecord>> {
    Ok(stored_message(js, QUARANTINE, seq)
        .await?
        .map(QuarantineRecord::from_stored))
}

/// Republishes a quarantined original to the subject it arrived on, with its original headers; or a
/// corrected `body` — a structured CloudEvent or an agenttool-event envelope, JSON — in place of
/// the original, without the original's CloudEvents headers. Ingest then judges it afresh. Returns
/// the new ATL_INBOUND sequence.
pub async fn redrive(js: &jetstream::Context, seq: u64, body: Option<Bytes>) -> Result<u64> {
    let record = show(js, seq).await?.ok_or(Error::NotQuarantined { seq })?;
    if body.is_none() && !record.holds_original_body() {
        return Err(Error::Redrive {
            seq,
            reason: "only the scrubbed text of the original body was kept (it was not I-JSON); \
                     redrive it with a corrected body"
                .to_owned(),
            source: None,
        });
    }
    if record.inbound_subject.is_empty() {
        return Err(Error::Redrive {
            seq,
            reason: "the record names no inbound subject".to_owned(),
            source: None,
        });
    }
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
            insert_header(&mut kept, "content-type", "application/cloudevents+json");
        }
        headers = kept;
    }
    let failed = |source: crate::BoxError| Error::Redrive {
        seq,
        reason: format!("publishing to {}", record.inbound_subject),
        source: Some(source),
    };
    let ack = js
        .publish_with_headers(
            record.inbound_subject.clone(),
            headers,
            body.unwrap_or_else(|| record.payload.clone()),
        )
        .await
        .map_err(|e| failed(e.into()))?
        .await
        .map_err(|e| failed(e.into()))?;
    Ok(ack.sequence)
}
