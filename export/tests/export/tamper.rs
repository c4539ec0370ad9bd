//! `verify_archive` passes on a good archive and names the position of an altered, duplicated or
//! missing entry.

use std::sync::Arc;

use arrow_array::{Array, BinaryArray, RecordBatch, UInt64Array};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use toolledger_export::tables::{self, Table};
use toolledger_export::{Archive, Finding, verify_archive};
use toolledger_testkit::NatsFixture;

use crate::common::{ORIGIN, TestLedger, export, generated_events, objects, options};

/// The file's batch with the entry of its `row`-th row changed by one byte; returns its seq.
fn alter_entry(bytes: Vec<u8>, row: usize) -> (Vec<u8>, u64) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    let batch = arrow_select_concat(&batches);
    let seq = batch
        .column_by_name("seq")
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap()
        .value(row);
    let entries = batch
        .column_by_name("entry")
        .unwrap()
        .as_any()
        .downcast_ref::<BinaryArray>()
        .unwrap();
    let altered: BinaryArray = (0..entries.len())
        .map(|i| {
            let mut entry = entries.value(i).to_vec();
            if i == row {
                // `"specversion":"1.0"` → `"specversion":"1.1"`: still JSON, another leaf.
                let at = entry.windows(5).position(|w| w == b"\"1.0\"").unwrap();
                entry[at + 3] = b'1';
            }
            Some(entry)
        })
        .collect();
    let index = batch.schema().index_of("entry").unwrap();
    let mut columns = batch.columns().to_vec();
    columns[index] = Arc::new(altered);
    let batch = RecordBatch::try_new(batch.schema(), columns).unwrap();
    (
        tables::encode(Table::Events, &batch, tables::writer_properties(100)).unwrap(),
        seq,
    )
}

fn arrow_select_concat(batches: &[RecordBatch]) -> RecordBatch {
    assert_eq!(batches.len(), 1, "test files hold one row group");
    batches[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_a_good_archive_and_names_the_bad_position() {
    let nats = NatsFixture::start();
    let mut ledger = TestLedger::create(&nats).await;
    ledger.append(&generated_events(11, 3), 50).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("parquet");
    let archive = Archive::open(root.to_str().unwrap(), &[]).unwrap();
    export(&nats, options(&archive, 90)).await.unwrap();
    let verifiers = ledger.verifiers();
    let good = verify_archive(&archive, &verifiers, Some(ORIGIN), None)
        .await
        .unwrap();
    assert!(good.findings.is_empty(), "{:?}", good.findings);
    let last = ledger.entries.last().unwrap().seq;
    assert_eq!(good.signed_size, last);

    // An altered entry: named exactly by its stored leaf hash, and the checkpoint after it fails.
    let all = objects(&archive).await;
    let (path, bytes) = all
        .iter()
        .filter(|(k, _)| k.starts_with("events/tenant=") && k.ends_with(".parquet"))
        .nth(2)
        .unwrap();
    let (altered, seq) = alter_entry(bytes.clone(), 1);
    archive.overwrite_for_tests(path, altered.into()).await.unwrap();
    let bad = verify_archive(&archive, &verifiers, Some(ORIGIN), None)
        .await
        .unwrap();
    let first = bad.first_bad().unwrap();
    assert!(
        matches!(first, Finding::EntryAltered { seq: s, .. } if *s == seq),
        "{first}"
    );
    assert!(
        first.to_string().starts_with(&format!("ledger seq {seq}:")),
        "{first}"
    );
    assert!(
        bad.findings
            .iter()
            .any(|f| matches!(f, Finding::RootMismatch { .. }))
    );
    archive
        .overwrite_for_tests(path, bytes.clone().into())
        .await
        .unwrap();

    // A missing file: a gap at its first sequence.
    let gone = all
        .keys()
        .filter(|k| k.starts_with("events/tenant=") && k.ends_with(".parquet"))
        .nth(3)
        .unwrap();
    let missing_first = {
        let batch = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(all[gone].clone()))
            .unwrap()
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        batch
            .column_by_name("seq")
            .unwrap()
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .value(0)
    };
    std::fs::rename(root.join(gone), dir.path().join("aside.parquet")).unwrap();
    let bad = verify_archive(&archive, &verifiers, Some(ORIGIN), None)
        .await
        .unwrap();
    let first = bad.first_bad().unwrap();
    assert!(
        matches!(first, Finding::SequenceGap { expected_seq, .. } if *expected_seq == missing_first),
        "{first}"
    );
    std::fs::rename(dir.path().join("aside.parquet"), root.join(gone)).unwrap();

    // A file copied into a second range: every sequence in it is a duplicate.
    let copy_target =
        root.join(gone)
            .with_file_name(format!("part-{:020}-{:020}.parquet", last + 1, last + 1));
    std::fs::copy(root.join(gone), &copy_target).unwrap();
    let bad = verify_archive(&archive, &verifiers, Some(ORIGIN), None)
        .await
        .unwrap();
    assert!(
        matches!(bad.first_bad().unwrap(), Finding::Duplicate { seq, .. } if *seq == missing_first),
        "{:?}",
        bad.findings
    );
    std::fs::remove_file(copy_target).unwrap();
    let good = verify_archive(&archive, &verifiers, Some(ORIGIN), None)
        .await
        .unwrap();
    assert!(good.findings.is_empty(), "{:?}", good.findings);
}
