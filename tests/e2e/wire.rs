//! `toolledger init` and `toolledger emit` against a real nats-server.

use std::time::Duration;

use toolledger_testkit::{ChildProcess, NatsFixture};
use toolledger_wire::{Origin, decode, streams};

use crate::toolledger;

/// Runs `toolledger ARGS…` to completion; returns (success, stdout, stderr).
fn run(args: &[&str]) -> (bool, String, String) {
    // `init` writes the checkpoint signing key under the data directory: keep it out of the repo.
    let data = tempfile::tempdir().unwrap();
    let mut child = ChildProcess::spawn(
        toolledger(),
        args,
        &[
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
            ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
        ],
    );
    let status = child
        .wait_timeout(Duration::from_secs(60))
        .expect("toolledger finishes within a minute");
    (status.success(), child.stdout(), child.stderr())
}

#[test]
fn init_creates_then_verifies_and_emit_publishes_dedupes_and_reports_failures() {
    let nats = NatsFixture::start();
    let url = nats.url();

    let (ok, out, err) = run(&["init", "--nats-url", &url]);
    assert!(ok, "init failed\n{out}\n{err}");
    assert!(out.contains("created stream ATL_INBOUND"), "{out}");
    let (ok, out, err) = run(&["init", "--nats-url", &url]);
    assert!(ok, "second init failed\n{out}\n{err}");
    assert!(out.contains("exists and meets the contract"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.ndjson");
    let cloudevent = r#"{"specversion":"1.0","id":"ce-1","source":"agent://a","type":"tool.invocation.started","tenant":"acme","data":{"invocation_id":"inv-1","ratio":1E30}}"#;
    let envelope = r#"{"schema_version":"0.2.0","event_id":"ev-2","event_type":"tool.invocation.planned","source":"agent://a","time":"2026-01-02T03:04:05Z","invocation_id":"inv-1","data":{"invocation_id":"inv-1"}}"#;
    let not_ijson = r#"{"specversion":"1.0","id":"ce-3","source":"agent://a","type":"tool.declared","tenant":"acme","data":{"n":9007199254740993}}"#;
    std::fs::write(
        &file,
        format!("{cloudevent}\n{envelope}\n{not_ijson}\n{cloudevent}\n"),
    )
    .unwrap();
    let path = file.to_str().unwrap();

    let (ok, out, err) = run(&[
        "emit",
        "--nats-url",
        &url,
        "--tenant",
        "acme",
        "--mode",
        "binary",
        path,
    ]);
    assert!(!ok, "emit must fail when an event fails\n{out}\n{err}");
    assert!(
        out.contains("published 2, duplicates 1, failed 1"),
        "{out}\n{err}"
    );
    assert!(out.contains("events.ndjson:3: not_ijson"), "{out}");

    // The same events again, now structured: sent again (ATL_INBOUND dedupes nothing; ingest drops
    // them by identity).
    let again = dir.path().join("again.json");
    std::fs::write(&again, format!("[{cloudevent}, {envelope}]")).unwrap();
    let (ok, out, err) = run(&[
        "emit",
        "--nats-url",
        &url,
        "--tenant",
        "acme",
        "--mode",
        "structured",
        again.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("published 2, duplicates 0, failed 0"), "{out}");

    // What reached the stream decodes back, on the subjects the classes name.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let js = async_nats::jetstream::new(nats.client().await);
        let stream = js.get_stream(streams::INBOUND).await.unwrap();
        let mut seen = Vec::new();
        for seq in 1..=2 {
            let message = stream.get_raw_message(seq).await.unwrap();
            let decoded = decode(message.subject.as_str(), Some(&message.headers), &message.payload).unwrap();
            seen.push((message.subject.to_string(), decoded.origin));
        }
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            [
                (
                    "atl.in.acme.tool.invocation.planned".to_owned(),
                    Origin::AgenttoolEvent
                ),
                ("atl.in.acme.tool.invocation.started".to_owned(), Origin::Binary),
            ]
        );
    });
}

#[test]
fn init_refuses_a_weaker_live_stream_and_emit_needs_a_url() {
    let nats = NatsFixture::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let js = async_nats::jetstream::new(nats.client().await);
        let mut weak = streams::inbound_config(&streams::InboundSettings::default());
        weak.discard = async_nats::jetstream::stream::DiscardPolicy::Old;
        js.create_stream(weak).await.unwrap();
    });
    let (ok, out, err) = run(&["init", "--nats-url", &nats.url()]);
    assert!(!ok, "init must refuse\n{out}\n{err}");
    assert!(err.contains("ATL_INBOUND") && err.contains("discard"), "{err}");

    let (ok, _, err) = run(&["emit", "/nonexistent.json"]);
    assert!(!ok);
    assert!(err.contains("--nats-url"), "{err}");
}
