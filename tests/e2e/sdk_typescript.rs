//! The TypeScript producer SDK (`sdk/typescript`, npm package `toolledger-producer`) against a real
//! nats-server and ingest, driven through its e2e script `e2e/producer_run.ts` (compiled by `tsc`
//! into `dist/`; `scripts/setup` installs the node packages, and this module recompiles once per run
//! so what is tested is the source in the checkout):
//!
//! - the SDK's own suite under node's test runner (builders, ids equal to the Python SDK's, the checks
//!   at emit, trace context, the invocation helper, the spool's format, torn tails, permissions, lock,
//!   compaction and full policies);
//! - every event the SDK builds validates under the official Agent Tool schemas and `toolledger
//!   validate`; the Python SDK's spool code reads the TypeScript spool back to the same events (the
//!   spool format is shared), and the TypeScript SDK drains a spool the Python SDK wrote;
//! - a producer killed with SIGKILL at seeded moments while it emits, then restarted: every event whose
//!   `emit` resolved before a kill is in the ledger exactly once (`TOOLLEDGER_FAULT_SEED` replays);
//! - nats-server frozen and then restarted while the producer emits: nothing lost once it is back;
//! - a 2 MiB result emitted while NATS is unreachable, then sent by a restarted producer through the
//!   tenant's payload bucket: in the ledger behind a `$payload` reference whose blob holds exactly the
//!   text emitted, the upload gone from the bucket, no sidecar left, a lost ack position replaying
//!   nothing twice; the uploads and body bytes are those the Python SDK makes of the same event, and a
//!   spool with uploads written by either SDK is drained by the other.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use toolledger_testkit::{python, workspace_root};

use crate::producers::{
    Driver, KillCycles, LARGE_RESULT, OfflineUpload, UNREACHABLE, emitted, everything_conforms, fsync_check,
    kill_cycles, outage, pending_uploads, sidecars, upload_names,
};

fn sdk_dir() -> PathBuf {
    workspace_root().join("sdk/typescript")
}

/// `node`, from PATH.
fn node() -> &'static Path {
    Path::new("node")
}

/// Compiles the SDK, its tests and its e2e script with the pinned `tsc`, once per test binary.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = sdk_dir();
        let tsc = dir.join("node_modules/typescript/bin/tsc");
        assert!(tsc.exists(), "{} is missing: run scripts/setup", tsc.display());
        let output = std::process::Command::new(node())
            .arg(&tsc)
            .args(["-p", "tsconfig.json"])
            .current_dir(&dir)
            .output()
            .expect("node is on PATH");
        assert!(
            output.status.success(),
            "tsc failed\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        dir.join("dist")
    })
}

fn script() -> PathBuf {
    built().join("e2e/producer_run.js")
}

/// `producer_run.js` under node as a [`Driver`]; compiles the SDK first, so a test that makes one
/// before its ledger starts does not count the compile against the ledger's timeouts.
fn driver() -> Driver {
    let script = script();
    assert!(script.exists());
    Driver::new(
        "producer_run.js",
        node().to_path_buf(),
        vec![script.display().to_string()],
        Vec::new(),
    )
}

/// The ids the Python SDK's builders give the invocation-helper events of the TypeScript `everything`
/// run (same source, objects, classes and sequences): the SDKs must name an event alike.
const PYTHON_IDS: &str = r#"
import json, sys
from toolledger_producer.events import EventBuilder, Tool
b = EventBuilder("acme", "urn:toolledger-producer:schemas-check-ts", "sess-schemas")
out = {
  "declared": b.tool_declared(Tool(tool_id="vault.read", name="read", namespace="vault",
      description="reads a secret", version="1", sensitive_fields=["api_key", "/headers/authorization"],
      input_schema={"type": "object", "properties": {"path": {"type": "string"}}}))["id"],
  "planned": b.invocation("tool.invocation.planned", {"invocation_id": "inv-schemas-1", "tool_id": "vault.read"})["id"],
  "progress2": b.progress({"invocation_id": "inv-schemas-1", "sequence": 2, "status": "running"})["id"],
  "decided": b.permission_decided({"invocation_id": "inv-schemas-1", "decision_id": sys.argv[1], "behavior": "allow"})["id"],
  "hook": b.hook("post", "completed", {"invocation_id": "inv-schemas-1", "hook_id": "hook-2", "hook_event": "post_tool_use"})["id"],
  "result": b.result({"invocation_id": "inv-schemas-1", "status": "succeeded"})["id"],
}
print(json.dumps(out))
"#;

#[test]
fn sdk_typescript_node_test_runner_suite_passes() {
    let dist = built();
    let tests: Vec<PathBuf> = std::fs::read_dir(dist.join("test"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".test.js"))
        .collect();
    assert!(tests.len() >= 2, "{tests:?}");
    let output = std::process::Command::new(node())
        .arg("--test")
        .args(&tests)
        .current_dir(sdk_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node --test failed\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let passed: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.trim().parse().ok())
        .expect("a TAP summary");
    assert!(passed >= 15, "{stdout}");
    assert!(stdout.contains("# fail 0"), "{stdout}");
}

#[test]
fn sdk_typescript_events_validate_and_the_python_sdk_reads_its_spool() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let events = everything_conforms(&driver(), &spool);
    let find = |class: &str, f: &dyn Fn(&Value) -> bool| -> &Value {
        events
            .iter()
            .find(|e| e["type"] == class && e["data"]["invocation_id"] == "inv-schemas-1" && f(e))
            .unwrap_or_else(|| panic!("no {class} of inv-schemas-1"))
    };
    let planned = find("tool.invocation.planned", &|_| true);
    assert_eq!(
        planned["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "the active OpenTelemetry span"
    );
    // Error classes from what the wrapped function threw.
    let ends: HashMap<&str, &str> = events
        .iter()
        .filter(|e| e["data"]["error"]["error_class"].is_string())
        .filter(|e| e["type"].as_str().unwrap().starts_with("tool.invocation."))
        .map(|e| {
            (
                e["data"]["invocation_id"].as_str().unwrap(),
                e["type"].as_str().unwrap(),
            )
        })
        .collect();
    for (invocation, class) in [
        ("inv-schemas-2", "tool.invocation.failed"),
        ("inv-schemas-3", "tool.invocation.timed_out"),
        ("inv-schemas-4", "tool.invocation.canceled"),
        ("inv-schemas-5", "tool.invocation.failed"),
    ] {
        assert_eq!(ends.get(invocation), Some(&class), "{ends:?}");
    }

    // Stable ids: the Python SDK names the same events alike.
    let decided = find("tool.permission.decided", &|_| true);
    let output = std::process::Command::new(python())
        .arg("-c")
        .arg(PYTHON_IDS)
        .arg(decided["data"]["decision_id"].as_str().unwrap())
        .env("PYTHONPATH", workspace_root().join("sdk/python/src"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let python_ids: Value = serde_json::from_slice(&output.stdout).unwrap();
    let declared = events
        .iter()
        .find(|e| e["type"] == "tool.declared" && e["subject"] == "vault.read")
        .unwrap();
    assert_eq!(declared["id"], python_ids["declared"]);
    assert_eq!(planned["id"], python_ids["planned"]);
    assert_eq!(decided["id"], python_ids["decided"]);
    assert_eq!(
        find("tool.invocation.progress", &|e| e["data"]["sequence"] == 2)["id"],
        python_ids["progress2"]
    );
    assert_eq!(
        find("tool.hook.post.completed", &|_| true)["id"],
        python_ids["hook"]
    );
    assert_eq!(find("tool.result.created", &|_| true)["id"], python_ids["result"]);
}

#[test]
fn sdk_typescript_producer_killed_at_random_moments_loses_and_duplicates_nothing() {
    let sdk = KillCycles {
        label: "sdk typescript",
        prefix: "inv-tc",
        stderr_after_kill: |seed, stderr| {
            assert!(!stderr.contains("Error"), "seed {seed}: {stderr}");
        },
        ledger_stops_growing: false,
    };
    let driver = driver(); // compiled before the ledger starts
    kill_cycles(&driver, &sdk).drain_a_python_spool(&driver);
}

#[test]
fn sdk_typescript_nothing_is_lost_while_nats_server_is_down() {
    outage(&driver(), true);
}

#[test]
fn sdk_typescript_every_event_policy_fdatasyncs_before_emit_returns() {
    fsync_check(&driver());
}

/// Runs a Python snippet with the checkout's SDK on the path; returns its stdout.
fn run_python(code: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(python())
        .arg("-c")
        .arg(code)
        .args(args)
        .env("PYTHONPATH", workspace_root().join("sdk/python/src"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or("").as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// For each record with uploads of the spool `argv[1]` whose upload is the text `large_text(argv[2])`
/// at /data/content/0/text: the Python SDK's `uploads.extract` of the original data must give the very
/// uploads and body bytes the record holds. Prints one `OK <name>` per record.
const PYTHON_SAME_UPLOADS: &str = r#"
import json, sys, urllib.parse
from toolledger_producer import uploads, wire
from toolledger_producer.producer import DEFAULT_MAX_EVENT_BYTES
from toolledger_producer.spool import Spool
size = int(sys.argv[2])
text = "".join(f"row {i:08d}\n" for i in range(size // 13 + 1))[:size]
spool = Spool(sys.argv[1])
for m in spool.head(100000):
    if not m.uploads:
        continue
    data = json.loads(m.body)
    data["content"][0]["text"] = text
    event_id = urllib.parse.unquote(m.headers["ce-id"])
    header_bytes = sum(len(k) + len(v) + 4 for k, v in m.headers.items())
    out, moved = uploads.extract(data, event_id=event_id, bucket=uploads.bucket_of("acme"),
                                 threshold=uploads.DEFAULT_UPLOAD_THRESHOLD,
                                 budget=DEFAULT_MAX_EVENT_BYTES - header_bytes)
    assert wire.dumps(out) == m.body, (wire.dumps(out)[:500], m.body[:500])
    mine = [(u.bucket, u.name, u.sha256, u.size, u.content_type) for u, _ in moved]
    theirs = [(u.bucket, u.name, u.sha256, u.size, u.content_type) for u in m.uploads]
    assert mine == theirs, (mine, theirs)
    for u in m.uploads:
        print("OK", u.name)
spool.close()
"#;

#[test]
fn sdk_typescript_large_result_emitted_offline_travels_through_the_payload_bucket() {
    let driver = driver(); // compiled before the ledger starts
    let python = Driver::python();
    let mut upload = OfflineUpload::emit(&driver, "inv-upload-ts-1");
    let url = upload.url.clone();
    let spool_arg = upload.spool.to_str().unwrap().to_owned();
    let size = LARGE_RESULT.to_string();

    // The Python SDK reads the record's uploads and, from the same event, moves the same value under
    // the same name to the same body bytes.
    let same = run_python(PYTHON_SAME_UPLOADS, &[&spool_arg, &size], None);
    let names = upload_names(&upload.pending);
    let checked: Vec<String> = same
        .lines()
        .filter_map(|l| l.strip_prefix("OK "))
        .map(str::to_owned)
        .collect();
    assert_eq!(checked, names, "{same}");

    upload.drain_and_replay(&driver);

    // The spool format is shared: a spool with uploads the Python SDK wrote is drained by the
    // TypeScript SDK, and one the TypeScript SDK wrote by the Python SDK.
    let mut all_want = upload.want.clone();
    for (writer, drainer, invocation) in [("py", "ts", "inv-upload-py-2"), ("ts", "py", "inv-upload-ts-3")] {
        let spool = upload.dir.path().join(format!("spool-{writer}"));
        let spool_arg = spool.to_str().unwrap();
        let args = [
            "upload",
            UNREACHABLE,
            spool_arg,
            "acme",
            invocation,
            "--size",
            &size,
        ];
        let mut child = if writer == "py" {
            python.spawn(&args)
        } else {
            driver.spawn(&args)
        };
        let status = child
            .wait_timeout(Duration::from_secs(30))
            .expect("producer exits");
        let stdout = child.stdout();
        assert!(status.success(), "{writer}: {stdout}\n{}", child.stderr());
        let want: HashSet<String> = emitted(&stdout).into_iter().collect();
        let names = upload_names(&pending_uploads(&stdout));
        assert_eq!(names.len(), 1, "{writer}: {stdout}");
        let args = ["drain", url.as_str(), spool_arg, "acme", "--timeout", "30"];
        let mut drain = if drainer == "py" {
            python.spawn(&args)
        } else {
            driver.spawn(&args)
        };
        let status = drain.wait_timeout(Duration::from_secs(40)).expect("drain exits");
        let out = drain.stdout();
        assert!(status.success(), "{drainer}: {out}\n{}", drain.stderr());
        let metrics: Value = serde_json::from_str(out.trim().strip_prefix("DRAINED ").unwrap()).unwrap();
        assert_eq!(metrics["uploaded"].as_u64(), Some(1), "{drainer}: {metrics}");
        upload
            .ledger
            .assert_uploaded(&upload.runtime, &want, LARGE_RESULT, &names);
        assert_eq!(
            sidecars(&spool),
            Vec::<String>::new(),
            "{drainer}: acked sidecars are deleted"
        );
        all_want.extend(want);
    }

    upload.finish(&all_want, "a record was quarantined");
}

/// The Python SDK's `uploads.extract` of each case, as `producer_run.ts extract` prints it.
const PYTHON_EXTRACT: &str = r#"
import json, sys
from toolledger_producer import uploads
for c in json.load(sys.stdin):
    data, moved = uploads.extract(c["data"], event_id=c["event_id"], bucket="ATL_PAYLOADS_acme",
                                  threshold=c["threshold"], budget=c["budget"])
    refs = [{"bucket": u.bucket, "name": u.name, "sha256": u.sha256, "size": u.size,
             "content_type": u.content_type} for u, _ in moved]
    print(json.dumps({"data": data, "uploads": refs}, separators=(",", ":"), ensure_ascii=False))
"#;

#[test]
fn sdk_typescript_moves_the_values_the_python_sdk_moves_under_the_same_names() {
    let big = |c: char, n: usize| -> String { std::iter::repeat_n(c, n).collect() };
    let rows: Vec<Value> = (0..400)
        .map(|i| serde_json::json!({"k": big('v', 1000), "i": i}))
        .collect();
    let cases = serde_json::json!([
        {"event_id": "ev 1/ü~x", "threshold": 262144, "budget": 1_000_000_000,
         "data": {"a/b": {"t~": big('x', 300_000)}, "n": 1, "%key é": big('é', 200_000)}},
        {"event_id": "ev-2", "threshold": 262144, "budget": 1_000_000_000,
         "data": {"rows": rows, "small": "ok"}},
        {"event_id": "ev-3", "threshold": 262144, "budget": 4000,
         "data": {"a": big('a', 5000), "b": [big('b', 3000), big('c', 2000)], "c": big('ü', 600), "d": 7,
                  "e": {"$payload": {"sha256": "00", "size": 1}}}},
        {"event_id": "ev-4", "threshold": 1024, "budget": 1_000_000_000,
         "data": {"nested": {"x": [1, 2, {"deep": big('d', 1500)}], "y": big('y', 900), "z": big('z', 900)},
                  "list": [big('l', 2000), null, true, 3.5, "short"]}},
        {"event_id": "ev-5", "threshold": 262144, "budget": 20_000,
         "data": {"content": [{"type": "text", "text": big('t', 30_000)}, {"type": "json", "json": {"k": big('j', 12_000)}}]}},
        {"event_id": "ev-6", "threshold": 262144, "budget": 1_000_000_000, "data": {"small": "nothing moves"}},
    ]);
    let input = cases.to_string();
    let python_out = run_python(PYTHON_EXTRACT, &[], Some(&input));
    let mut child = std::process::Command::new(node())
        .arg(script())
        .arg("extract")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let typescript_out = String::from_utf8(output.stdout).unwrap();
    let python_lines: Vec<&str> = python_out.lines().collect();
    let typescript_lines: Vec<&str> = typescript_out.lines().collect();
    assert_eq!(python_lines.len(), 6);
    assert_eq!(typescript_lines.len(), 6);
    let mut moved = 0;
    for (i, (p, t)) in python_lines.iter().zip(&typescript_lines).enumerate() {
        // Byte for byte: the same references, and the same data around them.
        assert_eq!(p, t, "case {i}");
        let v: Value = serde_json::from_str(p).unwrap();
        moved += v["uploads"].as_array().unwrap().len();
    }
    assert!(moved >= 8, "the cases move values: {python_out}");
}
