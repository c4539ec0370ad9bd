//! Checking what callers send before any of it reaches SQL: ids, tenants, time ranges, page sizes,
//! cursors and groupings. Statements are parameterized anyway; these checks exist so a caller gets a
//! clear 400 naming the parameter instead of an empty page.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::listing::GroupBy;

/// The longest id accepted (invocation, session, tool, native ids): the ledger's own limit, so
/// every id ingest took can be asked for.
pub const MAX_ID_LEN: usize = toolledger_wire::id::MAX_ID_BYTES;
/// The page size when none is given.
pub const DEFAULT_LIMIT: u32 = 100;
/// The largest page a caller may ask for.
pub const MAX_LIMIT: u32 = 1000;
/// The widest time range a query may cover (a bit over a year).
pub const MAX_RANGE_DAYS: i64 = 400;

/// Checks an id against the grammar ingest enforces ([`toolledger_wire::id`]): not empty, at most
/// 1 KiB, no control character. Anything else (spaces, quotes, `<`, `/`, `%`, any Unicode) is an id
/// the ledger may hold, taken percent-encoded and bound as an SQL parameter, never spliced.
pub fn id<'a>(field: &str, value: &'a str) -> Result<&'a str> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    toolledger_wire::id::check(value).map_err(|problem| Error::invalid(field, problem.to_string()))?;
    Ok(value)
}

/// Checks a tenant name the way the ledger does (`[A-Za-z0-9][A-Za-z0-9_-]{0,63}`).
pub fn tenant(value: &str) -> Result<&str> {
    toolledger_wire::Tenant::parse(value).map_err(|e| Error::invalid("tenant", e.to_string()))?;
    Ok(value)
}

/// Checks a page size: absent → [`DEFAULT_LIMIT`], else 1..=[`MAX_LIMIT`].
pub fn limit(value: Option<u64>) -> Result<u32> {
    match value {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=u64::from(MAX_LIMIT)).contains(&n) => Ok(n as u32),
        Some(n) => Err(Error::invalid(
            "limit",
            format!("{n} is out of range 1..={MAX_LIMIT}"),
        )),
    }
}

/// A closed time range in nanoseconds since the Unix epoch; either end may be open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeRange {
    /// Inclusive lower bound.
    pub from_ns: Option<i64>,
    /// Inclusive upper bound.
    pub to_ns: Option<i64>,
}

/// Parses an RFC 3339 instant into nanoseconds since the epoch.
pub fn instant(field: &str, value: &str) -> Result<i64> {
    let parsed = DateTime::parse_from_rfc3339(value)
        .map_err(|e| Error::invalid(field, format!("`{value}` is not an RFC 3339 time: {e}")))?;
    parsed
        .with_timezone(&Utc)
        .timestamp_nanos_opt()
        .ok_or_else(|| Error::invalid(field, format!("`{value}` is outside 1677..2262")))
}

/// Checks `from`/`to`: RFC 3339, `from <= to`, and no wider than [`MAX_RANGE_DAYS`] when both are given.
pub fn time_range(from: Option<&str>, to: Option<&str>) -> Result<TimeRange> {
    let from_ns = from.map(|v| instant("from", v)).transpose()?;
    let to_ns = to.map(|v| instant("to", v)).transpose()?;
    if let (Some(f), Some(t)) = (from_ns, to_ns) {
        if f > t {
            return Err(Error::invalid("to", "is before from"));
        }
        if t - f > MAX_RANGE_DAYS * 86_400 * 1_000_000_000 {
            return Err(Error::invalid(
                "to",
                format!("the range is wider than {MAX_RANGE_DAYS} days"),
            ));
        }
    }
    Ok(TimeRange { from_ns, to_ns })
}

/// An opaque page cursor: the sort key of the last row returned, bound to the listing it came from
/// and checked with a digest, so a truncated, edited or foreign cursor is a 400, not a wrong page.
pub fn encode_cursor(listing: &str, key: i64) -> String {
    let body = format!("{listing}:{key}");
    URL_SAFE_NO_PAD.encode(format!("{body}.{}", cursor_check(&body)))
}

/// Decodes a cursor made by [`encode_cursor`] for `listing`.
pub fn decode_cursor(listing: &str, cursor: &str) -> Result<i64> {
    let bad = |why: &str| Error::invalid("cursor", format!("malformed cursor: {why}"));
    if cursor.len() > 200 {
        return Err(bad("too long"));
    }
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad("not base64url"))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("not text"))?;
    let (body, check) = text.rsplit_once('.').ok_or_else(|| bad("no check"))?;
    if check != cursor_check(body) {
        return Err(bad("check does not match"));
    }
    let (from, key) = body.rsplit_once(':').ok_or_else(|| bad("no key"))?;
    if from != listing {
        return Err(bad("it belongs to another listing"));
    }
    key.parse().map_err(|_| bad("bad key"))
}

fn cursor_check(body: &str) -> String {
    let digest = Sha256::digest(format!("toolledger-cursor\0{body}"));
    toolledger_wire::entry::hex(&digest[..8])
}

/// Parses what invocation counts are grouped by: `state`, `error_class` or `tool_id` (required).
pub fn group_by(value: Option<&str>) -> Result<GroupBy> {
    let names = || {
        GroupBy::ALL
            .iter()
            .map(|g| g.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let value = value.ok_or_else(|| Error::invalid("group_by", format!("required: one of {}", names())))?;
    GroupBy::ALL
        .into_iter()
        .find(|g| g.name() == value)
        .ok_or_else(|| Error::invalid("group_by", format!("`{value}`: use one of {}", names())))
}

/// Parses a stats bucket width: `<n>m`, `<n>h` or `<n>d` (1m … 31d). Returns nanoseconds.
pub fn bucket(value: Option<&str>) -> Result<(String, i64)> {
    let value = value.unwrap_or("1h");
    let bad = || {
        Error::invalid(
            "bucket",
            format!("`{value}` is not a bucket width like 1m, 15m, 1h, 1d (1m..=31d)"),
        )
    };
    if value.len() < 2 || value.len() > 5 {
        return Err(bad());
    }
    let (number, unit) = value.split_at(value.len() - 1);
    let n: i64 = number.parse().map_err(|_| bad())?;
    let unit_ns: i64 = match unit {
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    } * 1_000_000_000;
    let width = n.checked_mul(unit_ns).ok_or_else(bad)?;
    if n < 1 || width > 31 * 86_400 * 1_000_000_000 {
        return Err(bad());
    }
    Ok((value.to_owned(), width))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_edits() {
        let c = encode_cursor("invocations", 42);
        assert_eq!(decode_cursor("invocations", &c).unwrap(), 42);
        assert!(decode_cursor("sessions", &c).is_err());
        let forged = URL_SAFE_NO_PAD.encode("invocations:43.0000000000000000");
        assert!(decode_cursor("invocations", &forged).is_err());
        assert!(decode_cursor("invocations", "!!!").is_err());
    }

    #[test]
    fn ids_take_what_the_ledger_takes_and_ranges_refuse_absurd_spans() {
        for ledger_id in [
            "inv_00001",
            "x' OR '1'='1",
            "a b</c>%2F",
            "会話 🦀",
            &"a".repeat(MAX_ID_LEN),
        ] {
            assert_eq!(id("invocation_id", ledger_id).unwrap(), ledger_id);
        }
        assert!(id("invocation_id", "").is_err());
        assert!(id("invocation_id", "a\0b").is_err());
        assert!(id("invocation_id", "line\nbreak").is_err());
        assert!(id("invocation_id", &"a".repeat(MAX_ID_LEN + 1)).is_err());
        assert!(time_range(Some("2026-01-02T00:00:00Z"), Some("2026-01-01T00:00:00Z")).is_err());
        assert!(time_range(Some("0001-01-01T00:00:00Z"), None).is_err());
        assert!(time_range(Some("2000-01-01T00:00:00Z"), Some("2026-01-01T00:00:00Z")).is_err());
        assert!(limit(Some(1_000_000_000)).is_err());
        assert!(limit(Some(0)).is_err());
        assert_eq!(bucket(Some("15m")).unwrap().1, 900_000_000_000);
        assert!(bucket(Some("0h")).is_err());
        assert!(bucket(Some("1y")).is_err());
        assert_eq!(group_by(Some("error_class")).unwrap(), GroupBy::ErrorClass);
        assert!(group_by(Some("session_id")).is_err());
        assert!(group_by(None).is_err());
    }
}
