//! Witnesses' cosignatures of the checkpoints, as ingest keeps them in ATL_COSIGNATURES
//! (`docs/witnesses.md`): one message per checkpoint and witness, each the checkpoint's note with
//! that witness's signature line appended.
//!
//! ```text
//! cosigned_note(log, note of size S) ─▶ atl.cosignatures[.<log>].<S>.* in order ─▶ each message that extends
//!   exactly this note by one line with the key id its subject names, first per witness
//!   ─▶ note + those lines (a C2SP cosigned note)
//! ```
//!
//! Nothing here checks a cosignature: a reader does, with its own witness policy
//! (`toolledger_merkle::WitnessPolicy`). A message that does not extend the note (another tree of
//! the same size) is left out here and is a witness's refusal's business, not the reader's.

use async_nats::jetstream;
use base64::Engine as _;
use toolledger_wire::streams::{COSIGNATURES, cosignatures_of};

use crate::read::{OrderedReader, ReadSpec};
use crate::{Error, Result};

/// `note` (a signed checkpoint of `size`, as ATL_CHECKPOINTS holds it on `checkpoint_subject`, its
/// log's) with every witness line ATL_COSIGNATURES holds for it appended. A deployment without
/// ATL_COSIGNATURES (made before witnesses) has none: `note` comes back unchanged.
pub async fn cosigned_note(
    js: &jetstream::Context,
    checkpoint_subject: &str,
    note: &str,
    size: u64,
) -> Result<String> {
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
    let spec = ReadSpec::to_tail(1).subjects(cosignatures_of(checkpoint_subject, size));
    let mut reader = OrderedReader::open(js, COSIGNATURES, spec).await?;
    let mut seen = Vec::new();
    let mut cosigned = note.to_owned();
    while let Some(message) = reader.next().await? {
        let subject = message.subject.to_string();
        if seen.contains(&subject) {
            continue;
        }
        // One line, by the witness the subject names (its key id, 8 hex digits, is the last token):
        // a message is the note plus that witness's line, nothing else is taken from it.
        let Some(key_id) = subject
            .rsplit('.')
            .next()
            .and_then(|id| u32::from_str_radix(id, 16).ok())
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&message.payload);
        if let Some(line) = text.strip_prefix(note)
            && line.ends_with('\n')
            && line.matches('\n').count() == 1
            && line_key_id(line) == Some(key_id)
        {
            cosigned.push_str(line);
            seen.push(subject);
        }
    }
    Ok(cosigned)
}

/// The key id of a signature line `— <name> <base64(key id || …)>`.
fn line_key_id(line: &str) -> Option<u32> {
    let blob = line.strip_prefix("\u{2014} ")?.trim_end().rsplit(' ').next()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(blob).ok()?;
    Some(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?))
}
