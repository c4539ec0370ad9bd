//! Evidence bundles built from a real ledger (NATS, the ingest appender and checkpointer, a file blob
//! store), checked by the Rust verifier and by `tests/py/verify_bundle.py`, an independent verifier
//! written from `docs/evidence-bundles.md` alone. A one-byte change anywhere in a bundle must fail both.

use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use toolledger_ingest::append::PendingEntry;
use toolledger_ingest::payload::{OffloadConfig, Offloader};
use toolledger_ledger::BlobStore;
use toolledger_merkle::{Checkpoint, NoteSigner, Verifiers, leaf_hash};
use toolledger_verify::bundle::{
    BuiltBundle, BundleRequest, EvidenceBundle, FORMAT, Selection, build_bundle, verify_bundle,
};
use toolledger_verify::{Error, ProveSource, signed_checkpoint};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};
use toolledger_wire::{LedgerEntry, Mode, Tenant, produce};

use crate::common::{EVERY, ORIGIN, TestLedger, generated_entries, signer, verifiers};

/// Generated entries before the two entries of the bundled invocation.
const GENERATED: usize = 150;
/// The invocation whose two result events carry offloaded payloads.
const INVOCATION: &str = "inv-bundle";

fn source(ledger: &TestLedger) -> ProveSource {
    ProveSource {
        ledger_stream: LEDGER.to_owned(),
        checkpoint_stream: CHECKPOINTS.to_owned(),
        verifiers: verifiers(),
        origin: None,
        tiles: Some(ledger.tiles()),
        trusted: Default::default(),
    }
}

/// A result event of [`INVOCATION`] whose content is moved to the blob store (an erasable path), as
/// ingest does it.
async fn result_entry(offloader: &Offloader, n: u32) -> PendingEntry {
    let mut event = json!({"specversion": "1.0", "id": format!("res-event-{n}"), "source": "urn:test",
        "type": "tool.result.created", "tenant": "acme", "subject": INVOCATION, "invocationid": INVOCATION,
        "data": {"schema_version": "0.2.0", "result_id": format!("res-{n}"), "invocation_id": INVOCATION,
            "status": "succeeded", "is_error": false, "created_at": "2026-05-08T09:00:00Z",
            "content": [{"type": "text", "text": format!("result number {n}")}]}});
    let refs = offloader
        .offload(&Tenant::parse("acme").unwrap(), &mut event)
        .await
        .unwrap();
    assert_eq!(refs.len(), 1, "the erasable content moves to the blob store");
    let outgoing = produce::prepare(event, None, Mode::Binary).unwrap();
    let decoded =
        toolledger_wire::decode(&outgoing.subject, Some(&outgoing.headers), &outgoing.payload).unwrap();
    let mut entry = LedgerEntry::new(decoded, Utc.timestamp_opt(1_778_230_900, 0).unwrap());
    entry.ledger.payload_refs = refs;
    PendingEntry::new(
        "atl.ledger.acme.tool.result.created".to_owned(),
        Bytes::from(entry.canonical_bytes().unwrap()),
    )
}

/// A ledger of [`GENERATED`] generated entries and then the two results of [`INVOCATION`] (seqs
/// `GENERATED + 1` and `+ 2`), checkpoints at 100 and at the end; and its blob store.
async fn ledger_with_payloads() -> (TestLedger, BlobStore, tempfile::TempDir) {
    let blobs_dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(&format!("file://{}", blobs_dir.path().display())).unwrap();
    let offloader = Offloader::new(
        store.clone(),
        &OffloadConfig {
            erasable_paths: vec!["/data/content".to_owned()],
            ..OffloadConfig::default()
        },
    );
    let mut entries = generated_entries(GENERATED);
    entries.push(result_entry(&offloader, 1).await);
    entries.push(result_entry(&offloader, 2).await);
    (TestLedger::build(entries).await, store, blobs_dir)
}

/// The signed checkpoint notes in the ledger's checkpoint stream, oldest first.
async fn checkpoint_notes(ledger: &TestLedger) -> Vec<String> {
    toolledger_ledger::read_all(&ledger.js, CHECKPOINTS)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, payload)| String::from_utf8(payload.to_vec()).unwrap())
        .collect()
}

fn invocation_request(store: &BlobStore, since: Option<String>) -> BundleRequest {
    let first = GENERATED as u64 + 1;
    BundleRequest {
        selection: Selection::invocation("acme", INVOCATION),
        seqs: vec![first + 1, first],
        since_checkpoint: since,
        blobs: Some(store.clone()),
        witness_policy: None,
        directory: None,
    }
}

/// splitmix64, for replayable positions and replacement bytes.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A byte other than `old`.
    fn other_byte(&mut self, old: u8) -> u8 {
        let new = (self.next() % 255) as u8;
        if new >= old { new + 1 } else { new }
    }
}

/// Runs the Python verifier over `files`; one verdict line per file.
fn python_verdicts(key: &str, files: &[std::path::PathBuf]) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/verify_bundle.py");
    let out = Command::new(toolledger_testkit::python())
        .arg(script)
        .arg(key)
        .args(files)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "verify_bundle.py failed to run: {stderr}"
    );
    let verdicts: Vec<String> = stdout.lines().map(str::to_owned).collect();
    assert_eq!(verdicts.len(), files.len(), "{stdout}{stderr}");
    verdicts
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Python accepts `bytes`, and rejects `sample` one-byte changes of it at replayable positions.
fn python_accepts_and_rejects_changes(bytes: &[u8], sample: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let key = signer().verifier().to_string();
    let mut files = vec![write(dir.path(), "original.json", bytes)];
    let mut mix = Mix(seed);
    let mut positions = Vec::new();
    for i in 0..sample {
        let at = (mix.next() % bytes.len() as u64) as usize;
        let mut changed = bytes.to_vec();
        changed[at] = mix.other_byte(changed[at]);
        // The Rust verifier must reject the same files.
        assert!(
            verify_bundle(&changed, &verifiers(), None).is_err(),
            "rust accepted a change at byte {at}"
        );
        files.push(write(dir.path(), &format!("changed-{i}.json"), &changed));
        positions.push(at);
    }
    let verdicts = python_verdicts(&key, &files);
    assert!(
        verdicts[0].starts_with("ok "),
        "python rejected the bundle: {}",
        verdicts[0]
    );
    for (verdict, at) in verdicts[1..].iter().zip(positions) {
        assert!(
            verdict.starts_with("rejected: "),
            "python accepted a change at byte {at}: {verdict}"
        );
    }
}

#[tokio::test]
async fn an_invocation_bundle_verifies_in_rust_and_python_and_every_changed_byte_fails() {
    let (ledger, store, _blobs) = ledger_with_payloads().await;
    let notes = checkpoint_notes(&ledger).await;
    let held = Checkpoint::open(&notes[0], &verifiers()).unwrap();
    assert_eq!(held.size, EVERY, "the first checkpoint is the auditor's");

    let BuiltBundle {
        bundle,
        bytes,
        report,
        payloads_left_out,
    } = build_bundle(
        &ledger.js,
        &source(&ledger),
        &invocation_request(&store, Some(notes[0].clone())),
    )
    .await
    .unwrap();
    assert_eq!(bundle.format, FORMAT);
    // The checkpoint endpoints' library calls agree with the bundle and the stream.
    let latest = signed_checkpoint(&ledger.js, &source(&ledger), None)
        .await
        .unwrap();
    assert_eq!(latest.note, bundle.checkpoint);
    let first = signed_checkpoint(&ledger.js, &source(&ledger), Some(EVERY))
        .await
        .unwrap();
    assert_eq!((first.size, &first.note), (EVERY, &notes[0]));
    assert!(matches!(
        signed_checkpoint(&ledger.js, &source(&ledger), Some(7)).await,
        Err(Error::NoCheckpoint { .. })
    ));
    assert!(payloads_left_out.is_empty(), "{payloads_left_out:?}");
    let n = ledger.entries.len() as u64;
    assert_eq!(
        report.tree_size, n,
        "the newest checkpoint covers the whole ledger"
    );
    assert_eq!(report.signed_by, vec![ORIGIN.to_owned()]);
    let seqs: Vec<u64> = report.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![n - 1, n]);
    for (entry, pending) in report.entries.iter().zip(&ledger.entries[n as usize - 2..]) {
        assert_eq!(
            entry.leaf_hash,
            toolledger_verify::hex(&leaf_hash(&pending.bytes))
        );
        assert_eq!(entry.class.as_deref(), Some("tool.result.created"));
        assert_eq!(entry.payloads.len(), 1);
        assert!(entry.payloads[0].included, "the blob is carried and checked");
    }
    assert_eq!(report.payloads_checked(), 2);
    assert_eq!(
        report.consistent_with.as_ref().map(|h| h.size),
        Some(EVERY),
        "the held checkpoint is linked"
    );
    // The file is the canonical document and reads back as the same bundle.
    assert_eq!(EvidenceBundle::from_bytes(&bytes).unwrap(), bundle);
    assert!(bytes.ends_with(b"}\n"));
    assert_eq!(verify_bundle(&bytes, &verifiers(), None).unwrap(), report);

    // Every byte position, changed two ways: the Rust verifier rejects each.
    let mut mix = Mix(0xB0D1E);
    for at in 0..bytes.len() {
        for new in [bytes[at] ^ 0x01, mix.other_byte(bytes[at])] {
            let mut changed = bytes.clone();
            changed[at] = new;
            assert!(
                verify_bundle(&changed, &verifiers(), None).is_err(),
                "accepted {:?} at byte {at} of {}",
                char::from(new),
                bytes.len()
            );
        }
    }
    println!(
        "{} byte positions of a {}-entry bundle checked",
        bytes.len(),
        bundle.entries.len()
    );

    python_accepts_and_rejects_changes(&bytes, 300, 11);

    // Without payloads the commitments are still proven; the verifier says which bytes it had.
    let mut without = invocation_request(&store, None);
    without.blobs = None;
    let built = build_bundle(&ledger.js, &source(&ledger), &without)
        .await
        .unwrap();
    assert!(built.bundle.consistency.is_none());
    assert_eq!(built.report.payloads_checked(), 0);
    assert_eq!(built.report.payloads_not_included(), 2);
    let verdicts = python_verdicts(
        &signer().verifier().to_string(),
        &[write(tempfile::tempdir().unwrap().path(), "b.json", &built.bytes)],
    );
    assert!(verdicts[0].starts_with("ok 2 "), "{}", verdicts[0]);

    // Holding the newest checkpoint already: an empty consistency proof, still checked.
    let same = build_bundle(
        &ledger.js,
        &source(&ledger),
        &invocation_request(&store, Some(bundle.checkpoint.clone())),
    )
    .await
    .unwrap();
    let consistency = same.bundle.consistency.as_ref().unwrap();
    assert!(consistency.proof.is_empty());
    assert_eq!(same.report.consistent_with.map(|h| h.size), Some(n));
}

/// The session with the most entries among the generated ones, and their seqs.
fn largest_session(entries: &[PendingEntry]) -> (String, String, Vec<u64>) {
    let mut sessions: std::collections::BTreeMap<(String, String), Vec<u64>> = Default::default();
    for (i, entry) in entries.iter().enumerate() {
        let value: Value = serde_json::from_slice(&entry.bytes).unwrap();
        let event = &value["event"];
        let session = event["sessionid"]
            .as_str()
            .or_else(|| event["data"]["session_id"].as_str());
        if let (Some(tenant), Some(session)) = (event["tenant"].as_str(), session) {
            sessions
                .entry((tenant.to_owned(), session.to_owned()))
                .or_default()
                .push(i as u64 + 1);
        }
    }
    let ((tenant, session), seqs) = sessions
        .into_iter()
        .max_by_key(|(_, seqs)| seqs.len())
        .expect("generated events have sessions");
    (tenant, session, seqs)
}

#[tokio::test]
async fn a_session_bundle_of_generated_events_verifies_and_python_rejects_changes() {
    let (ledger, store, _blobs) = ledger_with_payloads().await;
    let (tenant, session, seqs) = largest_session(&ledger.entries);
    assert!(seqs.len() > 10, "a real session: {} entries", seqs.len());
    let built = build_bundle(
        &ledger.js,
        &source(&ledger),
        &BundleRequest {
            selection: Selection::session(&tenant, &session),
            seqs: seqs.clone(),
            since_checkpoint: None,
            blobs: Some(store),
            witness_policy: None,
            directory: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(built.report.entries.len(), seqs.len());
    println!(
        "session bundle: {} entries, {} bytes",
        seqs.len(),
        built.bytes.len()
    );
    python_accepts_and_rejects_changes(&built.bytes, 300, 23);

    // Proofs from the ledger when there are no tiles give the same bundle.
    let no_tiles = ProveSource {
        tiles: None,
        ..source(&ledger)
    };
    let again = build_bundle(
        &ledger.js,
        &no_tiles,
        &BundleRequest {
            selection: Selection::session(&tenant, &session),
            seqs,
            since_checkpoint: None,
            blobs: None,
            witness_policy: None,
            directory: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(again.bundle.entries.len(), built.bundle.entries.len());
    for (a, b) in again.bundle.entries.iter().zip(&built.bundle.entries) {
        assert_eq!((&a.entry, &a.inclusion_proof), (&b.entry, &b.inclusion_proof));
    }
}

#[tokio::test]
async fn bundles_are_refused_when_the_evidence_does_not_hold() {
    let (ledger, store, _blobs) = ledger_with_payloads().await;
    let source = source(&ledger);
    let n = ledger.entries.len() as u64;

    // An entry of another invocation cannot be claimed for this one.
    let mut request = invocation_request(&store, None);
    request.seqs.push(1);
    let error = build_bundle(&ledger.js, &source, &request).await.unwrap_err();
    assert!(
        matches!(error, Error::BundleEntryRejected { seq: 1, .. }),
        "{error}"
    );

    // A held checkpoint with the ledger's key but another root at its size: a fork, named.
    let forged = Checkpoint::new(ORIGIN, EVERY, leaf_hash(b"another tree"))
        .sign(&[&signer()])
        .unwrap();
    let error = build_bundle(&ledger.js, &source, &invocation_request(&store, Some(forged)))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::HeldCheckpointDiverges { size: EVERY, .. }),
        "{error}"
    );
    // A held checkpoint signed by a stranger is not evidence of anything.
    let stranger = NoteSigner::generate(ORIGIN).unwrap();
    let foreign = Checkpoint::new(ORIGIN, EVERY, leaf_hash(b"x"))
        .sign(&[&stranger])
        .unwrap();
    let error = build_bundle(&ledger.js, &source, &invocation_request(&store, Some(foreign)))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::BundleCheckpointUntrusted { .. }),
        "{error}"
    );

    // Sequences beyond the ledger, and no sequences at all.
    let mut beyond = invocation_request(&store, None);
    beyond.seqs = vec![n + 1];
    assert!(matches!(
        build_bundle(&ledger.js, &source, &beyond).await.unwrap_err(),
        Error::NoSuchEntry { .. }
    ));
    beyond.seqs.clear();
    assert!(matches!(
        build_bundle(&ledger.js, &source, &beyond).await.unwrap_err(),
        Error::EmptyBundle
    ));

    // A bundle verifies only with the ledger's key.
    let built = build_bundle(&ledger.js, &source, &invocation_request(&store, None))
        .await
        .unwrap();
    let error = verify_bundle(&built.bytes, &Verifiers::new([stranger.verifier()]), None).unwrap_err();
    assert!(
        matches!(error, Error::BundleCheckpointUntrusted { .. }),
        "{error}"
    );

    // A tampered blob in the store is refused; an erased one is left out and said so.
    let tenant = Tenant::parse("acme").unwrap();
    let blobs = |b: &BuiltBundle| -> Vec<String> {
        b.report
            .entries
            .iter()
            .map(|e| e.payloads[0].blob_id.clone())
            .collect()
    };
    let ids = blobs(&built);
    store
        .overwrite_for_tests(&tenant, &ids[0], Bytes::from(vec![0u8; 64]))
        .await
        .unwrap();
    let error = build_bundle(&ledger.js, &source, &invocation_request(&store, None))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::BundlePayloadUnavailable { blob_id, .. } if *blob_id == ids[0]),
        "{error}"
    );
    store.delete(&tenant, &ids[0]).await.unwrap();
    let erased = build_bundle(&ledger.js, &source, &invocation_request(&store, None))
        .await
        .unwrap();
    assert_eq!(erased.payloads_left_out.len(), 1);
    assert_eq!(erased.payloads_left_out[0].blob_id, ids[0]);
    assert_eq!(erased.report.payloads_checked(), 1);
    assert_eq!(erased.report.payloads_not_included(), 1);

    // A blob moved to the other entry does not match that entry's references.
    let mut bundle = EvidenceBundle::from_bytes(&built.bytes).unwrap();
    let moved = bundle.entries[1].payloads.pop().unwrap();
    bundle.entries[0].payloads.push(moved);
    let error = verify_bundle(&bundle.to_bytes().unwrap(), &verifiers(), None).unwrap_err();
    assert!(matches!(error, Error::BundlePayloadRejected { .. }), "{error}");
}
