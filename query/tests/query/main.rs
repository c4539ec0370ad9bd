//! The query library against real parts: real SQLite projections written by the projector's own
//! `Store::apply_batch`, a real file blob store written by ingest's `BlobStore`.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod payloads;
mod serve;

use serde_json::{Value, json};
use toolledger_projector::{RawEntry, Store};
use toolledger_wire::{LedgerEntry, LedgerMetadata};

/// The canonical entry ingest would append for a structured CloudEvent, with these payload refs.
pub fn entry_bytes(event: &Value, payload_refs: Value) -> Vec<u8> {
    let subject = format!(
        "atl.in.{}.{}",
        event["tenant"].as_str().unwrap(),
        event["type"].as_str().unwrap()
    );
    let decoded = toolledger_wire::decode(&subject, None, &serde_json::to_vec(event).unwrap()).unwrap();
    let ledger: LedgerMetadata = serde_json::from_value(json!({
        "ingested_at": event["time"], "origin": "structured", "payload_refs": payload_refs,
        "scrubbed_paths": [],
    }))
    .unwrap();
    LedgerEntry {
        event: decoded.event,
        ledger,
    }
    .canonical_bytes()
    .unwrap()
}

/// Applies `entries` after the store's position.
pub fn apply(store: &mut Store, entries: Vec<Vec<u8>>) {
    let start = store.position().unwrap();
    let batch: Vec<RawEntry> = entries
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| RawEntry {
            seq: start + 1 + i as u64,
            bytes,
        })
        .collect();
    store.apply_batch(&batch).unwrap();
}
