//! Payloads in the object store (DESIGN §5), ingest's side: offloaded fields and producer uploads.
//!
//! ```text
//! event JSON ─▶ UploadCollector::collect ─ {"$upload": …} ─▶ ATL_PAYLOADS_<tenant> ─▶ check size, sha256 ─┐
//!            ─▶ Offloader::offload ─ fields > threshold, erasable paths ───────────────────────────────┤
//!                                                                                BlobStore::put_new ◀──┘
//!            ◀─ {"$payload": {blob_id, commitment, size, content_type}} in the event, PayloadRef in ledger
//! after the ledger PubAck: UploadCollector::delete_uploads (the copied producer uploads)
//! ```
//!
//! The blob store itself (layout, commitments, retries, verified reads) is
//! [`toolledger_ledger::blobs`], shared with every reader; it is re-exported here for the pipeline.

mod offload;
mod upload;

pub use offload::{DEFAULT_THRESHOLD, OffloadConfig, Offloader};
pub use toolledger_ledger::blobs::{
    BlobStore, BlobStoreConfig, NONCE_LEN, PAYLOAD_KEY, RetryPolicy, StoredBlob, is_payload_marker,
    payload_marker,
};
pub use upload::{CollectedUploads, UPLOAD_KEY, UploadCollector, UploadName, UploadRef, upload_bucket};
