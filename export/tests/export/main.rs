//! The exporter against real parts: a real nats-server, real SQLite projections, the local
//! filesystem and a real S3-compatible server (moto), and DuckDB and pyarrow reading the archive.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod common;
mod idempotence;
mod invocation_rows;
mod readers;
mod tamper;
