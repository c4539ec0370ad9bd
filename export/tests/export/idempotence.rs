//! Re-runs write the same objects; a crash mid-range is redone byte for byte; an object with other
//! bytes at a path the exporter owns is a conflict, never overwritten.

use toolledger_export::{Archive, Error};
use toolledger_testkit::NatsFixture;

use crate::common::{TestLedger, export, generated_events, objects, options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_ranges_give_identical_objects_and_a_conflict_is_an_error() {
    let nats = NatsFixture::start();
    let mut ledger = TestLedger::create(&nats).await;
    let events = generated_events(3, 6);
    let (early, late) = events.split_at(events.len() / 2);
    ledger.append(early, 120).await;
    let dir = tempfile::tempdir().unwrap();
    let first = Archive::open(dir.path().join("a").to_str().unwrap(), &[]).unwrap();
    let second = Archive::open(dir.path().join("b").to_str().unwrap(), &[]).unwrap();

    export(&nats, options(&first, 150)).await.unwrap();
    let a = objects(&first).await;
    assert!(a.keys().any(|k| k.starts_with("events/_manifest/")));
    assert!(a.keys().any(|k| k.starts_with("invocations/tenant=")));

    // A second archive from scratch: the same boundaries, the same bytes.
    export(&nats, options(&second, 150)).await.unwrap();
    assert_eq!(objects(&second).await, a, "a fresh export differs");

    // A re-run redoes the newest range: every put finds its equal object.
    let rerun = export(&nats, options(&first, 150)).await.unwrap();
    assert!(rerun.files > 0, "the newest range was redone: {rerun:?}");
    assert_eq!(objects(&first).await, a);

    // A crash after the manifest, before the range's files: the next run writes exactly them.
    let newest_files: Vec<String> = a
        .keys()
        .filter(|k| k.ends_with(".parquet") && !k.starts_with("checkpoints/"))
        .filter(|k| k.contains(&format!("-{:020}.parquet", ledger.entries.last().unwrap().seq)))
        .cloned()
        .collect();
    assert!(!newest_files.is_empty());
    for file in &newest_files {
        std::fs::remove_file(dir.path().join("a").join(file)).unwrap();
    }
    export(&nats, options(&first, 150)).await.unwrap();
    assert_eq!(
        objects(&first).await,
        a,
        "the crashed range was not rewritten identically"
    );

    // A kill -9 during a put leaves the local store's staging file (`<object>#<n>`, empty or
    // partial) beside the object; the next run removes it once the object is there, so Parquet
    // readers pointed at a table's folder do not trip on it. One beside no object is left alone.
    let root = dir.path().join("a");
    let staged = root.join(format!("{}#17", newest_files[0]));
    std::fs::write(&staged, b"").unwrap();
    let in_flight = root.join(format!(
        "{}#18",
        newest_files[0].replace(".parquet", "-other.parquet")
    ));
    std::fs::write(&in_flight, b"").unwrap();
    export(&nats, options(&first, 150)).await.unwrap();
    assert!(
        !staged.exists(),
        "the staging file of an interrupted put is still there"
    );
    assert!(in_flight.exists(), "a staging file beside no object was removed");
    std::fs::remove_file(&in_flight).unwrap();
    assert_eq!(objects(&first).await, a);

    // More entries: the archive grows; what was there stays byte for byte (but for the tracker
    // snapshots, a cache of which the newest two stay).
    ledger.append(late, 120).await;
    let grown = export(&nats, options(&first, 150)).await.unwrap();
    assert_eq!(grown.position, ledger.entries.last().unwrap().seq);
    let b = objects(&first).await;
    for (path, bytes) in a.iter().filter(|(path, _)| !path.starts_with("_tracker/")) {
        assert!(b.get(path) == Some(bytes), "{path} changed");
    }

    // Someone else's bytes at the newest range's path: a conflict, and the object stays theirs.
    let newest = b
        .keys()
        .rfind(|k| k.starts_with("events/tenant=") && k.ends_with(".parquet"))
        .unwrap()
        .clone();
    let foreign = bytes::Bytes::from_static(b"not the exporter's bytes");
    let path = dir.path().join("a").join(&newest);
    // The conflict must be on a range the re-run redoes: the newest one.
    let newest_range = newest.rsplit('/').next().unwrap().to_owned();
    let redo: Vec<&String> = b.keys().filter(|k| k.ends_with(&newest_range)).collect();
    assert!(redo.contains(&&newest));
    std::fs::write(&path, &foreign).unwrap();
    let error = export(&nats, options(&first, 150)).await.unwrap_err();
    assert!(matches!(error, Error::Conflict { .. }), "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), foreign.to_vec());
}
