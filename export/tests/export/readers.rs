//! The acceptance suite: DuckDB and pyarrow read every table straight from the export (Hive
//! partitions included), and counts plus aggregates equal the SQLite projection. Written once, run
//! on the local filesystem and on a real S3-compatible server.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use toolledger_export::{Archive, verify_archive};
use toolledger_testkit::{NatsFixture, S3Fixture, python, workspace_root};

use crate::common::{TestLedger, download, export, generated, objects, options};

fn read_with_python(archive_dir: &Path, sqlite: &Path) -> Value {
    let script = workspace_root().join("export/tests/py/read_archive.py");
    let output = Command::new(python())
        .arg(&script)
        .arg(archive_dir)
        .arg(sqlite)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "read_archive.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The behaviour, whatever the store: export, read back with DuckDB and pyarrow, compare with
/// SQLite, verify from the archive alone.
async fn suite(nats: &NatsFixture, archive: Archive, local_copy: Option<&Path>) {
    let mut ledger = TestLedger::create(nats).await;
    let generated = generated(7, 12);
    ledger.append(&generated.events, 97).await;
    let data = tempfile::tempdir().unwrap();
    let sqlite = data.path().join("projection.sqlite");
    ledger.project(&sqlite);

    let summary = export(nats, options(&archive, 400)).await.unwrap();
    let last = ledger.entries.last().unwrap().seq;
    assert_eq!(summary.position, last);
    assert!(summary.ranges >= 3, "several ranges: {summary:?}");
    // Only the newest two tracker snapshots are kept.
    let trackers = archive.list("_tracker").await.unwrap();
    assert_eq!(trackers.len(), 2, "{trackers:?}");
    println!("exported {summary:?}");

    let report = verify_archive(&archive, &ledger.verifiers(), Some(crate::common::ORIGIN), None)
        .await
        .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(report.entries, last);
    assert_eq!(report.checkpoints, ledger.checkpoints);
    assert_eq!(report.signed_size, last);

    // A re-run on this store: the newest range is redone and every put finds its equal object.
    let before = objects(&archive).await;
    let rerun = export(nats, options(&archive, 400)).await.unwrap();
    assert!(rerun.files > 0, "{rerun:?}");
    assert_eq!(objects(&archive).await, before);

    let dir = match local_copy {
        Some(dir) => {
            download(&archive, dir).await;
            dir.to_path_buf()
        }
        None => archive
            .url()
            .strip_prefix("file://")
            .map(std::path::PathBuf::from)
            .unwrap(),
    };
    let read = read_with_python(&dir, &sqlite);
    println!("{}", serde_json::to_string_pretty(&read).unwrap());
    let sqlite_truth = &read["sqlite"];
    for reader in ["duckdb", "pyarrow"] {
        for key in [
            "events",
            "events_per_tenant",
            "events_per_date",
            "invocations",
            "permission_decisions",
            "results",
            "calls_per_tool",
            "denial_rate",
            "denial_rate_per_tool",
            "p95_latency_ms_per_tool",
            "permission_behaviors",
            // Every invocation's latest version: its state, events, decisions and result.
            "latest",
        ] {
            assert_eq!(read[reader][key], sqlite_truth[key], "{reader}: {key}");
        }
        assert_eq!(
            read[reader]["checkpoints"],
            Value::from(ledger.checkpoints),
            "{reader}"
        );
    }
    assert!(
        read["pyarrow"]["changed_after_terminal"].as_u64().unwrap() > 0,
        "events after a terminal state reached the invocations' latest versions"
    );
    // Against the generator's own script: every invocation it ended, with its final state and tool.
    let mut expected: Vec<Value> = generated
        .truth
        .invocations
        .iter()
        .filter(|i| i.terminal)
        .map(|i| serde_json::json!([i.tenant, i.invocation_id, i.final_state, i.tool_id]))
        .collect();
    expected.sort_by_key(Value::to_string);
    let mut exported: Vec<Value> = read["pyarrow"]["invocation_states"].as_array().unwrap().clone();
    exported.sort_by_key(Value::to_string);
    assert_eq!(
        exported, expected,
        "terminal invocations against the generator's truth"
    );
    assert_eq!(sqlite_truth["events"], Value::from(last));
    assert!(sqlite_truth["invocations"].as_u64().unwrap() > 50);
    assert!(sqlite_truth["permission_decisions"].as_u64().unwrap() > 0);
    assert!(sqlite_truth["denial_rate"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duckdb_and_pyarrow_read_a_local_archive_like_sqlite() {
    let nats = NatsFixture::start();
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::open(dir.path().join("parquet").to_str().unwrap(), &[]).unwrap();
    suite(&nats, archive, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duckdb_and_pyarrow_read_an_s3_archive_like_sqlite() {
    let nats = NatsFixture::start();
    let s3 = S3Fixture::start();
    let archive = Archive::open(&s3.url("archive"), &s3.options()).unwrap();
    let copy = tempfile::tempdir().unwrap();
    suite(&nats, archive, Some(copy.path())).await;
}
