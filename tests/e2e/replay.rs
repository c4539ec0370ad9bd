//! `toolledger replay`: a session comes back in ledger order with its original relative timing
//! (scaled), as NDJSON, and re-published only under `atl.replay.<tenant>.>`.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use toolledger_testkit::{ChildProcess, NatsFixture};

use crate::toolledger;

/// Offsets (ms) of the session's events from its first; the last comes in ledger order although its
/// time is earlier than the one before it.
const OFFSETS_MS: [i64; 6] = [0, 200, 400, 1000, 1600, 1500];
/// A released event may be late by this much (reading it from the ledger, a busy machine); never early.
const TOLERANCE_MS: f64 = 250.0;

fn session_events() -> Vec<Value> {
    let start = chrono::DateTime::parse_from_rfc3339("2026-05-08T09:00:00Z").unwrap();
    OFFSETS_MS
        .iter()
        .enumerate()
        .map(|(i, offset)| {
            let time = (start + chrono::Duration::milliseconds(*offset)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            json!({"specversion": "1.0", "id": format!("replay-{i}"), "source": "urn:replay-test",
                "type": "tool.invocation.progress", "tenant": "acme", "subject": "inv-r", "invocationid": "inv-r",
                "sessionid": "sess-replay", "time": time,
                "data": {"schema_version": "0.2.0", "progress_id": format!("p-{i}"), "invocation_id": "inv-r",
                    "status": "running", "sequence": i, "message": format!("step {i}"), "timestamp": time}})
        })
        .collect()
}

fn replay(data: &std::path::Path, url: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec![
        "replay",
        "--nats-url",
        url,
        "--tenant",
        "acme",
        "--session",
        "sess-replay",
    ];
    args.extend_from_slice(extra);
    let mut child = ChildProcess::spawn(
        toolledger(),
        args,
        &[
            ("TOOLLEDGER_DATA_DIR", data.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
        ],
    );
    let status = child
        .wait_timeout(Duration::from_secs(60))
        .expect("replay finishes");
    (status.code(), child.stdout(), child.stderr())
}

#[test]
fn a_session_replays_in_order_with_its_timing_and_republishes_only_under_atl_replay() {
    let nats = NatsFixture::start();
    let url = nats.url();
    let data = tempfile::tempdir().unwrap();
    let env = [
        ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
        ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
        ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
    ];
    let mut init = ChildProcess::spawn(toolledger(), ["init", "--nats-url", url.as_str()], &env);
    assert!(
        init.wait_timeout(Duration::from_secs(60)).unwrap().success(),
        "{}",
        init.stderr()
    );
    let _ingest = ChildProcess::spawn(toolledger(), ["ingest", "--nats-url", url.as_str()], &env);
    let _project = ChildProcess::spawn(toolledger(), ["project", "--nats-url", url.as_str()], &env);
    let events = session_events();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = runtime.block_on(nats.client());
    runtime.block_on(async {
        let js = async_nats::jetstream::new(client.clone());
        let outgoing = toolledger_wire::produce::prepare_all(&events, toolledger_wire::Mode::Binary).unwrap();
        let report = toolledger_wire::produce::publish_all(&js, outgoing).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);
    });
    // Wait until the projection holds the session.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let projected = toolledger_projector::Generations::new(data.path())
            .current()
            .unwrap()
            .and_then(|g| toolledger_projector::Store::open_readonly(&g.database()).ok())
            .map(|s| s.position().unwrap())
            .unwrap_or(0);
        if projected >= events.len() as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "projection at {projected}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Speed 2: the original gaps halved, ledger order kept.
    let received = runtime.block_on(client.subscribe("atl.replay.acme.>")).unwrap();
    let (code, out, err) = replay(data.path(), &url, &["--speed", "2", "--publish"]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ids: Vec<&str> = lines.iter().map(|l| l["event"]["id"].as_str().unwrap()).collect();
    assert_eq!(ids, (0..6).map(|i| format!("replay-{i}")).collect::<Vec<_>>());
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let mut previous = 0_f64;
    for (line, offset) in lines.iter().zip(OFFSETS_MS) {
        // Offsets never go back: the last event, earlier in time, comes right after the one before.
        let expected = (offset as f64 / 2.0).max(previous);
        // Measured from the replay's start: the release waits for its time, then reads the entry.
        let actual = line["offset_ms"].as_f64().unwrap();
        assert!(
            actual >= expected && actual <= expected + TOLERANCE_MS,
            "event {} released at {actual:.0} ms, expected {expected:.0} ms (+{TOLERANCE_MS} ms)",
            line["event"]["id"]
        );
        previous = expected;
        assert_eq!(line["leaf_hash"].as_str().unwrap().len(), 64);
    }
    let republished: Vec<async_nats::Message> =
        runtime.block_on(async { received.take(6).collect::<Vec<_>>().await });
    assert!(
        republished
            .iter()
            .all(|m| m.subject.as_str() == "atl.replay.acme.tool.invocation.progress")
    );

    // As fast as possible: the same events at once.
    let (code, out, _) = replay(data.path(), &url, &["--speed", "0"]);
    assert_eq!(code, Some(0));
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert!(last["offset_ms"].as_f64().unwrap() < 500.0, "{last}");

    // Re-publication anywhere else is refused before anything is read or sent.
    for subject in [
        "atl.in.acme",
        "atl.replay.globex",
        "atl.replay.acme.>",
        "atl.replay.acmex",
        "atl.ledger.acme",
    ] {
        let (code, out, err) = replay(
            data.path(),
            &url,
            &["--speed", "0", "--publish", "--subject", subject],
        );
        assert_eq!(code, Some(1), "{subject}");
        assert!(
            out.is_empty() && err.contains("atl.replay.acme.>"),
            "{subject}: {err}"
        );
    }
    let (code, _, err) = replay(data.path(), &url, &["--speed=-1"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("speed"), "{err}");
}
