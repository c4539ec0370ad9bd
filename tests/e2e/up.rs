//! `toolledger up`: start, say what started, serve metrics and health, stop cleanly; config errors.

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use toolledger_testkit::{ChildProcess, http_get, nats_server_bin};

use crate::toolledger;

/// Starts `toolledger up --demo` with a private data dir, its own nats-server on a free port and
/// metrics on a free port, and waits until it says it runs.
fn start_up(data_dir: &Path) -> ChildProcess {
    let bin = nats_server_bin();
    let envs = [
        ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
        ("TOOLLEDGER_NATS__SERVER_BIN", bin.to_str().unwrap()),
        ("TOOLLEDGER_NATS__LISTEN", "127.0.0.1:0"),
        ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ("TOOLLEDGER_API__LISTEN", "127.0.0.1:0"),
    ];
    let mut up = ChildProcess::spawn(toolledger(), ["up", "--demo"], &envs);
    assert!(
        up.wait_for_output("running;", Duration::from_secs(60)),
        "up did not start\nstdout:\n{}\nstderr:\n{}",
        up.stdout(),
        up.stderr()
    );
    up
}

fn metrics_addr(stdout: &str) -> SocketAddr {
    let line = stdout
        .lines()
        .find(|l| l.contains("metrics at http://"))
        .expect("metrics line");
    let rest = line.split("http://").nth(1).unwrap();
    rest.split('/').next().unwrap().parse().unwrap()
}

#[test]
fn up_demo_starts_serves_and_stops_on_sigterm() {
    let data = tempfile::tempdir().unwrap();
    let mut up = start_up(data.path());
    let stdout = up.stdout();
    assert!(
        stdout.contains("started nats-server 2.15.1 with JetStream"),
        "{stdout}"
    );
    assert!(stdout.contains("JetStream ready"), "{stdout}");
    assert!(stdout.contains("created stream ATL_INBOUND"), "{stdout}");
    assert!(stdout.contains("created stream ATL_LEDGER"), "{stdout}");
    assert!(
        stdout.contains("demo: ingest drained ATL_INBOUND; the ledger holds"),
        "{stdout}"
    );
    assert!(stdout.contains("of 27 classes"), "{stdout}");
    assert!(stdout.contains("0 failed"), "{stdout}");
    assert!(
        data.path().join("nats").is_dir(),
        "JetStream store not in the data directory"
    );

    let addr = metrics_addr(&stdout);
    let metrics = http_get(addr, "/metrics").unwrap();
    assert_eq!(metrics.status, 200);
    let lines = metrics.body.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("prometheus text parses");
    let build = scrape
        .samples
        .iter()
        .find(|s| s.metric == "toolledger_build_info")
        .expect("build info");
    assert_eq!(build.labels.get("version"), Some(env!("CARGO_PKG_VERSION")));

    let health = http_get(addr, "/healthz").unwrap();
    assert_eq!(health.status, 200, "{}", health.body);
    let report: serde_json::Value = serde_json::from_str(&health.body).unwrap();
    assert_eq!(report["status"], "ok");
    assert_eq!(report["components"]["nats"]["ok"], true);

    let nats_pid = find_child_nats(up.pid());
    let status = up
        .terminate(Duration::from_secs(30))
        .expect("up exits after SIGTERM");
    assert!(status.success(), "exit {status:?}\n{}", up.stderr());
    assert!(up.stdout().contains("ingest stopped"), "{}", up.stdout());
    assert!(up.stdout().contains("projector stopped"), "{}", up.stdout());
    assert!(up.stdout().contains("nats-server stopped"));
    assert!(
        up.stdout().ends_with("toolledger up: stopped\n"),
        "{}",
        up.stdout()
    );
    if let Some(pid) = nats_pid {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "nats-server {pid} outlived up"
        );
    }
}

/// The nats-server child of `parent`, from /proc (children are listed per thread that spawned them).
fn find_child_nats(parent: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{parent}/task")).ok()?;
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "nats-server")
        })
}

#[test]
fn a_bad_environment_value_fails_start_naming_the_key() {
    let mut up = ChildProcess::spawn(
        toolledger(),
        ["up"],
        &[("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "nine-four-six-four")],
    );
    let status = up.wait_timeout(Duration::from_secs(30)).expect("exits");
    assert_eq!(status.code(), Some(2));
    let stderr = up.stderr();
    assert!(stderr.contains("telemetry.metrics_listen"), "{stderr}");
    assert!(
        stderr.contains("TOOLLEDGER_TELEMETRY__METRICS_LISTEN"),
        "{stderr}"
    );
}

#[test]
fn a_misspelt_environment_key_fails_start() {
    let mut up = ChildProcess::spawn(toolledger(), ["up"], &[("TOOLLEDGER_NATS__URLL", "nats://x:1")]);
    let status = up.wait_timeout(Duration::from_secs(30)).expect("exits");
    assert_eq!(status.code(), Some(2));
    assert!(up.stderr().contains("urll"), "{}", up.stderr());
}

#[test]
fn the_process_harness_kills_with_sigkill_and_up_recovers() {
    let data = tempfile::tempdir().unwrap();
    let mut up = start_up(data.path());
    let orphan = find_child_nats(up.pid()).expect("up runs a nats-server child");
    let status = up.kill9();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    assert!(
        !up.stdout().contains("stopping"),
        "a killed process cannot have run its shutdown"
    );
    assert!(
        Path::new(&format!("/proc/{orphan}")).exists(),
        "the server outlives a killed up"
    );

    // The next up finds the server its predecessor left behind, stops it, and starts cleanly.
    let mut again = start_up(data.path());
    assert!(
        !Path::new(&format!("/proc/{orphan}")).exists(),
        "stale server {orphan} still running"
    );
    assert!(again.terminate(Duration::from_secs(30)).expect("exits").success());
}
