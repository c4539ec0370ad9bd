//! The crate's one error type and the quarantine reasons its decode errors become.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ijson::JsonProblem;

/// Why ingest refuses a message: the stable, machine-readable names quarantine subjects
/// (`atl.quarantine.<tenant>.<reason>`), receipts and the CLI use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum QuarantineReason {
    /// The CloudEvents envelope (or the agenttool-event envelope) is malformed: a required attribute is
    /// missing or unparseable, or the body is not JSON.
    BadEnvelope,
    /// `type` names no event class of the spec or of the ledger.
    UnknownClass,
    /// The tenant in the subject is missing, malformed or reserved.
    UnsafeTenant,
    /// The `tenant` extension differs from the subject's tenant.
    TenantMismatch,
    /// The JSON is not I-JSON (RFC 7493) and so cannot be canonicalized faithfully.
    NotIjson,
    /// `data` is not valid under its class's official schema.
    SchemaViolation,
    /// The same identity (tenant, source, id) arrived again with different content.
    DuplicateConflict,
    /// The message could not be processed after the bounded number of deliveries.
    PoisonMessage,
    /// A payload the event references (a producer upload) is missing, of another tenant, or does not
    /// match its stated size or digest.
    BadPayload,
    /// A producer sent one of the ledger's own `toolledger.*` classes (an access record, an erasure
    /// record, a quarantine receipt): only the ledger's `_system` tenant writes those.
    ReservedClass,
    /// A producer's event holds an object only ingest writes: a `{"$scrubbed": …}` or
    /// `{"$payload": …}` marker (it would claim a scrub or an offload that did not happen).
    ReservedMarker,
    /// An id (`id`, `subject`, an id extension, a `data` member named `*_id` or `retry_of`) holds a
    /// control character or is longer than 1 KiB: the ledger could not serve it back
    /// ([`crate::id`]).
    BadId,
}

impl QuarantineReason {
    /// Every reason.
    pub const ALL: &'static [QuarantineReason] = &[
        Self::BadEnvelope,
        Self::UnknownClass,
        Self::UnsafeTenant,
        Self::TenantMismatch,
        Self::NotIjson,
        Self::SchemaViolation,
        Self::DuplicateConflict,
        Self::PoisonMessage,
        Self::BadPayload,
        Self::ReservedClass,
        Self::ReservedMarker,
        Self::BadId,
    ];

    /// The stable snake_case name, also a NATS subject token.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BadEnvelope => "bad_envelope",
            Self::UnknownClass => "unknown_class",
            Self::UnsafeTenant => "unsafe_tenant",
            Self::TenantMismatch => "tenant_mismatch",
            Self::NotIjson => "not_ijson",
            Self::SchemaViolation => "schema_violation",
            Self::DuplicateConflict => "duplicate_conflict",
            Self::PoisonMessage => "poison_message",
            Self::BadPayload => "bad_payload",
            Self::ReservedClass => "reserved_class",
            Self::ReservedMarker => "reserved_marker",
            Self::BadId => "bad_id",
        }
    }
}

impl fmt::Display for QuarantineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for QuarantineReason {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| Error::UnknownQuarantineReason { name: s.to_owned() })
    }
}

/// One place where `data` breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// JSON Pointer into the event (`/data/status`).
    pub path: String,
    /// What is wrong there.
    pub reason: String,
}

/// What can go wrong decoding, encoding, canonicalizing or setting up the NATS contract.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The envelope is malformed; `attribute` names the CloudEvents attribute, header or envelope field.
    #[error("bad envelope at `{attribute}`: {reason}")]
    BadEnvelope {
        /// The attribute (`id`, `time`, `ce-time`, `data`, `nats_subject`, …).
        attribute: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `type` names no known event class.
    #[error("unknown event class `{class}`")]
    UnknownClass {
        /// The `type` as received.
        class: String,
    },
    /// The subject's tenant is missing, malformed or reserved; never rewritten.
    #[error("unsafe tenant {tenant:?}: {reason}")]
    UnsafeTenant {
        /// The tenant token as received (may be empty).
        tenant: String,
        /// Why it is refused.
        reason: String,
    },
    /// The `tenant` extension differs from the subject's tenant.
    #[error("tenant extension {extension:?} differs from the subject's tenant `{subject}`")]
    TenantMismatch {
        /// The tenant from the NATS subject.
        subject: String,
        /// The `tenant` extension.
        extension: String,
    },
    /// The input is not I-JSON.
    #[error("not I-JSON at `{path}`: {problem}")]
    NotIJson {
        /// What is wrong.
        problem: JsonProblem,
        /// JSON Pointer to where (`` for the root).
        path: String,
    },
    /// `data` is not valid under its class's official schema (filled in by ingest's validator).
    #[error("schema violation for `{class}`: {}", display_violations(.violations))]
    SchemaViolation {
        /// The event class whose schema was applied.
        class: String,
        /// Every place the data breaks it.
        violations: Vec<Violation>,
    },
    /// An id of the event is outside the id grammar ([`crate::id`]); the value is not repeated.
    #[error("bad id at `{pointer}`: {problem}")]
    BadId {
        /// JSON Pointer of the id in the structured event (`/id`, `/data/invocation_id`).
        pointer: String,
        /// What is wrong with it.
        problem: crate::id::IdProblem,
    },
    /// An event could not be put on the wire (an extension name that is no header token, say).
    #[error("cannot encode event: {reason}")]
    Encode {
        /// Why.
        reason: String,
    },
    /// A quarantine reason name that is not one of [`QuarantineReason::ALL`].
    #[error("unknown quarantine reason `{name}`")]
    UnknownQuarantineReason {
        /// The name given.
        name: String,
    },
    /// The configured partition count is not the one the ledger was made with.
    #[error(
        "ledger.partitions = {configured} does not fit this ledger: {reason}; another count would move tenants"
    )]
    PartitionCount {
        /// The configured count.
        configured: u16,
        /// What shows the ledger's own count.
        reason: String,
    },
    /// A live stream's configuration is weaker than the contract requires; it is left unchanged.
    #[error("stream {stream} is weaker than required: {field} is {actual}, needs {required}")]
    StreamConfigWeaker {
        /// The stream.
        stream: String,
        /// The configuration field (`discard`, `max_age`, …).
        field: String,
        /// What the live stream has.
        actual: String,
        /// What the contract needs.
        required: String,
    },
    /// A JetStream request failed.
    #[error("jetstream {operation}: {reason}")]
    JetStream {
        /// What was being done (`create stream ATL_INBOUND`).
        operation: String,
        /// The client's or server's error text.
        reason: String,
    },
}

fn display_violations(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("{}: {}", v.path, v.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// The quarantine reason this error becomes when it rejects an inbound message; `None` for errors
    /// that are not about a message's content (NATS failures, configuration).
    pub fn quarantine_reason(&self) -> Option<QuarantineReason> {
        Some(match self {
            Self::BadEnvelope { .. } => QuarantineReason::BadEnvelope,
            Self::UnknownClass { .. } => QuarantineReason::UnknownClass,
            Self::UnsafeTenant { .. } => QuarantineReason::UnsafeTenant,
            Self::TenantMismatch { .. } => QuarantineReason::TenantMismatch,
            Self::NotIJson { .. } => QuarantineReason::NotIjson,
            Self::SchemaViolation { .. } => QuarantineReason::SchemaViolation,
            Self::BadId { .. } => QuarantineReason::BadId,
            _ => return None,
        })
    }

    /// What a quarantine receipt says of this rejection: where, and the rule the message broke, never
    /// a value the producer sent. The receipt goes into the immutable ledger and the value may be a
    /// secret (a `type`, a `tenant` extension or a number can hold one as well as any field); the
    /// original, value and all, is in ATL_QUARANTINE, which can be purged. [`fmt::Display`] keeps
    /// the values, for tools that check a producer's own file.
    pub fn quarantine_detail(&self) -> String {
        match self {
            Self::UnknownClass { .. } => {
                "unknown event class: `type` names no class of the spec or of the ledger".to_owned()
            }
            Self::UnsafeTenant { reason, .. } => format!("unsafe tenant in the subject: {reason}"),
            Self::TenantMismatch { subject, .. } => {
                format!("the tenant extension differs from the subject's tenant `{subject}`")
            }
            Self::NotIJson { problem, path } => {
                let rule = match problem {
                    JsonProblem::IntegerOutOfRange { .. } => "an integer beyond ±(2^53−1)".to_owned(),
                    JsonProblem::NumberOverflow { .. } => "a number that overflows a double".to_owned(),
                    other => other.to_string(),
                };
                format!("not I-JSON at `{path}`: {rule}")
            }
            // Envelope reasons name the attribute and the rule only; ids and schema violations
            // name their pointer.
            other => other.to_string(),
        }
    }

    pub(crate) fn bad_envelope(attribute: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::BadEnvelope {
            attribute: attribute.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn jetstream(operation: impl Into<String>, reason: impl fmt::Display) -> Self {
        Self::JetStream {
            operation: operation.into(),
            reason: reason.to_string(),
        }
    }
}

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarantine_detail_never_repeats_what_the_producer_sent() {
        let secret = "Bearer sk-live-0123456789abcdef";
        let event = |mutate: &dyn Fn(&mut serde_json::Value)| {
            let mut event = serde_json::json!({"specversion": "1.0", "id": "e1", "source": "s",
                "type": "tool.declared", "tenant": "acme", "data": {}});
            mutate(&mut event);
            serde_json::to_vec(&event).unwrap()
        };
        let headers = |pairs: &[(&str, &str)]| {
            let mut map = async_nats::HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, *value);
            }
            map
        };
        let structured = headers(&[("content-type", "application/cloudevents+json")]);
        let encoded = "Bearer%20sk-live-0123456789abcdef";
        let cases: Vec<(Option<async_nats::HeaderMap>, Vec<u8>)> = vec![
            (Some(structured.clone()), event(&|e| e["type"] = secret.into())),
            (Some(structured.clone()), event(&|e| e["tenant"] = secret.into())),
            (
                Some(structured.clone()),
                event(&|e| e["specversion"] = secret.into()),
            ),
            (
                Some(structured.clone()),
                event(&|e| e["datacontenttype"] = secret.into()),
            ),
            (
                Some(structured.clone()),
                br#"{"specversion":"1.0","id":"e1","n":90071992547409930123}"#.to_vec(),
            ),
            (
                Some(headers(&[
                    ("ce-specversion", encoded),
                    ("ce-id", "e1"),
                    ("ce-source", "s"),
                    ("ce-type", "tool.declared"),
                    ("ce-tenant", "acme"),
                ])),
                b"{}".to_vec(),
            ),
            (
                Some(headers(&[
                    ("ce-specversion", "1.0"),
                    ("ce-id", "e1"),
                    ("ce-source", "s"),
                    ("ce-type", "tool.declared"),
                    ("ce-tenant", "acme"),
                    ("ce-datacontenttype", encoded),
                ])),
                b"{}".to_vec(),
            ),
        ];
        for (headers, body) in cases {
            let error = crate::decode("atl.in.acme.tool.declared", headers.as_ref(), &body).unwrap_err();
            assert!(error.quarantine_reason().is_some(), "{error}");
            let detail = error.quarantine_detail();
            for value in ["sk-live", "90071992547409930123"] {
                assert!(!detail.contains(value), "{detail}");
            }
        }
        // A subject outside the contract: named by its rule, whatever it holds.
        let detail = crate::subject::InboundSubject::parse("sk-live-0123456789abcdef.x")
            .unwrap_err()
            .quarantine_detail();
        assert!(!detail.contains("sk-live"), "{detail}");
    }

    #[test]
    fn reasons_have_stable_names_that_round_trip() {
        let names: Vec<_> = QuarantineReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names,
            [
                "bad_envelope",
                "unknown_class",
                "unsafe_tenant",
                "tenant_mismatch",
                "not_ijson",
                "schema_violation",
                "duplicate_conflict",
                "poison_message",
                "bad_payload",
                "reserved_class",
                "reserved_marker",
                "bad_id"
            ]
        );
        for reason in QuarantineReason::ALL {
            assert_eq!(reason.as_str().parse::<QuarantineReason>().unwrap(), *reason);
            let json = serde_json::to_string(reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
        assert!("nope".parse::<QuarantineReason>().is_err());
    }

    #[test]
    fn schema_violation_lists_every_path() {
        let error = Error::SchemaViolation {
            class: "tool.invocation.planned".into(),
            violations: vec![
                Violation {
                    path: "/data/status".into(),
                    reason: "not a string".into(),
                },
                Violation {
                    path: "/data/tool_id".into(),
                    reason: "required".into(),
                },
            ],
        };
        let text = error.to_string();
        assert!(
            text.contains("/data/status: not a string; /data/tool_id: required"),
            "{text}"
        );
        assert_eq!(error.quarantine_reason(), Some(QuarantineReason::SchemaViolation));
    }
}
