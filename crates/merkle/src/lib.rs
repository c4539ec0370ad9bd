//! The tamper-evidence engine: the RFC 6962 Merkle tree over ledger entries, its C2SP tiles, signed
//! checkpoints and proofs. Independent of NATS, so it can be tested on its own.
#![warn(missing_docs)]
