//! Session replay: a session's entries in ledger order, each released at its original offset from
//! the session's first event divided by a speed factor (or at once), for debugging.
//!
//! ```text
//! projection events (tenant, session) ─▶ plan: (seq, event time) in ledger order
//!   ─▶ for each: wait until start + (time − first time) / speed ─▶ read the entry from ATL_LEDGER
//!   ─▶ ReplayedEvent { seq, leaf_hash, offset_ms, event }   (NDJSON / SSE / the CLI)
//!   ─▶ optionally re-published to atl.replay.<tenant>.<class> — never anywhere else
//! ```
//!
//! Offsets never go backwards: an event whose time is earlier than the one before it is released
//! right after it, keeping ledger order. Events without a time take the previous offset.

use std::time::Duration;

use async_nats::jetstream;
use futures::Stream;
use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::Value;
use toolledger_wire::LedgerEntry;

use crate::error::{Error, Result};

/// One entry of the session to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Ledger sequence.
    pub seq: u64,
    /// Its offset from the session's first event at speed 1, in nanoseconds.
    pub offset_ns: u64,
}

/// One replayed entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayedEvent {
    /// Ledger sequence.
    pub seq: u64,
    /// Hex SHA-256 leaf hash of the entry bytes.
    pub leaf_hash: String,
    /// When it was released, in milliseconds after the first (already divided by the speed).
    pub offset_ms: f64,
    /// The CloudEvent as the ledger holds it.
    pub event: Value,
}

/// The session's entries in ledger order with their offsets. `NotFound` when the session has no
/// entries for `tenant`.
pub fn plan(conn: &Connection, tenant: &str, session_id: &str) -> Result<Vec<PlannedEvent>> {
    let sql = |source| Error::Sql {
        context: "replay plan",
        source,
    };
    let mut statement = conn
        .prepare_cached(
            "SELECT seq, event_time_ns FROM events WHERE tenant = ?1 AND session_id = ?2 ORDER BY seq",
        )
        .map_err(sql)?;
    let rows: Vec<(i64, Option<i64>)> = statement
        .query_map(params![tenant, session_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .map_err(sql)?
        .collect::<rusqlite::Result<_>>()
        .map_err(sql)?;
    if rows.is_empty() {
        return Err(Error::NotFound {
            what: "session",
            id: session_id.to_owned(),
        });
    }
    let first = rows.iter().find_map(|(_, t)| *t);
    let mut offset = 0_u64;
    Ok(rows
        .into_iter()
        .map(|(seq, time)| {
            if let (Some(time), Some(first)) = (time, first) {
                offset = offset.max(u64::try_from(time.saturating_sub(first)).unwrap_or(0));
            }
            PlannedEvent {
                seq: u64::try_from(seq).unwrap_or(0),
                offset_ns: offset,
            }
        })
        .collect())
}

/// How fast to replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Original offsets divided by this factor (> 0).
    Speed(f64),
    /// No waiting.
    AsFastAsPossible,
}

impl Pace {
    /// A pace from a `speed` parameter: 0 means as fast as possible; negative, NaN or absurd
    /// values are refused.
    pub fn from_speed(speed: f64) -> Result<Self> {
        if speed == 0.0 {
            return Ok(Self::AsFastAsPossible);
        }
        if !speed.is_finite() || !(0.001..=10_000.0).contains(&speed) {
            return Err(Error::InvalidParameter {
                field: "speed".to_owned(),
                reason: "must be 0 (as fast as possible) or between 0.001 and 10000".to_owned(),
            });
        }
        Ok(Self::Speed(speed))
    }

    fn delay(self, offset_ns: u64) -> Duration {
        match self {
            Self::AsFastAsPossible => Duration::ZERO,
            Self::Speed(speed) => Duration::from_secs_f64(offset_ns as f64 / 1e9 / speed),
        }
    }
}

/// Releases the planned entries at their paced offsets, reading each from the ledger stream
/// `stream` (the session's tenant's partition's, `ATL_LEDGER` for a single ledger) when it is due.
pub fn replay(
    js: jetstream::Context,
    stream: String,
    planned: Vec<PlannedEvent>,
    pace: Pace,
) -> impl Stream<Item = Result<ReplayedEvent>> {
    let start = tokio::time::Instant::now();
    futures::stream::unfold(
        (js, planned.into_iter(), None::<jetstream::stream::Stream>),
        move |(js, mut planned, mut ledger)| {
            let stream = stream.clone();
            async move {
                let next = planned.next()?;
                tokio::time::sleep_until(start + pace.delay(next.offset_ns)).await;
                let item = read_entry(&js, &stream, &mut ledger, next.seq)
                    .await
                    .map(|(leaf_hash, event)| ReplayedEvent {
                        seq: next.seq,
                        leaf_hash,
                        offset_ms: start.elapsed().as_secs_f64() * 1e3,
                        event,
                    });
                Some((item, (js, planned, ledger)))
            }
        },
    )
}

async fn read_entry(
    js: &jetstream::Context,
    stream: &str,
    ledger: &mut Option<jetstream::stream::Stream>,
    seq: u64,
) -> Result<(String, Value)> {
    let unreadable = |reason: String| Error::Ledger { seq, reason };
    if ledger.is_none() {
        *ledger = Some(
            js.get_stream(stream)
                .await
                .map_err(|e| unreadable(e.to_string()))?,
        );
    }
    let stream = ledger
        .as_ref()
        .ok_or_else(|| unreadable("no ledger stream".to_owned()))?;
    let message = stream
        .get_raw_message(seq)
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    let entry = LedgerEntry::parse(&message.payload).map_err(|e| unreadable(e.to_string()))?;
    let leaf = toolledger_wire::entry::hex(&toolledger_merkle::leaf_hash(&message.payload));
    let event = entry.event.into_json();
    Ok((leaf, event))
}

/// The subject prefix replays of `tenant` are re-published under, checked: `atl.replay.<tenant>`
/// itself or a deeper literal prefix of it. Anything else — `atl.in.…`, another tenant, wildcards —
/// is refused, so a replay can never feed the ledger or another tenant's consumers.
pub fn replay_prefix(tenant: &str, requested: Option<&str>) -> Result<String> {
    let base = format!("atl.replay.{tenant}");
    let prefix = requested.unwrap_or(&base);
    let inside = prefix == base
        || prefix
            .strip_prefix(&base)
            .is_some_and(|rest| rest.starts_with('.'));
    let literal = !prefix.is_empty()
        && prefix.split('.').all(|token| {
            !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'*' && b != b'>')
        });
    if !inside || !literal {
        return Err(Error::InvalidParameter {
            field: "subject".to_owned(),
            reason: format!("replays are re-published only under {base}.> (got `{prefix}`)"),
        });
    }
    Ok(prefix.to_owned())
}

/// Re-publishes one replayed event to `<prefix>.<class>` (core NATS: replay consumers subscribe; the
/// ledger never sees it). Returns the subject used.
pub async fn republish(
    client: &async_nats::Client,
    prefix: &str,
    replayed: &ReplayedEvent,
) -> Result<String> {
    let class = replayed.event["type"].as_str().unwrap_or("unknown");
    let subject = format!("{prefix}.{class}");
    let body = serde_json::to_vec(&replayed.event).map_err(|e| Error::Ledger {
        seq: replayed.seq,
        reason: e.to_string(),
    })?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("content-type", "application/cloudevents+json");
    headers.insert("Atl-Replay-Seq", replayed.seq.to_string().as_str());
    client
        .publish_with_headers(subject.clone(), headers, body.into())
        .await
        .map_err(|e| Error::Ledger {
            seq: replayed.seq,
            reason: format!("re-publishing to {subject}: {e}"),
        })?;
    Ok(subject)
}
