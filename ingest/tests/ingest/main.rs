//! Ingest against real parts: a nats-server per test.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod append;
mod golden;
mod ids;
mod partitions;
mod payload;
mod pipeline;
mod scrub;
