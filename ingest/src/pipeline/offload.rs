//! The payload stage: producer uploads copied in from `ATL_PAYLOADS_<tenant>`, large and erasable
//! fields moved out to the blob store, and the entry's canonical bytes written.

use async_nats::jetstream;
use serde_json::Value;
use toolledger_wire::{Event, LedgerEntry, LedgerMetadata, PayloadRef, QuarantineReason, Tenant};

use super::Stages;
use super::seal::{Body, Prepared, Unsealed};
use crate::append::PendingEntry;
use crate::payload::{Offloader, UploadName};
use crate::quarantine::Rejection;
use crate::{Error, Result};

/// What the payload stage did to one event.
pub(crate) enum Offloaded {
    /// The entry to append, and the uploads to delete once it is in the ledger.
    Entry {
        entry: PendingEntry,
        uploads: Vec<UploadName>,
    },
    /// An upload it references is missing, of another tenant, or not what it claims.
    Rejected(Rejection),
}

/// Copies producer uploads in, moves large and erasable fields out, and canonicalizes the entry.
pub(crate) async fn offload(
    js: &jetstream::Context,
    stages: &Stages,
    prepared: Prepared,
) -> Result<Offloaded> {
    let Prepared {
        body,
        class,
        tenant,
        event_id,
        ..
    } = prepared;
    let Unsealed { mut json, ledger } = match body {
        Body::Ready(entry) => {
            return Ok(Offloaded::Entry {
                entry,
                uploads: Vec::new(),
            });
        }
        Body::Offload(unsealed) => *unsealed,
    };
    let collected = match stages.uploads.collect(js, &tenant, &mut json).await {
        Ok(collected) => collected,
        Err(
            error
            @ (Error::UploadInvalid { .. } | Error::UploadMismatch { .. } | Error::UploadMissing { .. }),
        ) => {
            return Ok(Offloaded::Rejected(Rejection {
                reason: QuarantineReason::BadPayload,
                detail: error.to_string(),
                tenant,
                event_id: Some(event_id),
            }));
        }
        Err(error) => return Err(error),
    };
    let bytes = move_payloads(
        json,
        ledger,
        &tenant,
        &event_id,
        &stages.offloader,
        collected.refs,
    )
    .await?;
    let subject = toolledger_wire::subject::ledger_subject(&tenant, class);
    Ok(Offloaded::Entry {
        entry: PendingEntry::new(subject, bytes.into()),
        uploads: collected.uploads,
    })
}

/// Moves `json`'s large and erasable fields to the blob store and returns the entry's canonical
/// bytes, its payload refs being those moves plus `refs` (the uploads already copied in), by path.
pub(crate) async fn move_payloads(
    mut json: Value,
    mut ledger: LedgerMetadata,
    tenant: &Tenant,
    event_id: &str,
    offloader: &Offloader,
    mut refs: Vec<PayloadRef>,
) -> Result<Vec<u8>> {
    refs.extend(offloader.offload(tenant, &mut json).await?);
    refs.sort_by(|a, b| a.path.cmp(&b.path));
    ledger.payload_refs = refs;
    let entry_error = |source| Error::OffloadedEntry {
        event_id: event_id.to_owned(),
        source,
    };
    let entry = LedgerEntry {
        event: Event::from_json(json).map_err(entry_error)?,
        ledger,
    };
    entry.canonical_bytes().map_err(entry_error)
}
