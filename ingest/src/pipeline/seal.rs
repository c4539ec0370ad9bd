//! The content digest, the identity and the canonical entry of a checked, scrubbed event; and the
//! entries the ledger writes itself (quarantine receipts).

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolledger_schemas::EventClass;
use toolledger_wire::{Event, LedgerEntry, LedgerMetadata, Tenant};

use super::check::{Checked, reject};
use crate::append::PendingEntry;
use crate::dedupe::IdentityKey;
use crate::payload::{Offloader, UploadCollector};
use crate::quarantine::{self, Rejection};
use crate::{Error, Result};

/// A decoded, validated, scrubbed event with its identity and digest.
pub(crate) struct Prepared {
    pub(crate) body: Body,
    pub(crate) class: EventClass,
    pub(crate) key: IdentityKey,
    /// SHA-256 of the scrubbed event's canonical bytes: what duplicate detection compares.
    pub(crate) digest: [u8; 32],
    pub(crate) tenant: Tenant,
    pub(crate) event_id: String,
}

/// What is left to do to a prepared event's entry.
pub(crate) enum Body {
    /// Nothing: no part of the event can move to the blob store, and these are the entry's bytes
    /// (the event itself is dropped where it was sealed, on the pool, not by the appender).
    Ready(PendingEntry),
    /// Its payloads: the event, its metadata's `content_digest` set, for [`super::offload`] to finish.
    Offload(Box<Unsealed>),
}

/// An event whose payloads are still to move: its CloudEvents JSON form (what the payload stage
/// works on) and the entry's metadata.
pub(crate) struct Unsealed {
    pub(crate) json: Value,
    pub(crate) ledger: LedgerMetadata,
}

/// The scrubbed event's digest and identity, and its ledger entry when nothing in it can move to
/// the blob store (otherwise [`super::offload`] makes the entry). The event's canonical bytes are
/// written once, from its JSON form: the digest hashes the very bytes the entry carries.
///
/// The JSON form is still [`Event::into_json`]'s form of the decoded event unless scrubbing listed
/// something outside `data`, or the event has a `dataschema` (whose URL is parsed again by
/// [`Event::from_json`], and a URL's serialization need not be a fixed point of parsing): only then
/// is it taken back as an [`Event`] and given again, which refuses a scrubbed attribute and writes
/// the bytes the event holds. Either way the bytes are those of `Event::from_json(json)`.
pub(crate) fn seal(checked: Checked, offloader: &Offloader) -> std::result::Result<Prepared, Rejection> {
    let Checked {
        json,
        mut ledger,
        class,
        tenant,
        source,
        event_id,
        attributes_scrubbed,
    } = checked;
    let stays_inline = !offloader.may_move(&json) && !UploadCollector::holds_uploads(&json);
    let json = if attributes_scrubbed || json.get("dataschema").is_some() {
        // Scrubbing may have replaced an attribute by a marker, which no CloudEvent can hold: refused here.
        Event::from_json(json)
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?
            .into_json()
    } else {
        json
    };
    ledger.content_digest = None;
    let (digest, body) = if stays_inline {
        let (digest, bytes) = LedgerEntry::seal_json(&json, &mut ledger)
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
        let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
        (digest, Body::Ready(PendingEntry::new(subject, bytes.into())))
    } else {
        let digest = LedgerEntry::content_digest_json(&json)
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
        ledger.content_digest = Some(format!("sha256:{}", toolledger_wire::entry::hex(&digest)));
        (digest, Body::Offload(Box::new(Unsealed { json, ledger })))
    };
    Ok(Prepared {
        key: IdentityKey::new(tenant.as_str(), &source, &event_id),
        body,
        class,
        digest,
        tenant,
        event_id,
    })
}

/// A ledger-own event (a receipt) as an entry with its identity and digest.
pub(crate) fn own_entry(
    event: serde_json::Value,
    ingested_at: DateTime<Utc>,
) -> Result<(PendingEntry, IdentityKey, [u8; 32])> {
    let own = |source: toolledger_wire::Error| Error::LedgerOwnEvent { source };
    let event = Event::from_json(event).map_err(own)?;
    let class: EventClass = event
        .ty()
        .parse()
        .map_err(|e: toolledger_schemas::UnknownClass| {
            own(toolledger_wire::Error::UnknownClass { class: e.to_string() })
        })?;
    let tenant_name = event
        .extension_str("tenant")
        .unwrap_or(Tenant::UNROUTABLE)
        .to_owned();
    let key = IdentityKey::new(&tenant_name, quarantine::LEDGER_SOURCE, event.id());
    let mut entry = LedgerEntry::own(event, ingested_at);
    let (digest, bytes) = entry.seal().map_err(own)?;
    // The ledger's reserved tenants keep their names (`_system` records, `_unroutable` receipts).
    let tenant = Tenant::try_from(tenant_name).unwrap_or_else(|_| Tenant::unroutable());
    let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
    Ok((PendingEntry::new(subject, bytes.into()), key, digest))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toolledger_schemas::generator::{GeneratorConfig, generate};
    use toolledger_wire::QuarantineReason;

    use super::*;
    use crate::payload::{BlobStore, OffloadConfig};
    use crate::pipeline::check;
    use crate::quarantine::Original;
    use crate::scrub::{ScrubConfig, ScrubKey, Scrubber};

    /// What a case does to the event.
    type Change = fn(&mut Value);

    /// A valid structured event of the generator's session, with `change` made to it.
    fn original(change: impl FnOnce(&mut Value)) -> Original {
        let mut event = generate(&GeneratorConfig::default()).events[0].clone();
        change(&mut event);
        let subject = format!(
            "atl.in.{}.{}",
            event["tenant"].as_str().unwrap(),
            event["type"].as_str().unwrap()
        );
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("content-type", "application/cloudevents+json");
        Original {
            subject,
            headers: Some(headers),
            raw_headers: None,
            payload: serde_json::to_vec(&event).unwrap().into(),
            inbound_seq: 1,
            published: "2026-06-01T12:34:56.789Z".parse().unwrap(),
        }
    }

    /// What sealing did before it wrote entries from the JSON form: the scrubbed JSON taken back as
    /// an event, its entry sealed.
    fn sealed_from_the_event(checked: &Checked) -> std::result::Result<Vec<u8>, toolledger_wire::Error> {
        let mut entry = LedgerEntry {
            event: Event::from_json(checked.json.clone())?,
            ledger: checked.ledger.clone(),
        };
        Ok(entry.seal()?.1)
    }

    fn sealed(
        original: &Original,
        config: &ScrubConfig,
    ) -> (std::result::Result<Vec<u8>, Rejection>, Checked) {
        let mut scrubber = Scrubber::new(ScrubKey::from_bytes([7; 32]), config);
        let offloader = Offloader::new(BlobStore::open("memory://").unwrap(), &OffloadConfig::default());
        let mut checked =
            check::check(original, original.published).unwrap_or_else(|r| panic!("{}", r.detail));
        checked.scrub(&mut scrubber);
        let copy = Checked {
            json: checked.json.clone(),
            ledger: checked.ledger.clone(),
            class: checked.class,
            tenant: checked.tenant.clone(),
            source: checked.source.clone(),
            event_id: checked.event_id.clone(),
            attributes_scrubbed: checked.attributes_scrubbed,
        };
        let outcome = seal(checked, &offloader).map(|prepared| match prepared.body {
            Body::Ready(entry) => entry.bytes.to_vec(),
            Body::Offload(_) => panic!("nothing in these events moves"),
        });
        (outcome, copy)
    }

    #[test]
    fn entries_are_the_bytes_the_event_writes_whatever_scrubbing_touched() {
        let cases: [(&str, Change); 4] = [
            ("untouched", |_| {}),
            ("secrets in data", |e| {
                e["data"]["context"] = json!({"authorization": "Bearer abcdefgh12345678"})
            }),
            ("secrets in attributes", |e| {
                e["source"] = json!("https://ci-bot:s0urcePassw0rd@ci.example.com/x");
                e["apikey"] = json!("apikey-0123456789abcdef");
                e["attempt"] = json!(3);
            }),
            ("a dataschema", |e| {
                e["dataschema"] = json!("HTTPS://Example.com:443/a/./b/../schema%7e.json")
            }),
        ];
        for (name, change) in cases {
            let (outcome, checked) = sealed(&original(change), &ScrubConfig::default());
            let bytes = outcome.unwrap_or_else(|r| panic!("{name}: {}", r.detail));
            assert_eq!(bytes, sealed_from_the_event(&checked).unwrap(), "{name}");
            let expect_slow = name == "secrets in attributes";
            assert_eq!(checked.attributes_scrubbed, expect_slow, "{name}");
        }
    }

    #[test]
    fn an_attribute_a_configured_path_replaced_is_refused_as_before() {
        let config = ScrubConfig {
            paths: vec!["/time".to_owned()],
        };
        let (outcome, checked) = sealed(&original(|_| {}), &config);
        let rejection = outcome.expect_err("a marker is no time");
        let expected = sealed_from_the_event(&checked).expect_err("a marker is no time");
        assert_eq!(
            rejection.reason,
            expected
                .quarantine_reason()
                .unwrap_or(QuarantineReason::BadEnvelope)
        );
        assert_eq!(rejection.detail, expected.quarantine_detail());
    }
}
