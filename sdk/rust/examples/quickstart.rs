//! The quick start of docs/sdk/rust.md: one invocation into `toolledger up --demo`'s ledger.
//! `cargo run -p toolledger-producer --example quickstart [NATS_URL]`

use serde_json::json;
use toolledger_producer::{Producer, ProducerConfig, Tool};

#[tokio::main]
async fn main() -> Result<(), toolledger_producer::Error> {
    let nats = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let producer = Producer::open(ProducerConfig::new("acme", "./spool").with_servers([nats])).await?;
    let lookup = Tool::new("crm.lookup", "lookup")
        .namespace("crm")
        .description("finds a customer")
        .sensitive_fields(["api_key"]);
    let mut inv = producer
        .invocation(
            &lookup,
            json!({"email": "ada@example.com", "api_key": "sk-live-1"}),
        )
        .await?;
    inv.progress("querying", Some(50.0)).await?;
    println!("{}", inv.invocation_id());
    inv.succeed(json!({"customer_id": "c-42"})).await?;
    // Waits until the ledger's inbox acked everything.
    producer.close(std::time::Duration::from_secs(10)).await?;
    Ok(())
}
