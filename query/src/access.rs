//! Recording reads: every API read of invocation or session data becomes a `toolledger.access.read`
//! event published to `atl.in._system.toolledger.access.read`, so ingest appends it to the ledger
//! like any other event and the reads are as tamper-evident as the data (DESIGN §7).
//!
//! ```text
//! handler ─(AccessLog::record, bounded queue: a slow NATS slows readers, never loses a record)─▶
//!   publish task ─▶ structured CloudEvent ─▶ ATL_INBOUND ─▶ ingest ─▶ ledger ─▶ access_reads
//! queue still full after ENQUEUE_WAIT (NATS down or frozen) ─▶ the read is refused: 503 audit_unavailable
//! ```
//!
//! The publish task says how it fares in [`PublishHealth`], which the API's `/healthz` reports as
//! its `access_log` component.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::auth::{Access, Principal};

/// Where access records go: the ledger's own tenant, which producers' credentials cannot reach.
pub const ACCESS_SUBJECT: &str = "atl.in._system.toolledger.access.read";

/// Records waiting to be published. Large enough to absorb a burst of reads while NATS answers
/// slowly; when full, readers wait for room rather than a record being dropped.
const QUEUE: usize = 1024;
/// Attempts to publish one record before it is logged as lost.
const ATTEMPTS: u32 = 10;
/// How long a read waits for room in a full queue before it is refused (503 `audit_unavailable`):
/// a burst drains in well under this; a queue still full after it means NATS is not taking records.
const ENQUEUE_WAIT: Duration = Duration::from_secs(5);

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
    /// The query string of a search, the statement of a SQL read, the id a lookup asked for — only in
    /// a record its reader may see whole (see [`Reads`]).
    pub query: Option<String>,
    /// `sha256:<hex>` of the query when the record carries the digest instead of the text.
    pub query_sha256: Option<String>,
    /// Rows returned.
    pub row_count: u64,
}

/// The records of one read, one per tenant whose data it returned, so that each tenant's records hold
/// only that tenant's ids and text:
///
/// ```text
/// rows by tenant ─▶ one record per tenant (its invocation and session ids, its row count)
/// a read scoped to one tenant that returned nothing ─▶ a record for that tenant with 0 rows
/// the query's text (a search, a statement, an id asked for):
///   a token of exactly that one tenant, and the read returned its rows ─▶ in that tenant's record
///   anyone else (admin, a token of several tenants), or a read that returned nothing (a probe may
///     name another tenant's ids) ─▶ only its digest in the tenants' records, the text in one record
///     of the ledger's own tenant `_system`, which no tenant token reads
/// ```
#[derive(Debug)]
pub struct Reads {
    principal: String,
    /// The principal's only tenant, when it has exactly one.
    sole_tenant: Option<String>,
    endpoint: &'static str,
    scope: Option<String>,
    query: Option<String>,
    by_tenant: std::collections::BTreeMap<String, AccessRead>,
}

impl Reads {
    /// A read by `principal` through `endpoint`, confined to `scope` (a tenant) or not (an admin), with
    /// the query it was asked with.
    pub fn new(
        principal: &Principal,
        endpoint: &'static str,
        scope: Option<&str>,
        query: Option<&str>,
    ) -> Self {
        let sole_tenant = match &principal.access {
            Access::Tenants(tenants) if tenants.len() == 1 => tenants.first().cloned(),
            _ => None,
        };
        Self {
            principal: principal.name.clone(),
            sole_tenant,
            endpoint,
            scope: scope.map(str::to_owned),
            query: query.map(str::to_owned),
            by_tenant: std::collections::BTreeMap::new(),
        }
    }

    fn of(&mut self, tenant: String) -> &mut AccessRead {
        let (principal, endpoint) = (&self.principal, self.endpoint);
        self.by_tenant
            .entry(tenant.clone())
            .or_insert_with(|| AccessRead {
                tenant,
                principal: principal.clone(),
                endpoint,
                invocation_ids: Vec::new(),
                session_ids: Vec::new(),
                query: None,
                query_sha256: None,
                row_count: 0,
            })
    }

    /// One row returned: whose, and the invocation and session it shows.
    pub fn row(&mut self, tenant: String, invocation: Option<String>, session: Option<String>) {
        let read = self.of(tenant);
        read.row_count += 1;
        if let Some(id) = invocation
            && !read.invocation_ids.contains(&id)
        {
            read.invocation_ids.push(id);
        }
        if let Some(id) = session
            && !read.session_ids.contains(&id)
        {
            read.session_ids.push(id);
        }
    }

    /// `rows` rows of `tenant` returned, with no ids to name (SQL).
    pub fn rows(&mut self, tenant: String, rows: u64) {
        self.of(tenant).row_count += rows;
    }

    /// The records to publish.
    pub fn records(mut self) -> Vec<AccessRead> {
        if self.by_tenant.is_empty()
            && let Some(tenant) = self.scope.take()
        {
            self.of(tenant);
        }
        let text_with_tenant = matches!(
            (&self.sole_tenant, self.by_tenant.iter().next()),
            (Some(sole), Some((tenant, read))) if self.by_tenant.len() == 1 && sole == tenant && read.row_count > 0
        );
        let digest = self.query.as_deref().map(|q| {
            use sha2::Digest;
            format!(
                "sha256:{}",
                toolledger_wire::entry::hex(&sha2::Sha256::digest(q.as_bytes()))
            )
        });
        let rows: u64 = self.by_tenant.values().map(|r| r.row_count).sum();
        let nothing_read = self.by_tenant.is_empty();
        let mut records: Vec<AccessRead> = self.by_tenant.into_values().collect();
        for record in &mut records {
            if text_with_tenant {
                record.query = self.query.clone();
            } else {
                record.query_sha256 = digest.clone();
            }
        }
        if !text_with_tenant && (self.query.is_some() || nothing_read) {
            // The text, and a read that found nothing for no tenant: the operators' record.
            records.push(AccessRead {
                tenant: toolledger_wire::Tenant::SYSTEM.to_owned(),
                principal: self.principal,
                endpoint: self.endpoint,
                invocation_ids: Vec::new(),
                session_ids: Vec::new(),
                query: self.query,
                query_sha256: digest,
                row_count: rows,
            });
        }
        records
    }
}

/// Where handlers send their reads.
#[derive(Debug, Clone)]
pub struct AccessLog {
    tx: mpsc::Sender<AccessRead>,
    health: PublishHealth,
}

/// The receiving end of an [`AccessLog`], for [`publish`].
#[derive(Debug)]
pub struct AccessQueue {
    rx: mpsc::Receiver<AccessRead>,
    health: PublishHealth,
}

/// How the publish task fares: since when and why records cannot be published, if they cannot.
/// A handle that does not keep the queue open (the publish task ends when the last [`AccessLog`]
/// is dropped, whoever still watches its health).
#[derive(Debug, Clone, Default)]
pub struct PublishHealth(Arc<Mutex<Option<(Instant, String)>>>);

impl PublishHealth {
    /// `Err` with the failure and how long it has lasted while records cannot be published.
    pub fn check(&self) -> Result<(), String> {
        match &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            None => Ok(()),
            Some((since, error)) => Err(format!(
                "access records not published for {}s: {error}",
                since.elapsed().as_secs()
            )),
        }
    }

    fn set(&self, error: Option<String>) {
        let mut failing = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *failing = error.map(|error| {
            let since = failing.as_ref().map_or_else(Instant::now, |(since, _)| *since);
            (since, error)
        });
    }
}

impl AccessQueue {
    /// The next queued record, without publishing it (for a reader of its own, such as a test);
    /// `None` once every [`AccessLog`] is dropped and the queue is empty.
    pub async fn recv(&mut self) -> Option<AccessRead> {
        self.rx.recv().await
    }
}

impl AccessLog {
    /// A log and the receiving end for [`publish`].
    pub fn channel() -> (Self, AccessQueue) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let health = PublishHealth::default();
        (
            Self {
                tx,
                health: health.clone(),
            },
            AccessQueue { rx, health },
        )
    }

    /// Queues a record, waiting up to [`ENQUEUE_WAIT`] while the queue is full. An error when it
    /// cannot be queued: the caller refuses the read rather than serve it unrecorded.
    pub async fn record(&self, read: AccessRead) -> crate::Result<()> {
        match tokio::time::timeout(ENQUEUE_WAIT, self.tx.send(read)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(crate::Error::AuditUnavailable {
                reason: "the access log is closed (the server is stopping)".to_owned(),
            }),
            Err(_) => {
                let why = self
                    .health
                    .check()
                    .err()
                    .unwrap_or_else(|| "NATS is slow".to_owned());
                Err(crate::Error::AuditUnavailable {
                    reason: format!(
                        "{QUEUE} access records are waiting to be published and none left room in {}s ({why})",
                        ENQUEUE_WAIT.as_secs()
                    ),
                })
            }
        }
    }

    /// How the publish task fares (a handle that does not keep the queue open).
    pub fn health(&self) -> PublishHealth {
        self.health.clone()
    }
}

/// Publishes queued reads until every [`AccessLog`] is dropped. Each record is retried with a
/// growing pause; a record that still fails is logged with its fields.
pub async fn publish(js: async_nats::jetstream::Context, queue: AccessQueue) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let AccessQueue { mut rx, health } = queue;
    let set_failing = |error: Option<String>| health.set(error);
    while let Some(read) = rx.recv().await {
        let now = Utc::now();
        let access_id = format!(
            "acc_{:x}_{:x}_{}",
            now.timestamp_nanos_opt().unwrap_or_default(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let read_at = now.to_rfc3339_opts(SecondsFormat::Millis, true);
        let event = event(&read, &access_id, &read_at);
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
                Ok(()) => {
                    set_failing(None);
                    break;
                }
                Err(error) if attempt < ATTEMPTS => {
                    set_failing(Some(error.to_string()));
                    tracing::warn!(%error, attempt, "access read publish retry");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
                Err(error) => {
                    set_failing(Some(error.to_string()));
                    tracing::error!(%error, tenant = %read.tenant, principal = %read.principal,
                        endpoint = read.endpoint, "access read not recorded");
                    break;
                }
            }
        }
    }
}

/// The structured CloudEvent that records `read` (what [`publish`] sends to [`ACCESS_SUBJECT`]).
pub fn event(read: &AccessRead, access_id: &str, read_at: &str) -> serde_json::Value {
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
    if let Some(digest) = &read.query_sha256 {
        data["query_sha256"] = json!(digest);
    }
    json!({
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
    })
}
