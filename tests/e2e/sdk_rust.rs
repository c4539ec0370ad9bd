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
use std::time::{Duration, Instant};

use serde_json::Value;
use toolledger_testkit::{ChildProcess, NatsFixture, python, workspace_root};
use toolledger_wire::LedgerEntry;

use crate::fixture::{Rng, fault_seed};
use crate::producers::{
    CYCLES, Ledger, UNREACHABLE, assert_exactly_once, assert_fdatasync_before_emit_returns, emitted,
    official_for,
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

fn producer(args: &[&str]) -> ChildProcess {
    ChildProcess::spawn(&producer_run(), args, &[])
}

/// Runs `producer_run` to completion; returns its stdout.
fn run(args: &[&str]) -> String {
    let output = std::process::Command::new(producer_run())
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "producer_run {args:?} failed\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
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
    let events: Vec<Value> = run(&["everything", spool.to_str().unwrap()])
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
    let seed = fault_seed();
    println!("sdk rust kill seed {seed} (TOOLLEDGER_FAULT_SEED={seed} replays it)");
    let mut delays = Rng(seed);
    let mut ledger = Ledger::start();
    let url = ledger.nats.url();
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let spool_arg = spool.to_str().unwrap();
    let started = Instant::now();
    let mut want = HashSet::new();
    for cycle in 0..CYCLES {
        // Every third producer cannot reach NATS: what it emitted waits in the spool for a later one.
        let target = if cycle % 3 == 1 { UNREACHABLE } else { url.as_str() };
        let prefix = format!("inv-rc{cycle}");
        let mut child = producer(&["emit", target, spool_arg, "acme", &prefix]);
        assert!(
            child.wait_for_output("READY", Duration::from_secs(30)),
            "seed {seed}: cycle {cycle}: producer did not start\n{}",
            child.stderr()
        );
        std::thread::sleep(delays.between(50, 600));
        child.kill9();
        assert!(
            !child.stderr().contains("panicked"),
            "seed {seed}: {}",
            child.stderr()
        );
        want.extend(emitted(&child.stdout()));
    }
    println!(
        "{CYCLES} kill cycles in {:.1}s, {} events emitted",
        started.elapsed().as_secs_f64(),
        want.len()
    );
    assert!(
        want.len() > CYCLES * 5,
        "seed {seed}: producers emitted too little to test anything"
    );

    // A restart drains what the killed producers left.
    let mut drain = producer(&["drain", &url, spool_arg, "acme", "--timeout", "90"]);
    let status = drain.wait_timeout(Duration::from_secs(120)).expect("drain exits");
    assert!(
        status.success(),
        "seed {seed}: {}\n{}",
        drain.stdout(),
        drain.stderr()
    );
    let metrics: Value =
        serde_json::from_str(drain.stdout().trim().strip_prefix("DRAINED ").unwrap()).unwrap();
    println!("drain: {metrics}");
    assert!(
        metrics["recovered"].as_u64().unwrap() > 0,
        "seed {seed}: the restart found nothing to resume: {metrics}"
    );
    let (ids, receipts) = ledger.settled("acme", &want);
    assert_exactly_once(seed, &ids, receipts, &want);
    let left: Vec<_> = std::fs::read_dir(&spool)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .collect();
    assert!(
        left.is_empty(),
        "seed {seed}: acked segments left behind: {left:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&spool).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the spool directory holds raw secrets");

    // The other direction of the shared format: a spool the Python SDK wrote (offline), drained by
    // the Rust SDK.
    let py_spool = dir.path().join("python-spool");
    let output = std::process::Command::new(python())
        .arg(workspace_root().join("sdk/python/tests/producer_run.py"))
        .args(["emit", UNREACHABLE, py_spool.to_str().unwrap(), "acme", "inv-py"])
        .args(["--count", "5", "--flush-timeout", "0"])
        .env("PYTHONPATH", workspace_root().join("sdk/python/src"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let python_ids: HashSet<String> = emitted(&String::from_utf8_lossy(&output.stdout))
        .into_iter()
        .collect();
    assert_eq!(
        python_ids.len(),
        26,
        "5 invocations of 5 events and one declaration"
    );
    let stdout = run(&[
        "drain",
        &url,
        py_spool.to_str().unwrap(),
        "acme",
        "--timeout",
        "60",
    ]);
    assert!(stdout.contains("\"recovered\":26"), "{stdout}");
    want.extend(python_ids);
    let (ids, receipts) = ledger.settled("acme", &want);
    assert_exactly_once(seed, &ids, receipts, &want);
    ledger.stop();
}

#[test]
fn sdk_rust_nothing_is_lost_while_nats_server_is_down() {
    // The issue asks for 30 s; the default keeps the suite fast and exercises the same paths (publish
    // timeouts against a frozen server, then a refused connection and a reconnect).
    let outage: u64 = std::env::var("TOOLLEDGER_SDK_OUTAGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let mut ledger = Ledger::start();
    let url = ledger.nats.url();
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let rate = 20; // invocations/s, 5 events each: well under what every_event fsyncs allow
    let count = (rate * (outage + 4)).to_string();
    let mut child = producer(&[
        "emit",
        &url,
        spool.to_str().unwrap(),
        "acme",
        "inv-outage",
        "--count",
        &count,
        "--rate",
        &rate.to_string(),
    ]);
    assert!(
        child.wait_for_output("READY", Duration::from_secs(30)),
        "{}",
        child.stderr()
    );
    std::thread::sleep(Duration::from_secs(1));
    let before = emitted(&child.stdout()).len();
    ledger.nats.pause();
    std::thread::sleep(Duration::from_secs(outage));
    let during = emitted(&child.stdout()).len() - before;
    ledger.nats.resume();
    // Then a real stop and start: connections refused, the client reconnects.
    ledger.nats.restart();
    assert!(during > 0, "emit must not wait for NATS");
    let status = child
        .wait_timeout(Duration::from_secs(120))
        .expect("the producer finishes");
    assert!(status.success(), "{}\n{}", child.stdout(), child.stderr());
    let stdout = child.stdout();
    let done = stdout
        .lines()
        .find_map(|l| l.strip_prefix("DONE "))
        .expect("DONE line");
    let metrics: Value = serde_json::from_str(done).unwrap();
    println!("outage {outage}s: {during} events emitted while the server was down; {metrics}");
    assert!(
        metrics["retried"].as_u64().unwrap() > 0,
        "the outage was never felt: {metrics}"
    );
    assert_eq!(metrics["queued"], 0, "{metrics}");
    let want: HashSet<String> = emitted(&stdout).into_iter().collect();
    assert_eq!(want.len() as u64, 1 + 5 * (rate * (outage + 4)));
    let (ids, receipts) = ledger.settled("acme", &want);
    assert_exactly_once(0, &ids, receipts, &want);
    ledger.stop();
}

#[test]
fn sdk_rust_every_event_policy_fdatasyncs_before_emit_returns() {
    assert_fdatasync_before_emit_returns(|policy, spool| {
        let mut command = std::process::Command::new(producer_run());
        command
            .args(["emit", UNREACHABLE, spool, "acme", "inv-trace"])
            .args(["--count", "10", "--flush-timeout", "0", "--fsync", policy]);
        command
    });
}

/// `row 00000000\n`, `row 00000001\n`, … cut at `size` bytes: the text `producer_run upload` (and the
/// Python SDK's `producer_run.py upload`) emits, written here on its own so the comparison does not
/// trust the SDK.
fn large_text(size: usize) -> Vec<u8> {
    let mut text = Vec::with_capacity(size + 13);
    let mut row = 0;
    while text.len() < size {
        text.extend_from_slice(format!("row {row:08}\n").as_bytes());
        row += 1;
    }
    text.truncate(size);
    text
}

/// A nats-server whose contract `init --tenant acme` made (so `ATL_PAYLOADS_acme` exists), with
/// ingest running on a data directory of its own.
struct PayloadLedger {
    nats: NatsFixture,
    ingest: ChildProcess,
    data: tempfile::TempDir,
}

impl PayloadLedger {
    fn start() -> Self {
        let nats = NatsFixture::start();
        let data = tempfile::tempdir().unwrap();
        let url = nats.url();
        let env = [
            ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ];
        let mut init = ChildProcess::spawn(
            toolledger(),
            ["init", "--nats-url", &url, "--tenant", "acme"],
            &env,
        );
        let status = init.wait_timeout(Duration::from_secs(60)).expect("init exits");
        assert!(status.success(), "init failed\n{}", init.stderr());
        let ingest = ChildProcess::spawn(toolledger(), ["ingest", "--nats-url", &url], &env);
        Self { nats, ingest, data }
    }

    /// The ledger's entries once `want` ids are all there (at most 60 s).
    fn entries(&mut self, runtime: &tokio::runtime::Runtime, want: &HashSet<String>) -> Vec<LedgerEntry> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let entries: Vec<LedgerEntry> = runtime.block_on(async {
                let js = async_nats::jetstream::new(async_nats::connect(self.nats.url()).await.unwrap());
                let tail = toolledger_ledger::last_sequence(&js, toolledger_wire::streams::LEDGER)
                    .await
                    .unwrap();
                if tail == 0 {
                    return Vec::new();
                }
                toolledger_ledger::read_range(&js, toolledger_wire::streams::LEDGER, 1, tail)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|(_, bytes)| LedgerEntry::parse(&bytes).unwrap())
                    .collect()
            });
            let have: HashSet<String> = entries.iter().map(|e| e.event.id().to_owned()).collect();
            if want.is_subset(&have) {
                return entries;
            }
            assert!(
                self.ingest.try_status().is_none(),
                "ingest exited\n{}",
                self.ingest.stderr()
            );
            assert!(
                Instant::now() < deadline,
                "{} of {} emitted events never reached the ledger\n{}",
                want.difference(&have).count(),
                want.len(),
                self.ingest.stderr()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The large result of the invocations whose ids are `want` is in the ledger behind a `$payload`
    /// whose blob is `expected`; no `$upload` reached the ledger; each object named in `pending` is
    /// gone from the bucket (ingest deletes it once the entry is in).
    fn assert_uploaded(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        want: &HashSet<String>,
        pending: &[Value],
        expected: &[u8],
    ) {
        let entries = self.entries(runtime, want);
        let store = toolledger_ledger::BlobStore::open(&format!(
            "file://{}",
            self.data.path().join("blobs").display()
        ))
        .unwrap();
        let acme = toolledger_wire::Tenant::parse("acme").unwrap();
        let result = entries
            .iter()
            .find(|e| e.event.ty() == "tool.result.created" && want.contains(e.event.id()))
            .expect("the result is in the ledger");
        let event = result.event_json();
        assert!(
            event["data"]["content"][0]["text"]["$payload"].is_object(),
            "ingest replaced the $upload by a $payload: {}",
            event["data"]["content"]
        );
        let payload = result
            .ledger
            .payload_refs
            .iter()
            .find(|p| p.path == "/data/content/0/text")
            .expect("a payload ref for the text");
        assert_eq!(payload.size, expected.len() as u64);
        let content = runtime.block_on(store.fetch_verified(&acme, payload)).unwrap();
        assert!(content.as_ref() == expected, "the blob is the text emitted");
        for entry in entries.iter().filter(|e| want.contains(e.event.id())) {
            let bytes = entry.canonical_bytes().unwrap();
            assert!(
                !bytes.windows(7).any(|w| w == b"$upload"),
                "an upload reference reached the ledger: {}",
                entry.event.id()
            );
        }
        let url = self.nats.url();
        runtime.block_on(async {
            let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
            let objects = js.get_object_store("ATL_PAYLOADS_acme").await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            for upload in pending {
                let name = upload["name"].as_str().unwrap();
                loop {
                    let gone = objects.info(name).await.map_or(true, |info| info.deleted);
                    if gone {
                        break;
                    }
                    assert!(Instant::now() < deadline, "{name} still in the bucket");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
}

fn sidecars(spool: &Path) -> Vec<String> {
    std::fs::read_dir(spool.join("uploads"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The `UPLOADS [...]` line of an `upload` run (either SDK's).
fn pending_uploads(stdout: &str) -> Vec<Value> {
    let pending: Value = serde_json::from_str(
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("UPLOADS "))
            .expect("UPLOADS line"),
    )
    .unwrap();
    pending.as_array().unwrap().clone()
}

fn python_producer(args: &[&str]) -> std::process::Output {
    std::process::Command::new(python())
        .arg(workspace_root().join("sdk/python/tests/producer_run.py"))
        .args(args)
        .env("PYTHONPATH", workspace_root().join("sdk/python/src"))
        .output()
        .unwrap()
}

#[test]
fn sdk_rust_large_result_emitted_offline_travels_through_the_payload_bucket() {
    const SIZE: usize = 2 * 1024 * 1024;
    let mut ledger = PayloadLedger::start();
    let url = ledger.nats.url();
    let spool_dir = tempfile::tempdir().unwrap();
    let spool = spool_dir.path().join("spool");
    let spool_arg = spool.to_str().unwrap();
    let size = SIZE.to_string();
    let expected = large_text(SIZE);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // Offline: emit must not need NATS; the value waits in a sidecar beside its record.
    let mut child = producer(&[
        "upload",
        UNREACHABLE,
        spool_arg,
        "acme",
        "inv-upload-1",
        "--size",
        &size,
    ]);
    let status = child
        .wait_timeout(Duration::from_secs(30))
        .expect("producer exits");
    let stdout = child.stdout();
    assert!(status.success(), "{stdout}\n{}", child.stderr());
    let want: HashSet<String> = emitted(&stdout).into_iter().collect();
    let pending = pending_uploads(&stdout);
    assert!(!pending.is_empty(), "a 2 MiB result must be uploaded: {stdout}");
    assert_eq!(
        sidecars(&spool).len(),
        pending.len(),
        "one sidecar per pending upload"
    );
    // The segments as they are now, for the lost-ack replay below.
    let saved: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&spool)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect();

    // A restart with NATS reachable: the objects go into ATL_PAYLOADS_acme, then the events.
    let mut drain = producer(&["drain", &url, spool_arg, "acme", "--timeout", "30"]);
    let status = drain.wait_timeout(Duration::from_secs(40)).expect("drain exits");
    assert!(status.success(), "{}\n{}", drain.stdout(), drain.stderr());
    let metrics: Value =
        serde_json::from_str(drain.stdout().trim().strip_prefix("DRAINED ").unwrap()).unwrap();
    assert_eq!(
        metrics["uploaded"].as_u64(),
        Some(pending.len() as u64),
        "{metrics}"
    );
    ledger.assert_uploaded(&runtime, &want, &pending, &expected);
    assert_eq!(
        sidecars(&spool),
        Vec::<String>::new(),
        "acked sidecars are deleted"
    );

    // A lost ack position (a power cut, a damaged `ack` file) brings the acked records back without
    // their sidecars: the upload's record is counted acked, the rest are duplicates for the ledger to
    // drop; nothing is quarantined for a missing upload and the spool does not get stuck.
    let _ = std::fs::remove_file(spool.join("ack"));
    for (path, bytes) in &saved {
        std::fs::write(path, bytes).unwrap();
    }
    let mut again = producer(&["drain", &url, spool_arg, "acme", "--timeout", "20"]);
    let status = again.wait_timeout(Duration::from_secs(30)).expect("drain exits");
    assert!(status.success(), "{}\n{}", again.stdout(), again.stderr());
    let metrics: Value =
        serde_json::from_str(again.stdout().trim().strip_prefix("DRAINED ").unwrap()).unwrap();
    assert_eq!(
        metrics["recovered"].as_u64(),
        Some(want.len() as u64),
        "{metrics}"
    );
    assert_eq!(metrics["uploaded"].as_u64(), Some(0), "{metrics}");

    // The shared format, both ways: a spool with uploads the Python SDK wrote offline is drained by
    // the Rust SDK, and one the Rust SDK wrote is drained by the Python SDK.
    let py_spool = spool_dir.path().join("python-spool");
    let output = python_producer(&[
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
    let stdout = run(&[
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
    ledger.assert_uploaded(&runtime, &py_want, &py_pending, &expected);
    assert_eq!(sidecars(&py_spool), Vec::<String>::new());

    let rs_spool = spool_dir.path().join("rust-spool");
    let stdout = run(&[
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
    let output = python_producer(&[
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
    ledger.assert_uploaded(&runtime, &rs_want, &rs_pending, &expected);
    assert_eq!(sidecars(&rs_spool), Vec::<String>::new());

    // Every event of the four runs is in the ledger once; nothing was quarantined.
    std::thread::sleep(Duration::from_millis(500));
    let all: HashSet<String> = want.iter().chain(&py_want).chain(&rs_want).cloned().collect();
    let entries = ledger.entries(&runtime, &all);
    for id in &all {
        let n = entries.iter().filter(|e| e.event.id() == id).count();
        assert_eq!(n, 1, "{id} in the ledger {n} times");
    }
    let quarantined = runtime.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(&url).await.unwrap());
        let mut stream = js.get_stream(toolledger_wire::streams::QUARANTINE).await.unwrap();
        stream.info().await.unwrap().state.messages
    });
    assert_eq!(quarantined, 0, "a record was quarantined");
    let status = ledger
        .ingest
        .terminate(Duration::from_secs(30))
        .expect("ingest stops");
    assert!(status.success(), "{}", ledger.ingest.stderr());
}
