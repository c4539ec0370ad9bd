//! The query library against real parts: real SQLite projections written by the projector's own
//! `Store::apply_batch`, a real file blob store written by ingest's `BlobStore`.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod lists;
mod payloads;
mod serve;
mod sql;

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;
use toolledger_core::config::ApiToken;
use toolledger_core::telemetry::Telemetry;
use toolledger_projector::{Generations, RawEntry, Store};
use toolledger_query::{AccessLog, ApiOptions, Tokens, token_digest};

/// The canonical entry ingest would append for a structured CloudEvent, with these payload refs.
pub use toolledger_testkit::entry_bytes_with_refs as entry_bytes;

/// A projection of `events` (as ingest would append them, in order) in `data_dir`'s current
/// generation, made if there is none.
pub fn project(data_dir: &Path, events: &[Value]) {
    let generation = Generations::new(data_dir).current_or_init().unwrap();
    let mut store = Store::open(&generation.database(), Default::default()).unwrap();
    apply(
        &mut store,
        events.iter().map(toolledger_testkit::entry_bytes).collect(),
    );
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

/// The API served in process over the projections in a data directory, on a free loopback port.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Serves `data_dir` with a token per `(name, token, tenant)` (no tenant: an admin), reads recorded
/// to `access_log` when given.
pub async fn serve(
    data_dir: &Path,
    tokens: &[(&str, &str, Option<&str>)],
    access_log: Option<AccessLog>,
) -> Server {
    let tokens: Vec<ApiToken> = tokens
        .iter()
        .map(|(name, token, tenant)| ApiToken {
            name: (*name).to_owned(),
            sha256: token_digest(token),
            tenants: tenant.iter().map(|t| (*t).to_owned()).collect(),
            admin: tenant.is_none(),
        })
        .collect();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, task) = toolledger_query::serve(
        data_dir,
        ApiOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tokens: Tokens::from_config(&tokens).unwrap(),
            insecure_local: false,
            blob_store_url: None,
            access_log,
            ledger: None,
            partitions: Default::default(),
        },
        Telemetry::new(),
        async {
            let _ = stopped.await;
        },
    )
    .await
    .unwrap();
    Server { addr, stop, task }
}

impl Server {
    /// `GET path` with `token`: the status and the body as JSON (null when it is not JSON).
    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        let (addr, path, token) = (self.addr, path.to_owned(), token.to_owned());
        let reply = tokio::task::spawn_blocking(move || toolledger_testkit::http_get_as(addr, &path, &token))
            .await
            .unwrap()
            .unwrap();
        (
            reply.status,
            serde_json::from_str(&reply.body).unwrap_or(Value::Null),
        )
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}
