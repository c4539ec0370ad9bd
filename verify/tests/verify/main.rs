//! Verification, proofs and the checkpointer against a real nats-server: ledgers built with the
//! ingest appender and checkpointer, then tampered with on copies.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod bundle;
mod common;
mod entries;
mod incremental;
mod payloads;
mod prove;
mod restart;
mod tamper;
