//! The single-writer append to ATL_LEDGER.
//!
//! ```text
//!  entries e1..en ─┬─ atomic (the stream has allow_atomic, ADR-50), ≤ 1,000 a batch, one batch at a time:
//!                  │    e1: core request  Nats-Batch-Id, -Sequence 1, Nats-Expected-Last-Sequence = L ─▶ empty reply
//!                  │    e2..e(n-1): publish  Nats-Batch-Id, -Sequence k
//!                  │    en: publish        Nats-Batch-Id, -Sequence n, Nats-Batch-Commit ─▶ ack seq L+n
//!                  └─ chained (no allow_atomic): publish(expected_last = L, L+1, … L+n-1), pipelined
//!                                   all acked ─▶ confirmed = L+n
//!        └─ any error or timeout ─▶ stop ─▶ read back L+1.. ─▶ match by leaf hash, in order
//!                                     ├─ stored prefix = e1..ek: confirmed = L+k, re-append e(k+1)..
//!                                     └─ a stored entry that is not ours: another writer ─▶ fail
//! ```
//!
//! **Atomic batches** (the default on a ledger `init` created): the server stores a whole batch at the
//! expected position or none of it, checking `Nats-Expected-Last-Sequence` under the stream lock when
//! the batch commits. The next batch starts only after this one's commit ack, so a failed batch is never
//! followed by a later one that a second writer's append lined up again; after a failure the read-back
//! finds either all of the batch or none of it. Batch messages carry no `Nats-Msg-Id` (ADR-50 fails a
//! whole batch on one already in the duplicate window): the expected sequence and the read-back by
//! leaf hash are what make a retry safe.
//!
//! **Chained publishes** (a ledger without `allow_atomic`, servers before 2.12): every publish carries
//! `Nats-Expected-Last-Sequence`, and every publish after the first of a pipeline also
//! `Nats-Expected-Last-Msg-Id` naming its predecessor (each entry's `Nats-Msg-Id` is its leaf hash in
//! hex). The sequence alone is not enough: if publish k fails and another writer appends one message,
//! publish k+1's expected sequence matches again. The message-id chain makes every publish conditional
//! on its own predecessor having landed, so a failed publish fails everything after it. The first
//! publish of a pipeline relies on the sequence alone, which the server keeps across restarts.
//!
//! Either way the ledger never has gaps, reorders or interleavings, and the read-back tells exactly
//! which entries landed. Headers on ledger messages are informational; the payload is the entry's
//! canonical bytes.

use std::time::Duration;
use toolledger_core::telemetry::ErrorChain;

use async_nats::HeaderMap;
use async_nats::header::{
    NATS_BATCH_COMMIT, NATS_BATCH_COMMIT_FINAL, NATS_BATCH_ID, NATS_BATCH_SEQUENCE,
    NATS_EXPECTED_LAST_SEQUENCE,
};
use async_nats::jetstream::{
    self, ErrorCode, context::PublishErrorKind, message::PublishMessage, response::Response,
};
use bytes::Bytes;
use toolledger_ledger::{OrderedReader, ReadSpec, last_sequence};
use toolledger_merkle::{Hash, leaf_hash};
use toolledger_wire::partition::{Partition, Partitions};

use crate::{Error, Result};

/// How many times a batch is retried after reconciling before the appender gives up; each retry
/// re-reads the ledger, so a persistent failure (stream gone, lease lost) surfaces quickly.
const MAX_ATTEMPTS: u32 = 5;
/// How long to wait for a publish ack before treating the batch as failed and reconciling.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// The most messages the server takes in one atomic batch (ADR-50's default limit).
pub const MAX_ATOMIC_BATCH: usize = 1000;

/// An entry ready to append: where it goes and its canonical bytes.
#[derive(Debug, Clone)]
pub struct PendingEntry {
    /// `atl.ledger.<tenant>.<event class>`.
    pub subject: String,
    /// The entry's RFC 8785 bytes, exactly what the ledger message holds.
    pub bytes: Bytes,
    /// `SHA-256(0x00 || bytes)`.
    pub leaf: Hash,
}

/// The `Nats-Msg-Id` of a ledger message in chained mode: its leaf hash in lowercase hex.
pub fn ledger_msg_id(leaf: &Hash) -> String {
    toolledger_wire::entry::hex(leaf)
}

impl PendingEntry {
    /// An entry for `subject` with its leaf hash computed.
    pub fn new(subject: String, bytes: Bytes) -> Self {
        let leaf = leaf_hash(&bytes);
        Self { subject, bytes, leaf }
    }
}

/// How an [`Appender`] lands entries; read off the stream's `allow_atomic` when it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendMode {
    /// ADR-50 atomic batches of up to [`MAX_ATOMIC_BATCH`] entries, one batch in flight.
    Atomic,
    /// One conditional publish per entry, pipelined and chained by message id.
    Chained,
}

/// Appends entries to the ledger stream as its only writer.
pub struct Appender {
    js: jetstream::Context,
    stream: String,
    last_seq: u64,
    mode: AppendMode,
    /// Random per appender, so batch ids never repeat across writers or restarts.
    batch_prefix: String,
    batches: u64,
    /// The partition written and of how many (p0 of one for a plain [`Appender::open`]).
    partition: Partition,
    partitions: Partitions,
}

impl Appender {
    /// An appender that continues after the stream's current last sequence, in atomic batches when
    /// the stream allows them.
    pub async fn open(js: jetstream::Context, stream: &str) -> Result<Self> {
        let handle = js
            .get_stream(stream)
            .await
            .map_err(|e| Error::stream(stream, "opening", e))?;
        let info = handle.cached_info();
        let mode = if info.config.allow_atomic_publish {
            AppendMode::Atomic
        } else {
            AppendMode::Chained
        };
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).map_err(|e| Error::stream(stream, "drawing a batch id", e))?;
        Ok(Self {
            js,
            stream: stream.to_owned(),
            last_seq: info.state.last_sequence,
            mode,
            batch_prefix: toolledger_wire::entry::hex(&nonce),
            batches: 0,
            partition: Partition::ZERO,
            partitions: Partitions::default(),
        })
    }

    /// An appender to a partition's ledger stream, of `partitions`. The pipeline gives entries the
    /// single-ledger subjects (`atl.ledger.<tenant>.<class>`); this appender publishes them under
    /// the partition's prefix (`atl.p1.ledger.<tenant>.<class>`), and refuses an entry whose tenant
    /// lives in another partition.
    pub async fn open_partition(
        js: jetstream::Context,
        partition: Partition,
        partitions: Partitions,
    ) -> Result<Self> {
        let mut appender = Self::open(js, &partition.stream()).await?;
        appender.partition = partition;
        appender.partitions = partitions;
        Ok(appender)
    }

    /// Where `entry` is published on this appender's stream.
    fn subject(&self, entry: &PendingEntry) -> Result<String> {
        if self.partitions.count() == 1 {
            return Ok(entry.subject.clone());
        }
        let wrong = || Error::WrongPartition {
            subject: entry.subject.clone(),
            partition: self.partition.to_string(),
        };
        let rest = entry.subject.strip_prefix("atl.ledger.").ok_or_else(wrong)?;
        let tenant = rest.split('.').next().unwrap_or_default();
        if self.partitions.of(tenant) != self.partition {
            return Err(wrong());
        }
        Ok(format!("{}.{rest}", self.partition.subject_prefix()))
    }

    /// The last sequence this appender knows to be in the ledger.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Whether this appender commits atomic batches or chains single publishes.
    pub fn mode(&self) -> AppendMode {
        self.mode
    }

    /// Appends `entries` in order and returns the sequence each one got.
    ///
    /// On any publish failure the appender reads the ledger back, confirms what landed by leaf hash
    /// and appends the rest; it fails with [`Error::ForeignAppend`] if the ledger holds an entry it did
    /// not write (another writer), and with the last publish error after repeated failures. A server
    /// that refuses atomic batches (the stream's `allow_atomic` was turned off) moves the appender to
    /// chained publishes.
    pub async fn append(&mut self, entries: &[PendingEntry]) -> Result<Vec<u64>> {
        let mut done = 0;
        let mut attempt = 0;
        while done < entries.len() {
            let rest = &entries[done..];
            let published = match self.mode {
                AppendMode::Atomic => {
                    let batch = &rest[..rest.len().min(MAX_ATOMIC_BATCH)];
                    self.commit_batch(batch).await.map(|()| batch.len())
                }
                AppendMode::Chained => self.publish_pipelined(rest).await.map(|()| rest.len()),
            };
            match published {
                Ok(n) => {
                    self.last_seq += n as u64;
                    done += n;
                }
                Err(error) => {
                    if matches!(error, Error::AtomicRefused { .. }) {
                        tracing::warn!(error = %error, stream = %self.stream, "appending with chained publishes from now on");
                        self.mode = AppendMode::Chained;
                    }
                    attempt += 1;
                    tracing::warn!(error = %ErrorChain(&error), attempt, last_seq = self.last_seq, "append failed; reconciling");
                    let landed = match self.reconcile(rest).await {
                        Ok(landed) => landed,
                        Err(foreign @ Error::ForeignAppend { .. }) => return Err(foreign),
                        // The server may be restarting: count it as a failed attempt and read again.
                        Err(read_error) if attempt < MAX_ATTEMPTS => {
                            tracing::warn!(error = %read_error, attempt, "ledger read-back failed");
                            0
                        }
                        Err(read_error) => return Err(read_error),
                    };
                    done += landed;
                    if landed == 0 {
                        if attempt >= MAX_ATTEMPTS {
                            return Err(error);
                        }
                        tokio::time::sleep(backoff(attempt)).await;
                    }
                }
            }
        }
        let first = self.last_seq + 1 - entries.len() as u64;
        Ok((first..=self.last_seq).collect())
    }

    /// Lands `batch` (1..=[`MAX_ATOMIC_BATCH`] entries) right after the confirmed sequence, all of it
    /// or nothing: the first message opens the batch as a request (the server answers it empty, or
    /// with why it refuses), the ones after it are plain publishes, the last commits and is acked.
    async fn commit_batch(&mut self, batch: &[PendingEntry]) -> Result<()> {
        self.batches += 1;
        let id = format!("{}-{}", self.batch_prefix, self.batches);
        let first_seq = self.last_seq + 1;
        let headers = |k: usize| {
            let mut headers = HeaderMap::new();
            headers.insert(NATS_BATCH_ID, id.as_str());
            headers.insert(NATS_BATCH_SEQUENCE, (k + 1).to_string().as_str());
            if k == 0 {
                headers.insert(NATS_EXPECTED_LAST_SEQUENCE, self.last_seq.to_string().as_str());
            }
            if k + 1 == batch.len() {
                headers.insert(NATS_BATCH_COMMIT, NATS_BATCH_COMMIT_FINAL);
            }
            headers
        };
        let client = self.js.client();
        let (last, opening) = batch.split_last().expect("a batch has an entry");
        if !opening.is_empty() {
            let reply = request(
                &client,
                self.subject(&opening[0])?,
                &opening[0],
                headers(0),
                first_seq,
            )
            .await?;
            batch_reply(&reply, first_seq, Step::Open)?;
            for (k, entry) in opening.iter().enumerate().skip(1) {
                client
                    .publish_with_headers(self.subject(entry)?, headers(k), entry.bytes.clone())
                    .await
                    .map_err(|e| Error::Append {
                        seq: first_seq + k as u64,
                        reason: e.to_string(),
                    })?;
            }
        }
        // The commit is a core request too, so a refusal reads the same whichever message carries it
        // (a batch of one is opened and committed by the same message).
        let seq = self.last_seq + batch.len() as u64;
        let reply = request(&client, self.subject(last)?, last, headers(batch.len() - 1), seq).await?;
        batch_reply(&reply, seq, Step::Commit)
    }

    async fn publish_pipelined(&self, entries: &[PendingEntry]) -> Result<()> {
        let mut acks = Vec::with_capacity(entries.len());
        let mut previous: Option<String> = None;
        for (i, entry) in entries.iter().enumerate() {
            let msg_id = ledger_msg_id(&entry.leaf);
            let mut publish = PublishMessage::build()
                .payload(entry.bytes.clone())
                .message_id(&msg_id)
                .expected_last_sequence(self.last_seq + i as u64);
            if let Some(previous) = previous.replace(msg_id) {
                publish = publish.expected_last_message_id(previous);
            }
            let ack = self
                .js
                .send_publish(self.subject(entry)?, publish)
                .await
                .map_err(|e| publish_error(self.last_seq + i as u64 + 1, &e.kind(), &e))?;
            acks.push(ack);
        }
        let expected_first = self.last_seq + 1;
        for (i, ack) in acks.into_iter().enumerate() {
            acked_at(ack, expected_first + i as u64).await?;
        }
        Ok(())
    }

    /// Reads the ledger after the last confirmed sequence and matches it against `in_flight` in order.
    /// Returns how many of `in_flight` landed and moves the confirmed sequence past them.
    async fn reconcile(&mut self, in_flight: &[PendingEntry]) -> Result<usize> {
        let tail = last_sequence(&self.js, &self.stream).await?;
        if tail <= self.last_seq {
            return Ok(0);
        }
        // A read-back that stalls as long as an ack may is a failed attempt, not a wait.
        let spec = ReadSpec::range(self.last_seq + 1, tail).stall_after(ACK_TIMEOUT);
        let mut stored = OrderedReader::open(&self.js, &self.stream, spec).await?;
        let mut landed = 0;
        // Moved only once the whole read-back is in: a read that fails part way leaves the confirmed
        // sequence where it was, and the next attempt reads again from there.
        let mut last = self.last_seq;
        while let Some(message) = stored.next().await? {
            let ours = in_flight
                .get(landed)
                .is_some_and(|e| leaf_hash(&message.payload) == e.leaf);
            if !ours {
                return Err(Error::ForeignAppend { seq: message.seq });
            }
            landed += 1;
            last = message.seq;
        }
        self.last_seq = last;
        tracing::info!(landed, last_seq = self.last_seq, "reconciled in-flight entries");
        Ok(landed)
    }
}

/// Waits (at most [`ACK_TIMEOUT`]) for a publish ack and checks it names `seq`.
async fn acked_at(ack: jetstream::context::PublishAckFuture, seq: u64) -> Result<()> {
    let ack = tokio::time::timeout(ACK_TIMEOUT, ack.into_future())
        .await
        .map_err(|_| Error::AppendTimedOut { seq })?
        .map_err(|e| publish_error(seq, &e.kind(), &e))?;
    if ack.sequence != seq {
        return Err(Error::UnexpectedSequence {
            expected: seq,
            actual: ack.sequence,
        });
    }
    Ok(())
}

/// A batch message sent as a core request (requests time out after the client's 10 s, as acks do).
async fn request(
    client: &async_nats::Client,
    subject: String,
    entry: &PendingEntry,
    headers: HeaderMap,
    seq: u64,
) -> Result<Bytes> {
    client
        .request_with_headers(subject, headers, entry.bytes.clone())
        .await
        .map(|reply| reply.payload)
        .map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::TimedOut => Error::AppendTimedOut { seq },
            _ => Error::Append {
                seq,
                reason: e.to_string(),
            },
        })
}

/// Which message of a batch a reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The first (not also the last): answered empty once the batch is open.
    Open,
    /// The last: answered with the publish ack of the whole batch, whose sequence is `seq`.
    Commit,
}

/// What the reply to a batch's opening or committing message says. A server that refuses atomic
/// batches answers with its error, and one that does not know them stores an opening message on its
/// own and acks it; either way [`Error::AtomicRefused`], and the read-back finds what landed.
fn batch_reply(reply: &[u8], seq: u64, step: Step) -> Result<()> {
    if reply.is_empty() {
        return match step {
            Step::Open => Ok(()),
            Step::Commit => Err(Error::Append {
                seq,
                reason: "an empty reply to a batch commit".to_owned(),
            }),
        };
    }
    let refused = |reason: String| Error::AtomicRefused { seq, reason };
    match serde_json::from_slice::<Response<jetstream::publish::PublishAck>>(reply) {
        Ok(Response::Err { error }) if error.error_code() == ErrorCode::ATOMIC_PUBLISH_DISABLED => {
            Err(refused(error.to_string()))
        }
        Ok(Response::Err { error }) if error.error_code() == ErrorCode::STREAM_WRONG_LAST_SEQUENCE => {
            Err(Error::WrongLastSequence { seq })
        }
        Ok(Response::Err { error }) => Err(Error::Append {
            seq,
            reason: error.to_string(),
        }),
        Ok(Response::Ok(ack)) if step == Step::Commit && ack.sequence == seq => Ok(()),
        Ok(Response::Ok(ack)) if step == Step::Commit => Err(Error::UnexpectedSequence {
            expected: seq,
            actual: ack.sequence,
        }),
        Ok(Response::Ok(ack)) => Err(refused(format!(
            "the server stored the batch's first message alone at seq {}",
            ack.sequence
        ))),
        Err(_) => Err(Error::Append {
            seq,
            reason: format!(
                "unreadable reply to a batch message: {}",
                String::from_utf8_lossy(reply)
            ),
        }),
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100 * 2u64.pow(attempt.min(6)))
}

fn publish_error(seq: u64, kind: &PublishErrorKind, error: &dyn std::fmt::Display) -> Error {
    match kind {
        PublishErrorKind::WrongLastSequence | PublishErrorKind::WrongLastMessageId => {
            Error::WrongLastSequence { seq }
        }
        PublishErrorKind::TimedOut => Error::AppendTimedOut { seq },
        _ => Error::Append {
            seq,
            reason: error.to_string(),
        },
    }
}
