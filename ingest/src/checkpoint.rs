//! The ledger's Merkle tree and its signed checkpoints, kept by the single writer beside the appender.
//!
//! ```text
//! open (after the lease and the appender):
//!   last ATL_CHECKPOINTS message ─verify (signing key + trusted keys)─▶ signed size S, root R
//!   tiles at S ─TiledLog::open─▶ root = R, and ledger entry S hashes to the tiles' leaf S-1 ?
//!      │ yes                                   │ no, or tiles missing / corrupt / conflicting
//!      ▼                                       ▼
//!   ledger S+1..=tail ─▶ leaves ─▶ tiles    ledger 1..=tail ─▶ leaves ─▶ root at S = R ?
//!                                              ├ no ─▶ Error::CheckpointRootMismatch (ledger altered; stop)
//!                                              └ yes ─▶ rebuild every tile from the leaves
//!   tree grew past S ─▶ checkpoint
//!
//! run:  appended(seqs, entries) ─▶ leaves ─▶ full tiles ─▶ N entries since the last checkpoint? ─▶ checkpoint
//!                               └─▶ every 256th entry ─▶ the entry bundle of the level-0 tile it filled
//!       tick()                  ─▶ T elapsed since the last checkpoint and the tree grew? ─▶ checkpoint
//! checkpoint: flush tiles ─▶ await the entry bundles in flight ─▶ sign the C2SP checkpoint
//!             ─▶ publish to atl.checkpoints with Nats-Expected-Last-Sequence = the last
//!             checkpoint's sequence (single writer)
//! ```
//!
//! Tiles are a cache of the tree; the ledger is its source and the signed checkpoints its anchor.
//! Whenever the tiles cannot be trusted the tree is recomputed from the ledger and compared with the
//! last signed root before ingest appends again, so an altered ledger stops ingest instead of being
//! signed over.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;
use toolledger_merkle::bundle::BUNDLE_WIDTH;
use toolledger_merkle::{
    Checkpoint, CompactRange, Hash, NoteSigner, TileReader, TileStore, TiledLog, Verifiers,
};
use toolledger_wire::entry::hex;
use toolledger_wire::streams::{CHECKPOINTS, CHECKPOINTS_SUBJECT, LEDGER};

use toolledger_ledger::{OrderedReader, ReadSpec};

use crate::append::PendingEntry;
use crate::{Error, Result};

/// The tile store is opened from its configured location by the ledger-access crate, as every
/// reader of the tiles opens it.
pub use toolledger_ledger::open_tiles;

/// Entries between checkpoints unless configured otherwise.
pub const DEFAULT_EVERY: u64 = 1000;
/// Longest time an appended entry waits for a checkpoint unless configured otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// How long to wait for a checkpoint publish ack.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the tree comes from and goes to, and how often it is signed.
#[derive(Debug, Clone)]
pub struct CheckpointSettings {
    /// The ledger stream the tree is over.
    pub ledger_stream: String,
    /// The stream of signed checkpoints.
    pub checkpoint_stream: String,
    /// The subject checkpoints are published on.
    pub checkpoint_subject: String,
    /// The log's identity in every checkpoint (the signing key's name should be the same).
    pub origin: String,
    /// Sign after this many entries since the last checkpoint.
    pub every: u64,
    /// Sign when this long has passed since the last checkpoint and the tree grew.
    pub interval: Duration,
    /// Keys besides the signing key whose checkpoints are trusted on restore (retired keys after a
    /// rotation).
    pub trusted: Verifiers,
}

impl CheckpointSettings {
    /// The contract's streams (ATL_LEDGER, ATL_CHECKPOINTS) with the default cadence.
    pub fn new(origin: &str) -> Self {
        Self {
            ledger_stream: LEDGER.to_owned(),
            checkpoint_stream: CHECKPOINTS.to_owned(),
            checkpoint_subject: CHECKPOINTS_SUBJECT.to_owned(),
            origin: origin.to_owned(),
            every: DEFAULT_EVERY,
            interval: DEFAULT_INTERVAL,
            trusted: Verifiers::default(),
        }
    }
}

/// Keeps the Merkle tree over the ledger in step with the appender and publishes signed checkpoints.
pub struct Checkpointer {
    js: jetstream::Context,
    settings: CheckpointSettings,
    signer: NoteSigner,
    log: TiledLog,
    /// The last published checkpoint (size 0 before the first).
    signed: Checkpoint,
    /// Its sequence in the checkpoint stream (0 before the first).
    signed_seq: u64,
    signed_at: Instant,
    /// The entries after the last full entry bundle (fewer than 256), written as a bundle once
    /// the 256th arrives.
    bundle: Vec<Bytes>,
    /// Bundles being compressed and written off the append path (each checkpoint waits for them).
    bundles: tokio::task::JoinSet<()>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("origin", &self.settings.origin)
            .field("size", &self.log.size())
            .field("signed_size", &self.signed.size)
            .field("signed_seq", &self.signed_seq)
            .finish_non_exhaustive()
    }
}

impl Checkpointer {
    /// Restores the tree at the ledger's tail (`ledger_tail`, the appender's last sequence) from the
    /// last signed checkpoint, the tiles and the ledger, checking it against the signed root; then
    /// signs the entries appended after that checkpoint, if any. Call it holding the ledger lease,
    /// after the appender is open and before appending.
    ///
    /// Fails with [`Error::CheckpointRootMismatch`] when the ledger no longer hashes to the last
    /// signed root, [`Error::LedgerBehindCheckpoint`] when entries a checkpoint covers are gone, and
    /// [`Error::CheckpointUntrusted`] when the last checkpoint does not verify.
    pub async fn open(
        js: jetstream::Context,
        settings: CheckpointSettings,
        signer: NoteSigner,
        tiles: TileStore,
        ledger_tail: u64,
    ) -> Result<Self> {
        let mut verifiers = settings.trusted.clone();
        verifiers.add(signer.verifier());
        // A missing stream is an error, not "no checkpoint yet" (the last-by-subject read below
        // cannot tell the two apart).
        js.get_stream(&settings.checkpoint_stream)
            .await
            .map_err(|e| Error::stream(&settings.checkpoint_stream, "opening", e))?;
        let (signed_seq, signed) = match last_checkpoint(&js, &settings, &verifiers).await? {
            Some(found) => found,
            None => (
                0,
                Checkpoint::new(&settings.origin, 0, toolledger_merkle::empty_root()),
            ),
        };
        if ledger_tail < signed.size {
            return Err(Error::LedgerBehindCheckpoint {
                size: signed.size,
                ledger_last_seq: ledger_tail,
            });
        }
        let log = restore(&js, &settings.ledger_stream, tiles, &signed, ledger_tail).await?;
        tracing::info!(
            size = log.size(),
            signed_size = signed.size,
            signed_seq,
            "merkle tree restored"
        );
        let bundle = open_bundle(&js, &settings.ledger_stream, log.tiles(), signed.size, log.size()).await?;
        let mut checkpointer = Self {
            js,
            settings,
            signer,
            log,
            signed,
            signed_seq,
            signed_at: Instant::now(),
            bundle,
            bundles: tokio::task::JoinSet::new(),
        };
        // Entries appended after the last checkpoint (a crash before it was signed) are signed now,
        // so a writer that keeps crashing early still gets its entries signed.
        checkpointer.checkpoint().await?;
        Ok(checkpointer)
    }

    /// Takes entries the appender just appended at `seqs` into the tree (writing tiles as they fill)
    /// and signs a checkpoint when `every` entries have accumulated since the last one.
    ///
    /// `seqs` must continue the tree exactly ([`Error::CheckpointerOutOfStep`] if not: an append
    /// path that bypassed the checkpointer).
    pub async fn appended(&mut self, seqs: &[u64], entries: &[PendingEntry]) -> Result<()> {
        if seqs.len() != entries.len() {
            return Err(Error::CheckpointerOutOfStep {
                expected: self.log.size() + 1,
                got: seqs.first().copied().unwrap_or(0),
            });
        }
        for (&seq, entry) in seqs.iter().zip(entries) {
            let expected = self.log.size() + 1;
            if seq != expected {
                return Err(Error::CheckpointerOutOfStep { expected, got: seq });
            }
            self.log.append(entry.leaf).await?;
            self.bundle.push(entry.bytes.clone());
            if seq % BUNDLE_WIDTH == 0 {
                // Not cancel-safe from here: a caller that dropped this future mid-way would lose
                // the bundle below a later checkpoint (proofs would read the ledger). Both callers
                // await it to the end.
                let entries = std::mem::replace(&mut self.bundle, Vec::with_capacity(BUNDLE_WIDTH as usize));
                // Written only whole: a bundle that missed an entry (an append that failed half
                // way) is left to the ledger rather than written out of step.
                if entries.len() as u64 == BUNDLE_WIDTH {
                    self.write_bundle(seq / BUNDLE_WIDTH - 1, entries).await;
                }
            }
        }
        if self.log.size() - self.signed.size >= self.settings.every.max(1) {
            self.checkpoint().await?;
        }
        Ok(())
    }

    /// Signs a checkpoint when `interval` has passed since the last one and the tree grew. Call it
    /// between batches, including idle ones.
    pub async fn tick(&mut self) -> Result<Option<Checkpoint>> {
        if self.signed_at.elapsed() >= self.settings.interval {
            return self.checkpoint().await;
        }
        Ok(None)
    }

    /// Signs and publishes a checkpoint for the current tree if it grew since the last one (for
    /// example on shutdown); returns it, or `None` when there was nothing new to sign.
    pub async fn checkpoint(&mut self) -> Result<Option<Checkpoint>> {
        let size = self.log.size();
        if size <= self.signed.size {
            return Ok(None);
        }
        // Tiles first: a published checkpoint's proofs can always be served; and the bundles below
        // it, so that a restart need not look for any below its checkpoint.
        self.log.flush().await?;
        while let Some(done) = self.bundles.join_next().await {
            bundle_task_ended(done);
        }
        let checkpoint = Checkpoint::new(&self.settings.origin, size, self.log.root());
        let note = checkpoint.sign(&[&self.signer])?;
        let seq = self.publish(&checkpoint, &note).await?;
        tracing::debug!(size, seq, "checkpoint signed");
        self.signed = checkpoint.clone();
        self.signed_seq = seq;
        self.signed_at = Instant::now();
        Ok(Some(checkpoint))
    }

    async fn publish(&self, checkpoint: &Checkpoint, note: &str) -> Result<u64> {
        let size = checkpoint.size;
        let failed = |reason: String| Error::CheckpointPublish { size, reason };
        let publish = PublishMessage::build()
            .payload(note.to_owned().into())
            .message_id(format!("{size}-{}", hex(&checkpoint.root)))
            .expected_last_subject_sequence(self.signed_seq);
        let outcome = async {
            let ack = self
                .js
                .send_publish(self.settings.checkpoint_subject.clone(), publish)
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::timeout(ACK_TIMEOUT, ack.into_future())
                .await
                .map_err(|_| "timed out".to_owned())?
                .map_err(|e| e.to_string())
        }
        .await;
        match outcome {
            Ok(ack) => Ok(ack.sequence),
            Err(reason) => {
                // The publish may have landed before the failure: only our own note may follow ours.
                tracing::warn!(size, %reason, "checkpoint publish failed; reading back");
                let stream = &self.settings.checkpoint_stream;
                match last_message(&self.js, stream, &self.settings.checkpoint_subject).await? {
                    Some((seq, text)) if seq > self.signed_seq && text == note => Ok(seq),
                    Some((seq, _)) if seq > self.signed_seq => Err(Error::CheckpointPublish {
                        size,
                        reason: format!(
                            "{stream} seq {seq} holds a checkpoint this writer did not publish; \
                             another writer is active"
                        ),
                    }),
                    _ => Err(failed(reason)),
                }
            }
        }
    }

    /// Compresses and writes a full bundle on a blocking thread, so the append path does not wait
    /// for zstd (about 0.5 ms a bundle) or the store; at most [`BUNDLES_IN_FLIGHT`] at once.
    async fn write_bundle(&mut self, index: u64, entries: Vec<Bytes>) {
        while self.bundles.len() >= BUNDLES_IN_FLIGHT {
            if let Some(done) = self.bundles.join_next().await {
                bundle_task_ended(done);
            }
        }
        let tiles = self.log.tiles().clone();
        self.bundles.spawn(async move {
            let encoded =
                tokio::task::spawn_blocking(move || toolledger_merkle::bundle::encode_bundle(&entries)).await;
            match encoded {
                Ok(Ok(encoded)) => bundle_written(index, tiles.put_bundle(index, encoded).await),
                Ok(Err(error)) => bundle_written(index, Err(error)),
                Err(error) => bundle_task_ended(Err(error)),
            }
        });
    }

    /// Entries in the tree.
    pub fn size(&self) -> u64 {
        self.log.size()
    }

    /// The current root.
    pub fn root(&self) -> Hash {
        self.log.root()
    }

    /// The last published checkpoint (size 0 before the first).
    pub fn last_checkpoint(&self) -> &Checkpoint {
        &self.signed
    }

    /// The last checkpoint's sequence in the checkpoint stream (0 before the first).
    pub fn last_checkpoint_seq(&self) -> u64 {
        self.signed_seq
    }

    /// Where the tiles are written.
    pub fn tiles(&self) -> &TileStore {
        self.log.tiles()
    }
}

/// The last message of the checkpoint stream, verified and parsed; `None` when there is none.
pub(crate) async fn last_checkpoint(
    js: &jetstream::Context,
    settings: &CheckpointSettings,
    verifiers: &Verifiers,
) -> Result<Option<(u64, Checkpoint)>> {
    let Some((seq, note)) =
        last_message(js, &settings.checkpoint_stream, &settings.checkpoint_subject).await?
    else {
        return Ok(None);
    };
    let checkpoint =
        Checkpoint::open_for(&note, &settings.origin, verifiers).map_err(|e| Error::CheckpointUntrusted {
            seq,
            reason: e.to_string(),
        })?;
    Ok(Some((seq, checkpoint)))
}

/// The last message on `subject` in `stream` as text, with its sequence; `None` when there is
/// none. A note that is not UTF-8 comes back garbled and then fails to verify, which is what it
/// deserves.
async fn last_message(js: &jetstream::Context, stream: &str, subject: &str) -> Result<Option<(u64, String)>> {
    Ok(toolledger_ledger::last_stored_message(js, stream, subject)
        .await?
        .map(|stored| (stored.seq, String::from_utf8_lossy(&stored.payload).into_owned())))
}

/// The leaf hashes of ledger entries `from..=to`, read with one ordered consumer; a missing sequence
/// is an error (the ledger denies deletes, so a gap means it was tampered with).
pub async fn ledger_leaves(js: &jetstream::Context, stream: &str, from: u64, to: u64) -> Result<Vec<Hash>> {
    let mut leaves = Vec::with_capacity(usize::try_from(to.saturating_sub(from) + 1).unwrap_or(0));
    if from > to {
        return Ok(leaves);
    }
    let mut reader = OrderedReader::open(js, stream, ReadSpec::range(from, to)).await?;
    while let Some(message) = reader.next().await? {
        leaves.push(toolledger_merkle::leaf_hash(&message.payload));
    }
    Ok(leaves)
}

/// Full bundles compressed and written at once beside the append path.
const BUNDLES_IN_FLIGHT: usize = 4;

/// Logs a bundle write that failed: proofs of its entries read the ledger instead (bundles are a
/// cache, so the append goes on).
fn bundle_written(index: u64, written: toolledger_merkle::Result<()>) {
    if let Err(error) = written {
        tracing::warn!(%error, index, "entry bundle not written; proofs of its entries read the ledger");
    }
}

/// Logs a bundle task that panicked (its bundle stays missing; proofs read the ledger).
fn bundle_task_ended(done: std::result::Result<(), tokio::task::JoinError>) {
    if let Err(error) = done {
        tracing::warn!(%error, "entry bundle task failed; proofs of its entries read the ledger");
    }
}

/// The entries of the open bundle at tree `size` (those after the last full bundle), read from the
/// ledger from the start of the bundle the last checkpoint (`signed_size`) ends in; every bundle that
/// fills on the way is written (entries a stopped writer appended but never took in). Bundles below
/// the checkpoint were written before it was signed; those lost since stay missing, and their
/// proofs read the ledger.
async fn open_bundle(
    js: &jetstream::Context,
    stream: &str,
    tiles: &TileStore,
    signed_size: u64,
    size: u64,
) -> Result<Vec<Bytes>> {
    let from = signed_size / BUNDLE_WIDTH * BUNDLE_WIDTH + 1;
    let mut bundle = Vec::with_capacity(BUNDLE_WIDTH as usize);
    if from > size {
        return Ok(bundle);
    }
    let mut reader = OrderedReader::open(js, stream, ReadSpec::range(from, size)).await?;
    while let Some(message) = reader.next().await? {
        bundle.push(message.payload);
        if bundle.len() as u64 == BUNDLE_WIDTH {
            let index = message.seq / BUNDLE_WIDTH - 1;
            bundle_written(index, tiles.write_bundle(index, &bundle).await);
            bundle.clear();
        }
    }
    Ok(bundle)
}

/// The tree at `tail`: from the tiles when they agree with the signed checkpoint and the ledger,
/// else recomputed from the whole ledger, checked against the signed root, and the tiles rebuilt.
async fn restore(
    js: &jetstream::Context,
    stream: &str,
    tiles: TileStore,
    signed: &Checkpoint,
    tail: u64,
) -> Result<TiledLog> {
    if signed.size > 0 {
        match resume_from_tiles(js, stream, tiles.clone(), signed, tail).await {
            Ok(log) => return Ok(log),
            Err(Error::Merkle(reason)) => {
                tracing::warn!(error = %reason, size = signed.size, "tiles unusable; rebuilding them from the ledger");
            }
            Err(Error::LedgerDiverges { seq }) => {
                tracing::warn!(
                    seq,
                    "ledger entry disagrees with the tiles; recomputing the tree from the ledger"
                );
            }
            Err(other) => return Err(other),
        }
    }
    let leaves = ledger_leaves(js, stream, 1, tail).await?;
    let mut range = CompactRange::new();
    for leaf in leaves
        .iter()
        .take(usize::try_from(signed.size).unwrap_or(usize::MAX))
    {
        range.append(*leaf);
    }
    let computed = range.root();
    if computed != signed.root {
        return Err(Error::CheckpointRootMismatch {
            size: signed.size,
            signed: hex(&signed.root),
            computed: hex(&computed),
        });
    }
    Ok(TiledLog::rebuild(tiles, leaves).await?)
}

/// The fast path: the tiles at the signed size (their root checked against the signature), a spot
/// check that the ledger's entry at that size is the tiles' last leaf, then the ledger's tail.
async fn resume_from_tiles(
    js: &jetstream::Context,
    stream: &str,
    tiles: TileStore,
    signed: &Checkpoint,
    tail: u64,
) -> Result<TiledLog> {
    let mut log = TiledLog::open(tiles.clone(), signed.size, &signed.root).await?;
    let tile_leaf = TileReader::new(tiles)
        .leaf_hash(signed.size - 1, signed.size)
        .await?;
    // One pass from the signed size on: the first entry is the spot check, the rest extend the tree
    // as they stream in, so memory stays flat however long the tail is.
    let mut reader = OrderedReader::open(js, stream, ReadSpec::range(signed.size, tail)).await?;
    let mut first = true;
    while let Some(message) = reader.next().await? {
        let leaf = toolledger_merkle::leaf_hash(&message.payload);
        if first {
            first = false;
            if leaf != tile_leaf {
                return Err(Error::LedgerDiverges { seq: signed.size });
            }
        } else {
            log.append(leaf).await?;
        }
    }
    Ok(log)
}
