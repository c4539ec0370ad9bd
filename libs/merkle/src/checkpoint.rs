//! C2SP tlog checkpoints: the signed tree head a ledger publishes.
//!
//! ```text
//! <origin>
//! <tree size, decimal>
//! <base64 root hash>
//! [extension lines]
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::note::{NoteSigner, Verifiers, sign_note};
use crate::{Error, Hash, Result};

/// A tree head: which log, how many entries, and the root over them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's identity (one per ledger partition), e.g. `toolledger.example/ledger/p0`.
    pub origin: String,
    /// The number of entries in the tree.
    pub size: u64,
    /// The RFC 6962 root of the tree.
    pub root: Hash,
    /// Optional extension lines (not auditable by log monitors; best left empty).
    pub extensions: Vec<String>,
}

impl Checkpoint {
    /// A checkpoint without extension lines.
    pub fn new(origin: &str, size: u64, root: Hash) -> Self {
        Self {
            origin: origin.to_owned(),
            size,
            root,
            extensions: Vec::new(),
        }
    }

    /// The note text: origin, size and base64 root on their own lines, then any extension lines.
    pub fn body(&self) -> String {
        let mut body = format!("{}\n{}\n{}\n", self.origin, self.size, BASE64.encode(self.root));
        for line in &self.extensions {
            body.push_str(line);
            body.push('\n');
        }
        body
    }

    /// Parses a checkpoint note text.
    pub fn parse_body(text: &str) -> Result<Self> {
        let malformed = |reason: String| Error::MalformedCheckpoint { reason };
        let lines = text
            .strip_suffix('\n')
            .ok_or_else(|| malformed("text must end with a newline".to_owned()))?;
        let mut lines = lines.split('\n');
        let (Some(origin), Some(size), Some(root)) = (lines.next(), lines.next(), lines.next()) else {
            return Err(malformed("needs origin, size and root lines".to_owned()));
        };
        if origin.is_empty() {
            return Err(malformed("empty origin".to_owned()));
        }
        let canonical = !size.is_empty()
            && size.bytes().all(|b| b.is_ascii_digit())
            && (size == "0" || !size.starts_with('0'));
        let size: u64 = size.parse().ok().filter(|_| canonical).ok_or_else(|| {
            malformed(format!(
                "tree size {size:?} is not a decimal number without leading zeros"
            ))
        })?;
        let root = BASE64
            .decode(root)
            .ok()
            .and_then(|bytes| Hash::try_from(bytes.as_slice()).ok())
            .ok_or_else(|| malformed("root is not a base64 32-byte hash".to_owned()))?;
        let extensions: Vec<String> = lines.map(str::to_owned).collect();
        if extensions.iter().any(String::is_empty) {
            return Err(malformed("empty extension line".to_owned()));
        }
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
            extensions,
        })
    }

    /// The checkpoint as a signed note, signed by each signer (the log key, whose name should be the
    /// origin; during a rotation the old and the new key).
    pub fn sign(&self, signers: &[&NoteSigner]) -> Result<String> {
        sign_note(&self.body(), signers)
    }

    /// Verifies a signed checkpoint note with the trusted keys and parses it. Prefer
    /// [`Checkpoint::open_for`] when the log is known: a trusted key may sign for several logs.
    pub fn open(note: &str, verifiers: &Verifiers) -> Result<Self> {
        let verified = verifiers.verify(note)?;
        Self::parse_body(&verified.text)
    }

    /// Like [`Checkpoint::open`], and the checkpoint must be for the log named `origin`.
    pub fn open_for(note: &str, origin: &str, verifiers: &Verifiers) -> Result<Self> {
        let checkpoint = Self::open(note, verifiers)?;
        if checkpoint.origin != origin {
            return Err(Error::WrongOrigin {
                expected: origin.to_owned(),
                found: checkpoint.origin,
            });
        }
        Ok(checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_round_trips_and_matches_the_c2sp_layout() {
        let mut cp = Checkpoint::new("example.com/log", 20852163, [7; 32]);
        assert_eq!(
            cp.body(),
            "example.com/log\n20852163\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n"
        );
        assert_eq!(Checkpoint::parse_body(&cp.body()).unwrap(), cp);
        cp.extensions.push("ext".to_owned());
        assert_eq!(Checkpoint::parse_body(&cp.body()).unwrap(), cp);
    }

    #[test]
    fn malformed_bodies_are_rejected() {
        let root = BASE64.encode([0u8; 32]);
        for bad in [
            String::new(),
            format!("o\n1\n{root}"),
            format!("\n1\n{root}\n"),
            format!("o\n01\n{root}\n"),
            format!("o\n-1\n{root}\n"),
            format!("o\n+1\n{root}\n"),
            "o\n1\nAAAA\n".to_owned(),
            format!("o\n1\n{root}\n\n"),
        ] {
            assert!(Checkpoint::parse_body(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Checkpoint::parse_body(&format!("o\n0\n{root}\n")).unwrap().size,
            0
        );
    }
}
