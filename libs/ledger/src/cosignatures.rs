//! Witnesses' cosignatures of the checkpoints, as ingest keeps them in ATL_COSIGNATURES
//! (`docs/witnesses.md`): one message per checkpoint and witness, each the checkpoint's note with
//! that witness's signature line appended.
//!
//! ```text
//! cosigned_note(note of size S) ─▶ atl.cosignatures.<S>.* in order ─▶ each message that extends
//!   exactly this note, first per witness ─▶ its appended line ─▶ note + lines (a C2SP cosigned note)
//! ```
//!
//! Nothing here checks a cosignature: a reader does, with its own witness policy
//! (`toolledger_merkle::WitnessPolicy`). A message that does not extend the note (another tree of
//! the same size) is left out here and is a witness's refusal's business, not the reader's.

use async_nats::jetstream;
use toolledger_wire::streams::COSIGNATURES;

use crate::read::{OrderedReader, ReadSpec};
use crate::{Error, Result};

/// `note` (a signed checkpoint of `size`, as ATL_CHECKPOINTS holds it) with every witness line
/// ATL_COSIGNATURES holds for it appended. A deployment without ATL_COSIGNATURES (made before
/// witnesses) has none: `note` comes back unchanged.
pub async fn cosigned_note(js: &jetstream::Context, note: &str, size: u64) -> Result<String> {
    match js.get_stream(COSIGNATURES).await {
        Ok(_) => {}
        Err(error)
            if matches!(error.kind(), jetstream::context::GetStreamErrorKind::JetStream(inner)
                if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) =>
        {
            return Ok(note.to_owned());
        }
        Err(error) => return Err(Error::stream(COSIGNATURES, "opening", error)),
    }
    let spec = ReadSpec::to_tail(1).subjects(format!("atl.cosignatures.{size}.*"));
    let mut reader = OrderedReader::open(js, COSIGNATURES, spec).await?;
    let mut seen = Vec::new();
    let mut cosigned = note.to_owned();
    while let Some(message) = reader.next().await? {
        let subject = message.subject.to_string();
        if seen.contains(&subject) {
            continue;
        }
        let text = String::from_utf8_lossy(&message.payload);
        if let Some(lines) = text.strip_prefix(note)
            && !lines.is_empty()
            && lines.ends_with('\n')
            && lines.split_terminator('\n').all(|l| l.starts_with("\u{2014} "))
        {
            cosigned.push_str(lines);
            seen.push(subject);
        }
    }
    Ok(cosigned)
}
