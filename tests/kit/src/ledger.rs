//! Ledger entries for tests that fill ATL_LEDGER without running ingest: the canonical bytes ingest
//! would append for a structured CloudEvent, appended in order.

use async_nats::jetstream;
use serde_json::Value;
use toolledger_schemas::generator::{Generated, GeneratorConfig, generate};
use toolledger_wire::{LedgerEntry, LedgerMetadata};

/// The canonical entry ingest would append for a structured CloudEvent (with `tenant` and `type`),
/// taken in at the event's own `time`, or at the epoch when it has none.
pub fn entry_bytes(event: &Value) -> Vec<u8> {
    LedgerEntry::for_structured_event(event, chrono::DateTime::UNIX_EPOCH)
        .expect("a structured event with tenant and type")
        .canonical_bytes()
        .expect("canonical bytes")
}

/// [`entry_bytes`] of an event whose payloads were offloaded: `payload_refs` is the entry's
/// `ledger.payload_refs` (a JSON array), the origin `structured`.
pub fn entry_bytes_with_refs(event: &Value, payload_refs: Value) -> Vec<u8> {
    let mut entry = LedgerEntry::for_structured_event(event, chrono::DateTime::UNIX_EPOCH)
        .expect("a structured event with tenant and type");
    entry.ledger = LedgerMetadata {
        payload_refs: serde_json::from_value(payload_refs).expect("payload refs"),
        ..entry.ledger
    };
    entry.canonical_bytes().expect("canonical bytes")
}

/// Creates ATL_LEDGER as `toolledger init` would (file storage, `atl.ledger.>`, no limits, no
/// delete or purge).
pub async fn create_ledger(js: &jetstream::Context) {
    let settings = toolledger_wire::streams::ContractSettings::default();
    js.create_stream(toolledger_wire::streams::ledger_config(&settings))
        .await
        .expect("create ATL_LEDGER");
}

/// `atl.ledger.<tenant>.<type>` of a structured CloudEvent.
pub fn ledger_subject(event: &Value) -> String {
    format!(
        "atl.ledger.{}.{}",
        event["tenant"].as_str().expect("tenant"),
        event["type"].as_str().expect("type")
    )
}

/// Appends `events` to the ledger stream in order, 256 publishes in flight at most; returns the last
/// sequence (0 for none).
pub async fn append_events(js: &jetstream::Context, events: &[Value]) -> u64 {
    let mut last = 0;
    for chunk in events.chunks(256) {
        let mut acks = Vec::with_capacity(chunk.len());
        for event in chunk {
            let ack = js
                .publish(ledger_subject(event), entry_bytes(event).into())
                .await
                .expect("publish");
            acks.push(ack);
        }
        for ack in acks {
            last = ack.await.expect("ack").sequence;
        }
    }
    last
}

/// Generated sessions with planted anomalies over `tenants`, from `seed`: every class, with the
/// scenario script's own truth.
pub fn generated(seed: u64, sessions: usize, tenants: &[&str]) -> Generated {
    generate(&GeneratorConfig {
        seed,
        sessions,
        tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
        plant_anomalies: true,
        ..GeneratorConfig::default()
    })
}
