//! The checkpointer across restarts: dropped between an append and its checkpoint, reopened over the
//! same ledger, with its tiles lost, and over an altered ledger.

use toolledger_ingest::Error;
use toolledger_ingest::append::Appender;
use toolledger_ingest::checkpoint::Checkpointer;
use toolledger_merkle::TileStore;
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};

use crate::common::{EVERY, TestLedger, generated_entries, settings, signer};

#[tokio::test]
async fn a_checkpointer_dropped_before_its_checkpoint_restores_and_continues() {
    let all = generated_entries(600);
    let (first, rest) = all.split_at(250);
    let ledger = TestLedger::build(first.to_vec()).await;
    let mut appender = Appender::open(ledger.js.clone(), LEDGER).await.unwrap();
    {
        let mut checkpointer = ledger.checkpointer(appender.last_seq()).await;
        assert_eq!(checkpointer.last_checkpoint().size, 250);
        // Appended, then the process dies before the checkpointer hears of it.
        appender.append(&rest[..70]).await.unwrap();
        let seqs = appender.append(&rest[70..100]).await.unwrap();
        checkpointer.appended(&seqs[..0], &rest[70..70]).await.unwrap();
    }
    // The first entry bundle (seqs 1..=256) filled in the dead process and was never written.
    assert!(ledger.tiles().read_bundle(0).await.unwrap().is_none());
    let mut checkpointer = ledger.checkpointer(appender.last_seq()).await;
    // The tail the dead process appended is signed as soon as the checkpointer is back.
    assert_eq!(checkpointer.size(), 350);
    assert_eq!(checkpointer.last_checkpoint().size, 350);
    for batch in rest[100..].chunks(40) {
        let seqs = appender.append(batch).await.unwrap();
        checkpointer.appended(&seqs, batch).await.unwrap();
    }
    checkpointer.checkpoint().await.unwrap();
    assert_eq!(checkpointer.last_checkpoint().size, all.len() as u64);
    let report = ledger.verify(LEDGER, CHECKPOINTS, true).await;
    assert!(report.is_ok(), "{:#?}", report.findings);
    assert_eq!(report.entries, all.len() as u64);
    // Every full entry bundle holds the ledger's entries across the restart (bundle 0 filled in the
    // dead process and is written on reopening, bundle 1 began there); the open one is not written.
    let tiles = ledger.tiles();
    for index in 0..2u64 {
        let bundle = tiles.read_bundle(index).await.unwrap().expect("a full bundle");
        let expected: Vec<_> = all[index as usize * 256..][..256]
            .iter()
            .map(|e| e.bytes.clone())
            .collect();
        assert!(bundle == expected, "bundle {index} differs from the ledger");
    }
    assert!(tiles.read_bundle(2).await.unwrap().is_none());
}

#[tokio::test]
async fn lost_tiles_are_rebuilt_from_the_ledger() {
    let ledger = TestLedger::build(generated_entries(450)).await;
    let n = ledger.entries.len() as u64;
    for entry in std::fs::read_dir(ledger.tiles_dir.path()).unwrap() {
        std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
    }
    let checkpointer = ledger.checkpointer(n).await;
    assert_eq!(checkpointer.size(), n);
    let report = ledger.verify(LEDGER, CHECKPOINTS, true).await;
    assert!(report.is_ok(), "{:#?}", report.findings);
}

#[tokio::test]
async fn an_altered_ledger_stops_the_checkpointer_naming_size_and_roots() {
    let ledger = TestLedger::build(generated_entries(450)).await;
    let mut entries = ledger.entry_bytes();
    entries.swap(10, 11);
    ledger.copy_stream("COPY_LEDGER", "copy.ledger", &entries).await;
    let mut settings = settings();
    settings.ledger_stream = "COPY_LEDGER".to_owned();
    let n = entries.len() as u64;
    // Fresh tiles force the tree to be recomputed from the (altered) ledger.
    let error = Checkpointer::open(ledger.js.clone(), settings, signer(), TileStore::in_memory(), n)
        .await
        .unwrap_err();
    let Error::CheckpointRootMismatch {
        size,
        signed,
        computed,
    } = &error
    else {
        panic!("{error}");
    };
    assert_eq!(*size, n);
    assert_ne!(signed, computed);
    let text = error.to_string();
    assert!(
        text.contains(signed.as_str()) && text.contains(computed.as_str()),
        "{text}"
    );
    assert!(EVERY < n);
}

#[tokio::test]
async fn a_second_checkpointer_cannot_publish_over_the_first() {
    let ledger = TestLedger::build(generated_entries(460)).await;
    // Two writers restored from the same checkpoint (a lost lease the first has not noticed yet).
    let mut first = ledger.checkpointer(460).await;
    let mut second = ledger.checkpointer(460).await;
    assert_eq!(first.last_checkpoint().size, 460);
    let mut appender = Appender::open(ledger.js.clone(), LEDGER).await.unwrap();
    let more = generated_entries(470)[460..].to_vec();
    let seqs = appender.append(&more).await.unwrap();
    second.appended(&seqs, &more).await.unwrap();
    assert_eq!(second.checkpoint().await.unwrap().unwrap().size, 470);
    // The first signs another tree (465 entries) after the same checkpoint: refused.
    first.appended(&seqs[..5], &more[..5]).await.unwrap();
    let error = first.checkpoint().await.unwrap_err();
    assert!(
        matches!(error, Error::CheckpointPublish { size: 465, .. }),
        "{error}"
    );
    let report = ledger.verify(LEDGER, CHECKPOINTS, true).await;
    assert!(report.is_ok(), "{:#?}", report.findings);
}
