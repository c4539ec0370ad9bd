//! Large values of an event move to the tenant's payload bucket (`ATL_PAYLOADS_<tenant>`) and the event
//! carries a `{"$upload": {bucket, name, sha256, size, content_type}}` reference in their place
//! (schemas/README.md, producer uploads); ingest copies the object into its blob store, puts a
//! `$payload` reference there, and deletes the object once the entry is in the ledger. The Python SDK's
//! `uploads.py` is the reference; this module makes the same choices, names and bytes.
//!
//! ```text
//! emit ─▶ extract(data) ─▶ data with references + [(Upload, bytes)]   (no network: emit stays offline)
//!      ─▶ Spool::append_with: each value's bytes to a durable sidecar, then the record
//! sender ─▶ object store put(name, sidecar bytes) unless the object is already there with that digest
//!        ─▶ publish the record ─▶ acked: the sidecars are deleted
//! ```
//!
//! Which values move ([`extract`]):
//! 1. every value in `data` whose compact JSON is over `threshold` bytes, deepest first: a long string
//!    is moved on its own; an object or array is moved whole only when it is still over `threshold`
//!    once its large members were moved (and then it goes with its original members, never with
//!    references inside);
//! 2. while the event is still over its budget (`max_event_bytes` less the headers), the largest value
//!    that holds no reference and is at least [`MIN_UPLOAD_BYTES`], one at a time.
//!
//! A string travels as its UTF-8 text ([`TEXT`]); any other value as its compact JSON ([`JSON`]: the
//! bytes are the field's JSON value). The object name is `<event id>/<JSON Pointer from the event
//! root>`, percent-encoded outside `[A-Za-z0-9._~/-]`: the same event always names the same objects with
//! the same bytes, so re-putting after a retry or a restart is harmless.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::spool::Upload;
use crate::{Error, Result, wire};

/// The default size above which a value travels through the payload bucket: a quarter of the default
/// `max_event_bytes`, so that a few large values never push an event over it.
pub const DEFAULT_UPLOAD_THRESHOLD: usize = 256 * 1024;
/// Values smaller than this are never moved to make an event fit: ids and small fields stay inline.
pub const MIN_UPLOAD_BYTES: usize = 1024;
/// Ingest's limit on one upload (it holds one in memory while checking and copying it).
pub const MAX_UPLOAD_BYTES: usize = 256 * 1024 * 1024;
/// The content type of a string value: its UTF-8 text.
pub const TEXT: &str = "text/plain; charset=utf-8";
/// The content type of any other value: its compact JSON.
pub const JSON: &str = "application/json";

/// Everything but `[A-Za-z0-9._~/-]`.
const OBJECT_NAME_ESCAPES: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/')
    .remove(b'-');

/// `ATL_PAYLOADS_<tenant>`: the bucket a tenant's producers upload to.
pub fn bucket_of(tenant: &str) -> String {
    format!("ATL_PAYLOADS_{tenant}")
}

/// `<event id><pointer>` (the pointer starts with `/`), percent-encoded (uppercase hex) outside
/// `[A-Za-z0-9._~/-]`, byte for byte as the Python SDK names it.
pub fn object_name(event_id: &str, pointer: &str) -> String {
    utf8_percent_encode(&format!("{event_id}{pointer}"), OBJECT_NAME_ESCAPES).to_string()
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn is_reference(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|o| o.len() == 1 && (o.contains_key("$upload") || o.contains_key("$payload")))
}

/// Compact JSON size of a value (as Python's `json.dumps(..., separators=(",", ":"),
/// ensure_ascii=False)` writes it).
fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

fn key_len(key: &str) -> usize {
    serde_json::to_string(key).map_or(0, |s| s.len())
}

/// A value moved out of an event: its reference and the bytes the object must hold.
pub type Moved = (Upload, Vec<u8>);

struct Extraction<'a> {
    event_id: &'a str,
    bucket: &'a str,
    uploads: Vec<Moved>,
}

impl Extraction<'_> {
    fn reference(&mut self, value: &Value, pointer: &str) -> Result<(Value, usize)> {
        let (content, content_type) = match value {
            Value::String(s) => (s.as_bytes().to_vec(), TEXT),
            other => (
                serde_json::to_vec(other).map_err(|e| Error::invalid(pointer, e.to_string()))?,
                JSON,
            ),
        };
        if content.len() > MAX_UPLOAD_BYTES {
            return Err(Error::invalid(
                pointer,
                format!(
                    "event {}: {pointer} is {} bytes, over the {MAX_UPLOAD_BYTES}-byte limit ingest \
                     sets for one upload",
                    self.event_id,
                    content.len()
                ),
            ));
        }
        let upload = Upload {
            bucket: self.bucket.to_owned(),
            name: object_name(self.event_id, pointer),
            sha256: wire::hex(&Sha256::digest(&content)),
            size: content.len() as u64,
            content_type: content_type.to_owned(),
            file: String::new(),
        };
        let reference = json!({"$upload": {
            "bucket": upload.bucket,
            "name": upload.name,
            "sha256": upload.sha256,
            "size": upload.size,
            "content_type": upload.content_type,
        }});
        let size = json_len(&reference);
        self.uploads.push((upload, content));
        Ok((reference, size))
    }

    /// `value` with every member over `threshold` moved, and its compact JSON size.
    fn over_threshold(
        &mut self,
        value: &Value,
        pointer: &str,
        threshold: usize,
        root: bool,
    ) -> Result<(Value, usize)> {
        let mark = self.uploads.len();
        if is_reference(value) {
            return Ok((value.clone(), json_len(value)));
        }
        let (out, size) = match value {
            Value::Object(map) => {
                let mut out = Map::new();
                let mut size = 2 + map.len().saturating_sub(1);
                for (key, child) in map {
                    let (moved, child_size) =
                        self.over_threshold(child, &format!("{pointer}/{}", escape(key)), threshold, false)?;
                    size += key_len(key) + 1 + child_size;
                    out.insert(key.clone(), moved);
                }
                (Value::Object(out), size)
            }
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut size = 2 + items.len().saturating_sub(1);
                for (i, child) in items.iter().enumerate() {
                    let (moved, child_size) =
                        self.over_threshold(child, &format!("{pointer}/{i}"), threshold, false)?;
                    size += child_size;
                    out.push(moved);
                }
                (Value::Array(out), size)
            }
            other => (other.clone(), json_len(other)),
        };
        if root || size <= threshold {
            return Ok((out, size));
        }
        // Still too large with its large members moved: it goes whole, with its original members.
        self.uploads.truncate(mark);
        self.reference(value, pointer)
    }
}

/// The largest movable value under `value` as (size, pointer), `value`'s size, and whether it holds a
/// reference.
fn largest_candidate(value: &Value, pointer: &str, root: bool) -> (Option<(usize, String)>, usize, bool) {
    if is_reference(value) {
        return (None, json_len(value), true);
    }
    let mut best: Option<(usize, String)> = None;
    let mut holds = false;
    let mut consider = |child_best: Option<(usize, String)>, child_holds: bool| {
        holds = holds || child_holds;
        if let Some(child_best) = child_best
            && best.as_ref().is_none_or(|b| child_best.0 > b.0)
        {
            best = Some(child_best);
        }
    };
    let size = match value {
        Value::Object(map) => {
            let mut size = 2 + map.len().saturating_sub(1);
            for (key, child) in map {
                let (child_best, child_size, child_holds) =
                    largest_candidate(child, &format!("{pointer}/{}", escape(key)), false);
                size += child_size + key_len(key) + 1;
                consider(child_best, child_holds);
            }
            size
        }
        Value::Array(items) => {
            let mut size = 2 + items.len().saturating_sub(1);
            for (i, child) in items.iter().enumerate() {
                let (child_best, child_size, child_holds) =
                    largest_candidate(child, &format!("{pointer}/{i}"), false);
                size += child_size;
                consider(child_best, child_holds);
            }
            size
        }
        other => json_len(other),
    };
    if !root && !holds && size >= MIN_UPLOAD_BYTES && best.as_ref().is_none_or(|b| size > b.0) {
        best = Some((size, pointer.to_owned()));
    }
    (best, size, holds)
}

/// `data` (the event's, at `/data`) with its large values replaced by upload references, and each
/// upload with its bytes. `budget` is the most the encoded `data` may take. The input is not changed.
/// Fails with [`Error::InvalidEvent`] when no value can be moved to make the event fit.
pub fn extract(
    data: &Value,
    event_id: &str,
    bucket: &str,
    threshold: usize,
    budget: usize,
) -> Result<(Value, Vec<Moved>)> {
    let mut extraction = Extraction {
        event_id,
        bucket,
        uploads: Vec::new(),
    };
    let (mut out, mut size) = extraction.over_threshold(data, "/data", threshold, true)?;
    while size > budget {
        let (best, _, _) = largest_candidate(&out, "/data", true);
        let Some((_, pointer)) = best else {
            return Err(Error::invalid(
                "/data",
                format!(
                    "event {event_id}: data is {size} bytes, over the budget of {budget}, and no value \
                     of at least {MIN_UPLOAD_BYTES} bytes is left to upload"
                ),
            ));
        };
        // serde_json's pointers unescape ~0 and ~1 as ours were escaped.
        let within = &pointer["/data".len()..];
        let value = out
            .pointer(within)
            .cloned()
            .ok_or_else(|| Error::invalid(&pointer, "vanished while extracting uploads"))?;
        let (reference, _) = extraction.reference(&value, &pointer)?;
        if let Some(slot) = out.pointer_mut(within) {
            *slot = reference;
        }
        size = json_len(&out);
    }
    Ok((out, extraction.uploads))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values below are what the Python SDK's uploads.py gives for the same input.

    #[test]
    fn object_names_are_the_python_sdks() {
        assert_eq!(
            object_name("tlp-0123456789abcdef0123456789abcdef", "/data/content/0/text"),
            "tlp-0123456789abcdef0123456789abcdef/data/content/0/text"
        );
        assert_eq!(
            object_name("ev 1/\u{fc}", "/data/a~1b/c d/%/\u{fc}/~0x"),
            "ev%201/%C3%BC/data/a~1b/c%20d/%25/%C3%BC/~0x"
        );
        assert_eq!(bucket_of("acme"), "ATL_PAYLOADS_acme");
    }

    #[test]
    fn values_over_the_threshold_move_deepest_first_as_python_moves_them() {
        let data = json!({
            "content": [{"type": "text", "text": "x".repeat(300_000)}],
            "meta": {"k": "y".repeat(2000), "small": 1},
            "obj": {"a": "z".repeat(200_000), "b": "w".repeat(100_000)},
        });
        let (out, moved) = extract(
            &data,
            "ev-1",
            "ATL_PAYLOADS_acme",
            DEFAULT_UPLOAD_THRESHOLD,
            200_000,
        )
        .unwrap();
        let got: Vec<(&str, u64, &str, &str)> = moved
            .iter()
            .map(|(u, _)| {
                (
                    u.name.as_str(),
                    u.size,
                    u.content_type.as_str(),
                    u.sha256.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "ev-1/data/content/0/text",
                    300_000,
                    TEXT,
                    "29927e273accc68286005017f7fa6e4f27bddb4db3083ff8b8d4c3667905b7fa"
                ),
                (
                    "ev-1/data/obj",
                    300_015,
                    JSON,
                    "ee82c0d3fab1fb3acc078bbbe84b840e00c30822d1c6188ee80595cd5fdd88a5"
                ),
            ]
        );
        assert_eq!(moved[0].1, "x".repeat(300_000).into_bytes());
        assert_eq!(out["meta"], data["meta"]);
        assert_eq!(out["obj"]["$upload"]["size"], 300_015);
        assert_eq!(out["content"][0]["type"], "text");
        assert_eq!(
            out["content"][0]["text"]["$upload"]["name"],
            "ev-1/data/content/0/text"
        );
    }

    #[test]
    fn the_largest_values_move_while_the_event_is_over_its_budget() {
        let data = json!({
            "a": {"big": "y".repeat(3000), "n": [1, 2, {"q": "r".repeat(1500)}]},
            "s": "small",
            "t~/x": "\u{e9}".repeat(800),
        });
        let (out, moved) =
            extract(&data, "ev-2", "ATL_PAYLOADS_acme", DEFAULT_UPLOAD_THRESHOLD, 1000).unwrap();
        let got: Vec<(&str, u64, &str, &str)> = moved
            .iter()
            .map(|(u, _)| {
                (
                    u.name.as_str(),
                    u.size,
                    u.content_type.as_str(),
                    u.sha256.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "ev-2/data/a",
                    4529,
                    JSON,
                    "34b5623e61773e4eb75a3a909758b4a18ef76401e9213d30d1a52baa24e576ad"
                ),
                (
                    "ev-2/data/t~0~1x",
                    1600,
                    TEXT,
                    "3034bab214a128d5d72d163d10f32f88ebd6952881c6afb5f6e5c64999ee5b2c"
                ),
            ]
        );
        assert_eq!(out["s"], "small");
        assert!(json_len(&out) <= 1000);
        // Nothing left to move: refused.
        let err = extract(
            &json!({"a": "x".repeat(900)}),
            "ev-3",
            "B",
            DEFAULT_UPLOAD_THRESHOLD,
            100,
        );
        assert!(matches!(err, Err(Error::InvalidEvent { .. })));
    }
}
