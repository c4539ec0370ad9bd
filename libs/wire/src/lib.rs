//! toolledger's wire formats: what producers put on NATS, and the bytes the ledger stores.
//!
//! ```text
//! producer ──(subject, headers, payload)──▶ decode ──▶ DecodedEvent (Event) ──▶ LedgerEntry ──▶ JCS bytes ──▶ leaf hash
//!                                              │ typed Error ─▶ QuarantineReason
//! emit: file ─▶ produce::read_events ─▶ produce::prepare ─▶ binding::encode ─▶ produce::publish_all ─▶ ATL_INBOUND
//! ```
//!
//! Modules:
//! - [`binding`]: the CloudEvents NATS binding (binary `ce-*` headers, structured
//!   `application/cloudevents+json`); the only module that uses `cloudevents-sdk` ([`binding::encode`]).
//! - [`event`]: [`Event`], the CloudEvent as the ledger holds it: typed attributes and extensions, one
//!   `data` value, its RFC 8785 bytes written straight from the fields.
//! - [`envelope`]: the spec's own `agenttool-event` envelope, mapped to a CloudEvent.
//! - [`mod@decode`]: [`decode()`] turns an inbound message into a [`DecodedEvent`] or a typed [`Error`]:
//!   subject and tenant checks, class checks, the `tenant` extension.
//! - [`id`]: the one id grammar (no control characters, at most 1 KiB) that ingest enforces and
//!   the query service and CLI accept, so every id the ledger takes can be served back.
//! - [`ijson`]: the strict parser every inbound JSON text goes through; refuses what is not I-JSON.
//! - [`jcs`]: RFC 8785 canonical bytes.
//! - [`entry`]: [`LedgerEntry`], its canonical bytes, leaf hash and content digest; parsed back in one
//!   pass that can prove the bytes canonical ([`LedgerEntry::parse_canonical`]).
//! - [`subject`]: [`Tenant`] and the subjects of DESIGN §2.
//! - [`partition`]: ledger partitions: where a tenant lives and each partition's stream, subjects,
//!   checkpoint subject, origin, tiles and lease.
//! - [`streams`]: the NATS contract: every stream's and bucket's configuration and its check,
//!   [`streams::ensure_contract`] (create or check) and [`streams::check_contract`] (check only).
//! - [`produce`]: the producer side used by `toolledger emit`.
//!
//! Data enters as NATS messages (`decode`), files (`produce::read_events`) or stored entries
//! (`LedgerEntry::parse`), and leaves as NATS messages (`binding::encode`, `produce::publish_all`)
//! and canonical entry bytes (`LedgerEntry::canonical_bytes`). Only `streams` and `produce` talk to NATS.
#![warn(missing_docs)]

pub mod binding;
pub mod connect;
pub mod decode;
pub mod directory;
pub mod entry;
pub mod envelope;
pub mod event;
pub mod id;
pub mod ijson;
pub mod jcs;
pub mod partition;
pub mod produce;
pub mod streams;
pub mod subject;

mod error;

pub use binding::Mode;
pub use decode::{DecodedEvent, Origin, decode};
pub use entry::{LedgerEntry, LedgerMetadata, PayloadRef};
pub use error::{Error, QuarantineReason, Result, Violation};
pub use event::{Event, ExtensionValue};
pub use subject::Tenant;
