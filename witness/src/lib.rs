//! A transparency-log witness (C2SP `tlog-witness`, `tlog-cosignature`) and its client: an independent
//! party that cosigns a ledger's checkpoint only when it is consistent with the last checkpoint it
//! cosigned for that log, so an operator cannot show two auditors two different histories.
//!
//! # Lifecycle of an add-checkpoint request
//!
//! ```text
//! POST /add-checkpoint  "old <size>\n" <proof lines, base64> "\n" <signed checkpoint note>
//!   parse ─────────────────────────────▶ 400 malformed
//!   origin configured? ────────────────▶ 404
//!   signed by one of the log's keys? ──▶ 403
//!   old size > checkpoint size? ───────▶ 400
//!   ── lock the origin (one request per log at a time) ──
//!   old size = latest cosigned size? ──▶ 409 text/x.tlog.size "<latest size>\n"
//!   same size, different root? ────────▶ 409 (a fork: logged as evidence)
//!   consistency proof old ─▶ new? ─────▶ 422 (logged as evidence)
//!   cosign ─▶ write <state>/<sha256(origin)>.checkpoint (temp, fsync, rename, fsync dir)
//!   ── unlock ──
//!   200 "— <witness> base64(key id || time || signature)\n"
//! ```
//!
//! The check and the write happen under the origin's lock, so two requests can never both pass the
//! old-size check against the same state (the rollback race of tlog-witness). The state directory is
//! held with an exclusive `flock` for the life of the process, so two witnesses cannot share it.
//!
//! # Modules
//!
//! - [`protocol`]: the add-checkpoint request body, both ways.
//! - [`state`]: the latest cosigned checkpoint per origin, durable across crashes.
//! - [`server`]: the HTTP service ([`serve`], [`router`]) and the witness's key on disk.
//! - [`client`]: [`add_checkpoint`], what a log (ingest's checkpointer) calls.
//!
//! Cosignature keys, signing and verification live in `toolledger_merkle::cosignature`, beside the
//! checkpoint format, so verifiers need nothing from this crate.
#![warn(missing_docs)]

pub mod client;
mod error;
pub mod protocol;
pub mod server;
pub mod state;

pub use client::add_checkpoint;
pub use error::{Error, Result};
pub use protocol::AddCheckpoint;
pub use server::{KnownLog, Witness, load_or_create_key, router, serve};
