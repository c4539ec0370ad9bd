//! The NATS contract (DESIGN §2): stream names, subjects, and the ATL_INBOUND configuration.
//!
//! [`ensure_inbound`] creates ATL_INBOUND or checks a live one. A live stream is never changed: when
//! its configuration is weaker than the contract (it could drop or lose a producer's message, or stop
//! deduplicating), the check fails naming the field, and an operator decides.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::{Error, Result};

/// Producers' inbox: work-queue, gone once ingested.
pub const INBOUND: &str = "ATL_INBOUND";
/// Subjects of [`INBOUND`]: `atl.in.<tenant>.<event class>`.
pub const INBOUND_SUBJECTS: &str = "atl.in.>";
/// The immutable ledger, the source of truth.
pub const LEDGER: &str = "ATL_LEDGER";
/// Subjects of [`LEDGER`]: `atl.ledger.<tenant>.<event class>`.
pub const LEDGER_SUBJECTS: &str = "atl.ledger.>";
/// Signed checkpoints.
pub const CHECKPOINTS: &str = "ATL_CHECKPOINTS";
/// The subject of [`CHECKPOINTS`].
pub const CHECKPOINTS_SUBJECT: &str = "atl.checkpoints";
/// Rejected messages with their reasons.
pub const QUARANTINE: &str = "ATL_QUARANTINE";
/// Subjects of [`QUARANTINE`]: `atl.quarantine.<tenant>.<reason>`.
pub const QUARANTINE_SUBJECTS: &str = "atl.quarantine.>";
/// KV bucket of single-writer leases.
pub const LEASES_BUCKET: &str = "ATL_LEASES";

/// Object store bucket where a tenant's producers upload payloads larger than a NATS message.
pub fn payloads_bucket(tenant: &crate::Tenant) -> String {
    format!("ATL_PAYLOADS_{tenant}")
}

/// The tunable parts of ATL_INBOUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundSettings {
    /// Size at which a full inbox refuses new messages (discard new); never drops.
    pub max_bytes: i64,
    /// Window in which a repeated `Nats-Msg-Id` is acknowledged as a duplicate and not stored.
    pub duplicate_window: Duration,
    /// Stream replicas (3 in a cluster).
    pub replicas: usize,
}

impl Default for InboundSettings {
    fn default() -> Self {
        Self {
            // Generous: a backlog of hours at a few thousand events a second, far from a small disk's limit.
            max_bytes: 4 * 1024 * 1024 * 1024,
            // Longer than any producer's retry loop; ingest dedupes beyond it by identity and digest.
            duplicate_window: Duration::from_secs(10 * 60),
            replicas: 1,
        }
    }
}

/// The ATL_INBOUND stream configuration.
pub fn inbound_config(settings: &InboundSettings) -> stream::Config {
    stream::Config {
        name: INBOUND.to_owned(),
        description: Some("toolledger producers' inbox: atl.in.<tenant>.<event class>".to_owned()),
        subjects: vec![INBOUND_SUBJECTS.to_owned()],
        storage: stream::StorageType::File,
        retention: stream::RetentionPolicy::WorkQueue,
        discard: stream::DiscardPolicy::New,
        max_bytes: settings.max_bytes,
        duplicate_window: settings.duplicate_window,
        num_replicas: settings.replicas,
        ..Default::default()
    }
}

/// What [`ensure_inbound`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// The stream did not exist and was created.
    Created,
    /// The stream existed and its configuration meets the contract.
    Verified,
}

/// Creates ATL_INBOUND with the default settings, or checks the live one.
pub async fn ensure_inbound(js: &jetstream::Context) -> Result<Ensured> {
    ensure_inbound_with(js, &InboundSettings::default()).await
}

/// Creates ATL_INBOUND with `settings`, or checks that the live one is no weaker.
pub async fn ensure_inbound_with(js: &jetstream::Context, settings: &InboundSettings) -> Result<Ensured> {
    let wanted = inbound_config(settings);
    match js.get_stream(INBOUND).await {
        Ok(mut live) => {
            let info = live
                .info()
                .await
                .map_err(|e| Error::jetstream(format!("stream info {INBOUND}"), e))?;
            check_inbound(&info.config, &wanted)?;
            Ok(Ensured::Verified)
        }
        Err(error) if is_not_found(&error) => {
            js.create_stream(wanted)
                .await
                .map_err(|e| Error::jetstream(format!("create stream {INBOUND}"), e))?;
            Ok(Ensured::Created)
        }
        Err(error) => Err(Error::jetstream(format!("stream info {INBOUND}"), error)),
    }
}

fn is_not_found(error: &jetstream::context::GetStreamError) -> bool {
    matches!(error.kind(), jetstream::context::GetStreamErrorKind::JetStream(e)
        if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// Checks a live ATL_INBOUND configuration against the wanted one; the first weaker field is the error.
pub fn check_inbound(live: &stream::Config, wanted: &stream::Config) -> Result<()> {
    let weaker = |field: &str, actual: String, required: &str| Error::StreamConfigWeaker {
        stream: live.name.clone(),
        field: field.to_owned(),
        actual,
        required: required.to_owned(),
    };
    if live.storage != stream::StorageType::File {
        return Err(weaker("storage", format!("{:?}", live.storage), "file"));
    }
    if live.retention != stream::RetentionPolicy::WorkQueue {
        return Err(weaker("retention", format!("{:?}", live.retention), "work-queue"));
    }
    if live.discard != stream::DiscardPolicy::New {
        return Err(weaker(
            "discard",
            format!("{:?}", live.discard),
            "new (a full inbox refuses, never drops)",
        ));
    }
    if live.max_age != Duration::ZERO {
        return Err(weaker(
            "max_age",
            format!("{:?}", live.max_age),
            "none (age limits drop messages)",
        ));
    }
    if live.max_messages_per_subject > 0 && !live.discard_new_per_subject {
        return Err(weaker(
            "max_messages_per_subject",
            live.max_messages_per_subject.to_string(),
            "none, or discard_new_per_subject",
        ));
    }
    if live.duplicate_window < wanted.duplicate_window {
        return Err(weaker(
            "duplicate_window",
            format!("{:?}", live.duplicate_window),
            &format!("at least {:?}", wanted.duplicate_window),
        ));
    }
    if live.num_replicas < wanted.num_replicas {
        return Err(weaker(
            "num_replicas",
            live.num_replicas.to_string(),
            &format!("at least {}", wanted.num_replicas),
        ));
    }
    if !live.subjects.iter().any(|s| s == INBOUND_SUBJECTS) {
        return Err(weaker(
            "subjects",
            format!("{:?}", live.subjects),
            INBOUND_SUBJECTS,
        ));
    }
    if live.no_ack {
        return Err(weaker(
            "no_ack",
            "true".to_owned(),
            "false (producers need publish acks)",
        ));
    }
    if live.sealed {
        return Err(weaker("sealed", "true".to_owned(), "false"));
    }
    if live.persist_mode == Some(stream::PersistenceMode::Async) {
        return Err(weaker(
            "persist_mode",
            "async".to_owned(),
            "default (ack after the message is stored)",
        ));
    }
    if live.subject_transform.is_some() {
        return Err(weaker("subject_transform", "set".to_owned(), "none"));
    }
    if live.mirror.is_some() {
        return Err(weaker("mirror", "set".to_owned(), "none"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_config_passes_its_own_check() {
        let wanted = inbound_config(&InboundSettings::default());
        check_inbound(&wanted, &wanted).unwrap();
        assert_eq!(wanted.subjects, ["atl.in.>"]);
        assert_eq!(wanted.discard, stream::DiscardPolicy::New);
        assert_eq!(wanted.retention, stream::RetentionPolicy::WorkQueue);
    }

    #[test]
    fn each_weaker_field_is_named() {
        let wanted = inbound_config(&InboundSettings::default());
        type Weaken = Box<dyn Fn(&mut stream::Config)>;
        let cases: Vec<(&str, Weaken)> = vec![
            ("storage", Box::new(|c| c.storage = stream::StorageType::Memory)),
            (
                "retention",
                Box::new(|c| c.retention = stream::RetentionPolicy::Limits),
            ),
            ("discard", Box::new(|c| c.discard = stream::DiscardPolicy::Old)),
            ("max_age", Box::new(|c| c.max_age = Duration::from_secs(60))),
            (
                "max_messages_per_subject",
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
            (
                "persist_mode",
                Box::new(|c| c.persist_mode = Some(stream::PersistenceMode::Async)),
            ),
        ];
        for (field, weaken) in cases {
            let mut live = wanted.clone();
            weaken(&mut live);
            match check_inbound(&live, &wanted) {
                Err(Error::StreamConfigWeaker { field: named, .. }) => assert_eq!(named, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
