//! `toolledger bench --smoke`: every suite runs end to end at tiny sizes and writes a report whose
//! figures each have one finite value per run and whose targets are all stated. The figures
//! themselves mean nothing at these sizes and are not checked.

use std::time::Duration;

use serde_json::Value;
use toolledger_testkit::{ChildProcess, nats_server_bin};

use crate::toolledger;

const RUNS: usize = 3;

/// Runs `toolledger bench --smoke --only SUITES --runs 3` into a temporary directory and returns
/// report.json.
fn smoke(suites: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    smoke_in(dir.path(), suites)
}

/// [`smoke`] in `dir`: its report goes to `dir/report`, where an earlier one may be.
fn smoke_in(dir: &std::path::Path, suites: &str) -> Value {
    let out = dir.join("report");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let bin = nats_server_bin();
    let runs = RUNS.to_string();
    let mut bench = ChildProcess::spawn(
        toolledger(),
        [
            "bench",
            "--smoke",
            "--only",
            suites,
            "--runs",
            &runs,
            "--out",
            out.to_str().unwrap(),
            "--work-dir",
            work.to_str().unwrap(),
        ],
        &[
            ("TOOLLEDGER_DATA_DIR", dir.join("data").to_str().unwrap()),
            ("TOOLLEDGER_NATS__SERVER_BIN", bin.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
        ],
    );
    let status = bench
        .wait_timeout(Duration::from_secs(600))
        .expect("bench --smoke finishes");
    assert!(
        status.success(),
        "bench failed\nstdout:\n{}\nstderr:\n{}",
        bench.stdout(),
        bench.stderr()
    );
    assert!(out.join("report.md").exists());
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

fn section<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no {id} section in {report:#}"))
}

fn assert_figures_complete(section: &Value) {
    let figures = section["figures"].as_array().unwrap();
    assert!(!figures.is_empty(), "{} has no figures", section["id"]);
    for figure in figures {
        let runs = figure["runs"].as_array().unwrap();
        assert_eq!(runs.len(), RUNS, "{}", figure["id"]);
        assert!(
            runs.iter().all(|v| v.as_f64().is_some_and(f64::is_finite)),
            "{} has a value that is not a finite number: {runs:?}",
            figure["id"]
        );
    }
}

#[test]
fn smoke_run_of_the_pipeline_suites_reports_every_figure_and_target() {
    let report = smoke("ingest,partitions,otlp,latency,poison,burst,soak");
    for id in [
        "ingest",
        "partitions",
        "otlp",
        "latency",
        "poison",
        "burst",
        "soak",
    ] {
        let section = section(&report, id);
        assert_figures_complete(section);
        assert!(!section["method"].as_str().unwrap().is_empty());
    }
    let ingest = section(&report, "ingest");
    for figure in ["publish.rate", "relay.rate", "ingest.rate"] {
        assert!(
            ingest["figures"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["id"] == figure),
            "no {figure}"
        );
    }
    let partitions = section(&report, "partitions");
    for comparison in ["p2_vs_p1", "p4_vs_p1", "p1_vs_relay", "p4_vs_relay"] {
        assert!(
            partitions["comparisons"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["id"] == comparison),
            "no {comparison}"
        );
    }
    assert!(
        section(&report, "latency")["figures"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "e2e.max_rate")
    );
    // Every poison message of every run reached the quarantine under its reason.
    let poison = section(&report, "poison");
    let runs = |id: &str| -> Vec<f64> {
        let figure = poison["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("no {id}"));
        figure["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (sent, quarantined) = (runs("poison.sent"), runs("poison.quarantined"));
    assert!(sent.iter().all(|n| *n >= 1.0), "{sent:?}");
    assert_eq!(sent, quarantined, "every poison message is quarantined");
    let targets: Vec<String> = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["targets"].as_array().unwrap())
        .map(|t| t["target"].as_str().unwrap().to_owned())
        .collect();
    for wanted in [
        "ingest ≥ 0.7 × relay",
        "end-to-end p99 ≤ 50 ms at 5k events/s",
        "others' p99 ≤ 100 ms while one tenant sends poison",
        "RSS growth under 10 % over the last 5 of 10 minutes",
    ] {
        assert!(
            targets.iter().any(|t| t.starts_with(wanted)),
            "target {wanted:?} missing from {targets:?}"
        );
    }
}

#[test]
fn smoke_run_of_the_offline_and_bulk_suites_reports_every_figure_and_target() {
    let dir = tempfile::tempdir().unwrap();
    let report = smoke_in(dir.path(), "rebuild,export,verify,reads,bulk,sdk");
    // Verify is compared with raw SHA-256 and with its floor (the slower of that and the read); each
    // SDK (Rust, and the checkout's Python and TypeScript) with raw appends under each fsync policy.
    // The reads suite compares its rebuild and its export, each at its own size.
    for (id, comparisons) in [
        ("rebuild", 1),
        ("export", 1),
        ("verify", 2),
        ("reads", 2),
        ("sdk", 6),
    ] {
        let section = section(&report, id);
        assert_figures_complete(section);
        assert_eq!(
            section["comparisons"].as_array().unwrap().len(),
            comparisons,
            "{id}"
        );
    }
    let targets: Vec<&str> = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["targets"].as_array().unwrap())
        .map(|t| t["target"].as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        [
            "rebuild ≥ 0.5 × raw insert",
            "export ≥ 0.7 × raw write",
            "verify ≥ 0.7 × the slower of raw hashing and the raw read",
            "reconstruct p99 ≤ 2 ms in a 5k-entry ledger while the projector applies",
            "sessions p99 ≤ 20 ms in a 5k-entry ledger while the projector applies",
            "sessions_filtered p99 ≤ 20 ms in a 5k-entry ledger while the projector applies",
            "invocations_filtered p99 ≤ 20 ms in a 5k-entry ledger while the projector applies",
            "inclusion proof p99 ≤ 5 ms in a 20k-entry ledger",
            "consistency proof p99 ≤ 5 ms in a 20k-entry ledger",
        ]
    );
    // The bulk ledger is built once: its size figures have one value, the proofs one per run.
    let bulk = section(&report, "bulk");
    let figure = |id: &str| {
        bulk["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("no {id}"))
            .clone()
    };
    for id in [
        "bulk.first_proof",
        "bulk.inclusion_p50",
        "bulk.consistency_p99",
        "bulk.raw_sha256",
    ] {
        assert_eq!(figure(id)["runs"].as_array().unwrap().len(), RUNS, "{id}");
    }
    // A 20k-entry ledger cannot hold the 100-event invocation spread 997 entries apart: its bundle
    // figure is left out rather than reported empty.
    assert!(
        !bulk["figures"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "bulk.invocation_bundle")
    );
    // The verify pass's own memory is measured (one value: the pass runs once).
    let peak = figure("bulk.verify_peak_rss");
    assert_eq!(peak["runs"].as_array().unwrap().len(), 1);
    assert!(peak["median"].as_f64().unwrap() >= 0.0);
    // 20,000 entries: a path of at most ceil(log2(20000)) = 15 hashes.
    let path = figure("bulk.inclusion_bytes")["median"].as_f64().unwrap();
    assert!(path > 0.0 && path <= 15.0 * 32.0, "{path}");
    let per_entry = figure("bulk.ledger_bytes_per_entry")["median"].as_f64().unwrap();
    assert!(per_entry > 500.0, "{per_entry}");

    // Rerunning one suite into the same directory replaces its section and keeps the others, each
    // marked with the run that measured it, in suite order.
    let rerun = smoke_in(dir.path(), "export");
    let ids: Vec<&str> = rerun["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["rebuild", "export", "verify", "reads", "bulk", "sdk"]);
    assert!(section(&rerun, "export").get("kept_from").is_none());
    assert_ne!(rerun["started_at"], report["started_at"]);
    for id in ["rebuild", "verify", "reads", "bulk", "sdk"] {
        let kept = section(&rerun, id);
        assert_eq!(kept["kept_from"]["started_at"], report["started_at"], "{id}");
        assert_eq!(kept["figures"], section(&report, id)["figures"], "{id}");
    }
    let markdown = std::fs::read_to_string(dir.path().join("report/report.md")).unwrap();
    assert_eq!(markdown.matches("_Kept from an earlier run").count(), 5);
}

#[test]
fn bulk_refuses_when_the_disk_cannot_hold_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let bin = nats_server_bin();
    let mut bench = ChildProcess::spawn(
        toolledger(),
        [
            "bench",
            "--only",
            "bulk",
            "--bulk-entries",
            "100000000000",
            "--out",
            dir.path().join("report").to_str().unwrap(),
            "--work-dir",
            dir.path().to_str().unwrap(),
        ],
        &[
            ("TOOLLEDGER_DATA_DIR", dir.path().join("data").to_str().unwrap()),
            ("TOOLLEDGER_NATS__SERVER_BIN", bin.to_str().unwrap()),
        ],
    );
    let status = bench.wait_timeout(Duration::from_secs(300)).expect("bench exits");
    assert!(!status.success());
    let stderr = bench.stderr();
    assert!(
        stderr.contains("needs about") && stderr.contains("GiB free"),
        "{stderr}"
    );
}
