//! C2SP signed notes with Ed25519 keys: signing, parsing, verifying, and the key formats.
//!
//! ```text
//! <text, ending in a newline>
//!
//! — <key name> base64(key id (4 bytes, big-endian) || Ed25519 signature of the text)
//! ```
//!
//! Key id = `SHA-256(name || 0x0A || 0x01 || public key)[:4]`. Keys travel as strings:
//! the signer key `PRIVATE+KEY+<name>+<hex key id>+base64(0x01 || seed)` (kept secret, written with
//! owner-only permissions) and the verifier key `<name>+<hex key id>+base64(0x01 || public key)`
//! (published). A [`Verifiers`] set holds every key a reader trusts; keeping the old verifier key in
//! the set after a rotation keeps checkpoints it signed verifiable.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The C2SP signature type byte for Ed25519.
const ALG_ED25519: u8 = 0x01;
/// The em dash and space that open a signature line.
const SIG_PREFIX: &str = "\u{2014} ";
/// Notes larger than this are rejected before parsing (a checkpoint is a few hundred bytes).
const MAX_NOTE_BYTES: usize = 1 << 20;
/// Signature lines accepted in one note (the spec asks verifiers to accept at least 16).
const MAX_SIGNATURES: usize = 100;

/// The 4-byte key id of an Ed25519 key with this name.
pub fn key_id(name: &str, public_key: &[u8; 32]) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', ALG_ED25519]);
    hasher.update(public_key);
    let digest = hasher.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

pub(crate) fn check_key_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c == '+' || c.is_control())
    {
        return Err(Error::InvalidKeyName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

pub(crate) fn parse_key_id(hex: &str) -> Result<u32> {
    if hex.len() != 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::MalformedKey {
            reason: format!("key id {hex:?} is not 8 hex digits"),
        });
    }
    u32::from_str_radix(hex, 16).map_err(|e| Error::MalformedKey {
        reason: e.to_string(),
    })
}

fn decode_typed_key(b64: &str) -> Result<[u8; 32]> {
    let bytes = BASE64.decode(b64).map_err(|e| Error::MalformedKey {
        reason: format!("key is not base64: {e}"),
    })?;
    match bytes.split_first() {
        Some((&ALG_ED25519, key)) => <[u8; 32]>::try_from(key).map_err(|_| Error::MalformedKey {
            reason: format!("ed25519 key has {} bytes, expected 32", key.len()),
        }),
        Some((alg, _)) => Err(Error::MalformedKey {
            reason: format!("unsupported signature type {alg:#04x}"),
        }),
        None => Err(Error::MalformedKey {
            reason: "empty key".to_owned(),
        }),
    }
}

/// A note signing key: an Ed25519 private key with its name.
pub struct NoteSigner {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl fmt::Debug for NoteSigner {
    // Never print the private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NoteSigner")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish()
    }
}

impl NoteSigner {
    /// A new key named `name` from the operating system's randomness.
    pub fn generate(name: &str) -> Result<Self> {
        Self::from_seed(name, random_seed()?)
    }

    /// The key with this Ed25519 seed (RFC 8032 private key).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<Self> {
        check_key_name(name)?;
        let key = SigningKey::from_bytes(&seed);
        let key_id = key_id(name, key.verifying_key().as_bytes());
        Ok(Self {
            name: name.to_owned(),
            key_id,
            key,
        })
    }

    /// Parses a signer key string `PRIVATE+KEY+<name>+<hex key id>+base64(0x01 || seed)`.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim_end_matches(['\n', '\r']);
        let rest = s
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| Error::MalformedKey {
                reason: "signer key must start with PRIVATE+KEY+".to_owned(),
            })?;
        // The base64 key may itself contain '+': it is everything after the second separator.
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::MalformedKey {
                reason: "signer key must be PRIVATE+KEY+name+id+key".to_owned(),
            });
        };
        let signer = Self::from_seed(name, decode_typed_key(key)?)?;
        if parse_key_id(id)? != signer.key_id {
            return Err(Error::MalformedKey {
                reason: format!("key id {id} does not match the key"),
            });
        }
        Ok(signer)
    }

    /// The signer key string. It is the private key: store it like one.
    pub fn to_private_key_string(&self) -> String {
        let mut typed = Vec::with_capacity(33);
        typed.push(ALG_ED25519);
        typed.extend_from_slice(self.key.as_bytes());
        format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.key_id,
            BASE64.encode(typed)
        )
    }

    /// Reads a signer key file (one signer key string).
    pub fn load(path: &std::path::Path) -> Result<Self> {
        Self::parse(&read_key_file(path)?)
    }

    /// Writes the signer key string to a new file readable only by its owner; an existing file is
    /// never overwritten (losing a signing key is not recoverable).
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        write_key_file(path, &self.to_private_key_string())
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The public half, to publish and verify with.
    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// Signs `text` (which must end with a newline) into a signed note with this key's signature.
    pub fn sign(&self, text: &str) -> Result<String> {
        sign_note(text, &[self])
    }

    fn signature_line(&self, text: &str) -> String {
        let signature = self.key.sign(text.as_bytes());
        let mut bytes = Vec::with_capacity(4 + 64);
        bytes.extend_from_slice(&self.key_id.to_be_bytes());
        bytes.extend_from_slice(&signature.to_bytes());
        format!("{SIG_PREFIX}{} {}\n", self.name, BASE64.encode(bytes))
    }
}

/// Signs `text` with every signer (during a key rotation a note can carry the old and the new key's
/// signatures).
pub fn sign_note(text: &str, signers: &[&NoteSigner]) -> Result<String> {
    check_text(text)?;
    if signers.is_empty() {
        return Err(Error::MalformedNote {
            reason: "a note needs at least one signature".to_owned(),
        });
    }
    let mut note = format!("{text}\n");
    for signer in signers {
        note.push_str(&signer.signature_line(text));
    }
    Ok(note)
}

fn check_text(text: &str) -> Result<()> {
    if !text.ends_with('\n') {
        return Err(Error::MalformedNote {
            reason: "note text must end with a newline".to_owned(),
        });
    }
    if text.chars().any(|c| c.is_control() && c != '\n') {
        return Err(Error::MalformedNote {
            reason: "note contains a control character".to_owned(),
        });
    }
    Ok(())
}

/// A note verification key: an Ed25519 public key with its name and key id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl NoteVerifier {
    /// Parses a verifier key string `<name>+<hex key id>+base64(0x01 || public key)`.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        let mut parts = s.splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::MalformedKey {
                reason: "verifier key must be name+id+key".to_owned(),
            });
        };
        check_key_name(name)?;
        let public = decode_typed_key(key)?;
        let key = VerifyingKey::from_bytes(&public).map_err(|e| Error::MalformedKey {
            reason: format!("not an ed25519 public key: {e}"),
        })?;
        let key_id = parse_key_id(id)?;
        if key_id != self::key_id(name, &public) {
            return Err(Error::MalformedKey {
                reason: format!("key id {id} does not match the key"),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            key_id,
            key,
        })
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The raw 32-byte Ed25519 public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    fn verifies(&self, text: &str, signature: &[u8]) -> bool {
        Signature::from_slice(signature).is_ok_and(|sig| self.key.verify(text.as_bytes(), &sig).is_ok())
    }
}

impl fmt::Display for NoteVerifier {
    /// The verifier key string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut typed = Vec::with_capacity(33);
        typed.push(ALG_ED25519);
        typed.extend_from_slice(self.key.as_bytes());
        write!(f, "{}+{:08x}+{}", self.name, self.key_id, BASE64.encode(typed))
    }
}

/// One signature line of a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteSignature {
    /// The key name on the line.
    pub name: String,
    /// The key id the signature starts with.
    pub key_id: u32,
    /// The signature bytes after the key id.
    pub signature: Vec<u8>,
}

/// A parsed signed note: the signed text and its signature lines. Parsing does not verify: see
/// [`Verifiers::verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// The note text, with its final newline.
    pub text: String,
    /// The signatures, in order.
    pub signatures: Vec<NoteSignature>,
}

impl Note {
    /// Splits a signed note into text and signatures at its last blank line.
    pub fn parse(note: &str) -> Result<Note> {
        let malformed = |reason: &str| Error::MalformedNote {
            reason: reason.to_owned(),
        };
        if note.len() > MAX_NOTE_BYTES {
            return Err(malformed("note too large"));
        }
        if note.chars().any(|c| c.is_control() && c != '\n') {
            return Err(malformed("note contains a control character"));
        }
        let split = note
            .rfind("\n\n")
            .ok_or_else(|| malformed("no blank line before the signatures"))?;
        let (text, sigs) = (&note[..split + 1], &note[split + 2..]);
        if sigs.is_empty() || !sigs.ends_with('\n') {
            return Err(malformed(
                "signature block must be non-empty lines ending in a newline",
            ));
        }
        let mut signatures = Vec::new();
        for line in sigs[..sigs.len() - 1].split('\n') {
            if signatures.len() == MAX_SIGNATURES {
                return Err(malformed("too many signatures"));
            }
            let rest = line
                .strip_prefix(SIG_PREFIX)
                .ok_or_else(|| malformed("signature line must start with an em dash"))?;
            let (name, b64) = rest
                .split_once(' ')
                .ok_or_else(|| malformed("signature line must be name and signature"))?;
            check_key_name(name).map_err(|_| malformed("invalid key name in a signature line"))?;
            let bytes = BASE64
                .decode(b64)
                .map_err(|_| malformed("signature is not base64"))?;
            if bytes.len() < 5 {
                return Err(malformed("signature too short"));
            }
            let key_id = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            signatures.push(NoteSignature {
                name: name.to_owned(),
                key_id,
                signature: bytes[4..].to_vec(),
            });
        }
        Ok(Note {
            text: text.to_owned(),
            signatures,
        })
    }
}

/// The keys a reader trusts: the current verifier key and every retired one still to be honoured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verifiers {
    keys: Vec<NoteVerifier>,
}

impl Verifiers {
    /// A set of trusted keys.
    pub fn new(keys: impl IntoIterator<Item = NoteVerifier>) -> Self {
        let mut set = Self::default();
        for key in keys {
            set.add(key);
        }
        set
    }

    /// Parses a verifier key file: one verifier key string per line; blank lines and `#` comments are
    /// skipped.
    pub fn parse(text: &str) -> Result<Self> {
        let keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(NoteVerifier::parse)
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::new(keys))
    }

    /// Trusts one more key (a rotation adds the new key and keeps the old).
    pub fn add(&mut self, key: NoteVerifier) {
        if !self.keys.contains(&key) {
            self.keys.push(key);
        }
    }

    /// Stops trusting the key with this name and id (a compromised key).
    pub fn remove(&mut self, name: &str, key_id: u32) {
        self.keys.retain(|k| !(k.name == name && k.key_id == key_id));
    }

    /// The trusted keys.
    pub fn keys(&self) -> &[NoteVerifier] {
        &self.keys
    }

    /// Verifies a signed note (C2SP rules): signatures by unknown keys are ignored, a signature by a
    /// trusted key that fails rejects the note, and at least one trusted signature must verify. Returns
    /// the note with only its verified signatures.
    pub fn verify(&self, note: &str) -> Result<Note> {
        let parsed = Note::parse(note)?;
        let mut verified = Vec::new();
        for sig in &parsed.signatures {
            let Some(key) = self
                .keys
                .iter()
                .find(|k| k.name == sig.name && k.key_id == sig.key_id)
            else {
                continue;
            };
            if !key.verifies(&parsed.text, &sig.signature) {
                return Err(Error::BadSignature {
                    name: sig.name.clone(),
                    key_id: sig.key_id,
                });
            }
            verified.push(sig.clone());
        }
        if verified.is_empty() {
            return Err(Error::UnknownSigner);
        }
        Ok(Note {
            text: parsed.text,
            signatures: verified,
        })
    }
}

impl fmt::Display for Verifiers {
    /// One verifier key string per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.keys.iter().try_for_each(|k| writeln!(f, "{k}"))
    }
}

/// 32 bytes of the operating system's randomness: a new Ed25519 seed.
pub(crate) fn random_seed() -> Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| Error::Randomness {
        reason: e.to_string(),
    })?;
    Ok(seed)
}

/// A key file's one key string, trimmed.
pub(crate) fn read_key_file(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::KeyFile {
        path: path.display().to_string(),
        source,
    })?;
    Ok(text.trim().to_owned())
}

/// Writes `key` (a private key string) to a new file readable only by its owner, synced; an
/// existing file is never overwritten (a lost signing key is not recoverable).
pub(crate) fn write_key_file(path: &std::path::Path, key: &str) -> Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let io_err = |source| Error::KeyFile {
        path: path.display().to_string(),
        source,
    };
    let mut file = options.open(path).map_err(io_err)?;
    file.write_all(format!("{key}\n").as_bytes()).map_err(io_err)?;
    file.sync_all().map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signer and verifier key strings from golang.org/x/mod/sumdb/note's documentation example,
    /// produced by an independent implementation.
    const GO_SKEY: &str = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
    const GO_VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";

    #[test]
    fn key_strings_interoperate_with_the_go_note_package() {
        let signer = NoteSigner::parse(GO_SKEY).unwrap();
        assert_eq!(signer.key_id(), 0xc74f20a3);
        assert_eq!(signer.verifier().to_string(), GO_VKEY);
        assert_eq!(signer.to_private_key_string(), GO_SKEY);
        assert_eq!(NoteVerifier::parse(GO_VKEY).unwrap(), signer.verifier());
        // Ed25519 is deterministic: the same key and text give the Go package's exact note.
        let text = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
        let expected = format!(
            "{text}\n\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
        );
        assert_eq!(signer.sign(text).unwrap(), expected);
        assert_eq!(
            Verifiers::parse(GO_VKEY).unwrap().verify(&expected).unwrap().text,
            text
        );
    }

    #[test]
    fn signs_and_verifies_and_rejects_tampering() {
        let signer = NoteSigner::generate("example.com/log").unwrap();
        let note = signer.sign("hello\nworld\n").unwrap();
        let trusted = Verifiers::new([signer.verifier()]);
        assert_eq!(trusted.verify(&note).unwrap().text, "hello\nworld\n");
        let tampered = note.replacen("world", "worle", 1);
        assert!(matches!(
            trusted.verify(&tampered),
            Err(Error::BadSignature { .. })
        ));
        let stranger = NoteSigner::generate("example.com/log").unwrap();
        assert!(matches!(
            Verifiers::new([stranger.verifier()]).verify(&note),
            Err(Error::UnknownSigner)
        ));
    }

    #[test]
    fn malformed_notes_and_keys_are_errors() {
        for bad in [
            "",
            "text\n",
            "text\n\n",
            "text\n\n\u{2014} k AAAA\n",
            "text\n\n- k AAAAAAAA\n",
            "a\tb\n\n\u{2014} k AAAAAAAA\n",
        ] {
            assert!(Note::parse(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "a+b", "a+zzzzzzzz+AQ==", "a b+00000000+AQ==", "PRIVATE+KEY+x"] {
            assert!(NoteVerifier::parse(bad).is_err(), "{bad:?}");
            assert!(NoteSigner::parse(bad).is_err(), "{bad:?}");
        }
        assert!(NoteSigner::generate("bad name").is_err());
        assert!(NoteSigner::generate("bad+name").is_err());
    }
}
