//! Backup and restore: a ledger written by ingest goes to files and into a fresh server, where
//! `verify` passes with the original key and a rebuild gives the same projection; an altered backup
//! and a non-empty target are refused.

use std::path::Path;
use std::time::{Duration, Instant};

use toolledger_testkit::{ChildProcess, NatsFixture};

use crate::toolledger;

fn tool(data: &Path, args: &[&str]) -> (bool, String) {
    let mut child = ChildProcess::spawn(
        toolledger(),
        args,
        &[
            ("TOOLLEDGER_DATA_DIR", data.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ],
    );
    let status = child
        .wait_timeout(Duration::from_secs(120))
        .expect("the tool finishes");
    (status.success(), format!("{}{}", child.stdout(), child.stderr()))
}

fn projection(data: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let generation = toolledger_projector::Generations::new(data)
        .current()
        .unwrap()
        .unwrap();
    toolledger_projector::Store::open_readonly(&generation.database())
        .unwrap()
        .table_contents()
        .unwrap()
}

#[test]
fn a_restored_ledger_verifies_and_rebuilds_the_same_projection() {
    let original = NatsFixture::start();
    let data = tempfile::tempdir().unwrap();
    let url = original.url();
    let (ok, out) = tool(data.path(), &["init", "--nats-url", &url]);
    assert!(ok, "{out}");
    let mut ingest = ChildProcess::spawn(
        toolledger(),
        ["ingest", "--nats-url", url.as_str()],
        &[
            ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_LEDGER__CHECKPOINT_EVERY", "50"),
        ],
    );
    let events = toolledger_schemas::generator::generate(&toolledger_schemas::generator::GeneratorConfig {
        seed: 21,
        sessions: 2,
        ..Default::default()
    })
    .events;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let js = async_nats::jetstream::new(original.client().await);
        let outgoing = toolledger_wire::produce::prepare_all(&events, toolledger_wire::Mode::Binary).unwrap();
        let report = toolledger_wire::produce::publish_all(&js, outgoing).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        let deadline = Instant::now() + Duration::from_secs(60);
        while toolledger_ledger::last_sequence(&js, "ATL_LEDGER").await.unwrap() < events.len() as u64 {
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert!(
        ingest.terminate(Duration::from_secs(30)).unwrap().success(),
        "{}",
        ingest.stderr()
    );
    let (ok, out) = tool(data.path(), &["rebuild", "--nats-url", &url]);
    assert!(ok, "{out}");
    let expected = projection(data.path());

    let backup_dir = tempfile::tempdir().unwrap();
    let backup = backup_dir.path().join("b1");
    let (ok, out) = tool(
        data.path(),
        &["backup", "--nats-url", &url, "--out", backup.to_str().unwrap()],
    );
    assert!(
        ok && out.contains(&format!("{} ledger entries", events.len())),
        "{out}"
    );
    let (ok, out) = tool(
        data.path(),
        &["backup", "--nats-url", &url, "--out", backup.to_str().unwrap()],
    );
    assert!(!ok && out.contains("already holds a backup"), "{out}");

    // A fresh server with the contract; the original data directory keeps the keys.
    let fresh = NatsFixture::start();
    let fresh_url = fresh.url();
    let (ok, out) = tool(data.path(), &["init", "--nats-url", &fresh_url]);
    assert!(ok, "{out}");

    // An altered backup is refused before anything is written.
    let altered = backup_dir.path().join("altered");
    std::fs::create_dir_all(&altered).unwrap();
    for file in std::fs::read_dir(&backup).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(&file, altered.join(file.file_name().unwrap())).unwrap();
    }
    let ledger_file = altered.join("ATL_LEDGER.jsonl");
    let text = std::fs::read_to_string(&ledger_file).unwrap();
    std::fs::write(&ledger_file, text.replacen("\"seq\":3,", "\"seq\":3, ", 1)).unwrap();
    let (ok, out) = tool(
        data.path(),
        &["restore", "--nats-url", &fresh_url, altered.to_str().unwrap()],
    );
    assert!(!ok && out.contains("SHA-256"), "{out}");

    let (ok, out) = tool(
        data.path(),
        &["restore", "--nats-url", &fresh_url, backup.to_str().unwrap()],
    );
    assert!(ok, "{out}");
    let (ok, out) = tool(data.path(), &["verify", "--nats-url", &fresh_url, "--no-tiles"]);
    assert!(ok && out.contains("verify: ok"), "{out}");
    assert!(
        !out.contains("0 of 0 checkpoints"),
        "checkpoints came back: {out}"
    );
    // A clean run saves the newest trusted checkpoint; the next continues from it.
    let saved = data.path().join("trusted.note");
    let saved_arg = saved.to_str().unwrap();
    let (ok, out) = tool(
        data.path(),
        &[
            "verify",
            "--nats-url",
            &fresh_url,
            "--no-tiles",
            "--save-checkpoint",
            saved_arg,
        ],
    );
    assert!(ok && saved.exists(), "{out}");
    let (ok, out) = tool(
        data.path(),
        &[
            "verify",
            "--nats-url",
            &fresh_url,
            "--no-tiles",
            "--from-checkpoint",
            saved_arg,
        ],
    );
    assert!(
        ok && out.contains("continued from the trusted checkpoint") && out.contains("verify: ok"),
        "{out}"
    );
    let (ok, out) = tool(
        data.path(),
        &["restore", "--nats-url", &fresh_url, backup.to_str().unwrap()],
    );
    assert!(!ok && out.contains("restore only into a fresh contract"), "{out}");

    let restored_data = tempfile::tempdir().unwrap();
    let (ok, out) = tool(restored_data.path(), &["rebuild", "--nats-url", &fresh_url]);
    assert!(ok, "{out}");
    assert_eq!(projection(restored_data.path()), expected);
}

#[test]
fn doctor_passes_a_healthy_deployment_and_names_what_is_wrong() {
    let data = tempfile::tempdir().unwrap();
    // No NATS at all: the first failure says so.
    let (ok, out) = tool(data.path(), &["doctor", "--nats-url", "nats://127.0.0.1:1"]);
    assert!(!ok && out.contains("FAIL  nats"), "{out}");

    let nats = NatsFixture::start();
    let url = nats.url();
    let (ok, out) = tool(data.path(), &["init", "--nats-url", &url]);
    assert!(ok, "{out}");
    let (ok, out) = tool(data.path(), &["doctor", "--nats-url", &url]);
    assert!(ok, "{out}");
    for name in [
        "config",
        "nats",
        "streams",
        "ingest lag",
        "checkpoints",
        "quarantine",
    ] {
        assert!(out.contains(&format!("ok    {name}")), "{name}:\n{out}");
    }
    assert!(out.contains("warn  projection"), "no projection yet:\n{out}");
    // Free space depends on the machine: only that it was measured.
    assert!(out.contains(" disk ") && out.contains("GiB free"), "{out}");

    // Unprocessed inbound messages with nobody ingesting, and a ledger stream that gained a limit.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let js = async_nats::jetstream::new(nats.client().await);
        let events = toolledger_schemas::generator::generate(&Default::default()).events;
        let outgoing =
            toolledger_wire::produce::prepare_all(&events[..5], toolledger_wire::Mode::Binary).unwrap();
        assert!(
            toolledger_wire::produce::publish_all(&js, outgoing)
                .await
                .failed
                .is_empty()
        );
        let mut config = js
            .get_stream("ATL_LEDGER")
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .config
            .clone();
        config.max_messages = 1_000_000;
        js.update_stream(config).await.unwrap();
    });
    let (ok, out) = tool(data.path(), &["doctor", "--nats-url", &url, "--json"]);
    assert!(!ok, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out[..out.rfind(']').unwrap() + 1]).unwrap();
    let by_name = |name: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(by_name("streams")["status"], "fail");
    assert!(
        by_name("streams")["detail"]
            .as_str()
            .unwrap()
            .contains("ATL_LEDGER max_msgs"),
        "{out}"
    );
    assert!(by_name("streams")["action"].is_string());
    assert!(
        by_name("ingest lag")["detail"]
            .as_str()
            .unwrap()
            .starts_with("5 messages waiting"),
        "{out}"
    );
}
