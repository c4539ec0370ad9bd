//! Entries the tree and the signed checkpoints are consistent over, but that are not what the
//! ledger promises: not in canonical form, or not entries at all. Each is a finding naming its seq.
//! The ledgers here are built with the planted bytes appended and signed as they are, so nothing but
//! the entries themselves is wrong.

use bytes::Bytes;
use toolledger_ingest::append::PendingEntry;
use toolledger_verify::{Finding, Report};
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};

use crate::common::{TestLedger, generated_entries};

/// Replaces entry `seq` (1-based) with `bytes`, keeping its subject.
fn plant(entries: &mut [PendingEntry], seq: u64, bytes: Vec<u8>) {
    let at = usize::try_from(seq - 1).unwrap();
    entries[at] = PendingEntry::new(entries[at].subject.clone(), Bytes::from(bytes));
}

/// The same JSON, pretty-printed.
fn pretty_printed(canonical: &[u8]) -> Vec<u8> {
    let value: serde_json::Value = serde_json::from_slice(canonical).unwrap();
    serde_json::to_vec_pretty(&value).unwrap()
}

/// The same JSON with a space after `{` and after the first `:`.
fn re_spaced(canonical: &[u8]) -> Vec<u8> {
    assert!(canonical.starts_with(b"{\"event\":"));
    let mut bytes = b"{ \"event\": ".to_vec();
    bytes.extend_from_slice(&canonical[b"{\"event\":".len()..]);
    bytes
}

async fn verify_both_ways(ledger: &TestLedger) -> [Report; 2] {
    [
        ledger.verify(LEDGER, CHECKPOINTS, true).await,
        ledger.verify(LEDGER, CHECKPOINTS, false).await,
    ]
}

#[tokio::test]
async fn a_pretty_printed_and_a_re_spaced_entry_are_named_not_canonical() {
    let mut entries = generated_entries(300);
    let (pretty, spaced) = (120, 257);
    let original_pretty = entries[119].bytes.clone();
    plant(&mut entries, pretty, pretty_printed(&original_pretty));
    let respaced = re_spaced(&entries[256].bytes);
    plant(&mut entries, spaced, respaced);
    // Same JSON, other bytes: what a non-canonical writer would have signed.
    assert_ne!(entries[119].bytes, original_pretty);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&entries[119].bytes).unwrap(),
        serde_json::from_slice::<serde_json::Value>(&original_pretty).unwrap()
    );
    let ledger = TestLedger::build(entries).await;

    for report in verify_both_ways(&ledger).await {
        assert_eq!(
            report.findings.as_slice(),
            [
                Finding::EntryNotCanonical { seq: pretty },
                Finding::EntryNotCanonical { seq: spaced },
            ],
            "the tree and the checkpoints are consistent; only the entries' form is wrong"
        );
        assert_eq!(report.first_bad_seq(), Some(pretty));
        let first = report.first_bad().unwrap().to_string();
        assert!(first.starts_with("ledger seq 120: not canonical"), "{first}");
    }
}

#[tokio::test]
async fn an_entry_that_does_not_parse_is_named_unreadable() {
    let mut entries = generated_entries(150);
    let truncated = entries[76].bytes[..entries[76].bytes.len() / 2].to_vec();
    plant(&mut entries, 77, truncated);
    // Canonical JSON, but not the entry's shape.
    plant(
        &mut entries,
        101,
        br#"{"event":{},"note":"no ledger member"}"#.to_vec(),
    );
    let ledger = TestLedger::build(entries).await;

    for report in verify_both_ways(&ledger).await {
        let [
            Finding::EntryUnreadable { seq: first, .. },
            Finding::EntryUnreadable { seq: second, reason },
        ] = report.findings.as_slice()
        else {
            panic!("{:#?}", report.findings);
        };
        assert_eq!((*first, *second), (77, 101));
        assert!(reason.contains("ledger"), "{reason}");
        assert_eq!(report.first_bad_seq(), Some(77));
        let shown = report.first_bad().unwrap().to_string();
        assert!(shown.starts_with("ledger seq 77: not a ledger entry"), "{shown}");
    }
}

/// p0 of a ledger of two partitions (`docs/scaling.md`): `acme` lives in p1, `globex` in p0.
async fn verify_as_p0_of_two(entries: Vec<PendingEntry>) -> Vec<Finding> {
    let ledger = TestLedger::build(entries).await;
    let options = toolledger_verify::VerifyOptions {
        placement: Some(toolledger_verify::Placement {
            partitions: Partitions::new(2).unwrap(),
            partition: Partition::ZERO,
            origin: "ledger.example".to_owned(),
        }),
        ..toolledger_verify::VerifyOptions::default()
    };
    let report = toolledger_verify::verify_ledger(
        &ledger.js,
        LEDGER,
        CHECKPOINTS,
        &crate::common::verifiers(),
        &options,
        &mut |_| {},
    )
    .await
    .unwrap();
    report.findings
}

#[tokio::test]
async fn p0_of_a_partitioned_ledger_holds_the_rule_once_and_only_its_own_tenants() {
    let two = Partitions::new(2).unwrap();
    assert_eq!(two.of("globex"), Partition::ZERO);
    assert_eq!(two.of("acme"), Partition::new(1));
    let at = chrono::Utc::now();
    let event = toolledger_ingest::partition_rule::record_event(two, "ledger.example", at);
    let (bytes, _) = toolledger_ingest::pipeline::ledger_own_entry_bytes(event, at).unwrap();
    let record = PendingEntry::new(
        "atl.ledger._system.toolledger.partitions.recorded".to_owned(),
        Bytes::from(bytes),
    );
    let of = |tenant: &str| -> Vec<PendingEntry> {
        let prefix = format!("atl.ledger.{tenant}.");
        generated_entries(60)
            .into_iter()
            .filter(|e| e.subject.starts_with(&prefix))
            .collect()
    };
    let globex = of("globex");
    assert!(!globex.is_empty());

    // p0's own tenants and the record first: nothing to find.
    let clean: Vec<_> = std::iter::once(record.clone()).chain(globex.clone()).collect();
    assert_eq!(verify_as_p0_of_two(clean).await, []);

    // Entries but no record.
    let findings = verify_as_p0_of_two(globex.clone()).await;
    assert!(
        matches!(findings.as_slice(), [Finding::PartitionRule { seq: None, .. }]),
        "{findings:?}"
    );

    // An entry of a tenant of p1, and a second record.
    let mut planted: Vec<_> = std::iter::once(record.clone()).chain(globex.clone()).collect();
    planted.push(of("acme").remove(0));
    planted.push(record);
    let misplaced = planted.len() as u64 - 1;
    let findings = verify_as_p0_of_two(planted).await;
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert!(
        matches!(&findings[0], Finding::EntryMisplaced { seq, tenant, .. } if *seq == misplaced && tenant == "acme"),
        "{findings:?}"
    );
    assert!(
        matches!(&findings[1], Finding::PartitionRule { seq: Some(seq), .. } if *seq == misplaced + 1),
        "{findings:?}"
    );
}
