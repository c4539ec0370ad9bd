//! Ledger entries (DESIGN §4): what ATL_LEDGER stores, byte for byte.
//!
//! ```json
//! { "event":  { "specversion": "1.0", "id": …, "type": …, "source": …, <extensions>, "data": {…} },
//!   "ledger": { "ingested_at": "…Z", "origin": "binary" | "structured" | "agenttool-event" | "ledger",
//!               "content_digest"?: "sha256:…", "payload_refs": [ … ], "scrubbed_paths": [ … ],
//!               "trace_refs"?: [ … ], "envelope_fields"?: { … } } }
//! ```
//!
//! serialized with RFC 8785 ([`crate::jcs`]). The message payload is exactly those bytes and the
//! Merkle leaf is `SHA-256(0x00 || bytes)`. The event is the CloudEvents JSON format of the event
//! (times normalized to UTC, as the CloudEvents SDK holds them); `ledger` is the ledger's own
//! metadata, left out of [`LedgerEntry::content_digest`] so a duplicate is recognised whatever time
//! it was ingested.

use chrono::{DateTime, SecondsFormat, Utc};
use cloudevents::Event;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::Digest;
use toolledger_merkle::Hash;

use crate::decode::{DecodedEvent, Origin};
use crate::{Error, Result, ijson, jcs};

/// A payload moved to the object store, as the entry references it (DESIGN §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadRef {
    /// JSON Pointer into the event of the field that was moved (`/data/result/content`).
    pub path: String,
    /// The blob's location-free id.
    pub blob_id: String,
    /// `sha256:<hex>` of nonce || content.
    pub commitment: String,
    /// Content size in bytes.
    pub size: u64,
    /// The content's media type.
    pub content_type: String,
}

/// The ledger's own metadata about an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerMetadata {
    /// When ingest accepted the event.
    #[serde(serialize_with = "write_time", deserialize_with = "read_time")]
    pub ingested_at: DateTime<Utc>,
    /// How it arrived.
    pub origin: Origin,
    /// `sha256:<hex>` of the scrubbed event before payloads were offloaded (see
    /// [`LedgerEntry::content_digest`]): what duplicate detection compares, recorded so ingest can
    /// rebuild its identity index from the ledger after offloading changed the stored event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_digest: Option<String>,
    /// Payloads moved to the object store.
    #[serde(default)]
    pub payload_refs: Vec<PayloadRef>,
    /// JSON Pointers of the values replaced by `{"$scrubbed": …}`.
    #[serde(default)]
    pub scrubbed_paths: Vec<String>,
    /// An agenttool-event envelope's whole `trace_refs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_refs: Option<Vec<Value>>,
    /// An agenttool-event envelope's fields with no CloudEvents counterpart (`schema_version`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_fields: Option<Map<String, Value>>,
}

fn write_time<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

fn read_time<'de, D: Deserializer<'de>>(deserializer: D) -> std::result::Result<DateTime<Utc>, D::Error> {
    let text = String::deserialize(deserializer)?;
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(serde::de::Error::custom)
}

/// One ledger entry: the event and the ledger's metadata about it.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerEntry {
    /// The CloudEvent, data as JSON.
    pub event: Event,
    /// The ledger's metadata.
    pub ledger: LedgerMetadata,
}

impl LedgerEntry {
    /// The entry for a decoded event, ingested at `ingested_at`, with no payload refs or scrubbed paths yet.
    pub fn new(decoded: DecodedEvent, ingested_at: DateTime<Utc>) -> Self {
        Self {
            ledger: LedgerMetadata {
                ingested_at,
                origin: decoded.origin,
                content_digest: None,
                payload_refs: Vec::new(),
                scrubbed_paths: Vec::new(),
                trace_refs: decoded.trace_refs,
                envelope_fields: decoded.envelope_fields,
            },
            event: decoded.event,
        }
    }

    /// The entry ingest would append for a structured CloudEvent (JSON with `tenant` and `type`) that
    /// needs no scrubbing or offloading, taken in at its own `time` (else `fallback_time`): for bulk
    /// loaders, benchmarks and tests that fill a ledger without running ingest.
    pub fn for_structured_event(event: &Value, fallback_time: DateTime<Utc>) -> Result<Self> {
        let field = |name: &str| {
            event[name]
                .as_str()
                .ok_or_else(|| Error::bad_envelope(name, "a structured event needs it as a string"))
        };
        let subject = format!("atl.in.{}.{}", field("tenant")?, field("type")?);
        let body = serde_json::to_vec(event).map_err(|e| Error::Encode {
            reason: format!("event: {e}"),
        })?;
        let decoded = crate::decode(&subject, None, &body)?;
        let ingested_at = event["time"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map_or(fallback_time, |t| t.with_timezone(&Utc));
        Ok(Self::new(decoded, ingested_at))
    }

    /// The event in the CloudEvents JSON format.
    pub fn event_json(&self) -> Result<Value> {
        serde_json::to_value(&self.event).map_err(|e| Error::Encode {
            reason: format!("event: {e}"),
        })
    }

    /// The entry as a JSON value, `{"event": …, "ledger": …}`.
    pub fn to_json(&self) -> Result<Value> {
        let ledger = serde_json::to_value(&self.ledger).map_err(|e| Error::Encode {
            reason: format!("ledger: {e}"),
        })?;
        let mut entry = Map::new();
        entry.insert("event".to_owned(), self.event_json()?);
        entry.insert("ledger".to_owned(), ledger);
        Ok(Value::Object(entry))
    }

    /// The RFC 8785 bytes: the ATL_LEDGER message payload.
    pub fn canonical_bytes(&self) -> Result<Vec<u8>> {
        Ok(jcs::to_vec(&self.to_json()?)?)
    }

    /// The Merkle leaf hash of [`Self::canonical_bytes`].
    pub fn leaf_hash(&self) -> Result<Hash> {
        Ok(toolledger_merkle::leaf_hash(&self.canonical_bytes()?))
    }

    /// SHA-256 of the event's canonical bytes, without the ledger's metadata: two arrivals of the same
    /// identity with equal digests are duplicates, with different digests a `duplicate_conflict`.
    pub fn content_digest(&self) -> Result<[u8; 32]> {
        let bytes = jcs::to_vec(&self.event_json()?)?;
        Ok(sha2::Sha256::digest(&bytes).into())
    }

    /// Sets `ledger.content_digest` and returns the digest with [`Self::canonical_bytes`],
    /// canonicalizing the event once: RFC 8785 sorts `event` before `ledger`, so the entry's bytes are
    /// `{"event":` + the event's canonical bytes (what the digest hashes) + `,"ledger":` + the
    /// metadata's + `}`.
    pub fn seal(&mut self) -> Result<([u8; 32], Vec<u8>)> {
        let event = jcs::to_vec(&self.event_json()?)?;
        let digest: [u8; 32] = sha2::Sha256::digest(&event).into();
        self.ledger.content_digest = Some(format!("sha256:{}", hex(&digest)));
        let ledger = serde_json::to_value(&self.ledger).map_err(|e| Error::Encode {
            reason: format!("ledger: {e}"),
        })?;
        let ledger = jcs::to_vec(&ledger)?;
        let mut bytes = Vec::with_capacity(event.len() + ledger.len() + 20);
        bytes.extend_from_slice(br#"{"event":"#);
        bytes.extend_from_slice(&event);
        bytes.extend_from_slice(br#","ledger":"#);
        bytes.extend_from_slice(&ledger);
        bytes.push(b'}');
        Ok((digest, bytes))
    }

    /// Reads an entry back from a ledger message payload.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let Value::Object(mut entry) = ijson::parse_canonical(bytes)? else {
            return Err(Error::bad_envelope("body", "a ledger entry is a JSON object"));
        };
        let event = entry
            .remove("event")
            .ok_or_else(|| Error::bad_envelope("event", "missing"))?;
        let ledger = entry
            .remove("ledger")
            .ok_or_else(|| Error::bad_envelope("ledger", "missing"))?;
        let event = Event::deserialize(event).map_err(|e| Error::bad_envelope("event", e.to_string()))?;
        let ledger =
            LedgerMetadata::deserialize(ledger).map_err(|e| Error::bad_envelope("ledger", e.to_string()))?;
        Ok(Self { event, ledger })
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
