//! The ingest service end to end against a real nats-server: generated events in, ledger out.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::{Value, json};
use toolledger_ingest::metrics::IngestMetrics;
use toolledger_ingest::session::{self, Connector, IngestSettings};
use toolledger_ledger::{last_sequence, read_range};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::NatsFixture;
use toolledger_wire::streams::{INBOUND, LEDGER, QUARANTINE};
use toolledger_wire::{LedgerEntry, Mode, produce};

/// The streams and bucket ingest needs, as `toolledger init` makes them.
pub async fn contract_streams(js: &jetstream::Context) {
    toolledger_wire::streams::ensure_contract(js, &Default::default())
        .await
        .unwrap();
}

/// The checkpoint signing key `toolledger init` would make, in `data_dir`.
pub fn signing_key(data_dir: &std::path::Path) {
    let key = data_dir.join("keys/checkpoint.key");
    if !key.exists() {
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        toolledger_merkle::NoteSigner::generate("toolledger/ATL_LEDGER")
            .unwrap()
            .save(&key)
            .unwrap();
    }
}

/// A running in-process ingest; stops (finishing its batch) when dropped or stopped.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<toolledger_ingest::Result<()>>>,
    pub metrics: IngestMetrics,
    pub health: toolledger_core::telemetry::Health,
}

impl Running {
    pub fn start(nats: &NatsFixture, data_dir: &std::path::Path) -> Self {
        Self::start_with(nats, data_dir, |_| {})
    }

    pub fn start_with(
        nats: &NatsFixture,
        data_dir: &std::path::Path,
        adjust: impl FnOnce(&mut IngestSettings),
    ) -> Self {
        // `TOOLLEDGER_TEST_LOG=toolledger_ingest=debug` shows what ingest did in a failing test.
        if let Ok(log_filter) = std::env::var("TOOLLEDGER_TEST_LOG") {
            let _ = toolledger_core::telemetry::init_tracing(&toolledger_core::config::TelemetryConfig {
                metrics_listen: ([127, 0, 0, 1], 0).into(),
                log_filter,
                log_format: toolledger_core::config::LogFormat::Text,
            });
        }
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = IngestMetrics::register(&mut registry);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        signing_key(data_dir);
        let mut settings = IngestSettings::new(data_dir);
        settings.fetch_wait = Duration::from_millis(100);
        settings.lease_ttl = Duration::from_secs(3);
        adjust(&mut settings);
        let connector = Connector {
            url: nats.url(),
            name: "ingest-test".to_owned(),
        };
        let health = toolledger_core::telemetry::Health::default();
        let task = tokio::spawn(session::run(
            connector,
            settings,
            metrics.clone(),
            health.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            stop: Some(stop),
            task: Some(task),
            metrics,
            health,
        }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.task.take().unwrap())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

pub async fn publish(js: &jetstream::Context, events: &[Value], mode: Mode, keep_msg_id: bool) {
    let mut outgoing = produce::prepare_all(events, mode).unwrap();
    if !keep_msg_id {
        outgoing = outgoing
            .into_iter()
            .map(|(at, message)| (at, message.without_msg_id()))
            .collect();
    }
    let report = produce::publish_all(js, outgoing).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
}

/// Waits until ingest has taken and acked everything in ATL_INBOUND.
pub async fn drained(js: &jetstream::Context) {
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

pub async fn ledger(js: &jetstream::Context) -> Vec<LedgerEntry> {
    let tail = last_sequence(js, LEDGER).await.unwrap();
    read_range(js, LEDGER, 1, tail)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, bytes)| LedgerEntry::parse(&bytes).unwrap())
        .collect()
}

pub fn id_of(entry: &LedgerEntry) -> String {
    entry.event.id().to_owned()
}

/// The events' ids, in the order given.
pub fn ids_of(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The events' ids tenant by tenant, in the order given: the order the ledger promises.
pub fn ids_by_tenant(events: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut by_tenant: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in events {
        by_tenant
            .entry(event["tenant"].as_str().unwrap().to_owned())
            .or_default()
            .push(event["id"].as_str().unwrap().to_owned());
    }
    by_tenant
}

/// The entries' event ids tenant by tenant, in ledger order (the ledger's own receipts left out).
pub fn entry_ids_by_tenant(entries: &[LedgerEntry]) -> BTreeMap<String, Vec<String>> {
    let mut by_tenant: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in entries
        .iter()
        .filter(|e| class_of(e) != "toolledger.quarantine.recorded")
    {
        let tenant = entry
            .event
            .extension("tenant")
            .map(|t| t.to_string())
            .unwrap_or_default();
        by_tenant.entry(tenant).or_default().push(id_of(entry));
    }
    by_tenant
}

pub fn class_of(entry: &LedgerEntry) -> String {
    entry.event.ty().to_owned()
}

fn receipt_data(entry: &LedgerEntry) -> Value {
    entry.event_json()["data"].clone()
}

pub async fn quarantined(js: &jetstream::Context) -> Vec<(String, String)> {
    let stream = js.get_stream(QUARANTINE).await.unwrap();
    let count = stream.get_info().await.unwrap().state.messages as usize;
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap().take(count);
    let mut out = Vec::new();
    while let Some(message) = messages.next().await {
        let message = message.unwrap();
        let reason = message
            .headers
            .as_ref()
            .and_then(|h| h.get("Atl-Quarantine-Reason"))
            .map(|v| v.to_string())
            .unwrap_or_default();
        out.push((message.subject.to_string(), reason));
    }
    out
}

#[tokio::test]
async fn generated_events_land_once_in_order_and_repeats_add_nothing() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());

    let events = generate(&GeneratorConfig {
        seed: 11,
        sessions: 3,
        tenants: vec!["acme".into(), "globex".into()],
        ..Default::default()
    })
    .events;
    publish(&js, &events, Mode::Binary, true).await;
    drained(&js).await;
    let stored = ledger(&js).await;
    assert_eq!(stored.len(), events.len(), "every event once");
    assert_eq!(
        entry_ids_by_tenant(&stored),
        ids_by_tenant(&events),
        "every event once, each tenant's in publish order"
    );
    for entry in &stored {
        assert!(
            entry
                .ledger
                .content_digest
                .as_deref()
                .is_some_and(|d| d.starts_with("sha256:"))
        );
    }

    // The same events again, without the producer's msg id so JetStream's window cannot catch them:
    // ingest's identity index does, for all time, and in structured mode too.
    publish(&js, &events, Mode::Structured, false).await;
    drained(&js).await;
    assert_eq!(ledger(&js).await.len(), events.len(), "repeats appended nothing");
    assert_eq!(ingest.metrics.duplicates.get(), events.len() as u64);

    // A changed repeat is a conflict: quarantined, with a receipt in the ledger.
    let mut changed = events[0].clone();
    changed["data"]["description"] = json!("changed after the fact");
    publish(&js, &[changed], Mode::Binary, false).await;
    drained(&js).await;
    let stored = ledger(&js).await;
    assert_eq!(stored.len(), events.len() + 1);
    let receipt = stored.last().unwrap();
    assert_eq!(class_of(receipt), "toolledger.quarantine.recorded");
    assert_eq!(receipt_data(receipt)["reason"], "duplicate_conflict");
    assert_eq!(receipt_data(receipt)["event_id"], events[0]["id"]);
    let q = quarantined(&js).await;
    assert_eq!(
        q,
        vec![(
            format!(
                "atl.quarantine.{}.duplicate_conflict",
                events[0]["tenant"].as_str().unwrap()
            ),
            "duplicate_conflict".to_owned()
        )]
    );
    ingest.stop().await;
}

/// Issue 28's censorship attack: tenant A publishes, on its own subject, an event carrying the
/// `Nats-Msg-Id` derived for tenant B's next event. ATL_INBOUND dedupes nothing, so B's real event is
/// stored, ingested and in the ledger beside A's.
#[tokio::test]
async fn another_tenants_msg_id_never_suppresses_an_event() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());

    let events = generate(&GeneratorConfig {
        seed: 29,
        sessions: 2,
        tenants: vec!["acme".into(), "globex".into()],
        ..Default::default()
    })
    .events;
    let victim = events.iter().find(|e| e["tenant"] == "globex").unwrap().clone();
    let attacker = events.iter().find(|e| e["tenant"] == "acme").unwrap().clone();
    let mut forged = produce::prepare_all(std::slice::from_ref(&attacker), Mode::Binary).unwrap();
    let victims_id = produce::prepare_all(std::slice::from_ref(&victim), Mode::Binary).unwrap()[0]
        .1
        .msg_id
        .clone();
    forged[0].1.headers.insert("Nats-Msg-Id", victims_id.as_str());
    assert!(forged[0].1.subject.starts_with("atl.in.acme."));
    let report = produce::publish_all(&js, forged).await;
    assert_eq!(report.published, 1, "{report:?}");

    let report = produce::publish_all(
        &js,
        produce::prepare_all(std::slice::from_ref(&victim), Mode::Binary).unwrap(),
    )
    .await;
    assert_eq!((report.published, report.duplicates), (1, 0), "{report:?}");
    drained(&js).await;
    let stored = ledger(&js).await;
    let ids: Vec<(String, String)> = stored
        .iter()
        .map(|entry| {
            (
                entry.event.extension_str("tenant").unwrap_or_default().to_owned(),
                entry.event.id().to_owned(),
            )
        })
        .collect();
    assert!(
        ids.contains(&("globex".to_owned(), victim["id"].as_str().unwrap().to_owned())),
        "the victim's event is in the ledger: {ids:?}"
    );
    assert!(ids.contains(&("acme".to_owned(), attacker["id"].as_str().unwrap().to_owned())));
    ingest.stop().await;
}

#[tokio::test]
async fn a_restarted_ingest_rebuilds_its_index_from_the_ledger() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let events = generate(&GeneratorConfig {
        seed: 5,
        ..Default::default()
    })
    .events;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());
    publish(&js, &events, Mode::Binary, true).await;
    drained(&js).await;
    ingest.stop().await;
    // The index goes; the scrub key stays (it is what makes a re-sent secret compare equal).
    for entry in std::fs::read_dir(dir.path().join("ingest")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let ingest = Running::start(&nats, dir.path());
    publish(&js, &events, Mode::Structured, false).await;
    drained(&js).await;
    assert_eq!(ledger(&js).await.len(), events.len());
    assert_eq!(ingest.metrics.duplicates.get(), events.len() as u64);
    ingest.stop().await;
}

/// Publishes raw bytes with optional headers, as a careless or hostile producer would.
pub async fn publish_raw(js: &jetstream::Context, subject: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in headers {
        map.insert(*name, *value);
    }
    js.publish_with_headers(subject.to_owned(), map, body.to_vec().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_malformed_corpus_is_quarantined_with_reasons_and_receipts_and_ingest_goes_on() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());

    let good = generate(&GeneratorConfig {
        seed: 3,
        ..Default::default()
    })
    .events;
    let planned = good
        .iter()
        .find(|e| e["type"] == "tool.invocation.planned")
        .unwrap()
        .clone();
    let structured = |event: &Value| serde_json::to_vec(event).unwrap();
    let ce = [("content-type", "application/cloudevents+json")];
    let subject = "atl.in.acme.tool.invocation.planned";

    let mut missing = planned.clone();
    missing["data"].as_object_mut().unwrap().remove("invocation_id");
    let mut wrong_type = planned.clone();
    wrong_type["data"]["tool_id"] = json!(7);
    // A value in the wrong place that is a secret: the receipt names the pointer and the rule only.
    let mut secret_value = planned.clone();
    secret_value["data"]["status"] = json!({"auth": "Bearer SECRETvalue-0123456789abcdef"});
    let mut unknown = planned.clone();
    unknown["type"] = json!("tool.invocation.exploded");
    // One of the ledger's own records from a producer: a forged erasure record.
    let mut forged_erasure = planned.clone();
    forged_erasure["type"] = json!("toolledger.erasure.completed");
    // A producer's look-alike of ingest's own markers: it would claim a scrub that did not happen.
    let mut forged_marker = planned.clone();
    forged_marker["data"]["model_input"] = json!({"cmd": {"$scrubbed": "hmac-sha256:00"}});
    let mut mismatch = planned.clone();
    mismatch["tenant"] = json!("globex");
    let mut dotted = planned.clone();
    dotted["tenant"] = json!("ac.me");
    let mut wildcard = planned.clone();
    wildcard["tenant"] = json!("*");
    let body = structured(&planned);
    let truncated = &body[..body.len() / 2];
    let duplicate_keys = br#"{"specversion":"1.0","id":"x","id":"y","source":"s","type":"tool.declared","tenant":"acme","data":{}}"#;
    let big_integer = String::from_utf8(body.clone()).unwrap().replacen(
        "\"data\":{",
        "\"data\":{\"n\":9007199254740993,",
        1,
    );
    // Secrets where a rejection's text would quote them: the receipt names the rule only.
    let mut secret_type = planned.clone();
    secret_type["type"] = json!("Bearer SECRETtype-0123456789abcdef");
    let mut secret_tenant = planned.clone();
    secret_tenant["tenant"] = json!("Bearer SECRETtenant-0123456789abcdef");
    let mut secret_content_type = planned.clone();
    secret_content_type["datacontenttype"] = json!("text/plain; token=SECRETctype-0123456789abcdef");
    let secret_number = String::from_utf8(body.clone()).unwrap().replacen(
        "\"data\":{",
        "\"data\":{\"pin\":4111111111111111123,",
        1,
    );
    // A key is part of a pointer: a detail naming it is pattern-scrubbed.
    let mut secret_key = planned.clone();
    secret_key["data"]["model_input"] =
        json!({"export GITHUB_TOKEN=ghp_SECRETkey0123456789abcdefghijABCDEFGHIJ": {"$scrubbed": "x"}});

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (subject, truncated.to_vec(), "bad_envelope"),
        (subject, structured(&missing), "schema_violation"),
        (subject, structured(&wrong_type), "schema_violation"),
        (subject, structured(&secret_value), "schema_violation"),
        (
            "atl.in.acme.tool.invocation.exploded",
            structured(&unknown),
            "unknown_class",
        ),
        (
            "atl.in.acme.toolledger.erasure.completed",
            structured(&forged_erasure),
            "reserved_class",
        ),
        (subject, structured(&forged_marker), "reserved_marker"),
        (subject, structured(&mismatch), "tenant_mismatch"),
        (subject, structured(&dotted), "tenant_mismatch"),
        (subject, structured(&wildcard), "tenant_mismatch"),
        (
            "atl.in.ac$me.tool.invocation.planned",
            structured(&planned),
            "unsafe_tenant",
        ),
        ("atl.in.acme.tool.declared", duplicate_keys.to_vec(), "not_ijson"),
        (subject, big_integer.into_bytes(), "not_ijson"),
        (subject, vec![0xff, 0xfe, 0x00], "bad_envelope"),
        (subject, structured(&secret_type), "unknown_class"),
        (subject, structured(&secret_tenant), "tenant_mismatch"),
        (subject, structured(&secret_content_type), "bad_envelope"),
        (subject, secret_number.into_bytes(), "not_ijson"),
        (subject, structured(&secret_key), "reserved_marker"),
    ];
    let secrets = [
        "SECRETvalue",
        "SECRETtype",
        "SECRETtenant",
        "SECRETctype",
        "4111111111111111123",
        "SECRETkey",
    ];
    for (subject, body, _) in &cases {
        publish_raw(&js, subject, &ce, body).await;
    }
    // Good events after the garbage still land: ingest never stops.
    publish(&js, &good, Mode::Binary, true).await;
    drained(&js).await;

    let reasons: Vec<String> = quarantined(&js)
        .await
        .into_iter()
        .map(|(_, reason)| reason)
        .collect();
    // Every case but the unsafe tenant's is acme's, in acme's order; the unsafe one is its own lane.
    let expected: Vec<&str> = cases.iter().map(|(_, _, reason)| *reason).collect();
    let acme = |reasons: &[&str]| -> Vec<String> {
        reasons
            .iter()
            .filter(|r| **r != "unsafe_tenant")
            .map(|r| (*r).to_owned())
            .collect()
    };
    let got: Vec<&str> = reasons.iter().map(String::as_str).collect();
    assert_eq!(acme(&got), acme(&expected));
    assert_eq!(got.iter().filter(|r| **r == "unsafe_tenant").count(), 1);
    let stored = ledger(&js).await;
    let receipts: Vec<String> = stored
        .iter()
        .filter(|e| class_of(e) == "toolledger.quarantine.recorded")
        .map(|e| receipt_data(e)["reason"].as_str().unwrap().to_owned())
        .collect();
    let receipts: Vec<&str> = receipts.iter().map(String::as_str).collect();
    assert_eq!(
        acme(&receipts),
        acme(&expected),
        "one receipt per rejection, in order"
    );
    assert_eq!(receipts.len(), expected.len());
    let unsafe_receipt = stored
        .iter()
        .find(|e| receipt_data(e)["reason"] == "unsafe_tenant")
        .unwrap();
    assert_eq!(receipt_data(unsafe_receipt)["tenant"], "_unroutable");
    assert_eq!(stored.len(), cases.len() + good.len());
    let details: Vec<String> = stored
        .iter()
        .filter(|e| receipt_data(e)["reason"] == "schema_violation")
        .map(|e| receipt_data(e)["detail"].to_string())
        .collect();
    assert!(
        details
            .iter()
            .any(|d| d.contains("/data/status") && d.contains("is not of type")),
        "{details:?}"
    );
    for entry in &stored {
        let text = String::from_utf8(entry.canonical_bytes().unwrap()).unwrap();
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "a rejected value reached the ledger: {text}"
            );
        }
    }
    // Nor the quarantine's detail header (the original, value and all, is the quarantine's to keep).
    let records = toolledger_ledger::quarantine::list(&js, None, None, 100)
        .await
        .unwrap();
    assert_eq!(records.len(), cases.len());
    for record in &records {
        for secret in secrets {
            assert!(!record.detail.contains(secret), "{}", record.detail);
        }
    }
    let marker_receipt = stored
        .iter()
        .find(|e| receipt_data(e)["reason"] == "reserved_marker")
        .unwrap();
    let key_receipt = stored
        .iter()
        .filter(|e| receipt_data(e)["reason"] == "reserved_marker")
        .nth(1)
        .unwrap();
    assert!(
        receipt_data(key_receipt)["detail"]
            .as_str()
            .unwrap()
            .starts_with("/data/model_input/export GITHUB_TOKEN=[scrubbed:hmac-sha256:"),
        "{}",
        receipt_data(key_receipt)
    );
    assert!(
        receipt_data(marker_receipt)["detail"]
            .as_str()
            .unwrap()
            .starts_with("/data/model_input/cmd:"),
        "{}",
        receipt_data(marker_receipt)
    );
    ingest.stop().await;
}

#[tokio::test]
async fn two_ingests_at_once_never_interleave_or_duplicate() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    // One ledger's writers share its keys, or only the first would write at all.
    let (a_dir, b_dir) = crate::partitions::two_data_dirs();
    let a = Running::start(&nats, a_dir.path());
    let b = Running::start(&nats, b_dir.path());
    let events = generate(&GeneratorConfig {
        seed: 21,
        sessions: 4,
        ..Default::default()
    })
    .events;
    publish(&js, &events, Mode::Binary, true).await;
    drained(&js).await;
    let ids: Vec<String> = ledger(&js).await.iter().map(id_of).collect();
    let expected = ids_of(&events);
    assert_eq!(ids, expected);
    a.stop().await;
    b.stop().await;
}

/// Publishes with a hand-written header block over a raw socket, bypassing every client's checks.
fn publish_raw_socket(port: u16, subject: &str, header_block: &[u8], body: &[u8]) {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut info = String::new();
    reader.read_line(&mut info).unwrap();
    assert!(info.starts_with("INFO"), "{info}");
    let mut writer = stream;
    writer
        .write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\n")
        .unwrap();
    let total = header_block.len() + body.len();
    write!(writer, "HPUB {subject} {} {total}\r\n", header_block.len()).unwrap();
    writer.write_all(header_block).unwrap();
    writer.write_all(body).unwrap();
    writer.write_all(b"\r\nPING\r\n").unwrap();
    let mut pong = String::new();
    reader.read_line(&mut pong).unwrap();
    assert!(pong.starts_with("PONG"), "server answered {pong}");
}

#[tokio::test]
async fn poison_headers_end_in_quarantine_and_ingest_recovers() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start_with(&nats, dir.path(), |s| {
        s.ack_wait = Duration::from_millis(700);
        s.max_deliver = 2;
    });
    let good = generate(&GeneratorConfig {
        seed: 9,
        ..Default::default()
    })
    .events;
    let body = serde_json::to_vec(&good[0]).unwrap();
    let subject = format!(
        "atl.in.{}.{}",
        good[0]["tenant"].as_str().unwrap(),
        good[0]["type"].as_str().unwrap()
    );
    publish_raw_socket(
        nats.port(),
        &subject,
        b"NATS/1.0\r\nce-id: \xff\xfe\r\n\r\n",
        &body,
    );
    publish_raw_socket(nats.port(), &subject, b"NATS/1.0\r\nce-id: a\rb\r\n\r\n", &body);
    publish(&js, &good, Mode::Binary, true).await;

    // Poison is redelivered until max_deliver, then fetched raw from the advisory.
    drained(&js).await;
    let reasons: Vec<String> = quarantined(&js).await.into_iter().map(|(_, r)| r).collect();
    assert_eq!(reasons, ["poison_message", "poison_message"]);
    let stored = ledger(&js).await;
    let poison_receipts = stored
        .iter()
        .filter(|e| receipt_data(e)["reason"] == "poison_message")
        .count();
    assert_eq!(poison_receipts, 2);
    let appended: Vec<String> = stored
        .iter()
        .filter(|e| class_of(e) != "toolledger.quarantine.recorded")
        .map(id_of)
        .collect();
    let expected = ids_of(&good);
    assert_eq!(
        appended, expected,
        "the good events all landed once despite the broken connections"
    );
    ingest.stop().await;
}

/// A server with its monitoring endpoint on a free loopback port (to list connections).
fn monitored_nats() -> (NatsFixture, std::net::SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let monitor = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = dir.path().join("nats.conf");
    std::fs::write(&config, format!("http: \"{monitor}\"\n")).unwrap();
    (NatsFixture::start_with_config(Some(config)), monitor, dir)
}

/// How many of the server's connections in `state` (`open`, `closed`) are named `name`.
fn connections_named(monitor: std::net::SocketAddr, state: &str, name: &str) -> usize {
    let response =
        toolledger_testkit::http_get(monitor, &format!("/connz?state={state}&limit=100000")).unwrap();
    let connz: Value = serde_json::from_str(&response.body).unwrap();
    connz["connections"]
        .as_array()
        .map_or(0, |all| all.iter().filter(|c| c["name"] == name).count())
}

/// One tenant's producer sends header blocks the client cannot read while another tenant publishes:
/// each poison message is quarantined as it is met, read raw, without waiting for a redelivery (the
/// ack wait here is a minute, longer than the test may take), and the other tenant's events keep
/// landing. Only the poisoned tenant's connection is broken and replaced: the other tenant's stays
/// up throughout. The ledger keeps each tenant's inbound order (docs/ingest.md), nothing is lost or
/// duplicated, and ATL_INBOUND ends empty.
#[tokio::test]
async fn poison_from_one_tenant_is_quarantined_at_once_and_holds_no_tenant_up() {
    let (nats, monitor, _config) = monitored_nats();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start_with(&nats, dir.path(), |s| {
        s.ack_wait = Duration::from_secs(60);
    });
    let events = generate(&GeneratorConfig {
        seed: 17,
        sessions: 4,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        ..Default::default()
    })
    .events;
    let (acme, globex): (Vec<Value>, Vec<Value>) = events.into_iter().partition(|e| e["tenant"] == "acme");
    let body = serde_json::to_vec(&acme[0]).unwrap();
    let poison_subject = format!("atl.in.acme.{}", acme[0]["type"].as_str().unwrap());
    let started = Instant::now();
    let rounds = 3;
    for (round, chunk) in globex.chunks(globex.len().div_ceil(rounds)).enumerate() {
        let header_block: &[u8] = if round % 2 == 0 {
            b"NATS/1.0\r\nce-id: a\rb\r\n\r\n"
        } else {
            b"NATS/1.0\r\nce-id: \xff\xfe\r\n\r\n"
        };
        publish_raw_socket(nats.port(), &poison_subject, header_block, &body);
        publish(&js, chunk, Mode::Binary, true).await;
    }
    publish(&js, &acme, Mode::Binary, true).await;

    drained(&js).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "drained in {took:?}: the poison waited for redelivery"
    );
    let reasons: Vec<String> = quarantined(&js).await.into_iter().map(|(_, r)| r).collect();
    assert_eq!(reasons, vec!["poison_message"; rounds]);
    let stored = ledger(&js).await;
    let receipts = stored
        .iter()
        .filter(|e| receipt_data(e)["reason"] == "poison_message")
        .count();
    assert_eq!(receipts, rounds);
    for (tenant, published) in [("acme", &acme), ("globex", &globex)] {
        let appended: Vec<String> = stored
            .iter()
            .filter(|e| class_of(e) != "toolledger.quarantine.recorded")
            .filter(|e| e.event.extension("tenant").map(|t| t.to_string()).as_deref() == Some(tenant))
            .map(id_of)
            .collect();
        assert_eq!(
            appended,
            ids_of(published),
            "{tenant}: every event once, in its inbound order"
        );
    }
    // Lanes have their own connections: the poison broke acme's (each one it arrived on), never
    // globex's.
    let (acme_lane, globex_lane) = ("ingest-test inbound acme", "ingest-test inbound globex");
    assert_eq!(connections_named(monitor, "open", globex_lane), 1);
    assert_eq!(
        connections_named(monitor, "closed", globex_lane),
        0,
        "the other tenant's connection was never replaced"
    );
    assert!(connections_named(monitor, "closed", acme_lane) >= 1);
    ingest.stop().await;
}

/// Publishes `chunk` until every event is acked, as a producer does across a server outage: what
/// was not acked is republished with the same Nats-Msg-Id. A publish caught by the outage may never
/// be answered, and `publish_all` waits for each ack in turn, so each attempt is bounded by `attempt`.
async fn publish_until_acked(js: &jetstream::Context, chunk: &[Value], attempt: Duration) {
    loop {
        let outgoing = produce::prepare_all(chunk, Mode::Binary).unwrap();
        match tokio::time::timeout(attempt, produce::publish_all(js, outgoing)).await {
            Ok(report) if report.failed.is_empty() => return,
            Ok(report) => eprintln!(
                "producer retries {} events: {:?}",
                report.failed.len(),
                report.failed.first()
            ),
            Err(_) => eprintln!("producer retries a chunk whose acks never came"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_nats_server_crash_mid_load_loses_and_duplicates_nothing() {
    let mut nats = NatsFixture::start();
    let client = nats.reconnecting_client().await;
    let js = jetstream::new(client);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());
    let events = generate(&GeneratorConfig {
        seed: 17,
        sessions: 6,
        ..Default::default()
    })
    .events;
    let producer = {
        let js = js.clone();
        let events = events.clone();
        tokio::spawn(async move {
            for chunk in events.chunks(25) {
                publish_until_acked(&js, chunk, Duration::from_secs(10)).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let nats = tokio::task::spawn_blocking(move || {
        nats.kill_and_restart();
        nats
    })
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(120), producer)
        .await
        .unwrap()
        .unwrap();
    drained(&js).await;
    let ids: Vec<String> = ledger(&js).await.iter().map(id_of).collect();
    let expected = ids_of(&events);
    assert_eq!(
        ids, expected,
        "every acked event once, in order, across the server crash"
    );
    ingest.stop().await;
    drop(nats);
}

/// The wedge an operator once met after a server crash (a batch pending, no pull outstanding,
/// health ok, for minutes), forced ten times: nats-server is frozen (SIGSTOP) under load until
/// ingest's health says it is not ok, then let go (SIGCONT). After every thaw the ledger grows again
/// within 10 s, and at the end every acked event is in it once, in order, and a shutdown asked for
/// while the server is frozen is honoured within 5 s.
#[tokio::test]
async fn a_frozen_server_under_load_never_wedges_ingest() {
    const CYCLES: usize = 10;
    let nats = NatsFixture::start();
    let client = nats.reconnecting_client().await;
    let js = jetstream::new(client);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start_with(&nats, dir.path(), |s| {
        s.stall_after = Duration::from_secs(2);
    });
    let events = generate(&GeneratorConfig {
        seed: 29,
        sessions: 200,
        ..Default::default()
    })
    .events;
    let (done_tx, mut done) = tokio::sync::watch::channel(false);
    let producer = {
        let js = js.clone();
        let events = events.clone();
        tokio::spawn(async move {
            let mut sent = 0;
            for chunk in events.chunks(20) {
                if *done.borrow_and_update() {
                    break;
                }
                publish_until_acked(&js, chunk, Duration::from_secs(5)).await;
                sent += chunk.len();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            sent
        })
    };
    let tail = |js: jetstream::Context| async move {
        tokio::time::timeout(Duration::from_secs(2), last_sequence(&js, LEDGER))
            .await
            .ok()
            .and_then(Result::ok)
    };
    for cycle in 0..CYCLES {
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            !producer.is_finished(),
            "cycle {cycle}: the load ran out (generate more sessions)"
        );
        let before = tail(js.clone())
            .await
            .expect("the ledger is readable before the freeze");
        nats.pause();
        let frozen = Instant::now();
        while ingest.health.report().status == "ok" {
            if frozen.elapsed() > Duration::from_secs(10) {
                nats.resume();
                panic!("cycle {cycle}: health still ok 10 s into the freeze");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let noticed = frozen.elapsed();
        nats.resume();
        let thawed = Instant::now();
        loop {
            if tail(js.clone()).await.is_some_and(|now| now > before) {
                break;
            }
            assert!(
                thawed.elapsed() < Duration::from_secs(10),
                "cycle {cycle}: no progress 10 s after the thaw (stall noticed after {noticed:?})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "cycle {cycle}: stall noticed after {noticed:?}, progress {:?} after the thaw",
            thawed.elapsed()
        );
    }
    done_tx.send(true).unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(60), producer)
        .await
        .unwrap()
        .unwrap();
    drained(&js).await;
    let ids: Vec<String> = ledger(&js).await.iter().map(id_of).collect();
    assert_eq!(
        ids,
        ids_of(&events[..sent]),
        "every acked event once, in order, across {CYCLES} freezes"
    );
    // A shutdown asked for while the server is frozen is honoured within 5 s all the same.
    nats.pause();
    let asked = Instant::now();
    ingest.stop().await;
    let stopped = asked.elapsed();
    nats.resume();
    assert!(stopped < Duration::from_secs(5), "stopping took {stopped:?}");
}

#[tokio::test]
async fn a_quarantined_event_is_listed_shown_and_redriven_once_corrected() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());
    let events = generate(&GeneratorConfig {
        seed: 4,
        ..Default::default()
    })
    .events;
    let mut broken = events[0].clone();
    let fixed = broken.clone();
    broken["data"].as_object_mut().unwrap().remove("tool_id");
    publish(&js, &[broken], Mode::Binary, false).await;
    drained(&js).await;

    use toolledger_ledger::quarantine;
    let listed = quarantine::list(&js, Some(events[0]["tenant"].as_str().unwrap()), None, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].reason, "schema_violation");
    assert!(listed[0].detail.contains("/data/tool_id"), "{}", listed[0].detail);
    assert!(
        quarantine::list(&js, None, Some("poison_message"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let shown = quarantine::show(&js, listed[0].seq).await.unwrap().unwrap();
    assert_eq!(
        shown.inbound_subject,
        format!(
            "atl.in.{}.{}",
            events[0]["tenant"].as_str().unwrap(),
            events[0]["type"].as_str().unwrap()
        )
    );

    // The corrected event in structured form, republished to where the original came in.
    let body = serde_json::to_vec(&fixed).unwrap();
    assert!(shown.original_headers().get("Atl-Quarantine-Reason").is_none());
    quarantine::redrive(&js, shown.seq, Some(body.into()))
        .await
        .unwrap();
    drained(&js).await;
    let stored = ledger(&js).await;
    assert_eq!(stored.len(), 2, "the receipt, then the redriven event");
    assert_eq!(id_of(&stored[1]), events[0]["id"].as_str().unwrap());
    ingest.stop().await;
}

#[tokio::test]
async fn ten_thousand_events_land_exactly_once_in_producer_order() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());
    let events = events_of(&["acme", "globex", "initech"], 10_000, 100);
    publish(&js, &events, Mode::Binary, true).await;
    drained(&js).await;
    let stored = ledger(&js).await;
    assert_eq!(stored.len(), 10_000);
    assert!(
        entry_ids_by_tenant(&stored) == ids_by_tenant(&events),
        "the ledger departs from a tenant's producer order"
    );
    ingest.stop().await;
}

/// `count` generated events of `tenants`, from consecutive seeds starting at `first_seed`.
pub fn events_of(tenants: &[&str], count: usize, first_seed: u64) -> Vec<Value> {
    let mut events = Vec::new();
    let mut seed = first_seed;
    while events.len() < count {
        events.extend(
            generate(&GeneratorConfig {
                seed,
                sessions: 10,
                tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
                ..Default::default()
            })
            .events,
        );
        seed += 1;
    }
    events.truncate(count);
    events
}

#[tokio::test]
async fn one_tenants_backlog_takes_only_its_share_of_each_batch() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    // A's burst waits in ATL_INBOUND ahead of B's few events.
    let burst = events_of(&["acme"], 20_000, 500);
    let few = events_of(&["globex"], 50, 900);
    publish(&js, &burst, Mode::Binary, true).await;
    publish(&js, &few, Mode::Binary, true).await;
    let dir = tempfile::tempdir().unwrap();
    let batch = IngestSettings::new(dir.path()).batch_size;
    let ingest = Running::start(&nats, dir.path());
    drained(&js).await;
    let stored = ledger(&js).await;
    assert_eq!(stored.len(), burst.len() + few.len(), "every event once");
    let mut expected = ids_by_tenant(&burst);
    expected.extend(ids_by_tenant(&few));
    assert!(
        entry_ids_by_tenant(&stored) == expected,
        "each tenant's events in its inbound order"
    );
    // In inbound order globex's events would come after all 20,000 of acme's; with a lane each,
    // they go into the first batches beside acme's share.
    let last_globex = stored
        .iter()
        .rposition(|e| e.event.extension("tenant").map(|t| t.to_string()).as_deref() == Some("globex"))
        .unwrap();
    assert!(
        last_globex < 3 * batch,
        "globex's last event is entry {last_globex}: it waited behind acme's backlog"
    );
    ingest.stop().await;
}
