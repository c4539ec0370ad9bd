//! The NATS contract (DESIGN §2): stream names, subjects, the configuration of every stream and bucket,
//! and the checks that a live one is no weaker.
//!
//! ```text
//! ensure_contract ─┬─ ATL_INBOUND_SOURCE inbound_source_config (empty; lets ATL_INBOUND dedupe nothing)
//!                  ├─ ATL_INBOUND      inbound_config     ─┐  (a live one that still dedupes is upgraded)
//!                  ├─ ATL_LEDGER       ledger_config       │ missing ─▶ create
//!                  ├─ ATL_LEDGER_P<K>  partition_ledger_config (K ≥ 1, one per further partition)
//!                  ├─ ATL_DIRECTORY    directory_config (more than one partition: crate::directory)
//!                  ├─ ATL_CHECKPOINTS  checkpoints_config  ├─ present ─▶ check_* ─▶ weaker? ─▶ Error::StreamConfigWeaker
//!                  ├─ ATL_COSIGNATURES cosignatures_config │
//!                  ├─ ATL_QUARANTINE   quarantine_config  ─┘            (never changed)
//!                  ├─ KV ATL_LEASES            leases_config   ─┐ missing ─▶ create
//!                  └─ OBJ ATL_PAYLOADS_<tenant> payloads_config ─┘ present ─▶ check_bucket
//! check_contract ── the same checks, read-only, every finding instead of the first
//! ```
//!
//! A live stream is never changed: when its configuration is weaker than the contract (it could drop,
//! truncate or lose a message, stop deduplicating, or let someone purge the ledger), the check names the
//! stream and the field, and an operator decides. One comparison, [`weaknesses`], serves every stream:
//! what it demands is read off the wanted configuration (a stream wanted with `deny_purge` is held to
//! no limits at all; one wanted unbounded may not grow a limit that drops messages).
//!
//! Immutability does not rest on these flags alone: a stream update can add limits. The shipped server
//! configurations (`deploy/nats/`) let only the offline admin update, purge or delete the ledger and
//! checkpoint streams; these checks catch what got through anyway.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{self, kv, object_store, stream};

use crate::partition::{Partition, Partitions};
use crate::{Error, Result, Tenant};

/// Producers' inbox: work-queue, gone once ingested.
pub const INBOUND: &str = "ATL_INBOUND";
/// Subjects of [`INBOUND`]: `atl.in.<tenant>.<event class>`.
pub const INBOUND_SUBJECTS: &str = "atl.in.>";
/// An empty stream that [`INBOUND`] sources from, for one reason: nats-server lets a stream
/// switch `Nats-Msg-Id` deduplication off (a duplicate window of 0) only when it has sources. One
/// stream shared by every tenant cannot dedupe on an id any producer may set: tenant A publishing
/// tenant B's next id would get B's real event acknowledged as a duplicate and dropped. ATL_INBOUND
/// therefore dedupes nothing; ingest drops repeats by identity (tenant, source, id) and digest.
pub const INBOUND_SOURCE: &str = "ATL_INBOUND_SOURCE";
/// The immutable ledger, the source of truth.
pub const LEDGER: &str = "ATL_LEDGER";
/// Subjects of [`LEDGER`]: `atl.ledger.<tenant>.<event class>`.
pub const LEDGER_SUBJECTS: &str = "atl.ledger.>";
/// Signed checkpoints.
pub const CHECKPOINTS: &str = "ATL_CHECKPOINTS";
/// The subject of [`CHECKPOINTS`].
pub const CHECKPOINTS_SUBJECT: &str = "atl.checkpoints";
/// Witnesses' cosignatures of the checkpoints (DESIGN §10): ATL_CHECKPOINTS is immutable and gets
/// each checkpoint as soon as it is signed, so the cosignatures, which come later (and some much
/// later, from a witness that was down), are kept here, one message per witness and checkpoint.
pub const COSIGNATURES: &str = "ATL_COSIGNATURES";
/// Subjects of [`COSIGNATURES`]: `atl.cosignatures[.<log>].<checkpoint size>.<witness key id, 8 hex
/// digits>`, the log named as its checkpoints' subject names it (see [`cosignatures_prefix`]).
pub const COSIGNATURES_SUBJECTS: &str = "atl.cosignatures.>";

/// Where the cosignatures of the checkpoints signed on `checkpoint_subject` go: p0's
/// `atl.checkpoints` gives `atl.cosignatures`, a partition's `atl.checkpoints.<K>` and the
/// directory's `atl.checkpoints.directory` give `atl.cosignatures.<K>` and
/// `atl.cosignatures.directory`. Each log's cosignatures have their own subjects, a token longer
/// than p0's, so p0's filters (`atl.cosignatures.<size>.*`) never match another log's. A subject
/// outside `atl.checkpoints[.<log>]` (a copy's, `verify --checkpoints`) is taken as p0's, as every
/// checkpoint was before logs were named.
pub fn cosignatures_prefix(checkpoint_subject: &str) -> String {
    match checkpoint_subject.strip_prefix(CHECKPOINTS_SUBJECT) {
        Some(log) if log.is_empty() || log.starts_with('.') => format!("atl.cosignatures{log}"),
        _ => "atl.cosignatures".to_owned(),
    }
}

/// The subject of one witness's cosignature of the checkpoint of `size` signed on
/// `checkpoint_subject`.
pub fn cosignature_subject(checkpoint_subject: &str, size: u64, witness_key_id: u32) -> String {
    format!(
        "{}.{size}.{witness_key_id:08x}",
        cosignatures_prefix(checkpoint_subject)
    )
}

/// The filter of every cosignature of that log's checkpoint of `size`.
pub fn cosignatures_of(checkpoint_subject: &str, size: u64) -> String {
    format!("{}.{size}.*", cosignatures_prefix(checkpoint_subject))
}

/// The filter of every cosignature of that log by one witness (its latest is the last message).
pub fn cosignatures_by(checkpoint_subject: &str, witness_key_id: u32) -> String {
    format!(
        "{}.*.{witness_key_id:08x}",
        cosignatures_prefix(checkpoint_subject)
    )
}

/// The checkpoint size a cosignature subject of that log names.
pub fn cosigned_size(checkpoint_subject: &str, subject: &str) -> Option<u64> {
    let rest = subject.strip_prefix(&cosignatures_prefix(checkpoint_subject))?;
    let (size, key_id) = rest.strip_prefix('.')?.split_once('.')?;
    if key_id.contains('.') {
        return None;
    }
    size.parse().ok()
}

/// Rejected messages with their reasons.
pub const QUARANTINE: &str = "ATL_QUARANTINE";
/// Subjects of [`QUARANTINE`]: `atl.quarantine.<tenant>.<reason>`.
pub const QUARANTINE_SUBJECTS: &str = "atl.quarantine.>";
/// KV bucket of single-writer leases.
pub const LEASES_BUCKET: &str = "ATL_LEASES";
/// The stream behind the [`LEASES_BUCKET`] KV bucket.
pub const LEASES_STREAM: &str = "KV_ATL_LEASES";
/// Stream metadata key where `init` records the replica count the contract was created with, so a
/// later change of the replica set is caught without knowing the deployment's settings.
pub const REPLICAS_METADATA: &str = "toolledger.replicas";
/// How long quarantined messages are kept unless configured otherwise.
pub const DEFAULT_QUARANTINE_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// Duplicate window of the ledger, checkpoint and quarantine streams. On a ledger without atomic
/// batches ingest sets `Nats-Msg-Id` (the leaf hash) on every ledger message and chains appends with
/// `Nats-Expected-Last-Msg-Id`, which needs the previous id inside the window; its retries happen
/// within seconds.
pub const WRITER_DUPLICATE_WINDOW: Duration = Duration::from_secs(2 * 60);

/// Object store bucket where a tenant's producers upload payloads larger than a NATS message.
pub fn payloads_bucket(tenant: &Tenant) -> String {
    format!("ATL_PAYLOADS_{tenant}")
}

/// The stream behind a tenant's [`payloads_bucket`].
pub fn payloads_stream(tenant: &Tenant) -> String {
    format!("OBJ_ATL_PAYLOADS_{tenant}")
}

/// The tunable parts of ATL_INBOUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundSettings {
    /// Size at which a full inbox refuses new messages (discard new); never drops.
    pub max_bytes: i64,
    /// Stream replicas (3 in a cluster).
    pub replicas: usize,
}

impl Default for InboundSettings {
    fn default() -> Self {
        Self {
            // Generous: a backlog of hours at a few thousand events a second, far from a small disk's limit.
            max_bytes: 4 * 1024 * 1024 * 1024,
            replicas: 1,
        }
    }
}

/// The tunable parts of the whole contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractSettings {
    /// ATL_INBOUND's settings.
    pub inbound: InboundSettings,
    /// Replicas of the ledger, checkpoint and quarantine streams and the buckets (3 in a cluster).
    pub replicas: usize,
    /// How long ATL_QUARANTINE keeps a rejected message.
    pub quarantine_max_age: Duration,
    /// Tenants whose `ATL_PAYLOADS_<tenant>` upload bucket the contract includes.
    pub tenants: Vec<Tenant>,
    /// The ledger's partitions: one ledger stream each ([`crate::partition`]).
    pub partitions: Partitions,
}

impl Default for ContractSettings {
    fn default() -> Self {
        Self {
            inbound: InboundSettings::default(),
            replicas: 1,
            quarantine_max_age: DEFAULT_QUARANTINE_MAX_AGE,
            tenants: Vec::new(),
            partitions: Partitions::default(),
        }
    }
}

fn replicas_metadata(replicas: usize) -> HashMap<String, String> {
    HashMap::from([(REPLICAS_METADATA.to_owned(), replicas.to_string())])
}

/// The ATL_INBOUND stream configuration: a work queue that refuses when full and dedupes nothing
/// (its duplicate window is 0, allowed because it sources [`INBOUND_SOURCE`]).
pub fn inbound_config(settings: &InboundSettings) -> stream::Config {
    stream::Config {
        name: INBOUND.to_owned(),
        description: Some("toolledger producers' inbox: atl.in.<tenant>.<event class>".to_owned()),
        subjects: vec![INBOUND_SUBJECTS.to_owned()],
        storage: stream::StorageType::File,
        retention: stream::RetentionPolicy::WorkQueue,
        discard: stream::DiscardPolicy::New,
        max_bytes: settings.max_bytes,
        duplicate_window: Duration::ZERO,
        sources: Some(vec![stream::Source {
            name: INBOUND_SOURCE.to_owned(),
            ..Default::default()
        }]),
        num_replicas: settings.replicas,
        metadata: replicas_metadata(settings.replicas),
        ..Default::default()
    }
}

/// The [`INBOUND_SOURCE`] configuration: empty, and kept so: its only subject is its own name,
/// which no producer may publish to, and it refuses any message (one byte at most, discard new).
pub fn inbound_source_config(settings: &InboundSettings) -> stream::Config {
    stream::Config {
        name: INBOUND_SOURCE.to_owned(),
        description: Some(
            "empty: ATL_INBOUND sources it so that its duplicate window may be 0 (no Nats-Msg-Id dedupe)"
                .to_owned(),
        ),
        storage: stream::StorageType::File,
        discard: stream::DiscardPolicy::New,
        max_bytes: 1,
        num_replicas: settings.replicas,
        metadata: replicas_metadata(settings.replicas),
        ..Default::default()
    }
}

/// The shape shared by the streams only ingest writes and nobody may shrink: file storage, limits
/// retention, no limit of any kind, messages neither deleted nor purged.
fn immutable_config(name: &str, description: &str, subject: &str, replicas: usize) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        subjects: vec![subject.to_owned()],
        storage: stream::StorageType::File,
        retention: stream::RetentionPolicy::Limits,
        max_age: Duration::ZERO,
        max_messages: -1,
        max_bytes: -1,
        max_messages_per_subject: -1,
        deny_delete: true,
        deny_purge: true,
        allow_rollup: false,
        duplicate_window: WRITER_DUPLICATE_WINDOW,
        num_replicas: replicas,
        metadata: replicas_metadata(replicas),
        ..Default::default()
    }
}

/// The ATL_LEDGER stream configuration: immutable, unlimited, taking atomic batches (ADR-50), so
/// ingest lands a batch of entries at the expected position or not at all.
pub fn ledger_config(settings: &ContractSettings) -> stream::Config {
    partition_ledger_config(settings, Partition::ZERO)
}

/// A partition's ledger stream configuration: [`ledger_config`] under the partition's name and
/// subjects.
pub fn partition_ledger_config(settings: &ContractSettings, partition: Partition) -> stream::Config {
    let description = match partition.index() {
        0 => "toolledger ledger, the source of truth: atl.ledger.<tenant>.<event class>".to_owned(),
        _ => format!(
            "toolledger ledger partition {partition}, the source of truth for its tenants: {}.<tenant>.<event class>",
            partition.subject_prefix()
        ),
    };
    stream::Config {
        allow_atomic_publish: true,
        ..immutable_config(
            &partition.stream(),
            &description,
            &partition.subjects(),
            settings.replicas,
        )
    }
}

/// The ATL_DIRECTORY stream configuration (a ledger of more than one partition,
/// [`crate::directory`]): immutable, unlimited, taking atomic batches like a ledger stream.
pub fn directory_config(settings: &ContractSettings) -> stream::Config {
    stream::Config {
        allow_atomic_publish: true,
        ..immutable_config(
            crate::directory::STREAM,
            "toolledger directory: each entry commits to every ledger partition's latest checkpoint",
            crate::directory::SUBJECT,
            settings.replicas,
        )
    }
}

/// The ATL_CHECKPOINTS stream configuration: immutable, unlimited.
pub fn checkpoints_config(settings: &ContractSettings) -> stream::Config {
    let mut config = immutable_config(
        CHECKPOINTS,
        "toolledger signed checkpoints (C2SP signed notes)",
        CHECKPOINTS_SUBJECT,
        settings.replicas,
    );
    // Partitions after p0 sign on `atl.checkpoints.<K>`; one partition keeps the single subject.
    if settings.partitions.count() > 1 {
        config.subjects.push(format!("{CHECKPOINTS_SUBJECT}.*"));
    }
    config
}

/// The ATL_COSIGNATURES stream configuration: immutable and unlimited like the checkpoints it
/// completes. Each message is the cosigned checkpoint note (the log's note with one witness's
/// signature line appended), so it can be checked on its own.
pub fn cosignatures_config(settings: &ContractSettings) -> stream::Config {
    immutable_config(
        COSIGNATURES,
        "toolledger witness cosignatures of the checkpoints: atl.cosignatures[.<log>].<size>.<witness key id>",
        COSIGNATURES_SUBJECTS,
        settings.replicas,
    )
}

/// The ATL_QUARANTINE stream configuration: rejected messages kept for `quarantine_max_age`.
pub fn quarantine_config(settings: &ContractSettings) -> stream::Config {
    stream::Config {
        name: QUARANTINE.to_owned(),
        description: Some("toolledger rejected messages: atl.quarantine.<tenant>.<reason>".to_owned()),
        subjects: vec![QUARANTINE_SUBJECTS.to_owned()],
        storage: stream::StorageType::File,
        retention: stream::RetentionPolicy::Limits,
        max_age: settings.quarantine_max_age,
        max_messages: -1,
        max_bytes: -1,
        max_messages_per_subject: -1,
        duplicate_window: WRITER_DUPLICATE_WINDOW.min(settings.quarantine_max_age),
        num_replicas: settings.replicas,
        metadata: replicas_metadata(settings.replicas),
        ..Default::default()
    }
}

/// The `ATL_LEASES` KV bucket: one value per key (a lease is only ever compared-and-set).
pub fn leases_config(settings: &ContractSettings) -> kv::Config {
    kv::Config {
        bucket: LEASES_BUCKET.to_owned(),
        description: "toolledger single-writer leases".to_owned(),
        history: 1,
        storage: stream::StorageType::File,
        num_replicas: settings.replicas,
        ..Default::default()
    }
}

/// A tenant's `ATL_PAYLOADS_<tenant>` object store bucket.
pub fn payloads_config(tenant: &Tenant, settings: &ContractSettings) -> object_store::Config {
    object_store::Config {
        bucket: payloads_bucket(tenant),
        description: Some(format!(
            "toolledger uploads of tenant {tenant}, deleted by ingest once copied"
        )),
        storage: stream::StorageType::File,
        num_replicas: settings.replicas,
        ..Default::default()
    }
}

/// One way a live configuration is weaker than the contract, or a part of the contract that is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The stream (`KV_…` and `OBJ_…` for buckets).
    pub stream: String,
    /// The configuration field (`max_age`, `deny_purge`, …), or `stream` when it is missing.
    pub field: String,
    /// What the live stream has.
    pub actual: String,
    /// What the contract needs.
    pub required: String,
}

impl Finding {
    fn new(stream: &str, field: &str, actual: impl Into<String>, required: impl Into<String>) -> Self {
        Self {
            stream: stream.to_owned(),
            field: field.to_owned(),
            actual: actual.into(),
            required: required.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stream {}: {} is {}, needs {}",
            self.stream, self.field, self.actual, self.required
        )
    }
}

impl From<Finding> for Error {
    fn from(finding: Finding) -> Self {
        Error::StreamConfigWeaker {
            stream: finding.stream,
            field: finding.field,
            actual: finding.actual,
            required: finding.required,
        }
    }
}

/// Every way `live` is weaker than `wanted`, in a fixed order. The shared comparison behind every
/// `check_*`: what it demands is read off `wanted`.
///
/// - `storage`, `retention`, a `discard` of new, and the subjects must match.
/// - `max_age`: none when none is wanted, else at least the wanted age.
/// - `max_msgs`, `max_bytes`, `max_msgs_per_subject`: a limit where none is wanted is weaker when the
///   stream is wanted immutable (`deny_purge`), or when reaching it would drop instead of refusing.
/// - `duplicate_window` and `num_replicas` at least the wanted ones; `num_replicas` equal to the count
///   recorded in the stream's metadata at creation ([`REPLICAS_METADATA`]).
/// - `deny_delete` and `deny_purge` set when wanted; `allow_rollup_hdrs` (a rollup purges),
///   `allow_msg_ttl`, `no_ack` and `sealed` unset unless wanted; no async persistence, no subject
///   transform, mirror or sources (they would let another stream write into this one).
pub fn weaknesses(live: &stream::Config, wanted: &stream::Config) -> Vec<Finding> {
    let mut found = Vec::new();
    let mut weaker = |field: &str, actual: String, required: String| {
        found.push(Finding::new(&live.name, field, actual, required));
    };
    let immutable = wanted.deny_purge;

    if live.storage != wanted.storage {
        weaker(
            "storage",
            format!("{:?}", live.storage),
            format!("{:?}", wanted.storage),
        );
    }
    if live.retention != wanted.retention {
        weaker(
            "retention",
            format!("{:?}", live.retention),
            format!("{:?}", wanted.retention),
        );
    }
    if wanted.discard == stream::DiscardPolicy::New && live.discard != stream::DiscardPolicy::New {
        weaker(
            "discard",
            format!("{:?}", live.discard),
            "new (a full stream refuses, never drops)".to_owned(),
        );
    }
    if wanted.max_age.is_zero() && !live.max_age.is_zero() {
        weaker(
            "max_age",
            format!("{:?}", live.max_age),
            "none (an age limit drops messages)".to_owned(),
        );
    } else if !live.max_age.is_zero() && live.max_age < wanted.max_age {
        weaker(
            "max_age",
            format!("{:?}", live.max_age),
            format!("none or at least {:?}", wanted.max_age),
        );
    }
    let drops = immutable || live.discard != stream::DiscardPolicy::New;
    for (field, live_limit, wanted_limit) in [
        ("max_msgs", live.max_messages, wanted.max_messages),
        ("max_bytes", live.max_bytes, wanted.max_bytes),
    ] {
        if wanted_limit <= 0 && live_limit > 0 && drops {
            weaker(
                field,
                live_limit.to_string(),
                "none (a limit truncates the stream)".to_owned(),
            );
        }
    }
    if live.max_messages_per_subject > 0 && (immutable || !live.discard_new_per_subject) {
        weaker(
            "max_msgs_per_subject",
            live.max_messages_per_subject.to_string(),
            if immutable {
                "none".to_owned()
            } else {
                "none, or discard_new_per_subject".to_owned()
            },
        );
    }
    // A window of 0 means no dedupe only on a stream with sources; on any other the server takes
    // its default.
    let no_dedupe =
        wanted.duplicate_window.is_zero() && wanted.sources.as_ref().is_some_and(|s| !s.is_empty());
    if no_dedupe && !live.duplicate_window.is_zero() {
        weaker(
            "duplicate_window",
            format!("{:?}", live.duplicate_window),
            "0 (a Nats-Msg-Id any tenant may set must not suppress another tenant's message; \
             `toolledger init` switches it off)"
                .to_owned(),
        );
    } else if live.duplicate_window < wanted.duplicate_window {
        weaker(
            "duplicate_window",
            format!("{:?}", live.duplicate_window),
            format!("at least {:?}", wanted.duplicate_window),
        );
    }
    if live.num_replicas < wanted.num_replicas {
        weaker(
            "num_replicas",
            live.num_replicas.to_string(),
            format!("at least {}", wanted.num_replicas),
        );
    } else if let Some(recorded) = live
        .metadata
        .get(REPLICAS_METADATA)
        .and_then(|r| r.parse::<usize>().ok())
        .filter(|r| *r != live.num_replicas)
    {
        weaker(
            "num_replicas",
            live.num_replicas.to_string(),
            format!("{recorded} (the replica set it was created with)"),
        );
    }
    let missing: Vec<_> = wanted
        .subjects
        .iter()
        .filter(|s| !live.subjects.contains(s))
        .collect();
    if !missing.is_empty() {
        weaker(
            "subjects",
            format!("{:?}", live.subjects),
            format!("{:?}", wanted.subjects),
        );
    }
    for (field, live_flag, wanted_flag) in [
        ("deny_delete", live.deny_delete, wanted.deny_delete),
        ("deny_purge", live.deny_purge, wanted.deny_purge),
    ] {
        if wanted_flag && !live_flag {
            weaker(field, "false".to_owned(), "true".to_owned());
        }
    }
    for (field, live_flag, wanted_flag, why) in [
        (
            "allow_rollup_hdrs",
            live.allow_rollup,
            wanted.allow_rollup,
            "a rollup purges",
        ),
        (
            "allow_msg_ttl",
            live.allow_message_ttl,
            wanted.allow_message_ttl,
            "per-message TTLs delete",
        ),
        ("no_ack", live.no_ack, wanted.no_ack, "writers need publish acks"),
        (
            "sealed",
            live.sealed,
            wanted.sealed,
            "a sealed stream takes no writes",
        ),
    ] {
        if live_flag && !wanted_flag {
            weaker(field, "true".to_owned(), format!("false ({why})"));
        }
    }
    if live.persist_mode == Some(stream::PersistenceMode::Async)
        && wanted.persist_mode != Some(stream::PersistenceMode::Async)
    {
        weaker(
            "persist_mode",
            "async".to_owned(),
            "default (ack after the message is stored)".to_owned(),
        );
    }
    for (field, set) in [
        ("subject_transform", live.subject_transform.is_some()),
        ("mirror", live.mirror.is_some()),
    ] {
        if set {
            weaker(field, "set".to_owned(), "none".to_owned());
        }
    }
    let source_names = |config: &stream::Config| -> Vec<String> {
        let mut names: Vec<String> = config.sources.iter().flatten().map(|s| s.name.clone()).collect();
        names.sort();
        names
    };
    // Only the sources wanted (ATL_INBOUND's empty one): any other would write into the stream.
    let (live_sources, wanted_sources) = (source_names(live), source_names(wanted));
    if live_sources != wanted_sources {
        weaker(
            "sources",
            format!("{live_sources:?}"),
            format!("{wanted_sources:?}"),
        );
    }
    found
}

/// What `live` lacks of `wanted` that costs speed and not safety: atomic batches (`allow_atomic`),
/// without which ingest appends with one chained publish per entry. Not a weakness: a server before
/// 2.12 has no such setting, and the chained path keeps every guarantee. `init` turns it on for a
/// ledger that lacks it; `doctor` and `verify` report it.
pub fn shortfalls(live: &stream::Config, wanted: &stream::Config) -> Vec<Finding> {
    let mut found = Vec::new();
    if wanted.allow_atomic_publish && !live.allow_atomic_publish {
        found.push(Finding::new(
            &live.name,
            "allow_atomic",
            "false",
            "true (ingest appends atomic batches; without them one chained publish per entry, \
             slower; needs nats-server 2.12+, then `toolledger init` as admin turns it on)",
        ));
    }
    found
}

fn first_weakness(live: &stream::Config, wanted: &stream::Config) -> Result<()> {
    match weaknesses(live, wanted).into_iter().next() {
        Some(finding) => Err(finding.into()),
        None => Ok(()),
    }
}

/// Checks a live ATL_INBOUND configuration against the wanted one; the first weaker field is the error.
/// Work-queue retention, discard new, no age limit, no dedupe (and the source that allows it).
pub fn check_inbound(live: &stream::Config, wanted: &stream::Config) -> Result<()> {
    first_weakness(live, wanted)
}

/// Checks a live ATL_LEDGER configuration: no limits, deny_delete, deny_purge, no rollups, the
/// duplicate window ingest's `Nats-Expected-Last-Msg-Id` chain needs, the replica set it was created with.
pub fn check_ledger(live: &stream::Config, wanted: &stream::Config) -> Result<()> {
    first_weakness(live, wanted)
}

/// Checks a live ATL_CHECKPOINTS configuration: as for the ledger.
pub fn check_checkpoints(live: &stream::Config, wanted: &stream::Config) -> Result<()> {
    first_weakness(live, wanted)
}

/// Checks a live ATL_COSIGNATURES configuration: as for the checkpoints.
pub fn check_cosignatures(live: &stream::Config, wanted: &stream::Config) -> Result<()> {
    first_weakness(live, wanted)
}

/// Checks a live ATL_QUARANTINE configuration: file storage, an age limit no shorter than wanted, no
/// size limit that drops.
pub fn check_quarantine(live: &stream::Config, wanted: &stream::Config) -> Result<()> {
    first_weakness(live, wanted)
}

/// Checks the stream behind a KV or object store bucket: file storage and enough replicas.
pub fn check_bucket(live: &stream::Config, replicas: usize) -> Result<()> {
    match bucket_weaknesses(live, replicas).into_iter().next() {
        Some(finding) => Err(finding.into()),
        None => Ok(()),
    }
}

fn bucket_weaknesses(live: &stream::Config, replicas: usize) -> Vec<Finding> {
    let mut found = Vec::new();
    if live.storage != stream::StorageType::File {
        found.push(Finding::new(
            &live.name,
            "storage",
            format!("{:?}", live.storage),
            "File",
        ));
    }
    if live.num_replicas < replicas {
        found.push(Finding::new(
            &live.name,
            "num_replicas",
            live.num_replicas.to_string(),
            format!("at least {replicas}"),
        ));
    }
    found
}

/// What [`ensure_inbound`] and [`ensure_contract`] did to one part of the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// It did not exist and was created.
    Created,
    /// It existed and its configuration meets the contract.
    Verified,
    /// It existed and met the contract; what it lacked that only costs speed was turned on (the
    /// field names, e.g. `allow_atomic`).
    Upgraded(String),
    /// It existed and meets the contract, but lacks what only costs speed and could not be given it
    /// (an older server, or no permission to update it): why.
    Lacking(String),
}

/// What kind of JetStream object a part of the contract is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    /// A stream.
    Stream,
    /// A key-value bucket.
    KeyValue,
    /// An object store bucket.
    ObjectStore,
}

impl fmt::Display for PartKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stream => "stream",
            Self::KeyValue => "key-value bucket",
            Self::ObjectStore => "object store",
        })
    }
}

/// One part of the contract and what [`ensure_contract`] did to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredPart {
    /// What it is.
    pub kind: PartKind,
    /// Its name (`ATL_LEDGER`, `ATL_LEASES`, `ATL_PAYLOADS_acme`).
    pub name: String,
    /// Created or verified.
    pub outcome: Ensured,
}

/// Creates ATL_INBOUND with the default settings, or checks the live one.
pub async fn ensure_inbound(js: &jetstream::Context) -> Result<Ensured> {
    ensure_inbound_with(js, &InboundSettings::default()).await
}

/// Creates ATL_INBOUND (and [`INBOUND_SOURCE`] first) with `settings`, or checks that the live
/// ones are no weaker. A live ATL_INBOUND that still dedupes on `Nats-Msg-Id` — every one created
/// before the window was 0 — is upgraded: its source added, its window set to 0.
pub async fn ensure_inbound_with(js: &jetstream::Context, settings: &InboundSettings) -> Result<Ensured> {
    ensure_stream(js, inbound_source_config(settings), first_weakness).await?;
    ensure_inbound_stream(js, settings).await
}

/// ATL_INBOUND alone, once its source exists.
async fn ensure_inbound_stream(js: &jetstream::Context, settings: &InboundSettings) -> Result<Ensured> {
    let wanted = inbound_config(settings);
    if let Some(live) = live_config(js, INBOUND).await?
        && (!live.duplicate_window.is_zero() || live.sources.as_ref().is_none_or(Vec::is_empty))
    {
        let upgraded = stream::Config {
            duplicate_window: Duration::ZERO,
            sources: wanted.sources.clone(),
            ..live
        };
        // Nothing else may be weaker: the upgrade changes only the window and the sources.
        check_inbound(&upgraded, &wanted)?;
        let info = stream_request(js, "UPDATE", &upgraded).await?;
        check_inbound(&info.config, &wanted)?;
        return Ok(Ensured::Upgraded(
            "duplicate_window 0 (no Nats-Msg-Id dedupe across tenants), sources".to_owned(),
        ));
    }
    ensure_stream(js, wanted, check_inbound).await
}

/// Creates or updates a stream with `config` as it is, by the JetStream API request itself: the
/// client leaves a duplicate window of 0 out of its request, and the server then takes 2 minutes.
async fn stream_request(
    js: &jetstream::Context,
    verb: &str,
    config: &stream::Config,
) -> Result<stream::Info> {
    let name = &config.name;
    let context = || format!("{} stream {name}", verb.to_lowercase());
    let mut body = serde_json::to_value(config).map_err(|e| Error::jetstream(context(), e))?;
    if let Some(body) = body.as_object_mut() {
        let nanos = u64::try_from(config.duplicate_window.as_nanos()).unwrap_or(u64::MAX);
        body.insert("duplicate_window".to_owned(), nanos.into());
    }
    let response: jetstream::response::Response<stream::Info> = js
        .request(format!("STREAM.{verb}.{name}"), &body)
        .await
        .map_err(|e| Error::jetstream(context(), e))?;
    match response {
        jetstream::response::Response::Ok(info) => Ok(info),
        jetstream::response::Response::Err { error } => Err(Error::jetstream(context(), error)),
    }
}

/// Creates every stream and bucket of the contract that is missing and checks every one that exists,
/// in the order of DESIGN §2; the first part weaker than the contract is the error (and the parts
/// after it are left alone).
pub async fn ensure_contract(
    js: &jetstream::Context,
    settings: &ContractSettings,
) -> Result<Vec<EnsuredPart>> {
    let stream_part = |name: &str, outcome| EnsuredPart {
        kind: PartKind::Stream,
        name: name.to_owned(),
        outcome,
    };
    // The source first: ATL_INBOUND sources it.
    let source = ensure_stream(js, inbound_source_config(&settings.inbound), first_weakness).await?;
    let mut parts = vec![
        stream_part(INBOUND_SOURCE, source),
        stream_part(INBOUND, ensure_inbound_stream(js, &settings.inbound).await?),
    ];
    // Checkpoints of further partitions go to `atl.checkpoints.<K>`: a checkpoint stream made for
    // one partition gains that subject (adding a subject drops nothing), before any partition's
    // ledger stream is made.
    let widened = widen_checkpoints(js, settings).await?;
    for (wanted, check) in stream_configs(settings) {
        let name = wanted.name.clone();
        let outcome = match ensure_stream(js, wanted, check).await? {
            Ensured::Verified if name == CHECKPOINTS && widened => {
                Ensured::Upgraded(format!("subject {CHECKPOINTS_SUBJECT}.*"))
            }
            outcome => outcome,
        };
        parts.push(stream_part(&name, outcome));
    }

    let leases = leases_config(settings);
    let outcome = ensure_bucket(js, LEASES_STREAM, settings.replicas, || async {
        js.create_key_value(leases)
            .await
            .map(drop)
            .map_err(|e| Error::jetstream(format!("create key-value bucket {LEASES_BUCKET}"), e))
    })
    .await?;
    parts.push(EnsuredPart {
        kind: PartKind::KeyValue,
        name: LEASES_BUCKET.to_owned(),
        outcome,
    });

    for tenant in &settings.tenants {
        let config = payloads_config(tenant, settings);
        let bucket = config.bucket.clone();
        let outcome = ensure_bucket(js, &payloads_stream(tenant), settings.replicas, || async {
            js.create_object_store(config)
                .await
                .map(drop)
                .map_err(|e| Error::jetstream(format!("create object store {bucket}"), e))
        })
        .await?;
        parts.push(EnsuredPart {
            kind: PartKind::ObjectStore,
            name: payloads_bucket(tenant),
            outcome,
        });
    }
    Ok(parts)
}

type StreamCheck = fn(&stream::Config, &stream::Config) -> Result<()>;

/// The streams after ATL_INBOUND, each with its check.
fn stream_configs(settings: &ContractSettings) -> Vec<(stream::Config, StreamCheck)> {
    let ledgers = settings.partitions.all().map(|partition| {
        (
            partition_ledger_config(settings, partition),
            check_ledger as StreamCheck,
        )
    });
    let directory =
        (settings.partitions.count() > 1).then(|| (directory_config(settings), check_ledger as StreamCheck));
    ledgers
        .chain(directory)
        .chain([
            (checkpoints_config(settings), check_checkpoints as StreamCheck),
            (cosignatures_config(settings), check_cosignatures),
            (quarantine_config(settings), check_quarantine),
        ])
        .collect()
}

/// Every way the live contract is weaker than the default settings, or missing; creates nothing.
/// For `verify` and `doctor`. See [`check_contract_with`] for a deployment with other settings.
pub async fn check_contract(js: &jetstream::Context) -> Vec<Finding> {
    check_contract_with(js, &ContractSettings::default()).await
}

/// Every way the live contract is weaker than `settings` require, or missing; creates nothing.
/// A stream that cannot be read is a finding on the field `stream`.
pub async fn check_contract_with(js: &jetstream::Context, settings: &ContractSettings) -> Vec<Finding> {
    let mut found = Vec::new();
    let wanted = [
        inbound_source_config(&settings.inbound),
        inbound_config(&settings.inbound),
    ]
    .into_iter()
    .chain(stream_configs(settings).into_iter().map(|(config, _)| config));
    for wanted in wanted {
        match live_config(js, &wanted.name).await {
            Ok(Some(live)) => found.extend(weaknesses(&live, &wanted)),
            Ok(None) => found.push(missing(&wanted.name)),
            Err(error) => found.push(unreadable(&wanted.name, &error)),
        }
    }
    let buckets =
        std::iter::once(LEASES_STREAM.to_owned()).chain(settings.tenants.iter().map(payloads_stream));
    for name in buckets {
        match live_config(js, &name).await {
            Ok(Some(live)) => found.extend(bucket_weaknesses(&live, settings.replicas)),
            Ok(None) => found.push(missing(&name)),
            Err(error) => found.push(unreadable(&name, &error)),
        }
    }
    found
}

/// What the live ledger streams of `settings.partitions` (and the directory over several) lack
/// that only costs speed ([`shortfalls`]), for `doctor`; nothing for a stream that cannot be read
/// (that is [`check_contract_with`]'s finding).
pub async fn check_shortfalls(js: &jetstream::Context, settings: &ContractSettings) -> Vec<Finding> {
    let mut wanted: Vec<stream::Config> = settings
        .partitions
        .all()
        .map(|partition| partition_ledger_config(settings, partition))
        .collect();
    if settings.partitions.count() > 1 {
        wanted.push(directory_config(settings));
    }
    let mut found = Vec::new();
    for wanted in wanted {
        if let Ok(Some(live)) = live_config(js, &wanted.name).await {
            found.extend(shortfalls(&live, &wanted));
        }
    }
    found
}

fn missing(name: &str) -> Finding {
    Finding::new(name, "stream", "missing", "present (run toolledger init)")
}

fn unreadable(name: &str, error: &Error) -> Finding {
    Finding::new(name, "stream", format!("unreadable: {error}"), "readable")
}

/// Refuses a partition count other than the one the ledger was made with, which would move
/// tenants: a ledger stream of a partition at or past the count exists (made with more), or the
/// partition streams that exist are fewer than the count while one of them holds entries (made
/// with fewer: its tenants would move). A ledger not made yet, or made with this count, passes, and
/// so does one whose every partition stream is still empty.
pub async fn check_partition_count(js: &jetstream::Context, partitions: Partitions) -> Result<()> {
    let wrong = |reason: String| Error::PartitionCount {
        configured: partitions.count(),
        reason,
    };
    let beyond = Partition::new(partitions.count()).stream();
    if live_config(js, &beyond).await?.is_some() {
        return Err(wrong(format!(
            "{beyond} exists: the ledger was made with more partitions"
        )));
    }
    let (mut made, mut entries) = (0u16, 0u64);
    for partition in partitions.all() {
        let name = partition.stream();
        match js.get_stream(&name).await {
            Ok(live) => {
                made += 1;
                entries += live.cached_info().state.messages;
            }
            Err(error) if is_not_found(&error) => break,
            Err(error) => return Err(Error::jetstream(format!("stream info {name}"), error)),
        }
    }
    if made > 0 && made < partitions.count() && entries > 0 {
        let missing = Partition::new(made).stream();
        return Err(wrong(format!(
            "{missing} is missing while the {made} partition stream(s) before it hold {entries} entries: \
             the ledger was made with fewer partitions"
        )));
    }
    Ok(())
}

/// Adds `atl.checkpoints.*` to a live ATL_CHECKPOINTS that lacks it when the ledger has more than
/// one partition; whether it did.
async fn widen_checkpoints(js: &jetstream::Context, settings: &ContractSettings) -> Result<bool> {
    let wanted = checkpoints_config(settings);
    let Some(mut live) = live_config(js, CHECKPOINTS).await? else {
        return Ok(false);
    };
    let missing: Vec<String> = wanted
        .subjects
        .iter()
        .filter(|subject| !live.subjects.contains(subject))
        .cloned()
        .collect();
    if settings.partitions.count() == 1 || missing.is_empty() {
        return Ok(false);
    }
    live.subjects.extend(missing);
    js.update_stream(live)
        .await
        .map_err(|e| Error::jetstream(format!("adding the partitions' subject to {CHECKPOINTS}"), e))?;
    Ok(true)
}

/// The live configuration of a stream, `None` when it does not exist.
async fn live_config(js: &jetstream::Context, name: &str) -> Result<Option<stream::Config>> {
    match js.get_stream(name).await {
        Ok(live) => Ok(Some(live.cached_info().config.clone())),
        Err(error) if is_not_found(&error) => Ok(None),
        Err(error) => Err(Error::jetstream(format!("stream info {name}"), error)),
    }
}

async fn ensure_stream(
    js: &jetstream::Context,
    wanted: stream::Config,
    check: StreamCheck,
) -> Result<Ensured> {
    let name = wanted.name.clone();
    match live_config(js, &name).await? {
        Some(live) => {
            check(&live, &wanted)?;
            let lacking = shortfalls(&live, &wanted);
            if lacking.is_empty() {
                return Ok(Ensured::Verified);
            }
            let fields = lacking
                .iter()
                .map(|f| f.field.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            // Only turns on what `shortfalls` names: nothing a stronger contract check would catch.
            let upgraded = stream::Config {
                allow_atomic_publish: live.allow_atomic_publish || wanted.allow_atomic_publish,
                ..live
            };
            Ok(match js.update_stream(upgraded).await {
                Ok(info) => {
                    // The update resent the live configuration as this client reads it: were
                    // anything lost on the way, the same contract check says so.
                    check(&info.config, &wanted)?;
                    if shortfalls(&info.config, &wanted).is_empty() {
                        Ensured::Upgraded(fields)
                    } else {
                        Ensured::Lacking(format!(
                            "{fields}: the server does not keep it (atomic batches need nats-server 2.12+)"
                        ))
                    }
                }
                Err(error) => Ensured::Lacking(format!("{fields}: updating {name} failed: {error}")),
            })
        }
        None => {
            stream_request(js, "CREATE", &wanted).await?;
            Ok(Ensured::Created)
        }
    }
}

async fn ensure_bucket<F, Fut>(
    js: &jetstream::Context,
    stream: &str,
    replicas: usize,
    create: F,
) -> Result<Ensured>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    match live_config(js, stream).await? {
        Some(live) => {
            check_bucket(&live, replicas)?;
            Ok(Ensured::Verified)
        }
        None => {
            create().await?;
            Ok(Ensured::Created)
        }
    }
}

fn is_not_found(error: &jetstream::context::GetStreamError) -> bool {
    matches!(error.kind(), jetstream::context::GetStreamErrorKind::JetStream(e)
        if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Weaken = Box<dyn Fn(&mut stream::Config)>;

    /// Asserts that each weakening makes `check` fail naming exactly that field.
    fn assert_each_named(wanted: &stream::Config, check: StreamCheck, cases: Vec<(&str, Weaken)>) {
        for (field, weaken) in cases {
            let mut live = wanted.clone();
            weaken(&mut live);
            match check(&live, wanted) {
                Err(Error::StreamConfigWeaker {
                    stream, field: named, ..
                }) => {
                    assert_eq!(named, field);
                    assert_eq!(stream, wanted.name);
                }
                other => panic!("{} {field}: {other:?}", wanted.name),
            }
            let all = weaknesses(&live, wanted);
            assert_eq!(all.len(), 1, "{field}: {all:?}");
        }
    }

    #[test]
    fn contract_configs_pass_their_own_checks() {
        let settings = ContractSettings::default();
        let wanted = inbound_config(&InboundSettings::default());
        check_inbound(&wanted, &wanted).unwrap();
        assert_eq!(wanted.subjects, ["atl.in.>"]);
        assert_eq!(wanted.discard, stream::DiscardPolicy::New);
        assert_eq!(wanted.retention, stream::RetentionPolicy::WorkQueue);
        for (config, check) in stream_configs(&settings) {
            check(&config, &config).unwrap();
            assert!(weaknesses(&config, &config).is_empty());
        }
        let ledger = ledger_config(&settings);
        assert_eq!(ledger.subjects, ["atl.ledger.>"]);
        assert!(ledger.deny_delete && ledger.deny_purge && !ledger.allow_rollup);
        assert_eq!(ledger.duplicate_window, Duration::from_secs(120));
        assert_eq!(checkpoints_config(&settings).subjects, ["atl.checkpoints"]);
        let cosignatures = cosignatures_config(&settings);
        assert_eq!(cosignatures.subjects, ["atl.cosignatures.>"]);
        assert!(cosignatures.deny_delete && cosignatures.deny_purge);
        assert_eq!(
            cosignature_subject("atl.checkpoints", 42, 0xab),
            "atl.cosignatures.42.000000ab"
        );
        assert_eq!(
            cosignature_subject("atl.checkpoints.3", 42, 0xab),
            "atl.cosignatures.3.42.000000ab"
        );
        assert_eq!(
            cosignature_subject("atl.checkpoints.directory", 42, 0xab),
            "atl.cosignatures.directory.42.000000ab"
        );
        assert_eq!(
            cosignatures_of("atl.checkpoints.3", 42),
            "atl.cosignatures.3.42.*"
        );
        assert_eq!(
            cosignatures_by("atl.checkpoints", 0xab),
            "atl.cosignatures.*.000000ab"
        );
        assert_eq!(
            cosigned_size("atl.checkpoints", "atl.cosignatures.42.000000ab"),
            Some(42)
        );
        assert_eq!(
            cosigned_size("atl.checkpoints.3", "atl.cosignatures.3.42.000000ab"),
            Some(42)
        );
        assert_eq!(
            cosigned_size("atl.checkpoints.3", "atl.cosignatures.42.000000ab"),
            None
        );
        assert_eq!(
            cosigned_size("atl.checkpoints", "atl.cosignatures.3.42.000000ab"),
            None
        );
        assert_eq!(cosignatures_prefix("atl.checkpointsX"), "atl.cosignatures");
        assert_eq!(cosignatures_prefix("copy.checkpoints"), "atl.cosignatures");
        let quarantine = quarantine_config(&settings);
        assert_eq!(quarantine.max_age, Duration::from_secs(30 * 86_400));
        assert_eq!(quarantine.subjects, ["atl.quarantine.>"]);
        assert_eq!(leases_config(&settings).history, 1);
    }

    #[test]
    fn each_weaker_inbound_field_is_named() {
        let wanted = inbound_config(&InboundSettings::default());
        let cases: Vec<(&str, Weaken)> = vec![
            ("storage", Box::new(|c| c.storage = stream::StorageType::Memory)),
            (
                "retention",
                Box::new(|c| c.retention = stream::RetentionPolicy::Limits),
            ),
            ("discard", Box::new(|c| c.discard = stream::DiscardPolicy::Old)),
            ("max_age", Box::new(|c| c.max_age = Duration::from_secs(60))),
            (
                "max_msgs_per_subject",
                Box::new(|c| c.max_messages_per_subject = 5),
            ),
            (
                "duplicate_window",
                Box::new(|c| c.duplicate_window = Duration::from_secs(1)),
            ),
            (
                "subjects",
                Box::new(|c| c.subjects = vec!["atl.in.acme.>".into()]),
            ),
            ("no_ack", Box::new(|c| c.no_ack = true)),
            ("allow_rollup_hdrs", Box::new(|c| c.allow_rollup = true)),
            (
                "persist_mode",
                Box::new(|c| c.persist_mode = Some(stream::PersistenceMode::Async)),
            ),
        ];
        assert_each_named(&wanted, check_inbound, cases);
        // Limits that refuse rather than drop are the operator's to choose.
        let mut live = wanted.clone();
        live.max_bytes = 1024;
        live.max_messages = 10;
        check_inbound(&live, &wanted).unwrap();
    }

    fn immutable_cases() -> Vec<(&'static str, Weaken)> {
        vec![
            ("max_age", Box::new(|c| c.max_age = Duration::from_secs(86_400))),
            ("max_bytes", Box::new(|c| c.max_bytes = 1 << 30)),
            ("max_msgs", Box::new(|c| c.max_messages = 1_000_000)),
            (
                // Even refusing new messages is no good here: the ledger would stop taking entries.
                "max_bytes",
                Box::new(|c| {
                    c.max_bytes = 1 << 30;
                    c.discard = stream::DiscardPolicy::New;
                }),
            ),
            (
                "max_msgs_per_subject",
                Box::new(|c| {
                    c.max_messages_per_subject = 1;
                    c.discard_new_per_subject = true;
                    c.discard = stream::DiscardPolicy::New;
                }),
            ),
            ("deny_delete", Box::new(|c| c.deny_delete = false)),
            ("deny_purge", Box::new(|c| c.deny_purge = false)),
            ("allow_rollup_hdrs", Box::new(|c| c.allow_rollup = true)),
            ("allow_msg_ttl", Box::new(|c| c.allow_message_ttl = true)),
            ("num_replicas", Box::new(|c| c.num_replicas = 3)),
            ("sealed", Box::new(|c| c.sealed = true)),
            (
                "mirror",
                Box::new(|c| {
                    c.mirror = Some(stream::Source {
                        name: "OTHER".into(),
                        ..Default::default()
                    });
                }),
            ),
            (
                "sources",
                Box::new(|c| {
                    c.sources = Some(vec![stream::Source {
                        name: "OTHER".into(),
                        ..Default::default()
                    }]);
                }),
            ),
            (
                "retention",
                Box::new(|c| c.retention = stream::RetentionPolicy::Interest),
            ),
        ]
    }

    #[test]
    fn each_weaker_ledger_and_checkpoints_field_is_named() {
        let settings = ContractSettings::default();
        assert_each_named(&ledger_config(&settings), check_ledger, immutable_cases());
        assert_each_named(
            &checkpoints_config(&settings),
            check_checkpoints,
            immutable_cases(),
        );
        assert_each_named(
            &cosignatures_config(&settings),
            check_cosignatures,
            immutable_cases(),
        );
    }

    #[test]
    fn a_changed_replica_set_is_caught_both_ways() {
        let settings = ContractSettings {
            replicas: 3,
            ..ContractSettings::default()
        };
        let wanted = ledger_config(&settings);
        // Fewer replicas than the deployment asks for.
        let mut live = wanted.clone();
        live.num_replicas = 1;
        let found = weaknesses(&live, &wanted);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].field, "num_replicas");
        // More than it was created with (recorded in its metadata), against a default check.
        let mut live = wanted.clone();
        live.num_replicas = 5;
        let found = weaknesses(&live, &ledger_config(&ContractSettings::default()));
        assert_eq!(found[0].field, "num_replicas");
        assert!(found[0].required.contains('3'), "{}", found[0]);
        // As created: fine against the default settings too.
        assert!(weaknesses(&wanted, &ledger_config(&ContractSettings::default())).is_empty());
    }

    #[test]
    fn quarantine_keeps_messages_at_least_as_long_as_configured() {
        let settings = ContractSettings::default();
        let wanted = quarantine_config(&settings);
        let mut live = wanted.clone();
        live.max_age = Duration::ZERO;
        check_quarantine(&live, &wanted).unwrap();
        live.max_age = wanted.max_age * 2;
        check_quarantine(&live, &wanted).unwrap();
        let cases: Vec<(&str, Weaken)> = vec![
            ("max_age", Box::new(|c| c.max_age = Duration::from_secs(3_600))),
            ("max_bytes", Box::new(|c| c.max_bytes = 1 << 20)),
            ("storage", Box::new(|c| c.storage = stream::StorageType::Memory)),
        ];
        assert_each_named(&wanted, check_quarantine, cases);
    }

    #[test]
    fn findings_read_as_errors_naming_stream_and_field() {
        let settings = ContractSettings::default();
        let wanted = ledger_config(&settings);
        let mut live = wanted.clone();
        live.max_age = Duration::from_secs(60);
        live.deny_purge = false;
        let found = weaknesses(&live, &wanted);
        let fields: Vec<_> = found.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, ["max_age", "deny_purge"]);
        let text = Error::from(found[0].clone()).to_string();
        assert!(text.contains("ATL_LEDGER") && text.contains("max_age"), "{text}");
    }
}
