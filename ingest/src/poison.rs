//! Messages the client cannot read: caught after `max_deliver` and quarantined from raw bytes.
//!
//! A header with invalid UTF-8 makes async-nats drop its connection; one with a bare CR panics its
//! connection task. Either way the delivery never reaches ingest and JetStream redelivers it until
//! the consumer's `max_deliver`, then publishes a max-deliveries advisory. Those advisories are
//! captured by the work-queue stream `ATL_INBOUND_ADVISORIES`, so none is missed while ingest is
//! down. For each one ingest fetches the message with `$JS.API.STREAM.MSG.GET` — a JSON reply with
//! base64 headers and data, which no header parser touches — and then:
//!
//! ```text
//! headers parse cleanly ─▶ an ordinary message that ran out of deliveries (ingest crashed on it):
//!                          classified and appended or quarantined like any other
//! headers do not parse  ─▶ quarantined as `poison_message`, raw header block kept in base64
//! then                  ─▶ deleted from ATL_INBOUND, advisory acked
//! ```

use async_nats::HeaderMap;
use async_nats::header::{HeaderName, HeaderValue};
use async_nats::jetstream::{self, AckKind, consumer::pull, stream};
use futures::StreamExt;
use serde::Deserialize;
use toolledger_wire::streams::INBOUND;

use crate::quarantine::Original;
use crate::{Error, Result};

/// How long an advisory another partition's writer handles waits before it is delivered again.
const HAND_BACK: std::time::Duration = std::time::Duration::from_millis(100);

/// The stream that keeps ATL_INBOUND's max-deliveries advisories until ingest handles them.
pub const ADVISORIES: &str = "ATL_INBOUND_ADVISORIES";

/// The max-deliveries advisories of every consumer on ATL_INBOUND (ingest's lanes are its only
/// consumers: a work queue's filters never overlap).
pub fn advisory_subject() -> String {
    format!("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{INBOUND}.*")
}

/// The server's own error reply to an API request, as an error source.
fn api_error(code: u16, description: Option<String>) -> crate::error::BoxError {
    format!("server error {code}: {}", description.unwrap_or_default()).into()
}

/// Creates the advisory stream if it is missing and returns a consumer on it. A stream made before
/// ingest read ATL_INBOUND tenant by tenant captures only the single consumer's advisories; it is
/// widened to every lane's.
pub async fn advisory_consumer(js: &jetstream::Context) -> Result<jetstream::consumer::PullConsumer> {
    let config = stream::Config {
        name: ADVISORIES.to_owned(),
        subjects: vec![advisory_subject()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    let mut stream = js
        .get_or_create_stream(config.clone())
        .await
        .map_err(|e| Error::stream(ADVISORIES, "opening", e))?;
    let subjects = &stream
        .info()
        .await
        .map_err(|e| Error::stream(ADVISORIES, "opening", e))?
        .config
        .subjects;
    if *subjects != config.subjects {
        js.update_stream(config)
            .await
            .map_err(|e| Error::stream(ADVISORIES, "widening its subjects to every lane", e))?;
    }
    stream
        .get_or_create_consumer(
            "ingest",
            pull::Config {
                durable_name: Some("ingest".to_owned()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| Error::stream(ADVISORIES, "opening", e))
}

#[derive(Debug, Deserialize)]
struct Advisory {
    stream_seq: u64,
    /// The ATL_INBOUND consumer whose deliveries ran out (a lane's).
    #[serde(default)]
    consumer: String,
}

/// Takes up to `max` pending advisories and fetches their messages raw (headers parsed only when
/// they parse cleanly, else kept in `raw_headers`); returns them with the advisory messages to ack
/// once each is handled. An advisory whose message is already gone is acked at once; one of a
/// consumer `mine` refuses (another partition's lane) is handed back for that partition's writer,
/// unread.
///
/// It never waits for advisories to arrive: a no-wait pull with an expiry would make the server hold
/// the request until one arrives or the expiry passes, and ingest calls this once per batch (it cost
/// 50 ms a batch, 40 % of ingest's wall time, before the expiry was dropped).
pub async fn take(
    js: &jetstream::Context,
    consumer: &jetstream::consumer::PullConsumer,
    max: usize,
    mine: impl Fn(&str) -> bool,
) -> Result<Vec<(Original, jetstream::Message)>> {
    let mut advisories = consumer
        .fetch()
        .max_messages(max)
        .messages()
        .await
        .map_err(|e| Error::stream(ADVISORIES, "fetching advisories", e))?;
    let mut out = Vec::new();
    while let Some(advisory) = advisories.next().await {
        let advisory = advisory.map_err(|e| Error::stream(ADVISORIES, "reading an advisory", e))?;
        let Ok(parsed) = serde_json::from_slice::<Advisory>(&advisory.payload) else {
            tracing::warn!("unreadable max-deliveries advisory dropped");
            let _ = advisory.ack().await;
            continue;
        };
        if !mine(&parsed.consumer) {
            let _ = advisory.ack_with(AckKind::Nak(Some(HAND_BACK))).await;
            continue;
        }
        match raw_get(js, parsed.stream_seq).await? {
            Some(exhausted) => out.push((exhausted, advisory)),
            None => {
                let _ = advisory.ack().await;
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Deserialize)]
struct ApiError {
    code: u16,
    description: Option<String>,
}

/// Inbound message `seq` read raw, its headers parsed only when they parse cleanly.
pub(crate) async fn raw_get(js: &jetstream::Context, seq: u64) -> Result<Option<Original>> {
    Ok(toolledger_ledger::stored_message(js, INBOUND, seq)
        .await?
        .map(original_of_stored))
}

/// The first inbound message on `subjects` at or after `seq`, read raw like [`raw_get`].
pub(crate) async fn raw_next(js: &jetstream::Context, subjects: &str, seq: u64) -> Result<Option<Original>> {
    Ok(toolledger_ledger::next_stored_message(js, INBOUND, subjects, seq)
        .await?
        .map(original_of_stored))
}

fn original_of_stored(stored: toolledger_ledger::StoredMessage) -> Original {
    let raw = stored.headers;
    let (headers, raw_headers) = if raw.is_empty() {
        (None, None)
    } else {
        match parse_headers(&raw) {
            Some(headers) => (Some(headers), None),
            None => (None, Some(raw)),
        }
    };
    Original {
        subject: stored.subject,
        headers,
        raw_headers,
        payload: stored.payload,
        inbound_seq: stored.seq,
        published: stored.time,
    }
}

/// Parses a `NATS/1.0` header block strictly: UTF-8, CRLF line ends only, no control characters in
/// values, valid names. `None` for anything the client's parser would choke on.
pub fn parse_headers(raw: &[u8]) -> Option<HeaderMap> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut lines = text.split("\r\n");
    if !lines.next()?.starts_with("NATS/1.0") {
        return None;
    }
    let mut headers = HeaderMap::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if line.contains(['\r', '\n']) {
            return None;
        }
        let (name, value) = line.split_once(':')?;
        let name: HeaderName = name.parse().ok()?;
        let value: HeaderValue = value.trim().parse().ok()?;
        headers.append(name, value);
    }
    Some(headers)
}

/// Deletes a handled message from ATL_INBOUND.
pub async fn delete(js: &jetstream::Context, seq: u64) -> Result<()> {
    #[derive(Deserialize)]
    struct Reply {
        error: Option<ApiError>,
    }
    let reply: Reply = js
        .request(
            format!("STREAM.MSG.DELETE.{INBOUND}"),
            &serde_json::json!({ "seq": seq, "no_erase": true }),
        )
        .await
        .map_err(|e| Error::stream(INBOUND, format!("deleting seq {seq}"), e))?;
    match reply.error {
        Some(error) if error.code != 404 => Err(Error::stream(
            INBOUND,
            format!("deleting seq {seq}"),
            api_error(error.code, error.description),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_headers_parse_and_poison_does_not() {
        let clean = parse_headers(b"NATS/1.0\r\nce-id: 1\r\nce-type: tool.declared\r\n\r\n").unwrap();
        assert_eq!(clean.get("ce-id").map(|v| v.as_str()), Some("1"));
        assert!(
            parse_headers(b"NATS/1.0\r\nce-id: \xff\r\n\r\n").is_none(),
            "invalid utf-8"
        );
        assert!(
            parse_headers(b"NATS/1.0\r\nce-id: a\rb\r\n\r\n").is_none(),
            "bare CR"
        );
        assert!(
            parse_headers(b"NATS/1.0\r\nce-id: a\nb\r\n\r\n").is_none(),
            "bare LF"
        );
        assert!(parse_headers(b"HTTP/1.1\r\n\r\n").is_none());
    }
}
