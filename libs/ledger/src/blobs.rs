//! The blob store (DESIGN §5): payloads moved out of entries, stored per tenant, read back checked.
//!
//! ```text
//! ingest (offloader, upload collector) ─▶ BlobStore::put_new ─▶ <prefix>/<tenant>/blobs/<blob_id>
//!                                                                   = nonce (32 B) || content
//!   ◀─ StoredBlob { blob_id, commitment, size } ─▶ {"$payload": {…}} in the event, PayloadRef in ledger
//! query, verify, bundles ─▶ BlobStore::fetch_verified ─▶ content, or PayloadMissing / PayloadDigestMismatch
//! erasure ─▶ BlobStore::delete (the nonce goes with the blob)
//! ```
//!
//! **Blob layout.** A blob is exactly `nonce || content`: 32 random bytes ([`NONCE_LEN`]) followed by the
//! content bytes, with no header. The commitment is `sha256:<hex>` of SHA-256 over the whole blob, so it
//! is a hiding commitment: without the nonce, knowing or guessing the content does not let anyone confirm
//! it. Erasure deletes the blob, and the nonce with it; the commitment left in the ledger then reveals
//! nothing. The content of an offloaded JSON field is its RFC 8785 bytes (`application/json`); the
//! content of a producer upload is the uploaded bytes, with the producer's media type.
//!
//! **Locations.** The entry never holds a location: a blob is found by tenant and `blob_id` under the
//! store's URL (`file:///path`, `memory://`, `s3://bucket/prefix`). Blob ids are 128 random bits in hex;
//! each tenant's blobs live under `<tenant>/blobs/` and are never shared, even for equal content. Puts are
//! create-only, so an existing blob is never overwritten.
//!
//! **Retries.** Transient store errors (network, timeouts, 5xx, a paused server) are retried with
//! exponential backoff, bounded per call by [`RetryPolicy`]; then the call fails with
//! [`Error::BlobStoreUnavailable`], which ingest's pipeline retries later (nothing was acked). A crash
//! between a put and the ledger append leaves an unreferenced blob, never a dangling reference.
//!
//! **TLS.** object_store's S3 client is reqwest with rustls on aws-lc-rs; async-nats brings rustls's ring
//! provider too. No process-wide provider needs installing: reqwest hands its own aws-lc-rs provider to
//! rustls when none is installed (checked by a test against an `https://` endpoint).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutMode, PutOptions, PutPayload};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use toolledger_wire::{PayloadRef, Tenant};
use url::Url;

use crate::{Error, Result};

/// Bytes of random nonce at the start of every blob.
pub const NONCE_LEN: usize = 32;

/// The key of a payload reference object in an event.
pub const PAYLOAD_KEY: &str = "$payload";

/// Content above this size is hashed on a blocking thread, not on an async worker.
const HASH_INLINE_LIMIT: usize = 256 * 1024;

/// How a call retries transient store errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Wait after the first failure; doubled after each.
    pub initial_backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // About a minute of retrying in total: long enough to ride out a store restart, short enough
        // that ingest surfaces an outage and the pipeline's own redelivery takes over.
        Self {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// Where blobs are stored and how calls to the store behave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobStoreConfig {
    /// `file:///path`, `memory://` or `s3://bucket/prefix`.
    pub url: String,
    /// Extra store options (`aws_endpoint`, `aws_allow_http`, `aws_access_key_id`, …); for S3 they
    /// override the standard `AWS_*` environment variables, which are read too.
    pub options: Vec<(String, String)>,
    /// Retries of transient errors per call.
    pub retry: RetryPolicy,
    /// Timeout of one request to a remote store.
    pub request_timeout: Duration,
}

impl BlobStoreConfig {
    /// The defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            options: Vec::new(),
            retry: RetryPolicy::default(),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// A blob just written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBlob {
    /// Its id.
    pub blob_id: String,
    /// `sha256:<hex>` of nonce || content.
    pub commitment: String,
    /// Content bytes (without the nonce).
    pub size: u64,
}

/// The tenant-partitioned blob store over `object_store`.
#[derive(Debug, Clone)]
pub struct BlobStore {
    store: Arc<dyn ObjectStore>,
    prefix: StorePath,
    url: String,
    retry: RetryPolicy,
    /// Where blob ids and nonces come from: the OS's randomness, or a counter for golden tests.
    randomness: Randomness,
}

/// The source of blob ids and nonces.
#[derive(Debug, Clone, Default)]
enum Randomness {
    /// The operating system's random bytes: what every deployment uses.
    #[default]
    Os,
    /// `SHA-256(label || counter)`: the same sequence of puts gives the same ids and nonces, so a
    /// golden test can pin the bytes of entries with offloaded payloads.
    Counter(Arc<std::sync::atomic::AtomicU64>),
}

impl Randomness {
    fn fill(&self, label: &[u8], bytes: &mut [u8]) -> Result<()> {
        match self {
            Self::Os => fill_random(bytes),
            Self::Counter(counter) => {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut block = sha2::Sha256::new();
                block.update(label);
                block.update(n.to_be_bytes());
                let block = block.finalize();
                for (byte, value) in bytes.iter_mut().zip(block.iter().cycle()) {
                    *byte = *value;
                }
                Ok(())
            }
        }
    }
}

impl BlobStore {
    /// Opens the store at `url` with default settings (`AWS_*` environment variables for S3).
    pub fn open(url: &str) -> Result<Self> {
        Self::open_with(&BlobStoreConfig::new(url))
    }

    /// Opens the store the configuration names (`payloads.blob_store` and its options), or `url`
    /// with the configured options when given.
    pub fn open_configured(config: &toolledger_core::config::Config, url: Option<&str>) -> Result<Self> {
        let mut store = BlobStoreConfig::new(url.map_or_else(|| config.blob_store_url(), str::to_owned));
        store.options = config.payloads.blob_store_options.clone().into_iter().collect();
        Self::open_with(&store)
    }

    /// Opens the store as configured. `memory://` is a fresh, process-local store on every call.
    pub fn open_with(config: &BlobStoreConfig) -> Result<Self> {
        let bad = |reason: &str, source: Option<crate::BoxError>| Error::BlobStoreConfig {
            url: config.url.clone(),
            reason: reason.to_owned(),
            source,
        };
        let url = Url::parse(&config.url).map_err(|e| bad("not a URL", Some(e.into())))?;
        let (scheme, prefix) =
            ObjectStoreScheme::parse(&url).map_err(|e| bad("not an object store URL", Some(e.into())))?;
        let store: Arc<dyn ObjectStore> = match scheme {
            ObjectStoreScheme::Memory => Arc::new(object_store::memory::InMemory::new()),
            ObjectStoreScheme::Local => {
                let dir = url.to_file_path().map_err(|()| bad("not a local path", None))?;
                std::fs::create_dir_all(&dir).map_err(|e| bad("creating the directory", Some(e.into())))?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad("opening the directory", Some(e.into())))?;
                return Ok(Self {
                    store: Arc::new(local),
                    prefix: StorePath::default(),
                    url: config.url.clone(),
                    retry: config.retry.clone(),
                    randomness: Randomness::Os,
                });
            }
            ObjectStoreScheme::AmazonS3 => {
                let mut builder = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(config.url.clone())
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_timeout(config.request_timeout)
                            .with_connect_timeout(Duration::from_secs(5)),
                    )
                    // Our own loop retries; the client's retries stay short so a call is bounded.
                    .with_retry(object_store::RetryConfig {
                        max_retries: 2,
                        retry_timeout: config.request_timeout,
                        ..Default::default()
                    });
                for (key, value) in &config.options {
                    let key = key
                        .to_ascii_lowercase()
                        .parse()
                        .map_err(|e: object_store::Error| bad("unknown option", Some(e.into())))?;
                    builder = builder.with_config(key, value);
                }
                Arc::new(
                    builder
                        .build()
                        .map_err(|e| bad("building the S3 client", Some(e.into())))?,
                )
            }
            _ => return Err(bad("unsupported store (file://, memory:// or s3://)", None)),
        };
        Ok(Self {
            store,
            prefix,
            url: config.url.clone(),
            retry: config.retry.clone(),
            randomness: Randomness::Os,
        })
    }

    /// This store with blob ids and nonces taken from a counter instead of the OS's randomness, so
    /// the same puts give the same blobs: for golden tests only (a nonce must be secret).
    #[doc(hidden)]
    pub fn with_counter_randomness_for_tests(mut self) -> Self {
        self.randomness = Randomness::Counter(Arc::default());
        self
    }

    /// The URL the store was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The folder of `tenant`'s blobs, relative to the store root: `<prefix>/<tenant>/blobs`.
    pub fn tenant_prefix(&self, tenant: &Tenant) -> String {
        self.tenant_dir(tenant).to_string()
    }

    fn tenant_dir(&self, tenant: &Tenant) -> StorePath {
        self.prefix.clone().join(tenant.as_str()).join("blobs")
    }

    fn blob_path(&self, tenant: &Tenant, blob_id: &str) -> Result<StorePath> {
        if blob_id.is_empty() || !blob_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(Error::PayloadMissing {
                blob_id: blob_id.to_owned(),
            });
        }
        Ok(self.tenant_dir(tenant).join(blob_id))
    }

    /// Stores `content` as a new blob of `tenant` (fresh id and nonce), create-only, retrying
    /// transient errors.
    pub async fn put_new(&self, tenant: &Tenant, content: Bytes) -> Result<StoredBlob> {
        let mut id = [0u8; 16];
        self.randomness.fill(b"blob-id", &mut id)?;
        let blob_id = toolledger_wire::entry::hex(&id);
        let mut nonce = [0u8; NONCE_LEN];
        self.randomness.fill(b"nonce", &mut nonce)?;
        let size = content.len() as u64;
        let mut blob = Vec::with_capacity(NONCE_LEN + content.len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&content);
        drop(content);
        let blob = Bytes::from(blob);
        let commitment = commitment_of(blob.clone()).await;
        let path = self.blob_path(tenant, &blob_id)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            match self
                .store
                .put_opts(&path, PutPayload::from_bytes(blob.clone()), opts)
                .await
            {
                Ok(_) => break,
                // An earlier attempt landed but its answer was lost: the same bytes are fine.
                Err(object_store::Error::AlreadyExists { .. }) if attempt > 1 => {
                    let existing = self.get_bytes(&path, &blob_id).await?;
                    if existing == blob {
                        break;
                    }
                    return Err(Error::BlobConflict { blob_id });
                }
                Err(e) => self.backoff_or_fail("put", &blob_id, attempt, e).await?,
            }
        }
        Ok(StoredBlob {
            blob_id,
            commitment,
            size,
        })
    }

    /// Reads a payload back and checks its commitment; returns the content without the nonce.
    pub async fn fetch_verified(&self, tenant: &Tenant, payload: &PayloadRef) -> Result<Bytes> {
        let path = self.blob_path(tenant, &payload.blob_id)?;
        let blob = self.get_bytes(&path, &payload.blob_id).await?;
        let actual = commitment_of(blob.clone()).await;
        if actual != payload.commitment
            || blob.len() < NONCE_LEN
            || (blob.len() - NONCE_LEN) as u64 != payload.size
        {
            return Err(Error::PayloadDigestMismatch {
                blob_id: payload.blob_id.clone(),
                expected: payload.commitment.clone(),
                actual,
            });
        }
        Ok(blob.slice(NONCE_LEN..))
    }

    /// Deletes a blob (erasure). Deleting a missing blob succeeds.
    pub async fn delete(&self, tenant: &Tenant, blob_id: &str) -> Result<()> {
        let path = self.blob_path(tenant, blob_id)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => return Ok(()),
                Err(e) => self.backoff_or_fail("delete", blob_id, attempt, e).await?,
            }
        }
    }

    /// Whether the store holds the blob: what erasure asks instead of believing a record that says
    /// the blob is gone.
    pub async fn exists(&self, tenant: &Tenant, blob_id: &str) -> Result<bool> {
        let path = self.blob_path(tenant, blob_id)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.store.head(&path).await {
                Ok(_) => return Ok(true),
                Err(object_store::Error::NotFound { .. }) => return Ok(false),
                Err(e) => self.backoff_or_fail("head", blob_id, attempt, e).await?,
            }
        }
    }

    /// Ids of every blob stored for `tenant` (for sweeps and tests).
    pub async fn list(&self, tenant: &Tenant) -> Result<Vec<String>> {
        use futures::TryStreamExt;
        let dir = self.tenant_dir(tenant);
        let metas: Vec<object_store::ObjectMeta> =
            self.store
                .list(Some(&dir))
                .try_collect()
                .await
                .map_err(|e| Error::BlobStore {
                    operation: "list",
                    blob_id: String::new(),
                    source: Box::new(e),
                })?;
        let mut ids: Vec<String> = metas
            .into_iter()
            .filter_map(|m| m.location.filename().map(str::to_owned))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The raw blob (nonce || content), for tools that must see it whole; no check.
    pub async fn fetch_raw(&self, tenant: &Tenant, blob_id: &str) -> Result<Bytes> {
        let path = self.blob_path(tenant, blob_id)?;
        self.get_bytes(&path, blob_id).await
    }

    /// Replaces a blob's bytes unconditionally. Only for fault tests that simulate tampering.
    #[doc(hidden)]
    pub async fn overwrite_for_tests(&self, tenant: &Tenant, blob_id: &str, bytes: Bytes) -> Result<()> {
        let path = self.blob_path(tenant, blob_id)?;
        self.store
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| Error::BlobStore {
                operation: "put",
                blob_id: blob_id.to_owned(),
                source: Box::new(e),
            })
    }

    async fn get_bytes(&self, path: &StorePath, blob_id: &str) -> Result<Bytes> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match self.store.get(path).await {
                Ok(got) => got.bytes().await,
                Err(e) => Err(e),
            };
            match result {
                Ok(bytes) => return Ok(bytes),
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::PayloadMissing {
                        blob_id: blob_id.to_owned(),
                    });
                }
                Err(e) => self.backoff_or_fail("get", blob_id, attempt, e).await?,
            }
        }
    }

    /// Sleeps before the next attempt of a transient error, or turns the error into the call's result.
    async fn backoff_or_fail(
        &self,
        operation: &'static str,
        blob_id: &str,
        attempt: u32,
        error: object_store::Error,
    ) -> Result<()> {
        if !is_transient(&error) {
            return Err(Error::BlobStore {
                operation,
                blob_id: blob_id.to_owned(),
                source: Box::new(error),
            });
        }
        if attempt >= self.retry.max_attempts {
            return Err(Error::BlobStoreUnavailable {
                operation,
                blob_id: blob_id.to_owned(),
                attempts: attempt,
                source: Box::new(error),
            });
        }
        let wait = self
            .retry
            .initial_backoff
            .saturating_mul(1 << (attempt - 1).min(16))
            .min(self.retry.max_backoff);
        tracing::warn!(operation, blob_id, attempt, wait_ms = wait.as_millis() as u64, error = %error, "blob store retry");
        tokio::time::sleep(wait).await;
        Ok(())
    }
}

/// Errors worth another attempt: anything but a definite answer from the store.
fn is_transient(error: &object_store::Error) -> bool {
    !matches!(
        error,
        object_store::Error::NotFound { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. }
            | object_store::Error::NotModified { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

/// `sha256:<hex>` of `blob`, hashed off the async workers when large.
async fn commitment_of(blob: Bytes) -> String {
    let hash = |b: &[u8]| format!("sha256:{}", toolledger_wire::entry::hex(&Sha256::digest(b)));
    if blob.len() <= HASH_INLINE_LIMIT {
        return hash(&blob);
    }
    let for_thread = blob.clone();
    match tokio::task::spawn_blocking(move || hash(&for_thread)).await {
        Ok(h) => h,
        Err(_) => hash(&blob),
    }
}

/// The `{"$payload": {…}}` object that replaces a moved value in the event.
pub fn payload_marker(payload: &PayloadRef) -> Value {
    let mut inner = Map::new();
    inner.insert("blob_id".to_owned(), Value::from(payload.blob_id.clone()));
    inner.insert("commitment".to_owned(), Value::from(payload.commitment.clone()));
    inner.insert("size".to_owned(), Value::from(payload.size));
    inner.insert(
        "content_type".to_owned(),
        Value::from(payload.content_type.clone()),
    );
    let mut outer = Map::new();
    outer.insert(PAYLOAD_KEY.to_owned(), Value::Object(inner));
    Value::Object(outer)
}

/// True for a `{"$payload": {…}}` reference.
pub fn is_payload_marker(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|m| m.len() == 1 && m.get(PAYLOAD_KEY).is_some_and(Value::is_object))
}

fn fill_random(bytes: &mut [u8]) -> Result<()> {
    getrandom::fill(bytes).map_err(|source| Error::Randomness { source })
}
