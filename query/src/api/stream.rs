//! `GET /v1/sessions/{session_id}/replay`: a session's entries in ledger order at their original pace
//! scaled by `speed` (0: as fast as possible), streamed as they are released.
//!
//! ```text
//! tenant scope ─▶ replay::plan (projection) ─▶ access read recorded ─▶ replay::replay (ledger reads)
//!   ─▶ NDJSON: one ReplayedEvent per line            (default, Accept: application/x-ndjson)
//!   ─▶ SSE:    `event: replayed` / `data: <json>`    (Accept: text/event-stream or format=sse)
//! a ledger read failing mid-stream ends the stream with an error line / `event: error`
//! ```

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;

use super::{Query, Shared, finish, path_id};
use crate::error::{Error, Result};
use crate::params;
use crate::replay::{Pace, ReplayedEvent};

/// How a replay is framed.
#[derive(Debug, Clone, Copy)]
enum Framing {
    Ndjson,
    Sse,
}

impl Framing {
    fn choose(query: &Query, headers: &HeaderMap) -> Result<Self> {
        match query.get("format") {
            Some("ndjson") => Ok(Self::Ndjson),
            Some("sse") => Ok(Self::Sse),
            Some(other) => Err(Error::invalid("format", format!("`{other}`: use ndjson or sse"))),
            None => Ok(
                if headers
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.contains("text/event-stream"))
                {
                    Self::Sse
                } else {
                    Self::Ndjson
                },
            ),
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Self::Ndjson => "application/x-ndjson",
            Self::Sse => "text/event-stream",
        }
    }

    fn event(self, replayed: &ReplayedEvent) -> Bytes {
        let line = serde_json::to_string(replayed).unwrap_or_default();
        match self {
            Self::Ndjson => format!("{line}\n").into(),
            Self::Sse => format!("event: replayed\nid: {}\ndata: {line}\n\n", replayed.seq).into(),
        }
    }

    fn error(self, error: &Error) -> Bytes {
        let body = json!({"error": {"code": error.code(), "message": error.to_string(), "field": null}});
        match self {
            Self::Ndjson => format!("{body}\n").into(),
            Self::Sse => format!("event: error\ndata: {body}\n\n").into(),
        }
    }
}

pub(super) async fn replay(
    State(state): Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let session_id = path_id("session_id", path)?;
        let query = Query::parse(raw, &["tenant", "speed", "format"])?;
        let framing = Framing::choose(&query, &headers)?;
        let speed = match query.get("speed") {
            None => 1.0,
            Some(v) => v
                .parse::<f64>()
                .map_err(|_| Error::invalid("speed", format!("`{v}` is not a number")))?,
        };
        let pace = Pace::from_speed(speed)?;
        let tenant = principal.scope(query.get("tenant"))?;
        params::id("session_id", &session_id)?;
        let ledger = state.ledger("replay")?.js.clone();
        let tenant = match tenant {
            Some(tenant) => tenant,
            None => state.owner_tenant("session_id", "session", &session_id).await?,
        };
        // A tenant's entries are in its partition: its projection, its stream.
        let partition = state.readers.partitions().of(&tenant);
        let (lookup_tenant, id) = (tenant.clone(), session_id.clone());
        let planned = state
            .readers
            .of(partition)
            .read(move |conn| crate::replay::plan(conn, &lookup_tenant, &id))
            .await?;
        // Recorded before the first byte: the caller reads the whole session once it starts.
        let rows = std::iter::repeat_n((tenant, None, Some(session_id)), planned.len());
        state
            .record(&principal, "GET /v1/sessions/{session_id}/replay", None, rows)
            .await?;
        let body = crate::replay::replay(ledger, partition.stream(), planned, pace).scan(
            false,
            move |failed, item| {
                let chunk = match (*failed, item) {
                    (true, _) => None,
                    (false, Ok(replayed)) => Some(framing.event(&replayed)),
                    (false, Err(error)) => {
                        tracing::warn!(%error, "replay stopped");
                        *failed = true;
                        Some(framing.error(&error))
                    }
                };
                futures::future::ready(chunk.map(Ok::<_, Infallible>))
            },
        );
        let mut response = (StatusCode::OK, Body::from_stream(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(framing.content_type()),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        Ok(response)
    }
    .await;
    finish(&state, "replay", result)
}
