//! Fault tests: `toolledger ingest` killed with SIGKILL at seeded random moments under load.
//!
//! Set `TOOLLEDGER_FAULT_SEED` to replay a run; the seed is printed either way.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::{ChildProcess, NatsFixture};
use toolledger_wire::streams::{INBOUND, LEDGER};
use toolledger_wire::{LedgerEntry, Mode, produce};

use crate::fixture::{Rng, fault_seed};
use crate::toolledger;

/// Kill cycles per run (STYLE.md asks for at least 20).
const CYCLES: usize = 20;

/// Runs a `toolledger` tool to completion with the test's data directory; panics on failure.
fn tool(args: &[&str], data_dir: &std::path::Path) -> String {
    let mut child = ChildProcess::spawn(
        toolledger(),
        args,
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
        ],
    );
    let status = child.wait_timeout(Duration::from_secs(120)).expect("tool exits");
    assert!(
        status.success(),
        "{args:?} failed\n{}\n{}",
        child.stdout(),
        child.stderr()
    );
    child.stdout()
}

fn spawn_ingest(url: &str, data_dir: &std::path::Path) -> ChildProcess {
    ChildProcess::spawn(
        toolledger(),
        [
            "ingest",
            "--nats-url",
            url,
            "--ack-wait-ms",
            "800",
            "--lease-ttl-ms",
            "900",
            "--batch-size",
            "64",
        ],
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "info"),
        ],
    )
}

async fn inbound_messages(js: &jetstream::Context) -> u64 {
    js.get_stream(INBOUND)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_killed_at_random_moments_loses_and_duplicates_nothing() {
    let seed = fault_seed();
    println!("fault seed {seed} (TOOLLEDGER_FAULT_SEED={seed} replays it)");
    let mut delays = Rng(seed);
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    let data = tempfile::tempdir().unwrap();
    tool(&["init", "--nats-url", &nats.url()], data.path());

    let events = generate(&GeneratorConfig {
        seed,
        sessions: 12,
        tenants: vec!["acme".into(), "globex".into()],
        ..Default::default()
    })
    .events;
    let producer = {
        let js = js.clone();
        let events = events.clone();
        tokio::spawn(async move {
            let mut acked = 0;
            for chunk in events.chunks(20) {
                let outgoing = produce::prepare_all(chunk, Mode::Binary).unwrap();
                let report = produce::publish_all(&js, outgoing).await;
                assert!(report.failed.is_empty(), "{:?}", report.failed);
                acked += report.published;
                // Spread over the kill cycles, so ingest dies under load, not after it.
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            acked
        })
    };

    let started = Instant::now();
    let mut logs = Vec::new();
    for cycle in 0..CYCLES {
        let mut ingest = spawn_ingest(&nats.url(), data.path());
        let delay = delays.between(200, 1800);
        tokio::time::sleep(delay).await;
        ingest.kill9();
        for line in ingest.stderr().lines().filter(|l| !l.trim().is_empty()) {
            logs.push(format!("cycle {cycle} (killed after {delay:?}): {line}"));
        }
    }
    let acked = producer.await.unwrap();
    assert_eq!(
        acked,
        events.len(),
        "the producer's every event was acked by ATL_INBOUND"
    );

    let mut last = spawn_ingest(&nats.url(), data.path());
    let deadline = Instant::now() + Duration::from_secs(90);
    while inbound_messages(&js).await > 0 {
        assert!(
            Instant::now() < deadline,
            "ingest did not drain the inbox\n{}",
            last.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        last.terminate(Duration::from_secs(30))
            .expect("ingest stops on SIGTERM")
            .success()
    );
    println!("{CYCLES} kill cycles in {:.1}s", started.elapsed().as_secs_f64());

    let mut ledger = js.get_stream(LEDGER).await.unwrap();
    let tail = ledger.info().await.unwrap().state.last_sequence;
    let stored = toolledger_ledger::read_range(&js, LEDGER, 1, tail).await.unwrap();
    // (tenant, id) of each entry, in ledger order.
    let entries: Vec<(String, String)> = stored
        .iter()
        .map(|(_, bytes)| {
            let entry = LedgerEntry::parse(bytes).unwrap();
            let tenant = entry
                .event
                .extension("tenant")
                .map(|t| t.to_string())
                .unwrap_or_default();
            (tenant, entry.event.id().to_owned())
        })
        .collect();
    let ids: Vec<String> = entries.iter().map(|(_, id)| id.clone()).collect();
    let expected: Vec<String> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "seed {seed}: no event appended twice");
    assert_eq!(
        ids.len(),
        expected.len(),
        "seed {seed}: every acked event exactly once"
    );
    // The ledger keeps each tenant's order (docs/ingest.md), nothing across tenants.
    for tenant in ["acme", "globex"] {
        let ids: Vec<String> = entries
            .iter()
            .filter(|(t, _)| t == tenant)
            .map(|(_, id)| id.clone())
            .collect();
        let expected: Vec<String> = events
            .iter()
            .filter(|e| e["tenant"] == tenant)
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect();
        check_order(seed, tenant, &ids, &expected, &logs);
    }
}

/// Panics, with the ingest logs, where `ids` departs from `expected`.
fn check_order(seed: u64, tenant: &str, ids: &[String], expected: &[String], logs: &[String]) {
    if let Some(at) = ids.iter().zip(expected).position(|(a, b)| a != b) {
        let window = |v: &[String]| v[at.saturating_sub(2)..(at + 5).min(v.len())].join(" ");
        panic!(
            "seed {seed}: {tenant}'s ledger order departs from the producer's at position {at}\nledger:   {}\nproduced: {}\n{}",
            window(ids),
            window(expected),
            logs.join("\n")
        );
    }
}
