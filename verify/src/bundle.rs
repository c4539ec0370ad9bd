//! Evidence bundles: the entries of an invocation or a session (or any chosen entries) with their
//! inclusion proofs, the signed checkpoint, optionally their payload blobs and a consistency proof from
//! a checkpoint the auditor holds, in one file that verifies offline with the verifier key alone.
//! The format is specified in `docs/evidence-bundles.md`; this module is one implementation of it.
//!
//! ```text
//! build_bundle(seqs, since?, blobs?, witness policy?)
//!   ATL_CHECKPOINTS ─▶ newest trusted checkpoint covering every seq (with a policy: the newest of
//!   those whose cosignatures in ATL_COSIGNATURES meet it) ─▶ its note + the witnesses' lines
//!   ─▶ tree reader (tiles, else ledger)
//!   entry bundle (tiles), else ATL_LEDGER ─▶ entry bytes ─▶ prove::inclusion_in ─▶ BundleEntry { seq, entry, inclusion_proof }
//!   blob store (optional) ─▶ nonce || content of each payload ref ─▶ BundleEntry.payloads
//!   held checkpoint (optional) ─▶ same root at its size? ─▶ prove::consistency_in ─▶ consistency
//!   ─▶ EvidenceBundle ─to_bytes (RFC 8785 + LF)─▶ verify_bundle ─▶ returned only when it verifies
//!
//! verify_bundle(bytes, keys, policy?): canonical form ─▶ checkpoint signature ─▶ witness policy:
//!   these witnesses' cosignatures on the checkpoint, at least k ─▶ per entry: seq in range,
//!   leaf hash, inclusion under the signed root, entry JSON, selection rule, payload commitments
//!   ─▶ consistency proof ─▶ directory proof ─▶ BundleReport
//! ```
//!
//! In a partitioned ledger a bundle may carry a directory proof (`directory`): the newest signed
//! directory checkpoint, the directory entry it ends with (which names this partition's checkpoint
//! by size and root) with its inclusion proof, and the consistency path in the partition's tree from
//! the bundle's checkpoint to that one. An auditor holding one signed directory checkpoint then
//! knows the bundle's entries are in the ledger it stands for.
//!
//! Everything in a bundle is bound: a one-byte change to the file fails verification.

use std::collections::BTreeSet;

use async_nats::jetstream;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolledger_ledger::cosignatures::cosigned_note;
use toolledger_ledger::{BlobStore, NONCE_LEN};
use toolledger_merkle::{
    Checkpoint, Hash, Verifiers, WitnessPolicy, WitnessVerdict, empty_root, leaf_hash, verify_consistency,
    verify_inclusion,
};
use toolledger_wire::directory::{self, CheckpointRef, DirectoryEntry};
use toolledger_wire::partition::Partitions;
use toolledger_wire::{PayloadRef, Tenant};

use crate::prove::{self, ProveSource};
use crate::verify::Signed;
use crate::{Error, Result, hex, parse_hash};

/// The `format` of the bundles this module writes and reads.
pub const FORMAT: &str = "toolledger-evidence-bundle/1";

/// An evidence bundle: the JSON document of `docs/evidence-bundles.md` §2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceBundle {
    /// Always [`FORMAT`].
    pub format: String,
    /// Which entries the bundle claims to hold.
    pub selection: Selection,
    /// The C2SP signed checkpoint note every entry is proved in, with the cosignature lines of the
    /// witnesses that cosigned it appended (a C2SP cosigned note; readers without a witness policy
    /// ignore those lines).
    pub checkpoint: String,
    /// The entries, in increasing ledger sequence order.
    pub entries: Vec<BundleEntry>,
    /// A proof that a checkpoint the auditor holds is a prefix of `checkpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<BundleConsistency>,
    /// In a partitioned ledger: the proof that the directory commits to `checkpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<BundleDirectory>,
}

/// The directory's commitment to a partition's bundle checkpoint (`docs/evidence-bundles.md` §2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleDirectory {
    /// The directory's signed checkpoint note (origin `<ledger origin>/directory`).
    pub checkpoint: String,
    /// The directory entry's ATL_DIRECTORY sequence; its leaf index is `seq - 1`.
    pub seq: u64,
    /// Base64 of the directory entry's canonical bytes.
    pub entry: String,
    /// The entry's audit path to the directory checkpoint's root, hex.
    pub inclusion_proof: Vec<String>,
    /// The consistency path, in the bundle's partition's tree, from the bundle checkpoint's size to
    /// the size the entry names for that partition, hex (empty when they are the same).
    pub consistency: Vec<String>,
}

/// What a bundle's directory proof established.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirectoryReport {
    /// The directory's origin.
    pub origin: String,
    /// The directory checkpoint's tree size.
    pub tree_size: u64,
    /// Its root, hex.
    pub root: String,
    /// The directory entry's sequence.
    pub seq: u64,
    /// The partition the bundle is of, as the entry names it.
    pub partition: u16,
    /// The partition's tree size the entry names (at least the bundle checkpoint's).
    pub partition_size: u64,
}

/// What a bundle's entries are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionKind {
    /// The events of one invocation of one tenant.
    Invocation,
    /// The events of one session of one tenant.
    Session,
    /// Entries chosen by ledger sequence, with no claim about them.
    Entries,
}

/// The bundle's claim about its entries (checked against every entry, `docs/evidence-bundles.md` §4.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// What kind of selection.
    pub kind: SelectionKind,
    /// The tenant (invocation and session selections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The invocation or session id (invocation and session selections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl Selection {
    /// The events of invocation `id` of `tenant`.
    pub fn invocation(tenant: &str, id: &str) -> Self {
        Self {
            kind: SelectionKind::Invocation,
            tenant: Some(tenant.to_owned()),
            id: Some(id.to_owned()),
        }
    }

    /// The events of session `id` of `tenant`.
    pub fn session(tenant: &str, id: &str) -> Self {
        Self {
            kind: SelectionKind::Session,
            tenant: Some(tenant.to_owned()),
            id: Some(id.to_owned()),
        }
    }

    /// Entries chosen by sequence.
    pub fn entries() -> Self {
        Self {
            kind: SelectionKind::Entries,
            tenant: None,
            id: None,
        }
    }

    /// The tenant and id an invocation or session selection must carry, `None` for `entries`.
    fn claim(&self) -> Result<Option<(&str, &str)>> {
        match (self.kind, self.tenant.as_deref(), self.id.as_deref()) {
            (SelectionKind::Entries, None, None) => Ok(None),
            (SelectionKind::Entries, _, _) => Err(malformed("an entries selection has no tenant or id")),
            (_, Some(tenant), Some(id)) => Ok(Some((tenant, id))),
            _ => Err(malformed(
                "an invocation or session selection needs a tenant and an id",
            )),
        }
    }
}

/// One entry with its proof and the payload blobs carried for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleEntry {
    /// The ATL_LEDGER sequence; the leaf index is `seq - 1`.
    pub seq: u64,
    /// Base64 of the entry's canonical bytes.
    pub entry: String,
    /// The audit path from the leaf to the checkpoint's root, hex.
    pub inclusion_proof: Vec<String>,
    /// Payload blobs (nonce || content) of this entry's own payload references.
    pub payloads: Vec<BundlePayload>,
}

/// One payload blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundlePayload {
    /// The blob id of one of the entry's payload references.
    pub blob_id: String,
    /// Base64 of the whole blob: the 32-byte nonce, then the content.
    pub blob: String,
}

/// The consistency proof from a checkpoint the auditor holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleConsistency {
    /// The auditor's signed checkpoint note.
    pub old_checkpoint: String,
    /// The consistency path from its size to the bundle checkpoint's size, hex.
    pub proof: Vec<String>,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::MalformedBundle {
        reason: reason.into(),
    }
}

impl EvidenceBundle {
    /// The file form: the RFC 8785 serialization of the document and one line feed.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let value = serde_json::to_value(self).map_err(|e| malformed(e.to_string()))?;
        let mut bytes = toolledger_wire::jcs::to_vec(&value).map_err(|e| malformed(e.to_string()))?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Reads the file form; anything but exactly [`EvidenceBundle::to_bytes`] of the document it holds
    /// is refused. Checks the shape only: [`verify_bundle`] checks the evidence.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bundle: Self = serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
        if bundle.to_bytes()? != bytes {
            return Err(malformed(
                "the file is not the RFC 8785 form of its document followed by one line feed",
            ));
        }
        Ok(bundle)
    }
}

/// What verification established about a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BundleReport {
    /// The checkpoint's origin (the log's name).
    pub origin: String,
    /// The checkpoint's tree size.
    pub tree_size: u64,
    /// The checkpoint's root, hex.
    pub root: String,
    /// The names of the trusted keys whose signatures verified.
    pub signed_by: Vec<String>,
    /// The selection every entry was checked against.
    pub selection: Selection,
    /// The entries, as proven.
    pub entries: Vec<EntryReport>,
    /// The held checkpoint the bundle was proven consistent with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consistent_with: Option<HeldCheckpoint>,
    /// Under a witness policy: which of its witnesses cosigned the checkpoint (the quorum was met,
    /// or the bundle would not have verified).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witnesses: Option<WitnessVerdict>,
    /// The directory checkpoint that commits to the bundle's, when the bundle carries its proof.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<DirectoryReport>,
}

impl BundleReport {
    /// Payload references whose bytes were checked against their commitment.
    pub fn payloads_checked(&self) -> usize {
        self.entries
            .iter()
            .flat_map(|e| &e.payloads)
            .filter(|p| p.included)
            .count()
    }

    /// Payload references whose commitment is proven but whose bytes are not in the bundle.
    pub fn payloads_not_included(&self) -> usize {
        self.entries
            .iter()
            .flat_map(|e| &e.payloads)
            .filter(|p| !p.included)
            .count()
    }
}

/// One proven entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryReport {
    /// The ledger sequence.
    pub seq: u64,
    /// `SHA-256(0x00 || entry)`, hex.
    pub leaf_hash: String,
    /// The CloudEvents `type`.
    pub class: Option<String>,
    /// The CloudEvents `id`.
    pub event_id: Option<String>,
    /// The CloudEvents `time`.
    pub time: Option<String>,
    /// The entry's payload references.
    pub payloads: Vec<PayloadReport>,
}

/// One payload reference of a proven entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PayloadReport {
    /// The JSON Pointer of the payload in the event.
    pub path: String,
    /// The blob.
    pub blob_id: String,
    /// The commitment (proven by the entry's inclusion).
    pub commitment: String,
    /// Content bytes.
    pub size: u64,
    /// Media type.
    pub content_type: String,
    /// Whether the bundle carried the blob and it matched the commitment.
    pub included: bool,
}

/// A checkpoint the auditor held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldCheckpoint {
    /// Its size.
    pub size: u64,
    /// Its root, hex.
    pub root: String,
}

fn decode_base64(text: &str, what: &str) -> Result<Vec<u8>> {
    let bytes = BASE64
        .decode(text)
        .map_err(|e| malformed(format!("{what} is not base64: {e}")))?;
    // The engine already refuses non-zero trailing bits; re-encoding states the rule outright.
    if BASE64.encode(&bytes) != text {
        return Err(malformed(format!("{what} is not canonical base64")));
    }
    Ok(bytes)
}

fn decode_hashes(hexes: &[String], what: &str) -> Result<Vec<Hash>> {
    hexes
        .iter()
        .map(|text| {
            parse_hash(text)
                .filter(|hash| hex(hash) == *text)
                .ok_or_else(|| malformed(format!("{what}: {text:?} is not a lowercase hex hash")))
        })
        .collect()
}

fn open_note(note: &str, verifiers: &Verifiers, which: &'static str) -> Result<(Checkpoint, Vec<String>)> {
    let untrusted = |reason: String| Error::BundleCheckpointUntrusted { which, reason };
    let verified = verifiers.verify(note).map_err(|e| untrusted(e.to_string()))?;
    let checkpoint = Checkpoint::parse_body(&verified.text).map_err(|e| untrusted(e.to_string()))?;
    let names = verified.signatures.into_iter().map(|s| s.name).collect();
    Ok((checkpoint, names))
}

/// The first of `candidates` that is a string.
fn first_string<'a>(candidates: &[Option<&'a Value>]) -> Option<&'a str> {
    candidates.iter().flatten().find_map(|v| v.as_str())
}

/// Checks an entry's event against the selection (`docs/evidence-bundles.md` §4.4).
fn check_selection(selection: &Selection, event: &serde_json::Map<String, Value>) -> Result<(), String> {
    let claim = match selection.claim() {
        Ok(Some(claim)) => claim,
        Ok(None) => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let (tenant, id) = claim;
    let found_tenant = event.get("tenant").and_then(Value::as_str);
    if found_tenant != Some(tenant) {
        return Err(format!(
            "its tenant {found_tenant:?} is not the selection's {tenant:?}"
        ));
    }
    let data = event.get("data").and_then(Value::as_object);
    let found = match selection.kind {
        SelectionKind::Invocation => first_string(&[
            event.get("invocationid"),
            data.and_then(|d| d.get("invocation_id")),
            event.get("subject"),
        ]),
        SelectionKind::Session => {
            first_string(&[event.get("sessionid"), data.and_then(|d| d.get("session_id"))])
        }
        SelectionKind::Entries => return Ok(()),
    };
    if found == Some(id) {
        Ok(())
    } else {
        Err(format!(
            "it belongs to {kind} {found:?}, not {id:?}",
            kind = if selection.kind == SelectionKind::Session {
                "session"
            } else {
                "invocation"
            }
        ))
    }
}

fn sha256_commitment(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// Verifies one entry: range, inclusion, JSON, selection, payloads.
fn verify_entry(
    bundled: &BundleEntry,
    checkpoint: &Checkpoint,
    selection: &Selection,
) -> Result<EntryReport> {
    let seq = bundled.seq;
    let rejected = |reason: String| Error::BundleEntryRejected { seq, reason };
    if seq == 0 || seq > checkpoint.size {
        return Err(rejected(format!(
            "outside the checkpoint's tree of size {}",
            checkpoint.size
        )));
    }
    let bytes = decode_base64(&bundled.entry, &format!("entry of seq {seq}"))?;
    let leaf = leaf_hash(&bytes);
    let path = decode_hashes(&bundled.inclusion_proof, &format!("inclusion proof of seq {seq}"))?;
    verify_inclusion(&leaf, seq - 1, checkpoint.size, &path, &checkpoint.root)
        .map_err(|e| rejected(format!("not included under the signed root: {e}")))?;

    let value: Value = serde_json::from_slice(&bytes).map_err(|e| rejected(format!("not JSON: {e}")))?;
    let (Some(event), Some(ledger)) = (
        value.get("event").and_then(Value::as_object),
        value.get("ledger").and_then(Value::as_object),
    ) else {
        return Err(rejected(
            "not a ledger entry (event and ledger objects)".to_owned(),
        ));
    };
    check_selection(selection, event).map_err(rejected)?;

    let refs: Vec<PayloadRef> = match ledger.get("payload_refs") {
        None => Vec::new(),
        Some(refs) => serde_json::from_value(refs.clone())
            .map_err(|e| rejected(format!("malformed payload_refs: {e}")))?,
    };
    let mut included = BTreeSet::new();
    for payload in &bundled.payloads {
        let payload_rejected = |reason: &str| Error::BundlePayloadRejected {
            seq,
            blob_id: payload.blob_id.clone(),
            reason: reason.to_owned(),
        };
        let Some(reference) = refs.iter().find(|r| r.blob_id == payload.blob_id) else {
            return Err(payload_rejected("not one of the entry's payload references"));
        };
        if !included.insert(payload.blob_id.as_str()) {
            return Err(payload_rejected("included twice"));
        }
        let blob = decode_base64(&payload.blob, &format!("blob {}", payload.blob_id))?;
        if sha256_commitment(&blob) != reference.commitment {
            return Err(payload_rejected("the blob does not match the entry's commitment"));
        }
        if blob.len() < NONCE_LEN || (blob.len() - NONCE_LEN) as u64 != reference.size {
            return Err(payload_rejected(
                "the blob's content size is not the entry's size",
            ));
        }
    }
    let text = |name: &str| event.get(name).and_then(Value::as_str).map(str::to_owned);
    Ok(EntryReport {
        seq,
        leaf_hash: hex(&leaf),
        class: text("type"),
        event_id: text("id"),
        time: text("time"),
        payloads: refs
            .into_iter()
            .map(|r| PayloadReport {
                included: included.contains(r.blob_id.as_str()),
                path: r.path,
                blob_id: r.blob_id,
                commitment: r.commitment,
                size: r.size,
                content_type: r.content_type,
            })
            .collect(),
    })
}

/// Verifies a bundle's directory proof against its (verified) `checkpoint`.
fn verify_directory(
    directory: &BundleDirectory,
    checkpoint: &Checkpoint,
    verifiers: &Verifiers,
) -> Result<DirectoryReport> {
    let rejected = |reason: String| Error::BundleDirectoryRejected { reason };
    let (signed, _) = open_note(&directory.checkpoint, verifiers, "directory checkpoint")?;
    let seq = directory.seq;
    if seq == 0 || seq > signed.size {
        return Err(rejected(format!(
            "entry {seq} is outside the directory's tree of size {}",
            signed.size
        )));
    }
    let bytes = decode_base64(&directory.entry, "directory entry")?;
    let path = decode_hashes(&directory.inclusion_proof, "directory inclusion proof")?;
    verify_inclusion(&leaf_hash(&bytes), seq - 1, signed.size, &path, &signed.root).map_err(|e| {
        rejected(format!(
            "entry {seq} is not included under the directory's root: {e}"
        ))
    })?;
    let entry = DirectoryEntry::parse(&bytes).map_err(|e| rejected(e.to_string()))?;
    if entry.to_bytes().ok().as_deref() != Some(&bytes[..]) {
        return Err(rejected(format!(
            "entry {seq} is not in its canonical form (RFC 8785)"
        )));
    }
    // The directory is this ledger's: its origin is its first partition's (the ledger's) plus
    // `/directory`; it names every partition once, in order, each under its own origin; and the
    // bundle's log is one of them.
    let ledger_origin = entry
        .partitions
        .first()
        .map(|r| r.origin.as_str())
        .unwrap_or_default();
    let partitions = u16::try_from(entry.partitions.len())
        .ok()
        .and_then(|count| Partitions::new(count).ok())
        .filter(|partitions| partitions.count() > 1)
        .ok_or_else(|| rejected(format!("entry {seq} names {} partitions", entry.partitions.len())))?;
    if let Some(problem) = entry.shape_problem(partitions, ledger_origin) {
        return Err(rejected(format!("entry {seq}: {problem}")));
    }
    if signed.origin != directory::origin(ledger_origin) {
        return Err(rejected(format!(
            "the directory checkpoint is of log {:?}, not the directory of {ledger_origin:?}",
            signed.origin
        )));
    }
    let reference = entry
        .partitions
        .iter()
        .find(|r| r.origin == checkpoint.origin)
        .ok_or_else(|| {
            rejected(format!(
                "entry {seq} names no partition of log {:?}",
                checkpoint.origin
            ))
        })?;
    let named_root: Hash = decode_base64(&reference.root, "the directory entry's root")?
        .try_into()
        .map_err(|_| rejected("the directory entry's root is not 32 bytes".to_owned()))?;
    if reference.size < checkpoint.size {
        return Err(rejected(format!(
            "entry {seq} names size {} of {:?}, older than the bundle's {}",
            reference.size, checkpoint.origin, checkpoint.size
        )));
    }
    let consistency = decode_hashes(&directory.consistency, "directory consistency proof")?;
    verify_consistency(
        checkpoint.size,
        reference.size,
        &consistency,
        &checkpoint.root,
        &named_root,
    )
    .map_err(|e| {
        rejected(format!(
            "the bundle's tree of size {} is not a prefix of the one entry {seq} names (size {}): {e}",
            checkpoint.size, reference.size
        ))
    })?;
    Ok(DirectoryReport {
        origin: signed.origin,
        tree_size: signed.size,
        root: hex(&signed.root),
        seq,
        partition: reference.partition,
        partition_size: reference.size,
    })
}

/// Checks `note`'s cosignatures under `policy`: the verdict when the quorum is met,
/// [`Error::WitnessQuorum`] when it is not, [`Error::BundleCheckpointUntrusted`] when a listed
/// witness's line does not verify.
pub fn check_witnesses(note: &str, size: u64, policy: &WitnessPolicy) -> Result<WitnessVerdict> {
    let verdict = policy.check(note).map_err(|e| Error::BundleCheckpointUntrusted {
        which: "checkpoint",
        reason: e.to_string(),
    })?;
    if !verdict.met() {
        return Err(Error::WitnessQuorum {
            size,
            have: verdict.cosigned_by.len(),
            quorum: verdict.quorum,
            of: verdict.of,
            cosigned_by: verdict.names(),
        });
    }
    Ok(verdict)
}

/// Verifies a bundle file offline with the trusted verifier keys (`docs/evidence-bundles.md` §4),
/// and, given a witness policy, that enough of its witnesses cosigned the checkpoint.
/// CPU-bound (hashing every entry and blob): call it from a blocking thread in async code.
pub fn verify_bundle(
    bytes: &[u8],
    verifiers: &Verifiers,
    policy: Option<&WitnessPolicy>,
) -> Result<BundleReport> {
    let bundle = EvidenceBundle::from_bytes(bytes)?;
    if bundle.format != FORMAT {
        return Err(malformed(format!("format {:?} is not {FORMAT:?}", bundle.format)));
    }
    bundle.selection.claim()?;
    let (checkpoint, signed_by) = open_note(&bundle.checkpoint, verifiers, "checkpoint")?;
    let witnesses = policy
        .map(|policy| check_witnesses(&bundle.checkpoint, checkpoint.size, policy))
        .transpose()?;
    if bundle.entries.is_empty() {
        return Err(malformed("no entries"));
    }
    if bundle.entries.windows(2).any(|w| w[0].seq >= w[1].seq) {
        return Err(malformed("entries are not in strictly increasing seq order"));
    }
    let entries = bundle
        .entries
        .iter()
        .map(|entry| verify_entry(entry, &checkpoint, &bundle.selection))
        .collect::<Result<Vec<_>>>()?;

    let consistent_with = match &bundle.consistency {
        None => None,
        Some(consistency) => {
            let (old, _) = open_note(&consistency.old_checkpoint, verifiers, "old checkpoint")?;
            let inconsistent = |reason: String| Error::BundleNotConsistent {
                old_size: old.size,
                new_size: checkpoint.size,
                reason,
            };
            if old.origin != checkpoint.origin {
                return Err(inconsistent(format!(
                    "the old checkpoint is of log {:?}, the bundle's of {:?}",
                    old.origin, checkpoint.origin
                )));
            }
            let path = decode_hashes(&consistency.proof, "consistency proof")?;
            verify_consistency(old.size, checkpoint.size, &path, &old.root, &checkpoint.root)
                .map_err(|e| inconsistent(e.to_string()))?;
            Some(HeldCheckpoint {
                size: old.size,
                root: hex(&old.root),
            })
        }
    };
    let directory = bundle
        .directory
        .as_ref()
        .map(|directory| verify_directory(directory, &checkpoint, verifiers))
        .transpose()?;
    Ok(BundleReport {
        origin: checkpoint.origin,
        tree_size: checkpoint.size,
        root: hex(&checkpoint.root),
        signed_by,
        selection: bundle.selection,
        entries,
        consistent_with,
        witnesses,
        directory,
    })
}

/// What to put in a bundle.
#[derive(Debug, Clone)]
pub struct BundleRequest {
    /// The claim the entries are checked against.
    pub selection: Selection,
    /// The ledger sequences of the entries (any order; duplicates are dropped).
    pub seqs: Vec<u64>,
    /// A signed checkpoint note the auditor holds: the bundle then proves its tree is a prefix of the
    /// bundle's.
    pub since_checkpoint: Option<String>,
    /// Where payload blobs are read from; `None` leaves payload bytes out (commitments stay).
    pub blobs: Option<BlobStore>,
    /// Prove in the newest checkpoint these witnesses cosigned enough of; `None` takes the newest
    /// checkpoint, with whatever cosignatures it has.
    pub witness_policy: Option<WitnessPolicy>,
    /// The directory's log, in a partitioned ledger: the bundle then carries the proof that the
    /// newest signed directory checkpoint commits to its checkpoint (proving in the checkpoint the
    /// directory names, when the newest is not recorded there yet).
    pub directory: Option<ProveSource>,
}

/// A payload whose bytes a bundle could not carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PayloadLeftOut {
    /// The entry's ledger sequence.
    pub seq: u64,
    /// The blob.
    pub blob_id: String,
    /// Why (erased or missing from the store).
    pub reason: String,
}

/// A bundle just built, with its verification report.
#[derive(Debug, Clone)]
pub struct BuiltBundle {
    /// The bundle.
    pub bundle: EvidenceBundle,
    /// Its file form.
    pub bytes: Vec<u8>,
    /// What [`verify_bundle`] established about it.
    pub report: BundleReport,
    /// Payloads asked for but not carried.
    pub payloads_left_out: Vec<PayloadLeftOut>,
}

/// Reads an entry's tenant and payload references (the entry came from the ledger, so it is checked
/// like any other input).
fn tenant_and_refs(seq: u64, bytes: &[u8]) -> Result<(Tenant, Vec<PayloadRef>)> {
    let rejected = |reason: String| Error::BundleEntryRejected { seq, reason };
    let entry = toolledger_wire::LedgerEntry::parse(bytes).map_err(|e| rejected(e.to_string()))?;
    let tenant = entry
        .event
        .extension_str("tenant")
        .ok_or_else(|| rejected("the event has no tenant".to_owned()))?;
    let tenant = Tenant::parse(tenant).map_err(|e| rejected(e.to_string()))?;
    Ok((tenant, entry.ledger.payload_refs))
}

async fn payload_blobs(
    store: &BlobStore,
    seq: u64,
    bytes: &[u8],
    left_out: &mut Vec<PayloadLeftOut>,
) -> Result<Vec<BundlePayload>> {
    let (tenant, refs) = tenant_and_refs(seq, bytes)?;
    let mut payloads = Vec::with_capacity(refs.len());
    for reference in refs {
        let unavailable = |reason: String| Error::BundlePayloadUnavailable {
            seq,
            blob_id: reference.blob_id.clone(),
            reason,
        };
        let blob = match store.fetch_raw(&tenant, &reference.blob_id).await {
            Ok(blob) => blob,
            Err(toolledger_ledger::Error::PayloadMissing { .. }) => {
                left_out.push(PayloadLeftOut {
                    seq,
                    blob_id: reference.blob_id.clone(),
                    reason: "not in the blob store (erased or missing)".to_owned(),
                });
                continue;
            }
            Err(error) => return Err(unavailable(toolledger_ledger::with_causes(&error))),
        };
        // A blob that no longer matches its commitment is tampering in the store: say so rather than
        // write a bundle that cannot verify.
        let blob = tokio::task::spawn_blocking(move || {
            let commitment = sha256_commitment(&blob);
            (blob, commitment)
        })
        .await
        .map_err(|e| unavailable(e.to_string()))?;
        if blob.1 != reference.commitment {
            return Err(unavailable(format!(
                "the stored blob has commitment {}, the entry {}",
                blob.1, reference.commitment
            )));
        }
        payloads.push(BundlePayload {
            blob_id: reference.blob_id,
            blob: BASE64.encode(&blob.0),
        });
    }
    Ok(payloads)
}

/// The newest signed directory checkpoint, and what the entry it ends with names for one log.
struct DirectoryAnchor {
    signed: Signed,
    reference: CheckpointRef,
}

impl DirectoryAnchor {
    fn named_root(&self) -> Result<Hash> {
        BASE64
            .decode(&self.reference.root)
            .ok()
            .and_then(|root| Hash::try_from(root).ok())
            .ok_or_else(|| Error::BundleDirectoryRejected {
                reason: format!(
                    "the directory names root {:?}, not 32 bytes of base64",
                    self.reference.root
                ),
            })
    }
}

/// The directory's newest signed checkpoint and its last entry's reference to the log `origin`.
async fn directory_anchor(
    js: &jetstream::Context,
    directory: &ProveSource,
    origin: &str,
) -> Result<DirectoryAnchor> {
    let trusted = prove::checkpoints(js, directory).await?;
    let signed = trusted.last().cloned().ok_or_else(|| Error::NoCheckpoint {
        wanted: "of the directory".to_owned(),
    })?;
    let bytes = toolledger_ledger::message(js, &directory.ledger_stream, signed.checkpoint.size).await?;
    let entry = DirectoryEntry::parse(&bytes).map_err(|e| Error::BundleDirectoryRejected {
        reason: format!("directory entry {}: {e}", signed.checkpoint.size),
    })?;
    let reference = entry
        .partitions
        .into_iter()
        .find(|r| r.origin == origin)
        .ok_or_else(|| Error::BundleDirectoryRejected {
            reason: format!("the directory names no partition of log {origin:?}"),
        })?;
    Ok(DirectoryAnchor { signed, reference })
}

/// Entries a bundle reads and proves at once.
const ENTRIES_IN_FLIGHT: usize = 16;

/// Builds a bundle of the entries at `request.seqs`, proved in the newest trusted checkpoint, and
/// verifies it with [`verify_bundle`] before returning it. What an HTTP handler or the CLI calls once
/// it has looked the sequences up.
pub async fn build_bundle(
    js: &jetstream::Context,
    source: &ProveSource,
    request: &BundleRequest,
) -> Result<BuiltBundle> {
    let seqs: BTreeSet<u64> = request.seqs.iter().copied().collect();
    let (Some(&first), Some(&last_wanted)) = (seqs.first(), seqs.last()) else {
        return Err(Error::EmptyBundle);
    };
    let last = toolledger_ledger::last_sequence(js, &source.ledger_stream).await?;
    if first == 0 || last_wanted > last {
        let seq = if first == 0 { first } else { last_wanted };
        return Err(Error::NoSuchEntry { seq, last });
    }
    let trusted = prove::checkpoints(js, source).await?;
    // With a witness policy, the newest checkpoint enough of its witnesses cosigned; without one,
    // or when none of the newest meets it (the verification below then says so), the newest.
    let (signed, checkpoint_note, _) = prove::witnessed_in(
        js,
        &trusted,
        request.witness_policy.as_ref(),
        last_wanted,
        &mut Vec::new(),
    )
    .await?
    .ok_or_else(|| Error::NoCheckpoint {
        wanted: format!("covering seq {last_wanted}"),
    })?;
    let (signed, checkpoint_note, anchor) = match &request.directory {
        None => (signed, checkpoint_note, None),
        Some(directory) => {
            let anchor = directory_anchor(js, directory, &signed.checkpoint.origin).await?;
            if anchor.reference.size >= signed.checkpoint.size {
                (signed, checkpoint_note, Some(anchor))
            } else if anchor.reference.size >= last_wanted && request.witness_policy.is_none() {
                // The directory has not recorded the newest checkpoint yet: prove in the one it has.
                let named_root = anchor.named_root()?;
                let named = trusted
                    .iter()
                    .find(|s| s.seq == anchor.reference.checkpoint_seq)
                    .filter(|s| s.checkpoint.size == anchor.reference.size && s.checkpoint.root == named_root)
                    .ok_or_else(|| Error::BundleDirectoryRejected {
                        reason: format!(
                            "the directory names checkpoint seq {} of {} at size {}, which is not a trusted \
                             checkpoint of that size and root (toolledger verify says why)",
                            anchor.reference.checkpoint_seq, signed.checkpoint.origin, anchor.reference.size
                        ),
                    })?;
                let note = cosigned_note(js, &named.subject, &named.note, named.checkpoint.size).await?;
                (named, note, Some(anchor))
            } else {
                return Err(Error::NoCheckpoint {
                    wanted: format!(
                        "of {} recorded in the directory covering seq {} (its newest entry names size {}; \
                         the directory records each partition's checkpoints as they are signed: try again shortly)",
                        signed.checkpoint.origin,
                        last_wanted.max(signed.checkpoint.size),
                        anchor.reference.size
                    ),
                });
            }
        }
    };
    let size = signed.checkpoint.size;
    let held = match &request.since_checkpoint {
        None => None,
        Some(note) => {
            let (held, _) = open_note(note, &source.verifiers, "held checkpoint")?;
            if held.origin != signed.checkpoint.origin {
                return Err(Error::BundleCheckpointUntrusted {
                    which: "held checkpoint",
                    reason: format!(
                        "it is of log {:?}, the ledger's checkpoints of {:?}",
                        held.origin, signed.checkpoint.origin
                    ),
                });
            }
            if held.size > size {
                return Err(Error::NoCheckpoint {
                    wanted: format!("covering the held checkpoint of size {}", held.size),
                });
            }
            Some((note.clone(), held))
        }
    };

    let reader = prove::tree_reader(js, source, size, &signed.checkpoint.root).await?;
    // Entries are read and proved several at a time (each is a bundle or message read and a few tile
    // reads, so one at a time a long session's bundle waits on round trips), kept in ledger order.
    let proved: Vec<(BundleEntry, Vec<PayloadLeftOut>)> = futures::stream::iter(seqs.iter().copied())
        .map(|seq| {
            let reader = &reader;
            async move {
                let inclusion = prove::inclusion_in(js, source, reader, signed, seq).await?;
                let mut left_out = Vec::new();
                let payloads = match &request.blobs {
                    Some(store) => {
                        payload_blobs(store, seq, inclusion.entry.as_bytes(), &mut left_out).await?
                    }
                    None => Vec::new(),
                };
                let entry = BundleEntry {
                    seq,
                    entry: BASE64.encode(inclusion.entry.as_bytes()),
                    inclusion_proof: inclusion.proof,
                    payloads,
                };
                Ok::<_, Error>((entry, left_out))
            }
        })
        .buffered(ENTRIES_IN_FLIGHT)
        .try_collect()
        .await?;
    let mut entries = Vec::with_capacity(proved.len());
    let mut payloads_left_out = Vec::new();
    for (entry, left_out) in proved {
        entries.push(entry);
        payloads_left_out.extend(left_out);
    }

    let consistency = match held {
        None => None,
        Some((note, held)) => {
            let ledger_root = if held.size == 0 {
                empty_root()
            } else {
                reader.root(held.size).await?
            };
            if ledger_root != held.root {
                return Err(Error::HeldCheckpointDiverges {
                    size: held.size,
                    held: hex(&held.root),
                    ledger: hex(&ledger_root),
                });
            }
            let proof =
                prove::consistency_in(&reader, held.size, size, &held.root, &signed.checkpoint.root).await?;
            Some(BundleConsistency {
                old_checkpoint: note,
                proof,
            })
        }
    };

    let directory = match (anchor, &request.directory) {
        (Some(anchor), Some(log)) => {
            let named_root = anchor.named_root()?;
            let to_named = if anchor.reference.size == size {
                Vec::new()
            } else {
                let named = prove::tree_reader(js, source, anchor.reference.size, &named_root).await?;
                prove::consistency_in(
                    &named,
                    size,
                    anchor.reference.size,
                    &signed.checkpoint.root,
                    &named_root,
                )
                .await?
            };
            let directory_reader = prove::tree_reader(
                js,
                log,
                anchor.signed.checkpoint.size,
                &anchor.signed.checkpoint.root,
            )
            .await?;
            let inclusion = prove::inclusion_in(
                js,
                log,
                &directory_reader,
                &anchor.signed,
                anchor.signed.checkpoint.size,
            )
            .await?;
            Some(BundleDirectory {
                checkpoint: anchor.signed.note.clone(),
                seq: inclusion.ledger_seq,
                entry: BASE64.encode(inclusion.entry.as_bytes()),
                inclusion_proof: inclusion.proof,
                consistency: to_named,
            })
        }
        _ => None,
    };
    let bundle = EvidenceBundle {
        format: FORMAT.to_owned(),
        selection: request.selection.clone(),
        checkpoint: checkpoint_note,
        entries,
        consistency,
        directory,
    };
    let bytes = bundle.to_bytes()?;
    let verifiers = source.verifiers.clone();
    let policy = request.witness_policy.clone();
    let (bytes, report) = tokio::task::spawn_blocking(move || {
        let report = verify_bundle(&bytes, &verifiers, policy.as_ref());
        (bytes, report)
    })
    .await
    .map_err(|e| Error::ProofDoesNotVerify {
        reason: format!("bundle check did not finish: {e}"),
    })?;
    Ok(BuiltBundle {
        bundle,
        bytes,
        report: report?,
        payloads_left_out,
    })
}
