//! The OTLP receiver with the real clients an agent platform uses (`tests/e2e/otlp/*.py`, exporting
//! through the OpenTelemetry Python SDK's own OTLP exporters): each run's tool calls are found by
//! their native ids and reconstructed by `toolledger show` with their states and scrubbed arguments;
//! a re-sent batch adds no entry; a full inbox gets a retryable refusal and the exporter's retry lands
//! every span exactly once; `verify` passes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use toolledger_testkit::{ChildProcess, NatsFixture, python};

use crate::fixture::Up;
use crate::query::config_file;
use crate::toolledger;

/// The write token of tenant acme in these tests.
const WRITE_TOKEN: &str = "otlp-write-token-for-tests-0123456789";

fn client(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/e2e/otlp")
        .join(name)
}

/// `[otlp]` on free ports with acme's write token.
fn otlp_section() -> String {
    format!(
        "[otlp]\nhttp_listen = \"127.0.0.1:0\"\ngrpc_listen = \"127.0.0.1:0\"\nretry_after_secs = 1\nmax_request_bytes = 1000000\n\
         [[otlp.tokens]]\nname = \"acme-agents\"\nsha256 = \"{}\"\ntenant = \"acme\"\n",
        toolledger_query::token_digest(WRITE_TOKEN)
    )
}

/// Where the receiver listens, from the line `up` or `otlp` printed.
fn endpoints(stdout: &str) -> (String, String) {
    let line = stdout.lines().find(|l| l.contains("/v1/traces")).unwrap();
    let mut urls = line.split_whitespace().filter(|word| word.starts_with("http://"));
    let http = urls.next().unwrap().trim_end_matches(',').to_owned();
    let grpc = urls.next().unwrap().trim_end_matches(',').to_owned();
    (http, grpc)
}

/// Runs a client script; returns its JSON report. Panics with its output when it fails.
fn run_client(script: &str, protocol: &str, endpoint: &str, run: &str, extra: &[(&str, &str)]) -> Value {
    let mut env = vec![
        ("OTLP_ENDPOINT", endpoint),
        ("OTLP_PROTOCOL", protocol),
        ("OTLP_TOKEN", WRITE_TOKEN),
        ("OTLP_RUN", run),
    ];
    env.extend_from_slice(extra);
    let output = std::process::Command::new(python())
        .arg(client(script))
        .envs(env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} over {protocol} failed\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// `toolledger <args> --json` against `config`; `None` when it found nothing (exit 1).
fn cli_json(config: &Path, args: &[&str]) -> Option<Value> {
    let output = std::process::Command::new(toolledger())
        .arg("--config")
        .arg(config)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    match output.status.code() {
        Some(0) => Some(serde_json::from_slice(&output.stdout).unwrap()),
        Some(1) | Some(3) => None,
        _ => panic!("{args:?}: {}", String::from_utf8_lossy(&output.stderr)),
    }
}

/// The invocation carrying native id `id`, reconstructed, once projected (at most 60 s).
fn reconstructed(config: &Path, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(page) = cli_json(config, &["search", "--tenant", "acme", "--native-id", id]) {
            let items = page["items"].as_array().unwrap();
            assert_eq!(items.len(), 1, "one invocation per call id {id}: {page}");
            let invocation = items[0]["invocation_id"].as_str().unwrap().to_owned();
            let state = items[0]["state"].as_str().unwrap();
            if state != "running" && state != "planned" {
                return cli_json(config, &["show", "--tenant", "acme", &invocation]).unwrap();
            }
        }
        assert!(std::time::Instant::now() < deadline, "call {id} never projected");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Entries in ATL_LEDGER.
fn ledger_entries(nats_url: &str) -> u64 {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js =
            async_nats::jetstream::new(toolledger_wire::connect::connect(nats_url, "e2e").await.unwrap());
        let mut stream = js.get_stream("ATL_LEDGER").await.unwrap();
        stream.info().await.unwrap().state.messages
    })
}

/// Waits until the ledger stops growing for a second; returns its size.
fn settled(nats_url: &str) -> u64 {
    let mut last = ledger_entries(nats_url);
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = ledger_entries(nats_url);
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn sdk_spans_over_http_and_grpc_are_reconstructed_once_with_scrubbed_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), &otlp_section(), &[]);
    let (config, nats_url) = (up.config.clone(), up.nats_url.clone());
    let (http, grpc) = endpoints(&up.child.stdout());

    let over_http = run_client("sdk_client.py", "http", &http, "http-1", &[]);
    let over_grpc = run_client("sdk_client.py", "grpc", &grpc, "grpc-1", &[("OTLP_GZIP", "1")]);
    let gzipped_http = run_client("sdk_client.py", "http", &http, "http-gz", &[("OTLP_GZIP", "1")]);

    for report in [&over_http, &over_grpc, &gzipped_http] {
        let calls = report["tool_calls"].as_array().unwrap();
        assert!(calls.len() >= 3, "{report}");
        for call in calls {
            let call_id = call["call_id"].as_str().unwrap();
            let shown = reconstructed(&config, call_id);
            let text = shown.to_string();
            assert_eq!(shown["state"], call["outcome"], "{call_id}: {shown}");
            assert_eq!(shown["anomalies"], serde_json::json!([]), "{call_id}: {shown}");
            assert!(shown["inputs"]["model_input"].is_object(), "{shown}");
            assert!(text.contains(call_id), "{text}");
            assert!(text.contains(call["tool_name"].as_str().unwrap()), "{text}");
            assert!(
                text.contains(call["trace_id"].as_str().unwrap()),
                "trace id kept: {text}"
            );
            assert_eq!(
                shown["session_id"], report["conversation_id"],
                "the conversation is the session"
            );
            for secret in ["SECRETSECRETSECRET", "SECRETTOKENSECRETTOKEN"] {
                assert!(!text.contains(secret), "{call_id} shows a secret: {text}");
            }
        }
    }

    // OTLP/JSON, posted as a collector would: one tool span and one span with a short trace id,
    // which is left out and reported; a wrong token and a body that is not OTLP are refused.
    let addr: std::net::SocketAddr = http
        .trim_start_matches("http://")
        .trim_end_matches("/v1/traces")
        .parse()
        .unwrap();
    let json_request = serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-agent"}}]},
        "scopeSpans": [{"spans": [
            {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
             "name": "execute_tool get_weather", "kind": 1,
             "startTimeUnixNano": "1764100000000000000", "endTimeUnixNano": "1764100000500000000",
             "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                {"key": "gen_ai.tool.name", "value": {"stringValue": "get_weather"}},
                {"key": "gen_ai.tool.call.id", "value": {"stringValue": "call-json-1"}},
                {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": "{\"city\":\"Paris\"}"}},
                {"key": "gen_ai.conversation.id", "value": {"stringValue": "conv-json"}}],
             "status": {"code": 1}},
            {"traceId": "5b8e", "spanId": "eee19b7ec3c1b175", "name": "execute_tool broken",
             "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}]}
        ]}]
    }]});
    let reply =
        toolledger_testkit::http_post(addr, "/v1/traces", Some(WRITE_TOKEN), &json_request.to_string())
            .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(answer["partialSuccess"]["rejectedSpans"], 1, "{answer}");
    assert_eq!(reconstructed(&config, "call-json-1")["state"], "succeeded");
    let refused = toolledger_testkit::http_post(addr, "/v1/traces", Some("not-a-write-token"), "{}").unwrap();
    assert_eq!(refused.status, 401, "{}", refused.body);
    let api_token =
        toolledger_testkit::http_post(addr, "/v1/traces", Some(crate::query::ADMIN_TOKEN), "{}").unwrap();
    assert_eq!(api_token.status, 401, "an API read token is not a write token");
    let garbage =
        toolledger_testkit::http_post(addr, "/v1/traces", Some(WRITE_TOKEN), "{\"resourceSpans\": 7}")
            .unwrap();
    assert_eq!(garbage.status, 400, "{}", garbage.body);
    let status: Value = serde_json::from_str(&garbage.body).unwrap();
    assert_eq!(status["code"], 3, "INVALID_ARGUMENT: {status}");
    let oversize = format!(
        "{{\"resourceSpans\": [], \"pad\": \"{}\"}}",
        "x".repeat(1_100_000)
    );
    let too_large = toolledger_testkit::http_post(addr, "/v1/traces", Some(WRITE_TOKEN), &oversize).unwrap();
    assert_eq!(too_large.status, 413, "{}", too_large.body);
    let status: Value = serde_json::from_str(&too_large.body).unwrap();
    assert!(
        status["message"].as_str().unwrap().contains("max_request_bytes"),
        "{status}"
    );

    // The same spans again (same run tag: same trace and span ids): duplicates, no new entry.
    let before = settled(&nats_url);
    // Every tool is declared again by each run's spans: identical repeats, not conflicts.
    let quarantined = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js =
            async_nats::jetstream::new(toolledger_wire::connect::connect(&nats_url, "e2e").await.unwrap());
        crate::fixture::stream_state(&js, "ATL_QUARANTINE").await.messages
    });
    assert_eq!(quarantined, 0, "the receiver's events were quarantined");
    let again = run_client("sdk_client.py", "http", &http, "http-1", &[]);
    assert_eq!(again["tool_calls"], over_http["tool_calls"]);
    assert_eq!(settled(&nats_url), before, "a re-sent batch added entries");

    let verify = std::process::Command::new(toolledger())
        .args([
            "--config",
            config.to_str().unwrap(),
            "verify",
            "--nats-url",
            &nats_url,
        ])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "verify failed: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let stopped = up.stop();
    assert!(
        stopped.stdout().contains("otlp receiver stopped"),
        "{}",
        stopped.stdout()
    );
}

/// The session's invocations, once `n` of them are projected and ended (at most 60 s).
fn session_invocations(config: &Path, session: &str, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(page) = cli_json(config, &["search", "--tenant", "acme", "--session", session]) {
            let items = page["items"].as_array().unwrap().clone();
            let ended = items
                .iter()
                .all(|i| i["state"] != "running" && i["state"] != "planned");
            if items.len() >= n && ended {
                return items;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "session {session} never had {n} invocations"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn agents_sdk_and_mcp_tool_calls_are_one_invocation_each_with_native_ids() {
    let dir = tempfile::tempdir().unwrap();
    // A short grace, so the MCP server spans that come before their caller's wait briefly.
    let extra = otlp_section().replace(
        "retry_after_secs = 1",
        "retry_after_secs = 1\ncaller_grace_secs = 20",
    );
    let up = Up::start(dir.path(), &extra, &[]);
    let config = up.config.clone();
    let (http, grpc) = endpoints(&up.child.stdout());

    // The OpenAI Agents SDK, instrumented by OpenInference (TOOL spans; the call id is on the
    // model's span) over HTTP, and by the OpenTelemetry GenAI instrumentation (execute_tool spans,
    // no call id, the conversation on an ancestor) over gRPC.
    for (instrumentation, protocol, endpoint) in [("openinference", "http", &http), ("genai", "grpc", &grpc)]
    {
        let run = format!("agents-{instrumentation}");
        let report = run_client(
            "agents_client.py",
            protocol,
            endpoint,
            &run,
            &[("OTLP_INSTRUMENTATION", instrumentation)],
        );
        let calls = report["tool_calls"].as_array().unwrap();
        let session = report["conversation_id"].as_str().unwrap();
        let invocations = session_invocations(&config, session, calls.len());
        assert_eq!(
            invocations.len(),
            calls.len(),
            "{instrumentation}: {invocations:?}"
        );
        for call in calls {
            let tool = format!("fn:{}", call["tool_name"].as_str().unwrap());
            let found = invocations
                .iter()
                .find(|i| i["tool_id"] == tool.as_str())
                .unwrap_or_else(|| panic!("{instrumentation}: no invocation of {tool}: {invocations:?}"));
            assert_eq!(found["state"], call["outcome"], "{instrumentation}: {found}");
            let shown = cli_json(
                &config,
                &[
                    "show",
                    "--tenant",
                    "acme",
                    found["invocation_id"].as_str().unwrap(),
                ],
            )
            .unwrap();
            assert!(!shown.to_string().contains("SECRETSECRETSECRET"), "{shown}");
            if instrumentation == "openinference" {
                let call_id = call["call_id"].as_str().unwrap();
                assert!(
                    shown["native_ids"].to_string().contains(call_id),
                    "call id from the model's span: {shown}"
                );
            }
        }
    }

    // A real MCP client and server over stdio: execute_tool ─▶ MCP send tools/call ─▶ the server's
    // tools/call (another process, exported first) are one invocation each.
    let report = run_client("mcp_client.py", "http", &http, "mcp-1", &[]);
    let calls = report["tool_calls"].as_array().unwrap();
    for call in calls {
        let shown = reconstructed(&config, call["call_id"].as_str().unwrap());
        assert_eq!(shown["state"], call["outcome"], "{shown}");
        assert_eq!(shown["tool_id"], "mcp:read_note", "{shown}");
        let ids = shown["native_ids"].to_string();
        assert!(ids.contains("jsonrpc_request_id"), "the MCP request id: {ids}");
        assert!(
            ids.contains("toolledger-mcp-server"),
            "the server's span joined the call: {ids}"
        );
    }
    let session = report["conversation_id"].as_str().unwrap();
    assert_eq!(
        session_invocations(&config, session, calls.len()).len(),
        calls.len()
    );
    up.stop();
}

#[test]
fn a_full_inbox_is_refused_retryably_and_the_exporters_retry_lands_every_span_once() {
    let nats = NatsFixture::start();
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    let mut text = std::fs::read_to_string(&config).unwrap();
    text = text.replace("[nats]\n", &format!("[nats]\nurl = \"{}\"\n", nats.url()));
    // Exporters retry a bounded number of times (the Python SDK's five, each after Retry-After):
    // three seconds apart leaves ingest time to start and drain the inbox.
    text.push_str(&otlp_section().replace("retry_after_secs = 1", "retry_after_secs = 3"));
    std::fs::write(&config, text).unwrap();
    let config_arg = config.to_str().unwrap();
    // A small inbox, filled by another producer's messages before each exporter sends; no
    // ingest drains it until the receiver has refused.
    let mut init = ChildProcess::spawn(
        toolledger(),
        ["--config", config_arg, "init", "--inbound-max-bytes", "65536"],
        &[],
    );
    init.wait_timeout(Duration::from_secs(60)).unwrap();
    assert!(init.try_status().unwrap().success(), "{}", init.stderr());

    let mut receiver = ChildProcess::spawn(toolledger(), ["--config", config_arg, "otlp"], &[]);
    assert!(
        receiver.wait_for_output("/v1/traces", Duration::from_secs(30)),
        "{}",
        receiver.stderr()
    );
    let (http, grpc) = endpoints(&receiver.stdout());

    const REFUSED: &str = "the inbox refused";
    let mut refusals = 0;
    for (protocol, endpoint) in [("http", http.as_str()), ("grpc", grpc.as_str())] {
        fill_inbox(&nats.url());
        let run = format!("full-{protocol}");
        let script = client("sdk_client.py");
        let mut exporter = ChildProcess::spawn(
            &python(),
            [script.to_str().unwrap()],
            &[
                ("OTLP_ENDPOINT", endpoint),
                ("OTLP_PROTOCOL", protocol),
                ("OTLP_TOKEN", WRITE_TOKEN),
                ("OTLP_RUN", &run),
                ("OTLP_TIMEOUT", "60"),
            ],
        );
        // The receiver refuses (the inbox is full) before any ingest runs.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while receiver.stderr().matches(REFUSED).count() <= refusals {
            assert!(
                std::time::Instant::now() < deadline,
                "{protocol}: no refusal\n{}",
                receiver.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut ingest = ChildProcess::spawn(toolledger(), ["--config", config_arg, "ingest"], &[]);
        exporter
            .wait_timeout(Duration::from_secs(90))
            .expect("the exporter gives up");
        assert!(
            exporter.try_status().unwrap().success(),
            "{protocol}: the exporter's retries did not land\n{}\n{}\ningest: {}\nreceiver: {}",
            exporter.stdout(),
            exporter.stderr(),
            ingest.stderr(),
            receiver.stderr()
        );
        let report: Value = serde_json::from_str(exporter.stdout().lines().last().unwrap()).unwrap();
        settled(&nats.url());
        ingest.terminate(Duration::from_secs(30)).unwrap();
        // Exactly once: one planned entry per call in the ledger.
        let planned = planned_entries(&nats.url());
        for call in report["tool_calls"].as_array().unwrap() {
            let call_id = call["call_id"].as_str().unwrap();
            let n = planned.iter().filter(|d| d.contains(call_id)).count();
            assert_eq!(n, 1, "{protocol}: call {call_id} planned {n} times");
        }
        refusals = receiver.stderr().matches(REFUSED).count();
    }
    receiver.terminate(Duration::from_secs(30)).unwrap();
}

/// Publishes filler messages (another tenant's, unreadable) until ATL_INBOUND refuses.
fn fill_inbox(nats_url: &str) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js =
            async_nats::jetstream::new(toolledger_wire::connect::connect(nats_url, "e2e").await.unwrap());
        for _ in 0..1000 {
            let ack = js
                .publish("atl.in.filler.tool.declared", vec![b'x'; 1024].into())
                .await
                .unwrap();
            if ack.await.is_err() {
                return;
            }
        }
        panic!("the inbox never filled");
    });
}

/// The data of every `tool.invocation.planned` entry of the ledger, as text.
fn planned_entries(nats_url: &str) -> Vec<String> {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use futures::StreamExt;
        let js =
            async_nats::jetstream::new(toolledger_wire::connect::connect(nats_url, "e2e").await.unwrap());
        let stream = js.get_stream("ATL_LEDGER").await.unwrap();
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subject: "atl.ledger.acme.tool.invocation.planned".to_owned(),
                ..Default::default()
            })
            .await
            .unwrap();
        let pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.unwrap().take(pending as usize);
        let mut out = Vec::new();
        while let Some(message) = messages.next().await {
            out.push(String::from_utf8_lossy(&message.unwrap().payload).into_owned());
        }
        out
    })
}
