//! `toolledger query`: a tenant's read-only SQL from the command line, refusals and limits with exit
//! code 1 and the reason.

use std::time::Duration;

use toolledger_projector::{Generations, RawEntry, Store};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::ChildProcess;

use crate::toolledger;

fn query(data: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["query"];
    all.extend_from_slice(args);
    let mut child = ChildProcess::spawn(
        toolledger(),
        all,
        &[
            ("TOOLLEDGER_DATA_DIR", data.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
        ],
    );
    let status = child
        .wait_timeout(Duration::from_secs(60))
        .expect("query finishes");
    (status.code(), child.stdout(), child.stderr())
}

#[test]
fn query_reads_the_tenants_views_and_refuses_the_rest() {
    let data = tempfile::tempdir().unwrap();
    let generated = generate(&GeneratorConfig {
        seed: 9,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        sessions: 2,
        ..GeneratorConfig::default()
    });
    let generation = Generations::new(data.path()).current_or_init().unwrap();
    let mut store = Store::open(&generation.database(), Default::default()).unwrap();
    let entries: Vec<RawEntry> = generated
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| RawEntry {
            seq: i as u64 + 1,
            bytes: toolledger_testkit::entry_bytes(e),
        })
        .collect();
    store.apply_batch(&entries).unwrap();
    let acme: i64 = store
        .connection()
        .query_row(
            "SELECT count(*) FROM invocations WHERE tenant = 'acme'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    drop(store);

    let (code, out, err) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "--json",
            "SELECT count(*) AS n FROM invocations",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["columns"], serde_json::json!(["n"]));
    assert_eq!(json["rows"][0][0].as_i64(), Some(acme));

    let (code, out, _) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "--csv",
            "SELECT DISTINCT tenant FROM invocations",
        ],
    );
    assert_eq!((code, out.as_str()), (Some(0), "tenant\nacme\n"));
    let (code, out, _) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "SELECT state, count(*) FROM invocations GROUP BY 1",
        ],
    );
    assert_eq!(code, Some(0));
    assert!(out.contains("state") && out.contains("rows"), "{out}");

    for (sql, says) in [
        ("SELECT * FROM main.invocations", "schema-qualified"),
        ("DELETE FROM invocations", "read-only"),
        ("ATTACH DATABASE 'x' AS y", "ATTACH"),
    ] {
        let (code, _, err) = query(data.path(), &["--tenant", "acme", sql]);
        assert_eq!(code, Some(1), "{sql}");
        assert!(err.contains(says), "{sql}: {err}");
    }
    let (code, _, err) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "--timeout-ms",
            "200",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("longer than 200 ms"), "{err}");
    let (code, _, _) = query(data.path(), &["SELECT 1"]);
    assert_eq!(code, Some(2), "a scope is required");
    let (code, out, _) = query(
        data.path(),
        &[
            "--admin",
            "--json",
            "SELECT count(DISTINCT tenant) FROM invocations",
        ],
    );
    assert_eq!(code, Some(0));
    assert!(out.contains("[[2]]"), "{out}");
}
