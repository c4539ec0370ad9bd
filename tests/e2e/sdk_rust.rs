//! The Rust producer SDK (`sdk/rust`, crate `toolledger-producer`) against a real nats-server and
//! ingest, driven through its example binary `producer_run` (built by `cargo build --workspace
//! --all-targets` or `cargo test --workspace`):
//!
//! - every event the SDK builds validates under the official Agent Tool schemas and `toolledger
//!   validate`; the Python SDK's spool code reads the Rust spool back to the same events (the spool
//!   format is shared), and the Rust SDK drains a spool the Python SDK wrote;
//! - a producer killed with SIGKILL at seeded moments while it emits, then restarted: every event whose
//!   `emit` returned before a kill is in the ledger exactly once (`TOOLLEDGER_FAULT_SEED` replays);
//! - nats-server frozen and then restarted while the producer emits: nothing lost once it is back;
//! - a 2 MiB result emitted while NATS is unreachable, then sent by a restarted producer through the
//!   tenant's payload bucket: in the ledger behind a `$payload` reference whose blob holds exactly the
//!   text emitted, the upload gone from the bucket, no sidecar left in the spool, a lost ack position
//!   replaying nothing twice; and spools with uploads cross between the SDKs (Python writes, Rust
//!   drains; Rust writes, Python drains).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use toolledger_testkit::{python, workspace_root};

use crate::producers::{
    Driver, KillCycles, LARGE_RESULT, OfflineUpload, UNREACHABLE, emitted, fsync_check, kill_cycles,
    official_for, outage, pending_uploads, sidecars, upload_names,
};
use crate::toolledger;

/// The `producer_run` example of the SDK crate, beside this test binary in the target directory
/// (`<target>/<profile>/deps/e2e-…` → `<target>/<profile>/examples/producer_run[-hash]`): the newest
/// build of it, uplifted or not.
fn producer_run() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .ancestors()
        .find(|d| d.join("examples").is_dir() && d.join("deps").is_dir())
        .expect("the target directory of this test binary");
    let examples = profile_dir.join("examples");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&examples)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name == "producer_run" || name.starts_with("producer_run-")) && !name.contains('.')
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort();
    found.pop().map(|(_, path)| path).unwrap_or_else(|| {
        panic!(
            "{}/producer_run is missing: run `cargo build -p toolledger-producer --examples` \
             (CI's `cargo test --workspace` builds it)",
            examples.display()
        )
    })
}

/// `producer_run` as a [`Driver`].
fn driver() -> Driver {
    Driver::new("producer_run", producer_run(), Vec::new(), Vec::new())
}

const PYTHON_READER: &str = r#"
import json, sys, urllib.parse
from toolledger_producer.spool import Spool
spool = Spool(sys.argv[1])
assert not spool.corrupt_segments, spool.corrupt_segments
for m in spool.head(100000):
    event = {n[3:].lower(): urllib.parse.unquote(v, errors="strict")
             for n, v in m.headers.items() if n.lower().startswith("ce-")}
    event["data"] = json.loads(m.body)
    print(json.dumps({"subject": m.subject, "msg_id": m.headers["Nats-Msg-Id"], "event": event}))
spool.close()
"#;

#[test]
fn sdk_rust_events_validate_and_the_python_sdk_reads_its_spool() {
    let Ok(official) = std::env::var("AGENTTOOL_SCHEMAS") else {
        panic!("AGENTTOOL_SCHEMAS must point at the official Agent Tool schemas");
    };
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let events: Vec<Value> = driver()
        .run(&["everything", spool.to_str().unwrap()])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(events.len() >= 35, "{} events", events.len());

    // Official schemas: each class's data against the object it carries.
    let mut validators = HashMap::new();
    let mut failures = Vec::new();
    let mut classes = BTreeSet::new();
    for event in &events {
        let class = event["type"].as_str().unwrap();
        classes.insert(class.to_owned());
        let Some(name) = official_for(class) else {
            continue;
        };
        let validator = validators.entry(name).or_insert_with(|| {
            let path = Path::new(&official).join(format!("{name}.schema.json"));
            let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            jsonschema::validator_for(&schema).unwrap()
        });
        for error in validator.iter_errors(&event["data"]) {
            failures.push(format!(
                "{class} {}: {name}: {error} at {}",
                event["id"],
                error.instance_path()
            ));
        }
        for (attribute, field) in [("invocationid", "invocation_id"), ("toolid", "tool_id")] {
            if let (Some(a), Some(f)) = (event.get(attribute), event["data"].get(field)) {
                assert_eq!(a, f, "{event}");
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(classes.len(), 22, "every class a producer sends: {classes:?}");
    let ids: HashSet<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), events.len(), "two events share an id");
    let traced = events
        .iter()
        .find(|e| e["data"]["invocation_id"] == "inv-schemas-1" && e["type"] == "tool.invocation.planned")
        .unwrap();
    assert_eq!(
        traced["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );

    // The ledger's own validator (project schemas), as ingest applies it.
    let ndjson = dir.path().join("events.ndjson");
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(&ndjson, text).unwrap();
    let validated = std::process::Command::new(toolledger())
        .arg("validate")
        .arg(&ndjson)
        .output()
        .unwrap();
    assert!(
        validated.status.success(),
        "{}",
        String::from_utf8_lossy(&validated.stdout)
    );

    // The Python SDK reads the Rust spool back to the very same events, subjects and message ids.
    let output = std::process::Command::new(python())
        .arg("-c")
        .arg(PYTHON_READER)
        .arg(&spool)
        .env("PYTHONPATH", workspace_root().join("sdk/python/src"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(read.len(), events.len(), "records the Python SDK could not read");
    for (record, event) in read.iter().zip(&events) {
        assert_eq!(&record["event"], event);
        assert_eq!(
            record["subject"],
            format!("atl.in.acme.{}", event["type"].as_str().unwrap())
        );
        assert_eq!(record["msg_id"].as_str().unwrap().len(), 64);
    }
}

#[test]
fn sdk_rust_producer_killed_at_random_moments_loses_and_duplicates_nothing() {
    let sdk = KillCycles {
        label: "sdk rust",
        prefix: "inv-rc",
        stderr_after_kill: |seed, stderr| {
            assert!(!stderr.contains("panicked"), "seed {seed}: {stderr}");
        },
        ledger_stops_growing: false,
    };
    let driver = driver();
    kill_cycles(&driver, &sdk).drain_a_python_spool(&driver);
}

#[test]
fn sdk_rust_nothing_is_lost_while_nats_server_is_down() {
    outage(&driver(), true);
}

#[test]
fn sdk_rust_every_event_policy_fdatasyncs_before_emit_returns() {
    fsync_check(&driver());
}

#[test]
fn sdk_rust_large_result_emitted_offline_travels_through_the_payload_bucket() {
    let driver = driver();
    let python = Driver::python();
    let mut upload = OfflineUpload::emit(&driver, "inv-upload-1");
    upload.drain_and_replay(&driver);
    let url = upload.url.clone();
    let size = LARGE_RESULT.to_string();
    let want = upload.want.clone();

    // The shared format, both ways: a spool with uploads the Python SDK wrote offline is drained by
    // the Rust SDK, and one the Rust SDK wrote is drained by the Python SDK.
    let py_spool = upload.dir.path().join("python-spool");
    let output = python.output(&[
        "upload",
        UNREACHABLE,
        py_spool.to_str().unwrap(),
        "acme",
        "inv-upload-py",
        "--size",
        &size,
    ]);
    let py_stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{py_stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let py_want: HashSet<String> = emitted(&py_stdout).into_iter().collect();
    let py_pending = pending_uploads(&py_stdout);
    assert!(!py_pending.is_empty(), "{py_stdout}");
    let stdout = driver.run(&[
        "drain",
        &url,
        py_spool.to_str().unwrap(),
        "acme",
        "--timeout",
        "30",
    ]);
    assert!(
        stdout.contains(&format!("\"uploaded\":{}", py_pending.len())),
        "{stdout}"
    );
    upload.ledger.assert_uploaded(
        &upload.runtime,
        &py_want,
        LARGE_RESULT,
        &upload_names(&py_pending),
    );
    assert_eq!(sidecars(&py_spool), Vec::<String>::new());

    let rs_spool = upload.dir.path().join("rust-spool");
    let stdout = driver.run(&[
        "upload",
        UNREACHABLE,
        rs_spool.to_str().unwrap(),
        "acme",
        "inv-upload-rs",
        "--size",
        &size,
    ]);
    let rs_want: HashSet<String> = emitted(&stdout).into_iter().collect();
    let rs_pending = pending_uploads(&stdout);
    assert!(!rs_pending.is_empty(), "{stdout}");
    let output = python.output(&[
        "drain",
        &url,
        rs_spool.to_str().unwrap(),
        "acme",
        "--timeout",
        "30",
    ]);
    let py_drain = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{py_drain}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metrics: Value = serde_json::from_str(py_drain.trim().strip_prefix("DRAINED ").unwrap()).unwrap();
    assert_eq!(
        metrics["uploaded"].as_u64(),
        Some(rs_pending.len() as u64),
        "{metrics}"
    );
    upload.ledger.assert_uploaded(
        &upload.runtime,
        &rs_want,
        LARGE_RESULT,
        &upload_names(&rs_pending),
    );
    assert_eq!(sidecars(&rs_spool), Vec::<String>::new());

    // Every event of the four runs is in the ledger once; nothing was quarantined.
    // Every event of the four runs is in the ledger once; nothing was quarantined.
    let all: HashSet<String> = want.iter().chain(&py_want).chain(&rs_want).cloned().collect();
    upload.finish(&all, "a record was quarantined");
}
