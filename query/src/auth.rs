//! Who may read what: bearer tokens from `[api] tokens`, kept only as SHA-256 digests, and the
//! tenant scope every query runs under.

use std::collections::BTreeSet;

use toolledger_core::config::ApiToken;
use toolledger_core::tokens::TokenDigests;

use crate::error::{Error, Result};

/// What a caller may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Every tenant.
    Admin,
    /// Only these tenants.
    Tenants(BTreeSet<String>),
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's configured name (or `local-admin`, `cli`).
    pub name: String,
    /// Its scope.
    pub access: Access,
}

impl Principal {
    /// An admin principal (the CLI reading the projection directly, `--insecure-local`).
    pub fn admin(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            access: Access::Admin,
        }
    }

    /// The tenant a query runs under: the requested one when this principal may read it; with none
    /// requested, the only tenant of a single-tenant token, or all tenants (`None`) for an admin.
    pub fn scope(&self, requested: Option<&str>) -> Result<Option<String>> {
        if let Some(tenant) = requested {
            crate::params::tenant(tenant)?;
        }
        match (&self.access, requested) {
            (Access::Admin, requested) => Ok(requested.map(str::to_owned)),
            (Access::Tenants(allowed), Some(tenant)) if allowed.contains(tenant) => {
                Ok(Some(tenant.to_owned()))
            }
            (Access::Tenants(_), Some(tenant)) => Err(Error::Forbidden {
                principal: self.name.clone(),
                tenant: tenant.to_owned(),
            }),
            (Access::Tenants(allowed), None) if allowed.len() == 1 => Ok(allowed.first().cloned()),
            (Access::Tenants(_), None) => Err(Error::invalid(
                "tenant",
                "required: this token reads several tenants",
            )),
        }
    }
}

/// The configured tokens, by digest.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    digests: TokenDigests<Principal>,
}

impl Tokens {
    /// Checks and indexes the configured tokens.
    pub fn from_config(tokens: &[ApiToken]) -> Result<Self> {
        let mut digests = TokenDigests::default();
        for token in tokens {
            let access = if token.admin {
                Access::Admin
            } else {
                for tenant in &token.tenants {
                    crate::params::tenant(tenant)
                        .map_err(|e| Error::Config(format!("token `{}`: {e}", token.name)))?;
                }
                Access::Tenants(token.tenants.iter().cloned().collect())
            };
            let principal = Principal {
                name: token.name.clone(),
                access,
            };
            digests.insert_digest(&token.sha256, principal).ok_or_else(|| {
                Error::Config(format!("token `{}`: sha256 must be 64 hex digits", token.name))
            })?;
        }
        Ok(Self { digests })
    }

    /// Adds one token given in clear (the local admin token of `toolledger up`).
    pub fn add(&mut self, token: &str, principal: Principal) {
        self.digests.insert_clear(token, principal);
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// The principal whose token is `presented` (compared in constant time).
    pub fn authenticate(&self, presented: &str) -> Result<Principal> {
        self.digests
            .find(presented)
            .cloned()
            .ok_or(Error::Unauthenticated)
    }
}

pub use toolledger_core::tokens::token_digest;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tokens_authenticate_by_digest_and_scope_tenants() {
        let tokens = Tokens::from_config(&[ApiToken {
            name: "acme-reader".to_owned(),
            sha256: token_digest("s3cret"),
            tenants: vec!["acme".to_owned()],
            admin: false,
        }])
        .unwrap();
        assert!(matches!(
            tokens.authenticate("wrong"),
            Err(Error::Unauthenticated)
        ));
        let principal = tokens.authenticate("s3cret").unwrap();
        assert_eq!(principal.scope(None).unwrap().as_deref(), Some("acme"));
        assert!(matches!(
            principal.scope(Some("globex")),
            Err(Error::Forbidden { .. })
        ));
        assert_eq!(Principal::admin("a").scope(None).unwrap(), None);
    }
}
