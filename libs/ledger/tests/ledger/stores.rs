//! The tile store opened from configured locations, and the blob store's round trip (the blob
//! store's full suite, against every backend, is ingest's payload suite).

use bytes::Bytes;
use toolledger_ledger::{BlobStore, Error, NONCE_LEN, is_payload_marker, open_tiles, payload_marker};
use toolledger_wire::{PayloadRef, Tenant};

#[tokio::test]
async fn tiles_open_from_a_directory_a_file_url_or_memory_and_refuse_anything_else() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain/tiles");
    open_tiles(plain.to_str().unwrap()).unwrap();
    assert!(plain.is_dir(), "the directory is created");
    let url = format!("file://{}", dir.path().join("url").display());
    open_tiles(&url).unwrap();
    assert!(dir.path().join("url").is_dir());
    open_tiles("memory://").unwrap();
    for bad in ["ftp://host/tiles", "gs://bucket/tiles", "http://[::1"] {
        let error = open_tiles(bad).unwrap_err();
        assert!(matches!(error, Error::TileStoreConfig { .. }), "{bad}: {error}");
    }
}

#[tokio::test]
async fn a_blob_round_trips_is_checked_against_its_commitment_and_is_erasable() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(&format!("file://{}", dir.path().display())).unwrap();
    let tenant = Tenant::parse("acme").unwrap();
    let stored = store
        .put_new(&tenant, Bytes::from_static(b"{\"big\":true}"))
        .await
        .unwrap();
    let payload = PayloadRef {
        path: "/data/result".to_owned(),
        blob_id: stored.blob_id.clone(),
        commitment: stored.commitment.clone(),
        size: stored.size,
        content_type: "application/json".to_owned(),
    };
    assert!(is_payload_marker(&payload_marker(&payload)));
    assert_eq!(
        store.fetch_verified(&tenant, &payload).await.unwrap(),
        Bytes::from_static(b"{\"big\":true}")
    );
    let raw = store.fetch_raw(&tenant, &stored.blob_id).await.unwrap();
    assert_eq!(raw.len(), NONCE_LEN + 12, "nonce || content");
    assert!(store.exists(&tenant, &stored.blob_id).await.unwrap());
    let other = Tenant::parse("globex").unwrap();
    assert!(
        !store.exists(&other, &stored.blob_id).await.unwrap(),
        "blobs are per tenant"
    );

    // Another commitment: the blob is reported altered, not returned.
    let mut wrong = payload.clone();
    wrong.commitment = format!("sha256:{}", "0".repeat(64));
    let error = store.fetch_verified(&tenant, &wrong).await.unwrap_err();
    assert!(matches!(error, Error::PayloadDigestMismatch { .. }), "{error}");

    store.delete(&tenant, &stored.blob_id).await.unwrap();
    assert!(!store.exists(&tenant, &stored.blob_id).await.unwrap());
    let error = store.fetch_verified(&tenant, &payload).await.unwrap_err();
    assert!(matches!(error, Error::PayloadMissing { .. }), "{error}");
    assert!(store.list(&tenant).await.unwrap().is_empty());
}
