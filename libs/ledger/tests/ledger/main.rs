//! Ledger access against real parts: the ordered reader and single-message gets on a real
//! nats-server, the tile and blob stores on real directories.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod read;
mod stores;
