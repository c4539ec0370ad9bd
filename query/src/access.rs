//! Recording reads: every API read of invocation or session data becomes a `toolledger.access.read`
//! event published to `atl.in._system.toolledger.access.read`, so ingest appends it to the ledger
//! like any other event and the reads are as tamper-evident as the data (DESIGN §7).
//!
//! ```text
//! handler ─(AccessLog::record, bounded queue: a slow NATS slows readers, never loses a record)─▶
//!   publish task ─▶ structured CloudEvent ─▶ ATL_INBOUND ─▶ ingest ─▶ ledger ─▶ access_reads
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;

/// Where access records go: the ledger's own tenant, which producers' credentials cannot reach.
pub const ACCESS_SUBJECT: &str = "atl.in._system.toolledger.access.read";

/// Records waiting to be published. Large enough to absorb a burst of reads while NATS answers
/// slowly; when full, readers wait for room rather than a record being dropped.
const QUEUE: usize = 1024;
/// Attempts to publish one record before it is logged as lost.
const ATTEMPTS: u32 = 10;

/// One read, as the ledger records it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AccessRead {
    /// The tenant whose data was read.
    pub tenant: String,
    /// The token's name (never the token).
    pub principal: String,
    /// The route, e.g. `GET /v1/invocations/{invocation_id}`.
    pub endpoint: &'static str,
    /// Invocations read.
    pub invocation_ids: Vec<String>,
    /// Sessions read.
    pub session_ids: Vec<String>,
    /// The query string of a search.
    pub query: Option<String>,
    /// Rows returned.
    pub row_count: u64,
}

/// Where handlers send their reads.
#[derive(Debug, Clone)]
pub struct AccessLog {
    tx: mpsc::Sender<AccessRead>,
}

impl AccessLog {
    /// A log and the receiving end for [`publish`].
    pub fn channel() -> (Self, mpsc::Receiver<AccessRead>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Self { tx }, rx)
    }

    /// Queues a record; waits while the queue is full.
    pub async fn record(&self, read: AccessRead) {
        if self.tx.send(read).await.is_err() {
            tracing::error!("access log closed; a read was not recorded");
        }
    }
}

/// Publishes queued reads until every [`AccessLog`] is dropped. Each record is retried with a
/// growing pause; a record that still fails is logged with its fields.
pub async fn publish(js: async_nats::jetstream::Context, mut rx: mpsc::Receiver<AccessRead>) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    while let Some(read) = rx.recv().await {
        let now = Utc::now();
        let access_id = format!(
            "acc_{:x}_{:x}_{}",
            now.timestamp_nanos_opt().unwrap_or_default(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let read_at = now.to_rfc3339_opts(SecondsFormat::Millis, true);
        let mut data = json!({
            "access_id": access_id,
            "principal": read.principal,
            "endpoint": read.endpoint,
            "tenant": read.tenant,
            "invocation_ids": read.invocation_ids,
            "session_ids": read.session_ids,
            "row_count": read.row_count,
            "read_at": read_at,
        });
        if let Some(query) = &read.query {
            data["query"] = json!(query);
        }
        let event = json!({
            "specversion": "1.0",
            "id": access_id,
            "source": "urn:toolledger:query",
            "type": "toolledger.access.read",
            "subject": access_id,
            // The record is the ledger's own; the tenant whose data was read is `data.tenant`.
            "tenant": toolledger_wire::Tenant::SYSTEM,
            "time": read_at,
            "datacontenttype": "application/json",
            "data": data,
        });
        let payload: bytes::Bytes = match serde_json::to_vec(&event) {
            Ok(body) => body.into(),
            Err(error) => {
                tracing::error!(%error, tenant = %read.tenant, principal = %read.principal, "access read not encodable");
                continue;
            }
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("content-type", "application/cloudevents+json");
        headers.insert("Nats-Msg-Id", access_id.as_str());
        let mut attempt = 0;
        loop {
            attempt += 1;
            let published = async {
                js.publish_with_headers(ACCESS_SUBJECT, headers.clone(), payload.clone())
                    .await?
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            }
            .await;
            match published {
                Ok(()) => break,
                Err(error) if attempt < ATTEMPTS => {
                    tracing::warn!(%error, attempt, "access read publish retry");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
                Err(error) => {
                    tracing::error!(%error, tenant = %read.tenant, principal = %read.principal,
                        endpoint = read.endpoint, "access read not recorded");
                    break;
                }
            }
        }
    }
}
