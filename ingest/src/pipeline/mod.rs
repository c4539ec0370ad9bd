//! The per-event pipeline: what ingest does to each inbound message of a batch, without the loop
//! around it ([`crate::session`] fetches, appends and acks).
//!
//! ```text
//! Original ─▶ check: decode ▸ validate ───────────────┐  one thread per core, in order
//!            ─▶ scrub (inbound order: a declaration changes what is sensitive after it)
//!            ─▶ seal: digest, and the entry's bytes when nothing can offload ─┐  one thread per core
//!            ─▶ dedupe (inbound order: a batch can hold an identity twice)
//!            ─▶ Verdict: Append | Duplicate | Reject
//! Append without bytes ─▶ offload: producer uploads in, large and erasable fields out ─▶ entry bytes
//! Reject ─▶ reject::scrubbed_rejection + reject::scrubbed_original (what quarantine keeps)
//!          + seal::own_entry (the receipt)
//! ```
//!
//! The event is parsed once (`decode`) and then moved, never copied: it is taken in its JSON form
//! once ([`toolledger_wire::Event::into_json`]), the stages that work on JSON (validation,
//! scrubbing, offloading) work on that value, and the entry's RFC 8785 bytes are written straight
//! from it ([`toolledger_wire::LedgerEntry::seal_json`]). Only an event whose attributes scrubbing
//! touched is taken back as an event first ([`toolledger_wire::Event::from_json`]), which refuses
//! an attribute a marker replaced.
//!
//! - [`check`]: decode ▸ validate, or the rejection that says why not.
//! - [`seal`]: the content digest and identity; the canonical entry; the ledger's own entries.
//! - [`offload`]: the payload stage (needs NATS for producer uploads).
//! - [`reject`]: the original as quarantine may keep it, scrubbed.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use chrono::{DateTime, Utc};
use rayon::prelude::*;
use toolledger_wire::QuarantineReason;

use crate::Result;
use crate::dedupe::{IdentityIndex, IdentityKey};
use crate::payload::{BlobStore, Offloader, UploadCollector};
use crate::quarantine::{Original, Rejection};
use crate::scrub::Scrubber;
use crate::session::IngestSettings;

pub(crate) mod check;
pub(crate) mod offload;
pub(crate) mod reject;
pub(crate) mod seal;

pub(crate) use offload::{Offloaded, offload};
pub(crate) use seal::{Body, Prepared, own_entry};

/// The stages that need state of their own: the scrubber (key and the sensitivity its
/// declarations taught it) and the payload stores.
pub(crate) struct Stages {
    pub(crate) scrubber: Mutex<Scrubber>,
    pub(crate) offloader: Offloader,
    pub(crate) uploads: UploadCollector,
}

impl Stages {
    pub(crate) fn open(settings: &IngestSettings) -> Result<Self> {
        let scrubber = Scrubber::open(&settings.data_dir, &settings.scrub)?;
        let mut store_config = crate::payload::BlobStoreConfig::new(settings.blob_store.clone());
        store_config.options = settings.blob_store_options.clone();
        let store = BlobStore::open_with(&store_config)?;
        Ok(Self {
            scrubber: Mutex::new(scrubber),
            offloader: Offloader::new(store.clone(), &settings.offload),
            uploads: UploadCollector::new(store).with_max_upload(settings.max_upload_bytes),
        })
    }
}

/// What to do with one inbound message.
pub(crate) enum Verdict {
    /// New: append it (offloading first when its [`Body`] says so).
    Append(Box<Prepared>),
    /// The same identity with the same content is already in the ledger (or earlier in the batch).
    Duplicate,
    /// Refused: quarantine the original, append a receipt.
    Reject(Rejection),
}

/// Identities a classified batch will append that the identity index does not hold yet: the
/// batches behind it in the pipeline deduplicate against them. The session adds a batch's identities
/// as it classifies it and forgets them once they are recorded in the index (never before, so no
/// identity is ever in neither place).
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<IdentityKey, [u8; 32]>>);

impl InFlight {
    /// Forgets `keys`, now recorded in the identity index (or never appended).
    pub(crate) fn forget(&self, keys: impl IntoIterator<Item = IdentityKey>) {
        let mut in_flight = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            in_flight.remove(&key);
        }
    }
}

/// Decodes, validates, scrubs, digests and deduplicates a batch; runs on a blocking thread.
///
/// The per-event work that does not depend on other events (decoding and validation; the digest and
/// the canonical entry) is spread over rayon's pool (one thread per core, started once); scrubbing
/// runs in inbound order, because a `tool.declared` earlier in the batch changes what is sensitive in
/// the events after it, and so does deduplication, because a batch can hold the same identity twice.
/// Identities are looked up in one query per batch, after the batches still in flight.
pub(crate) fn classify_batch(
    originals: &[&Original],
    index: &Mutex<IdentityIndex>,
    in_flight: &InFlight,
    stages: &Stages,
) -> Result<Vec<Verdict>> {
    /// Below this many events per thread, handing work to another thread costs more than it saves.
    const MIN_PER_THREAD: usize = 16;
    let received = Utc::now();
    let mut checked: Vec<_> = originals
        .par_iter()
        .with_min_len(MIN_PER_THREAD)
        .map(|original| check::check(original, received))
        .collect();
    {
        let mut scrubber = stages.scrubber.lock().unwrap_or_else(PoisonError::into_inner);
        for checked in checked.iter_mut().flatten() {
            // Secrets never reach the ledger: scrubbed before the digest, so duplicates compare scrubbed.
            checked.scrub(&mut scrubber);
        }
    }
    let prepared: Vec<_> = checked
        .into_par_iter()
        .with_min_len(MIN_PER_THREAD)
        .map(|checked| checked.and_then(|checked| seal::seal(checked, &stages.offloader)))
        .collect();

    // In flight first, then the index: the session records a batch in the index before it forgets
    // it here, and this lock keeps it from forgetting one between the two looks.
    let mut in_flight = in_flight.0.lock().unwrap_or_else(PoisonError::into_inner);
    let keys: Vec<IdentityKey> = prepared
        .iter()
        .flatten()
        .map(|prepared| prepared.key)
        .filter(|key| !in_flight.contains_key(key))
        .collect();
    let recorded = index
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .lookup_many(&keys)?;
    let mut in_batch: HashMap<IdentityKey, [u8; 32]> = HashMap::new();
    let mut verdicts = Vec::with_capacity(originals.len());
    for prepared in prepared {
        let verdict = match prepared {
            Err(rejection) => Verdict::Reject(rejection),
            Ok(prepared) => {
                let known = in_batch
                    .get(&prepared.key)
                    .or_else(|| in_flight.get(&prepared.key))
                    .copied()
                    .or_else(|| recorded.get(&prepared.key).map(|r| r.digest));
                match known {
                    None => {
                        in_batch.insert(prepared.key, prepared.digest);
                        Verdict::Append(Box::new(prepared))
                    }
                    Some(digest) if digest == prepared.digest => Verdict::Duplicate,
                    Some(_) => Verdict::Reject(Rejection {
                        reason: QuarantineReason::DuplicateConflict,
                        detail:
                            "an event with this tenant, source and id was already ingested with other content"
                                .to_owned(),
                        tenant: prepared.tenant,
                        event_id: Some(prepared.event_id),
                    }),
                }
            }
        };
        verdicts.push(verdict);
    }
    in_flight.extend(in_batch);
    Ok(verdicts)
}

/// One inbound message through decode ▸ validate ▸ scrub ▸ digest ▸ offload ▸ canonicalize as a
/// batch of one, without NATS or the identity index, ingested at `ingested_at`: the entry bytes and
/// content digest ingest would append, or the rejection. For the golden byte-identity test of
/// entries; producer uploads (which need NATS) are not copied.
#[doc(hidden)]
pub async fn entry_for_message(
    original: &Original,
    scrubber: &mut Scrubber,
    offloader: &Offloader,
    ingested_at: DateTime<Utc>,
) -> Result<std::result::Result<(Vec<u8>, [u8; 32]), Rejection>> {
    let mut checked = match check::check(original, ingested_at) {
        Ok(checked) => checked,
        Err(rejection) => return Ok(Err(rejection)),
    };
    checked.scrub(scrubber);
    let prepared = match seal::seal(checked, offloader) {
        Ok(prepared) => prepared,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let Prepared {
        body,
        tenant,
        event_id,
        digest,
        ..
    } = prepared;
    let seal::Unsealed { json, ledger } = match body {
        Body::Ready(ready) => return Ok(Ok((ready.bytes.to_vec(), digest))),
        Body::Offload(unsealed) => *unsealed,
    };
    let bytes = offload::move_payloads(json, ledger, &tenant, &event_id, offloader, Vec::new()).await?;
    Ok(Ok((bytes, digest)))
}

/// A ledger-own event (a quarantine receipt) as ingest appends it: its entry bytes and content
/// digest. For the golden byte-identity test of entries.
#[doc(hidden)]
pub fn ledger_own_entry_bytes(
    event: serde_json::Value,
    ingested_at: DateTime<Utc>,
) -> Result<(Vec<u8>, [u8; 32])> {
    let (entry, _, digest) = own_entry(event, ingested_at)?;
    Ok((entry.bytes.to_vec(), digest))
}
