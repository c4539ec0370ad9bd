//! `toolledger erase` end to end: ingest and the projector running as processes, erasable inputs and
//! results offloaded, then an invocation's content erased — refused inside the legal hold, done once
//! forced by the clock — and afterwards found nowhere (blobs, projection, quarantine, a rebuild) while
//! `verify` passes and the other invocation keeps its content. Retention then erases what is past its
//! maximum age on a clock the test sets.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::{Value, json};
use toolledger_testkit::{ChildProcess, NatsFixture};

use crate::fixture::{files_with, projected, stream_state};
use crate::toolledger;

const ERASE_ME: &str = "erase-me-7d1c5e";
const KEEP_ME: &str = "keep-me-93ab0f";

fn config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("toolledger.toml");
    std::fs::write(
        &path,
        format!(
            r#"data_dir = "{data}"
[telemetry]
metrics_listen = "127.0.0.1:0"
log_filter = "warn"
log_format = "text"
[nats]
server_bin = "nats-server"
listen = "127.0.0.1:4222"
[payloads]
erasable_paths = ["/data/model_input", "/data/observable_input", "/data/call_input", "/data/content"]
[retention]
default = {{ min_days = 7, max_days = 30 }}
"#,
            data = dir.join("data").display()
        ),
    )
    .unwrap();
    path
}

fn tool(config: &Path, args: &[&str]) -> (bool, String) {
    let mut child = ChildProcess::spawn(
        toolledger(),
        args,
        &[("TOOLLEDGER_CONFIG", config.to_str().unwrap())],
    );
    let status = child
        .wait_timeout(Duration::from_secs(120))
        .expect("the tool finishes");
    (status.success(), format!("{}{}", child.stdout(), child.stderr()))
}

/// `toolledger erase` of acme's `invocation` for `reason`, with `extra` flags.
fn erase_invocation(
    config: &Path,
    url: &str,
    invocation: &str,
    reason: &str,
    extra: &[&str],
) -> (bool, String) {
    let mut args = vec![
        "erase",
        "--nats-url",
        url,
        "--tenant",
        "acme",
        "--invocation",
        invocation,
        "--reason",
        reason,
    ];
    args.extend_from_slice(extra);
    tool(config, &args)
}

/// `toolledger <name> --nats-url <url>` (a service: `ingest`, `project`) on `config`.
fn service(config: &Path, url: &str, name: &str) -> ChildProcess {
    ChildProcess::spawn(
        toolledger(),
        [name, "--nats-url", url],
        &[("TOOLLEDGER_CONFIG", config.to_str().unwrap())],
    )
}

/// What each test runs on: a nats-server with the contract `init` makes for acme, the configuration
/// ingest and the projector run on ([`service`]), and a client of the server.
struct Running {
    _nats: NatsFixture,
    _dir: tempfile::TempDir,
    config: PathBuf,
    data: PathBuf,
    url: String,
    runtime: tokio::runtime::Runtime,
    js: jetstream::Context,
}

impl Running {
    fn start() -> Self {
        let nats = NatsFixture::start();
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let url = nats.url();
        let (ok, out) = tool(&config, &["init", "--nats-url", &url, "--tenant", "acme"]);
        assert!(ok, "{out}");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let js = runtime.block_on(async { jetstream::new(nats.client().await) });
        Self {
            data: dir.path().join("data"),
            _nats: nats,
            _dir: dir,
            config,
            url,
            runtime,
            js,
        }
    }
}

fn event(id: &str, class: &str, invocation: &str, data: Value) -> Value {
    json!({"specversion": "1.0", "id": id, "source": "urn:erase-test", "type": class, "tenant": "acme",
        "subject": invocation, "invocationid": invocation, "sessionid": "sess-erase",
        "time": "2026-05-08T09:00:00Z", "data": data})
}

/// A planned invocation and its result, carrying `marker` in inputs and content.
fn invocation(invocation: &str, marker: &str) -> Vec<Value> {
    vec![
        event(
            &format!("{invocation}-planned"),
            "tool.invocation.planned",
            invocation,
            json!({
            "schema_version": "0.2.0", "invocation_id": invocation, "tool_id": "notes.write",
            "session_id": "sess-erase", "status": "planned", "created_at": "2026-05-08T09:00:00Z",
            "model_input": {"note": format!("{marker} model")}, "call_input": {"note": format!("{marker} call")}}),
        ),
        event(
            &format!("{invocation}-result"),
            "tool.result.created",
            invocation,
            json!({
            "schema_version": "0.2.0", "result_id": format!("{invocation}-res"), "invocation_id": invocation,
            "status": "succeeded", "is_error": false, "created_at": "2026-05-08T09:00:01Z",
            "content": [{"type": "text", "text": format!("{marker} result")}]}),
        ),
    ]
}

async fn stream_messages(js: &jetstream::Context, name: &str) -> u64 {
    stream_state(js, name).await.messages
}

/// Waits until the projection's erasures table holds `count` rows.
fn wait_projected_erasures(data: &Path, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = toolledger_projector::Generations::new(data)
            .current()
            .unwrap()
            .and_then(|g| toolledger_projector::Store::open_readonly(&g.database()).ok())
            .and_then(|store| {
                store
                    .connection()
                    .query_row("SELECT count(*) FROM erasures", [], |r| r.get::<_, i64>(0))
                    .ok()
            });
        if found == Some(count) {
            return;
        }
        assert!(Instant::now() < deadline, "the projection has {found:?} erasures");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn erased_content_is_nowhere_yet_the_ledger_verifies_and_retention_follows_the_clock() {
    let running = Running::start();
    let (config, data, url) = (running.config.clone(), running.data.clone(), running.url.clone());
    let (runtime, js) = (&running.runtime, running.js.clone());
    let mut ingest = service(&config, &url, "ingest");
    let mut project = service(&config, &url, "project");
    let mut events = invocation("inv-erase", ERASE_ME);
    events.extend(invocation("inv-keep", KEEP_ME));
    // A rejected copy of the erased invocation's event (no tool_id type): its original is quarantined.
    let mut rejected = events[0].clone();
    rejected["id"] = json!("inv-erase-rejected");
    rejected["data"]["tool_id"] = json!(42);
    // And one of another invocation whose id merely starts with the erased one's: it stays.
    let mut neighbour = rejected.clone();
    neighbour["id"] = json!("inv-erase-2-rejected");
    neighbour["subject"] = json!("inv-erase-2");
    neighbour["invocationid"] = json!("inv-erase-2");
    neighbour["data"]["invocation_id"] = json!("inv-erase-2");
    neighbour["data"]["model_input"] = json!({"note": "neighbour"});
    neighbour["data"]["call_input"] = json!({"note": "neighbour"});
    events.push(rejected);
    events.push(neighbour);
    runtime.block_on(async {
        let outgoing = toolledger_wire::produce::prepare_all(&events, toolledger_wire::Mode::Binary).unwrap();
        let report = toolledger_wire::produce::publish_all(&js, outgoing).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        let deadline = Instant::now() + Duration::from_secs(60);
        while stream_messages(&js, "ATL_LEDGER").await < 6 {
            assert!(Instant::now() < deadline, "{}", ingest.stderr());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(stream_messages(&js, "ATL_QUARANTINE").await, 2);
    });
    assert!(
        !files_with(&data.join("blobs"), ERASE_ME).is_empty(),
        "inputs and content were offloaded"
    );
    let (ok, out) = tool(&config, &["verify", "--nats-url", &url]);
    assert!(
        ok && out.contains("6 payload commitments checked (0 erased)"),
        "{out}"
    );

    // Inside the 7-day legal hold: refused, nothing deleted.
    let erase = |extra: &[&str]| {
        let by = ["--authority", "DPO ticket 12", "--actor", "dpo"];
        erase_invocation(
            &config,
            &url,
            "inv-erase",
            "data-subject request 12",
            &[&by[..], extra].concat(),
        )
    };
    let (ok, out) = erase(&[]);
    assert!(!ok && out.contains("legal hold"), "{out}");
    assert!(!files_with(&data.join("blobs"), ERASE_ME).is_empty());

    // An admin forces it.
    let (ok, out) = erase(&["--force"]);
    assert!(
        ok && out.contains("erased 3 blobs") && out.contains("recorded at ledger seq"),
        "{out}\n{}",
        ingest.stderr()
    );
    let (ok, out) = erase(&["--force"]);
    assert!(ok && out.contains("nothing left to erase"), "idempotent: {out}");
    wait_projected_erasures(&data, 1);

    assert_eq!(
        files_with(&data.join("blobs"), ERASE_ME),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(
        files_with(&data.join("projections"), ERASE_ME),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(
        !files_with(&data.join("blobs"), KEEP_ME).is_empty(),
        "the other invocation keeps its content"
    );
    runtime.block_on(async {
        assert_eq!(
            stream_messages(&js, "ATL_QUARANTINE").await,
            1,
            "the rejected copy is gone too, its neighbour's stays"
        );
    });
    let (ok, out) = tool(&config, &["verify", "--nats-url", &url]);
    assert!(
        ok && out.contains("6 payload commitments checked (3 erased)"),
        "{out}"
    );

    // The invocation still reconstructs: its timeline intact, its payloads marked erased.
    let (ok, out) = tool(&config, &["show", "inv-erase", "--tenant", "acme", "--json"]);
    assert!(ok, "{out}");
    let shown: Value = serde_json::from_str(&out[out.find('{').unwrap()..=out.rfind('}').unwrap()]).unwrap();
    let statuses: Vec<&str> = shown["payloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["erased", "erased", "erased"], "{out}");
    assert!(!out.contains(ERASE_ME), "{out}");
    let (ok, out) = tool(
        &config,
        &[
            "show",
            "inv-keep",
            "--tenant",
            "acme",
            "--json",
            "--payloads",
            "content",
        ],
    );
    assert!(ok && out.contains(KEEP_ME), "{out}");

    // A rebuild brings nothing back: the content was only ever in the blobs.
    let stopped = project
        .terminate(Duration::from_secs(30))
        .expect("projector stops");
    assert!(stopped.success(), "{}", project.stderr());
    let (ok, out) = tool(&config, &["rebuild", "--nats-url", &url]);
    assert!(ok, "{out}");
    assert_eq!(
        files_with(&data.join("projections"), ERASE_ME),
        Vec::<std::path::PathBuf>::new()
    );
    let store = toolledger_projector::Store::open_readonly(
        &toolledger_projector::Generations::new(&data)
            .current()
            .unwrap()
            .unwrap()
            .database(),
    )
    .unwrap();
    let erased: i64 = store
        .connection()
        .query_row(
            "SELECT count(*) FROM erased_blobs WHERE tenant = 'acme'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(erased, 3);

    // Retention on the test's clock: 10 days on nothing is past 30 days; 40 days on the rest goes.
    let in_days = |days: i64| (chrono::Utc::now() + chrono::Duration::days(days)).to_rfc3339();
    let (ok, out) = tool(
        &config,
        &["erase", "--nats-url", &url, "--retention", "--now", &in_days(10)],
    );
    assert!(ok && out.contains("nothing left to erase"), "{out}");
    assert!(!files_with(&data.join("blobs"), KEEP_ME).is_empty());
    let (ok, out) = tool(
        &config,
        &["erase", "--nats-url", &url, "--retention", "--now", &in_days(40)],
    );
    assert!(ok && out.contains("erased 3 blobs"), "{out}");
    assert_eq!(
        files_with(&data.join("blobs"), KEEP_ME),
        Vec::<std::path::PathBuf>::new()
    );
    let (ok, out) = tool(&config, &["verify", "--nats-url", &url]);
    assert!(
        ok && out.contains("6 payload commitments checked (6 erased)"),
        "{out}"
    );

    let stopped = ingest.terminate(Duration::from_secs(30)).expect("ingest stops");
    assert!(stopped.success(), "{}", ingest.stderr());
}

const FORGED_AWAY: &str = "forged-away-4b2e91";

/// A `toolledger.erasure.completed` (or, for `access`, a `toolledger.access.read`) of `tenant`
/// claiming acme's `blobs` are erased: what a forger writes.
fn forged_record(id: &str, tenant: &str, blobs: &[String], access: bool) -> Value {
    let (class, data) = if access {
        (
            "toolledger.access.read",
            json!({"access_id": id, "principal": "mallory", "endpoint": "GET /v1/invocations/{invocation_id}",
                "tenant": "acme", "invocation_ids": ["inv-forged"], "read_at": "2026-05-08T09:00:02Z"}),
        )
    } else {
        (
            "toolledger.erasure.completed",
            json!({"erasure_id": id, "tenant": "acme", "blob_ids": blobs, "invocation_ids": ["inv-forged"],
                "reason": "data-subject request 99", "authority": "DPO ticket 99", "requested_by": "dpo",
                "completed_at": "2026-05-08T09:00:02Z"}),
        )
    };
    json!({"specversion": "1.0", "id": id, "source": "toolledger/erase", "type": class, "tenant": tenant,
        "subject": id, "time": "2026-05-08T09:00:02Z", "datacontenttype": "application/json", "data": data})
}

#[test]
fn a_forged_erasure_record_cannot_stop_a_real_erasure_nor_enter_the_projection() {
    let running = Running::start();
    let (config, data, url) = (running.config.clone(), running.data.clone(), running.url.clone());
    let (runtime, js) = (&running.runtime, running.js.clone());
    let mut ingest = service(&config, &url, "ingest");
    let mut project = service(&config, &url, "project");
    let wait_ledger = |ingest: &ChildProcess, count: u64| {
        runtime.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(60);
            while stream_messages(&js, "ATL_LEDGER").await < count {
                assert!(Instant::now() < deadline, "{}", ingest.stderr());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    };
    runtime.block_on(async {
        let events = invocation("inv-forged", FORGED_AWAY);
        let outgoing = toolledger_wire::produce::prepare_all(&events, toolledger_wire::Mode::Binary).unwrap();
        let report = toolledger_wire::produce::publish_all(&js, outgoing).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);
    });
    wait_ledger(&ingest, 2);
    let blobs: Vec<String> = runtime.block_on(async {
        let tail = toolledger_ledger::last_sequence(&js, "ATL_LEDGER").await.unwrap();
        toolledger_ledger::read_range(&js, "ATL_LEDGER", 1, tail)
            .await
            .unwrap()
            .into_iter()
            .flat_map(|(_, bytes)| {
                toolledger_wire::LedgerEntry::parse(&bytes)
                    .unwrap()
                    .ledger
                    .payload_refs
            })
            .map(|payload| payload.blob_id)
            .collect()
    });
    assert_eq!(blobs.len(), 3, "inputs and content offloaded");

    // A `_system` record published straight to ingest, as anyone can where NATS has no accounts
    // (`toolledger up`): ingest takes it, it is the ledger's own tenant.
    runtime.block_on(async {
        let record = forged_record("erasure-forged-system", "_system", &blobs, false);
        js.publish(
            "atl.in._system.toolledger.erasure.completed",
            serde_json::to_vec(&record).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    });
    wait_ledger(&ingest, 3);
    // An old ledger: records of the ledger's classes under the producer tenant, from before ingest
    // refused them, appended while ingest is stopped (it is the single writer).
    let stopped = ingest.terminate(Duration::from_secs(30)).expect("ingest stops");
    assert!(stopped.success(), "{}", ingest.stderr());
    runtime.block_on(async {
        for record in [
            forged_record("erasure-forged-acme", "acme", &blobs, false),
            forged_record("access-forged-acme", "acme", &blobs, true),
        ] {
            js.publish(
                toolledger_testkit::ledger_subject(&record),
                toolledger_testkit::entry_bytes(&record).into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        }
    });
    let mut ingest = service(&config, &url, "ingest");
    assert_eq!(
        files_with(&data.join("blobs"), FORGED_AWAY).len(),
        3,
        "the records lie: every blob is still there"
    );

    let erase_forged = || {
        erase_invocation(
            &config,
            &url,
            "inv-forged",
            "data-subject request 13",
            &["--force"],
        )
    };
    let (ok, out) = erase_forged();
    assert!(
        ok && out.contains("3 blobs an earlier erasure record names are still in the blob store")
            && out.contains("erased 3 blobs")
            && out.contains("recorded at ledger seq"),
        "{out}\n{}",
        ingest.stderr()
    );
    assert_eq!(
        files_with(&data.join("blobs"), FORGED_AWAY),
        Vec::<std::path::PathBuf>::new()
    );
    let (ok, out) = erase_forged();
    assert!(
        ok && out.contains("nothing left to erase"),
        "now it is true: {out}"
    );

    // The projection applies the ledger's own records only from the ledger: the `_system` forgery
    // and the real record, not the producer tenant's.
    wait_projected_erasures(&data, 2);
    let mut erasures = projected(&data, "SELECT erasure_id FROM erasures ORDER BY seq");
    assert_eq!(erasures.remove(0), "erasure-forged-system");
    assert!(erasures[0].starts_with("erasure-"), "{erasures:?}");
    assert!(projected(&data, "SELECT access_id FROM access_reads").is_empty());
    let problems = projected(
        &data,
        "SELECT event_id || ': ' || problem FROM events
         WHERE class LIKE 'toolledger.%' AND problem IS NOT NULL ORDER BY seq",
    );
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0]
            .starts_with("erasure-forged-acme: `toolledger.erasure.completed` is the ledger's own class"),
        "{problems:?}"
    );
    assert!(problems[1].starts_with("access-forged-acme: "), "{problems:?}");

    for child in [&mut ingest, &mut project] {
        let stopped = child.terminate(Duration::from_secs(30)).expect("it stops");
        assert!(stopped.success(), "{}", child.stderr());
    }
}
