//! Health that tells the truth: `toolledger serve` and `toolledger project` as processes over a real
//! nats-server and real SQLite files.
//!
//! - The projector stopped: serve's `/healthz` fails, naming it.
//! - The projection's file damaged: serve's `/healthz` fails and its reads, analysts' SQL included,
//!   answer 503 `projection_unavailable` (never 400 or 500); `doctor` names `toolledger rebuild`; the
//!   projector does not exit but fails its own `/healthz` naming it, and once it has run everything is
//!   well again.
//! - NATS frozen (SIGSTOP): reads whose access record cannot be queued answer 503
//!   `audit_unavailable` within a bounded wait instead of hanging, `/healthz` says why, and after
//!   NATS resumes every read that was answered has its record.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;
use toolledger_projector::{Generations, Store};
use toolledger_testkit::{ChildProcess, NatsFixture, append_events, generated};

use crate::query::{Reply, post_sql, request};
use crate::toolledger;

/// The address printed after `marker` (`http://<addr>/…`).
pub(crate) fn printed_addr(process: &mut ChildProcess, marker: &str) -> SocketAddr {
    assert!(
        process.wait_for_output(marker, Duration::from_secs(60)),
        "no `{marker}`\n{}\n{}",
        process.stdout(),
        process.stderr()
    );
    let stdout = process.stdout();
    let line = stdout.lines().find(|l| l.contains(marker)).unwrap();
    let rest = &line[line.find(marker).unwrap() + marker.len()..];
    rest.split('/').next().unwrap().parse().unwrap()
}

fn serve(data_dir: &Path, nats_url: Option<&str>) -> (ChildProcess, SocketAddr) {
    let mut args = vec!["serve", "--insecure-local", "--listen", "127.0.0.1:0"];
    if let Some(url) = nats_url {
        args.extend(["--nats-url", url]);
    }
    let mut serve = ChildProcess::spawn(
        toolledger(),
        &args,
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
        ],
    );
    let addr = printed_addr(&mut serve, "api at http://");
    (serve, addr)
}

fn project(data_dir: &Path, nats_url: &str) -> (ChildProcess, SocketAddr) {
    let mut project = ChildProcess::spawn(
        toolledger(),
        ["project", "--nats-url", nats_url],
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ],
    );
    let addr = printed_addr(&mut project, "metrics at http://");
    (project, addr)
}

/// The current generation's position (0 while there is none or it cannot be read).
fn position(data_dir: &Path) -> u64 {
    Generations::new(data_dir)
        .current()
        .ok()
        .flatten()
        .and_then(|g| Store::open_readonly(&g.database()).ok())
        .and_then(|s| s.position().ok())
        .unwrap_or(0)
}

/// Polls `check` every 100 ms until it holds; panics with `what` after `limit`.
fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(()) => return,
            Err(last) if Instant::now() >= deadline => panic!("{what}: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn health(addr: SocketAddr) -> (u16, Value) {
    let reply = request(addr, "GET", "/healthz", None);
    (reply.status, reply.json())
}

fn component(report: &Value, name: &str) -> (bool, String) {
    let component = &report["components"][name];
    (
        component["ok"].as_bool().unwrap_or(false),
        component["detail"].as_str().unwrap_or_default().to_owned(),
    )
}

fn sql(addr: SocketAddr, statement: &str) -> Reply {
    let body = serde_json::json!({ "sql": statement }).to_string();
    post_sql(addr, None, &body)
}

fn error_code(reply: &Reply) -> String {
    reply.json()["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Damages every page of the projection but the first (the header and the schema): SQLite opens the
/// file, and every read of a table meets garbage. Nothing may have it open, so the write-ahead log
/// is folded in first.
fn damage_projection(data_dir: &Path) {
    let database = Generations::new(data_dir).current().unwrap().unwrap().database();
    // The last connection to close checkpoints the log into the file and removes it.
    drop(Store::open(&database, Default::default()).unwrap());
    assert!(
        !database.with_extension("sqlite-wal").exists(),
        "the write-ahead log is folded into the file"
    );
    let mut bytes = std::fs::read(&database).unwrap();
    let page = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65_536,
        size => usize::from(size),
    };
    assert!(bytes.len() > 2 * page, "a projection of more than one page");
    bytes[page..].fill(0xA5);
    std::fs::write(&database, bytes).unwrap();
}

#[test]
fn a_damaged_projection_or_a_stopped_projector_fails_health_and_reads_answer_503() {
    let nats = NatsFixture::start();
    let data = tempfile::tempdir().unwrap();
    let events = generated(7, 3, &["acme", "globex"]).events;
    let last = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js = jetstream::new(nats.client().await);
        toolledger_testkit::create_ledger(&js).await;
        append_events(&js, &events).await
    });

    let (mut projector, projector_metrics) = project(data.path(), &nats.url());
    eventually(Duration::from_secs(60), "the projector catches up", || {
        let at = position(data.path());
        if at == last {
            Ok(())
        } else {
            Err(format!("at {at} of {last}\n{}", projector.stderr()))
        }
    });
    let (mut server, api) = serve(data.path(), None);
    eventually(
        Duration::from_secs(20),
        "healthy with the projector running",
        || match health(api) {
            (200, _) => Ok(()),
            (status, report) => Err(format!("{status} {report}")),
        },
    );
    assert_eq!(request(api, "GET", "/v1/sessions", None).status, 200);

    // The projector stops: serve says so (its last heartbeat says `stopped`).
    assert!(projector.terminate(Duration::from_secs(30)).unwrap().success());
    let (status, report) = health(api);
    assert_eq!(status, 503, "{report}");
    let (ok, detail) = component(&report, "projector");
    assert!(!ok && detail.contains("start `toolledger project`"), "{report}");
    let metrics = request(api, "GET", "/metrics", None).body;
    assert!(
        metrics.contains("toolledger_health_ok{component=\"projector\"} 0"),
        "{metrics}"
    );
    assert!(server.terminate(Duration::from_secs(30)).unwrap().success());

    // The projection's file is damaged.
    damage_projection(data.path());
    let (mut server, api) = serve(data.path(), None);
    let (status, report) = health(api);
    assert_eq!(status, 503, "{report}");
    let (ok, detail) = component(&report, "projection");
    assert!(!ok && detail.contains("toolledger rebuild"), "{report}");
    for path in ["/v1/sessions", "/v1/invocations?tenant=acme", "/v1/tools"] {
        let reply = request(api, "GET", path, None);
        assert_eq!(reply.status, 503, "{path}: {}", reply.body);
        assert_eq!(error_code(&reply), "projection_unavailable", "{path}");
        assert!(reply.body.contains("toolledger rebuild"), "{}", reply.body);
    }
    // An analyst's statement meets the damage too: the server's fault, not the statement's.
    let reply = sql(api, "SELECT count(*) FROM invocations");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(error_code(&reply), "projection_unavailable");
    let metrics = request(api, "GET", "/metrics", None).body;
    assert!(
        metrics.contains("toolledger_health_ok{component=\"projection\"} 0"),
        "{metrics}"
    );

    // `doctor` finds the damage and names the command.
    let doctor = std::process::Command::new(toolledger())
        .args(["doctor", "--json", "--nats-url", nats.url().as_str()])
        .env("TOOLLEDGER_DATA_DIR", data.path())
        .output()
        .unwrap();
    assert!(!doctor.status.success());
    let checks: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let projection = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "projection")
        .unwrap();
    assert_eq!(projection["status"], "fail", "{projection}");
    assert!(
        projection["detail"].as_str().unwrap().contains("gen-1"),
        "{projection}"
    );
    assert!(
        projection["action"]
            .as_str()
            .unwrap()
            .contains("toolledger rebuild"),
        "{projection}"
    );

    // The projector started on it neither exits nor crash-loops: it says what to run and waits.
    let (mut projector, projector_metrics_now) = project(data.path(), &nats.url());
    assert_ne!(projector_metrics_now, projector_metrics, "a fresh process");
    assert!(
        projector.wait_for_output("run `toolledger rebuild`", Duration::from_secs(30)),
        "{}",
        projector.stderr()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(projector.try_status().is_none(), "exited: {}", projector.stderr());
    let own = toolledger_testkit::http_get(projector_metrics_now, "/healthz").unwrap();
    assert_eq!(own.status, 503, "{}", own.body);
    assert!(own.body.contains("toolledger rebuild"), "{}", own.body);
    let (_, report) = health(api);
    let (ok, detail) = component(&report, "projector");
    assert!(!ok && detail.contains("toolledger rebuild"), "{report}");

    // The rebuild repairs it; the projector and serve follow by themselves.
    let mut rebuild = ChildProcess::spawn(
        toolledger(),
        ["rebuild", "--nats-url", nats.url().as_str()],
        &[("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap())],
    );
    let status = rebuild
        .wait_timeout(Duration::from_secs(120))
        .expect("rebuild ends");
    assert!(status.success(), "{}\n{}", rebuild.stdout(), rebuild.stderr());
    eventually(
        Duration::from_secs(30),
        "healthy after the rebuild",
        || match health(api) {
            (200, _) => Ok(()),
            (status, report) => Err(format!("{status} {report}")),
        },
    );
    assert_eq!(
        toolledger_testkit::http_get(projector_metrics_now, "/healthz")
            .unwrap()
            .status,
        200
    );
    assert_eq!(request(api, "GET", "/v1/sessions", None).status, 200);
    let reply = sql(api, "SELECT count(*) FROM invocations");
    assert_eq!(reply.status, 200, "{}", reply.body);
    // A statement that is wrong is still the caller's fault.
    let reply = sql(api, "SELECT * FROM no_such_table");
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(error_code(&reply), "sql_invalid");

    assert!(projector.terminate(Duration::from_secs(30)).unwrap().success());
    assert!(server.terminate(Duration::from_secs(30)).unwrap().success());
}

/// Messages in ATL_INBOUND: the access records serve published (no ingest runs here).
/// Distinct access records in ATL_INBOUND, by CloudEvents id: the inbox dedupes nothing, so a
/// publish retried after its ack was lost to the frozen server may be stored twice (ingest drops the
/// second by identity).
async fn inbound(js: &jetstream::Context) -> u64 {
    let mut stream = js.get_stream(toolledger_wire::streams::INBOUND).await.unwrap();
    let state = stream.info().await.unwrap().state.clone();
    let mut ids = std::collections::HashSet::new();
    for seq in state.first_sequence..=state.last_sequence {
        if state.messages == 0 {
            break;
        }
        if let Ok(message) = stream.get_raw_message(seq).await {
            let body: Value = serde_json::from_slice(&message.payload).unwrap_or(Value::Null);
            ids.insert(
                body["id"]
                    .as_str()
                    .map_or_else(|| format!("seq {seq}"), str::to_owned),
            );
        }
    }
    ids.len() as u64
}

#[test]
fn reads_whose_access_record_cannot_be_written_answer_503_in_bounded_time() {
    let nats = NatsFixture::start();
    let data = tempfile::tempdir().unwrap();
    let (ok, out, err) = crate::init::run(data.path(), &["init", "--nats-url", &nats.url()]);
    assert!(ok, "{out}\n{err}");
    // A projection to read, written by the projector's own store.
    let events = generated(3, 2, &["acme"]).events;
    let generation = Generations::new(data.path()).current_or_init().unwrap();
    let mut store = Store::open(&generation.database(), Default::default()).unwrap();
    let batch: Vec<_> = events
        .iter()
        .zip(1..)
        .map(|(event, seq)| toolledger_projector::RawEntry {
            seq,
            bytes: toolledger_testkit::entry_bytes(event),
        })
        .collect();
    store.apply_batch(&batch).unwrap();
    drop(store);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let js = runtime.block_on(async { jetstream::new(nats.client().await) });
    let (mut server, api) = serve(data.path(), Some(&nats.url()));
    let read = || request(api, "GET", "/v1/sessions?limit=1&tenant=acme", None);
    assert_eq!(read().status, 200);
    // What one read leaves in the ledger's inbox: its records, once they stop coming.
    let mut seen = 0;
    eventually(Duration::from_secs(20), "the first read is recorded", || {
        let now = runtime.block_on(inbound(&js));
        let settled = now > 0 && now == seen;
        seen = now;
        std::thread::sleep(Duration::from_millis(500));
        if settled {
            Ok(())
        } else {
            Err(format!("{now} records"))
        }
    });
    let per_read = seen;
    let (_, report) = health(api);
    assert!(component(&report, "access_log").0, "{report}");

    // NATS frozen: records queue up until the queue is full, then a read waits a bounded time and
    // is refused rather than answered unrecorded.
    nats.pause();
    let mut answered = 0u64;
    let refused = loop {
        let started = Instant::now();
        let reply = read();
        if reply.status == 200 {
            answered += 1;
            assert!(answered < 5_000, "reads never refused with NATS frozen");
            continue;
        }
        break (reply, started.elapsed());
    };
    let (reply, waited) = refused;
    println!("{answered} reads answered with NATS frozen; the next refused after {waited:?}");
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(error_code(&reply), "audit_unavailable", "{}", reply.body);
    assert!(waited < Duration::from_secs(15), "refused after {waited:?}");
    let (status, report) = health(api);
    assert_eq!(status, 503, "{report}");
    let (ok, detail) = component(&report, "access_log");
    assert!(!ok && detail.contains("not published"), "{report}");
    let metrics = request(api, "GET", "/metrics", None).body;
    assert!(
        metrics.contains("toolledger_health_ok{component=\"access_log\"} 0"),
        "{metrics}"
    );

    // NATS back: reads are served again, and every read that was answered has its record.
    nats.resume();
    let mut after = 0u64;
    eventually(Duration::from_secs(90), "reads served again", || {
        let reply = read();
        if reply.status == 200 {
            after += 1;
            Ok(())
        } else {
            Err(reply.body)
        }
    });
    // Every answered read's records; the refused read may have queued some of its own before the
    // queue stayed full, never all.
    let expected = per_read * (1 + answered + after);
    eventually(
        Duration::from_secs(90),
        "every answered read recorded",
        || match runtime.block_on(inbound(&js)) {
            n if n >= expected && n < expected + per_read => Ok(()),
            n => Err(format!(
                "{n} records, {per_read} for each of {} reads",
                1 + answered + after
            )),
        },
    );
    let (_, report) = health(api);
    assert!(component(&report, "access_log").0, "{report}");
    assert!(server.terminate(Duration::from_secs(60)).unwrap().success());
}
