//! Independent producers against a real nats-server: the CloudEvents Python SDK (structured mode),
//! hand-written nats-py headers (binary mode, percent-encoded) and a plain agenttool-event body. The
//! decoder must see one and the same event in all of them.

use std::process::Command;

use toolledger_testkit::{NatsFixture, python};
use toolledger_wire::{LedgerEntry, Origin, decode, streams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_producers_decode_to_the_same_event() {
    let nats = NatsFixture::start();
    let client = nats.client().await;
    let js = async_nats::jetstream::new(client);
    assert_eq!(
        streams::ensure_inbound(&js).await.unwrap(),
        streams::Ensured::Created
    );

    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/produce.py");
    let output = Command::new(python())
        .arg(&script)
        .arg(nats.url())
        .arg(super::TENANT)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "produce.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.lines().count(), 3, "{stdout}");

    let stream = js.get_stream(streams::INBOUND).await.unwrap();
    let mut decoded = Vec::new();
    for seq in 1..=3 {
        let message = stream.get_raw_message(seq).await.unwrap();
        let event = decode(message.subject.as_str(), Some(&message.headers), &message.payload)
            .unwrap_or_else(|e| panic!("message {seq}: {e}"));
        decoded.push(event);
    }
    let origins: Vec<Origin> = decoded.iter().map(|d| d.origin).collect();
    assert_eq!(
        origins,
        [Origin::Structured, Origin::Binary, Origin::AgenttoolEvent]
    );

    let structured = &decoded[0].event;
    let binary = &decoded[1].event;
    assert_eq!(structured, binary, "structured and binary producers disagree");
    assert_eq!(structured.source(), "agent://runner/ü 1");
    assert_eq!(structured.subject(), Some("inv 42 \"quoted\" 100%"));
    assert_eq!(
        structured
            .extension("sessionid")
            .map(|v| v.to_string())
            .as_deref(),
        Some("séance-7")
    );

    // The envelope carries the same identity, class, time and invocation; its data adds session_id.
    let envelope = &decoded[2].event;
    for (a, b) in [
        (structured.id(), envelope.id()),
        (structured.ty(), envelope.ty()),
        (structured.source(), envelope.source()),
    ] {
        assert_eq!(a, b);
    }
    assert_eq!(structured.time(), envelope.time());
    for name in ["tenant", "invocationid", "sessionid"] {
        assert_eq!(structured.extension(name), envelope.extension(name), "{name}");
    }
    assert!(envelope.extension("traceparent").is_some());
    assert!(decoded[2].trace_refs.is_some());

    // Same event, same content digest, whichever mode carried it.
    let at = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
    let digest = |i: usize| LedgerEntry::new(decoded[i].clone(), at).content_digest().unwrap();
    assert_eq!(digest(0), digest(1));
}

/// An ATL_INBOUND made before it stopped deduping (a 10-minute `Nats-Msg-Id` window, no source) is
/// upgraded in place: afterwards one id sent twice, as two tenants could, is stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbound_that_still_dedupes_is_upgraded_to_dedupe_nothing() {
    let nats = NatsFixture::start();
    let js = async_nats::jetstream::new(nats.client().await);
    let old = async_nats::jetstream::stream::Config {
        duplicate_window: std::time::Duration::from_secs(600),
        sources: None,
        ..streams::inbound_config(&streams::InboundSettings::default())
    };
    js.create_stream(old).await.unwrap();
    assert!(matches!(
        streams::ensure_inbound(&js).await.unwrap(),
        streams::Ensured::Upgraded(_)
    ));
    let mut live = js.get_stream(streams::INBOUND).await.unwrap();
    let config = live.info().await.unwrap().config.clone();
    assert!(config.duplicate_window.is_zero(), "{config:?}");
    assert_eq!(
        streams::ensure_inbound(&js).await.unwrap(),
        streams::Ensured::Verified
    );
    assert!(
        streams::check_contract(&js)
            .await
            .iter()
            .all(|f| f.stream != streams::INBOUND)
    );

    for subject in ["atl.in.acme.tool.declared", "atl.in.globex.tool.declared"] {
        let headers = super::headers(&[("Nats-Msg-Id", "the-same-id")]);
        let ack = js
            .publish_with_headers(subject, headers, "{}".into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(!ack.duplicate, "{subject}");
    }
    assert_eq!(live.info().await.unwrap().state.messages, 2);
}
