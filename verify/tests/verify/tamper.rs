//! Each kind of tampering is caught and named by its position. Ledger tampering happens on a copy of
//! the ledger in another stream (ATL_LEDGER denies deletes), verified against the original
//! checkpoints and tiles.

use bytes::Bytes;
use toolledger_merkle::tile::TileId;
use toolledger_merkle::{Checkpoint, Note, NoteSigner};
use toolledger_verify::{Finding, Report};
use toolledger_wire::streams::{self, CHECKPOINTS, ContractSettings, LEDGER};

use crate::common::{ORIGIN, TestLedger, generated_entries};

const COPY: &str = "COPY_LEDGER";

async fn ledger() -> TestLedger {
    let ledger = TestLedger::build(generated_entries(700)).await;
    assert!(ledger.entries.len() > 600, "{} entries", ledger.entries.len());
    ledger
}

/// Copies the ledger with `change` applied and verifies the copy against the original checkpoints,
/// with the tiles (exact position) and without (a range).
async fn verify_altered_copy(change: impl FnOnce(&mut Vec<Bytes>)) -> (Report, Report) {
    let ledger = ledger().await;
    let mut entries = ledger.entry_bytes();
    change(&mut entries);
    ledger.copy_stream(COPY, "copy.ledger", &entries).await;
    (
        ledger.verify(COPY, CHECKPOINTS, true).await,
        ledger.verify(COPY, CHECKPOINTS, false).await,
    )
}

fn assert_altered_at(report: &Report, seq: u64) {
    let first = report.first_bad().unwrap();
    assert!(
        matches!(first, Finding::EntryAltered { seq: s, .. } if *s == seq),
        "{:#?}",
        report.findings
    );
    assert_eq!(report.first_bad_seq(), Some(seq));
    assert!(
        first.to_string().starts_with(&format!("ledger seq {seq}:")),
        "{first}"
    );
}

/// Without tiles the position is the range between the last matching and the first failing checkpoint.
fn assert_in_mismatch_range(report: &Report, seq: u64) {
    let Some(Finding::RootMismatch {
        good_through, size, ..
    }) = report.first_bad()
    else {
        panic!("{:#?}", report.findings);
    };
    assert!(
        *good_through < seq && seq <= *size,
        "{seq} not in {good_through}..={size}"
    );
}

#[tokio::test]
async fn an_untouched_ledger_verifies_clean() {
    let ledger = ledger().await;
    for with_tiles in [true, false] {
        let report = ledger.verify(LEDGER, CHECKPOINTS, with_tiles).await;
        assert!(report.is_ok(), "{:#?}", report.findings);
        assert_eq!(report.entries, ledger.entries.len() as u64);
        assert_eq!(report.signed_size, report.entries);
        assert!(report.trusted_checkpoints >= 6);
        assert_eq!(report.trusted_checkpoints, report.checkpoints);
    }
}

#[tokio::test]
async fn one_changed_byte_in_an_entry_is_named() {
    let (with_tiles, without) = verify_altered_copy(|entries| {
        let mut bytes = entries[299].to_vec();
        // A letter inside a string value: the entry stays canonical JSON, only its content changes.
        let at = bytes.windows(9).position(|w| w == b"generator").unwrap();
        bytes[at] = b'h';
        entries[299] = Bytes::from(bytes);
    })
    .await;
    assert_altered_at(&with_tiles, 300);
    assert_in_mismatch_range(&without, 300);
}

#[tokio::test]
async fn a_dropped_entry_is_named() {
    let (with_tiles, without) = verify_altered_copy(|entries| {
        entries.remove(299);
    })
    .await;
    assert_altered_at(&with_tiles, 300);
    assert!(
        with_tiles
            .findings
            .iter()
            .any(|f| matches!(f, Finding::CheckpointBeyondLedger { .. })),
        "{:#?}",
        with_tiles.findings
    );
    assert_in_mismatch_range(&without, 300);
}

#[tokio::test]
async fn two_swapped_entries_are_named() {
    let (with_tiles, without) = verify_altered_copy(|entries| entries.swap(299, 300)).await;
    assert_altered_at(&with_tiles, 300);
    assert_in_mismatch_range(&without, 300);
}

#[tokio::test]
async fn an_inserted_entry_is_named() {
    let (with_tiles, without) = verify_altered_copy(|entries| {
        let forged = entries[10].clone();
        entries.insert(299, forged);
    })
    .await;
    assert_altered_at(&with_tiles, 300);
    assert_in_mismatch_range(&without, 300);
}

#[tokio::test]
async fn a_replaced_tile_is_named() {
    let ledger = ledger().await;
    let tile = TileId {
        level: 0,
        index: 1,
        width: 256,
    };
    // Another valid-looking tile: the right size, other hashes.
    let mut forged = vec![0u8; 256 * 32];
    forged[0] = 1;
    ledger.tiles().put_raw(&tile, forged).await.unwrap();
    let report = ledger.verify(LEDGER, CHECKPOINTS, true).await;
    let [Finding::TileCorrupt { path, first_seq, .. }] = report.findings.as_slice() else {
        panic!("{:#?}", report.findings);
    };
    assert!(path.ends_with("tile/0/001"), "{path}");
    assert_eq!(*first_seq, Some(257));
    assert_eq!(report.first_bad_seq(), None, "the ledger itself is intact");
    // The ledger alone still verifies.
    assert!(ledger.verify(LEDGER, CHECKPOINTS, false).await.is_ok());
}

#[tokio::test]
async fn a_checkpoint_re_signed_with_another_key_is_named() {
    let ledger = ledger().await;
    let notes: Vec<Bytes> = toolledger_ledger::read_all(&ledger.js, CHECKPOINTS)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, note)| note)
        .collect();
    assert!(notes.len() >= 4);
    let mut copied = notes.clone();
    // Same key name, another key: what someone without the signing key can produce.
    let impostor = NoteSigner::generate(ORIGIN).unwrap();
    let body = Note::parse(std::str::from_utf8(&notes[2]).unwrap()).unwrap().text;
    let checkpoint = Checkpoint::parse_body(&body).unwrap();
    copied[2] = Bytes::from(checkpoint.sign(&[&impostor]).unwrap());
    ledger
        .copy_stream("COPY_CHECKPOINTS", "copy.checkpoints", &copied)
        .await;
    let report = ledger.verify(LEDGER, "COPY_CHECKPOINTS", true).await;
    let [Finding::CheckpointUntrusted { checkpoint_seq, .. }] = report.findings.as_slice() else {
        panic!("{:#?}", report.findings);
    };
    assert_eq!(*checkpoint_seq, 3);
    assert!(
        report
            .first_bad()
            .unwrap()
            .to_string()
            .starts_with("checkpoint seq 3:")
    );
}

#[tokio::test]
async fn a_ledger_stream_updated_to_add_max_age_is_named() {
    let ledger = ledger().await;
    let mut config = streams::ledger_config(&ContractSettings::default());
    config.max_age = std::time::Duration::from_secs(86_400);
    ledger.js.update_stream(config).await.unwrap();
    let report = ledger.verify(LEDGER, CHECKPOINTS, true).await;
    let [Finding::StreamConfig { stream, field, .. }] = report.findings.as_slice() else {
        panic!("{:#?}", report.findings);
    };
    assert_eq!((stream.as_str(), field.as_str()), (LEDGER, "max_age"));
    assert!(
        report
            .first_bad()
            .unwrap()
            .to_string()
            .starts_with("stream ATL_LEDGER (max_age)")
    );
}
