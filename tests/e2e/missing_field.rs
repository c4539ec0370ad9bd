//! The accept-and-flag rule end to end: only what the official Agent Tool schemas require may refuse
//! an event. A permission request (an object only the ledger's schema defines) without the fields that
//! schema expects goes through `toolledger ingest` into the ledger, and `toolledger project` moves its
//! invocation to `awaiting_approval` with one `missing_field` anomaly per absent field.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::{Value, json};
use toolledger_testkit::{ChildProcess, NatsFixture};

use crate::toolledger;

fn event(id: &str, class: &str, invocation: &str, data: Value) -> Value {
    json!({"specversion": "1.0", "id": id, "source": "urn:missing-field-test", "type": class,
        "tenant": "acme", "subject": invocation, "invocationid": invocation,
        "time": "2026-05-08T09:00:00Z", "data": data})
}

fn planned(invocation: &str) -> Value {
    event(
        &format!("{invocation}-planned"),
        "tool.invocation.planned",
        invocation,
        json!({"schema_version": "0.2.0", "invocation_id": invocation, "tool_id": "fs.delete",
            "status": "planned", "created_at": "2026-05-08T09:00:00Z"}),
    )
}

#[test]
fn a_permission_request_without_its_ledger_fields_is_kept_and_flagged_missing_field() {
    let nats = NatsFixture::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let url = nats.url();
    let env = [
        ("TOOLLEDGER_DATA_DIR", data.to_str().unwrap()),
        ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
    ];
    let mut init = ChildProcess::spawn(
        toolledger(),
        ["init", "--nats-url", &url, "--tenant", "acme"],
        &env,
    );
    let status = init.wait_timeout(Duration::from_secs(60)).expect("init ends");
    assert!(status.success(), "{}{}", init.stdout(), init.stderr());
    let mut ingest = ChildProcess::spawn(toolledger(), ["ingest", "--nats-url", url.as_str()], &env);
    let mut project = ChildProcess::spawn(toolledger(), ["project", "--nats-url", url.as_str()], &env);

    let events = vec![
        planned("inv-ask"),
        // Everything but permission_input.
        event(
            "inv-ask-requested",
            "tool.permission.requested",
            "inv-ask",
            json!({"schema_version": "0.2.0", "decision_id": "dec-ask", "invocation_id": "inv-ask",
                "tool_id": "fs.delete", "requested_at": "2026-05-08T09:00:01Z"}),
        ),
        planned("inv-bare"),
        // Nothing the ledger's schema expects: the envelope alone names the invocation.
        event(
            "inv-bare-requested",
            "tool.permission.requested",
            "inv-bare",
            json!({"schema_version": "0.2.0", "mode": "default"}),
        ),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ledger_size = runtime.block_on(async {
        let js = jetstream::new(nats.client().await);
        let outgoing = toolledger_wire::produce::prepare_all(&events, toolledger_wire::Mode::Binary).unwrap();
        let report = toolledger_wire::produce::publish_all(&js, outgoing).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut ledger = js.get_stream("ATL_LEDGER").await.unwrap();
            let state = &ledger.info().await.unwrap().state;
            if state.messages >= events.len() as u64 {
                let mut quarantine = js.get_stream("ATL_QUARANTINE").await.unwrap();
                assert_eq!(
                    quarantine.info().await.unwrap().state.messages,
                    0,
                    "nothing refused"
                );
                return state.last_sequence;
            }
            assert!(Instant::now() < deadline, "{}", ingest.stderr());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!(
        ledger_size,
        events.len() as u64,
        "every event is in the ledger, no receipt"
    );

    let deadline = Instant::now() + Duration::from_secs(60);
    let store = loop {
        let store = toolledger_projector::Generations::new(&data)
            .current()
            .unwrap()
            .and_then(|g| toolledger_projector::Store::open_readonly(&g.database()).ok());
        if let Some(store) = store
            && store.position().unwrap() >= ledger_size
        {
            break store;
        }
        assert!(Instant::now() < deadline, "{}", project.stderr());
        std::thread::sleep(Duration::from_millis(100));
    };
    let conn = store.connection();
    let state = |invocation: &str| -> String {
        conn.query_row(
            "SELECT state FROM invocations WHERE tenant = 'acme' AND invocation_id = ?1",
            [invocation],
            |r| r.get(0),
        )
        .unwrap()
    };
    let anomalies = |invocation: &str| -> Vec<(String, Value)> {
        let mut statement = conn
            .prepare(
                "SELECT kind, details FROM anomalies WHERE tenant = 'acme' AND invocation_id = ?1
                 ORDER BY seq, idx",
            )
            .unwrap();
        statement
            .query_map([invocation], |r| Ok((r.get(0)?, r.get::<_, String>(1)?)))
            .unwrap()
            .map(|row| {
                let (kind, details) = row.unwrap();
                (kind, serde_json::from_str(&details).unwrap())
            })
            .collect()
    };
    assert_eq!(state("inv-ask"), "awaiting_approval");
    assert_eq!(
        anomalies("inv-ask"),
        [(
            "missing_field".to_owned(),
            json!({"kind": "missing_field", "path": "/permission_input"})
        )]
    );
    assert_eq!(state("inv-bare"), "awaiting_approval");
    let paths: Vec<Value> = anomalies("inv-bare")
        .into_iter()
        .map(|(kind, details)| {
            assert_eq!(kind, "missing_field");
            details["path"].clone()
        })
        .collect();
    assert_eq!(
        paths,
        [
            "/decision_id",
            "/invocation_id",
            "/permission_input",
            "/requested_at"
        ]
    );
    let requests: Vec<String> = conn
        .prepare("SELECT decision_id FROM permission_requests ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(requests, ["dec-ask"], "a request is keyed by its decision id");

    for child in [&mut ingest, &mut project] {
        let stopped = child.terminate(Duration::from_secs(30)).expect("it stops");
        assert!(stopped.success(), "{}", child.stderr());
    }
}
