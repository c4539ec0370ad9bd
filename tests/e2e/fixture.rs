//! What the tests that run the whole system share: `toolledger up` on the query tests'
//! configuration (loopback ports, an admin and an acme token), events published to it and waited for
//! until ingest has appended them and the projector has caught up, a stream's state, one-column
//! queries of the projection, files that hold a needle, and JSON from a Python (pyarrow) script.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;
use toolledger_testkit::{ChildProcess, python};
use toolledger_wire::Mode;

use crate::query::{after, config_file};
use crate::toolledger;

/// A running `toolledger up` and where to reach it.
pub(crate) struct Up {
    /// The `up` process (stdout holds its progress lines, stderr its logs).
    pub(crate) child: ChildProcess,
    /// The `/v1` API.
    pub(crate) api: SocketAddr,
    /// Its nats-server, as the admin identity `up` made (`<data_dir>/nats-auth/admin.url`).
    pub(crate) nats_url: String,
    /// The configuration file it runs on.
    pub(crate) config: PathBuf,
    /// Its data directory.
    pub(crate) data: PathBuf,
}

impl Up {
    /// Starts `up` in `dir` on [`config_file`] with `extra` TOML appended (tables the base file does
    /// not have, such as `[ledger]`), and `env` set; waits until it says it is running.
    pub(crate) fn start(dir: &Path, extra: &str, env: &[(&str, &str)]) -> Self {
        let config = config_file(dir);
        if !extra.is_empty() {
            let mut text = std::fs::read_to_string(&config).unwrap();
            text.push_str(extra);
            std::fs::write(&config, text).unwrap();
        }
        let mut child = ChildProcess::spawn(toolledger(), ["--config", config.to_str().unwrap(), "up"], env);
        assert!(
            child.wait_for_output("running;", Duration::from_secs(60)),
            "up did not start\n{}\n{}",
            child.stdout(),
            child.stderr()
        );
        let stdout = child.stdout();
        let api = after(&stdout, "api at http://", "/").parse().unwrap();
        let nats_url = admin_url(&dir.join("data"));
        Self {
            child,
            api,
            nats_url,
            config,
            data: dir.join("data"),
        }
    }

    /// Publishes `events` in `mode` and waits until ATL_INBOUND is drained (ingest has appended or
    /// quarantined each) and the projection has caught up with the ledger; returns the ledger's last
    /// sequence.
    pub(crate) fn publish(&self, events: &[Value], mode: Mode) -> u64 {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let ledger = runtime.block_on(async {
            let js = async_nats::jetstream::new(
                toolledger_wire::connect::connect(&self.nats_url, "e2e")
                    .await
                    .unwrap(),
            );
            let outgoing = toolledger_wire::produce::prepare_all(events, mode).unwrap();
            let report = toolledger_wire::produce::publish_all(&js, outgoing).await;
            assert!(report.failed.is_empty(), "{:?}", report.failed);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while stream_state(&js, "ATL_INBOUND").await.messages > 0 {
                assert!(tokio::time::Instant::now() < deadline, "ingest stalled");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            stream_state(&js, "ATL_LEDGER").await.last_sequence
        });
        wait_projected(&self.data, ledger);
        ledger
    }

    /// Stops `up` (SIGTERM) and checks that it exits cleanly.
    pub(crate) fn stop(mut self) -> ChildProcess {
        let stopped = self.child.terminate(Duration::from_secs(30)).expect("up stops");
        assert!(stopped.success(), "{}", self.child.stderr());
        self.child
    }
}

/// The admin identity's URL of the local nats-server `up` runs for the data directory `data`.
pub(crate) fn admin_url(data: &Path) -> String {
    std::fs::read_to_string(data.join("nats-auth/admin.url"))
        .expect("up writes its identities' URLs")
        .trim()
        .to_owned()
}

/// Waits until the current projection in `data` has applied the ledger up to `position`.
pub(crate) fn wait_projected(data: &Path, position: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let applied = toolledger_projector::Generations::new(data)
            .current()
            .unwrap()
            .map_or(0, |g| {
                toolledger_projector::Store::open_readonly(&g.database())
                    .unwrap()
                    .position()
                    .unwrap()
            });
        if applied >= position {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "projector stalled at {applied} of {position}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The rows of a one-column query over the current projection in `data`.
pub(crate) fn projected(data: &Path, sql: &str) -> Vec<String> {
    let generation = toolledger_projector::Generations::new(data)
        .current()
        .unwrap()
        .unwrap();
    let store = toolledger_projector::Store::open_readonly(&generation.database()).unwrap();
    let mut statement = store.connection().prepare(sql).unwrap();
    statement
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The state of the stream `name`.
pub(crate) async fn stream_state(js: &jetstream::Context, name: &str) -> jetstream::stream::State {
    let mut stream = js.get_stream(name).await.unwrap();
    stream.info().await.unwrap().state.clone()
}

/// Every file under `dir`, at any depth.
pub(crate) fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// Every file under `dir` whose bytes contain `needle`.
pub(crate) fn files_with(dir: &Path, needle: impl AsRef<[u8]>) -> Vec<PathBuf> {
    let needle = needle.as_ref();
    files(dir)
        .into_iter()
        .filter(|file| {
            std::fs::read(file)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
        })
        .collect()
}

/// What the Python `script` (the checkout's `.venv`, which has pyarrow) prints as JSON when run with
/// `args`; the test fails when it fails.
pub(crate) fn python_json(script: &str, args: &[&str]) -> Value {
    let output = std::process::Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// splitmix64: the fault tests' replayable delays and choices, from the seed they print.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A delay in `[low_ms, high_ms)`.
    pub(crate) fn between(&mut self, low_ms: u64, high_ms: u64) -> Duration {
        Duration::from_millis(low_ms + self.next_u64() % (high_ms - low_ms))
    }
}

/// The fault tests' seed: `TOOLLEDGER_FAULT_SEED` replays a run, else the clock's.
pub(crate) fn fault_seed() -> u64 {
    std::env::var("TOOLLEDGER_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}
