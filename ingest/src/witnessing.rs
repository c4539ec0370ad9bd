//! Asking witnesses to cosign the ledger's checkpoints (DESIGN §10, `docs/witnesses.md`).
//!
//! ```text
//! every second, in each lease-holding session (a partition's, the directory's), beside the
//! appender (never in its way):
//!   last ATL_CHECKPOINTS message on the log's subject: the signed note of size S
//!   for each witness that has not cosigned S and is not backing off, concurrently:
//!     old = the size it last cosigned (ATL_COSIGNATURES at start, 0 if none; its 409 corrects it)
//!     ─▶ consistency proof old → S from the tiles ─▶ POST <url>/add-checkpoint
//!        ├ 200 ─▶ its line verifies under its key ─▶ publish note + line to
//!        │        atl.cosignatures[.<log>].<S>.<key id>
//!        ├ 409, witness at W < S ─▶ old = W, ask again at once
//!        ├ 409, witness at W ≥ S ─▶ it holds a tree we did not sign at S (a fork), or one ahead of ours
//!        │                          (a checkpoint this ledger lost): error, back off
//!        └ unreachable, refused, bad line ─▶ back off, 1 s doubling to 5 min
//! ```
//!
//! Checkpoints go to ATL_CHECKPOINTS the moment they are signed and never wait for a witness:
//! ATL_CHECKPOINTS is immutable, so cosignatures, which come later (much later from a witness that
//! was down), are kept apart in ATL_COSIGNATURES, one message per witness and checkpoint. Each
//! message is the checkpoint note with that witness's signature line appended, so it can be checked
//! on its own; a reader joins a checkpoint's lines into one cosigned note. A witness that was down
//! cosigns only the newest checkpoint when it is back, which is all its protocol needs: the
//! consistency proof covers the ones between.
//!
//! Every log is witnessed alike: p0 on `atl.checkpoints` (its cosignatures on
//! `atl.cosignatures.<S>.<key id>`), a partition on `atl.checkpoints.<K>` and the directory on
//! `atl.checkpoints.directory` (theirs on `atl.cosignatures.<K>.…` and `atl.cosignatures.directory.…`).
//! A witness cosigns the origins it lists, so it lists each partition's and the directory's.

use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use tokio::time::Instant;
use toolledger_merkle::note::Note;
use toolledger_merkle::{Checkpoint, CosignatureVerifier, Cosigners, TileReader, TileStore};
use toolledger_wire::entry::hex;
use toolledger_wire::streams::{
    CHECKPOINTS, COSIGNATURES, cosignature_subject, cosignatures_by, cosigned_size,
};

use toolledger_core::telemetry::ErrorChain;

use crate::checkpoint::CheckpointSettings;
use crate::metrics::{IngestMetrics, WitnessLabel};

/// How often the latest checkpoint is looked at.
const POLL: Duration = Duration::from_secs(1);
/// The first wait after a failed request; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between requests to a failing witness.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A witness the ledger asks to cosign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessTarget {
    /// The submission prefix; requests go to `<url>/add-checkpoint`.
    pub url: String,
    /// Its verifier key: a cosignature line that does not verify under it is not published.
    pub key: CosignatureVerifier,
}

/// The witnesses and how many of them each checkpoint should gather.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WitnessingSettings {
    /// The witnesses (none: nothing is asked).
    pub witnesses: Vec<WitnessTarget>,
    /// Cosignatures a checkpoint should gather; fewer is logged at `warn` until it has them.
    pub quorum: usize,
}

impl WitnessingSettings {
    /// From `ledger.witnesses` and `ledger.witness_quorum`; a key that does not parse is an error
    /// naming it.
    pub fn from_config(config: &toolledger_core::config::LedgerConfig) -> crate::Result<Self> {
        let witnesses = config
            .witnesses
            .iter()
            .map(|w| {
                let key = CosignatureVerifier::parse(&w.key).map_err(|e| crate::Error::WitnessKey {
                    url: w.url.clone(),
                    reason: e.to_string(),
                })?;
                Ok(WitnessTarget {
                    url: w.url.clone(),
                    key,
                })
            })
            .collect::<crate::Result<Vec<_>>>()?;
        Ok(Self {
            witnesses,
            quorum: config.witness_quorum(),
        })
    }
}

/// What is known about one witness.
struct Known {
    target: WitnessTarget,
    label: WitnessLabel,
    /// The size of the latest checkpoint it cosigned, as far as we know.
    size: u64,
    /// No request before this.
    not_before: Instant,
    backoff: Duration,
}

impl Known {
    fn failed(&mut self, metrics: &IngestMetrics) {
        metrics.witness_failures.get_or_create(&self.label).inc();
        self.not_before = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn cosigned(&mut self, size: u64, metrics: &IngestMetrics) {
        self.size = size;
        self.backoff = FIRST_BACKOFF;
        metrics
            .witness_cosigned_size
            .get_or_create(&self.label)
            .set(i64::try_from(size).unwrap_or(i64::MAX));
    }
}

/// The latest signed checkpoint: its note and what it says.
struct Latest {
    note: String,
    checkpoint: Checkpoint,
}

/// Asks the witnesses for cosignatures of each new checkpoint; see the module docs.
pub struct Witnessing {
    js: jetstream::Context,
    /// The log's checkpoint subject in ATL_CHECKPOINTS.
    checkpoint_subject: String,
    tiles: TileReader,
    client: reqwest::Client,
    quorum: usize,
    witnesses: Vec<Known>,
    metrics: IngestMetrics,
    /// The last checkpoint whose standing against the quorum was logged (so each is logged once).
    reported: u64,
}

impl Witnessing {
    /// Reads where each witness stands on the log of `checkpoint` (its subject and origin) from
    /// ATL_COSIGNATURES; `None` without witnesses.
    pub async fn open(
        js: jetstream::Context,
        checkpoint: &CheckpointSettings,
        tiles: TileStore,
        settings: &WitnessingSettings,
        metrics: IngestMetrics,
    ) -> crate::Result<Option<Self>> {
        if settings.witnesses.is_empty() {
            return Ok(None);
        }
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| crate::Error::WitnessKey {
                url: "(every witness)".to_owned(),
                reason: format!("cannot build the HTTP client: {}", ErrorChain(&e)),
            })?;
        let mut witnesses = Vec::with_capacity(settings.witnesses.len());
        for target in &settings.witnesses {
            let subjects = cosignatures_by(&checkpoint.checkpoint_subject, target.key.key_id());
            let size = toolledger_ledger::last_stored_message(&js, COSIGNATURES, &subjects)
                .await?
                .and_then(|m| cosigned_size(&checkpoint.checkpoint_subject, &m.subject))
                .unwrap_or(0);
            let mut known = Known {
                label: WitnessLabel {
                    witness: target.key.name().to_owned(),
                    log: checkpoint.origin.clone(),
                },
                target: target.clone(),
                size: 0,
                not_before: Instant::now(),
                backoff: FIRST_BACKOFF,
            };
            known.cosigned(size, &metrics);
            witnesses.push(known);
        }
        Ok(Some(Self {
            js,
            checkpoint_subject: checkpoint.checkpoint_subject.clone(),
            tiles: TileReader::new(tiles),
            client,
            quorum: settings.quorum,
            witnesses,
            metrics,
            reported: 0,
        }))
    }

    /// [`Self::run`] with witnesses; without, it waits forever too, so it can sit in a `select!`
    /// beside the writer it serves.
    pub async fn run_or_wait(witnessing: Option<Self>) -> std::convert::Infallible {
        match witnessing {
            Some(witnessing) => witnessing.run().await,
            None => std::future::pending().await,
        }
    }

    /// Asks, forever; a failure is logged and retried, never the session's end.
    pub async fn run(mut self) -> std::convert::Infallible {
        loop {
            if let Err(error) = self.round().await {
                tracing::warn!(error = %ErrorChain(&error), "asking witnesses failed; trying again");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One look at the latest checkpoint, and a request to each witness that needs it.
    async fn round(&mut self) -> crate::Result<()> {
        let Some(latest) = latest_checkpoint(&self.js, &self.checkpoint_subject).await? else {
            return Ok(());
        };
        let size = latest.checkpoint.size;
        let now = Instant::now();
        let Self {
            js,
            checkpoint_subject,
            tiles,
            client,
            witnesses,
            metrics,
            ..
        } = self;
        let log = Log {
            js,
            checkpoint_subject,
            tiles,
        };
        let asks = witnesses
            .iter_mut()
            .filter(|w| w.size < size && w.not_before <= now)
            .map(|w| ask(&log, client, w, &latest, metrics));
        futures::future::join_all(asks).await;
        let cosigned = self.witnesses.iter().filter(|w| w.size >= size).count();
        if self.reported < size {
            self.reported = size;
            if cosigned >= self.quorum {
                tracing::debug!(
                    log = %latest.checkpoint.origin,
                    size,
                    cosigned,
                    quorum = self.quorum,
                    "checkpoint reached its witness quorum"
                );
            } else {
                let behind: Vec<&str> = self
                    .witnesses
                    .iter()
                    .filter(|w| w.size < size)
                    .map(|w| w.target.key.name())
                    .collect();
                tracing::warn!(
                    log = %latest.checkpoint.origin,
                    size,
                    cosigned,
                    quorum = self.quorum,
                    ?behind,
                    "checkpoint short of its witness quorum; asking again"
                );
            }
        }
        Ok(())
    }
}

/// The witnessed log: where its cosignatures go and its tiles (for consistency proofs).
struct Log<'a> {
    js: &'a jetstream::Context,
    checkpoint_subject: &'a str,
    tiles: &'a TileReader,
}

/// Asks one witness to cosign `latest`, correcting what we know of it once on a 409, and publishes
/// its cosignature.
async fn ask(
    log: &Log<'_>,
    client: &reqwest::Client,
    witness: &mut Known,
    latest: &Latest,
    metrics: &IngestMetrics,
) {
    let size = latest.checkpoint.size;
    let name = witness.target.key.name().to_owned();
    for _ in 0..2 {
        let old = witness.size;
        let proof = if old == 0 || old == size {
            Vec::new()
        } else {
            match log.tiles.consistency_proof(old, size).await {
                Ok(proof) => proof.hashes,
                Err(error) => {
                    tracing::warn!(witness = name, old, size, %error, "no consistency proof for a witness");
                    witness.failed(metrics);
                    return;
                }
            }
        };
        match toolledger_witness::add_checkpoint(client, &witness.target.url, old, &proof, &latest.note).await
        {
            Ok(lines) => {
                match publish(log, &witness.target.key, latest, &lines).await {
                    Ok(()) => {
                        tracing::debug!(witness = name, size, "checkpoint cosigned");
                        witness.cosigned(size, metrics);
                    }
                    Err(reason) => {
                        tracing::warn!(witness = name, size, reason, "cosignature not kept");
                        witness.failed(metrics);
                    }
                }
                return;
            }
            // The witness is behind us, or already at this checkpoint (it cosigned it, and our
            // publish of its line failed or this ingest took over since): ask again from its size; at
            // our size that is an empty proof and the witness cosigns the same tree again.
            Err(toolledger_witness::Error::Conflict { witness_size })
                if witness_size <= size && witness_size != old =>
            {
                witness.size = witness_size;
            }
            Err(toolledger_witness::Error::Conflict { witness_size }) => {
                tracing::error!(
                    witness = name,
                    witness_size,
                    size,
                    "the witness holds a checkpoint this ledger did not sign at that size (a fork) \
                     or one past its latest; it will not cosign this history"
                );
                witness.size = witness_size.min(size.saturating_sub(1));
                witness.failed(metrics);
                return;
            }
            Err(error) => {
                tracing::warn!(witness = name, size, error = %ErrorChain(&error), "witness did not cosign; retrying later");
                witness.failed(metrics);
                return;
            }
        }
    }
    witness.failed(metrics);
}

/// Publishes the checkpoint note with the witness's own line appended: the first line of its
/// response that verifies under its key. Other lines (another key's, a stranger's) are never kept, so
/// a witness cannot plant a line under another witness's name. The message id makes a repeat
/// (another round, another ingest) a duplicate.
async fn publish(
    log: &Log<'_>,
    key: &CosignatureVerifier,
    latest: &Latest,
    lines: &str,
) -> Result<(), String> {
    let own = Cosigners::new([key.clone()]);
    let cosigned = lines
        .split_inclusive('\n')
        .filter_map(|line| toolledger_merkle::cosignature::append_signature_lines(&latest.note, line).ok())
        .find(|note| own.verify(note).is_ok_and(|found| found.len() == 1))
        .ok_or_else(|| {
            "the response holds no cosignature that verifies under the witness's key".to_owned()
        })?;
    let size = latest.checkpoint.size;
    let message = PublishMessage::build()
        .payload(cosigned.into())
        .message_id(format!(
            "{size}-{}-{:08x}",
            hex(&latest.checkpoint.root),
            key.key_id()
        ));
    let subject = cosignature_subject(log.checkpoint_subject, size, key.key_id());
    let ack = log
        .js
        .send_publish(subject, message)
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(REQUEST_TIMEOUT, ack.into_future())
        .await
        .map_err(|_| "publish ack timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The log's last signed checkpoint in ATL_CHECKPOINTS, `None` before the first: its exact subject,
/// so the other logs' checkpoints, which share the stream, are never taken for it.
async fn latest_checkpoint(
    js: &jetstream::Context,
    checkpoint_subject: &str,
) -> crate::Result<Option<Latest>> {
    let Some(message) = toolledger_ledger::last_stored_message(js, CHECKPOINTS, checkpoint_subject).await?
    else {
        return Ok(None);
    };
    let note = String::from_utf8_lossy(&message.payload).into_owned();
    let checkpoint = Checkpoint::parse_body(&Note::parse(&note)?.text)?;
    Ok(Some(Latest { note, checkpoint }))
}
