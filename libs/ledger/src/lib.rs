//! Ledger access: how every stage reads the ledger and the stores beside it. Ingest writes through
//! it too, but it holds nothing of the writer, so the read side (projector, export, query, verify)
//! never depends on ingest (DESIGN §12).
//!
//! ```text
//!                 ATL_LEDGER, ATL_CHECKPOINTS, ATL_COSIGNATURES, ATL_QUARANTINE (NATS JetStream)
//!                         │ read::OrderedReader (from a position, to the tail / a sequence / following)
//!                         │ read::last_sequence, read::message, read::stored_message
//!                         ▼
//!   projector · export · verify · query · ingest (read-back, tree restore)
//!                         ▲                                   ▲
//!   blobs::BlobStore ─────┘ payloads by tenant + blob id,      │ tiles::open_tiles: the Merkle tree's
//!   (object store)          checked against commitments        │ TileStore from a configured location
//!
//! administration (the `erase` and `quarantine` tools, `up`'s retention job):
//!   erasure   plan ◀─ the tenant's entries ─ execute: blobs deleted ─▶ a record to atl.in._system… (ingest appends it)
//!   quarantine list / show ◀─ ATL_QUARANTINE ─ redrive ─▶ atl.in.<tenant>.… (ingest judges it afresh)
//! ```
//!
//! Modules:
//! - [`read`]: the ordered reader ([`OrderedReader`], [`ReadSpec`]), [`last_sequence`], single-message
//!   gets. The one place that reads a stream in order and checks it for gaps.
//! - [`decode`]: [`decode_entry`] (leaf hash, parse, classification) and [`decode_ahead`], which does
//!   it on a second thread while the projector or the exporter applies entries in order.
//! - [`blobs`]: the tenant-partitioned blob store ([`BlobStore`]): blob layout, commitments, retries.
//! - [`tiles`]: [`open_tiles`], the tile store from a location string.
//! - [`cosignatures`]: a checkpoint's witness lines from ATL_COSIGNATURES, joined into its cosigned note.
//! - [`erasure`]: erasure of offloaded content by invocation, session, blob, tenant or age (retention).
//! - [`quarantine`]: quarantined messages listed, shown and redriven; the quarantine message format.
//!
//! Data enters from NATS streams and the object stores; it leaves as stream messages, verified payload
//! bytes and tile stores. The only writes are blob puts and deletes, quarantine deletes, and
//! publishes to `atl.in` that ingest, the single writer, turns into ledger entries.
#![warn(missing_docs)]

pub mod blobs;
pub mod cosignatures;
pub mod decode;
pub mod erasure;
mod error;
pub mod quarantine;
pub mod read;
pub mod tiles;

pub use blobs::{
    BlobStore, BlobStoreConfig, NONCE_LEN, PAYLOAD_KEY, RetryPolicy, StoredBlob, is_payload_marker,
    payload_marker,
};
pub use decode::{DecodedEntry, decode_ahead, decode_entry};
pub use error::{BoxError, Error, Result, with_causes};
pub use read::{
    OrderedReader, ReadSpec, StoredMessage, StreamMessage, Until, last_sequence, last_stored_message,
    message, next_stored_message, read_all, read_range, stored_message,
};
pub use tiles::open_tiles;
