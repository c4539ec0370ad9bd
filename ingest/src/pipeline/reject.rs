//! The original a rejection keeps in ATL_QUARANTINE: scrubbed the way the accepted event would have
//! been, credential-shaped headers replaced by their markers.
//!
//! ```text
//! body ─▶ I-JSON? ─ yes ─▶ scrubbed as the event it would be (structure, names, shapes)
//!                 └ no ──▶ pattern-scrubbed text only, + Atl-Quarantine-Body-Digest / -Size
//! headers ─▶ credential-shaped name ─▶ marker;  any other value ─▶ pattern-scrubbed
//! raw header block (poison) ─▶ line by line: credential-shaped name ─▶ marker, else pattern-scrubbed
//! ```
//!
//! A binary-mode event's `ce-*` headers are its attributes, and are judged as the attributes of an
//! accepted event are ([`is_credential_attribute`]): `ce-apikey` and `ce-authorization` go whole,
//! while `ce-sessionid`, `ce-invocationid` and the other attributes the ledger reads stay (the header
//! rule alone, which takes any name with `session`, `auth` or `token` whole, lost a quarantined event's
//! session id).

use std::borrow::Cow;
use std::sync::{Mutex, PoisonError};

use async_nats::HeaderMap;
use async_nats::header::HeaderValue;
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolledger_ledger::quarantine::{BODY_DIGEST, BODY_SIZE};

use crate::quarantine::{Original, Rejection};
use crate::scrub::{SCRUBBED_KEY, Scrubber, is_credential_attribute, is_credential_header};

/// The original as quarantine may keep it: an I-JSON body scrubbed like an accepted event would be;
/// any other body reduced to its pattern-scrubbed text with the original's digest and size; header
/// values scrubbed.
pub(crate) fn scrubbed_original(original: &Original, scrubber: &Mutex<Scrubber>) -> Original {
    let scrubber = scrubber.lock().unwrap_or_else(PoisonError::into_inner);
    let mut copy = original.clone();
    let mut reduced = false;
    match toolledger_wire::ijson::parse(&original.payload) {
        Ok(json) => {
            if let Some(scrubbed) = scrub_payload(json, original.headers.as_ref(), &scrubber)
                && let Ok(bytes) = serde_json::to_vec(&scrubbed)
            {
                copy.payload = bytes.into();
            }
        }
        // A binary-mode event without data: nothing to keep or scrub.
        Err(_) if original.payload.is_empty() => {}
        Err(_) => {
            let text = String::from_utf8_lossy(&original.payload);
            copy.payload = scrubber.scrub_text(&text).into_owned().into_bytes().into();
            reduced = true;
        }
    }
    if original.headers.is_some() || reduced {
        let mut kept = HeaderMap::new();
        for (name, values) in original.headers.iter().flat_map(|h| h.iter()) {
            let name_text: &str = name.as_ref();
            // What the body headers say is ingest's to say, not a producer's.
            if name_text.eq_ignore_ascii_case(BODY_DIGEST) || name_text.eq_ignore_ascii_case(BODY_SIZE) {
                continue;
            }
            let credential = replaced_whole(name_text);
            for value in values {
                let text = value.as_str();
                let scrubbed = if credential {
                    Cow::Owned(whole_marker(&scrubber, text))
                } else {
                    scrubber.scrub_text(text)
                };
                match scrubbed {
                    Cow::Borrowed(_) => kept.append(name.clone(), value.clone()),
                    Cow::Owned(text) => {
                        if let Ok(value) = text.parse::<HeaderValue>() {
                            kept.append(name.clone(), value);
                        }
                    }
                }
            }
        }
        if reduced {
            let digest = toolledger_wire::entry::hex(&Sha256::digest(&original.payload));
            kept.insert(BODY_DIGEST, format!("sha256:{digest}").as_str());
            kept.insert(BODY_SIZE, original.payload.len().to_string().as_str());
        }
        copy.headers = Some(kept);
    }
    if let Some(raw) = &original.raw_headers {
        copy.raw_headers = Some(scrub_raw_headers(raw, &scrubber).into());
    }
    copy
}

/// The rejection as quarantine and the ledger's receipt keep it: its detail pattern-scrubbed. A
/// detail names pointers and rules, never values, but a pointer is made of the producer's own object
/// keys, and a key can hold a secret's shape as well as a value can.
pub(crate) fn scrubbed_rejection(mut rejection: Rejection, scrubber: &Mutex<Scrubber>) -> Rejection {
    let scrubber = scrubber.lock().unwrap_or_else(PoisonError::into_inner);
    if let Cow::Owned(detail) = scrubber.scrub_text(&rejection.detail) {
        rejection.detail = detail;
    }
    rejection
}

/// Whether a header of a quarantined original is replaced whole by its marker: a `ce-*` header by the
/// attribute rule, any other by the header rule.
fn replaced_whole(name: &str) -> bool {
    match name.get(..3) {
        Some(prefix) if prefix.eq_ignore_ascii_case("ce-") => {
            is_credential_attribute(&name[3..].to_ascii_lowercase())
        }
        _ => is_credential_header(name),
    }
}

/// The marker a header value gets whole: the value of its `{"$scrubbed": …}` marker.
fn whole_marker(scrubber: &Scrubber, value: &str) -> String {
    scrubber.marker(&Value::String(value.to_owned()))[SCRUBBED_KEY]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A raw header block (one the client could not parse: invalid UTF-8, a bare CR or LF) scrubbed line
/// by line like parsed headers; bytes that are not UTF-8 are kept as they are, for the diagnosis.
fn scrub_raw_headers(raw: &[u8], scrubber: &Scrubber) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    for line in raw.split_inclusive(|b| *b == b'\n') {
        let name = line.iter().position(|b| *b == b':').and_then(|colon| {
            std::str::from_utf8(&line[..colon])
                .ok()
                .map(|n| (colon, n.trim()))
        });
        match name {
            Some((colon, name)) if replaced_whole(name) => {
                let end = line.len() - line.iter().rev().take_while(|b| b"\r\n".contains(b)).count();
                let value = String::from_utf8_lossy(&line[colon + 1..end]);
                out.extend_from_slice(&line[..=colon]);
                out.push(b' ');
                out.extend_from_slice(whole_marker(scrubber, value.trim()).as_bytes());
                out.extend_from_slice(&line[end..]);
            }
            _ => {
                for chunk in line.utf8_chunks() {
                    out.extend_from_slice(scrubber.scrub_text(chunk.valid()).as_bytes());
                    out.extend_from_slice(chunk.invalid());
                }
            }
        }
    }
    out
}

/// A parsed original payload scrubbed as the event it would be; `None` when nothing was a secret.
///
/// A structured event or an envelope is scrubbed as it is. A binary-mode payload is the event's `data`
/// with the attributes in `ce-*` headers: it is scrubbed inside an event rebuilt from those headers, so
/// declared sensitive fields (found through the tenant and tool id attributes) and `/data/…` paths
/// apply to it as they would have to the accepted event.
fn scrub_payload(mut json: Value, headers: Option<&HeaderMap>, scrubber: &Scrubber) -> Option<Value> {
    let binary = headers.is_some_and(|h| h.get("ce-specversion").is_some());
    if !binary {
        return (!scrubber.scrub_only(&mut json).is_empty()).then_some(json);
    }
    let mut event = serde_json::Map::new();
    for (name, values) in headers.into_iter().flat_map(|h| h.iter()) {
        let name = name.to_string();
        if let (Some(attribute), Some(value)) = (name.strip_prefix("ce-"), values.first()) {
            event.insert(attribute.to_owned(), Value::String(value.to_string()));
        }
    }
    event.insert("data".to_owned(), json);
    let mut event = Value::Object(event);
    // Only `data` is kept: the attributes' own paths say nothing about the body.
    let paths = scrubber.scrub_only(&mut event);
    if !paths.iter().any(|p| p == "/data" || p.starts_with("/data/")) {
        return None;
    }
    event.get_mut("data").map(Value::take)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrub::{ScrubConfig, ScrubKey};

    fn scrubber() -> Mutex<Scrubber> {
        Mutex::new(Scrubber::new(
            ScrubKey::from_bytes([7; 32]),
            &ScrubConfig::default(),
        ))
    }

    fn original(headers: &[(&str, &str)], payload: &[u8]) -> Original {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, *value);
        }
        Original {
            subject: "atl.in.acme.tool.invocation.planned".to_owned(),
            headers: Some(map),
            raw_headers: None,
            payload: payload.to_vec().into(),
            inbound_seq: 1,
            published: chrono::DateTime::UNIX_EPOCH,
        }
    }

    fn header<'a>(original: &'a Original, name: &str) -> Option<&'a str> {
        original
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(HeaderValue::as_str)
    }

    #[test]
    fn a_binary_events_attribute_headers_keep_its_ids_and_lose_its_credentials() {
        let kept_as_sent = [
            ("ce-specversion", "1.0"),
            ("ce-id", "ev-1"),
            ("ce-type", "tool.invocation.planned"),
            ("ce-tenant", "acme"),
            ("ce-sessionid", "sess-42"),
            ("ce-invocationid", "inv-42"),
            ("ce-toolid", "shell.run"),
            (
                "ce-traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("ce-partitionkey", "user-42"),
            ("content-type", "application/json"),
        ];
        let credentials = [
            ("ce-apikey", "apikey-0123456789abcdef"),
            ("ce-authorization", "Bearer hdrTok3n-0123456789"),
            ("x-session-token", "plainHeaderTok3n"),
        ];
        let source = [("ce-source", "https://bot:s3cretPass@ci.example.com")];
        let sent = original(
            &[&kept_as_sent[..], &credentials[..], &source[..]].concat(),
            br#"{"status": 7}"#,
        );
        let kept = scrubbed_original(&sent, &scrubber());
        for (name, value) in kept_as_sent {
            assert_eq!(header(&kept, name), Some(value), "{name}");
        }
        for (name, _) in credentials {
            let value = header(&kept, name).unwrap_or_default();
            assert!(value.starts_with("hmac-sha256:"), "{name}: {value}");
        }
        let source = header(&kept, "ce-source").unwrap_or_default();
        assert!(
            source.starts_with("https://[scrubbed:hmac-sha256:") && source.ends_with("@ci.example.com"),
            "{source}"
        );
    }
}
