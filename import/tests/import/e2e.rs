//! End to end against real parts: a session of each system imported, published to a real
//! nats-server, appended by an in-process ingest, projected into SQLite; then every native id finds
//! its invocation through `invocation_external_ids`, and invocations have the expected states.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;
use toolledger_import::Format;
use toolledger_ingest::metrics::IngestMetrics;
use toolledger_ingest::session::{self, Connector, IngestSettings};
use toolledger_projector::{Generations, Options};
use toolledger_testkit::NatsFixture;
use toolledger_wire::streams::INBOUND;
use toolledger_wire::{Mode, produce};

use crate::{all_events, import};

fn signing_key(data_dir: &std::path::Path) {
    let key = data_dir.join("keys/checkpoint.key");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    toolledger_merkle::NoteSigner::generate("toolledger/ATL_LEDGER")
        .unwrap()
        .save(&key)
        .unwrap();
}

async fn drained(js: &jetstream::Context) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut inbound = js.get_stream(INBOUND).await.unwrap();
        let messages = inbound.info().await.unwrap().state.messages;
        if messages == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "ATL_INBOUND still holds {messages} messages"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The invocation (state) a native id finds, by source and key.
fn lookup(db: &rusqlite::Connection, source: &str, key: &str, value: &str) -> Vec<(String, String)> {
    let mut stmt = db
        .prepare(
            "SELECT i.invocation_id, i.state FROM invocation_external_ids x
             JOIN invocations i ON i.tenant = x.tenant AND i.invocation_id = x.invocation_id
             WHERE x.tenant = 'acme' AND x.source = ?1 AND x.key = ?2 AND x.value = ?3
             ORDER BY i.first_seq",
        )
        .unwrap();
    stmt.query_map([source, key, value], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn states(found: &[(String, String)]) -> Vec<&str> {
    found.iter().map(|(_, s)| s.as_str()).collect()
}

#[test]
fn imported_sessions_project_with_their_native_ids() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::start();
    let data = tempfile::tempdir().unwrap();
    let mut events: Vec<Value> = Vec::new();
    for (format, path) in [
        (Format::Nact, "nact/session.ndjson"),
        (Format::Otc, "otc/session.ndjson"),
        (Format::ToolProto, "toolproto/calls.ndjson"),
        (Format::Mcp, "mcp/session.ndjson"),
        (Format::OpenAi, "openai/conversation.ndjson"),
    ] {
        events.extend(all_events(&import(format, path)));
    }
    let db_path = runtime.block_on(async {
        let js = jetstream::new(nats.client().await);
        toolledger_wire::streams::ensure_contract(&js, &Default::default())
            .await
            .unwrap();
        signing_key(data.path());
        let mut settings = IngestSettings::new(data.path());
        settings.fetch_wait = Duration::from_millis(100);
        settings.lease_ttl = Duration::from_secs(3);
        let mut registry = prometheus_client::registry::Registry::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let ingest = tokio::spawn(session::run(
            Connector {
                url: nats.url(),
                name: "import-test".to_owned(),
            },
            settings,
            IngestMetrics::register(&mut registry),
            toolledger_core::telemetry::Health::default(),
            async {
                let _ = stopped.await;
            },
        ));

        let outgoing = produce::prepare_all(&events, Mode::Binary).unwrap();
        let report = produce::publish_all(&js, outgoing.clone()).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        assert_eq!(report.published, events.len());
        // Importing the same files again publishes the same events (ATL_INBOUND dedupes nothing):
        // ingest drops them by identity.
        let again = produce::publish_all(&js, outgoing).await;
        assert_eq!((again.published, again.duplicates), (events.len(), 0));
        drained(&js).await;
        let ledger = js
            .get_stream(toolledger_wire::streams::LEDGER)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages;
        assert_eq!(ledger, events.len() as u64, "the re-import appended nothing");
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(30), ingest)
            .await
            .unwrap()
            .unwrap()
            .unwrap();

        let options = Options::new(data.path().to_path_buf());
        toolledger_projector::rebuild(nats.client().await, &options, std::future::pending::<()>())
            .await
            .unwrap();
        Generations::new(data.path())
            .current()
            .unwrap()
            .unwrap()
            .database()
    });
    let db =
        rusqlite::Connection::open_with_flags(&db_path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();

    // Nothing was quarantined: every imported event reached the ledger and the projection.
    let indexed: i64 = db
        .query_row("SELECT count(*) FROM events WHERE tenant = 'acme'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(indexed as usize, events.len());
    let quarantined: i64 = db
        .query_row("SELECT count(*) FROM quarantine_receipts", [], |r| r.get(0))
        .unwrap_or(0);
    assert_eq!(quarantined, 0);

    // The mappings follow the lifecycle: no transition backwards, no orphan, no status mismatch.
    let anomalies: Vec<String> = db
        .prepare("SELECT details FROM anomalies ORDER BY seq, idx")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(anomalies.is_empty(), "{anomalies:#?}");

    // MCP: session + JSON-RPC id.
    let session = "1868a90c-5f2b-4b0a-9c1e-7d3f2a9b8c01";
    let in_session: Vec<String> = lookup(&db, "mcp", "mcp_session_id", session)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let seven = lookup(&db, "mcp", "jsonrpc_request_id", "7");
    assert_eq!(states(&seven), ["succeeded", "succeeded"]);
    assert!(seven.iter().all(|(id, _)| in_session.contains(id)));
    assert_eq!(states(&lookup(&db, "mcp", "jsonrpc_request_id", "9")), ["failed"]);
    assert_eq!(
        states(&lookup(&db, "mcp", "jsonrpc_request_id", "10")),
        ["canceled"]
    );
    assert_eq!(
        states(&lookup(&db, "native", "native_call_id", "8")),
        ["succeeded"]
    );
    let session_rows: i64 = db
        .query_row(
            "SELECT count(*) FROM invocations WHERE tenant = 'acme' AND session_id = ?1",
            [session],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(session_rows, 7);
    let progress: i64 = db
        .query_row(
            "SELECT count(*) FROM progress WHERE invocation_id = ?1",
            [&lookup(&db, "mcp", "jsonrpc_request_id", "13")[0].0],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(progress, 1);

    // OTC: call ids, the run, authorization.
    assert_eq!(
        states(&lookup(&db, "otc", "execution_id", "exec-1")),
        ["succeeded"]
    );
    assert_eq!(states(&lookup(&db, "otc", "execution_id", "exec-2")), ["failed"]);
    assert_eq!(
        states(&lookup(&db, "otc", "execution_id", "exec-3")),
        ["awaiting_approval"]
    );
    assert_eq!(
        states(&lookup(&db, "otc", "execution_id", "exec-4")),
        ["succeeded"]
    );
    assert_eq!(lookup(&db, "otc", "run_id", "run-42").len(), 4);
    let error_class: String = db
        .query_row(
            "SELECT error_class FROM invocations WHERE invocation_id = ?1",
            [&lookup(&db, "otc", "execution_id", "exec-2")[0].0],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(error_class, "execution_failed");

    // Function calling: tool_call_id.
    assert_eq!(
        states(&lookup(&db, "function_calling", "tool_call_id", "call_12345xyz")),
        ["succeeded"]
    );
    assert_eq!(
        states(&lookup(&db, "native", "native_call_id", "call_67890abc")),
        ["succeeded"]
    );
    assert_eq!(
        states(&lookup(&db, "function_calling", "tool_call_id", "call_mal0001")),
        ["succeeded"],
        "its tool message came back; the parse failure stays in its transitions"
    );
    let parse_failed: i64 = db
        .query_row(
            "SELECT count(*) FROM invocation_transitions t
             WHERE t.invocation_id = ?1 AND t.to_state = 'schema_parse_failed'",
            [&lookup(&db, "function_calling", "tool_call_id", "call_mal0001")[0].0],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(parse_failed, 1);

    // N-ACT: toolId + version; the 5xx attempt failed and its retry succeeded, linked.
    let weather = "0479a45d-ad0a-49d4-94db-75edf00d2ca4";
    assert_eq!(
        states(&lookup(&db, "nact", "toolId", weather)),
        ["succeeded", "failed", "succeeded", "succeeded"]
    );
    let pinned = lookup(&db, "nact", "version", "1");
    assert_eq!(states(&pinned), ["succeeded"]);
    let (retry_of, attempt): (String, i64) = db
        .query_row(
            "SELECT retry_of, attempt FROM invocations WHERE retry_of IS NOT NULL AND tool_id = ?1",
            [format!("nact:{weather}")],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(retry_of, lookup(&db, "nact", "toolId", weather)[1].0);
    assert_eq!(attempt, 2);
    let versions: i64 = db
        .query_row(
            "SELECT count(*) FROM tool_versions WHERE tool_id = ?1",
            [format!("nact:{weather}")],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(versions, 2);
    let mapping_rows: i64 = db
        .query_row(
            "SELECT count(*) FROM tool_external_mappings WHERE tool_id = ?1 AND source = 'nact'",
            [format!("nact:{weather}")],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(mapping_rows, 2);

    // Tool Protocol: the call id of an executed explicit call.
    assert_eq!(
        states(&lookup(&db, "toolproto", "call_id", "call-17")),
        ["succeeded"]
    );
    assert_eq!(
        states(&lookup(&db, "toolproto", "call_id", "call-18")),
        ["failed"]
    );

    // Through the read side the API serves: every native id of every system finds its invocation by
    // search, and the reconstruction carries it.
    let mut ids = db
        .prepare(
            "SELECT invocation_id, source, key, value FROM invocation_external_ids WHERE tenant = 'acme'",
        )
        .unwrap();
    let ids: Vec<(String, String, String, String)> = ids
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let systems: std::collections::BTreeSet<&str> =
        ids.iter().map(|(_, source, _, _)| source.as_str()).collect();
    for system in ["mcp", "function_calling", "otc", "nact", "toolproto"] {
        assert!(systems.contains(system), "{system} ids are recorded: {systems:?}");
    }
    let empty: Vec<_> = ids.iter().filter(|(_, _, _, value)| value.is_empty()).collect();
    assert!(empty.is_empty(), "native ids are never empty: {empty:?}");
    for (invocation, _, key, value) in &ids {
        let found = toolledger_query::search(
            &db,
            &toolledger_query::SearchFilter {
                tenant: Some("acme".to_owned()),
                native_id: Some(value.clone()),
                native_key: Some(key.clone()),
                limit: 100,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            found.items.iter().any(|i| &i.invocation_id == invocation),
            "{key}={value} finds {invocation}"
        );
        let reconstruction = toolledger_query::reconstruct(&db, Some("acme"), invocation).unwrap();
        let native = serde_json::to_string(&reconstruction.native_ids).unwrap();
        assert!(
            native.contains(value.as_str()),
            "{invocation}: {native} lacks {value}"
        );
    }
}
