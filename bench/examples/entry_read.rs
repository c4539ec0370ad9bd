//! What reading a ledger entry costs, per entry, on the bench's generated workload (50,000 entries
//! of ~1.2 KB): the validating scan `verify` uses, the full canonical parse the projector and the
//! exporter use, and serde_json's own parse and skip of the same bytes for scale.
//!
//! ```sh
//! cargo run --release -p toolledger-bench --example entry_read
//! ```

use std::time::{Duration, Instant};

use toolledger_wire::{LedgerEntry, ijson};

fn main() -> anyhow::Result<()> {
    let events = toolledger_bench::workload::events(50_000, 7);
    let entries = toolledger_bench::workload::ledger_entries(&events)?;
    let bytes: Vec<&[u8]> = entries.iter().map(|e| e.bytes.as_ref()).collect();
    let mean = bytes.iter().map(|b| b.len()).sum::<usize>() / bytes.len();
    println!("{} entries, mean {mean} bytes", bytes.len());
    let per_entry = |run: &dyn Fn(&[u8]) -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let started = Instant::now();
        for b in &bytes {
            run(b)?;
        }
        Ok(Duration::as_secs_f64(&started.elapsed()) * 1e6 / bytes.len() as f64)
    };
    for round in 1..=3 {
        let scan = per_entry(&|b| LedgerEntry::scan_canonical(b).map(drop).map_err(Into::into))?;
        let scan_json =
            per_entry(&|b| ijson::scan_checked_canonical(b).map_err(|e| anyhow::anyhow!("{e:?}")))?;
        let parse = per_entry(&|b| LedgerEntry::parse_canonical(b).map(drop).map_err(Into::into))?;
        let serde_value = per_entry(&|b| {
            serde_json::from_slice::<serde_json::Value>(b)
                .map(drop)
                .map_err(Into::into)
        })?;
        let serde_skip = per_entry(&|b| {
            serde_json::from_slice::<serde::de::IgnoredAny>(b)
                .map(drop)
                .map_err(Into::into)
        })?;
        let leaf = per_entry(&|b| {
            std::hint::black_box(toolledger_merkle::leaf_hash(b));
            Ok(())
        })?;
        println!(
            "round {round} (µs per entry): LedgerEntry::scan_canonical {scan:.2} (of which the I-JSON scan \
             {scan_json:.2}), LedgerEntry::parse_canonical {parse:.2}, serde_json Value {serde_value:.2}, \
             serde_json IgnoredAny {serde_skip:.2}, leaf hash {leaf:.2}"
        );
    }
    Ok(())
}
