//! The read side: the `/v1` HTTP API and the CLI's queries over the projections and the ledger.
#![warn(missing_docs)]
