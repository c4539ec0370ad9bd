//! Who may read what: bearer tokens from `[api] tokens`, kept only as SHA-256 digests, and the
//! tenant scope every query runs under.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};
use toolledger_core::config::ApiToken;

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
    entries: Vec<([u8; 32], Principal)>,
}

impl Tokens {
    /// Checks and indexes the configured tokens.
    pub fn from_config(tokens: &[ApiToken]) -> Result<Self> {
        let mut entries = Vec::with_capacity(tokens.len());
        for token in tokens {
            let digest = parse_digest(&token.sha256).ok_or_else(|| {
                Error::Config(format!("token `{}`: sha256 must be 64 hex digits", token.name))
            })?;
            let access = if token.admin {
                Access::Admin
            } else {
                for tenant in &token.tenants {
                    crate::params::tenant(tenant)
                        .map_err(|e| Error::Config(format!("token `{}`: {e}", token.name)))?;
                }
                Access::Tenants(token.tenants.iter().cloned().collect())
            };
            entries.push((
                digest,
                Principal {
                    name: token.name.clone(),
                    access,
                },
            ));
        }
        Ok(Self { entries })
    }

    /// Adds one token given in clear (the local admin token of `toolledger up`).
    pub fn add(&mut self, token: &str, principal: Principal) {
        self.entries.push((Sha256::digest(token).into(), principal));
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal whose token is `presented`. Every configured digest is compared in full and in
    /// constant time, so timing reveals neither which token nor how much of it matched.
    pub fn authenticate(&self, presented: &str) -> Result<Principal> {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut found = None;
        for (candidate, principal) in &self.entries {
            let difference = candidate
                .iter()
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if difference == 0 && found.is_none() {
                found = Some(principal);
            }
        }
        found.cloned().ok_or(Error::Unauthenticated)
    }
}

/// Lowercase hex SHA-256 of a token, as `[api] tokens` stores it.
pub fn token_digest(token: &str) -> String {
    toolledger_wire::entry::hex(&Sha256::digest(token))
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

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
