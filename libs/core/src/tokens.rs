//! Bearer tokens kept only as SHA-256 digests (the query API's read tokens, the OTLP receiver's
//! write tokens), and the one way a presented token is looked up among them.

use sha2::{Digest, Sha256};

/// Tokens by digest, each with what it grants.
#[derive(Debug, Clone)]
pub struct TokenDigests<T> {
    entries: Vec<([u8; 32], T)>,
}

impl<T> Default for TokenDigests<T> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<T> TokenDigests<T> {
    /// Adds a token by its configured digest (64 hex digits); `None` when it is not one.
    pub fn insert_digest(&mut self, sha256_hex: &str, grant: T) -> Option<()> {
        let digest = parse_digest(sha256_hex)?;
        self.entries.push((digest, grant));
        Some(())
    }

    /// Adds a token given in clear (a local token `toolledger up` generated).
    pub fn insert_clear(&mut self, token: &str, grant: T) {
        self.entries.push((Sha256::digest(token).into(), grant));
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What `presented` grants. Every configured digest is compared in full and in constant time,
    /// so timing reveals neither which token nor how much of it matched.
    pub fn find(&self, presented: &str) -> Option<&T> {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        let mut found = None;
        for (candidate, grant) in &self.entries {
            let difference = candidate
                .iter()
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if difference == 0 && found.is_none() {
                found = Some(grant);
            }
        }
        found
    }
}

/// Lowercase hex SHA-256 of a token, as token settings store it.
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token).iter().map(|b| format!("{b:02x}")).collect()
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
    use super::*;

    #[test]
    fn finds_by_digest_only() {
        let mut tokens = TokenDigests::default();
        assert!(tokens.insert_digest(&token_digest("s3cret"), "a").is_some());
        assert!(tokens.insert_digest("not hex", "b").is_none());
        tokens.insert_clear("other", "c");
        assert_eq!(tokens.find("s3cret"), Some(&"a"));
        assert_eq!(tokens.find("other"), Some(&"c"));
        assert_eq!(tokens.find("wrong"), None);
    }
}
