//! Asking a witness to cosign: what the ledger's checkpointer calls for each new checkpoint.

use toolledger_merkle::Hash;

use crate::protocol::{AddCheckpoint, SIZE_CONTENT_TYPE, parse_size};
use crate::{Error, Result};

/// Sends `checkpoint_note` (signed by the log) with the consistency proof from `old_size` (what the
/// caller believes the witness last cosigned; 0 at first) to the witness whose submission prefix is
/// `url`, and returns its cosignature line(s), each ending in a newline, to append to the note.
///
/// The lines are returned as the witness sent them: check them with
/// `toolledger_merkle::Cosigners` before counting them. On [`Error::Conflict`] the caller's old size
/// was stale: prove from `witness_size` and ask again (when `witness_size` equals the checkpoint's
/// size the witness holds a different tree of that size, a fork, and asking again will not help).
/// The client's timeouts are the caller's: build it with one.
pub async fn add_checkpoint(
    client: &reqwest::Client,
    url: &str,
    old_size: u64,
    proof: &[Hash],
    checkpoint_note: &str,
) -> Result<String> {
    let endpoint = format!("{}/add-checkpoint", url.trim_end_matches('/'));
    let unreachable = |source| Error::Unreachable {
        url: endpoint.clone(),
        source,
    };
    let body = AddCheckpoint {
        old_size,
        proof: proof.to_vec(),
        checkpoint: checkpoint_note.to_owned(),
    }
    .to_body();
    let response = client
        .post(&endpoint)
        .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(body)
        .send()
        .await
        .map_err(unreachable)?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await.map_err(unreachable)?;
    match status {
        200 => {
            let well_formed = !text.is_empty()
                && text.ends_with('\n')
                && text.split_terminator('\n').all(|l| l.starts_with("\u{2014} "));
            if well_formed {
                Ok(text)
            } else {
                Err(Error::Refused {
                    url: endpoint,
                    status,
                    reason: "the response is not signature lines".to_owned(),
                })
            }
        }
        409 if content_type.as_deref() == Some(SIZE_CONTENT_TYPE) => {
            let witness_size =
                text.strip_suffix('\n')
                    .and_then(parse_size)
                    .ok_or_else(|| Error::Refused {
                        url: endpoint.clone(),
                        status,
                        reason: format!("conflict with an unreadable size {text:?}"),
                    })?;
            Err(Error::Conflict { witness_size })
        }
        _ => Err(Error::Refused {
            url: endpoint,
            status,
            reason: text.trim_end().to_owned(),
        }),
    }
}
