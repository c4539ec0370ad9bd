//! Moving large and erasable fields out of the event.
//!
//! Which values move, walking the event's `data`:
//! 1. every value at a configured erasable path ([`OffloadConfig::erasable_paths`], JSON Pointers into
//!    the event, `*` matching any key or index), whatever its size;
//! 2. then, for the size threshold, the smallest values that are still above it: a container above the
//!    threshold first offloads its children that are above it; if it is still above the threshold it
//!    moves whole. `data` itself never moves: while it is above the threshold its largest children move
//!    (at least 1 KiB each), so ids, status and times stay inline for the projections.
//!
//! Scrub markers and existing `$payload` references never move (offloading is idempotent).

use std::io::Write;

use bytes::Bytes;
use serde_json::Value;
use toolledger_wire::{PayloadRef, Tenant};

use super::{BlobStore, is_payload_marker, payload_marker};
use crate::scrub::{is_marker, pointer_tokens, to_pointer};
use crate::{Error, Result};

/// DESIGN §5's default: fields above 32 KiB of serialized JSON move to the object store.
pub const DEFAULT_THRESHOLD: usize = 32 * 1024;

/// Children of `data` smaller than this stay inline even when `data` as a whole is large.
const MIN_DATA_CHILD: usize = 1024;

/// What moves to the object store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffloadConfig {
    /// Serialized JSON size above which a field moves.
    pub threshold_bytes: usize,
    /// JSON Pointers into the event whose values always move (so they can be erased).
    #[serde(default)]
    pub erasable_paths: Vec<String>,
}

impl Default for OffloadConfig {
    fn default() -> Self {
        Self {
            threshold_bytes: DEFAULT_THRESHOLD,
            erasable_paths: Vec::new(),
        }
    }
}

/// Moves payload fields to the [`BlobStore`] and leaves `{"$payload": …}` references.
#[derive(Debug, Clone)]
pub struct Offloader {
    store: BlobStore,
    threshold: usize,
    erasable: Vec<Vec<String>>,
}

impl Offloader {
    /// An offloader into `store`.
    pub fn new(store: BlobStore, config: &OffloadConfig) -> Self {
        Self {
            store,
            threshold: config.threshold_bytes,
            erasable: config.erasable_paths.iter().map(|p| pointer_tokens(p)).collect(),
        }
    }

    /// The store blobs go to.
    pub fn store(&self) -> &BlobStore {
        &self.store
    }

    /// Offloads `event`'s payload fields for `tenant` in place; returns the refs for
    /// `ledger.payload_refs`, sorted by path.
    pub async fn offload(&self, tenant: &Tenant, event: &mut Value) -> Result<Vec<PayloadRef>> {
        let mut targets: Vec<Vec<String>> = Vec::new();
        for pattern in &self.erasable {
            let mut found = Vec::new();
            expand(event, pattern, &mut Vec::new(), &mut found);
            for path in found {
                if !targets.iter().any(|t| path.starts_with(t)) {
                    targets.retain(|t| !t.starts_with(&path));
                    targets.push(path);
                }
            }
        }
        let mut refs = Vec::new();
        for path in targets {
            if let Some(slot) = pointer_mut(event, &path) {
                refs.push(self.move_value(tenant, &path, slot).await?);
            }
        }
        if let Some(data) = event.get_mut("data") {
            let mut at = vec!["data".to_owned()];
            self.by_size(tenant, data, &mut at, true, &mut refs).await?;
        }
        refs.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(refs)
    }

    /// Whether [`Self::offload`] could move anything out of `event`. False means it would return no
    /// refs and leave the event as it is, so ingest can canonicalize the entry without it.
    pub fn may_move(&self, event: &Value) -> bool {
        let erasable = self.erasable.iter().any(|pattern| {
            let mut found = Vec::new();
            expand(event, pattern, &mut Vec::new(), &mut found);
            !found.is_empty()
        });
        erasable
            || event.get("data").is_some_and(|data| {
                !is_marker(data) && !is_payload_marker(data) && larger_than(data, self.threshold)
            })
    }

    /// The size rule, depth first. Boxed because async recursion needs it.
    fn by_size<'a>(
        &'a self,
        tenant: &'a Tenant,
        value: &'a mut Value,
        at: &'a mut Vec<String>,
        is_data: bool,
        refs: &'a mut Vec<PayloadRef>,
    ) -> futures::future::BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if is_marker(value) || is_payload_marker(value) || !larger_than(value, self.threshold) {
                return Ok(());
            }
            let keys: Vec<String> = match value {
                Value::Object(map) => map.keys().cloned().collect(),
                Value::Array(items) => (0..items.len()).map(|i| i.to_string()).collect(),
                _ => Vec::new(),
            };
            for key in &keys {
                if let Some(child) = child_mut(value, key)
                    && larger_than(child, self.threshold)
                {
                    at.push(key.clone());
                    self.by_size(tenant, child, at, false, refs).await?;
                    at.pop();
                }
            }
            if !is_data {
                if larger_than(value, self.threshold) {
                    refs.push(self.move_value(tenant, at, value).await?);
                }
                return Ok(());
            }
            while larger_than(value, self.threshold) {
                let largest = keys
                    .iter()
                    .filter_map(|k| {
                        let child = child_ref(value, k)?;
                        (!is_marker(child) && !is_payload_marker(child))
                            .then(|| (json_size(child), k.clone()))
                    })
                    .filter(|(size, _)| *size >= MIN_DATA_CHILD)
                    .max();
                let Some((_, key)) = largest else {
                    break;
                };
                at.push(key.clone());
                if let Some(child) = child_mut(value, &key) {
                    refs.push(self.move_value(tenant, at, child).await?);
                }
                at.pop();
            }
            Ok(())
        })
    }

    /// Stores `slot`'s RFC 8785 bytes and replaces it by its reference.
    async fn move_value(&self, tenant: &Tenant, path: &[String], slot: &mut Value) -> Result<PayloadRef> {
        let bytes = toolledger_wire::jcs::to_vec(slot).map_err(|source| Error::OffloadEncode {
            path: to_pointer(path),
            source,
        })?;
        let stored = self.store.put_new(tenant, Bytes::from(bytes)).await?;
        let payload = PayloadRef {
            path: to_pointer(path),
            blob_id: stored.blob_id,
            commitment: stored.commitment,
            size: stored.size,
            content_type: "application/json".to_owned(),
        };
        *slot = payload_marker(&payload);
        Ok(payload)
    }
}

/// Whether `value`'s serialized JSON is longer than `limit` bytes: counted without building the
/// text, and stopped as soon as the count passes `limit` (most values are far under it, but an
/// offloadable one need not be written to its end).
fn larger_than(value: &Value, limit: usize) -> bool {
    let (least, most) = size_bounds(value);
    if most <= limit {
        return false;
    }
    if least > limit {
        // What moves is well past the limit: no need to count it out.
        return true;
    }
    struct Count {
        seen: usize,
        limit: usize,
    }
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.seen += buf.len();
            if self.seen > self.limit {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { seen: 0, limit };
    // The only error the writer makes is passing the limit.
    serde_json::to_writer(&mut count, value).is_err()
}

/// An upper bound of `value`'s serialized JSON size, from lengths alone (a string byte escapes to at
/// most six; a number writes at most 24): far cheaper than writing it, and enough to tell that a
/// typical event is nowhere near the offload threshold.
/// A lower and an upper bound of `value`'s serialized JSON size, from lengths alone, in one walk:
/// at least its text unescaped and one byte a number, at most six bytes a string byte (an escape)
/// and 24 a number. Far cheaper than writing it, and enough to tell that a typical event is nowhere
/// near the offload threshold, or that what moves is far past it.
fn size_bounds(value: &Value) -> (usize, usize) {
    match value {
        Value::Null | Value::Bool(true) => (4, 5),
        Value::Bool(false) => (5, 5),
        Value::Number(_) => (1, 24),
        Value::String(text) => (2 + text.len(), 2 + 6 * text.len()),
        // The least leaves the commas out, the most counts one an item (and a colon a member).
        Value::Array(items) => items.iter().fold((2, 2), |(least, most), item| {
            let (l, m) = size_bounds(item);
            (least + l, most + m + 1)
        }),
        Value::Object(map) => map.iter().fold((2, 2), |(least, most), (key, item)| {
            let (l, m) = size_bounds(item);
            (least + 2 + key.len() + 1 + l, most + 2 + 6 * key.len() + 2 + m)
        }),
    }
}

/// Serialized JSON size of `value`, without building the text.
pub(crate) fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to an infallible writer cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

fn child_ref<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    match value {
        Value::Object(map) => map.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    }
}

fn child_mut<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    match value {
        Value::Object(map) => map.get_mut(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
        _ => None,
    }
}

fn pointer_mut<'a>(value: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    tokens.iter().try_fold(value, |v, t| child_mut(v, t))
}

/// Existing locations matching `pattern` (`*` = any key or index), skipping markers and references.
fn expand(value: &Value, pattern: &[String], at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if is_marker(value) || is_payload_marker(value) {
        return;
    }
    let Some((head, rest)) = pattern.split_first() else {
        out.push(at.clone());
        return;
    };
    let keys: Vec<String> = match (value, head.as_str()) {
        (Value::Object(map), "*") => map.keys().cloned().collect(),
        (Value::Array(items), "*") => (0..items.len()).map(|i| i.to_string()).collect(),
        _ => vec![head.clone()],
    };
    for key in keys {
        if let Some(child) = child_ref(value, &key) {
            at.push(key);
            expand(child, rest, at, out);
            at.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_size_bound_is_never_below_the_size_and_the_limit_check_matches_it() {
        let values = [
            json!(null),
            json!(true),
            json!(-1.234_567_890_123_456_7e-300),
            json!(u64::MAX),
            json!("plain"),
            json!("quotes \" and \\ and \u{1} control and é"),
            json!({"a\n": [1, "two", {"three": null}], "": {}}),
            json!([[], {}, "", 0]),
        ];
        for value in &values {
            let size = json_size(value);
            let (least, most) = size_bounds(value);
            assert!(most >= size, "{value}: bound {most} < {size}");
            assert!(least <= size, "{value}: bound {least} > {size}");
            for limit in [0, size.saturating_sub(1), size, size + 1, 10 * size] {
                assert_eq!(larger_than(value, limit), size > limit, "{value} against {limit}");
            }
        }
    }
}
