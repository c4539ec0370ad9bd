//! The query library against real parts: real SQLite projections written by the projector's own
//! `Store::apply_batch`, a real file blob store written by ingest's `BlobStore`.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod lists;
mod payloads;
mod serve;
mod sql;

use toolledger_projector::{RawEntry, Store};

/// The canonical entry ingest would append for a structured CloudEvent, with these payload refs.
pub use toolledger_testkit::entry_bytes_with_refs as entry_bytes;

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
