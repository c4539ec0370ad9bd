//! Payload reports: a verified blob is `ok` (with its content on request), an altered one
//! `commitment_mismatch`, a deleted one `missing`, and one an erasure names `erased` — each reported
//! on the payload while the rest of the reconstruction is still returned.

use bytes::Bytes;
use serde_json::{Value, json};
use toolledger_ledger::{BlobStore, payload_marker};
use toolledger_projector::{Generations, Store};
use toolledger_query::{Reader, reconstruct};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_wire::{PayloadRef, Tenant};

use crate::{apply, entry_bytes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_are_checked_against_their_commitments_and_never_fail_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap();
    let tenant = Tenant::parse("acme").unwrap();
    let generated = generate(&GeneratorConfig::default());
    let planned = generated
        .events
        .iter()
        .filter(|e| e["type"] == "tool.invocation.planned")
        .take(4)
        .cloned()
        .collect::<Vec<Value>>();

    // Four invocations, each with its model input offloaded to its own blob.
    let mut entries = Vec::new();
    let mut refs = Vec::new();
    for event in &planned {
        let content = serde_json::to_vec(&event["data"]["model_input"]).unwrap();
        let stored = blobs.put_new(&tenant, Bytes::from(content)).await.unwrap();
        let reference = PayloadRef {
            path: "/data/model_input".to_owned(),
            blob_id: stored.blob_id.clone(),
            commitment: stored.commitment.clone(),
            size: stored.size,
            content_type: "application/json".to_owned(),
        };
        let mut event = event.clone();
        event["data"]["model_input"] = payload_marker(&reference);
        entries.push(entry_bytes(&event, json!([reference])));
        refs.push(reference);
    }
    let generation = Generations::new(dir.path()).current_or_init().unwrap();
    let mut store = Store::open(&generation.database(), Default::default()).unwrap();
    apply(&mut store, entries);

    // Alter the second, delete the third, delete and record an erasure for the fourth.
    blobs
        .overwrite_for_tests(
            &tenant,
            &refs[1].blob_id,
            Bytes::from_static(b"0123456789abcdef-altered"),
        )
        .await
        .unwrap();
    blobs.delete(&tenant, &refs[2].blob_id).await.unwrap();
    blobs.delete(&tenant, &refs[3].blob_id).await.unwrap();
    store
        .connection()
        .execute(
            "INSERT INTO erasures (erasure_id, blob_ids, reason, authority, completed_at, seq, data)
             VALUES ('era_1', ?1, 'gdpr', 'dpo', '2026-05-08T10:00:00Z', 99, '{}')",
            [json!([refs[3].blob_id]).to_string()],
        )
        .unwrap();
    // What the projector writes for an erasure: the reconstruction looks blobs up here.
    store
        .connection()
        .execute(
            "INSERT INTO erased_blobs (tenant, blob_id, erasure_id, seq) VALUES ('acme', ?1, 'era_1', 99)",
            [&refs[3].blob_id],
        )
        .unwrap();

    let reader = Reader::new(dir.path());
    let mut statuses = Vec::new();
    for event in &planned {
        let id = event["subject"].as_str().unwrap().to_owned();
        let mut r = reader
            .read(move |conn| reconstruct(conn, Some("acme"), &id))
            .await
            .unwrap();
        assert_eq!(r.payloads.len(), 1);
        assert_eq!(r.payloads[0].status, "not_checked");
        toolledger_query::payloads::check(&blobs, &mut r, true).await;
        assert_eq!(r.timeline.len(), 1, "the rest of the reconstruction is there");
        statuses.push((r.payloads[0].status.clone(), r.payloads[0].clone()));
    }
    assert_eq!(statuses[0].0, "ok");
    assert_eq!(
        statuses[0].1.content.as_ref(),
        Some(&planned[0]["data"]["model_input"]),
        "the verified content is the original"
    );
    assert_eq!(statuses[1].0, "commitment_mismatch");
    assert!(statuses[1].1.content.is_none());
    assert_eq!(statuses[2].0, "missing");
    assert_eq!(statuses[3].0, "erased");
    assert_eq!(statuses[3].1.erasure_id.as_deref(), Some("era_1"));
}

/// Readers follow `current` to a new generation on their next read (a rebuild).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_follow_a_generation_switch() {
    let dir = tempfile::tempdir().unwrap();
    let generations = Generations::new(dir.path());
    let generated = generate(&GeneratorConfig::default());
    let events: Vec<Vec<u8>> = generated
        .events
        .iter()
        .map(|e| entry_bytes(e, json!([])))
        .collect();
    let first = generations.current_or_init().unwrap();
    let mut store = Store::open(&first.database(), Default::default()).unwrap();
    apply(&mut store, events[..20].to_vec());
    let reader = Reader::new(dir.path());
    let count = |reader: &std::sync::Arc<Reader>| {
        let reader = reader.clone();
        async move {
            reader
                .read(|conn| {
                    Ok(conn
                        .query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
                        .unwrap())
                })
                .await
                .unwrap()
        }
    };
    assert_eq!(count(&reader).await, 20);
    let next = generations.create_next().unwrap();
    let mut rebuilt = Store::open(&next.database(), Default::default()).unwrap();
    apply(&mut rebuilt, events.clone());
    assert_eq!(count(&reader).await, 20, "still the old generation");
    generations.switch_to(&next).unwrap();
    assert_eq!(count(&reader).await, events.len() as i64);
}
