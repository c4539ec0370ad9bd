//! Ingest throughput beside two baselines measured in the same run on the same server:
//!
//! - `publish`: a producer's raw JetStream publish of the same messages to ATL_INBOUND (pipelined,
//!   every ack awaited) — the rate events can arrive at all;
//! - `relay`: a pass-through relay — pull from ATL_INBOUND, publish the bytes to a relay stream,
//!   ack — the floor for any consume-append-ack service, with no processing;
//! - `ingest`: the real service (decode, validate, scrub, dedupe, offload, canonicalize, append with
//!   the single-writer guarantees, index, ack), from a full inbox to an empty one.
//!
//! ```text
//! cargo run --release -p toolledger-ingest --example ingest_bench -- [EVENTS] [RUNS]
//! ```
//! Needs the pinned nats-server (`scripts/setup`). Prints the median and the spread of each figure.

#![allow(clippy::unwrap_used)] // a benchmark: a failure is a crash with its reason

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use toolledger_ingest::metrics::IngestMetrics;
use toolledger_ingest::service::{self, Connector, IngestSettings};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::NatsFixture;
use toolledger_wire::streams::{INBOUND, ensure_contract};
use toolledger_wire::{Mode, produce};

fn events(count: usize) -> Vec<serde_json::Value> {
    let mut events = Vec::with_capacity(count);
    let mut seed = 1;
    while events.len() < count {
        let generated = generate(&GeneratorConfig {
            seed,
            sessions: 10,
            tenants: vec!["acme".into(), "globex".into(), "initech".into()],
            extra_invocations: 5,
            ..Default::default()
        });
        events.extend(generated.events);
        seed += 1;
    }
    events.truncate(count);
    events
}

/// Publishes every event; `fresh` drops the producer's `Nats-Msg-Id` so a second round on the same
/// server is not absorbed by JetStream's duplicate window.
async fn publish(js: &jetstream::Context, events: &[serde_json::Value], fresh: bool) -> Duration {
    let mut outgoing = produce::prepare_all(events, Mode::Binary).unwrap();
    if fresh {
        outgoing = outgoing
            .into_iter()
            .map(|(at, message)| (at, message.without_msg_id()))
            .collect();
    }
    let started = Instant::now();
    let report = produce::publish_all(js, outgoing).await;
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    started.elapsed()
}

async fn inbox(js: &jetstream::Context) -> u64 {
    js.get_stream(INBOUND)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

async fn drain_wait(js: &jetstream::Context) {
    while inbox(js).await > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn relay(js: &jetstream::Context, count: usize) -> Duration {
    let _ = js.delete_stream("RELAY").await;
    js.create_stream(stream::Config {
        name: "RELAY".into(),
        subjects: vec!["relay.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    let consumer = js
        .get_stream(INBOUND)
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some("relay".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            max_ack_pending: 1024,
            ..Default::default()
        })
        .await
        .unwrap();
    let started = Instant::now();
    let mut done = 0;
    while done < count {
        let mut batch = consumer.fetch().max_messages(256).messages().await.unwrap();
        let mut messages = Vec::new();
        while let Some(message) = batch.next().await {
            messages.push(message.unwrap());
        }
        let mut acks = Vec::with_capacity(messages.len());
        for message in &messages {
            acks.push(
                js.publish(format!("relay.{}", message.subject), message.payload.clone())
                    .await
                    .unwrap(),
            );
        }
        for ack in acks {
            ack.await.unwrap();
        }
        for message in &messages {
            message.ack().await.unwrap();
        }
        done += messages.len();
    }
    let elapsed = started.elapsed();
    js.get_stream(INBOUND)
        .await
        .unwrap()
        .delete_consumer("relay")
        .await
        .unwrap();
    elapsed
}

async fn ingest(nats: &NatsFixture, js: &jetstream::Context) -> Duration {
    let data = tempfile::tempdir().unwrap();
    let key = data.path().join("keys/checkpoint.key");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    toolledger_merkle::NoteSigner::generate("toolledger/ATL_LEDGER")
        .unwrap()
        .save(&key)
        .unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = IngestMetrics::register(&mut registry);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    let task = tokio::spawn(service::run(
        Connector {
            url: nats.url(),
            name: "bench".into(),
        },
        IngestSettings::new(data.path()),
        metrics,
        toolledger_core::telemetry::Health::default(),
        async {
            let _ = stopped.await;
        },
    ));
    drain_wait(js).await;
    let elapsed = started.elapsed();
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    elapsed
}

fn summary(name: &str, count: usize, runs: &[Duration]) -> f64 {
    let mut rates: Vec<f64> = runs.iter().map(|d| count as f64 / d.as_secs_f64()).collect();
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    println!(
        "{name:<8} {median:>10.0} events/s  (median of {}, spread {:.0}–{:.0})",
        rates.len(),
        rates[0],
        rates[rates.len() - 1]
    );
    median
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    let events = events(count);
    let bytes: usize = events.iter().map(|e| e.to_string().len()).sum();
    println!(
        "{count} generated events, {:.0} bytes on average, {runs} runs each",
        bytes as f64 / count as f64
    );
    let (mut published, mut relayed, mut ingested) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        // A fresh server per run: every ingest run starts from an empty ledger and index.
        let nats = NatsFixture::start();
        let js = jetstream::new(nats.client().await);
        ensure_contract(&js, &Default::default()).await.unwrap();
        published.push(publish(&js, &events, false).await);
        relayed.push(relay(&js, count).await);
        publish(&js, &events, true).await;
        ingested.push(ingest(&nats, &js).await);
        eprintln!("run {} done", run + 1);
    }
    let p = summary("publish", count, &published);
    let r = summary("relay", count, &relayed);
    let i = summary("ingest", count, &ingested);
    println!("ingest / relay = {:.2}, ingest / publish = {:.2}", i / r, i / p);
}
