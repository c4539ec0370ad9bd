//! Projections: ATL_LEDGER read in order into SQLite, with the position stored in the same
//! transaction as the rows it covers, so a rebuild equals the incremental result.
#![warn(missing_docs)]
