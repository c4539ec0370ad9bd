//! toolledger's wire formats: what producers put on NATS, and the bytes the ledger stores.
//!
//! ```text
//! producer ──(subject, headers, payload)──▶ decode ──▶ DecodedEvent ──▶ LedgerEntry ──▶ JCS bytes ──▶ leaf hash
//!                                              │ typed Error ─▶ QuarantineReason
//! emit: file ─▶ produce::read_events ─▶ produce::prepare ─▶ binding::encode ─▶ produce::publish_all ─▶ ATL_INBOUND
//! ```
//!
//! Modules:
//! - [`binding`]: the CloudEvents NATS binding (binary `ce-*` headers, structured
//!   `application/cloudevents+json`) on the `cloudevents-sdk` message traits; [`binding::encode`].
//! - [`envelope`]: the spec's own `agenttool-event` envelope, mapped to a CloudEvent.
//! - [`mod@decode`]: [`decode()`] turns an inbound message into a [`DecodedEvent`] or a typed [`Error`]:
//!   subject and tenant checks, class checks, the `tenant` extension.
//! - [`ijson`]: the strict parser every inbound JSON text goes through; refuses what is not I-JSON.
//! - [`jcs`]: RFC 8785 canonical bytes.
//! - [`entry`]: [`LedgerEntry`], its canonical bytes, leaf hash and content digest.
//! - [`subject`]: [`Tenant`] and the subjects of DESIGN §2.
//! - [`streams`]: the NATS contract: every stream's and bucket's configuration and its check,
//!   [`streams::ensure_contract`] (create or check) and [`streams::check_contract`] (check only).
//! - [`produce`]: the producer side used by `toolledger emit`.
//!
//! Data enters as NATS messages (`decode`), files (`produce::read_events`) or stored entries
//! (`LedgerEntry::from_bytes`), and leaves as NATS messages (`binding::encode`, `produce::publish_all`)
//! and canonical entry bytes (`LedgerEntry::canonical_bytes`). Only `streams` and `produce` talk to NATS.
#![warn(missing_docs)]

pub mod binding;
pub mod connect;
pub mod decode;
pub mod entry;
pub mod envelope;
pub mod ijson;
pub mod jcs;
pub mod produce;
pub mod streams;
pub mod subject;

mod error;

pub use binding::Mode;
pub use cloudevents;
pub use decode::{DecodedEvent, Origin, decode};
pub use entry::{LedgerEntry, LedgerMetadata, PayloadRef};
pub use error::{Error, QuarantineReason, Result, Violation};
pub use subject::Tenant;
