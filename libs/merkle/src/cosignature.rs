//! C2SP `tlog-cosignature` (Ed25519, `cosignature/v1`): a witness's timestamped statement that a
//! checkpoint is the largest consistent tree it has seen for the log.
//!
//! ```text
//! signed message = "cosignature/v1\n" || "time <POSIX seconds>\n" || checkpoint note text
//! signature line = — <witness name> base64(key id (4) || timestamp (u64, big-endian) || Ed25519 signature (64))
//! key id         = SHA-256(name || 0x0A || 0x04 || public key)[:4]
//! ```
//!
//! The line is an ordinary signed-note signature line: it is appended to the checkpoint's signature
//! block, and a reader that does not know the witness ignores it. Keys travel as strings like note
//! keys but with the cosignature type byte 0x04: the verifier key
//! `<name>+<hex key id>+base64(0x04 || public key)` (C2SP vkey) and the signer key
//! `PRIVATE+KEY+<name>+<hex key id>+base64(0x04 || seed)` (this project's file format, kept secret).
//!
//! The signed message does not commit to the witness name, so one key must never serve two witnesses
//! (tlog-cosignature §Ed25519).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::note::{Note, check_key_name, parse_key_id};
use crate::{Error, Result};

/// The signature type byte of an Ed25519 `cosignature/v1` key.
const ALG_COSIGNATURE_V1: u8 = 0x04;
/// The domain-separating header line of the signed message.
const HEADER: &str = "cosignature/v1\n";
/// Key id (4) + timestamp (8) + Ed25519 signature (64).
const SIGNATURE_BYTES: usize = 4 + 8 + 64;

/// The 4-byte key id of a `cosignature/v1` key with this name.
pub fn cosigner_key_id(name: &str, public_key: &[u8; 32]) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', ALG_COSIGNATURE_V1]);
    hasher.update(public_key);
    let digest = hasher.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The bytes a cosignature signs: the header, the time line and the checkpoint's note text (with its
/// final newline, without signature lines).
pub fn signed_message(checkpoint_text: &str, timestamp: u64) -> Vec<u8> {
    format!("{HEADER}time {timestamp}\n{checkpoint_text}").into_bytes()
}

fn decode_cosigner_key(b64: &str) -> Result<[u8; 32]> {
    let bytes = BASE64.decode(b64).map_err(|e| Error::MalformedKey {
        reason: format!("key is not base64: {e}"),
    })?;
    match bytes.split_first() {
        Some((&ALG_COSIGNATURE_V1, key)) => <[u8; 32]>::try_from(key).map_err(|_| Error::MalformedKey {
            reason: format!("ed25519 key has {} bytes, expected 32", key.len()),
        }),
        Some((alg, _)) => Err(Error::MalformedKey {
            reason: format!(
                "signature type {alg:#04x} is not a cosignature/v1 key (expected {ALG_COSIGNATURE_V1:#04x})"
            ),
        }),
        None => Err(Error::MalformedKey {
            reason: "empty key".to_owned(),
        }),
    }
}

fn typed_key(key: &[u8; 32]) -> String {
    let mut typed = Vec::with_capacity(33);
    typed.push(ALG_COSIGNATURE_V1);
    typed.extend_from_slice(key);
    BASE64.encode(typed)
}

/// A witness's cosigning key: an Ed25519 private key with the witness name.
pub struct CosignatureSigner {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl fmt::Debug for CosignatureSigner {
    // Never print the private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CosignatureSigner")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish()
    }
}

impl CosignatureSigner {
    /// A new key for the witness named `name`, from the operating system's randomness.
    pub fn generate(name: &str) -> Result<Self> {
        Self::from_seed(name, crate::note::random_seed()?)
    }

    /// The key with this Ed25519 seed.
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<Self> {
        check_key_name(name)?;
        let key = SigningKey::from_bytes(&seed);
        let key_id = cosigner_key_id(name, key.verifying_key().as_bytes());
        Ok(Self {
            name: name.to_owned(),
            key_id,
            key,
        })
    }

    /// Parses `PRIVATE+KEY+<name>+<hex key id>+base64(0x04 || seed)`.
    pub fn parse(s: &str) -> Result<Self> {
        let rest = s
            .trim_end_matches(['\n', '\r'])
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| Error::MalformedKey {
                reason: "signer key must start with PRIVATE+KEY+".to_owned(),
            })?;
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::MalformedKey {
                reason: "signer key must be PRIVATE+KEY+name+id+key".to_owned(),
            });
        };
        let signer = Self::from_seed(name, decode_cosigner_key(key)?)?;
        if parse_key_id(id)? != signer.key_id {
            return Err(Error::MalformedKey {
                reason: format!("key id {id} does not match the key"),
            });
        }
        Ok(signer)
    }

    /// The signer key string. It is the private key: store it like one.
    pub fn to_private_key_string(&self) -> String {
        format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.key_id,
            typed_key(self.key.as_bytes())
        )
    }

    /// Reads a key file holding one signer key string.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        Self::parse(&crate::note::read_key_file(path)?)
    }

    /// Writes the signer key string to a new file readable only by its owner, synced; an existing file
    /// is never overwritten (a witness that loses its key loses its identity).
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        crate::note::write_key_file(path, &self.to_private_key_string())
    }

    /// The witness name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The public half, to publish and verify with.
    pub fn verifier(&self) -> CosignatureVerifier {
        CosignatureVerifier {
            name: self.name.clone(),
            key_id: self.key_id,
            key: self.key.verifying_key(),
        }
    }

    /// The cosignature line (with its newline) over `checkpoint_text` at `timestamp` (POSIX seconds).
    /// The caller vouches that the checkpoint is consistent with everything it has seen of the log.
    pub fn cosign(&self, checkpoint_text: &str, timestamp: u64) -> Result<String> {
        if timestamp > i64::MAX as u64 {
            return Err(Error::MalformedNote {
                reason: format!("cosignature timestamp {timestamp} exceeds 2^63 - 1"),
            });
        }
        if !checkpoint_text.ends_with('\n') {
            return Err(Error::MalformedNote {
                reason: "note text must end with a newline".to_owned(),
            });
        }
        let signature = self.key.sign(&signed_message(checkpoint_text, timestamp));
        let mut bytes = Vec::with_capacity(SIGNATURE_BYTES);
        bytes.extend_from_slice(&self.key_id.to_be_bytes());
        bytes.extend_from_slice(&timestamp.to_be_bytes());
        bytes.extend_from_slice(&signature.to_bytes());
        Ok(format!("\u{2014} {} {}\n", self.name, BASE64.encode(bytes)))
    }
}

/// A witness's public key: what a verifier's witness policy lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CosignatureVerifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl CosignatureVerifier {
    /// Parses a vkey `<name>+<hex key id>+base64(0x04 || public key)`.
    pub fn parse(s: &str) -> Result<Self> {
        let mut parts = s.trim().splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::MalformedKey {
                reason: "verifier key must be name+id+key".to_owned(),
            });
        };
        check_key_name(name)?;
        let public = decode_cosigner_key(key)?;
        let key = VerifyingKey::from_bytes(&public).map_err(|e| Error::MalformedKey {
            reason: format!("not an ed25519 public key: {e}"),
        })?;
        let key_id = parse_key_id(id)?;
        if key_id != cosigner_key_id(name, &public) {
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

    /// The witness name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Checks one signature (the bytes after the key id: timestamp and Ed25519 signature) over
    /// `checkpoint_text`; returns the timestamp.
    fn check(&self, checkpoint_text: &str, signature: &[u8]) -> Result<u64> {
        let bad = || Error::BadCosignature {
            name: self.name.clone(),
            key_id: self.key_id,
        };
        if signature.len() != SIGNATURE_BYTES - 4 {
            return Err(bad());
        }
        let (time, sig) = signature.split_at(8);
        let timestamp = u64::from_be_bytes(<[u8; 8]>::try_from(time).map_err(|_| bad())?);
        if timestamp > i64::MAX as u64 {
            return Err(bad());
        }
        let sig = Signature::from_slice(sig).map_err(|_| bad())?;
        self.key
            .verify(&signed_message(checkpoint_text, timestamp), &sig)
            .map_err(|_| bad())?;
        Ok(timestamp)
    }
}

impl fmt::Display for CosignatureVerifier {
    /// The vkey string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}+{:08x}+{}",
            self.name,
            self.key_id,
            typed_key(self.key.as_bytes())
        )
    }
}

/// A cosignature that verified: which witness, and when it signed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VerifiedCosignature {
    /// The witness name.
    pub name: String,
    /// The witness key id.
    pub key_id: u32,
    /// When the witness cosigned (POSIX seconds).
    pub timestamp: u64,
}

/// The witness keys a reader knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cosigners {
    keys: Vec<CosignatureVerifier>,
}

impl Cosigners {
    /// A set of witness keys.
    pub fn new(keys: impl IntoIterator<Item = CosignatureVerifier>) -> Self {
        let mut set = Self::default();
        for key in keys {
            if !set.keys.contains(&key) {
                set.keys.push(key);
            }
        }
        set
    }

    /// The keys.
    pub fn keys(&self) -> &[CosignatureVerifier] {
        &self.keys
    }

    /// The cosignatures by these witnesses on a signed note (a checkpoint with its signature lines).
    /// Lines by other keys are ignored, as C2SP asks; a line by a known witness that does not verify
    /// rejects the note. The log's own signature is not checked here: open the checkpoint with the
    /// log's [`crate::Verifiers`] too. A witness appears at most once (its first line).
    pub fn verify(&self, note: &str) -> Result<Vec<VerifiedCosignature>> {
        let parsed = Note::parse(note)?;
        let mut verified: Vec<VerifiedCosignature> = Vec::new();
        for sig in &parsed.signatures {
            let Some(key) = self
                .keys
                .iter()
                .find(|k| k.name == sig.name && k.key_id == sig.key_id)
            else {
                continue;
            };
            let timestamp = key.check(&parsed.text, &sig.signature)?;
            if !verified
                .iter()
                .any(|v| v.name == key.name && v.key_id == key.key_id)
            {
                verified.push(VerifiedCosignature {
                    name: key.name.clone(),
                    key_id: key.key_id,
                    timestamp,
                });
            }
        }
        Ok(verified)
    }
}

/// An auditor's witness policy: these witnesses, at least `quorum` of them (`docs/witnesses.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WitnessPolicy {
    cosigners: Cosigners,
    quorum: usize,
}

/// What a witness policy found on a checkpoint note (the default: no policy, nothing asked).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WitnessVerdict {
    /// The policy's witnesses whose cosignature verified, with when they cosigned.
    pub cosigned_by: Vec<VerifiedCosignature>,
    /// The cosignatures the policy asks for.
    pub quorum: usize,
    /// The witnesses the policy lists.
    pub of: usize,
}

impl WitnessVerdict {
    /// Whether the quorum is met.
    pub fn met(&self) -> bool {
        self.cosigned_by.len() >= self.quorum
    }

    /// The cosigning witnesses' names, comma-separated (`none` when there are none).
    pub fn names(&self) -> String {
        if self.cosigned_by.is_empty() {
            return "none".to_owned();
        }
        self.cosigned_by
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl WitnessPolicy {
    /// The witnesses' verifier keys and the quorum (default: a majority of them). Fails on a key that
    /// does not parse, no keys, or a quorum of 0 or above the number of distinct keys.
    pub fn new(keys: &[impl AsRef<str>], quorum: Option<usize>) -> Result<Self> {
        let cosigners = Cosigners::new(
            keys.iter()
                .map(|k| CosignatureVerifier::parse(k.as_ref()))
                .collect::<Result<Vec<_>>>()?,
        );
        let n = cosigners.keys().len();
        let quorum = quorum.unwrap_or(n / 2 + 1);
        if n == 0 || quorum == 0 || quorum > n {
            return Err(Error::MalformedKey {
                reason: format!("a witness policy needs 1 ≤ quorum ≤ witnesses; got {quorum} of {n}"),
            });
        }
        Ok(Self { cosigners, quorum })
    }

    /// The witnesses.
    pub fn cosigners(&self) -> &Cosigners {
        &self.cosigners
    }

    /// The quorum.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Which of the policy's witnesses cosigned `note`. A line by a listed witness that does not
    /// verify is an error (a changed cosignature), not a missing one.
    pub fn check(&self, note: &str) -> Result<WitnessVerdict> {
        Ok(WitnessVerdict {
            cosigned_by: self.cosigners.verify(note)?,
            quorum: self.quorum,
            of: self.cosigners.keys().len(),
        })
    }
}

/// Adds signature lines (a witness's response) to a signed note, after its existing signatures.
pub fn append_signature_lines(note: &str, lines: &str) -> Result<String> {
    Note::parse(note)?;
    if lines.is_empty()
        || !lines.ends_with('\n')
        || lines.split_terminator('\n').any(|l| !l.starts_with('\u{2014}'))
    {
        return Err(Error::MalformedNote {
            reason: "signature lines must each start with an em dash and end in a newline".to_owned(),
        });
    }
    let joined = format!("{note}{lines}");
    Note::parse(&joined)?;
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Checkpoint, NoteSigner, Verifiers};

    fn cosigned() -> (NoteSigner, CosignatureSigner, String) {
        let log = NoteSigner::generate("example.com/log").unwrap();
        let witness = CosignatureSigner::generate("witness.example/w1").unwrap();
        let checkpoint = Checkpoint::new("example.com/log", 42, [9; 32]);
        let note = checkpoint.sign(&[&log]).unwrap();
        let line = witness.cosign(&checkpoint.body(), 1_679_315_147).unwrap();
        (log, witness, append_signature_lines(&note, &line).unwrap())
    }

    #[test]
    fn a_witness_policy_counts_its_own_witnesses_against_its_quorum() {
        let (_, w1, note) = cosigned();
        let w2 = CosignatureSigner::generate("witness.example/w2").unwrap();
        let w3 = CosignatureSigner::generate("witness.example/w3").unwrap();
        let stranger = CosignatureSigner::generate("witness.example/stranger").unwrap();
        let keys = [&w1, &w2, &w3].map(|w| w.verifier().to_string());
        let policy = WitnessPolicy::new(&keys, None).unwrap();
        assert_eq!(policy.quorum(), 2, "a majority by default");
        let body = Checkpoint::new("example.com/log", 42, [9; 32]).body();
        // One listed witness and a stranger: 1 of 2 needed.
        let with_stranger =
            append_signature_lines(&note, &stranger.cosign(&body, 1_679_315_148).unwrap()).unwrap();
        let verdict = policy.check(&with_stranger).unwrap();
        assert_eq!((verdict.cosigned_by.len(), verdict.met()), (1, false));
        assert_eq!(verdict.names(), "witness.example/w1");
        let two = append_signature_lines(&with_stranger, &w3.cosign(&body, 1_679_315_149).unwrap()).unwrap();
        let verdict = policy.check(&two).unwrap();
        assert!(verdict.met() && verdict.of == 3, "{verdict:?}");
        // A listed witness's line over another checkpoint is not a missing cosignature: it is an error.
        let other = Checkpoint::new("example.com/log", 43, [9; 32]).body();
        let forged = append_signature_lines(&note, &w2.cosign(&other, 1_679_315_150).unwrap()).unwrap();
        assert!(policy.check(&forged).is_err());
        for bad in [Some(0), Some(4)] {
            assert!(WitnessPolicy::new(&keys, bad).is_err());
        }
        assert!(WitnessPolicy::new(&[] as &[&str], None).is_err());
    }

    #[test]
    fn cosignatures_verify_and_the_log_signature_still_does() {
        let (log, witness, note) = cosigned();
        let found = Cosigners::new([witness.verifier()]).verify(&note).unwrap();
        assert_eq!(
            found,
            [VerifiedCosignature {
                name: "witness.example/w1".to_owned(),
                key_id: witness.key_id(),
                timestamp: 1_679_315_147
            }]
        );
        // The log's verifier ignores the witness line (unknown key), as any C2SP reader does.
        assert_eq!(
            Checkpoint::open(&note, &Verifiers::new([log.verifier()]))
                .unwrap()
                .size,
            42
        );
        // An unknown witness is not counted.
        let stranger = CosignatureSigner::generate("witness.example/w1").unwrap();
        assert!(
            Cosigners::new([stranger.verifier()])
                .verify(&note)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn every_one_byte_change_to_the_cosignature_is_rejected() {
        let (_, witness, note) = cosigned();
        let cosigners = Cosigners::new([witness.verifier()]);
        let line_start = note.rfind('\u{2014}').unwrap();
        let b64_start = note[line_start..].rfind(' ').unwrap() + line_start + 1;
        let b64 = &note[b64_start..note.len() - 1];
        let mut raw = BASE64.decode(b64).unwrap();
        for i in 0..raw.len() {
            raw[i] ^= 0x01;
            let changed = format!("{}{}\n", &note[..b64_start], BASE64.encode(&raw));
            raw[i] ^= 0x01;
            let verdict = cosigners.verify(&changed);
            // A changed key id makes the line someone else's: ignored, so no cosignature counted.
            assert!(
                verdict.as_ref().map_or(true, Vec::is_empty),
                "byte {i} changed and still verified"
            );
            if i >= 4 {
                assert!(
                    matches!(verdict, Err(Error::BadCosignature { .. })),
                    "byte {i}: {verdict:?}"
                );
            }
        }
    }

    #[test]
    fn keys_round_trip_and_carry_the_cosignature_type() {
        let witness = CosignatureSigner::generate("witness.example/w1").unwrap();
        let vkey = witness.verifier().to_string();
        assert_eq!(CosignatureVerifier::parse(&vkey).unwrap(), witness.verifier());
        let typed = BASE64.decode(vkey.splitn(3, '+').nth(2).unwrap()).unwrap();
        assert_eq!(typed[0], 0x04);
        let again = CosignatureSigner::parse(&witness.to_private_key_string()).unwrap();
        assert_eq!(again.verifier(), witness.verifier());
        // A note key (type 0x01) is not a cosigner key, nor the other way round.
        let note_key = NoteSigner::generate("witness.example/w1").unwrap();
        assert!(CosignatureVerifier::parse(&note_key.verifier().to_string()).is_err());
        assert!(crate::NoteVerifier::parse(&vkey).is_err());
        assert!(!format!("{witness:?}").contains(&witness.to_private_key_string()[30..]));
    }

    #[test]
    fn signed_message_is_the_c2sp_layout() {
        let body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
        assert_eq!(
            String::from_utf8(signed_message(body, 1679315147)).unwrap(),
            format!("cosignature/v1\ntime 1679315147\n{body}")
        );
    }
}
