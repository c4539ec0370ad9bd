//! The add-checkpoint request body (C2SP tlog-witness):
//!
//! ```text
//! old <old size, decimal, no leading zeros>
//! <consistency proof hash, base64>      (0 to 63 lines, RFC 6962 §2.1.2 order)
//!
//! <signed checkpoint note>
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use toolledger_merkle::Hash;

use crate::{Error, Result};

/// The most consistency proof lines a request may carry (a proof in a tree of 2^64 leaves).
pub const MAX_PROOF_LINES: usize = 63;

/// The `Content-Type` of a 409 response, whose body is the witness's size and a newline.
pub const SIZE_CONTENT_TYPE: &str = "text/x.tlog.size";

/// One add-checkpoint request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size of the checkpoint the caller believes the witness last cosigned (0 for none).
    pub old_size: u64,
    /// The consistency proof from `old_size` to the checkpoint's size.
    pub proof: Vec<Hash>,
    /// The signed checkpoint note, with the log's signature(s).
    pub checkpoint: String,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::MalformedRequest {
        reason: reason.into(),
    }
}

/// Parses a decimal tree size with no leading zeros.
pub fn parse_size(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

impl AddCheckpoint {
    /// The request body.
    pub fn to_body(&self) -> String {
        let mut body = format!("old {}\n", self.old_size);
        for hash in &self.proof {
            body.push_str(&BASE64.encode(hash));
            body.push('\n');
        }
        body.push('\n');
        body.push_str(&self.checkpoint);
        body
    }

    /// Parses a request body. The checkpoint note is only split off here, not parsed.
    pub fn parse(body: &str) -> Result<Self> {
        let (old_line, mut rest) = body
            .split_once('\n')
            .ok_or_else(|| malformed("no old size line"))?;
        let old_size = old_line
            .strip_prefix("old ")
            .and_then(parse_size)
            .ok_or_else(|| malformed(format!("{old_line:?} is not `old <decimal size>`")))?;
        let mut proof = Vec::new();
        loop {
            if let Some(checkpoint) = rest.strip_prefix('\n') {
                return Ok(Self {
                    old_size,
                    proof,
                    checkpoint: checkpoint.to_owned(),
                });
            }
            let (line, next) = rest
                .split_once('\n')
                .ok_or_else(|| malformed("no blank line before the checkpoint"))?;
            if proof.len() == MAX_PROOF_LINES {
                return Err(malformed(format!(
                    "more than {MAX_PROOF_LINES} consistency proof lines"
                )));
            }
            let hash = BASE64
                .decode(line)
                .ok()
                .and_then(|bytes| Hash::try_from(bytes.as_slice()).ok())
                .ok_or_else(|| malformed(format!("proof line {line:?} is not a base64 32-byte hash")))?;
            proof.push(hash);
            rest = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_the_spec_example() {
        let request = AddCheckpoint {
            old_size: 20852014,
            proof: vec![[1; 32], [2; 32]],
            checkpoint: "o\n1\nAAAA\n\n\u{2014} o AAAAAAA=\n".to_owned(),
        };
        assert_eq!(AddCheckpoint::parse(&request.to_body()).unwrap(), request);
        let example = "old 20852014\nPlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\njrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\u{2014} example.com/behind-the-sofa Az3g\n";
        let parsed = AddCheckpoint::parse(example).unwrap();
        assert_eq!(parsed.old_size, 20852014);
        assert_eq!(parsed.proof.len(), 2);
        assert!(parsed.checkpoint.starts_with("example.com/behind-the-sofa\n"));
        let empty = AddCheckpoint::parse("old 0\n\nnote").unwrap();
        assert_eq!((empty.old_size, empty.proof.len()), (0, 0));
    }

    #[test]
    fn malformed_bodies_are_refused() {
        let hash = BASE64.encode([0u8; 32]);
        let too_many = format!("old 1\n{}\nnote", format!("{hash}\n").repeat(64));
        for bad in [
            "",
            "old 1",
            "old 01\n\nnote",
            "old -1\n\nnote",
            "old  1\n\nnote",
            "new 1\n\nnote",
            "old 1\nAAAA\n\nnote",
            &format!("old 1\n{hash}\nnote"),
            &too_many,
        ] {
            assert!(AddCheckpoint::parse(bad).is_err(), "{bad:?}");
        }
    }
}
