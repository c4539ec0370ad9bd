//! The crate's one error type, with variants named for what they mean to a ledger operator.

use crate::Hash;

/// Everything that can go wrong in the Merkle log: a tile store that lost or damaged a tile, a proof or
/// signature that does not verify, a malformed note, key or checkpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tile the tree needs is not in the object store (tiles are a cache: rebuild them from the ledger).
    #[error("tile {path} is missing from the tile store")]
    TileMissing {
        /// The tile's object path.
        path: String,
    },

    /// A tile exists but its bytes cannot be right: wrong length, or it disagrees with the tile above it.
    #[error("tile {path} is corrupt: {reason}")]
    TileCorrupt {
        /// The tile's object path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An immutable tile already exists with different bytes: the store holds another history.
    #[error("tile {path} already exists with different content")]
    TileConflict {
        /// The tile's object path.
        path: String,
    },

    /// An entry bundle could not be written or read back whole.
    #[error("entry bundle {path} is unusable: {reason}")]
    BundleCorrupt {
        /// The bundle's object path (empty while encoding).
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The object store failed to read or write a tile.
    #[error("tile store failed on {path}")]
    TileStore {
        /// The tile's object path.
        path: String,
        /// The object store's error.
        #[source]
        source: object_store::Error,
    },

    /// The tree recomputed from tiles or leaves has a different root than the one expected (for example
    /// the signed checkpoint's root).
    #[error("tree of size {size} has root {} but {} was expected", hex(.computed), hex(.expected))]
    RootMismatch {
        /// The tree size.
        size: u64,
        /// The root that was expected (from a checkpoint).
        expected: Hash,
        /// The root recomputed from the data at hand.
        computed: Hash,
    },

    /// A leaf index is not inside the tree.
    #[error("leaf index {index} is outside a tree of size {size}")]
    IndexOutOfRange {
        /// The requested leaf index.
        index: u64,
        /// The tree size.
        size: u64,
    },

    /// A tree size is larger than the tree (or an old size is larger than the new one).
    #[error("tree size {requested} is not available: the tree has size {size}")]
    SizeOutOfRange {
        /// The requested size.
        requested: u64,
        /// The largest size available.
        size: u64,
    },

    /// An inclusion proof does not prove the leaf is in the tree with the given root.
    #[error("inclusion proof for leaf {index} in tree of size {size} does not verify")]
    InclusionProofInvalid {
        /// The leaf index the proof is for.
        index: u64,
        /// The tree size the proof is for.
        size: u64,
    },

    /// A consistency proof does not prove the old tree is a prefix of the new one.
    #[error("consistency proof from size {old_size} to size {new_size} does not verify")]
    ConsistencyProofInvalid {
        /// The older tree size.
        old_size: u64,
        /// The newer tree size.
        new_size: u64,
    },

    /// A signature by a trusted key does not verify: the note was altered or signed by someone else.
    #[error("signature by key {name} ({key_id:08x}) does not verify")]
    BadSignature {
        /// The key name on the signature line.
        name: String,
        /// The signature's 4-byte key id.
        key_id: u32,
    },

    /// A cosignature line by a known witness key does not verify: the checkpoint or the line was
    /// altered, or the witness never signed this checkpoint.
    #[error("cosignature by witness {name} ({key_id:08x}) does not verify")]
    BadCosignature {
        /// The witness name on the signature line.
        name: String,
        /// The witness key id.
        key_id: u32,
    },

    /// The note carries no signature by any trusted key.
    #[error("note has no signature by a trusted key")]
    UnknownSigner,

    /// The text is not a well-formed C2SP signed note.
    #[error("malformed signed note: {reason}")]
    MalformedNote {
        /// What is wrong with it.
        reason: String,
    },

    /// The note text is not a well-formed C2SP tlog checkpoint.
    #[error("malformed checkpoint: {reason}")]
    MalformedCheckpoint {
        /// What is wrong with it.
        reason: String,
    },

    /// A verified checkpoint is for another log than the one expected.
    #[error("checkpoint is for log {found:?}, expected {expected:?}")]
    WrongOrigin {
        /// The origin the caller expected.
        expected: String,
        /// The origin the checkpoint names.
        found: String,
    },

    /// A signer or verifier key string is not in the expected format.
    #[error("malformed key: {reason}")]
    MalformedKey {
        /// What is wrong with it.
        reason: String,
    },

    /// A key name is empty or contains a space or `+`.
    #[error("invalid key name {name:?}: names must be non-empty with no spaces or '+'")]
    InvalidKeyName {
        /// The rejected name.
        name: String,
    },

    /// A key file could not be read or written.
    #[error("key file {path}")]
    KeyFile {
        /// The file's path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The operating system's random number generator failed while making a key.
    #[error("os randomness unavailable: {reason}")]
    Randomness {
        /// The generator's error text.
        reason: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Lowercase hex of a byte string, for error and log text.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
