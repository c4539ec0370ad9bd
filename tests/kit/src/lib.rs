//! Fixtures for tests that run against real parts.
//!
//! - [`NatsFixture`]: a real nats-server with JetStream on a free loopback port and a private store
//!   directory; stops when dropped; restarts on the same port and store (gracefully or after a kill).
//! - [`NatsCluster`]: three nats-server nodes on free loopback ports, one JetStream cluster started
//!   from the shipped `deploy/nats/cluster-node-N.conf`; a node can be killed and restarted.
//! - [`ChildProcess`]: runs a `toolledger` subcommand (or any program) as a child with its output
//!   captured, and stops it with SIGTERM or kills it with SIGKILL; fault tests are built on it.
//! - [`S3Fixture`]: a real S3-compatible server (moto) on a free loopback port with one bucket; can be
//!   paused (SIGSTOP) and resumed for fault tests.
//! - [`http_get`]: a minimal HTTP/1.1 GET for scraping `/metrics` and `/healthz` without a client stack;
//!   [`http_get_as`] sends a bearer token with it.
//! - [`ledger`]: ledger entries as ingest would write them ([`entry_bytes`]), appended in order
//!   ([`append_events`]), and generated sessions ([`generated`]): what tests that fill ATL_LEDGER
//!   without ingest share.
//! - [`secrets`]: the secret-shape corpus of issue 28 and the ordinary text that must survive
//!   scrubbing, shared by ingest's scrub tests and the end-to-end test.
//!
//! The server binary is `TOOLLEDGER_NATS_SERVER` if set, else the pinned one `scripts/setup` installs
//! at `.tools/nats/bin/nats-server` in the workspace.
#![warn(missing_docs)]

mod cluster;
mod http;
pub mod ledger;
mod nats;
mod process;
mod s3;
pub mod secrets;

pub use cluster::{CLUSTER_SIZE, NatsCluster};
pub use http::{HttpResponse, http_get, http_get_as, http_post};
pub use ledger::{
    append_events, create_ledger, entry_bytes, entry_bytes_with_refs, generated, ledger_subject,
};
pub use nats::{NatsFixture, nats_server_bin, python, workspace_root};
pub use process::ChildProcess;
pub use s3::{S3Fixture, moto_server_bin};
