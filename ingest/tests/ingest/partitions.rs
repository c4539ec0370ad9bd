//! A partitioned ledger (DESIGN §8): every tenant's events in its own partition's stream, each
//! partition its own tree and signed checkpoints, and writers that take over each other's partitions.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use toolledger_ledger::{last_sequence, last_stored_message, read_range};
use toolledger_merkle::{Checkpoint, NoteSigner, Verifiers, leaf_hash, tree::root_of};
use toolledger_testkit::NatsFixture;
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::{
    CHECKPOINTS, ContractSettings, LEDGER, check_partition_count, ensure_contract,
};
use toolledger_wire::{LedgerEntry, Mode};

use crate::pipeline::{Running, class_of, drained, entry_ids_by_tenant, events_of, ids_by_tenant, publish};

const TENANTS: [&str; 8] = [
    "acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell",
];

async fn partitioned_contract(js: &jetstream::Context, count: u16) -> Partitions {
    let partitions = Partitions::new(count).unwrap();
    ensure_contract(
        js,
        &ContractSettings {
            partitions,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    partitions
}

/// Every entry of a partition's stream: sequence, subject and parsed entry.
async fn partition_entries(
    js: &jetstream::Context,
    partition: Partition,
) -> Vec<(String, LedgerEntry, Vec<u8>)> {
    let stream = partition.stream();
    let tail = last_sequence(js, &stream).await.unwrap();
    let mut out = Vec::new();
    for seq in 1..=tail {
        let stored = toolledger_ledger::stored_message(js, &stream, seq)
            .await
            .unwrap()
            .unwrap();
        let entry = LedgerEntry::parse(&stored.payload).unwrap();
        out.push((stored.subject, entry, stored.payload.to_vec()));
    }
    assert_eq!(read_range(js, &stream, 1, tail).await.unwrap().len() as u64, tail);
    out
}

fn tenant_of(entry: &LedgerEntry) -> String {
    entry
        .event
        .extension("tenant")
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The partition's newest signed checkpoint names its origin and commits to its whole stream.
async fn assert_signed_through_the_tail(
    js: &jetstream::Context,
    partition: Partition,
    signer: &NoteSigner,
    leaves: &[toolledger_merkle::Hash],
) {
    let Some(stored) = last_stored_message(js, CHECKPOINTS, &partition.checkpoint_subject())
        .await
        .unwrap()
    else {
        assert!(leaves.is_empty(), "{partition} signed no checkpoint");
        return;
    };
    let note = std::str::from_utf8(&stored.payload).unwrap();
    let origin = partition.origin("toolledger/ATL_LEDGER");
    let checkpoint = Checkpoint::open_for(note, &origin, &Verifiers::new([signer.verifier()]))
        .unwrap_or_else(|e| panic!("{partition}'s checkpoint does not verify for {origin}: {e}"));
    assert_eq!(checkpoint.size, leaves.len() as u64, "{partition}");
    assert_eq!(checkpoint.root, root_of(leaves), "{partition}");
}

#[tokio::test]
async fn each_tenant_lands_in_its_partition_with_a_tree_and_checkpoints_of_its_own() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let partitions = partitioned_contract(&js, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start_with(&nats, dir.path(), |settings| {
        settings.partitions = partitions;
        settings.checkpoint.interval = Duration::from_millis(100);
    });
    let events = events_of(&TENANTS, 1500, 300);
    publish(&js, &events, Mode::Binary, false).await;
    drained(&js).await;
    let components: Vec<String> = ingest.health.report().components.into_keys().collect();
    assert_eq!(components, ["directory", "ingest", "ingest-p1", "ingest-p2"]);
    let metrics = ingest.metrics.clone();
    ingest.stop().await;
    // Each writer's figures under its own partition's label.
    for partition in partitions.all() {
        let last = last_sequence(&js, &partition.stream()).await.unwrap();
        assert_eq!(metrics.last_seq(partition).get(), last as i64, "{partition}");
        assert_eq!(metrics.appended(partition).get(), last, "{partition}");
    }

    let signer = NoteSigner::load(&dir.path().join("keys/checkpoint.key")).unwrap();
    let mut landed = BTreeMap::new();
    for partition in partitions.all() {
        let entries = partition_entries(&js, partition).await;
        assert!(
            !entries.is_empty(),
            "{partition} holds no tenant: the rule spreads these eight"
        );
        for (subject, entry, _) in &entries {
            let tenant = tenant_of(entry);
            assert_eq!(partitions.of(&tenant), partition, "{tenant} in {partition}");
            assert!(
                subject.starts_with(&format!("{}.{tenant}.", partition.subject_prefix())),
                "{subject} in {partition}"
            );
        }
        let parsed: Vec<LedgerEntry> = entries.iter().map(|(_, entry, _)| entry.clone()).collect();
        landed.extend(entry_ids_by_tenant(&parsed));
        let leaves: Vec<_> = entries.iter().map(|(_, _, bytes)| leaf_hash(bytes)).collect();
        assert_signed_through_the_tail(&js, partition, &signer, &leaves).await;
        // Each partition has an identity index of its own.
        let index = match partition.index() {
            0 => dir.path().join("ingest/identities.sqlite"),
            k => dir.path().join(format!("ingest/identities-p{k}.sqlite")),
        };
        assert!(index.exists(), "{}", index.display());
    }
    // Every event exactly once, each tenant in the order it was published; and p0 holds the
    // partition rule's record, once.
    assert_eq!(the_rule(&mut landed, partitions), 1);
    assert_eq!(landed, ids_by_tenant(&events));
    assert_eq!(
        last_sequence(&js, LEDGER).await.unwrap()
            + last_sequence(&js, "ATL_LEDGER_P1").await.unwrap()
            + last_sequence(&js, "ATL_LEDGER_P2").await.unwrap(),
        events.len() as u64 + 1
    );
    assert_the_directory_names_every_partitions_last_checkpoint(&js, partitions, &signer).await;
    let (_, rule, _) = &partition_entries(&js, Partition::ZERO).await[0];
    assert_eq!(class_of(rule), "toolledger.partitions.recorded");
    let data = rule.event.data.as_ref().unwrap();
    assert_eq!(data["partitions"], 3);
    assert_eq!(data["layout"][2]["stream"], "ATL_LEDGER_P2");
}

/// Two ingest processes' data directories with the same signing key and scrubber key, as every
/// ingest of one ledger has (with another scrubber key, an event carrying a secret that one
/// process appended and the other is redelivered compares unequal: `duplicate_conflict`).
pub(crate) fn two_data_dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    crate::pipeline::signing_key(a.path());
    toolledger_ingest::scrub::ScrubKey::load_or_create(
        &a.path().join(toolledger_ingest::scrub::KEY_FILE_NAME),
    )
    .unwrap();
    std::fs::create_dir_all(b.path().join("keys")).unwrap();
    for file in ["keys/checkpoint.key", toolledger_ingest::scrub::KEY_FILE_NAME] {
        std::fs::copy(a.path().join(file), b.path().join(file)).unwrap();
    }
    (a, b)
}

#[tokio::test]
async fn a_dead_writers_partitions_are_taken_over_and_nothing_is_lost_or_repeated() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let partitions = partitioned_contract(&js, 4).await;
    let (a_dir, b_dir) = two_data_dirs();
    let adjust = |settings: &mut toolledger_ingest::session::IngestSettings| {
        settings.partitions = partitions;
        settings.checkpoint.interval = Duration::from_millis(100);
    };
    let a = Running::start_with(&nats, a_dir.path(), adjust);
    let first = events_of(&TENANTS, 600, 400);
    publish(&js, &first, Mode::Binary, false).await;
    drained(&js).await;
    let b = Running::start_with(&nats, b_dir.path(), adjust);
    // A dies without a word: its leases lapse (3 s in these tests) and B takes every partition.
    drop(a);
    let second = events_of(&TENANTS, 600, 500);
    let died = Instant::now();
    publish(&js, &second, Mode::Binary, false).await;
    drained(&js).await;
    assert!(
        died.elapsed() < Duration::from_secs(30),
        "took {:?}",
        died.elapsed()
    );
    let components: Vec<String> = b.health.report().components.into_keys().collect();
    assert_eq!(
        components,
        ["directory", "ingest", "ingest-p1", "ingest-p2", "ingest-p3"]
    );
    b.stop().await;

    let signer = NoteSigner::load(&b_dir.path().join("keys/checkpoint.key")).unwrap();
    let mut landed = BTreeMap::new();
    for partition in partitions.all() {
        let entries = partition_entries(&js, partition).await;
        let parsed: Vec<LedgerEntry> = entries.iter().map(|(_, entry, _)| entry.clone()).collect();
        landed.extend(entry_ids_by_tenant(&parsed));
        let leaves: Vec<_> = entries.iter().map(|(_, _, bytes)| leaf_hash(bytes)).collect();
        assert_signed_through_the_tail(&js, partition, &signer, &leaves).await;
    }
    // The rule recorded once, though p0 changed writers.
    assert_eq!(the_rule(&mut landed, partitions), 1);
    let all: Vec<_> = first.iter().chain(&second).cloned().collect();
    assert_eq!(landed, ids_by_tenant(&all));
}

#[tokio::test]
async fn a_writer_with_another_scrubber_key_takes_no_partition_and_says_why() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let partitions = partitioned_contract(&js, 2).await;
    let (a_dir, b_dir) = two_data_dirs();
    // B's key is its own: the ledger's writers would not agree on a secret's marker.
    std::fs::remove_file(b_dir.path().join(toolledger_ingest::scrub::KEY_FILE_NAME)).unwrap();
    let adjust = |settings: &mut toolledger_ingest::session::IngestSettings| {
        settings.partitions = partitions;
        settings.checkpoint.interval = Duration::from_millis(100);
    };
    let a = Running::start_with(&nats, a_dir.path(), adjust);
    let first = events_of(&TENANTS, 100, 400);
    publish(&js, &first, Mode::Binary, false).await;
    drained(&js).await;
    a.stop().await;
    // A is gone and every lease free, yet B writes nothing: its health names the key.
    let b = Running::start_with(&nats, b_dir.path(), adjust);
    let second = events_of(&TENANTS, 100, 500);
    publish(&js, &second, Mode::Binary, false).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let report = b.health.report();
        if let Some(component) = report
            .components
            .values()
            .find(|c| !c.ok && c.detail.contains("ingest-scrub-key"))
        {
            break component.detail.clone();
        }
        assert!(Instant::now() < deadline, "{report:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(refused.contains("copy scrub-hmac.key"), "{refused}");
    let written: u64 = {
        let mut total = 0;
        for partition in partitions.all() {
            total += partition_entries(&js, partition).await.len() as u64;
        }
        total
    };
    // The first events and the partition rule's record, nothing of the second.
    assert_eq!(written, first.len() as u64 + 1);
    // The right key copied in while B runs changes nothing: B scrubs with the key it loaded.
    let key = toolledger_ingest::scrub::KEY_FILE_NAME;
    std::fs::copy(a_dir.path().join(key), b_dir.path().join(key)).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut still = 0;
    for partition in partitions.all() {
        still += partition_entries(&js, partition).await.len() as u64;
    }
    assert_eq!(
        still, written,
        "a writer took the file's new key without restarting"
    );
    b.stop().await;
    // With the ledger's key, the second events land.
    let a = Running::start_with(&nats, a_dir.path(), adjust);
    drained(&js).await;
    a.stop().await;
    landed_once_each(&js, partitions, &[&first, &second]).await;
}

#[tokio::test]
async fn a_published_partition_rule_is_refused_and_the_writers_own_stands() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let partitions = partitioned_contract(&js, 2).await;
    let dir = tempfile::tempdir().unwrap();
    // A look-alike of the record, even as `_system` and with ingest's own source, from the inbox.
    let forged = toolledger_ingest::partition_rule::record_event(
        Partitions::new(3).unwrap(),
        "forged.example",
        chrono::Utc::now(),
    );
    crate::pipeline::publish_raw(
        &js,
        "atl.in._system.toolledger.partitions.recorded",
        &[("content-type", "application/cloudevents+json")],
        &serde_json::to_vec(&forged).unwrap(),
    )
    .await;
    let ingest = Running::start_with(&nats, dir.path(), |settings| settings.partitions = partitions);
    drained(&js).await;
    ingest.stop().await;
    let reasons: Vec<String> = crate::pipeline::quarantined(&js)
        .await
        .into_iter()
        .map(|(_, reason)| reason)
        .collect();
    assert_eq!(reasons, ["reserved_class"]);
    let entries = partition_entries(&js, Partition::ZERO).await;
    let classes: Vec<String> = entries.iter().map(|(_, entry, _)| class_of(entry)).collect();
    assert_eq!(
        classes,
        ["toolledger.partitions.recorded", "toolledger.quarantine.recorded"]
    );
    let data = entries[0].1.event.data.as_ref().unwrap();
    assert_eq!(
        data["partitions"], 2,
        "the writer's own record, not the forged one"
    );
}

/// The directory's last entry names each partition's last signed checkpoint (its writer stops after
/// the partitions' and records their tails), and the directory's own last checkpoint signs its
/// whole tree.
async fn assert_the_directory_names_every_partitions_last_checkpoint(
    js: &jetstream::Context,
    partitions: Partitions,
    signer: &NoteSigner,
) {
    use toolledger_wire::directory::{self, DirectoryEntry};
    let mut verifiers = Verifiers::default();
    verifiers.add(signer.verifier());
    let entries = read_range(
        js,
        directory::STREAM,
        1,
        last_sequence(js, directory::STREAM).await.unwrap(),
    )
    .await
    .unwrap();
    assert!(!entries.is_empty(), "the directory holds no entry");
    let (_, last) = entries.last().unwrap();
    let last = DirectoryEntry::parse(last).unwrap();
    assert_eq!(last.partitions.len(), usize::from(partitions.count()));
    for (partition, reference) in partitions.all().zip(&last.partitions) {
        let message = last_stored_message(js, CHECKPOINTS, &partition.checkpoint_subject())
            .await
            .unwrap()
            .unwrap();
        let note = String::from_utf8(message.payload.to_vec()).unwrap();
        let checkpoint = Checkpoint::open(&note, &verifiers).unwrap();
        assert_eq!(reference.checkpoint_seq, message.seq, "{partition}");
        assert_eq!(reference.size, checkpoint.size, "{partition}");
        use base64::Engine as _;
        let root = base64::engine::general_purpose::STANDARD.encode(checkpoint.root);
        assert_eq!(reference.root, root, "{partition}");
        assert_eq!(reference.partition, partition.index());
    }
    let message = last_stored_message(js, CHECKPOINTS, directory::CHECKPOINT_SUBJECT)
        .await
        .unwrap()
        .expect("the directory is signed");
    let note = String::from_utf8(message.payload.to_vec()).unwrap();
    let checkpoint = Checkpoint::open(&note, &verifiers).unwrap();
    assert_eq!(checkpoint.size, entries.len() as u64);
    assert!(checkpoint.origin.ends_with("/directory"), "{}", checkpoint.origin);
    let leaves: Vec<_> = entries.iter().map(|(_, bytes)| leaf_hash(bytes)).collect();
    assert_eq!(checkpoint.root, root_of(&leaves));
}

/// Every partition's entries are exactly the events `sent`, each once, in each tenant's order, and
/// the partition rule's record once.
async fn landed_once_each(js: &jetstream::Context, partitions: Partitions, sent: &[&[serde_json::Value]]) {
    let mut landed = BTreeMap::new();
    for partition in partitions.all() {
        let parsed: Vec<LedgerEntry> = partition_entries(js, partition)
            .await
            .into_iter()
            .map(|(_, entry, _)| entry)
            .collect();
        landed.extend(entry_ids_by_tenant(&parsed));
    }
    assert_eq!(the_rule(&mut landed, partitions), 1);
    let all: Vec<serde_json::Value> = sent.iter().flat_map(|events| events.iter().cloned()).collect();
    assert_eq!(landed, ids_by_tenant(&all));
}

/// Takes the partition rule's records (tenant `_system`) out of `landed`: how many there were, each
/// checked to be `partitions-<count>`.
fn the_rule(landed: &mut BTreeMap<String, Vec<String>>, partitions: Partitions) -> usize {
    let records = landed.remove("_system").unwrap_or_default();
    for id in &records {
        assert_eq!(*id, format!("partitions-{}", partitions.count()));
    }
    records.len()
}

#[tokio::test]
async fn a_count_other_than_the_ledgers_is_refused() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    // Not made yet: any count passes.
    check_partition_count(&js, Partitions::new(4).unwrap())
        .await
        .unwrap();
    let made = partitioned_contract(&js, 3).await;
    check_partition_count(&js, made).await.unwrap();
    let fewer = check_partition_count(&js, Partitions::new(2).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(fewer.contains("ATL_LEDGER_P2 exists"), "{fewer}");
    // A single-partition ledger with entries may not be spread over more afterwards.
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let one = partitioned_contract(&js, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start_with(&nats, dir.path(), |settings| settings.partitions = one);
    publish(&js, &events_of(&TENANTS, 20, 600), Mode::Binary, false).await;
    drained(&js).await;
    ingest.stop().await;
    let more = check_partition_count(&js, Partitions::new(2).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(more.contains("ATL_LEDGER_P1 is missing"), "{more}");
    // And ingest with the wrong count writes nothing, saying why.
    let ingest = Running::start_with(&nats, dir.path(), |settings| {
        settings.partitions = Partitions::new(2).unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = serde_json::to_string(&ingest.health.report()).unwrap();
        if report.contains("made with fewer partitions") {
            break;
        }
        assert!(Instant::now() < deadline, "{report}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(ingest);
}

#[tokio::test]
async fn receipts_land_in_their_tenants_partition_and_a_subject_without_class_in_p0() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let partitions = partitioned_contract(&js, 4).await;
    let tenant = TENANTS
        .into_iter()
        .find(|t| partitions.of(t) != Partition::ZERO)
        .unwrap();
    let home = partitions.of(tenant);
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start_with(&nats, dir.path(), |settings| settings.partitions = partitions);
    crate::pipeline::publish_raw(&js, &format!("atl.in.{tenant}.tool.declared"), &[], b"{not json").await;
    crate::pipeline::publish_raw(&js, &format!("atl.in.{tenant}"), &[], b"{}").await;
    drained(&js).await;
    ingest.stop().await;
    let receipts = |entries: Vec<(String, LedgerEntry, Vec<u8>)>| -> Vec<String> {
        entries
            .iter()
            .map(|(subject, entry, _)| format!("{subject} {}", tenant_of(entry)))
            .collect()
    };
    assert_eq!(
        receipts(partition_entries(&js, home).await),
        [format!(
            "{}.{tenant}.toolledger.quarantine.recorded {tenant}",
            home.subject_prefix()
        )]
    );
    // A subject with no class is read by p0's lane for such subjects: its receipt is
    // `_unroutable`'s, in p0, never the tenant's in p0 (after the partition rule's record).
    assert_eq!(
        receipts(partition_entries(&js, Partition::ZERO).await),
        [
            "atl.ledger._system.toolledger.partitions.recorded _system",
            "atl.ledger._unroutable.toolledger.quarantine.recorded _unroutable"
        ]
    );
}

#[tokio::test]
async fn a_larger_count_is_refused_once_any_partition_holds_entries() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let two = partitioned_contract(&js, 2).await;
    let p1_tenant = TENANTS
        .into_iter()
        .find(|t| two.of(t) == Partition::new(1))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start_with(&nats, dir.path(), |settings| settings.partitions = two);
    publish(&js, &events_of(&[p1_tenant], 10, 700), Mode::Binary, false).await;
    drained(&js).await;
    ingest.stop().await;
    assert_eq!(
        last_sequence(&js, LEDGER).await.unwrap(),
        1,
        "p0 holds the partition rule's record only"
    );
    let more = check_partition_count(&js, Partitions::new(4).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        more.contains("ATL_LEDGER_P2 is missing") && more.contains("made with fewer"),
        "{more}"
    );
}

/// Who holds each partition's lease now (`None`: nobody, or lapsed).
async fn lease_holders(js: &jetstream::Context, partitions: Partitions) -> Vec<Option<String>> {
    let store = js.get_key_value("ATL_LEASES").await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut holders = Vec::new();
    for partition in partitions.all() {
        let record = store
            .get(partition.lease_key())
            .await
            .unwrap()
            .and_then(|value| serde_json::from_slice::<toolledger_ingest::lease::LeaseRecord>(&value).ok())
            .filter(|record| record.expires_at_ms > now);
        holders.push(record.map(|record| record.holder));
    }
    holders
}

#[tokio::test]
async fn two_processes_share_the_partitions_and_the_first_hands_half_on() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let partitions = partitioned_contract(&js, 4).await;
    let (a_dir, b_dir) = two_data_dirs();
    let writer = |name: &'static str| {
        move |settings: &mut toolledger_ingest::session::IngestSettings| {
            settings.partitions = partitions;
            settings.holder = name.to_owned();
            settings.lease_ttl = Duration::from_millis(1500);
        }
    };
    let a = Running::start_with(&nats, a_dir.path(), writer("a"));
    let wait_for = |wanted: [usize; 2]| {
        let js = js.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let holders = lease_holders(&js, partitions).await;
                let count = |name: &str| holders.iter().filter(|h| h.as_deref() == Some(name)).count();
                if [count("a"), count("b")] == wanted {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "wanted {wanted:?}, holders {holders:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // Alone, the first takes every partition.
    wait_for([4, 0]).await;
    let first = events_of(&TENANTS, 300, 800);
    publish(&js, &first, Mode::Binary, false).await;
    // A second process joins: the first hands two partitions on, one at a time.
    let b = Running::start_with(&nats, b_dir.path(), writer("b"));
    wait_for([2, 2]).await;
    let second = events_of(&TENANTS, 300, 900);
    publish(&js, &second, Mode::Binary, false).await;
    drained(&js).await;
    a.stop().await;
    // The first stopped: the second takes its partitions over.
    wait_for([0, 4]).await;
    let third = events_of(&TENANTS, 300, 1000);
    publish(&js, &third, Mode::Binary, false).await;
    drained(&js).await;
    b.stop().await;

    landed_once_each(&js, partitions, &[&first, &second, &third]).await;
}

#[tokio::test]
async fn a_process_that_cannot_write_takes_no_partition_from_one_that_can() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let partitions = partitioned_contract(&js, 4).await;
    let (a_dir, b_dir) = two_data_dirs();
    let a = Running::start_with(&nats, a_dir.path(), |settings| {
        settings.partitions = partitions;
        settings.holder = "a".to_owned();
        settings.lease_ttl = Duration::from_millis(1500);
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while lease_holders(&js, partitions)
        .await
        .iter()
        .filter(|h| h.as_deref() == Some("a"))
        .count()
        < 4
    {
        assert!(Instant::now() < deadline, "a never held every partition");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // B is configured with another count: its sessions fail their check before any lease, so it
    // never counts as a member that can write.
    let b = Running::start_with(&nats, b_dir.path(), |settings| {
        settings.partitions = Partitions::new(2).unwrap();
        settings.holder = "b".to_owned();
        settings.lease_ttl = Duration::from_millis(1500);
    });
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(5) {
        let holders = lease_holders(&js, partitions).await;
        assert!(
            holders.iter().all(|h| h.as_deref() == Some("a")),
            "a handed a partition on to a process that cannot write it: {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(b);
    a.stop().await;
}
