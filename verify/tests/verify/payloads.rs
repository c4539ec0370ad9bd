//! Payload commitments: `verify` fetches every referenced blob and holds it against the commitment in
//! its entry. A swapped blob is altered, a deleted one missing, an erased one (named by a
//! `toolledger.erasure.completed` entry) neither. One suite on a `file://` store and on a real
//! S3-compatible server.

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use toolledger_ingest::append::PendingEntry;
use toolledger_ingest::payload::{OffloadConfig, Offloader};
use toolledger_ledger::{BlobStore, BlobStoreConfig};
use toolledger_testkit::S3Fixture;
use toolledger_verify::{Finding, VerifyOptions, verify_ledger};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};
use toolledger_wire::{LedgerEntry, Mode, PayloadRef, Tenant, produce};

use crate::common::{TestLedger, verifiers};

fn result_event(id: &str, text: String) -> Value {
    json!({"specversion": "1.0", "id": id, "source": "urn:test", "type": "tool.result.created",
        "tenant": "acme", "subject": "inv-1", "invocationid": "inv-1",
        "data": {"schema_version": "0.2.0", "result_id": format!("res-{id}"), "invocation_id": "inv-1",
            "status": "succeeded", "is_error": false, "created_at": "2026-05-08T09:00:00Z",
            "content": [{"type": "text", "text": text}]}})
}

/// Entries as ingest writes them: the large field offloaded, its reference in the ledger metadata.
async fn offloaded_entry(offloader: &Offloader, id: &str, seed: u8) -> (PendingEntry, PayloadRef) {
    let text: String = (0..40_000)
        .map(|i| char::from(b'a' + ((i + usize::from(seed)) % 26) as u8))
        .collect();
    let mut event = result_event(id, text);
    let refs = offloader
        .offload(&Tenant::parse("acme").unwrap(), &mut event)
        .await
        .unwrap();
    assert_eq!(refs.len(), 1, "the 40 KB text moves to the blob store");
    let outgoing = produce::prepare(event, None, Mode::Binary).unwrap();
    let decoded =
        toolledger_wire::decode(&outgoing.subject, Some(&outgoing.headers), &outgoing.payload).unwrap();
    let mut entry = LedgerEntry::new(decoded, Utc.timestamp_opt(1_778_230_900, 0).unwrap());
    entry.ledger.payload_refs = refs.clone();
    let bytes = entry.canonical_bytes().unwrap();
    (
        PendingEntry::new(
            "atl.ledger.acme.tool.result.created".to_owned(),
            Bytes::from(bytes),
        ),
        refs[0].clone(),
    )
}

/// The ledger's own erasure record for `blob_id`.
fn erasure_entry(blob_id: &str) -> PendingEntry {
    let event = json!({"specversion": "1.0", "id": "erasure-1", "source": "toolledger",
        "type": "toolledger.erasure.completed", "tenant": "_system", "datacontenttype": "application/json",
        "data": {"erasure_id": "erasure-1", "tenant": "acme", "blob_ids": [blob_id], "reason": "data-subject request",
            "authority": "ticket 7", "completed_at": "2026-05-08T10:00:00Z"}});
    let entry = LedgerEntry {
        event: toolledger_wire::decode::structured_event(event).unwrap(),
        ledger: toolledger_wire::LedgerMetadata {
            ingested_at: Utc.timestamp_opt(1_778_231_000, 0).unwrap(),
            origin: toolledger_wire::Origin::Ledger,
            content_digest: None,
            payload_refs: Vec::new(),
            scrubbed_paths: Vec::new(),
            trace_refs: None,
            envelope_fields: None,
        },
    };
    PendingEntry::new(
        "atl.ledger._system.toolledger.erasure.completed".to_owned(),
        Bytes::from(entry.canonical_bytes().unwrap()),
    )
}

async fn commitments_are_checked(store: BlobStore) {
    let offloader = Offloader::new(store.clone(), &OffloadConfig::default());
    let mut entries = crate::common::generated_entries(20);
    let mut refs = Vec::new();
    for (i, id) in ["big-1", "big-2", "big-3", "big-4"].iter().enumerate() {
        let (entry, payload) = offloaded_entry(&offloader, id, i as u8).await;
        entries.push(entry);
        refs.push(payload);
    }
    entries.push(erasure_entry(&refs[0].blob_id));
    let ledger = TestLedger::build(entries).await;
    let verify = |store: BlobStore| {
        let js = ledger.js.clone();
        async move {
            let options = VerifyOptions {
                blobs: Some(store),
                ..VerifyOptions::default()
            };
            verify_ledger(&js, LEDGER, CHECKPOINTS, &verifiers(), &options, &mut |_| {})
                .await
                .unwrap()
        }
    };

    // An erasure record names the first blob, still stored: it is checked like any other.
    let report = verify(store.clone()).await;
    assert!(report.is_ok(), "{:?}", report.findings);
    assert_eq!((report.payloads_checked, report.payloads_erased), (4, 0));

    let acme = Tenant::parse("acme").unwrap();
    // The erased blob is gone as its record says; another disappears without one; a third is swapped
    // for the fourth's bytes (a valid blob, but not the one committed to).
    store.delete(&acme, &refs[0].blob_id).await.unwrap();
    store.delete(&acme, &refs[1].blob_id).await.unwrap();
    let other = store.fetch_raw(&acme, &refs[3].blob_id).await.unwrap();
    store
        .overwrite_for_tests(&acme, &refs[2].blob_id, other)
        .await
        .unwrap();

    let report = verify(store.clone()).await;
    assert_eq!((report.payloads_checked, report.payloads_erased), (4, 1));
    let payload_findings: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| matches!(f, Finding::PayloadMissing { .. } | Finding::PayloadAltered { .. }))
        .collect();
    assert_eq!(payload_findings.len(), 2, "{:?}", report.findings);
    assert!(
        matches!(payload_findings[0], Finding::PayloadMissing { seq: 22, blob_id, .. } if *blob_id == refs[1].blob_id),
        "{payload_findings:?}"
    );
    assert!(
        matches!(payload_findings[1], Finding::PayloadAltered { seq: 23, blob_id, .. } if *blob_id == refs[2].blob_id),
        "{payload_findings:?}"
    );
    assert_eq!(
        report.findings.len(),
        2,
        "the ledger itself is intact: {:?}",
        report.findings
    );
    assert!(payload_findings[0].to_string().contains("missing"));
    assert!(payload_findings[1].to_string().contains("altered"));
    // Without a blob store nothing is fetched and the ledger verifies.
    let report = ledger.verify(LEDGER, CHECKPOINTS, true).await;
    assert!(report.is_ok() && report.payloads_checked == 0, "{report:?}");
}

#[tokio::test]
async fn payload_commitments_on_a_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(&format!("file://{}/blobs", dir.path().display())).unwrap();
    commitments_are_checked(store).await;
}

#[tokio::test]
async fn payload_commitments_on_s3() {
    let s3 = S3Fixture::start();
    let mut config = BlobStoreConfig::new(s3.url("ledger/payloads"));
    config.options = s3.options();
    commitments_are_checked(BlobStore::open_with(&config).unwrap()).await;
}
