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

/// Every file and directory under `dir` whose mode lets anyone but the owner in, with its mode.
fn not_private(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let Ok(metadata) = std::fs::symlink_metadata(&path) else {
                continue; // removed meanwhile (a temporary file)
            };
            if metadata.file_type().is_symlink() {
                continue;
            }
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                found.push(format!("{mode:03o} {}", path.display()));
            }
            if metadata.is_dir() {
                pending.push(path);
            }
        }
    }
    found
}

/// `toolledger ARGS…` started by a shell under umask 022, as a login shell would leave it.
fn under_umask_022(args: &[&str], envs: &[(&str, &str)]) -> ChildProcess {
    let script = "umask 022; exec \"$0\" \"$@\"";
    let mut all = vec!["-c", script, toolledger().to_str().unwrap()];
    all.extend_from_slice(args);
    ChildProcess::spawn(Path::new("/bin/sh"), all, envs)
}

#[test]
fn data_files_are_private_whatever_the_umask() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("data");
    let bin = nats_server_bin();
    let envs = [
        ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
        ("TOOLLEDGER_NATS__SERVER_BIN", bin.to_str().unwrap()),
        ("TOOLLEDGER_NATS__LISTEN", "127.0.0.1:0"),
        ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ("TOOLLEDGER_API__LISTEN", "127.0.0.1:0"),
        // Payloads to the blob store, so blobs are written too.
        ("TOOLLEDGER_PAYLOADS__OFFLOAD_THRESHOLD_BYTES", "64"),
    ];
    // The control: what the shell itself creates under that umask is readable by all.
    let mut control = ChildProcess::spawn(
        Path::new("/bin/sh"),
        [
            "-c",
            "umask 022; mkdir -p \"$0/dir\"; touch \"$0/dir/file\"",
            data.path().join("control").to_str().unwrap(),
        ],
        &[],
    );
    assert!(control.wait_timeout(Duration::from_secs(10)).unwrap().success());
    assert_eq!(not_private(&data.path().join("control")).len(), 2);

    let mut up = under_umask_022(&["up", "--demo"], &envs);
    assert!(
        up.wait_for_output("running;", Duration::from_secs(90)),
        "up did not start\n{}\n{}",
        up.stdout(),
        up.stderr()
    );
    // The exporter runs as its own identity of up's server.
    let nats_url = std::fs::read_to_string(data_dir.join("nats-auth/exporter.url")).unwrap();
    let nats_url = nats_url.trim();
    // The exporter too, writing the Parquet archive.
    let mut export = under_umask_022(
        &["export", "--nats-url", nats_url],
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_EXPORT__MAX_DELAY_MS", "100"),
        ],
    );
    let parquet = data_dir.join("parquet");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_dir(&parquet).is_ok_and(|mut d| d.next().is_some()) {
        assert!(
            std::time::Instant::now() < deadline,
            "no archive\n{}",
            export.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        export.terminate(Duration::from_secs(30)).unwrap().success(),
        "{}",
        export.stderr()
    );
    assert!(
        up.terminate(Duration::from_secs(30)).unwrap().success(),
        "{}",
        up.stderr()
    );

    for written in [
        "projections/gen-1/toolledger.sqlite",
        "ingest/identities.sqlite",
        "blobs",
        "keys/checkpoint.key",
        "tiles",
        "parquet",
        "nats",
        "logs/nats-server.log",
        "api-token",
        "nats-auth/passwords",
        "nats-auth/server.conf",
        "nats-auth/reader.url",
    ] {
        assert!(data_dir.join(written).exists(), "{written} was written");
    }
    assert_eq!(not_private(&data_dir), Vec::<String>::new());
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    use std::io::Read;
    let data = tempfile::tempdir().unwrap();
    let mut serve = std::process::Command::new(toolledger())
        .args(["serve", "--insecure-local", "--listen", "127.0.0.1:0"])
        .env("TOOLLEDGER_DATA_DIR", data.path())
        .env("TOOLLEDGER_TELEMETRY__LOG_FILTER", "info")
        .env_remove("NO_COLOR")
        .env_remove("TOOLLEDGER_NATS__URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = serve.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        text
    });
    // Serve without NATS warns that reads are not recorded; give it time to start and say so.
    std::thread::sleep(Duration::from_secs(3));
    // Our own child, stopped the way an operator would.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(serve.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = serve.wait();
    let text = String::from_utf8(reader.join().unwrap()).unwrap();
    assert!(text.contains(" WARN "), "a log line was written: {text:?}");
    assert!(!text.contains('\u{1b}'), "colour codes in piped logs: {text:?}");
}

#[test]
fn up_finds_the_pinned_nats_server_without_configuration() {
    let pinned = toolledger_testkit::workspace_root().join(".tools/nats/bin/nats-server");
    if !pinned.is_file() || !toolledger().starts_with(toolledger_testkit::workspace_root()) {
        println!("skipped: no pinned nats-server beside this build (run scripts/setup)");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    // A PATH without nats-server, as a fresh shell after `scripts/demo` has it.
    let path = "/usr/local/bin:/usr/bin:/bin";
    assert!(
        std::env::split_paths(path).all(|dir| !dir.join("nats-server").exists()),
        "the test needs a PATH without nats-server"
    );
    let envs = [
        ("PATH", path),
        ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
        ("TOOLLEDGER_NATS__LISTEN", "127.0.0.1:0"),
        ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ("TOOLLEDGER_API__LISTEN", "127.0.0.1:0"),
    ];
    let mut up = ChildProcess::spawn(toolledger(), ["up"], &envs);
    assert!(
        up.wait_for_output("running;", Duration::from_secs(60)),
        "up did not start\n{}\n{}",
        up.stdout(),
        up.stderr()
    );
    assert!(
        up.stdout().contains("started nats-server 2.15.1"),
        "{}",
        up.stdout()
    );
    assert!(up.terminate(Duration::from_secs(30)).unwrap().success());

    // A configured server that is not there: the error names the setting.
    let mut up = ChildProcess::spawn(
        toolledger(),
        ["up"],
        &[
            ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
            ("TOOLLEDGER_NATS__SERVER_BIN", "/nonexistent/nats-server"),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ],
    );
    let status = up.wait_timeout(Duration::from_secs(30)).expect("exits");
    assert!(!status.success());
    assert!(up.stderr().contains("nats.server_bin"), "{}", up.stderr());
}

#[test]
fn up_runs_its_server_with_the_shipped_accounts_and_adopts_an_earlier_store() {
    use crate::init::{login_at, quick, runtime, stored};
    use toolledger_core::nats_server::{NatsServer, NatsServerSpec};

    // A data directory an earlier `up` filled without accounts: the contract, and events waiting in
    // ATL_INBOUND, in the global account.
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("data");
    let mut earlier = NatsServer::start(NatsServerSpec {
        bin: nats_server_bin(),
        host: "127.0.0.1".parse().unwrap(),
        port: None,
        store_dir: data_dir.join("nats"),
        log_file: None,
        config_file: None,
        pid_file: None,
    })
    .unwrap();
    let (ok, out, err) = crate::init::run(&data_dir, &["init", "--nats-url", &earlier.url()]);
    assert!(ok, "init\n{out}\n{err}");
    let generated = toolledger_schemas::generator::generate(&Default::default());
    let waiting: Vec<_> = generated.events[..5].to_vec();
    runtime().block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(earlier.url()).await.unwrap());
        let outgoing =
            toolledger_wire::produce::prepare_all(&waiting, toolledger_wire::Mode::Binary).unwrap();
        assert_eq!(
            toolledger_wire::produce::publish_all(&js, outgoing)
                .await
                .published,
            5
        );
    });
    earlier.stop();

    let bin = nats_server_bin();
    let mut up = ChildProcess::spawn(
        toolledger(),
        ["up"],
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
            ("TOOLLEDGER_NATS__SERVER_BIN", bin.to_str().unwrap()),
            ("TOOLLEDGER_NATS__LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_NATS__TENANTS", "[acme, globex]"),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_API__LISTEN", "127.0.0.1:0"),
        ],
    );
    assert!(
        up.wait_for_output("running;", Duration::from_secs(60)),
        "up did not start\n{}\n{}",
        up.stdout(),
        up.stderr()
    );
    let stdout = up.stdout();
    assert!(
        stdout.contains("moved the streams of an earlier `up`"),
        "{stdout}"
    );
    assert!(
        stdout.contains("accounts and permissions of deploy/nats/single.conf"),
        "{stdout}"
    );
    assert!(stdout.contains("producer_acme, producer_globex"), "{stdout}");
    let url = |user: &str| {
        std::fs::read_to_string(data_dir.join(format!("nats-auth/{user}.url")))
            .unwrap()
            .trim()
            .to_owned()
    };
    let address = url("admin").rsplit_once('@').unwrap().1.to_owned();
    let secret_of = |user: &str| {
        let url = url(user);
        let (credentials, _) = url.trim_start_matches("nats://").rsplit_once('@').unwrap();
        credentials.split_once(':').unwrap().1.to_owned()
    };
    const CANARY: &[u8] = b"{\"canary\":\"up-encrypts-9d1e7b\"}";

    runtime().block_on(async {
        // Nobody gets in without an identity.
        assert!(
            async_nats::connect(address.as_str()).await.is_err(),
            "an anonymous client connected"
        );
        // The events of the earlier store reach the ledger: ingest, as its own identity, appended them.
        let admin = quick(login_at(&address, "admin", &secret_of("admin")).await);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while crate::fixture::stream_state(&admin, "ATL_LEDGER").await.messages < 5 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the adopted events never reached the ledger"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A producer publishes its own tenant's events only; a service only its own kind of record.
        let acme = quick(login_at(&address, "producer_acme", &secret_of("producer_acme")).await);
        assert!(stored(&acme, "atl.in.acme.tool.declared", CANARY).await);
        assert!(
            !stored(&acme, "atl.in.globex.tool.declared", b"{}").await,
            "another tenant"
        );
        assert!(
            !stored(&acme, "atl.in._system.toolledger.erasure.completed", b"{}").await,
            "the ledger's own records"
        );
        let query = quick(login_at(&address, "query", &secret_of("query")).await);
        assert!(
            !stored(&query, "atl.ledger.acme.tool.declared", b"{}").await,
            "the ledger"
        );
    });
    assert!(
        up.terminate(Duration::from_secs(30)).expect("exits").success(),
        "{}",
        up.stderr()
    );

    // JetStream's store is encrypted at rest.
    let store = data_dir.join("nats");
    let plain: Vec<_> = crate::fixture::files(&store)
        .into_iter()
        .filter(|f| std::fs::read(f).is_ok_and(|b| b.windows(CANARY.len()).any(|w| w == CANARY)))
        .collect();
    assert!(plain.is_empty(), "plaintext in the store: {plain:?}");
    assert!(crate::fixture::files(&store).len() > 10, "the store is there");
}
