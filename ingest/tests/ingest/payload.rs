//! Payload offload, producer uploads and verified reads: one suite, run against every blob store
//! backend (a `file://` temp dir, `memory://`, and a real S3-compatible server).

use std::time::Duration;

use async_nats::jetstream::{self, object_store};
use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use toolledger_ingest::Error;
use toolledger_ingest::payload::{
    BlobStore, BlobStoreConfig, OffloadConfig, Offloader, UploadCollector, upload_bucket,
};
use toolledger_ledger::Error as StoreError;
use toolledger_testkit::{NatsFixture, S3Fixture};
use toolledger_wire::Tenant;

/// A blob store for one test, and whatever must live as long as it.
struct Backend {
    store: BlobStore,
    _dir: Option<tempfile::TempDir>,
    s3: Option<S3Fixture>,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    File,
    Memory,
    S3,
}

fn open(kind: Kind) -> Backend {
    match kind {
        Kind::File => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("file://{}/blobs-root", dir.path().display());
            Backend {
                store: BlobStore::open(&url).unwrap(),
                _dir: Some(dir),
                s3: None,
            }
        }
        Kind::Memory => Backend {
            store: BlobStore::open("memory://").unwrap(),
            _dir: None,
            s3: None,
        },
        Kind::S3 => {
            let s3 = S3Fixture::start();
            let mut config = BlobStoreConfig::new(s3.url("ledger/payloads"));
            config.options = s3.options();
            Backend {
                store: BlobStore::open_with(&config).unwrap(),
                _dir: None,
                s3: Some(s3),
            }
        }
    }
}

fn tenant(name: &str) -> Tenant {
    Tenant::parse(name).unwrap()
}

/// Text of `len` bytes that does not compress to nothing.
fn text(len: usize, seed: u8) -> String {
    (0..len)
        .map(|i| char::from(b'a' + ((i * 7 + usize::from(seed) * 13 + i / 97) % 26) as u8))
        .collect()
}

fn result_event(tenant: &str, id: &str, content: Value) -> Value {
    json!({"specversion": "1.0", "id": id, "source": "urn:test", "type": "tool.result.created",
        "tenant": tenant, "subject": "inv-1", "invocationid": "inv-1",
        "data": {"schema_version": "0.2.0", "result_id": "res-1", "invocation_id": "inv-1",
            "status": "succeeded", "is_error": false, "created_at": "2026-05-08T09:00:00Z",
            "content": [{"type": "text", "text": content}]}})
}

async fn large_result_is_offloaded_and_fetched_back_verified(kind: Kind) {
    let backend = open(kind);
    let acme = tenant("acme");
    let offloader = Offloader::new(backend.store.clone(), &OffloadConfig::default());
    let big = text(100 * 1024, 1);
    let original = result_event("acme", "evt-1", json!(big));
    let mut event = original.clone();
    let refs = offloader.offload(&acme, &mut event).await.unwrap();

    assert_eq!(refs.len(), 1, "{refs:?}");
    let r = &refs[0];
    assert_eq!(r.path, "/data/content/0/text");
    assert_eq!(r.content_type, "application/json");
    assert!(r.commitment.starts_with("sha256:") && r.commitment.len() == 7 + 64);
    // The event keeps a location-free reference and everything small inline.
    assert_eq!(
        event["data"]["content"][0]["text"],
        json!({"$payload": {"blob_id": r.blob_id, "commitment": r.commitment, "size": r.size,
            "content_type": "application/json"}})
    );
    assert_eq!(event["data"]["status"], "succeeded");
    assert_eq!(event["data"]["content"][0]["type"], "text");
    assert!(!serde_json::to_string(&event).unwrap().contains(&big[..64]));

    let content = backend.store.fetch_verified(&acme, r).await.unwrap();
    assert_eq!(content.len() as u64, r.size);
    let value: Value = serde_json::from_slice(&content).unwrap();
    assert_eq!(value, json!(big));

    // Offloading again changes nothing: references and markers never move.
    let again = offloader.offload(&acme, &mut event.clone()).await.unwrap();
    assert!(again.is_empty());

    // Erasable paths move whatever their size.
    let erasing = Offloader::new(
        backend.store.clone(),
        &OffloadConfig {
            erasable_paths: vec!["/data/content/*/type".to_owned()],
            ..OffloadConfig::default()
        },
    );
    let mut small = result_event("acme", "evt-2", json!("tiny"));
    let refs = erasing.offload(&acme, &mut small).await.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].path, "/data/content/0/type");
    assert_eq!(small["data"]["content"][0]["text"], "tiny");
    let bytes = backend.store.fetch_verified(&acme, &refs[0]).await.unwrap();
    assert_eq!(&bytes[..], b"\"text\"");
}

async fn upload_through_nats_is_copied_checked_and_deleted(kind: Kind) {
    let backend = open(kind);
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let acme = tenant("acme");
    let bucket = upload_bucket(&acme);
    let objects = js
        .create_object_store(object_store::Config {
            bucket: bucket.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let payload = Bytes::from(text(5 * 1024 * 1024, 2));
    let sha = toolledger_wire::entry::hex(&Sha256::digest(&payload));
    objects.put("evt-9/content", &mut payload.as_ref()).await.unwrap();

    let upload = json!({"$upload": {"bucket": bucket, "name": "evt-9/content", "sha256": sha,
        "size": payload.len(), "content_type": "text/plain"}});
    let original = result_event("acme", "evt-9", upload.clone());
    let collector = UploadCollector::new(backend.store.clone());
    let mut event = original.clone();
    let collected = collector.collect(&js, &acme, &mut event).await.unwrap();
    assert_eq!(collected.refs.len(), 1);
    let r = &collected.refs[0];
    assert_eq!(r.path, "/data/content/0/text");
    assert_eq!(r.size, payload.len() as u64);
    assert_eq!(r.content_type, "text/plain");
    assert_eq!(
        event["data"]["content"][0]["text"]["$payload"]["blob_id"],
        json!(r.blob_id)
    );
    assert_eq!(backend.store.fetch_verified(&acme, r).await.unwrap(), payload);

    // A crash before the ledger append: the redelivered event copies again, into a new blob.
    let mut redelivered = original.clone();
    let again = collector.collect(&js, &acme, &mut redelivered).await.unwrap();
    assert_ne!(again.refs[0].blob_id, r.blob_id);
    assert_eq!(
        backend.store.fetch_verified(&acme, &again.refs[0]).await.unwrap(),
        payload
    );

    // After the ledger PubAck: deleted, and deleting again is fine.
    UploadCollector::delete_uploads(&js, &collected.uploads)
        .await
        .unwrap();
    UploadCollector::delete_uploads(&js, &collected.uploads)
        .await
        .unwrap();
    let err = collector
        .collect(&js, &acme, &mut original.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UploadMissing { .. }), "{err}");

    // Wrong digest, wrong size, another tenant's bucket.
    objects.put("evt-10", &mut &b"hello"[..]).await.unwrap();
    let bad_sha = result_event(
        "acme",
        "evt-10",
        json!({"$upload": {"bucket": bucket, "name": "evt-10", "sha256": "0".repeat(64), "size": 5}}),
    );
    let err = collector
        .collect(&js, &acme, &mut bad_sha.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UploadMismatch { .. }), "{err}");
    let bad_size = result_event(
        "acme",
        "evt-10",
        json!({"$upload": {"bucket": bucket, "name": "evt-10",
            "sha256": toolledger_wire::entry::hex(&Sha256::digest(b"hello")), "size": 6}}),
    );
    let err = collector
        .collect(&js, &acme, &mut bad_size.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UploadMismatch { .. }), "{err}");
    let foreign = result_event(
        "acme",
        "evt-11",
        json!({"$upload": {"bucket": "ATL_PAYLOADS_globex", "name": "x", "sha256": "0".repeat(64), "size": 1}}),
    );
    let err = collector
        .collect(&js, &acme, &mut foreign.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UploadInvalid { .. }), "{err}");
}

async fn swapped_blob_is_altered_and_deleted_blob_is_missing(kind: Kind) {
    let backend = open(kind);
    let acme = tenant("acme");
    let offloader = Offloader::new(backend.store.clone(), &OffloadConfig::default());
    let mut first = result_event("acme", "evt-1", json!(text(40 * 1024, 3)));
    let mut second = result_event("acme", "evt-2", json!(text(40 * 1024, 4)));
    let a = offloader.offload(&acme, &mut first).await.unwrap().remove(0);
    let b = offloader.offload(&acme, &mut second).await.unwrap().remove(0);

    // Swap in another genuine blob: the commitment catches it.
    let other = backend.store.fetch_raw(&acme, &b.blob_id).await.unwrap();
    backend
        .store
        .overwrite_for_tests(&acme, &a.blob_id, other)
        .await
        .unwrap();
    match backend.store.fetch_verified(&acme, &a).await.unwrap_err() {
        StoreError::PayloadDigestMismatch {
            blob_id,
            expected,
            actual,
        } => {
            assert_eq!(blob_id, a.blob_id);
            assert_eq!(expected, a.commitment);
            assert_eq!(actual, b.commitment);
        }
        e => panic!("expected a digest mismatch, got {e}"),
    }

    // Erase: the blob is gone, and reported missing, not altered.
    backend.store.delete(&acme, &b.blob_id).await.unwrap();
    backend.store.delete(&acme, &b.blob_id).await.unwrap();
    match backend.store.fetch_verified(&acme, &b).await.unwrap_err() {
        StoreError::PayloadMissing { blob_id } => assert_eq!(blob_id, b.blob_id),
        e => panic!("expected missing, got {e}"),
    }
}

async fn tenants_never_share_a_prefix(kind: Kind) {
    let backend = open(kind);
    let (acme, globex) = (tenant("acme"), tenant("acme-2"));
    let offloader = Offloader::new(backend.store.clone(), &OffloadConfig::default());
    let same = json!(text(40 * 1024, 5));
    let mut ea = result_event("acme", "evt-1", same.clone());
    let mut eb = result_event("acme-2", "evt-1", same);
    let ra = offloader.offload(&acme, &mut ea).await.unwrap().remove(0);
    let rb = offloader.offload(&globex, &mut eb).await.unwrap().remove(0);

    assert_ne!(ra.blob_id, rb.blob_id, "equal content is never shared");
    assert_ne!(
        ra.commitment, rb.commitment,
        "fresh nonces give unrelated commitments"
    );
    let (pa, pb) = (
        format!("{}/", backend.store.tenant_prefix(&acme)),
        format!("{}/", backend.store.tenant_prefix(&globex)),
    );
    assert!(!pa.starts_with(&pb) && !pb.starts_with(&pa), "{pa} vs {pb}");
    assert_eq!(backend.store.list(&acme).await.unwrap(), vec![ra.blob_id.clone()]);
    assert_eq!(
        backend.store.list(&globex).await.unwrap(),
        vec![rb.blob_id.clone()]
    );
    // A tenant cannot read another's blob by id.
    let err = backend.store.fetch_verified(&globex, &ra).await.unwrap_err();
    assert!(matches!(err, StoreError::PayloadMissing { .. }), "{err}");
}

macro_rules! suite {
    ($($backend:ident => $kind:expr),* $(,)?) => {
        $(
            mod $backend {
                use super::*;

                #[tokio::test]
                async fn large_result_is_offloaded_and_fetched_back_verified() {
                    super::large_result_is_offloaded_and_fetched_back_verified($kind).await;
                }

                #[tokio::test]
                async fn upload_through_nats_is_copied_checked_and_deleted() {
                    super::upload_through_nats_is_copied_checked_and_deleted($kind).await;
                }

                #[tokio::test]
                async fn swapped_blob_is_altered_and_deleted_blob_is_missing() {
                    super::swapped_blob_is_altered_and_deleted_blob_is_missing($kind).await;
                }

                #[tokio::test]
                async fn tenants_never_share_a_prefix() {
                    super::tenants_never_share_a_prefix($kind).await;
                }
            }
        )*
    };
}

suite! {
    file => Kind::File,
    memory => Kind::Memory,
    s3 => Kind::S3,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_s3_makes_a_put_wait_and_succeed() {
    let mut backend = open(Kind::S3);
    let acme = tenant("acme");
    let offloader = Offloader::new(backend.store.clone(), &OffloadConfig::default());
    let original = result_event("acme", "evt-1", json!(text(64 * 1024, 6)));

    backend.s3.as_mut().unwrap().pause();
    let mut event = original.clone();
    let put = tokio::spawn(async move {
        let refs = offloader.offload(&acme, &mut event).await;
        (refs, event)
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !put.is_finished(),
        "a put to a frozen server cannot have completed"
    );
    backend.s3.as_mut().unwrap().resume();

    let (refs, _event) = tokio::time::timeout(Duration::from_secs(90), put)
        .await
        .expect("the put finishes once the server is back")
        .unwrap();
    let refs = refs.unwrap();
    let content = backend
        .store
        .fetch_verified(&tenant("acme"), &refs[0])
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&content).unwrap(),
        original["data"]["content"][0]["text"]
    );
}

#[tokio::test]
async fn a_bad_store_url_is_a_config_error() {
    for url in ["ftp://x/y", "not a url", "gs://bucket"] {
        let err = BlobStore::open(url).unwrap_err();
        assert!(matches!(err, StoreError::BlobStoreConfig { .. }), "{url}: {err}");
    }
}

#[tokio::test]
async fn an_unreachable_store_is_a_typed_retryable_error_after_bounded_retries() {
    // A closed port, over https: also proves the S3 client builds its TLS stack with both rustls
    // providers (aws-lc-rs from object_store, ring from async-nats) compiled in.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = BlobStoreConfig::new("s3://nowhere/prefix");
    config.options = vec![
        ("aws_endpoint".to_owned(), format!("https://127.0.0.1:{port}")),
        ("aws_access_key_id".to_owned(), "x".to_owned()),
        ("aws_secret_access_key".to_owned(), "y".to_owned()),
        ("aws_region".to_owned(), "us-east-1".to_owned()),
    ];
    config.retry = toolledger_ingest::payload::RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
    };
    config.request_timeout = Duration::from_secs(2);
    let store = BlobStore::open_with(&config).unwrap();
    let err = store
        .put_new(&tenant("acme"), Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    match err {
        StoreError::BlobStoreUnavailable { attempts, .. } => assert_eq!(attempts, 3),
        e => panic!("expected unavailable, got {e}"),
    }
}

/// The whole service on S3: while the server is frozen (SIGSTOP) ingest cannot offload and waits,
/// retrying; once it is back every event lands exactly once, in order, its payloads verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_s3_makes_ingest_wait_and_lose_nothing() {
    use crate::pipeline::{Running, contract_streams, drained, id_of, ids_of, ledger, publish};

    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let mut s3 = S3Fixture::start();
    let data = tempfile::tempdir().unwrap();
    let (url, options) = (s3.url("ledger/payloads"), s3.options());
    let ingest = Running::start_with(&nats, data.path(), |settings| {
        settings.blob_store = url;
        settings.blob_store_options = options;
        settings.ack_wait = Duration::from_secs(3);
    });
    let generated =
        toolledger_schemas::generator::generate(&toolledger_schemas::generator::GeneratorConfig {
            seed: 5,
            ..Default::default()
        })
        .events;
    let (before, after) = generated.split_at(generated.len() / 2);
    let large: Vec<Value> = (0..6)
        .map(|i| result_event("acme", &format!("large-{i}"), json!(text(48 * 1024, i))))
        .collect();
    publish(&js, before, toolledger_wire::Mode::Binary, true).await;
    drained(&js).await;

    s3.pause();
    publish(&js, &large, toolledger_wire::Mode::Binary, true).await;
    publish(&js, after, toolledger_wire::Mode::Binary, true).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let held = ledger(&js).await.len();
    assert!(
        held < before.len() + large.len(),
        "nothing that needs the frozen store can have been appended ({held})"
    );
    s3.resume();

    let expected: Vec<String> = [before, &large[..], after]
        .concat()
        .iter()
        .map(|e| ids_of(std::slice::from_ref(e))[0].clone())
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let entries = loop {
        drained(&js).await;
        let entries = ledger(&js).await;
        if entries.len() >= expected.len() || std::time::Instant::now() > deadline {
            break entries;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut landed: Vec<String> = entries.iter().map(id_of).collect();
    assert_eq!(landed.len(), expected.len(), "every event exactly once");
    landed.sort();
    let mut wanted = expected.clone();
    wanted.sort();
    assert_eq!(landed, wanted);

    let store = {
        let mut config = BlobStoreConfig::new(s3.url("ledger/payloads"));
        config.options = s3.options();
        BlobStore::open_with(&config).unwrap()
    };
    let offloaded: Vec<_> = entries
        .iter()
        .filter(|e| id_of(e).starts_with("large-"))
        .flat_map(|e| e.ledger.payload_refs.clone())
        .collect();
    assert_eq!(offloaded.len(), large.len(), "each large text was offloaded");
    for payload in &offloaded {
        store.fetch_verified(&tenant("acme"), payload).await.unwrap();
    }
    ingest.stop().await;
}

/// A Python producer written from the project's schemas: a declaration's sensitive fields scrub its
/// invocation's secret, and a 100 KiB and a 5 MiB result uploaded through `ATL_PAYLOADS_acme` land in
/// the blob store behind commitments that verify; the uploads are deleted; a swapped blob is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_producer_uploads_and_declares_sensitive_fields() {
    use crate::pipeline::{Running, class_of, ledger};

    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let settings = toolledger_wire::streams::ContractSettings {
        tenants: vec![tenant("acme")],
        ..Default::default()
    };
    toolledger_wire::streams::ensure_contract(&js, &settings)
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, data.path());

    let secret = "sk-python-producer-7f3e9a1c5b";
    let root = toolledger_testkit::workspace_root();
    let output = std::process::Command::new(toolledger_testkit::python())
        .arg(root.join("ingest/tests/py/upload_producer.py"))
        .arg(nats.url())
        .arg("acme")
        .arg(root.join("schemas"))
        .arg(secret)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "upload_producer.py failed\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Value = serde_json::from_str(stdout.trim()).unwrap();
    let uploads = printed["uploads"].as_array().unwrap().clone();

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let entries = loop {
        let entries = ledger(&js).await;
        if entries.len() >= 4 {
            break entries;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ledger holds {}",
            entries.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ingest.stop().await;
    assert_eq!(entries.len(), 4);

    let planned = entries
        .iter()
        .find(|e| class_of(e) == "tool.invocation.planned")
        .unwrap();
    assert_eq!(
        planned.ledger.scrubbed_paths,
        [
            "/data/model_input/api_key",
            "/data/model_input/headers/x-session-token"
        ]
    );
    let input = &planned.event_json()["data"]["model_input"];
    assert!(input["api_key"]["$scrubbed"].is_string(), "{input}");
    assert_eq!(input["headers"]["accept"], "text/plain");
    for entry in &entries {
        let bytes = entry.canonical_bytes().unwrap();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()));
    }

    let store = BlobStore::open(&format!("file://{}", data.path().join("blobs").display())).unwrap();
    let acme = tenant("acme");
    let results: Vec<_> = entries
        .iter()
        .filter(|e| class_of(e) == "tool.result.created")
        .collect();
    assert_eq!(results.len(), 2);
    for (result, upload) in results.iter().zip(&uploads) {
        let [payload] = &result.ledger.payload_refs[..] else {
            panic!("one payload per result: {:?}", result.ledger.payload_refs);
        };
        assert_eq!(payload.path, "/data/content/0/text");
        assert_eq!(payload.size, upload["size"].as_u64().unwrap());
        assert_eq!(payload.content_type, "text/plain");
        let content = store.fetch_verified(&acme, payload).await.unwrap();
        assert_eq!(
            toolledger_wire::entry::hex(&Sha256::digest(&content)),
            upload["sha256"].as_str().unwrap()
        );
    }
    // The uploads are gone from the bucket once their entries are in the ledger.
    let objects = js.get_object_store("ATL_PAYLOADS_acme").await.unwrap();
    for upload in &uploads {
        let name = upload["name"].as_str().unwrap();
        let gone = objects.info(name).await.map_or(true, |info| info.deleted);
        assert!(gone, "{name} still uploaded");
    }
    // A swapped blob (the other result's) no longer matches its commitment.
    let (first, second) = (
        &results[0].ledger.payload_refs[0],
        &results[1].ledger.payload_refs[0],
    );
    let other = store.fetch_raw(&acme, &second.blob_id).await.unwrap();
    store
        .overwrite_for_tests(&acme, &first.blob_id, other)
        .await
        .unwrap();
    let err = store.fetch_verified(&acme, first).await.unwrap_err();
    assert!(matches!(err, StoreError::PayloadDigestMismatch { .. }), "{err}");
}
