//! The appender and the lease against a real nats-server.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use bytes::Bytes;
use toolledger_ingest::append::{AppendMode, Appender, MAX_ATOMIC_BATCH, PendingEntry};
use toolledger_ingest::lease::{LEASE_BUCKET, Lease};
use toolledger_ingest::{Error, Result};
use toolledger_ledger::read_range;
use toolledger_testkit::NatsFixture;

const LEDGER: &str = "TEST_LEDGER";

/// A ledger-like stream, taking atomic batches or not; every appender test runs on both.
async fn ledger_stream(js: &jetstream::Context, mode: AppendMode) {
    js.create_stream(stream::Config {
        name: LEDGER.to_owned(),
        subjects: vec!["test.ledger.>".to_owned()],
        storage: stream::StorageType::File,
        deny_delete: true,
        deny_purge: true,
        allow_atomic_publish: mode == AppendMode::Atomic,
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn open(js: &jetstream::Context, mode: AppendMode) -> Appender {
    let appender = Appender::open(js.clone(), LEDGER).await.unwrap();
    assert_eq!(
        appender.mode(),
        mode,
        "the appender follows the stream's allow_atomic"
    );
    appender
}

fn entries(tag: &str, n: usize) -> Vec<PendingEntry> {
    (0..n)
        .map(|i| {
            PendingEntry::new(
                format!("test.ledger.t.{tag}"),
                Bytes::from(format!("{{\"{tag}\":{i}}}")),
            )
        })
        .collect()
}

async fn stored(js: &jetstream::Context) -> Vec<Bytes> {
    let tail = toolledger_ledger::last_sequence(js, LEDGER).await.unwrap();
    read_range(js, LEDGER, 1, tail)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, b)| b)
        .collect()
}

#[tokio::test]
async fn a_batch_lands_in_order_with_consecutive_sequences() {
    for mode in [AppendMode::Atomic, AppendMode::Chained] {
        let nats = NatsFixture::start();
        let js = jetstream::new(nats.client().await);
        ledger_stream(&js, mode).await;
        let mut appender = open(&js, mode).await;
        // More than one atomic batch holds, a single entry, and a few.
        let batch = entries("a", MAX_ATOMIC_BATCH + 200);
        assert_eq!(
            appender.append(&batch).await.unwrap(),
            (1..=batch.len() as u64).collect::<Vec<u64>>()
        );
        let one = entries("b", 1);
        let n = batch.len() as u64;
        assert_eq!(appender.append(&one).await.unwrap(), vec![n + 1]);
        let more = entries("c", 3);
        assert_eq!(appender.append(&more).await.unwrap(), vec![n + 2, n + 3, n + 4]);
        let all: Vec<Bytes> = batch
            .iter()
            .chain(&one)
            .chain(&more)
            .map(|e| e.bytes.clone())
            .collect();
        assert_eq!(stored(&js).await, all, "{mode:?}");
    }
}

#[tokio::test]
async fn a_second_writer_is_detected_not_interleaved() {
    for mode in [AppendMode::Atomic, AppendMode::Chained] {
        let nats = NatsFixture::start();
        let js = jetstream::new(nats.client().await);
        ledger_stream(&js, mode).await;
        let mut first = open(&js, mode).await;
        first.append(&entries("first", 5)).await.unwrap();
        let mut second = open(&js, mode).await;
        second.append(&entries("second", 2)).await.unwrap();
        let err = first.append(&entries("late", 3)).await.unwrap_err();
        assert!(matches!(err, Error::ForeignAppend { seq: 6 }), "{mode:?}: {err}");
        // Nothing of the refused batch reached the ledger.
        assert_eq!(stored(&js).await.len(), 7, "{mode:?}");
    }
}

#[tokio::test]
async fn a_ledger_that_stops_taking_atomic_batches_gets_chained_publishes() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    ledger_stream(&js, AppendMode::Atomic).await;
    let mut appender = open(&js, AppendMode::Atomic).await;
    appender.append(&entries("a", 10)).await.unwrap();
    let mut config = js.get_stream(LEDGER).await.unwrap().cached_info().config.clone();
    config.allow_atomic_publish = false;
    js.update_stream(config).await.unwrap();
    // A batch of one: opened and committed by the same message, refused the same way.
    assert_eq!(appender.append(&entries("b", 1)).await.unwrap(), vec![11]);
    assert_eq!(appender.mode(), AppendMode::Chained);
    assert_eq!(
        appender.append(&entries("c", 9)).await.unwrap(),
        (12..=20).collect::<Vec<u64>>()
    );
    let all: Vec<Bytes> = entries("a", 10)
        .iter()
        .chain(&entries("b", 1))
        .chain(&entries("c", 9))
        .map(|e| e.bytes.clone())
        .collect();
    assert_eq!(stored(&js).await, all);
}

#[tokio::test]
async fn a_server_crash_mid_batch_loses_and_duplicates_nothing() {
    for mode in [AppendMode::Atomic, AppendMode::Chained] {
        let mut nats = NatsFixture::start();
        let client = nats.reconnecting_client().await;
        let js = jetstream::new(client);
        ledger_stream(&js, mode).await;
        const TOTAL: u64 = 20_000;
        let batch = entries("crash", TOTAL as usize);
        let task = {
            let js = js.clone();
            let batch = batch.clone();
            tokio::spawn(async move {
                let mut appender = Appender::open(js, LEDGER).await?;
                let mut seqs = Vec::new();
                for chunk in batch.chunks(256) {
                    seqs.extend(appender.append(chunk).await?);
                }
                Result::<Vec<u64>>::Ok(seqs)
            })
        };
        // Kill the server once appends are well under way, so the crash lands mid-stream.
        let at_kill = loop {
            let tail = toolledger_ledger::last_sequence(&js, LEDGER).await.unwrap();
            if tail >= 1000 {
                break tail;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        assert!(at_kill < TOTAL, "{mode:?}: the appends finished before the crash");
        let nats = tokio::task::spawn_blocking(move || {
            nats.kill_and_restart();
            nats
        })
        .await
        .unwrap();
        let seqs = tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("append finished")
            .unwrap();
        assert_eq!(seqs.unwrap(), (1..=TOTAL).collect::<Vec<u64>>(), "{mode:?}");
        let all: Vec<Bytes> = batch.iter().map(|e| e.bytes.clone()).collect();
        assert_eq!(stored(&js).await, all, "{mode:?}");
        drop(nats);
    }
}

async fn lease_bucket(js: &jetstream::Context) -> kv::Store {
    js.create_key_value(kv::Config {
        bucket: LEASE_BUCKET.to_owned(),
        history: 1,
        ..Default::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn one_lease_holder_at_a_time() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let store = lease_bucket(&js).await;
    let ttl = Duration::from_secs(30);
    let mut a = Lease::try_acquire(&store, "ledger", "a", ttl)
        .await
        .unwrap()
        .expect("a takes the free lease");
    assert!(
        Lease::try_acquire(&store, "ledger", "b", ttl)
            .await
            .unwrap()
            .is_none(),
        "b must wait"
    );
    a.renew().await.unwrap();
    a.release().await.unwrap();
    let b = Lease::try_acquire(&store, "ledger", "b", ttl).await.unwrap();
    assert!(b.is_some(), "a released lease is free");
}

#[tokio::test]
async fn an_expired_lease_is_taken_and_the_old_holder_learns_it() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let store = lease_bucket(&js).await;
    let mut a = Lease::try_acquire(&store, "ledger", "a", Duration::from_millis(200))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = Lease::try_acquire(&store, "ledger", "b", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(b.is_some(), "an expired lease is takeable");
    assert!(matches!(a.renew().await, Err(Error::LeaseLost { .. })));
}
