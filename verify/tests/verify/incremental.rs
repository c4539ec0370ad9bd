//! Verification that continues from a trusted checkpoint instead of seq 1, and the monitor that
//! follows newly signed checkpoints: both name an entry altered after the trusted tree, and the
//! monitor stops at a forked checkpoint (the same size, another root, validly signed).

use bytes::Bytes;
use toolledger_ingest::append::Appender;
use toolledger_merkle::{Checkpoint, Note};
use toolledger_verify::{Finding, MonitorEvent, Report, VerifyOptions, monitor, verify_ledger};
use toolledger_wire::streams::{CHECKPOINTS, CHECKPOINTS_SUBJECT, LEDGER};

use crate::common::{TestLedger, generated_entries, signer, verifiers};

const COPY: &str = "COPY_LEDGER";

/// The signed note of size `size` in the checkpoint stream.
async fn note_of_size(ledger: &TestLedger, size: u64) -> String {
    toolledger_ledger::read_all(&ledger.js, CHECKPOINTS)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, note)| String::from_utf8(note.to_vec()).unwrap())
        .find(|note| {
            let body = Note::parse(note).unwrap().text;
            Checkpoint::parse_body(&body).unwrap().size == size
        })
        .unwrap()
}

async fn verify_from(ledger: &TestLedger, stream: &str, note: &str, with_tiles: bool) -> Report {
    let options = VerifyOptions {
        tiles: with_tiles.then(|| ledger.tiles()),
        from_checkpoint: Some(note.to_owned()),
        ..VerifyOptions::default()
    };
    verify_ledger(
        &ledger.js,
        stream,
        CHECKPOINTS,
        &verifiers(),
        &options,
        &mut |_| {},
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_pass_from_a_trusted_checkpoint_reads_only_what_came_after_and_names_an_altered_entry() {
    let ledger = TestLedger::build(generated_entries(700)).await;
    let n = ledger.entries.len() as u64;
    let note = note_of_size(&ledger, 300).await;
    for with_tiles in [true, false] {
        let report = verify_from(&ledger, LEDGER, &note, with_tiles).await;
        assert!(report.is_ok(), "{:#?}", report.findings);
        assert_eq!((report.from_size, report.entries), (300, n));
        assert_eq!(report.signed_size, n);
        // The newest trusted note is what the next run continues from.
        let newest = report.newest_checkpoint.unwrap();
        let again = verify_from(&ledger, LEDGER, &newest, with_tiles).await;
        assert!(again.is_ok() && again.from_size == n, "{:#?}", again.findings);
    }

    // An entry after the trusted tree altered: named exactly with tiles, by range without.
    let mut entries = ledger.entry_bytes();
    let mut bytes = entries[449].to_vec();
    let at = bytes.windows(9).position(|w| w == b"generator").unwrap();
    bytes[at] = b'h';
    entries[449] = Bytes::from(bytes);
    ledger.copy_stream(COPY, "copy.ledger", &entries).await;
    let exact = verify_from(&ledger, COPY, &note, true).await;
    assert_eq!(exact.first_bad_seq(), Some(450), "{:#?}", exact.findings);
    assert!(matches!(
        exact.first_bad(),
        Some(Finding::EntryAltered { seq: 450, .. })
    ));
    let ranged = verify_from(&ledger, COPY, &note, false).await;
    let Some(Finding::RootMismatch {
        good_through, size, ..
    }) = ranged.first_bad()
    else {
        panic!("{:#?}", ranged.findings);
    };
    assert!(*good_through < 450 && 450 <= *size, "{good_through}..={size}");

    // Altered before it: without tiles the ledger's first 300 entries are re-hashed and do not make
    // the trusted root.
    let mut entries = ledger.entry_bytes();
    entries.swap(10, 11);
    ledger.copy_stream("COPY_EARLY", "copy.early", &entries).await;
    let early = verify_from(&ledger, "COPY_EARLY", &note, false).await;
    assert!(
        matches!(early.first_bad(), Some(Finding::StartMismatch { size: 300, .. })),
        "{:#?}",
        early.findings
    );

    // A note no verifier signed is refused, not taken on the operator's word.
    let body = Note::parse(&note).unwrap().text;
    let impostor = toolledger_merkle::NoteSigner::generate(crate::common::ORIGIN).unwrap();
    let forged = Checkpoint::parse_body(&body).unwrap().sign(&[&impostor]).unwrap();
    let options = VerifyOptions {
        from_checkpoint: Some(forged),
        ..VerifyOptions::default()
    };
    let refused = verify_ledger(
        &ledger.js,
        LEDGER,
        CHECKPOINTS,
        &verifiers(),
        &options,
        &mut |_| {},
    )
    .await;
    assert!(
        matches!(refused, Err(toolledger_verify::Error::UntrustedStart { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_monitor_follows_new_checkpoints_and_stops_at_a_fork() {
    let entries = generated_entries(500);
    let (first, later) = entries.split_at(300);
    let ledger = TestLedger::build(first.to_vec()).await;
    let note = note_of_size(&ledger, 300).await;
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let watching = {
        let js = ledger.js.clone();
        let options = VerifyOptions {
            tiles: Some(ledger.tiles()),
            from_checkpoint: Some(note),
            ..VerifyOptions::default()
        };
        tokio::spawn(async move {
            monitor(
                &js,
                LEDGER,
                CHECKPOINTS,
                &verifiers(),
                &options,
                &mut |event| {
                    let _ = events_tx.send(event);
                },
                std::future::pending(),
            )
            .await
        })
    };
    let next = async |events: &mut tokio::sync::mpsc::UnboundedReceiver<MonitorEvent>| {
        tokio::time::timeout(std::time::Duration::from_secs(20), events.recv())
            .await
            .expect("a monitor event")
            .unwrap()
    };
    assert_eq!(
        next(&mut events).await,
        MonitorEvent::CaughtUp {
            entries: 300,
            size: 300
        }
    );

    // The ledger grows: every checkpoint signed meanwhile is followed.
    let mut appender = Appender::open(ledger.js.clone(), LEDGER).await.unwrap();
    let mut checkpointer = ledger.checkpointer(appender.last_seq()).await;
    for batch in later.chunks(50) {
        let seqs = appender.append(batch).await.unwrap();
        checkpointer.appended(&seqs, batch).await.unwrap();
    }
    checkpointer.checkpoint().await.unwrap();
    let mut sizes = Vec::new();
    while sizes.last() != Some(&500) {
        let MonitorEvent::Checkpoint { size, .. } = next(&mut events).await else {
            panic!("expected a checkpoint");
        };
        sizes.push(size);
    }
    assert_eq!(sizes, [400, 500]);

    // A validly signed checkpoint of size 400 with another root: two trees were signed.
    let body = Note::parse(&note_of_size(&ledger, 400).await).unwrap().text;
    let mut fork = Checkpoint::parse_body(&body).unwrap();
    fork.root[0] ^= 1;
    let forked = fork.sign(&[&signer()]).unwrap();
    ledger
        .js
        .publish(CHECKPOINTS_SUBJECT, forked.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let report = tokio::time::timeout(std::time::Duration::from_secs(20), watching)
        .await
        .expect("the monitor stops")
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            report.first_bad(),
            Some(Finding::CheckpointOrder { size: 400, .. })
        ),
        "{:#?}",
        report.findings
    );
}
