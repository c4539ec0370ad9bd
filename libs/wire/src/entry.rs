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
//! ([`Event`]: times normalized to UTC); `ledger` is the ledger's own metadata, left out of
//! [`LedgerEntry::content_digest`] so a duplicate is recognised whatever time it was ingested.
//!
//! ```text
//! write: Event + LedgerMetadata ─▶ seal / canonical_bytes: `{"event":` event JCS `,"ledger":` … `}`
//! read:  bytes ─▶ LedgerEntry::parse (one I-JSON pass) ─▶ Event (data moved) + LedgerMetadata
//!        bytes ─▶ LedgerEntry::parse_canonical: the same pass, proving the bytes are RFC 8785
//! ```

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::Digest;
use toolledger_merkle::Hash;
use toolledger_schemas::{ClassifiedEvent, EventAttributes};

use crate::decode::{DecodedEvent, Origin};
use crate::event::{Event, format_time};
use crate::{Error, Result, ijson, jcs};

/// The `source` of every event the ledger writes itself (its own entries, origin `ledger`).
pub const LEDGER_SOURCE: &str = "toolledger://ingest";

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

impl LedgerMetadata {
    /// The metadata of an event as it arrives: what its envelope carried, no digest, payload refs or
    /// scrubbed paths yet.
    pub fn received(
        ingested_at: DateTime<Utc>,
        origin: Origin,
        trace_refs: Option<Vec<Value>>,
        envelope_fields: Option<Map<String, Value>>,
    ) -> Self {
        Self {
            ingested_at,
            origin,
            content_digest: None,
            payload_refs: Vec::new(),
            scrubbed_paths: Vec::new(),
            trace_refs,
            envelope_fields,
        }
    }
}

fn write_time<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_time(time))
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
            ledger: LedgerMetadata::received(
                ingested_at,
                decoded.origin,
                decoded.trace_refs,
                decoded.envelope_fields,
            ),
            event: decoded.event,
        }
    }

    /// The entry the ledger writes itself (a quarantine receipt, the partition rule's record): origin
    /// `ledger`, nothing scrubbed or offloaded; its event's `source` is [`LEDGER_SOURCE`].
    pub fn own(event: Event, ingested_at: DateTime<Utc>) -> Self {
        Self {
            event,
            ledger: LedgerMetadata {
                ingested_at,
                origin: Origin::Ledger,
                content_digest: None,
                payload_refs: Vec::new(),
                scrubbed_paths: Vec::new(),
                trace_refs: None,
                envelope_fields: None,
            },
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
        let ingested_at = decoded.event.time.unwrap_or(fallback_time);
        Ok(Self::new(decoded, ingested_at))
    }

    /// A copy of the event in the CloudEvents JSON format.
    pub fn event_json(&self) -> Value {
        self.event.to_json()
    }

    /// The RFC 8785 bytes: the ATL_LEDGER message payload.
    pub fn canonical_bytes(&self) -> Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(1024);
        bytes.extend_from_slice(br#"{"event":"#);
        self.event.write_canonical(&mut bytes)?;
        self.write_ledger(&mut bytes)?;
        Ok(bytes)
    }

    fn write_ledger(&self, bytes: &mut Vec<u8>) -> Result<()> {
        write_ledger(&self.ledger, bytes)
    }

    /// The Merkle leaf hash of [`Self::canonical_bytes`].
    pub fn leaf_hash(&self) -> Result<Hash> {
        Ok(toolledger_merkle::leaf_hash(&self.canonical_bytes()?))
    }

    /// SHA-256 of the event's canonical bytes, without the ledger's metadata: two arrivals of the same
    /// identity with equal digests are duplicates, with different digests a `duplicate_conflict`.
    pub fn content_digest(&self) -> Result<[u8; 32]> {
        Ok(sha2::Sha256::digest(self.event.canonical_bytes()?).into())
    }

    /// Sets `ledger.content_digest` and returns the digest with [`Self::canonical_bytes`], writing
    /// the event's canonical bytes once: the digest hashes exactly the bytes that follow `{"event":`.
    pub fn seal(&mut self) -> Result<([u8; 32], Vec<u8>)> {
        let mut bytes = Vec::with_capacity(1024);
        bytes.extend_from_slice(br#"{"event":"#);
        let start = bytes.len();
        self.event.write_canonical(&mut bytes)?;
        let digest: [u8; 32] = sha2::Sha256::digest(&bytes[start..]).into();
        self.ledger.content_digest = Some(format!("sha256:{}", hex(&digest)));
        self.write_ledger(&mut bytes)?;
        Ok((digest, bytes))
    }

    /// [`Self::seal`] for an event held in its CloudEvents JSON form, exactly as [`Event::into_json`]
    /// gives it (validation and scrubbing work on that form): sets `ledger.content_digest` and returns
    /// the digest with the entry's bytes. The bytes are those [`Self::seal`] writes for the event the
    /// form holds, because [`Event::write_canonical`] writes the members `into_json` makes, with the
    /// same RFC 8785 rules; the caller must know `event` is that form (it was taken with `into_json`,
    /// or [`Event::from_json`] accepted it and gave it back).
    pub fn seal_json(event: &Value, ledger: &mut LedgerMetadata) -> Result<([u8; 32], Vec<u8>)> {
        let mut bytes = Vec::with_capacity(1024);
        bytes.extend_from_slice(br#"{"event":"#);
        let start = bytes.len();
        jcs::write_into(&mut bytes, event)?;
        let digest: [u8; 32] = sha2::Sha256::digest(&bytes[start..]).into();
        ledger.content_digest = Some(format!("sha256:{}", hex(&digest)));
        write_ledger(ledger, &mut bytes)?;
        Ok((digest, bytes))
    }

    /// [`Self::content_digest`] for an event held in its CloudEvents JSON form (as for
    /// [`Self::seal_json`]).
    pub fn content_digest_json(event: &Value) -> Result<[u8; 32]> {
        Ok(sha2::Sha256::digest(jcs::to_vec(event)?).into())
    }

    /// Files the entry the way every reader of the ledger does: class, decoded data, session and
    /// invocation ([`ClassifiedEvent`]), read from the typed attributes without a JSON copy.
    pub fn classify(&self) -> ClassifiedEvent {
        let event = &self.event;
        ClassifiedEvent::classify(
            EventAttributes {
                ty: Some(event.ty()),
                subject: event.subject(),
                sessionid: event.extension_str("sessionid"),
                invocationid: event.extension_str("invocationid"),
            },
            event.data().unwrap_or(&Value::Null),
        )
    }

    /// Reads an entry back from a ledger message payload, in one pass over the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        Self::from_value(ijson::parse_canonical(bytes)?)
    }

    /// [`Self::parse`] that also proves the bytes are the RFC 8785 form of the entry they hold (the
    /// check rides on the same pass): an entry re-spaced or re-ordered after it was written fails
    /// with a `not_ijson` error whose problem is [`ijson::JsonProblem::NotCanonical`].
    pub fn parse_canonical(bytes: &[u8]) -> Result<Self> {
        Self::from_value(ijson::parse_checked_canonical(bytes)?)
    }

    /// Proves `bytes` are the RFC 8785 form of a ledger entry and reads what a verifier needs of it
    /// (its class, tenant and metadata) without building the event: a validating scan that keeps the
    /// entry's outline as it goes (`ijson::EntryOutline`), then serde over the `ledger` member's
    /// bytes only. It fails where [`Self::parse_canonical`] does on form (the same error) and on the
    /// entry's outline: the entry and its `event` objects, `event` and `ledger` present, the event's
    /// `specversion` `1.0` and its `id`, `source` and `type` non-empty strings, `ledger` the metadata.
    /// It reads less than the typed parse: an entry whose outline holds may still carry an attribute
    /// the typed event refuses (a bad `time`, `data_base64`); a caller that must agree with the parse
    /// falls back to it when this fails for anything but form.
    pub fn scan_canonical(bytes: &[u8]) -> Result<ScannedEntry<'_>> {
        let outline = ijson::scan_checked_canonical_entry(bytes)?;
        // Canonical bytes have no whitespace, so a value's first byte says what it is. Types that
        // are not what the outline expects are `body` errors, as when serde read the outline.
        if bytes.first() != Some(&b'{') {
            return Err(Error::bad_envelope("body", "a ledger entry is a JSON object"));
        }
        let has_event = match outline.event {
            None | Some(b"null") => false,
            Some(event) if event.starts_with(b"{") => true,
            Some(_) => return Err(Error::bad_envelope("body", "`event` must be a JSON object")),
        };
        let [specversion, id, source, ty, tenant] = outline.attributes;
        let specversion = attribute_text("specversion", specversion)?;
        let id = attribute_text("id", id)?;
        let source = attribute_text("source", source)?;
        let ty = attribute_text("type", ty)?;
        let ledger = match outline.ledger {
            Some(ledger) => serde_json::from_slice::<Option<LedgerMetadata>>(ledger)
                .map_err(|e| Error::bad_envelope("body", format!("ledger: {e}")))?,
            None => None,
        };
        if !has_event {
            return Err(Error::bad_envelope("event", "missing"));
        }
        let ledger = ledger.ok_or_else(|| Error::bad_envelope("ledger", "missing"))?;
        if specversion.as_deref() != Some(crate::event::SPEC_VERSION) {
            return Err(Error::bad_envelope("specversion", "must be \"1.0\""));
        }
        for (name, value) in [("id", &id), ("source", &source), ("type", &ty)] {
            if value.as_deref().is_none_or(str::is_empty) {
                return Err(Error::bad_envelope(name, "missing"));
            }
        }
        Ok(ScannedEntry {
            ty: ty.unwrap_or_default(),
            // Another type than a string is no tenant (the typed event would hold it as an extension).
            tenant: match tenant {
                Some(ijson::Member::Text(tenant)) => Some(tenant),
                _ => None,
            },
            ledger,
        })
    }

    fn from_value(value: Value) -> Result<Self> {
        let Value::Object(mut entry) = value else {
            return Err(Error::bad_envelope("body", "a ledger entry is a JSON object"));
        };
        let event = entry
            .remove("event")
            .ok_or_else(|| Error::bad_envelope("event", "missing"))?;
        let ledger = entry
            .remove("ledger")
            .ok_or_else(|| Error::bad_envelope("ledger", "missing"))?;
        let event = Event::from_json(event)?;
        let ledger =
            LedgerMetadata::deserialize(ledger).map_err(|e| Error::bad_envelope("ledger", e.to_string()))?;
        Ok(Self { event, ledger })
    }
}

/// What [`LedgerEntry::scan_canonical`] reads of an entry.
#[derive(Debug)]
pub struct ScannedEntry<'a> {
    /// The event's class.
    pub ty: Cow<'a, str>,
    /// The `tenant` extension, when it is a string.
    pub tenant: Option<Cow<'a, str>>,
    /// The ledger's metadata.
    pub ledger: LedgerMetadata,
}

/// An event attribute of a scanned entry's outline that must be a string: `None` when absent or
/// `null`, refused when of another type.
fn attribute_text<'a>(name: &str, member: Option<ijson::Member<'a>>) -> Result<Option<Cow<'a, str>>> {
    match member {
        Some(ijson::Member::Text(text)) => Ok(Some(text)),
        Some(ijson::Member::Other(b"null")) | None => Ok(None),
        Some(ijson::Member::Other(_)) => Err(Error::bad_envelope(
            "body",
            format!("the event's `{name}` must be a string"),
        )),
    }
}

/// `,"ledger":` and the metadata's canonical bytes, and the closing brace: RFC 8785 sorts `event`
/// before `ledger`, so an entry is its event's bytes with these after them.
///
/// The members are written straight from the fields, in RFC 8785's order (their names are ASCII, so
/// byte order), as `jcs::write_into` writes the metadata's serde form (`tests::ledger_bytes_are_its_serde_form_canonicalized`).
fn write_ledger(ledger: &LedgerMetadata, bytes: &mut Vec<u8>) -> Result<()> {
    let LedgerMetadata {
        ingested_at,
        origin,
        content_digest,
        payload_refs,
        scrubbed_paths,
        trace_refs,
        envelope_fields,
    } = ledger;
    bytes.extend_from_slice(br#","ledger":{"#);
    if let Some(digest) = content_digest {
        bytes.extend_from_slice(br#""content_digest":"#);
        jcs::write_string(bytes, digest);
        bytes.push(b',');
    }
    if let Some(fields) = envelope_fields {
        bytes.extend_from_slice(br#""envelope_fields":"#);
        jcs::write_object_into(bytes, fields).map_err(|e| e.under("/envelope_fields"))?;
        bytes.push(b',');
    }
    bytes.extend_from_slice(br#""ingested_at":"#);
    jcs::write_string(bytes, &format_time(ingested_at));
    bytes.extend_from_slice(br#","origin":"#);
    jcs::write_string(bytes, origin.as_str());
    bytes.extend_from_slice(br#","payload_refs":"#);
    if payload_refs.is_empty() {
        bytes.extend_from_slice(b"[]");
    } else {
        let refs = serde_json::to_value(payload_refs).map_err(|e| Error::Encode {
            reason: format!("ledger: {e}"),
        })?;
        jcs::write_into(bytes, &refs).map_err(|e| e.under("/payload_refs"))?;
    }
    bytes.extend_from_slice(br#","scrubbed_paths":["#);
    for (index, path) in scrubbed_paths.iter().enumerate() {
        if index > 0 {
            bytes.push(b',');
        }
        jcs::write_string(bytes, path);
    }
    bytes.push(b']');
    if let Some(refs) = trace_refs {
        bytes.extend_from_slice(br#","trace_refs":"#);
        jcs::write_array_into(bytes, refs).map_err(|e| e.under("/trace_refs"))?;
    }
    bytes.extend_from_slice(b"}}");
    Ok(())
}

/// `value` as JSON text with its object keys sorted, the way the entry stores it: what the
/// projections keep in their JSON columns (`payload_refs`, `trace_refs`, …).
pub fn json_text<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_value(value).map_or_else(|_| "null".to_owned(), |v| v.to_string())
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The metadata's bytes as entries were written before `write_ledger` wrote the fields itself:
    /// its serde form, canonicalized.
    fn serde_form(ledger: &LedgerMetadata) -> Vec<u8> {
        let mut bytes = br#","ledger":"#.to_vec();
        jcs::write_into(&mut bytes, &serde_json::to_value(ledger).unwrap()).unwrap();
        bytes.push(b'}');
        bytes
    }

    #[test]
    fn ledger_bytes_are_its_serde_form_canonicalized() {
        let at: DateTime<Utc> = "2026-06-01T12:34:56.789123Z".parse().unwrap();
        let bare = LedgerMetadata::received(at, Origin::Binary, None, None);
        let Value::Object(fields) = json!({
            "schema_version": "1", "\u{fb33}": 1, "\u{1f600}": [2.5, {"b": null, "a": "\"é\n"}],
        }) else {
            unreachable!()
        };
        let full = LedgerMetadata {
            content_digest: Some(format!("sha256:{}", hex(&[9; 32]))),
            payload_refs: vec![PayloadRef {
                path: "/data/result/content".to_owned(),
                blob_id: "b1".to_owned(),
                commitment: "sha256:00".to_owned(),
                size: 123_456,
                content_type: "application/json".to_owned(),
            }],
            scrubbed_paths: vec!["/apikey".to_owned(), "/data/x~1y".to_owned()],
            trace_refs: Some(vec![json!({"traceparent": "00-01-02-01"}), json!("t")]),
            envelope_fields: Some(fields),
            ..LedgerMetadata::received(at, Origin::AgenttoolEvent, None, None)
        };
        let empty_options = LedgerMetadata {
            trace_refs: Some(Vec::new()),
            envelope_fields: Some(Map::new()),
            ..LedgerMetadata::received(at, Origin::Ledger, None, None)
        };
        for ledger in [bare, full, empty_options] {
            let mut bytes = Vec::new();
            write_ledger(&ledger, &mut bytes).unwrap();
            assert_eq!(
                String::from_utf8(bytes).unwrap(),
                String::from_utf8(serde_form(&ledger)).unwrap()
            );
        }
    }

    #[test]
    fn a_number_no_double_holds_is_refused_where_it_was_before() {
        let Value::Object(fields) = json!({"n": {"big": 9_007_199_254_740_993_u64}}) else {
            unreachable!()
        };
        let ledger = LedgerMetadata::received(Utc::now(), Origin::AgenttoolEvent, None, Some(fields));
        let direct = write_ledger(&ledger, &mut Vec::new()).unwrap_err().to_string();
        let via_serde = jcs::write_into(&mut Vec::new(), &serde_json::to_value(&ledger).unwrap())
            .map_err(Error::from)
            .unwrap_err()
            .to_string();
        assert_eq!(direct, via_serde);
    }
}
