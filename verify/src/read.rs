//! Reading the ledger and checkpoint streams: an ordered consumer for whole-stream passes, direct
//! gets for single messages. Only message payloads are used; headers are never trusted.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use futures::StreamExt;

use crate::{Error, Result};

/// How long a read may wait for the next message before it is reported as stalled.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

fn stream_error(stream: &str, e: &dyn std::fmt::Display) -> Error {
    Error::Stream {
        stream: stream.to_owned(),
        reason: e.to_string(),
    }
}

/// The stream's last sequence (0 when empty).
pub async fn last_sequence(js: &jetstream::Context, stream: &str) -> Result<u64> {
    let mut handle = js
        .get_stream(stream)
        .await
        .map_err(|e| stream_error(stream, &e))?;
    let info = handle.info().await.map_err(|e| stream_error(stream, &e))?;
    Ok(info.state.last_sequence)
}

/// The payload of message `seq` of `stream`.
pub async fn message(js: &jetstream::Context, stream: &str, seq: u64) -> Result<Bytes> {
    let handle = js
        .get_stream(stream)
        .await
        .map_err(|e| stream_error(stream, &e))?;
    let message = handle
        .get_raw_message(seq)
        .await
        .map_err(|e| stream_error(stream, &format!("seq {seq}: {e}")))?;
    Ok(message.payload)
}

/// Reads a stream in order from a start sequence up to the last sequence it had when opened.
pub struct StreamReader {
    stream: String,
    last: u64,
    messages: Option<consumer::pull::Ordered>,
}

impl StreamReader {
    /// A reader of `stream` from `from` to the stream's current last sequence.
    pub async fn open(js: &jetstream::Context, stream: &str, from: u64) -> Result<Self> {
        let mut handle = js
            .get_stream(stream)
            .await
            .map_err(|e| stream_error(stream, &e))?;
        let last = handle
            .info()
            .await
            .map_err(|e| stream_error(stream, &e))?
            .state
            .last_sequence;
        let messages = if last >= from.max(1) {
            let consumer = handle
                .create_consumer(consumer::pull::OrderedConfig {
                    deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: from.max(1),
                    },
                    ..Default::default()
                })
                .await
                .map_err(|e| stream_error(stream, &e))?;
            Some(consumer.messages().await.map_err(|e| stream_error(stream, &e))?)
        } else {
            None
        };
        Ok(Self {
            stream: stream.to_owned(),
            last,
            messages,
        })
    }

    /// The last sequence this reader will return.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The next message's sequence and payload; `None` after the last.
    pub async fn next(&mut self) -> Result<Option<(u64, Bytes)>> {
        Ok(self.next_message().await?.map(|(seq, _, payload)| (seq, payload)))
    }

    /// The next message's sequence, subject and payload; `None` after the last.
    pub async fn next_message(&mut self) -> Result<Option<(u64, String, Bytes)>> {
        let Some(messages) = self.messages.as_mut() else {
            return Ok(None);
        };
        let next = tokio::time::timeout(READ_TIMEOUT, messages.next())
            .await
            .map_err(|_| stream_error(&self.stream, &"read stalled"))?;
        let Some(message) = next else {
            self.messages = None;
            return Ok(None);
        };
        let message = message.map_err(|e| stream_error(&self.stream, &e))?;
        let seq = message
            .info()
            .map_err(|e| stream_error(&self.stream, &e))?
            .stream_sequence;
        if seq >= self.last {
            self.messages = None;
        }
        if seq > self.last {
            return Ok(None);
        }
        Ok(Some((seq, message.subject.to_string(), message.payload.clone())))
    }
}

/// Every message of `stream` as `(seq, payload)`: for the checkpoint stream, which is small (one
/// message per thousands of ledger entries).
pub async fn read_all(js: &jetstream::Context, stream: &str) -> Result<Vec<(u64, Bytes)>> {
    let mut reader = StreamReader::open(js, stream, 1).await?;
    let mut out = Vec::new();
    while let Some(message) = reader.next().await? {
        out.push(message);
    }
    Ok(out)
}
