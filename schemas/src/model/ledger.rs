//! The data of the ledger's own shapes: the permission request the spec has no object for, and the
//! `toolledger.*` classes (DESIGN.md §3 "The ledger's own classes").
//!
//! Like the spec's objects they are open: unknown fields are kept in `extra`.

use super::{Object, UnknownValue, UnknownValues};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// `tool.permission.requested` data: a permission decision was asked for. The spec has no object for
/// the request, so the ledger defines this one (`schemas/ledger/permission-request.schema.json`); the
/// later decision carries the same `decision_id`.
///
/// Every field is optional: the official schemas require nothing of a request (they define no object
/// for it), so the ledger refuses none for a field it left out. Those the ledger expects
/// (`decision_id`, `invocation_id`, `permission_input`, `requested_at`) are reported missing instead
/// ([`crate::Data::missing_fields`], a `missing_field` anomaly).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionRequest {
    /// The Agent Tool schema version, when the producer gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    /// The decision this request will be answered by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
    /// The invocation asking (else the event's `invocationid` or `subject` names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The input the policy, approval or classifier evaluates (any JSON, `null` included); optional,
    /// as the spec defines no object for this class.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub permission_input: Option<Value>,
    /// The permission profile that applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_profile_ref: Option<String>,
    /// The permission mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Why permission is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Object>,
    /// When it was requested (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

impl PermissionRequest {
    /// The fields the ledger expects of a request that this one lacks, as JSON Pointers under `data`.
    pub fn missing_fields(&self) -> Vec<String> {
        [
            ("decision_id", self.decision_id.is_none()),
            ("invocation_id", self.invocation_id.is_none()),
            ("permission_input", self.permission_input.is_none()),
            ("requested_at", self.requested_at.is_none()),
        ]
        .into_iter()
        .filter(|(_, missing)| *missing)
        .map(|(field, _)| format!("/{field}"))
        .collect()
    }
}

/// `toolledger.access.read` data (`schemas/ledger/access-read.schema.json`): someone read invocation or
/// session data through the query service or CLI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessRead {
    /// The record's id. The CloudEvents `subject`.
    pub access_id: String,
    /// Who read: the token's principal (never the token itself).
    pub principal: String,
    /// Through which endpoint or tool, e.g. `GET /v1/invocations/{id}`.
    pub endpoint: String,
    /// The tenant whose data was read.
    pub tenant: String,
    /// The invocations read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_ids: Option<Vec<String>>,
    /// The sessions read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_ids: Option<Vec<String>>,
    /// The query, for search and SQL reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// How many rows were returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_count: Option<Number>,
    /// When (RFC 3339).
    pub read_at: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

/// `toolledger.quarantine.recorded` data (`schemas/ledger/quarantine-recorded.schema.json`): the receipt
/// ingest appends for a rejected message, so that rejections are tamper-evident too. It holds no
/// producer bytes, only facts about them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuarantineRecorded {
    /// The receipt's id. The CloudEvents `subject`.
    pub receipt_id: String,
    /// Digest of the message as received, `sha256:<hex>`.
    pub digest: String,
    /// Its size in bytes.
    pub size_bytes: Number,
    /// The tenant it came from (`_unroutable` when missing or unsafe).
    pub tenant: String,
    /// Why it was rejected, e.g. `schema_violation`, `unknown_class`, `duplicate_conflict`.
    pub reason: String,
    /// A detail a producer can act on (e.g. the failing JSON Pointer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The ATL_QUARANTINE subject it was stored under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_subject: Option<String>,
    /// Its sequence in ATL_QUARANTINE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_seq: Option<Number>,
    /// The ATL_INBOUND subject it arrived on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound_subject: Option<String>,
    /// The rejected event's `id`, when it parsed far enough to have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// The rejected event's `source`, when it parsed far enough to have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_source: Option<String>,
    /// When it was quarantined (RFC 3339).
    pub quarantined_at: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

/// `toolledger.erasure.completed` data (`schemas/ledger/erasure-completed.schema.json`): payload blobs
/// were erased. The commitments stay; the fact that the call happened is never erased.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErasureCompleted {
    /// The erasure's id. The CloudEvents `subject`.
    pub erasure_id: String,
    /// The tenant whose content was erased (the record itself is the ledger's, tenant `_system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The blobs deleted.
    pub blob_ids: Vec<String>,
    /// The invocations whose payloads were erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_ids: Option<Vec<String>>,
    /// The sessions whose payloads were erased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_ids: Option<Vec<String>>,
    /// Why, e.g. a data-subject request reference.
    pub reason: String,
    /// Under whose authority (a ticket, a legal basis, an administrator).
    pub authority: String,
    /// Who asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// When it completed (RFC 3339).
    pub completed_at: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

/// `toolledger.partitions.recorded` data (`schemas/ledger/partitions-recorded.schema.json`): how many
/// partitions the ledger has and the rule that puts each tenant in one (DESIGN §8), appended to p0
/// by its writer when the ledger has more than one, so a verifier reads from the ledger itself where
/// each tenant's events are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionsRecorded {
    /// The record's id (`partitions-<count>`). The CloudEvents `subject`.
    pub record_id: String,
    /// How many partitions.
    pub partitions: u16,
    /// The rule's name: `fnv1a32-mod` (tenants starting with `_` in p0; any other in FNV-1a 32 of
    /// its name's UTF-8 bytes, modulo `partitions`).
    pub rule: String,
    /// Each partition's stream, subjects, checkpoint subject and origin, p0 first.
    pub layout: Vec<PartitionLayout>,
    /// When it was recorded (RFC 3339).
    pub recorded_at: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

/// One partition's names in a [`PartitionsRecorded`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionLayout {
    /// Its index, 0 to `partitions` − 1.
    pub partition: u16,
    /// Its ledger stream.
    pub stream: String,
    /// Its checkpoints' subject on `ATL_CHECKPOINTS`.
    pub checkpoint_subject: String,
    /// Its checkpoints' origin.
    pub origin: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

/// The ledger's own shapes have no open vocabularies.
macro_rules! no_vocabularies {
    ($($ty:ty),*) => {$(
        impl UnknownValues for $ty {
            fn collect_unknown(&self, _at: &str, _out: &mut Vec<UnknownValue>) {}
        }
    )*};
}
no_vocabularies!(
    PermissionRequest,
    AccessRead,
    QuarantineRecorded,
    ErasureCompleted,
    PartitionsRecorded
);
