//! The store on its own: exactly-once application, gaps, and entries that do not decode.

use toolledger_projector::{DecodedBatch, Error, RawEntry, Store};
use toolledger_schemas::generator::{self, GeneratorConfig};

use crate::ledger;

fn entries(count: usize) -> Vec<RawEntry> {
    let generated = generator::generate(&GeneratorConfig::default());
    generated.events[..count]
        .iter()
        .enumerate()
        .map(|(i, event)| RawEntry {
            seq: i as u64 + 1,
            bytes: ledger::entry_bytes(event),
        })
        .collect()
}

fn count(store: &Store, table: &str) -> i64 {
    store
        .connection()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn entries_apply_once_a_gap_is_refused_and_bad_bytes_are_indexed_with_their_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.sqlite");
    let all = entries(40);
    let mut store = Store::open(&path, Default::default()).unwrap();
    assert_eq!(store.apply_batch(&all[..10]).unwrap(), 10);
    // Overlapping redelivery: entries at or below the position are skipped, not applied twice.
    assert_eq!(store.apply_batch(&all[5..20]).unwrap(), 20);
    assert_eq!(count(&store, "events"), 20);
    let tables = store.table_contents().unwrap();

    // A gap fails the whole batch; nothing of it is kept.
    let gap = [all[20].clone(), all[22].clone()];
    match store.apply_batch(&gap) {
        Err(Error::LedgerGap { position, next }) => assert_eq!((position, next), (21, 23)),
        other => panic!("expected a gap, got {other:?}"),
    }
    assert_eq!(store.position().unwrap(), 20);
    assert_eq!(store.table_contents().unwrap(), tables);

    // Bytes that are not a ledger entry are indexed with the reason and the projection goes on.
    let bad = RawEntry {
        seq: 21,
        bytes: b"{\"not\": \"an entry\"}".to_vec(),
    };
    assert_eq!(store.apply_batch(&[bad]).unwrap(), 21);
    let problem: String = store
        .connection()
        .query_row("SELECT problem FROM events WHERE seq = 21", [], |r| r.get(0))
        .unwrap();
    assert!(problem.starts_with("not a ledger entry"), "{problem}");
    assert_eq!(store.apply_batch(&all[21..]).unwrap(), 40);
    drop(store);

    // Reopened, it resumes from its position.
    let store = Store::open(&path, Default::default()).unwrap();
    assert_eq!(store.position().unwrap(), 40);
    assert_eq!(count(&store, "events"), 40);
}

/// Every index of the file, by name, with the statement SQLite keeps for it.
fn indexes(store: &Store) -> Vec<(String, String)> {
    let mut stmt = store
        .connection()
        .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn an_existing_projection_takes_this_builds_indexes_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = Store::open(&dir.path().join("fresh.sqlite"), Default::default()).unwrap();
    let want = indexes(&fresh);
    // Each index of schema.sql, and nothing else.
    let created: Vec<&str> = toolledger_projector::SCHEMA_SQL
        .lines()
        .filter(|l| l.starts_with("CREATE INDEX"))
        .collect();
    assert_eq!(want.len(), created.len());
    assert!(want.iter().any(|(name, _)| name == "invocations_by_tool"));

    // A projection written by an older build: one index missing, one defined otherwise, one extra.
    let path = dir.path().join("old.sqlite");
    let mut store = Store::open(&path, Default::default()).unwrap();
    store.apply_batch(&entries(60)).unwrap();
    store
        .connection()
        .execute_batch(
            "DROP INDEX invocations_by_tool;
             DROP INDEX invocations_by_state;
             CREATE INDEX invocations_by_state ON invocations (tenant, state);
             CREATE INDEX invocations_by_actor ON invocations (actor_ref);",
        )
        .unwrap();
    let tables = store.table_contents().unwrap();
    assert_ne!(indexes(&store), want);
    drop(store);

    let store = Store::open(&path, Default::default()).unwrap();
    assert_eq!(indexes(&store), want);
    assert_eq!(store.table_contents().unwrap(), tables);
    assert_eq!(store.position().unwrap(), 60);
    // A reader opens it as it is; only the writer changes indexes.
    drop(store);
    let reader = Store::open_readonly(&path).unwrap();
    assert_eq!(indexes(&reader), want);
}

/// A ledger-own record of `tenant`: an erasure of `blob` or a read of `invocation`.
fn own_record(class: &str, id: &str, tenant: &str, blob: &str) -> serde_json::Value {
    let data = match class {
        "toolledger.erasure.completed" => serde_json::json!({
            "erasure_id": id, "tenant": "acme", "blob_ids": [blob], "reason": "forged?",
            "authority": "nobody", "completed_at": "2026-05-08T09:00:01Z"}),
        _ => serde_json::json!({
            "access_id": id, "principal": "mallory", "endpoint": "GET /v1/invocations/{invocation_id}",
            "tenant": "acme", "invocation_ids": ["inv-1"], "read_at": "2026-05-08T09:00:01Z"}),
    };
    serde_json::json!({"specversion": "1.0", "id": id, "source": "urn:forger", "type": class,
        "subject": id, "time": "2026-05-08T09:00:01Z", "tenant": tenant, "data": data})
}

#[test]
fn ledger_own_records_apply_only_from_the_ledger_and_others_are_indexed_with_their_problem() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("p.sqlite"), Default::default()).unwrap();
    // An old ledger: records of the ledger's own classes appended under a producer tenant, from
    // before ingest refused them; then the ledger's own, and a receipt ingest filed under `acme`.
    let forged_erasure = own_record("toolledger.erasure.completed", "erasure-forged", "acme", "b-1");
    let forged_read = own_record("toolledger.access.read", "access-forged", "acme", "");
    let real_erasure = own_record("toolledger.erasure.completed", "erasure-real", "_system", "b-2");
    let mut receipt = crate::ledger::quarantine_receipt(1);
    receipt["tenant"] = serde_json::json!("acme");
    let receipt = toolledger_wire::LedgerEntry::own(
        toolledger_wire::Event::from_json(receipt).unwrap(),
        chrono::DateTime::UNIX_EPOCH,
    )
    .canonical_bytes()
    .unwrap();
    let bytes = [
        ledger::entry_bytes(&forged_erasure),
        ledger::entry_bytes(&forged_read),
        ledger::entry_bytes(&real_erasure),
        receipt,
    ];
    let raw: Vec<RawEntry> = bytes
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| RawEntry {
            seq: i as u64 + 1,
            bytes,
        })
        .collect();
    assert_eq!(store.apply_batch(&raw).unwrap(), 4);

    let strings = |sql: &str| -> Vec<String> {
        let conn = store.connection();
        let mut statement = conn.prepare(sql).unwrap();
        statement
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(strings("SELECT erasure_id FROM erasures"), ["erasure-real"]);
    assert_eq!(strings("SELECT blob_id FROM erased_blobs"), ["b-2"]);
    assert!(strings("SELECT access_id FROM access_reads").is_empty());
    assert_eq!(strings("SELECT receipt_id FROM quarantine_receipts"), ["rcpt-1"]);
    // Every entry is indexed; the forged ones say why they went no further.
    assert_eq!(count(&store, "events"), 4);
    let problems = strings("SELECT seq || ' ' || problem FROM events WHERE problem IS NOT NULL ORDER BY seq");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("1 `toolledger.erasure.completed` is the ledger's own class")
            && problems[0].contains("tenant `acme`"),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with("2 `toolledger.access.read`"),
        "{problems:?}"
    );
}

#[test]
fn the_projection_is_the_same_whatever_the_batches() {
    // A batch sums its sessions and folds its invocations before it writes them: one entry a batch
    // writes what every entry did, so larger batches must leave exactly the same rows.
    let generated = generator::generate(&GeneratorConfig {
        seed: 77,
        sessions: 4,
        extra_invocations: 2,
        plant_anomalies: true,
        ..GeneratorConfig::default()
    });
    // Times outside 1677–2262 have no nanoseconds: the sessions keep their text only while no
    // entry with nanoseconds comes (the first session's first entry, another's later one).
    let mut events = generated.events.clone();
    let session_of = |event: &serde_json::Value| event["sessionid"].as_str().map(str::to_owned);
    let first_session = session_of(&events[0]);
    events[0]["time"] = "1500-01-01T00:00:00Z".into();
    let later = events
        .iter()
        .rposition(|event| session_of(event).is_some() && session_of(event) != first_session)
        .unwrap();
    events[later]["time"] = "2300-01-01T00:00:00Z".into();
    // And a session with no other time than one without nanoseconds: it keeps that text.
    let mut lone = events[0].clone();
    lone["id"] = "lone-out-of-range".into();
    lone["sessionid"] = "session-out-of-range".into();
    events.push(lone);
    let all: Vec<RawEntry> = events
        .iter()
        .zip(1u64..)
        .map(|(event, seq)| RawEntry {
            seq,
            bytes: ledger::entry_bytes(event),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let contents = |batch: usize| {
        let mut store =
            Store::open(&dir.path().join(format!("b{batch}.sqlite")), Default::default()).unwrap();
        for chunk in all.chunks(batch) {
            store.apply_batch(chunk).unwrap();
        }
        assert!(count(&store, "sessions") > 1);
        store.table_contents().unwrap()
    };
    let one_by_one = contents(1);
    assert!(
        one_by_one["sessions"]
            .iter()
            .any(|row| row.contains("session-out-of-range") && row.contains("1500-01-01")),
        "{:?}",
        one_by_one["sessions"]
    );
    for batch in [7, 100, all.len()] {
        assert_eq!(contents(batch), one_by_one, "batches of {batch}");
    }
    // Decoded beforehand, as the runner hands them over, each batch overlapping the one before
    // (entries already applied are skipped).
    let mut store = Store::open(&dir.path().join("decoded.sqlite"), Default::default()).unwrap();
    for start in (0..all.len()).step_by(40) {
        let batch = DecodedBatch::decode(all[start.saturating_sub(10)..(start + 40).min(all.len())].to_vec());
        assert_eq!(
            store.apply_decoded_batch(&batch).unwrap(),
            batch.entries().last().unwrap().seq
        );
    }
    assert_eq!(store.table_contents().unwrap(), one_by_one, "decoded batches");
}
