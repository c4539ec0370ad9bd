//! The single-writer append to ATL_LEDGER.
//!
//! ```text
//!  entries e1..en ──publish(expected_last = L, L+1, … L+n-1), pipelined──▶ ATL_LEDGER
//!        │                                   all acked ─▶ confirmed = L+n
//!        └─ any error or timeout ─▶ stop ─▶ read back L+1.. ─▶ match by leaf hash, in order
//!                                     ├─ stored prefix = e1..ek: confirmed = L+k, re-append e(k+1)..
//!                                     └─ a stored entry that is not ours: another writer ─▶ fail
//! ```
//!
//! Every publish carries `Nats-Expected-Last-Sequence`, and every publish after the first of a
//! pipeline also `Nats-Expected-Last-Msg-Id` naming its predecessor (each entry's `Nats-Msg-Id` is its
//! leaf hash in hex). The sequence alone is not enough: if publish k fails and another writer appends
//! one message, publish k+1's expected sequence matches again. The message-id chain makes every
//! publish conditional on its own predecessor having landed, so a failed publish fails everything
//! after it: the ledger never has gaps, reorders or interleavings, and the read-back tells exactly
//! which entries landed. The first publish of a pipeline relies on the sequence alone, which the
//! server keeps across restarts. Headers on ledger messages are informational; the payload is the
//! entry's canonical bytes.

use std::time::Duration;
use toolledger_core::telemetry::ErrorChain;

use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage};
use bytes::Bytes;
use toolledger_ledger::{OrderedReader, ReadSpec, last_sequence};
use toolledger_merkle::{Hash, leaf_hash};

use crate::{Error, Result};

/// How many times a batch is retried after reconciling before the appender gives up; each retry
/// re-reads the ledger, so a persistent failure (stream gone, lease lost) surfaces quickly.
const MAX_ATTEMPTS: u32 = 5;
/// How long to wait for a publish ack before treating the batch as failed and reconciling.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The `Nats-Msg-Id` of a ledger message: its leaf hash in lowercase hex.
pub fn ledger_msg_id(leaf: &Hash) -> String {
    leaf.iter().map(|b| format!("{b:02x}")).collect()
}

impl PendingEntry {
    /// An entry for `subject` with its leaf hash computed.
    pub fn new(subject: String, bytes: Bytes) -> Self {
        let leaf = leaf_hash(&bytes);
        Self { subject, bytes, leaf }
    }
}

/// Appends entries to the ledger stream as its only writer.
pub struct Appender {
    js: jetstream::Context,
    stream: String,
    last_seq: u64,
}

impl Appender {
    /// An appender that continues after the stream's current last sequence.
    pub async fn open(js: jetstream::Context, stream: &str) -> Result<Self> {
        let last_seq = last_sequence(&js, stream).await?;
        Ok(Self {
            js,
            stream: stream.to_owned(),
            last_seq,
        })
    }

    /// The last sequence this appender knows to be in the ledger.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Appends `entries` in order and returns the sequence each one got.
    ///
    /// On any publish failure the appender reads the ledger back, confirms what landed by leaf hash
    /// and appends the rest; it fails with [`Error::ForeignAppend`] if the ledger holds an entry it did
    /// not write (another writer), and with the last publish error after repeated failures.
    pub async fn append(&mut self, entries: &[PendingEntry]) -> Result<Vec<u64>> {
        let mut done = 0;
        let mut attempt = 0;
        while done < entries.len() {
            let rest = &entries[done..];
            match self.publish_pipelined(rest).await {
                Ok(()) => {
                    self.last_seq += rest.len() as u64;
                    done = entries.len();
                }
                Err(error) => {
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
                .send_publish(entry.subject.clone(), publish)
                .await
                .map_err(|e| publish_error(self.last_seq + i as u64 + 1, &e.kind(), &e))?;
            acks.push(ack);
        }
        let expected_first = self.last_seq + 1;
        for (i, ack) in acks.into_iter().enumerate() {
            let seq = expected_first + i as u64;
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
        while let Some(message) = stored.next().await? {
            let ours = in_flight
                .get(landed)
                .is_some_and(|e| leaf_hash(&message.payload) == e.leaf);
            if !ours {
                return Err(Error::ForeignAppend { seq: message.seq });
            }
            landed += 1;
            self.last_seq = message.seq;
        }
        tracing::info!(landed, last_seq = self.last_seq, "reconciled in-flight entries");
        Ok(landed)
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
