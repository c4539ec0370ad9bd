//! `toolledger bundle` and `toolledger verify-bundle` over a real pipeline: init, emit, ingest (with
//! payloads offloaded to the blob store and checkpoints every few entries), rebuild; then bundles of
//! an invocation and of a session, checked by the binary and by the independent Python verifier.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use toolledger_projector::{Generations, Store};
use toolledger_testkit::{ChildProcess, NatsFixture, python, workspace_root};

use crate::toolledger;

/// Checkpoints every this many entries, so the run leaves several behind.
const CHECKPOINT_EVERY: u64 = 25;

struct Env {
    config: PathBuf,
    data: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("toolledger.toml");
        std::fs::write(
            &config,
            format!(
                "[ledger]\ncheckpoint_every = {CHECKPOINT_EVERY}\n\n[payloads]\nerasable_paths = [\"/data/content\"]\n"
            ),
        )
        .unwrap();
        Self { config, data }
    }

    fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TOOLLEDGER_CONFIG", self.config.display().to_string()),
            ("TOOLLEDGER_DATA_DIR", self.data.path().display().to_string()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn".to_owned()),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0".to_owned()),
        ]
    }

    fn spawn(&self, args: &[&str]) -> ChildProcess {
        let vars = self.vars();
        let envs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ChildProcess::spawn(toolledger(), args, &envs)
    }

    /// Runs a tool to its end: (success, stdout, stderr).
    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut child = self.spawn(args);
        let status = child
            .wait_timeout(Duration::from_secs(120))
            .expect("the tool finishes");
        (status.success(), child.stdout(), child.stderr())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.data.path().join(name)
    }
}

fn ledger_messages(nats: &NatsFixture, stream: &str) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let js = jetstream::new(nats.client().await);
        js.get_stream(stream)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
    })
}

/// The signed note at `seq` of ATL_CHECKPOINTS.
fn checkpoint_note(nats: &NatsFixture, seq: u64) -> Vec<u8> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let js = jetstream::new(nats.client().await);
        let stream = js.get_stream("ATL_CHECKPOINTS").await.unwrap();
        stream.get_raw_message(seq).await.unwrap().payload.to_vec()
    })
}

/// A tenant, an invocation with an offloaded payload, and the session it belongs to.
fn pick_invocation(data_dir: &Path) -> (String, String, String) {
    let generation = Generations::new(data_dir)
        .current()
        .unwrap()
        .expect("a projection");
    let store = Store::open_readonly(&generation.database()).unwrap();
    store
        .connection()
        .query_row(
            "SELECT tenant, invocation_id, session_id FROM events
             WHERE payload_refs != '[]' AND invocation_id IS NOT NULL AND session_id IS NOT NULL
             ORDER BY seq LIMIT 1",
            (),
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap()
}

pub(crate) fn python_verdicts(key_file: &Path, files: &[&Path]) -> Vec<String> {
    let script = workspace_root().join("verify/tests/py/verify_bundle.py");
    let out = std::process::Command::new(python())
        .arg(script)
        .arg(key_file)
        .args(files)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bundles_of_an_invocation_and_a_session_verify_offline_and_a_changed_byte_does_not() {
    let nats = NatsFixture::start();
    let url = nats.url();
    let env = Env::new();
    let (ok, out, err) = env.run(&["init", "--nats-url", &url, "--tenant", "acme"]);
    assert!(ok, "init failed\n{out}\n{err}");
    let events = env.path("events.ndjson");
    let truth = env.path("truth.json");
    let (ok, _, err) = env.run(&[
        "demo-data",
        "--seed",
        "5",
        "--out",
        events.to_str().unwrap(),
        "--truth",
        truth.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    // Two halves, the second emitted once the first is in the ledger, so ingest signs a checkpoint
    // after each: the first is the one the auditor holds.
    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let count = lines.len() as u64;
    let (first, second) = lines.split_at(lines.len() / 2);
    let halves = [env.path("first.ndjson"), env.path("second.ndjson")];
    std::fs::write(&halves[0], first.join("\n")).unwrap();
    std::fs::write(&halves[1], second.join("\n")).unwrap();

    let mut ingest = env.spawn(&["ingest", "--nats-url", &url]);
    for (half, expected) in halves.iter().zip([first.len() as u64, count]) {
        let (ok, out, err) = env.run(&["emit", half.to_str().unwrap(), "--nats-url", &url]);
        assert!(ok, "emit failed\n{out}\n{err}");
        let deadline = Instant::now() + Duration::from_secs(90);
        while ledger_messages(&nats, "ATL_LEDGER") < expected
            || ledger_messages(&nats, "ATL_CHECKPOINTS") < if expected == count { 2 } else { 1 }
        {
            assert!(
                Instant::now() < deadline,
                "ingest did not finish\n{}",
                ingest.stderr()
            );
            assert!(
                ingest.try_status().is_none(),
                "ingest exited\n{}",
                ingest.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let status = ingest.terminate(Duration::from_secs(30)).expect("ingest stops");
    assert!(status.success(), "{}", ingest.stderr());
    assert!(
        ledger_messages(&nats, "ATL_CHECKPOINTS") >= 2,
        "several checkpoints, one of them the auditor's"
    );
    let (ok, out, err) = env.run(&["rebuild", "--nats-url", &url]);
    assert!(ok, "rebuild failed\n{out}\n{err}");

    // The auditor held the first checkpoint.
    let held = env.path("held.note");
    std::fs::write(&held, checkpoint_note(&nats, 1)).unwrap();
    let key = env.path("keys/checkpoint.pub");
    let (tenant, invocation, session) = pick_invocation(env.data.path());

    let invocation_bundle = env.path("invocation.bundle.json");
    let (ok, out, err) = env.run(&[
        "bundle",
        "--nats-url",
        &url,
        "--invocation",
        &invocation,
        "--tenant",
        &tenant,
        "--since-checkpoint",
        held.to_str().unwrap(),
        "--with-payloads",
        "--out",
        invocation_bundle.to_str().unwrap(),
    ]);
    assert!(ok, "bundle failed\n{out}\n{err}");
    print!("{out}");
    assert!(
        out.contains(&format!("invocation {invocation} of tenant {tenant}")),
        "{out}"
    );
    assert!(out.contains("consistent with the held checkpoint"), "{out}");
    assert!(
        !out.contains("payloads: 0 included"),
        "the payload bytes are carried\n{out}"
    );

    let (ok, out, err) = env.run(&[
        "verify-bundle",
        invocation_bundle.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "verify-bundle failed\n{out}\n{err}");
    let verdict: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(verdict["ok"], true);
    let report = &verdict["report"];
    assert_eq!(report["selection"]["id"], invocation.as_str());
    let held_size: u64 = std::fs::read_to_string(&held)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(held_size >= CHECKPOINT_EVERY && held_size < count, "{held_size}");
    assert_eq!(report["consistent_with"]["size"], held_size);
    assert_eq!(
        report["tree_size"], count,
        "the last checkpoint covers the whole ledger"
    );
    let payloads: Vec<&serde_json::Value> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["payloads"].as_array().unwrap())
        .collect();
    assert!(
        !payloads.is_empty() && payloads.iter().all(|p| p["included"] == true),
        "{report}"
    );

    let session_bundle = env.path("session.bundle.json");
    let (ok, out, err) = env.run(&[
        "bundle",
        "--nats-url",
        &url,
        "--session",
        &session,
        "--tenant",
        &tenant,
        "--out",
        session_bundle.to_str().unwrap(),
    ]);
    assert!(ok, "bundle failed\n{out}\n{err}");
    // The key as a string works as well as the key file.
    let key_string = std::fs::read_to_string(&key).unwrap();
    let (ok, out, err) = env.run(&[
        "verify-bundle",
        session_bundle.to_str().unwrap(),
        "--key",
        key_string.trim(),
    ]);
    assert!(ok, "verify-bundle failed\n{out}\n{err}");
    print!("{out}");
    assert!(
        out.contains(&format!("session {session} of tenant {tenant}")),
        "{out}"
    );

    // The independent verifier accepts both.
    let verdicts = python_verdicts(&key, &[&invocation_bundle, &session_bundle]);
    assert!(verdicts.iter().all(|v| v.starts_with("ok ")), "{verdicts:?}");

    // One changed byte in the middle of the file: the binary names the failure and exits 1.
    let mut bytes = std::fs::read(&invocation_bundle).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    let changed = env.path("changed.bundle.json");
    std::fs::write(&changed, &bytes).unwrap();
    let (ok, out, err) = env.run(&[
        "verify-bundle",
        changed.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    assert!(!ok, "a changed bundle verified\n{out}");
    assert!(err.contains("does not verify"), "{err}");
    assert!(python_verdicts(&key, &[&changed])[0].starts_with("rejected: "));

    // Unknown ids are an error naming the projection's position, not an empty bundle.
    let (ok, _, err) = env.run(&[
        "bundle",
        "--nats-url",
        &url,
        "--invocation",
        "no-such-invocation",
        "--tenant",
        &tenant,
        "--out",
        env.path("none.json").to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("has no events of invocation"), "{err}");
}
