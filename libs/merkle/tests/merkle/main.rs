//! The crate's one integration-test binary: reference vectors, property tests over tiles, the tile
//! store suite run against every backend, and signed notes checked by an independent Python verifier.

// Helpers and fixtures here are test code too: a panic is the failure report (clippy's
// allow-unwrap-in-tests covers only #[test] functions).
#![allow(clippy::unwrap_used)]

mod common;
mod notes;
mod props;
mod tiles;
mod vectors;
