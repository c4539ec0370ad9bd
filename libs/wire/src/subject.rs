//! Tenants and the NATS subjects built from them (DESIGN §2).
//!
//! A tenant is `[A-Za-z0-9][A-Za-z0-9_-]{0,63}`. Names starting with `_` are reserved for the ledger:
//! [`Tenant::SYSTEM`] for its own events, [`Tenant::UNROUTABLE`] for rejects whose tenant is missing
//! or unsafe. A bad tenant is refused, never rewritten.

use std::fmt;

use serde::{Deserialize, Serialize};
use toolledger_schemas::EventClass;

use crate::{Error, Result};

/// Prefix of every inbound subject.
pub const INBOUND_PREFIX: &str = "atl.in.";

/// Longest tenant name.
pub const MAX_TENANT_LEN: usize = 64;

/// A tenant name that is safe as a NATS subject token and an object-store prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Tenant(String);

impl Tenant {
    /// The ledger's own events.
    pub const SYSTEM: &'static str = "_system";
    /// Rejects whose tenant is missing or unsafe.
    pub const UNROUTABLE: &'static str = "_unroutable";

    /// A producer's tenant: `[A-Za-z0-9][A-Za-z0-9_-]{0,63}`. Reserved `_` names are refused.
    pub fn parse(name: &str) -> Result<Self> {
        let unsafe_tenant = |reason: &str| Error::UnsafeTenant {
            tenant: name.to_owned(),
            reason: reason.to_owned(),
        };
        let mut bytes = name.bytes();
        match bytes.next() {
            None => return Err(unsafe_tenant("missing")),
            Some(b'_') => {
                return Err(unsafe_tenant(
                    "names starting with `_` are reserved for the ledger",
                ));
            }
            Some(first) if !first.is_ascii_alphanumeric() => {
                return Err(unsafe_tenant("must start with a letter or digit"));
            }
            Some(_) => {}
        }
        if name.len() > MAX_TENANT_LEN {
            return Err(unsafe_tenant("longer than 64 characters"));
        }
        if !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(unsafe_tenant("only letters, digits, `_` and `-` are allowed"));
        }
        Ok(Self(name.to_owned()))
    }

    /// The reserved tenant of the ledger's own events.
    pub fn system() -> Self {
        Self(Self::SYSTEM.to_owned())
    }

    /// The reserved tenant of rejects whose tenant is missing or unsafe.
    pub fn unroutable() -> Self {
        Self(Self::UNROUTABLE.to_owned())
    }

    /// Whether this is one of the ledger's reserved names.
    pub fn is_reserved(&self) -> bool {
        self.0.starts_with('_')
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Tenant {
    type Error = Error;

    /// Accepts producer tenants and the reserved names (for reading the ledger's own records back).
    fn try_from(name: String) -> Result<Self> {
        if name == Self::SYSTEM || name == Self::UNROUTABLE {
            return Ok(Self(name));
        }
        Self::parse(&name)
    }
}

impl From<Tenant> for String {
    fn from(tenant: Tenant) -> Self {
        tenant.0
    }
}

/// An inbound subject `atl.in.<tenant>.<class…>`, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundSubject {
    /// The tenant token.
    pub tenant: Tenant,
    /// The class tokens joined with `.` (`tool.invocation.started`); empty when the subject has none.
    pub class: String,
}

impl InboundSubject {
    /// Splits and checks an inbound subject. The tenant must be a producer tenant, or `_system` for
    /// the ledger's own `toolledger.*` classes; anything else is `unsafe_tenant`.
    pub fn parse(subject: &str) -> Result<Self> {
        let rest = subject.strip_prefix(INBOUND_PREFIX).ok_or_else(|| {
            Error::bad_envelope("nats_subject", format!("is not under `{INBOUND_PREFIX}>`"))
        })?;
        let (tenant, class) = rest.split_once('.').unwrap_or((rest, ""));
        let tenant = if tenant == Tenant::SYSTEM && class.starts_with("toolledger.") {
            Tenant::system()
        } else {
            Tenant::parse(tenant)?
        };
        Ok(Self {
            tenant,
            class: class.to_owned(),
        })
    }
}

/// `atl.in.<tenant>.<class>`: where producers publish.
pub fn inbound_subject(tenant: &Tenant, class: EventClass) -> String {
    format!("{INBOUND_PREFIX}{tenant}.{class}")
}

/// `atl.ledger.<tenant>.<class>`: where ingest appends.
pub fn ledger_subject(tenant: &Tenant, class: EventClass) -> String {
    format!("atl.ledger.{tenant}.{class}")
}

/// `atl.quarantine.<tenant>.<reason>`: where ingest puts rejects.
pub fn quarantine_subject(tenant: &Tenant, reason: crate::QuarantineReason) -> String {
    format!("atl.quarantine.{tenant}.{reason}")
}

/// `atl.replay.<tenant>`: the prefix (append `.>` to subscribe) of debugging replays, never `atl.in`.
pub fn replay_prefix(tenant: &Tenant) -> String {
    format!("atl.replay.{tenant}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_rule() {
        for good in ["a", "A1", "acme-corp", "t_1", "9", &"x".repeat(64)] {
            assert!(Tenant::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "_system",
            "_unroutable",
            "-a",
            "a.b",
            "a*",
            "a>",
            "a b",
            "é",
            &"x".repeat(65),
            "a\r\n",
        ] {
            let error = Tenant::parse(bad).unwrap_err();
            assert_eq!(
                error.quarantine_reason(),
                Some(crate::QuarantineReason::UnsafeTenant),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn inbound_subject_splits_tenant_and_class() {
        let s = InboundSubject::parse("atl.in.acme.tool.invocation.started").unwrap();
        assert_eq!(s.tenant.as_str(), "acme");
        assert_eq!(s.class, "tool.invocation.started");
        let s = InboundSubject::parse("atl.in._system.toolledger.access.read").unwrap();
        assert!(s.tenant.is_reserved());
        assert!(InboundSubject::parse("atl.in._system.tool.declared").is_err());
        assert!(InboundSubject::parse("atl.in._unroutable.tool.declared").is_err());
        assert!(matches!(
            InboundSubject::parse("atl.in..tool.declared"),
            Err(Error::UnsafeTenant { .. })
        ));
        assert!(matches!(
            InboundSubject::parse("atl.ledger.a.tool.declared"),
            Err(Error::BadEnvelope { .. })
        ));
    }

    #[test]
    fn reserved_names_deserialize_but_do_not_parse() {
        let t: Tenant = serde_json::from_str("\"_system\"").unwrap();
        assert!(t.is_reserved());
        assert!(serde_json::from_str::<Tenant>("\"a.b\"").is_err());
    }
}
