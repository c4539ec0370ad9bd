//! The content digest, the identity and the canonical entry of a checked, scrubbed event; and the
//! entries the ledger writes itself (quarantine receipts).

use chrono::{DateTime, Utc};
use toolledger_schemas::EventClass;
use toolledger_wire::{Event, LedgerEntry, Tenant};

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
    /// Its payloads: the entry, its `content_digest` set, for [`super::offload`] to finish.
    Offload(Box<LedgerEntry>),
}

/// The scrubbed event's digest and identity, and its ledger entry when nothing in it can move to
/// the blob store (otherwise [`super::offload`] makes the entry). The event's canonical bytes are
/// written once: the digest hashes the very bytes the entry carries.
pub(crate) fn seal(checked: Checked, offloader: &Offloader) -> std::result::Result<Prepared, Rejection> {
    let Checked {
        json,
        mut ledger,
        class,
        tenant,
        source,
        event_id,
    } = checked;
    let stays_inline = !offloader.may_move(&json)
        && UploadCollector::find_uploads(&json).is_ok_and(|uploads| uploads.is_empty());
    // Scrubbing may have replaced an attribute by a marker, which no CloudEvent can hold: refused here.
    let event = Event::from_json(json).map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
    ledger.content_digest = None;
    let mut entry = LedgerEntry { event, ledger };
    let (digest, body) = if stays_inline {
        let (digest, bytes) = entry
            .seal()
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
        let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
        (digest, Body::Ready(PendingEntry::new(subject, bytes.into())))
    } else {
        let digest = entry
            .content_digest()
            .map_err(|e| reject(&tenant, &e, Some(event_id.clone())))?;
        entry.ledger.content_digest = Some(format!("sha256:{}", toolledger_wire::entry::hex(&digest)));
        (digest, Body::Offload(Box::new(entry)))
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
    let tenant = Tenant::parse(&tenant_name).unwrap_or_else(|_| Tenant::unroutable());
    let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
    Ok((PendingEntry::new(subject, bytes.into()), key, digest))
}
