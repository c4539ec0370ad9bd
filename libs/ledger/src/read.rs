//! Reading a stream in order from a position, its last sequence, and single messages.
//!
//! ```text
//! OrderedReader::open(js, stream, ReadSpec)
//!   ReadSpec::to_tail(from)     from ..= the stream's last sequence at open   (verify, backup, erasure)
//!   ReadSpec::range(from, to)   from ..= to, which must exist already          (append read-back, tree
//!                                                                                restore, export recovery)
//!   ReadSpec::follow(from)      from on, as the stream grows                   (projector, exporter)
//!     .subjects(filter)         only messages on matching subjects (gaps are then expected)
//!     .allow_gaps()             skipped sequences are returned, not errors (verify reports them)
//!     .stall_after(d)           how long a bounded read waits for the next message
//!   ─▶ ordered consumer (no server-side state) ─▶ next() / next_batch(n) ─▶ StreamMessage
//! last_sequence(js, stream)     the stream's last sequence (0 when empty)
//! message(js, stream, seq)      one message's payload (direct get)
//! stored_message(js, stream, seq) one message exactly as stored, headers never parsed
//! ```
//!
//! Only payloads carry meaning on the ledger: headers are informational and never trusted. A read of
//! the whole stream is checked for gaps here, once, rather than by every caller: the ledger and the
//! checkpoint stream deny deletes, so a skipped sequence is an error ([`Error::SequenceGap`],
//! [`Error::EndsEarly`]) unless the caller asks to see gaps.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use base64::Engine;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};

use crate::{Error, Result};

/// How long a bounded read waits for the next message before it reports a stall: generous, because a
/// server under load may take seconds to deliver the first message of a large stream.
pub const DEFAULT_STALL: Duration = Duration::from_secs(30);

/// Where an ordered read stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The stream's last sequence when the read opens: a pass over what the stream holds now.
    Tail,
    /// This sequence, inclusive; opening fails with [`Error::BeyondTail`] when the stream ends before it.
    Seq(u64),
    /// Never: the read follows the stream as it grows, and waits for new messages without a limit.
    Follow,
}

/// What an ordered read covers and how it treats gaps and stalls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadSpec {
    from: u64,
    until: Until,
    filter: Option<String>,
    stall: Duration,
    allow_gaps: bool,
}

impl ReadSpec {
    /// From `from` (1 for the whole stream) to the stream's last sequence at open.
    pub fn to_tail(from: u64) -> Self {
        Self::new(from, Until::Tail)
    }

    /// `from..=to`, which the stream must already hold.
    pub fn range(from: u64, to: u64) -> Self {
        Self::new(from, Until::Seq(to))
    }

    /// From `from` on, following the stream.
    pub fn follow(from: u64) -> Self {
        Self::new(from, Until::Follow)
    }

    fn new(from: u64, until: Until) -> Self {
        Self {
            from: from.max(1),
            until,
            filter: None,
            stall: DEFAULT_STALL,
            allow_gaps: false,
        }
    }

    /// Only messages whose subject matches `filter` (NATS wildcards); the sequences in between are
    /// not gaps.
    pub fn subjects(mut self, filter: impl Into<String>) -> Self {
        self.filter = Some(filter.into());
        self.allow_gaps = true;
        self
    }

    /// Returns messages after a skipped sequence instead of failing: for a reader that reports gaps
    /// itself (verify) or checks them against its own position (the projector).
    pub fn allow_gaps(mut self) -> Self {
        self.allow_gaps = true;
        self
    }

    /// How long a bounded read waits for the next message ([`DEFAULT_STALL`] unless set). A following
    /// read never times out: waiting is its normal state.
    pub fn stall_after(mut self, stall: Duration) -> Self {
        self.stall = stall;
        self
    }
}

/// One message read from a stream.
#[derive(Debug, Clone)]
pub struct StreamMessage {
    /// Its stream sequence.
    pub seq: u64,
    /// Its subject (on the ledger: `atl.ledger.<tenant>.<event class>`).
    pub subject: async_nats::Subject,
    /// Its payload: on the ledger, the entry's canonical bytes.
    pub payload: Bytes,
    /// Messages the server still had for this read after this one when it was delivered (the
    /// reader's lag).
    pub pending: u64,
}

/// Reads one stream in order through an ordered consumer: no durable state on the server, so the
/// reader's position is whatever the caller keeps (DESIGN §1).
pub struct OrderedReader {
    stream: String,
    /// The last sequence this read returns; `None` while following.
    last: Option<u64>,
    messages: Option<consumer::pull::Ordered>,
    stall: Duration,
    allow_gaps: bool,
    /// The sequence the next message should have.
    expected: u64,
    /// An error met while a batch was being filled, returned by the next call.
    deferred: Option<Error>,
}

impl std::fmt::Debug for OrderedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderedReader")
            .field("stream", &self.stream)
            .field("last", &self.last)
            .field("expected", &self.expected)
            .field("open", &self.messages.is_some())
            .finish_non_exhaustive()
    }
}

impl OrderedReader {
    /// Opens a read of `stream` as `spec` says.
    pub async fn open(js: &jetstream::Context, stream: &str, spec: ReadSpec) -> Result<Self> {
        let mut handle = js
            .get_stream(stream)
            .await
            .map_err(|e| Error::stream(stream, "opening", e))?;
        let last = match spec.until {
            Until::Follow => None,
            Until::Tail | Until::Seq(_) => {
                let tail = handle
                    .info()
                    .await
                    .map_err(|e| Error::stream(stream, "reading its state", e))?
                    .state
                    .last_sequence;
                match spec.until {
                    Until::Seq(to) if to > tail => {
                        return Err(Error::BeyondTail {
                            stream: stream.to_owned(),
                            wanted: to,
                            last: tail,
                        });
                    }
                    Until::Seq(to) => Some(to),
                    _ => Some(tail),
                }
            }
        };
        let mut reader = Self {
            stream: stream.to_owned(),
            last,
            messages: None,
            stall: spec.stall,
            allow_gaps: spec.allow_gaps,
            expected: spec.from,
            deferred: None,
        };
        if last.is_some_and(|last| last < spec.from) {
            return Ok(reader);
        }
        let consumer = handle
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: spec.from,
                },
                filter_subject: spec.filter.unwrap_or_default(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::stream(stream, format!("reading from seq {}", spec.from), e))?;
        // A bounded read with nothing pending (a filter that matches nothing) would otherwise wait
        // for its stall limit.
        if last.is_none() || consumer.cached_info().num_pending > 0 {
            reader.messages = Some(
                consumer
                    .messages()
                    .await
                    .map_err(|e| Error::stream(stream, format!("reading from seq {}", spec.from), e))?,
            );
        }
        Ok(reader)
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The last sequence this read returns; `None` while following.
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// The next message; `None` after the last one (a following read: when the server ended the
    /// consumer, which a caller answers by opening a new read from its position).
    ///
    /// Cancel-safe: dropping the future before it completes loses no message, so it can sit in a
    /// `select!` beside a shutdown signal.
    pub async fn next(&mut self) -> Result<Option<StreamMessage>> {
        if let Some(error) = self.deferred.take() {
            return Err(error);
        }
        let Some(messages) = self.messages.as_mut() else {
            return self.ended();
        };
        let next = if self.last.is_some() {
            tokio::time::timeout(self.stall, messages.next())
                .await
                .map_err(|_| Error::ReadStalled {
                    stream: self.stream.clone(),
                    after: self.expected - 1,
                    waited: self.stall,
                })?
        } else {
            messages.next().await
        };
        self.take(next)
    }

    /// The next messages: waits for one, then takes the ones already delivered, up to `max` in all.
    /// Empty after the last message. An error after the first message is returned by the next call,
    /// so the messages before it are not lost. Cancel-safe, like [`Self::next`].
    pub async fn next_batch(&mut self, max: usize) -> Result<Vec<StreamMessage>> {
        let Some(first) = self.next().await? else {
            return Ok(Vec::new());
        };
        let mut batch = Vec::with_capacity(max.clamp(1, 1024));
        batch.push(first);
        while batch.len() < max {
            let Some(messages) = self.messages.as_mut() else {
                break;
            };
            // Only what is ready now: the batch never waits for more.
            let Some(next) = messages.next().now_or_never() else {
                break;
            };
            match self.take(next) {
                Ok(Some(message)) => batch.push(message),
                Ok(None) => break,
                Err(error) => {
                    self.deferred = Some(error);
                    break;
                }
            }
        }
        Ok(batch)
    }

    /// Turns what the consumer yielded into the next message, checking order and the read's end.
    fn take(
        &mut self,
        next: Option<Result<jetstream::Message, consumer::pull::OrderedError>>,
    ) -> Result<Option<StreamMessage>> {
        let Some(message) = next else {
            self.messages = None;
            return self.ended();
        };
        let reading = |reader: &Self, e: Box<dyn std::error::Error + Send + Sync>| {
            Error::stream(&reader.stream, format!("reading seq {}", reader.expected), e)
        };
        let message = message.map_err(|e| reading(self, e.into()))?;
        let (seq, pending) = {
            let info = message.info().map_err(|e| reading(self, e))?;
            (info.stream_sequence, info.pending)
        };
        if let Some(last) = self.last {
            if seq > last {
                self.messages = None;
                return self.ended();
            }
            // Nothing pending: nothing up to `last` will come any more (a filtered read, or
            // messages deleted at the end).
            if seq == last || pending == 0 {
                self.messages = None;
            }
        }
        if seq != self.expected && !self.allow_gaps {
            self.messages = None;
            return Err(Error::SequenceGap {
                stream: self.stream.clone(),
                expected: self.expected,
                found: seq,
            });
        }
        self.expected = seq + 1;
        let async_nats::Message { subject, payload, .. } = message.message;
        Ok(Some(StreamMessage {
            seq,
            subject,
            payload,
            pending,
        }))
    }

    /// The read is over: fine, unless a strict bounded read stopped short of its last sequence.
    fn ended(&self) -> Result<Option<StreamMessage>> {
        match self.last {
            Some(last) if !self.allow_gaps && self.expected <= last => Err(Error::EndsEarly {
                stream: self.stream.clone(),
                from: self.expected,
                to: last,
            }),
            _ => Ok(None),
        }
    }
}

/// `from..=to` of `stream` as `(seq, payload)`, checked for gaps: for ranges a caller holds whole
/// anyway (small ones, or ones it hands to a blocking thread in one piece).
pub async fn read_range(
    js: &jetstream::Context,
    stream: &str,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, Bytes)>> {
    if from > to {
        return Ok(Vec::new());
    }
    let mut reader = OrderedReader::open(js, stream, ReadSpec::range(from, to)).await?;
    let mut out = Vec::with_capacity(usize::try_from(to - from + 1).unwrap_or(0).min(1 << 16));
    while let Some(message) = reader.next().await? {
        out.push((message.seq, message.payload));
    }
    Ok(out)
}

/// Every message of `stream` as `(seq, payload)`: for the checkpoint stream, which is small (one
/// message per thousands of ledger entries).
pub async fn read_all(js: &jetstream::Context, stream: &str) -> Result<Vec<(u64, Bytes)>> {
    let mut reader = OrderedReader::open(js, stream, ReadSpec::to_tail(1)).await?;
    let mut out = Vec::new();
    while let Some(message) = reader.next().await? {
        out.push((message.seq, message.payload));
    }
    Ok(out)
}

/// The stream's last sequence (0 when empty).
pub async fn last_sequence(js: &jetstream::Context, stream: &str) -> Result<u64> {
    // Opening the stream reads its state: one request.
    let handle = js
        .get_stream(stream)
        .await
        .map_err(|e| Error::stream(stream, "reading its state", e))?;
    Ok(handle.cached_info().state.last_sequence)
}

/// The payload of message `seq` of `stream`.
pub async fn message(js: &jetstream::Context, stream: &str, seq: u64) -> Result<Bytes> {
    // No info request first: the get itself names a missing stream.
    let handle = js
        .get_stream_no_info(stream)
        .await
        .map_err(|e| Error::stream(stream, "opening", e))?;
    match handle.get_raw_message(seq).await {
        Ok(message) => Ok(message.payload),
        Err(error) if error.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => {
            Err(Error::NoSuchMessage {
                stream: stream.to_owned(),
                seq,
            })
        }
        Err(error) => Err(Error::stream(stream, format!("getting seq {seq}"), error)),
    }
}

/// A message exactly as the stream stored it.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// Its subject.
    pub subject: String,
    /// Its stream sequence.
    pub seq: u64,
    /// The raw `NATS/1.0` header block, empty when it had none.
    pub headers: Bytes,
    /// Its payload.
    pub payload: Bytes,
    /// When the stream stored it.
    pub time: DateTime<Utc>,
}

impl StoredMessage {
    /// The header lines in stored order, names and values trimmed (repeated names kept).
    pub fn header_lines(&self) -> Vec<(String, String)> {
        String::from_utf8_lossy(&self.headers)
            .split("\r\n")
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
            .collect()
    }
}

/// Message `seq` of `stream` through `$JS.API.STREAM.MSG.GET`, whose JSON reply carries headers and
/// data in base64: the header block is never parsed by the client, so any stored bytes can be read
/// (and header order and repeats are kept). `None` when there is no such message.
pub async fn stored_message(
    js: &jetstream::Context,
    stream: &str,
    seq: u64,
) -> Result<Option<StoredMessage>> {
    get_stored(js, stream, serde_json::json!({ "seq": seq })).await
}

/// The first message of `stream` on `subjects` (a filter, `>` for any) at or after `seq`, read like
/// [`stored_message`]: what a work queue holds next from `seq` on for those subjects. `None` when
/// nothing is stored there.
pub async fn next_stored_message(
    js: &jetstream::Context,
    stream: &str,
    subjects: &str,
    seq: u64,
) -> Result<Option<StoredMessage>> {
    get_stored(
        js,
        stream,
        serde_json::json!({ "seq": seq, "next_by_subj": subjects }),
    )
    .await
}

/// The last message of `stream` on `subjects` (a filter; wildcards allowed), read like
/// [`stored_message`]. `None` when nothing is stored there.
pub async fn last_stored_message(
    js: &jetstream::Context,
    stream: &str,
    subjects: &str,
) -> Result<Option<StoredMessage>> {
    get_stored(js, stream, serde_json::json!({ "last_by_subj": subjects })).await
}

async fn get_stored(
    js: &jetstream::Context,
    stream: &str,
    request: serde_json::Value,
) -> Result<Option<StoredMessage>> {
    #[derive(serde::Deserialize)]
    struct Reply {
        message: Option<Raw>,
        error: Option<ApiError>,
    }
    #[derive(serde::Deserialize)]
    struct ApiError {
        code: u16,
        description: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Raw {
        subject: String,
        seq: u64,
        hdrs: Option<String>,
        data: Option<String>,
        time: DateTime<Utc>,
    }
    let action = || format!("getting the message {request}");
    let reply: Reply = js
        .request(format!("STREAM.MSG.GET.{stream}"), &request)
        .await
        .map_err(|e| Error::stream(stream, action(), e))?;
    if let Some(error) = reply.error {
        if error.code == 404 {
            return Ok(None);
        }
        let description = error.description.unwrap_or_default();
        return Err(Error::stream(
            stream,
            action(),
            format!("server error {}: {description}", error.code),
        ));
    }
    let Some(raw) = reply.message else {
        return Ok(None);
    };
    let decode = |field: Option<String>| -> Result<Bytes> {
        base64::engine::general_purpose::STANDARD
            .decode(field.unwrap_or_default())
            .map(Bytes::from)
            .map_err(|e| Error::stream(stream, action(), e))
    };
    Ok(Some(StoredMessage {
        subject: raw.subject,
        seq: raw.seq,
        headers: decode(raw.hdrs)?,
        payload: decode(raw.data)?,
        time: raw.time,
    }))
}
