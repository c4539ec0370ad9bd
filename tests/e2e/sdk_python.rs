//! The Python producer SDK (`sdk/python`, `toolledger_producer`) against a real nats-server and
//! ingest, driven through the scripts in `sdk/python/tests/`:
//!
//! - every event the SDK builds validates under the official Agent Tool schemas, the project's
//!   `schemas/` and `toolledger validate`; the spool's own checks (format, torn tails, permissions,
//!   lock, compaction, full policies) pass;
//! - a producer killed with SIGKILL at seeded moments while it emits, then restarted: every event whose
//!   `emit` returned before a kill is in the ledger exactly once (`TOOLLEDGER_FAULT_SEED` replays);
//! - nats-server frozen and then restarted while the producer emits: nothing lost once it is back;
//! - under `fsync="every_event"` a syscall trace shows `fdatasync` of the spool record before `emit`
//!   returns (and, as a control, not always under `interval`);
//! - the `mcp` wrapper over a real MCP client and server on stdio: each call reconstructed by
//!   `toolledger show` with its JSON-RPC id;
//! - a 2 MiB result emitted while NATS is unreachable, then sent by a restarted producer through the
//!   tenant's payload bucket: in the ledger behind a `$payload` reference whose blob holds exactly the
//!   text emitted, the upload gone from the bucket, no sidecar left in the spool.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use toolledger_testkit::{python, workspace_root};

use crate::fixture::Up;
use crate::producers::{Driver, KillCycles, OfflineUpload, fsync_check, kill_cycles, outage};
use crate::toolledger;

fn script(name: &str) -> PathBuf {
    workspace_root().join("sdk/python/tests").join(name)
}

/// The checkout's SDK first on the path, so a stale install in the venv is never what is tested.
fn sdk_env() -> [(&'static str, String); 1] {
    [(
        "PYTHONPATH",
        workspace_root().join("sdk/python/src").display().to_string(),
    )]
}

/// Runs a script to completion; returns its stdout. Panics with its output when it fails.
fn run_script(name: &str, args: &[&str]) -> String {
    let output = std::process::Command::new(python())
        .arg(script(name))
        .args(args)
        .envs(sdk_env())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{name} failed\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn sdk_python_events_validate_under_the_official_and_project_schemas() {
    let Ok(official) = std::env::var("AGENTTOOL_SCHEMAS") else {
        panic!("AGENTTOOL_SCHEMAS must point at the official Agent Tool schemas");
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.ndjson");
    let schemas = workspace_root().join("schemas");
    let report: Value = serde_json::from_str(
        run_script(
            "schemas_check.py",
            &[schemas.to_str().unwrap(), &official, out.to_str().unwrap()],
        )
        .trim(),
    )
    .unwrap();
    assert!(report["events"].as_u64().unwrap() >= 30, "{report}");
    assert_eq!(report["classes"].as_array().unwrap().len(), 22, "{report}");
    // The ledger's own validator, as ingest applies it.
    let validated = std::process::Command::new(toolledger())
        .args(["validate", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        validated.status.success(),
        "{}",
        String::from_utf8_lossy(&validated.stdout)
    );

    let checks: Value = serde_json::from_str(run_script("spool_check.py", &[]).trim()).unwrap();
    assert!(checks["checks"].as_array().unwrap().len() >= 10, "{checks}");
}

#[test]
fn sdk_python_producer_killed_at_random_moments_loses_and_duplicates_nothing() {
    let sdk = KillCycles {
        label: "sdk",
        prefix: "inv-c",
        stderr_after_kill: |_, stderr| {
            assert!(stderr.is_empty() || !stderr.contains("Traceback"), "{stderr}");
        },
        ledger_stops_growing: true,
    };
    kill_cycles(&Driver::python(), &sdk).ledger.stop();
}

#[test]
fn sdk_python_nothing_is_lost_while_nats_server_is_down() {
    outage(&Driver::python(), false);
}

#[test]
fn sdk_python_every_event_policy_fdatasyncs_before_emit_returns() {
    fsync_check(&Driver::python());
}

#[test]
fn sdk_python_mcp_wrapper_records_every_tools_call_with_its_jsonrpc_id() {
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), "", &[]);
    let spool = dir.path().join("spool");
    let stdout = run_script(
        "mcp_run.py",
        &[&up.nats_url, spool.to_str().unwrap(), "acme", "sess-mcp-e2e"],
    );
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let calls = report["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{report}");
    let mut request_ids = HashSet::new();
    for call in calls {
        let invocation = call["invocation_id"].as_str().unwrap();
        let shown = shown_when_done(&up.config, invocation);
        assert_eq!(shown["state"], call["outcome"], "{shown}");
        assert_eq!(shown["tool_id"], "mcp:notes:read_note", "{shown}");
        assert_eq!(shown["session_id"], "sess-mcp-e2e", "{shown}");
        assert_eq!(shown["inputs"]["model_input"], call["arguments"], "{shown}");
        assert_eq!(shown["anomalies"], serde_json::json!([]), "{shown}");
        let native: HashMap<String, String> = shown["native_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                let value = match &n["value"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (n["key"].as_str().unwrap().to_owned(), value)
            })
            .collect();
        // The native ids the MCP import adapter keeps (docs/import.md).
        assert_eq!(
            native.get("method").map(String::as_str),
            Some("tools/call"),
            "{shown}"
        );
        assert_eq!(
            native.get("tool_name").map(String::as_str),
            Some("read_note"),
            "{shown}"
        );
        assert_eq!(
            native.get("server_id").map(String::as_str),
            Some("notes"),
            "{shown}"
        );
        assert!(native.contains_key("mcp_protocol_version"), "{shown}");
        let request_id = native.get("jsonrpc_request_id").expect("jsonrpc_request_id");
        assert!(request_id.parse::<u64>().is_ok(), "a JSON-RPC id: {shown}");
        assert_eq!(native.get("native_call_id"), Some(request_id), "{shown}");
        request_ids.insert(request_id.clone());
        let results = shown["results"].as_array().unwrap();
        assert_eq!(results.len(), 1, "{shown}");
        assert_eq!(results[0]["status"], call["outcome"], "{shown}");
        if call["outcome"] == "failed" {
            assert_eq!(results[0]["is_error"], 1, "{shown}");
            assert_eq!(shown["error"]["code"], "mcp:isError", "{shown}");
            assert_eq!(shown["error"]["class"], "execution_failed", "{shown}");
        }
    }
    assert_eq!(request_ids.len(), 2, "each call its own JSON-RPC id");
    up.stop();
}

/// `toolledger show --json` of `invocation` once it reached a terminal state (at most 60 s).
fn shown_when_done(config: &Path, invocation: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let output = std::process::Command::new(toolledger())
            .arg("--config")
            .arg(config)
            .args(["show", "--tenant", "acme", invocation, "--json"])
            .output()
            .unwrap();
        if output.status.success() {
            let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
            if shown["state"] == "succeeded" || shown["state"] == "failed" {
                return shown;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{invocation} never reconstructed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn sdk_python_large_result_emitted_offline_travels_through_the_payload_bucket() {
    let driver = Driver::python();
    let mut upload = OfflineUpload::emit(&driver, "inv-upload-1");
    upload.drain_and_replay(&driver);
    let want = upload.want.clone();
    upload.finish(&want, "a replayed record was quarantined");
}
