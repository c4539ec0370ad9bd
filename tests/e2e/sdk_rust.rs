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

use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::Value;

use crate::producers::{
    Driver, KillCycles, LARGE_RESULT, OfflineUpload, UNREACHABLE, emitted, everything_conforms, fsync_check,
    kill_cycles, outage, pending_uploads, sidecars, upload_names,
};

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

#[test]
fn sdk_rust_events_validate_and_the_python_sdk_reads_its_spool() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let events = everything_conforms(&driver(), &spool);
    let traced = events
        .iter()
        .find(|e| e["data"]["invocation_id"] == "inv-schemas-1" && e["type"] == "tool.invocation.planned")
        .unwrap();
    assert_eq!(
        traced["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
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
