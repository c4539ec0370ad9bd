//! A test ledger: generated events appended to ATL_LEDGER as canonical entries.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::{Value, json};
use toolledger_projector::{Generations, Store};

pub use toolledger_testkit::{append_events as append, entry_bytes};

/// Creates ATL_LEDGER as the contract has it; returns the JetStream context.
pub async fn create_ledger(client: async_nats::Client) -> jetstream::Context {
    let js = jetstream::new(client);
    toolledger_testkit::create_ledger(&js).await;
    js
}

/// A `toolledger.quarantine.recorded` receipt, as ingest appends them under `_system`.
pub fn quarantine_receipt(n: usize) -> Value {
    json!({
        "specversion": "1.0", "id": format!("rcpt-evt-{n}"), "source": "urn:toolledger:ingest",
        "type": "toolledger.quarantine.recorded", "subject": format!("rcpt-{n}"),
        "time": "2026-05-08T09:00:01Z", "tenant": "_system", "datacontenttype": "application/json",
        "data": {"receipt_id": format!("rcpt-{n}"), "digest": format!("sha256:{:064x}", n),
            "size_bytes": 120 + n, "tenant": "acme", "reason": "schema_violation",
            "detail": "/data/tool_id: 42 is not a string", "quarantined_at": "2026-05-08T09:00:01Z"}
    })
}

/// Waits until the current generation's database has applied `seq`; fails early if `runner` ends.
pub async fn wait_for_position<T: std::fmt::Debug>(
    data_dir: &std::path::Path,
    seq: u64,
    timeout: Duration,
    runner: &mut tokio::task::JoinHandle<T>,
) -> u64 {
    let deadline = Instant::now() + timeout;
    let mut position = 0;
    while Instant::now() < deadline {
        if runner.is_finished() {
            panic!("the projector stopped early: {:?}", runner.await);
        }
        if let Ok(Some(generation)) = Generations::new(data_dir).current()
            && let Ok(store) = Store::open_readonly(&generation.database())
            && let Ok(p) = store.position()
        {
            position = p;
            if p >= seq {
                return p;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("projection reached only seq {position} of {seq} in {timeout:?}");
}
