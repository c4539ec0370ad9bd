//! Producer uploads: payloads larger than a NATS message, put by the producer into the tenant's NATS
//! object store bucket `ATL_PAYLOADS_<tenant>` and referenced from the event
//! (`schemas/ledger/upload-ref.schema.json`):
//!
//! ```json
//! {"$upload": {"bucket": "ATL_PAYLOADS_acme", "name": "res_81/content", "sha256": "<64 hex>",
//!              "size": 5242880, "content_type": "text/plain"}}
//! ```
//!
//! The reference may stand in place of any value in `data`. Ingest reads the object, checks its size
//! and SHA-256, copies it into the [`BlobStore`] as a blob of the tenant, and puts a `{"$payload": …}`
//! reference where the upload reference was. The bucket must be the event's own tenant's: an event never
//! reads another tenant's uploads. The objects are deleted only after the ledger acked the entry
//! ([`UploadCollector::delete_uploads`]); a crash in between leaves them for the redelivery to copy again.

use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use toolledger_wire::{PayloadRef, Tenant};

use super::{BlobStore, payload_marker};
use crate::scrub::to_pointer;
use crate::{Error, Result};

/// The key of an upload reference object in an event.
pub const UPLOAD_KEY: &str = "$upload";

/// The media type of an upload that names none.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// Largest upload ingest copies: it holds one upload in memory while checking and copying it.
const DEFAULT_MAX_UPLOAD: u64 = 256 * 1024 * 1024;

/// `ATL_PAYLOADS_<tenant>`: the bucket a tenant's producers upload to.
pub fn upload_bucket(tenant: &Tenant) -> String {
    format!("ATL_PAYLOADS_{}", tenant.as_str())
}

/// One `{"$upload": …}` reference found in an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadRef {
    /// JSON Pointer of the reference in the event.
    pub path: String,
    /// The NATS object store bucket.
    pub bucket: String,
    /// The object's name in the bucket.
    pub name: String,
    /// Lowercase hex SHA-256 of the object's bytes.
    pub sha256: String,
    /// The object's size in bytes.
    pub size: u64,
    /// Its media type.
    pub content_type: String,
}

/// An object to delete from a bucket once its entry is in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UploadName {
    /// The bucket.
    pub bucket: String,
    /// The object's name.
    pub name: String,
}

/// What [`UploadCollector::collect`] did to an event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectedUploads {
    /// The payload refs for `ledger.payload_refs`.
    pub refs: Vec<PayloadRef>,
    /// The uploads to delete after the ledger PubAck.
    pub uploads: Vec<UploadName>,
}

/// Copies producer uploads into the blob store.
#[derive(Debug, Clone)]
pub struct UploadCollector {
    store: BlobStore,
    max_upload: u64,
}

impl UploadCollector {
    /// A collector copying into `store`, refusing uploads above 256 MiB.
    pub fn new(store: BlobStore) -> Self {
        Self {
            store,
            max_upload: DEFAULT_MAX_UPLOAD,
        }
    }

    /// The same collector with another upload size limit.
    pub fn with_max_upload(mut self, bytes: u64) -> Self {
        self.max_upload = bytes;
        self
    }

    /// Every upload reference in `event`'s `data`, in document order. A malformed reference is
    /// [`Error::UploadInvalid`].
    pub fn find_uploads(event: &Value) -> Result<Vec<UploadRef>> {
        let mut found = Vec::new();
        if let Some(data) = event.get("data") {
            find(data, &mut vec!["data".to_owned()], &mut found)?;
        }
        Ok(found)
    }

    /// Whether `event`'s `data` holds an upload reference, well-formed or not: false exactly when
    /// [`Self::find_uploads`] finds none and no error, without building a pointer.
    pub fn holds_uploads(event: &Value) -> bool {
        event.get("data").is_some_and(holds_upload)
    }

    /// Replaces every upload reference in `event` (of `tenant`) by a payload reference to a checked copy
    /// in the blob store.
    pub async fn collect(
        &self,
        js: &async_nats::jetstream::Context,
        tenant: &Tenant,
        event: &mut Value,
    ) -> Result<CollectedUploads> {
        let uploads = Self::find_uploads(event)?;
        let mut collected = CollectedUploads::default();
        if uploads.is_empty() {
            return Ok(collected);
        }
        let bucket = upload_bucket(tenant);
        for upload in &uploads {
            if upload.bucket != bucket {
                return Err(Error::UploadInvalid {
                    path: upload.path.clone(),
                    reason: format!("bucket {} is not this tenant's {bucket}", upload.bucket),
                });
            }
            if upload.size > self.max_upload {
                return Err(Error::UploadInvalid {
                    path: upload.path.clone(),
                    reason: format!("{} bytes is above the limit of {}", upload.size, self.max_upload),
                });
            }
        }
        let unavailable = |name: &str, reason: String| Error::UploadUnavailable {
            bucket: bucket.clone(),
            name: name.to_owned(),
            reason,
        };
        let objects = js
            .get_object_store(&bucket)
            .await
            .map_err(|e| unavailable("", e.to_string()))?;
        for upload in uploads {
            let bytes = read_object(&objects, &upload, self.max_upload, &bucket).await?;
            let stored = self.store.put_new(tenant, bytes).await?;
            let payload = PayloadRef {
                path: upload.path.clone(),
                blob_id: stored.blob_id,
                commitment: stored.commitment,
                size: stored.size,
                content_type: upload.content_type.clone(),
            };
            if let Some(slot) = event.pointer_mut(&upload.path) {
                *slot = payload_marker(&payload);
            }
            collected.refs.push(payload);
            collected.uploads.push(UploadName {
                bucket: upload.bucket,
                name: upload.name,
            });
        }
        collected.refs.sort_by(|a, b| a.path.cmp(&b.path));
        collected.uploads.sort();
        collected.uploads.dedup();
        Ok(collected)
    }

    /// Deletes copied uploads; call only after the ledger acked the entry. Already deleted objects are
    /// fine (a redelivery after a crash deletes again).
    pub async fn delete_uploads(js: &async_nats::jetstream::Context, uploads: &[UploadName]) -> Result<()> {
        use async_nats::jetstream::object_store::DeleteErrorKind;
        for upload in uploads {
            let unavailable = |reason: String| Error::UploadUnavailable {
                bucket: upload.bucket.clone(),
                name: upload.name.clone(),
                reason,
            };
            let objects = js
                .get_object_store(&upload.bucket)
                .await
                .map_err(|e| unavailable(e.to_string()))?;
            match objects.delete(&upload.name).await {
                Ok(()) => {}
                Err(e) if e.kind() == DeleteErrorKind::NotFound => {}
                Err(e) => return Err(unavailable(e.to_string())),
            }
        }
        Ok(())
    }
}

async fn read_object(
    objects: &async_nats::jetstream::object_store::ObjectStore,
    upload: &UploadRef,
    max: u64,
    bucket: &str,
) -> Result<Bytes> {
    use async_nats::jetstream::object_store::GetErrorKind;
    let mismatch = |reason: String| Error::UploadMismatch {
        bucket: bucket.to_owned(),
        name: upload.name.clone(),
        reason,
    };
    let mut object = match objects.get(&upload.name).await {
        Ok(o) => o,
        Err(e) if e.kind() == GetErrorKind::NotFound => {
            return Err(Error::UploadMissing {
                bucket: bucket.to_owned(),
                name: upload.name.clone(),
            });
        }
        Err(e) => {
            return Err(Error::UploadUnavailable {
                bucket: bucket.to_owned(),
                name: upload.name.clone(),
                reason: e.to_string(),
            });
        }
    };
    let stored_size = object.info().size as u64;
    if stored_size != upload.size {
        return Err(mismatch(format!(
            "the object has {stored_size} bytes, the reference says {}",
            upload.size
        )));
    }
    let mut buf = Vec::with_capacity(usize::try_from(upload.size.min(max)).unwrap_or(0));
    (&mut object)
        .take(max + 1)
        .read_to_end(&mut buf)
        .await
        .map_err(|e| Error::UploadUnavailable {
            bucket: bucket.to_owned(),
            name: upload.name.clone(),
            reason: e.to_string(),
        })?;
    if buf.len() as u64 != upload.size {
        return Err(mismatch(format!(
            "read {} bytes, the reference says {}",
            buf.len(),
            upload.size
        )));
    }
    let bytes = Bytes::from(buf);
    let for_hash = bytes.clone();
    let actual = tokio::task::spawn_blocking(move || toolledger_wire::entry::hex(&Sha256::digest(&for_hash)))
        .await
        .map_err(|e| mismatch(e.to_string()))?;
    if actual != upload.sha256 {
        return Err(mismatch(format!(
            "sha256 is {actual}, the reference says {}",
            upload.sha256
        )));
    }
    Ok(bytes)
}

fn find(value: &Value, at: &mut Vec<String>, out: &mut Vec<UploadRef>) -> Result<()> {
    match value {
        Value::Object(map) => {
            if map.len() == 1
                && let Some(inner) = map.get(UPLOAD_KEY)
            {
                out.push(parse_ref(inner, to_pointer(at))?);
                return Ok(());
            }
            for (key, child) in map {
                at.push(key.clone());
                find(child, at, out)?;
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                at.push(i.to_string());
                find(child, at, out)?;
                at.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

/// [`find`]'s walk, stopping at the first reference.
fn holds_upload(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            (map.len() == 1 && map.contains_key(UPLOAD_KEY)) || map.values().any(holds_upload)
        }
        Value::Array(items) => items.iter().any(holds_upload),
        _ => false,
    }
}

fn parse_ref(inner: &Value, path: String) -> Result<UploadRef> {
    let invalid = |reason: &str| Error::UploadInvalid {
        path: path.clone(),
        reason: reason.to_owned(),
    };
    let text = |key: &str| {
        inner
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let bucket = text("bucket").ok_or_else(|| invalid("bucket: a non-empty string is required"))?;
    let name = text("name").ok_or_else(|| invalid("name: a non-empty string is required"))?;
    let sha256 = text("sha256")
        .filter(|s| {
            s.len() == 64
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .ok_or_else(|| invalid("sha256: 64 lowercase hex digits are required"))?;
    let size = inner
        .get("size")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid("size: a non-negative integer is required"))?;
    let content_type = match inner.get("content_type") {
        None => DEFAULT_CONTENT_TYPE.to_owned(),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return Err(invalid("content_type: a non-empty string")),
    };
    Ok(UploadRef {
        path,
        bucket,
        name,
        sha256,
        size,
        content_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn holds_uploads_agrees_with_find_uploads() {
        let sha = "0".repeat(64);
        let good =
            json!({"$upload": {"bucket": "ATL_PAYLOADS_acme", "name": "e/c", "sha256": sha, "size": 5}});
        let events = [
            json!({"id": "no-data"}),
            json!({"data": {"text": "plain", "n": [1, {"a": null}]}}),
            json!({"data": {"content": good}}),
            json!({"data": {"items": [1, {"deep": [good]}]}}),
            json!({"data": {"bad": {"$upload": "not an object"}}}),
            json!({"data": {"not_a_ref": {"$upload": good["$upload"], "other": 1}}}),
            json!({"$upload": {"outside": "data"}, "data": {}}),
        ];
        for event in &events {
            let none = UploadCollector::find_uploads(event).is_ok_and(|found| found.is_empty());
            assert_eq!(UploadCollector::holds_uploads(event), !none, "{event}");
        }
    }
}
