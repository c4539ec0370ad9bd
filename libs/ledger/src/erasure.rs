//! Erasure (DESIGN §5): the fact of a call is never erased; its offloaded content can be.
//!
//! ```text
//! plan     read the tenant's ledger entries (its partition's stream, subject filter
//!          <prefix>.<tenant>.>: atl.ledger.<tenant>.> for a single ledger) and the
//!          ledger's erasure records (tenant `_system`, in p0) ─▶ the target's payload
//!          references; those a record names as erased are
//!          asked of the blob store, and erased again when it still holds them ─▶ the payloads to
//!          erase, the invocations and sessions they belong to, those inside a legal hold (min_days)
//! execute  held and not forced? refuse ─▶ delete each blob (its nonce goes with it; deleting a
//!          missing blob succeeds) ─▶ publish toolledger.erasure.completed to
//!          atl.in._system.toolledger.erasure.completed (Nats-Msg-Id = the erasure id) ─▶ ingest, the
//!          single writer, appends it
//! ```
//!
//! Blobs go first and the record second: a crash in between leaves blobs deleted without a record,
//! which `verify` reports as missing until the same erasure is run again (it is idempotent: blobs an
//! earlier record names and the store no longer holds are skipped, the erasure id is derived from
//! what is erased, so a repeated publish is deduplicated). Recording first would leave content that
//! the ledger claims is gone.
//!
//! A record is a claim, not a proof: one forged (published under `_system` where NATS has no
//! accounts, or under a producer tenant before ingest refused that) or one whose deletes failed
//! silently must not stop a real erasure. So a blob a record names is skipped only when the store
//! says it is gone; one still stored is erased again and reported ([`ErasurePlan::still_stored`]).
//!
//! [`retention_target`] turns a tenant's maximum age into blob targets for the retention job, which
//! [`retention_loop`] runs beside the services (`toolledger up`); `toolledger erase` runs one erasure.
//!
//! Erasure is administration, not appending: it deletes blobs and quarantined originals and asks
//! ingest, the single writer, to record it. It lives here, beside the blob store and the reader it
//! uses, so the tools that erase need nothing of ingest.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;
use toolledger_core::telemetry::ErrorChain;

use async_nats::jetstream;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolledger_core::config::TenantRetention;
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::{LedgerEntry, PayloadRef, Tenant};

use crate::blobs::BlobStore;
use crate::read::{OrderedReader, ReadSpec};
use crate::{Error, Result};

/// The class of the ledger's erasure records.
pub const ERASURE_CLASS: &str = "toolledger.erasure.completed";

/// Where erasure records are published for ingest to append.
pub const ERASURE_SUBJECT: &str = "atl.in._system.toolledger.erasure.completed";

/// How long a read of the ledger may stall before it is an error.
const READ_STALL: Duration = Duration::from_secs(10);

/// What to erase within one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErasureTarget {
    /// Every payload of one invocation.
    Invocation(String),
    /// Every payload of one session.
    Session(String),
    /// These blobs.
    Blobs(Vec<String>),
    /// Every payload of the tenant.
    Tenant,
    /// Payloads of entries the ledger took before this instant (retention).
    IngestedBefore(DateTime<Utc>),
}

/// Who erases what and why.
#[derive(Debug, Clone)]
pub struct ErasureRequest {
    /// The tenant whose content is erased.
    pub tenant: Tenant,
    /// What.
    pub target: ErasureTarget,
    /// Why (a data-subject request, retention …).
    pub reason: String,
    /// Under whose authority (ticket, legal basis, approver).
    pub authority: String,
    /// Who asked.
    pub requested_by: String,
    /// Erase inside a legal hold too (an admin's decision; the reason says why).
    pub force: bool,
}

/// One payload found for erasure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPayload {
    /// The entry's ledger sequence.
    pub seq: u64,
    /// When the ledger took the entry.
    pub ingested_at: DateTime<Utc>,
    /// The reference.
    pub payload: PayloadRef,
}

/// What an erasure would do.
#[derive(Debug, Clone, Default)]
pub struct ErasurePlan {
    /// Payloads to erase, in ledger order (one per blob).
    pub payloads: Vec<FoundPayload>,
    /// Blobs of the target that earlier erasure records name and the store no longer holds.
    pub already_erased: Vec<String>,
    /// Blobs of the target that earlier erasure records name but the store still holds: erased
    /// again (they are also in `payloads`).
    pub still_stored: Vec<String>,
    /// Invocations whose content is erased.
    pub invocation_ids: BTreeSet<String>,
    /// Sessions whose content is erased.
    pub session_ids: BTreeSet<String>,
    /// Entries of the target read.
    pub entries_matched: u64,
    /// ATL_QUARANTINE messages of the target (rejected originals that mention it), deleted too.
    pub quarantined: Vec<u64>,
}

impl ErasurePlan {
    /// The payloads inside the legal hold at `now`.
    pub fn held(&self, retention: TenantRetention, now: DateTime<Utc>) -> Vec<&FoundPayload> {
        let Some(days) = retention.min_days else {
            return Vec::new();
        };
        let hold_start = now - chrono::Duration::days(i64::from(days));
        self.payloads
            .iter()
            .filter(|p| p.ingested_at > hold_start)
            .collect()
    }

    /// The erasure's id: derived from the tenant and the blobs, so the same erasure run twice
    /// publishes the same record (deduplicated by JetStream and ingest).
    pub fn erasure_id(&self, tenant: &Tenant) -> String {
        let mut hash = Sha256::new();
        hash.update(tenant.as_str().as_bytes());
        for payload in &self.payloads {
            hash.update([0]);
            hash.update(payload.payload.blob_id.as_bytes());
        }
        for seq in &self.quarantined {
            hash.update([1]);
            hash.update(seq.to_be_bytes());
        }
        format!("erasure-{}", &toolledger_wire::entry::hex(&hash.finalize())[..32])
    }
}

/// What an executed erasure did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasureOutcome {
    /// The record's id; `None` when there was nothing left to erase.
    pub erasure_id: Option<String>,
    /// Blobs deleted.
    pub deleted: Vec<String>,
    /// The record published for ingest to append.
    pub record: Option<Value>,
}

/// Reads the tenant's entries and the ledger's erasure records and finds what `request` would erase,
/// asking `blobs` whether the blobs a record names as erased are really gone.
pub async fn plan(
    js: &jetstream::Context,
    partitions: Partitions,
    blobs: &BlobStore,
    request: &ErasureRequest,
) -> Result<ErasurePlan> {
    let claimed: HashSet<String> = erasure_records(js, &Partition::ZERO.stream())
        .await?
        .into_iter()
        .filter(|record| record.tenant == request.tenant.as_str())
        .flat_map(|record| record.blob_ids)
        .collect();
    let mut plan = ErasurePlan::default();
    let mut seen = HashSet::new();
    // Payloads an earlier record claims erased: the store decides, once they are all known.
    let mut claimed_found = Vec::new();
    // The tenant's entries are all in its partition.
    let partition = partitions.of(request.tenant.as_str());
    let filter = format!("{}.{}.>", partition.subject_prefix(), request.tenant);
    for (seq, entry) in read_filtered(js, &partition.stream(), &filter).await? {
        if entry.ledger.payload_refs.is_empty() {
            continue;
        }
        let event = entry.event_json();
        let invocation = attribute(&event, "invocationid", "invocation_id");
        let session = attribute(&event, "sessionid", "session_id");
        let wanted: Vec<&PayloadRef> = match &request.target {
            ErasureTarget::Invocation(id) if invocation.as_deref() == Some(id) => {
                entry.ledger.payload_refs.iter().collect()
            }
            ErasureTarget::Session(id) if session.as_deref() == Some(id) => {
                entry.ledger.payload_refs.iter().collect()
            }
            ErasureTarget::Blobs(ids) => entry
                .ledger
                .payload_refs
                .iter()
                .filter(|p| ids.contains(&p.blob_id))
                .collect(),
            ErasureTarget::Tenant => entry.ledger.payload_refs.iter().collect(),
            ErasureTarget::IngestedBefore(at) if entry.ledger.ingested_at < *at => {
                entry.ledger.payload_refs.iter().collect()
            }
            _ => Vec::new(),
        };
        if wanted.is_empty() {
            continue;
        }
        plan.entries_matched += 1;
        for payload in wanted {
            if !seen.insert(payload.blob_id.clone()) {
                continue;
            }
            let found = (
                FoundPayload {
                    seq,
                    ingested_at: entry.ledger.ingested_at,
                    payload: payload.clone(),
                },
                invocation.clone(),
                session.clone(),
            );
            if claimed.contains(&payload.blob_id) {
                claimed_found.push(found);
            } else {
                plan.add(found);
            }
        }
    }
    let claimed_ids: Vec<String> = claimed_found
        .iter()
        .map(|(found, ..)| found.payload.blob_id.clone())
        .collect();
    let stored = still_stored(blobs, &request.tenant, &claimed_ids).await?;
    for found in claimed_found {
        let blob_id = found.0.payload.blob_id.clone();
        if stored.contains(&blob_id) {
            tracing::warn!(
                tenant = %request.tenant,
                blob_id,
                "an erasure record names this blob but the store still holds it; erasing it again"
            );
            plan.still_stored.push(blob_id);
            plan.add(found);
        } else {
            plan.already_erased.push(blob_id);
        }
    }
    plan.payloads.sort_by_key(|found| found.seq);
    plan.quarantined = quarantined_of(js, request).await?;
    Ok(plan)
}

impl ErasurePlan {
    /// Adds a payload to erase, with the invocation and session its entry belongs to.
    fn add(&mut self, (found, invocation, session): (FoundPayload, Option<String>, Option<String>)) {
        self.invocation_ids.extend(invocation);
        self.session_ids.extend(session);
        self.payloads.push(found);
    }
}

/// Of `claimed` (blobs of `tenant` an erasure record names), those the store still holds. A few are
/// asked one by one; many are compared with one listing of the tenant's blobs, which costs a request
/// per page of a thousand rather than one per blob.
async fn still_stored(blobs: &BlobStore, tenant: &Tenant, claimed: &[String]) -> Result<HashSet<String>> {
    /// Up to this many, one request per blob is cheaper than listing the tenant.
    const ASK_ONE_BY_ONE: usize = 64;
    if claimed.len() <= ASK_ONE_BY_ONE {
        let mut stored = HashSet::new();
        for blob_id in claimed {
            if blobs.exists(tenant, blob_id).await? {
                stored.insert(blob_id.clone());
            }
        }
        return Ok(stored);
    }
    let listed: HashSet<String> = blobs.list(tenant).await?.into_iter().collect();
    Ok(claimed
        .iter()
        .filter(|id| listed.contains(*id))
        .cloned()
        .collect())
}

/// The tenant's quarantined originals that belong to the target: for an invocation or a session,
/// those whose bytes hold its id as a JSON string; for the whole tenant, all of them.
async fn quarantined_of(js: &jetstream::Context, request: &ErasureRequest) -> Result<Vec<u64>> {
    let needle = match &request.target {
        // The id as a JSON string, quotes included, so `inv-1` does not match `inv-10`.
        ErasureTarget::Invocation(id) | ErasureTarget::Session(id) => {
            Some(Value::from(id.as_str()).to_string().into_bytes())
        }
        ErasureTarget::Tenant => None,
        ErasureTarget::Blobs(_) | ErasureTarget::IngestedBefore(_) => return Ok(Vec::new()),
    };
    let filter = format!("atl.quarantine.{}.>", request.tenant);
    let messages = match read_raw(js, toolledger_wire::streams::QUARANTINE, &filter).await {
        Ok(messages) => messages,
        // No quarantine stream (a ledger made without one): nothing quarantined to erase.
        Err(Error::Stream { .. }) if js.get_stream(toolledger_wire::streams::QUARANTINE).await.is_err() => {
            return Ok(Vec::new());
        }
        Err(error) => return Err(error),
    };
    Ok(messages
        .into_iter()
        .filter(|(_, bytes)| {
            needle
                .as_deref()
                .is_none_or(|needle| bytes.windows(needle.len()).any(|w| w == needle))
        })
        .map(|(seq, _)| seq)
        .collect())
}

/// Carries out `plan`: refuses inside a legal hold unless forced, deletes the blobs, publishes the
/// record. Nothing to erase publishes nothing.
pub async fn execute(
    js: &jetstream::Context,
    blobs: &BlobStore,
    request: &ErasureRequest,
    plan: &ErasurePlan,
    retention: TenantRetention,
    now: DateTime<Utc>,
) -> Result<ErasureOutcome> {
    if plan.payloads.is_empty() && plan.quarantined.is_empty() {
        return Ok(ErasureOutcome {
            erasure_id: None,
            deleted: Vec::new(),
            record: None,
        });
    }
    let held = plan.held(retention, now);
    if !held.is_empty() && !request.force {
        return Err(Error::LegalHold {
            tenant: request.tenant.to_string(),
            held: held.len(),
            min_days: retention.min_days.unwrap_or_default(),
        });
    }
    if request.reason.trim().is_empty() {
        return Err(Error::ErasureWithoutReason);
    }
    let mut deleted = Vec::with_capacity(plan.payloads.len());
    for found in &plan.payloads {
        blobs.delete(&request.tenant, &found.payload.blob_id).await?;
        deleted.push(found.payload.blob_id.clone());
    }
    if !plan.quarantined.is_empty() {
        let stream = toolledger_wire::streams::QUARANTINE;
        let quarantine = js
            .get_stream(stream)
            .await
            .map_err(|e| Error::stream(stream, "opening", e))?;
        for &seq in &plan.quarantined {
            // Already gone (an earlier run, or its age limit) is fine.
            if let Err(error) = quarantine.delete_message(seq).await
                && quarantine.get_raw_message(seq).await.is_ok()
            {
                return Err(Error::ErasureQuarantineDelete {
                    seq,
                    source: error.into(),
                });
            }
        }
    }
    let erasure_id = plan.erasure_id(&request.tenant);
    let record = json!({
        "specversion": "1.0",
        "id": erasure_id,
        "source": "toolledger/erase",
        "type": ERASURE_CLASS,
        "tenant": Tenant::SYSTEM,
        "time": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "datacontenttype": "application/json",
        "data": {
            "erasure_id": erasure_id,
            "tenant": request.tenant.as_str(),
            "blob_ids": deleted,
            "invocation_ids": plan.invocation_ids,
            "session_ids": plan.session_ids,
            "reason": request.reason,
            "authority": request.authority,
            "requested_by": request.requested_by,
            "forced_inside_legal_hold": !held.is_empty(),
            "quarantined_deleted": plan.quarantined.len(),
            "completed_at": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    });
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", erasure_id.as_str());
    headers.insert("content-type", "application/cloudevents+json");
    let failed = |source: crate::BoxError| Error::ErasureRecord {
        erasure_id: erasure_id.clone(),
        source,
    };
    let body = serde_json::to_vec(&record).map_err(|e| failed(e.into()))?;
    js.publish_with_headers(ERASURE_SUBJECT, headers, body.into())
        .await
        .map_err(|e| failed(e.into()))?
        .await
        .map_err(|e| failed(e.into()))?;
    Ok(ErasureOutcome {
        erasure_id: Some(erasure_id),
        deleted,
        record: Some(record),
    })
}

/// The payloads the retention job erases for `tenant` at `now`: entries older than `max_days`.
/// `None` when the tenant has no maximum.
pub fn retention_target(retention: TenantRetention, now: DateTime<Utc>) -> Option<ErasureTarget> {
    let days = retention.max_days?;
    Some(ErasureTarget::IngestedBefore(
        now - chrono::Duration::days(i64::from(days)),
    ))
}

/// The tenants that have content in the ledger: the tokens of `<prefix>.<tenant>.>` subjects of
/// every partition's stream (`atl.ledger.<tenant>.>` for a single ledger).
pub async fn ledger_tenants(js: &jetstream::Context, partitions: Partitions) -> Result<Vec<Tenant>> {
    let mut tenants = BTreeMap::new();
    for partition in partitions.all() {
        let ledger = partition.stream();
        let listing = |e: crate::BoxError| Error::stream(&ledger, "listing its subjects", e);
        let stream = js
            .get_stream(&ledger)
            .await
            .map_err(|e| Error::stream(&ledger, "opening", e))?;
        let prefix = format!("{}.", partition.subject_prefix());
        let mut subjects = stream
            .info_with_subjects(format!("{prefix}>"))
            .await
            .map_err(|e| listing(e.into()))?;
        while let Some(subject) = subjects.next().await {
            let (subject, _) = subject.map_err(|e| listing(e.into()))?;
            if let Some(tenant) = subject
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split('.').next())
                && let Ok(tenant) = Tenant::parse(tenant)
            {
                tenants.insert(tenant.to_string(), tenant);
            }
        }
    }
    Ok(tenants.into_values().collect())
}

/// An erasure record in the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasureRecord {
    /// Its ledger sequence.
    pub seq: u64,
    /// The erasure's id.
    pub erasure_id: String,
    /// The tenant whose content it erased.
    pub tenant: String,
    /// The blobs it deleted.
    pub blob_ids: Vec<String>,
}

/// Every erasure record in the ledger, in ledger order: those of `ledger`, the stream of p0 (the
/// ledger's own tenant `_system` lives there).
pub async fn erasure_records(js: &jetstream::Context, ledger: &str) -> Result<Vec<ErasureRecord>> {
    let filter = format!("atl.ledger.{}.{ERASURE_CLASS}", Tenant::SYSTEM);
    let mut out = Vec::new();
    for (seq, entry) in read_filtered(js, ledger, &filter).await? {
        let event = entry.event.into_json();
        let data = &event["data"];
        out.push(ErasureRecord {
            seq,
            erasure_id: data["erasure_id"].as_str().unwrap_or_default().to_owned(),
            tenant: data["tenant"].as_str().unwrap_or_default().to_owned(),
            blob_ids: data["blob_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b.as_str().map(str::to_owned))
                .collect(),
        });
    }
    Ok(out)
}

/// An extension attribute, else the data field of that name.
fn attribute(event: &Value, extension: &str, field: &str) -> Option<String> {
    event
        .get(extension)
        .or_else(|| event["data"].get(field))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Every entry of `ledger` on subjects matching `filter`, in ledger order.
async fn read_filtered(
    js: &jetstream::Context,
    ledger: &str,
    filter: &str,
) -> Result<Vec<(u64, LedgerEntry)>> {
    read_raw(js, ledger, filter)
        .await?
        .into_iter()
        .map(|(seq, bytes)| {
            LedgerEntry::parse(&bytes)
                .map(|entry| (seq, entry))
                .map_err(|e| Error::ErasureEntryUnreadable {
                    seq,
                    source: Box::new(e),
                })
        })
        .collect()
}

/// Every message of `stream` on subjects matching `filter`, in stream order.
async fn read_raw(js: &jetstream::Context, stream: &str, filter: &str) -> Result<Vec<(u64, bytes::Bytes)>> {
    let spec = ReadSpec::to_tail(1).subjects(filter).stall_after(READ_STALL);
    let mut reader = OrderedReader::open(js, stream, spec).await?;
    let mut out = Vec::new();
    while let Some(message) = reader.next().await? {
        out.push((message.seq, message.payload));
    }
    Ok(out)
}

/// What the retention job did for one tenant.
#[derive(Debug, Clone)]
pub struct RetentionRun {
    /// The tenant.
    pub tenant: Tenant,
    /// The erasure, when something was past its maximum age.
    pub outcome: ErasureOutcome,
}

/// The retention job: for every tenant with content in the ledger and a maximum age, erases the
/// payloads older than it (never inside the legal hold: the configuration keeps max ≥ min).
pub async fn run_retention(
    js: &jetstream::Context,
    partitions: Partitions,
    blobs: &BlobStore,
    retention: &toolledger_core::config::RetentionConfig,
    now: DateTime<Utc>,
) -> Result<Vec<RetentionRun>> {
    let mut runs = Vec::new();
    for tenant in ledger_tenants(js, partitions).await? {
        let policy = retention.for_tenant(tenant.as_str());
        let Some(target) = retention_target(policy, now) else {
            continue;
        };
        let request = ErasureRequest {
            tenant: tenant.clone(),
            target,
            reason: format!(
                "retention: older than {} days",
                policy.max_days.unwrap_or_default()
            ),
            authority: "retention policy".to_owned(),
            requested_by: "toolledger retention".to_owned(),
            force: false,
        };
        let plan = plan(js, partitions, blobs, &request).await?;
        let outcome = execute(js, blobs, &request, &plan, policy, now).await?;
        if outcome.erasure_id.is_some() {
            tracing::info!(tenant = %tenant, blobs = outcome.deleted.len(), "retention erased content");
        }
        runs.push(RetentionRun { tenant, outcome });
    }
    Ok(runs)
}

/// Runs [`run_retention`] every `retention.interval_secs` until `shutdown` completes; does nothing
/// when the interval is 0. A failed run is logged and retried at the next tick.
pub async fn retention_loop(
    js: jetstream::Context,
    partitions: Partitions,
    blobs: BlobStore,
    retention: toolledger_core::config::RetentionConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    if retention.interval_secs == 0 {
        return shutdown.await;
    }
    let mut shutdown = std::pin::pin!(shutdown);
    let mut ticks = tokio::time::interval(Duration::from_secs(retention.interval_secs));
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = ticks.tick() => {
                match run_retention(&js, partitions, &blobs, &retention, Utc::now()).await {
                    Ok(runs) => {
                        let erased: usize = runs.iter().map(|r| r.outcome.deleted.len()).sum();
                        tracing::debug!(tenants = runs.len(), erased, "retention ran");
                    }
                    Err(error) => tracing::warn!(
                        error = %ErrorChain(&error),
                        "retention run failed; retrying at the next interval"
                    ),
                }
            }
        }
    }
}
