//! Per tool and time bucket: calls, outcome rates and exact latency percentiles.
//!
//! An invocation counts in the bucket of its first event's time. Outcomes: `succeeded` is a success;
//! `failed`, `validation_failed` and `blocked` are failures; `denied` a denial; `timed_out` a
//! timeout; `canceled` counts as canceled; anything else is still in flight. Latency is
//! `ended_at − started_at`, else `ended_at − created_at`, of terminal invocations that carry both,
//! and percentiles are nearest-rank over the exact values (no sketch).

use std::collections::BTreeMap;

use chrono::DateTime;
use rusqlite::types::Value as Sql;
use rusqlite::{Connection, params_from_iter};
use serde::Serialize;

use crate::error::{Error, Result, SqlContext};
use crate::listing::{Conditions, Statement};
use crate::params::TimeRange;

/// The most invocations one stats query may scan; a wider query must narrow its range or tool.
pub const MAX_SCANNED: usize = 2_000_000;
/// The most buckets one answer may hold.
pub const MAX_BUCKETS: i64 = 10_000;

/// Filters of a stats query.
#[derive(Debug, Clone, Default)]
pub struct StatsFilter {
    /// Tenant scope (`None`: all, admin only).
    pub tenant: Option<String>,
    /// Only this tool.
    pub tool_id: Option<String>,
    /// First event time within this range.
    pub range: TimeRange,
    /// Bucket label (`1h`).
    pub bucket: String,
    /// Bucket width in nanoseconds.
    pub bucket_ns: i64,
}

/// One tool in one bucket.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatsRow {
    /// The tool.
    pub tool_id: String,
    /// Bucket start (RFC 3339, UTC).
    pub bucket_start: String,
    /// Invocations.
    pub calls: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Failed, validation_failed or blocked.
    pub failed: u64,
    /// Denied.
    pub denied: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Canceled.
    pub canceled: u64,
    /// Not terminal yet.
    pub in_flight: u64,
    /// succeeded / calls.
    pub success_rate: f64,
    /// failed / calls.
    pub failure_rate: f64,
    /// denied / calls.
    pub denial_rate: f64,
    /// timed_out / calls.
    pub timeout_rate: f64,
    /// Invocations with a latency.
    pub latency_samples: u64,
    /// Median latency, milliseconds.
    pub latency_p50_ms: Option<f64>,
    /// 95th percentile.
    pub latency_p95_ms: Option<f64>,
    /// 99th percentile.
    pub latency_p99_ms: Option<f64>,
}

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// The bucket width asked for.
    pub bucket: String,
    /// One row per tool and bucket with calls, by tool then time.
    pub rows: Vec<StatsRow>,
    /// The earliest first-event time of the invocations counted (RFC 3339, UTC; `None`: none), so
    /// a caller can choose a bucket width for the span.
    pub first_time: Option<String>,
    /// The latest.
    pub last_time: Option<String>,
}

#[derive(Default)]
struct Acc {
    calls: u64,
    succeeded: u64,
    failed: u64,
    denied: u64,
    timed_out: u64,
    canceled: u64,
    in_flight: u64,
    latencies_ms: Vec<f64>,
}

/// Computes stats for `filter`.
pub fn stats(conn: &Connection, filter: &StatsFilter) -> Result<Stats> {
    if let (Some(from), Some(to)) = (filter.range.from_ns, filter.range.to_ns)
        && (to - from) / filter.bucket_ns > MAX_BUCKETS
    {
        return Err(Error::invalid(
            "bucket",
            format!("more than {MAX_BUCKETS} buckets in the range; use a wider bucket"),
        ));
    }
    let statement = statement(filter)?;
    let mut prepared = conn.prepare_cached(&statement.sql).sql("stats")?;
    let mut rows = prepared.query(params_from_iter(statement.values)).sql("stats")?;
    let mut buckets: BTreeMap<(String, i64), Acc> = BTreeMap::new();
    let mut span: Option<(i64, i64)> = None;
    let mut scanned = 0usize;
    while let Some(row) = rows.next().sql("stats")? {
        scanned += 1;
        if scanned > MAX_SCANNED {
            return Err(Error::invalid(
                "to",
                format!("more than {MAX_SCANNED} invocations in range; narrow from/to or tool_id"),
            ));
        }
        let tool: String = row.get(0).sql("stats")?;
        let Some(time_ns) = row.get::<_, Option<i64>>(1).sql("stats")? else {
            continue;
        };
        let state: String = row.get(2).sql("stats")?;
        let created: Option<String> = row.get(3).sql("stats")?;
        let started: Option<String> = row.get(4).sql("stats")?;
        let ended: Option<String> = row.get(5).sql("stats")?;
        span = Some(span.map_or((time_ns, time_ns), |(first, last)| {
            (first.min(time_ns), last.max(time_ns))
        }));
        let start = time_ns.div_euclid(filter.bucket_ns) * filter.bucket_ns;
        let acc = buckets.entry((tool, start)).or_default();
        acc.calls += 1;
        let terminal = match state.as_str() {
            "succeeded" => {
                acc.succeeded += 1;
                true
            }
            "failed" | "validation_failed" | "blocked" => {
                acc.failed += 1;
                true
            }
            "denied" => {
                acc.denied += 1;
                true
            }
            "timed_out" => {
                acc.timed_out += 1;
                true
            }
            "canceled" => {
                acc.canceled += 1;
                true
            }
            _ => {
                acc.in_flight += 1;
                false
            }
        };
        if terminal && let Some(ms) = latency_ms(started.or(created).as_deref(), ended.as_deref()) {
            acc.latencies_ms.push(ms);
        }
    }
    let rows = buckets
        .into_iter()
        .map(|((tool_id, start), mut acc)| {
            acc.latencies_ms.sort_by(f64::total_cmp);
            let rate = |n: u64| n as f64 / acc.calls as f64;
            StatsRow {
                tool_id,
                bucket_start: rfc3339(start, chrono::SecondsFormat::Secs),
                calls: acc.calls,
                succeeded: acc.succeeded,
                failed: acc.failed,
                denied: acc.denied,
                timed_out: acc.timed_out,
                canceled: acc.canceled,
                in_flight: acc.in_flight,
                success_rate: rate(acc.succeeded),
                failure_rate: rate(acc.failed),
                denial_rate: rate(acc.denied),
                timeout_rate: rate(acc.timed_out),
                latency_samples: acc.latencies_ms.len() as u64,
                latency_p50_ms: percentile(&acc.latencies_ms, 50.0),
                latency_p95_ms: percentile(&acc.latencies_ms, 95.0),
                latency_p99_ms: percentile(&acc.latencies_ms, 99.0),
            }
        })
        .collect();
    Ok(Stats {
        bucket: filter.bucket.clone(),
        rows,
        first_time: span.map(|(first, _)| rfc3339(first, chrono::SecondsFormat::AutoSi)),
        last_time: span.map(|(_, last)| rfc3339(last, chrono::SecondsFormat::AutoSi)),
    })
}

/// The statement of [`stats`]: only the filters given, so a tenant's (and a tool's) invocations are
/// read from their index rather than the whole table.
pub(crate) fn statement(filter: &StatsFilter) -> Result<Statement> {
    if let Some(tool) = &filter.tool_id {
        crate::params::id("tool_id", tool)?;
    }
    let mut conditions = Conditions::default();
    conditions.and("i.tenant = ?", filter.tenant.clone().map(Sql::Text));
    conditions.and("i.tool_id = ?", filter.tool_id.clone().map(Sql::Text));
    conditions.and("e.event_time_ns >= ?", filter.range.from_ns.map(Sql::Integer));
    conditions.and("e.event_time_ns <= ?", filter.range.to_ns.map(Sql::Integer));
    let mut statement = Statement::default();
    statement.push_sql(
        "SELECT coalesce(i.tool_id, ''), e.event_time_ns, i.state, i.created_at, i.started_at, i.ended_at
         FROM invocations i JOIN events e ON e.seq = i.first_seq WHERE true",
    );
    statement.push_and(conditions);
    statement.push_sql(" LIMIT ?");
    statement.values.push(Sql::Integer((MAX_SCANNED + 1) as i64));
    Ok(statement)
}

fn rfc3339(ns: i64, format: chrono::SecondsFormat) -> String {
    DateTime::from_timestamp_nanos(ns).to_rfc3339_opts(format, true)
}

fn latency_ms(start: Option<&str>, end: Option<&str>) -> Option<f64> {
    let start = DateTime::parse_from_rfc3339(start?).ok()?;
    let end = DateTime::parse_from_rfc3339(end?).ok()?;
    let ns = (end - start).num_nanoseconds()?;
    (ns >= 0).then(|| ns as f64 / 1e6)
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 95.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
