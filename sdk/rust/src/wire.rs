//! The NATS side of the contract (DESIGN.md §2–3), as the Python SDK's `wire.py` and `toolledger
//! emit` write it.
//!
//! ```text
//! Event ─▶ checks: tenant grammar, ids (no control character, ≤ 1 KiB), I-JSON data
//!       ─▶ binary mode: every attribute and extension in a `ce-<name>` header, its value
//!          percent-encoded as the CloudEvents HTTP binding prescribes (controls, space, `"`, `%` and
//!          every non-ASCII byte), `ce-datacontenttype: application/json`, the body = `data`
//!       ─▶ `Nats-Msg-Id` = hex SHA-256 over the length-prefixed tenant, source and id
//!       ─▶ subject `atl.in.<tenant>.<event class>`
//! ```
//!
//! A bad id is refused here, at `emit`, rather than quarantined as `bad_id` later where the producer
//! cannot see it. Percent-encoding also guarantees no header value holds CR or LF, which async-nats'
//! infallible `HeaderValue` constructors would panic on.

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::events::Event;
use crate::spool::Message;
use crate::{Error, Result};

/// The largest integer I-JSON keeps exactly (RFC 7493); ingest quarantines larger ones.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// The longest id the ledger serves (bytes of UTF-8).
pub const MAX_ID_BYTES: usize = 1024;
/// Attributes the ledger reads as ids (DESIGN.md §3, docs/ingest.md "Ids").
pub const ID_ATTRIBUTES: [&str; 5] = ["id", "subject", "sessionid", "invocationid", "toolid"];
/// The header every event carries its JetStream dedupe id in.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// Header value bytes the CloudEvents HTTP binding escapes (non-ASCII bytes always are).
const HEADER_VALUE_ESCAPES: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'%');

/// Checks that `tenant` is a valid, non-reserved tenant: `[A-Za-z0-9][A-Za-z0-9_-]{0,63}`.
pub fn check_tenant(tenant: &str) -> Result<()> {
    let bytes = tenant.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "/tenant",
            format!("tenant {tenant:?} is not [A-Za-z0-9][A-Za-z0-9_-]{{0,63}}"),
        ))
    }
}

/// Checks that `value` is inside the ledger's id grammar; `path` names it in the error.
pub fn check_id(path: &str, value: &str) -> Result<()> {
    if value.len() > MAX_ID_BYTES {
        return Err(Error::invalid(
            path,
            format!(
                "{} bytes, over the {MAX_ID_BYTES}-byte limit for ids",
                value.len()
            ),
        ));
    }
    if let Some(c) = value.chars().find(|c| {
        let code = u32::from(*c);
        code < 0x20 || (0x7F..=0x9F).contains(&code)
    }) {
        return Err(Error::invalid(
            path,
            format!("control character U+{:04X}", u32::from(c)),
        ));
    }
    Ok(())
}

/// Checks what ingest could not canonicalize: integers beyond ±(2^53−1). (A `serde_json::Value`
/// cannot hold NaN or an infinity; typed fields that could are checked by their builders.)
pub fn check_ijson(value: &Value, path: &str) -> Result<()> {
    match value {
        Value::Number(n) => {
            let beyond = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() > MAX_SAFE_INTEGER,
                (None, None) => false,
            };
            if beyond {
                return Err(Error::invalid(
                    path,
                    "integer beyond ±(2^53−1) is not I-JSON; send it as a string",
                ));
            }
            Ok(())
        }
        Value::Object(map) => map
            .iter()
            .try_for_each(|(key, item)| check_ijson(item, &format!("{path}/{}", pointer_token(key)))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| check_ijson(item, &format!("{path}/{i}"))),
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A header value as the CloudEvents HTTP binding writes it (the escapes of `toolledger_wire::binding`
/// and the Python SDK's `percent_encode`).
pub fn percent_encode(value: &str) -> String {
    utf8_percent_encode(value, HEADER_VALUE_ESCAPES).to_string()
}

/// `Nats-Msg-Id`: the digest `toolledger emit` and the Python SDK use, so all name an event alike.
pub fn msg_id(tenant: &str, source: &str, event_id: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"toolledger.msg-id.v1");
    for field in [tenant, source, event_id] {
        hasher.update((field.len() as u64).to_be_bytes());
        hasher.update(field.as_bytes());
    }
    hex(&hasher.finalize())
}

/// `atl.in.<tenant>.<event class>`.
pub fn inbound_subject(tenant: &str, event_class: &str) -> String {
    format!("atl.in.{tenant}.{event_class}")
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xF)]));
    }
    out
}

/// The binary-mode message of `event` (subject, headers, body), after every check the ledger would
/// otherwise make later. `emitted_at_ms` is left 0 for the spool to stamp.
pub fn binary_message(event: &Event) -> Result<Message> {
    check_tenant(&event.tenant)?;
    if event.source.is_empty() {
        return Err(Error::invalid("/source", "source must not be empty"));
    }
    if event.event_class.is_empty() || event.event_class.split('.').any(str::is_empty) {
        return Err(Error::invalid(
            "/type",
            format!("{:?} is not an event class", event.event_class),
        ));
    }
    if event
        .event_class
        .contains(|c: char| c.is_whitespace() || c == '*' || c == '>')
    {
        return Err(Error::invalid(
            "/type",
            format!("{:?} is not a subject token", event.event_class),
        ));
    }
    let attributes = event.attributes();
    for (name, value) in &attributes {
        if ID_ATTRIBUTES.contains(name) {
            check_id(&format!("/{name}"), value)?;
        }
    }
    if let Value::Object(data) = &event.data {
        for (key, value) in data {
            if let Value::String(s) = value
                && (key.ends_with("_id") || key == "retry_of")
            {
                check_id(&format!("/data/{}", pointer_token(key)), s)?;
            }
        }
    }
    check_ijson(&event.data, "/data")?;
    let mut headers: Vec<(String, String)> = attributes
        .iter()
        .map(|(name, value)| (format!("ce-{name}"), percent_encode(value)))
        .collect();
    headers.push((
        MSG_ID_HEADER.to_owned(),
        msg_id(&event.tenant, &event.source, &event.id),
    ));
    let body = serde_json::to_vec(&event.data).map_err(|e| Error::invalid("/data", e.to_string()))?;
    Ok(Message {
        subject: inbound_subject(&event.tenant, &event.event_class),
        headers,
        body,
        emitted_at_ms: 0,
        uploads: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_follow_the_subject_token_grammar() {
        for good in ["acme", "a", "A-b_9", &"x".repeat(64)] {
            assert!(check_tenant(good).is_ok(), "{good}");
        }
        for bad in ["", "_system", "-a", "a.b", "a b", "ü", &"x".repeat(65), "a*"] {
            assert!(check_tenant(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ids_refuse_controls_and_length() {
        assert!(check_id("/id", "inv-1 ü").is_ok());
        assert!(check_id("/id", &"i".repeat(1024)).is_ok());
        assert!(check_id("/id", &"i".repeat(1025)).is_err());
        assert!(check_id("/id", "a\nb").is_err());
        assert!(check_id("/id", "a\u{85}b").is_err());
        assert!(check_id("/id", "a\u{7f}b").is_err());
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_refused_with_their_path() {
        assert!(check_ijson(&serde_json::json!({"n": 9_007_199_254_740_991_u64}), "/data").is_ok());
        assert!(check_ijson(&serde_json::json!({"n": -9_007_199_254_740_991_i64}), "/data").is_ok());
        let err = check_ijson(
            &serde_json::json!({"a/b": [1, 9_007_199_254_740_992_u64]}),
            "/data",
        )
        .unwrap_err();
        assert!(err.to_string().contains("/data/a~1b/1"), "{err}");
        assert!(check_ijson(&serde_json::json!({"n": i64::MIN}), "/data").is_err());
        assert!(check_ijson(&serde_json::json!({"f": 1e300}), "/data").is_ok());
    }

    #[test]
    fn header_values_are_encoded_as_the_python_sdk_does() {
        // Golden value from `toolledger_producer.wire.percent_encode`.
        assert_eq!(
            percent_encode("call 1/\u{fc}\"%\u{7f}"),
            "call%201/%C3%BC%22%25%7F"
        );
        assert_eq!(percent_encode("a\r\nb"), "a%0D%0Ab");
        assert_eq!(percent_encode("plain-value_1.2:3"), "plain-value_1.2:3");
    }

    #[test]
    fn msg_id_matches_the_python_sdk_and_toolledger_emit() {
        // Golden value from `toolledger_producer.wire.msg_id`.
        assert_eq!(
            msg_id("acme", "urn:toolledger-producer:golden", "tlp-x"),
            "fd6a581caf8a041b107ed4dfd6d4ec2afd5596583081e4d5445a2ec06c4441d8"
        );
    }
}
