//! The projector against a real nats-server and real SQLite files.
//!
//! Ingest is not needed: [`ledger`] turns generated events into ledger entries the way ingest does
//! (decode, then the canonical entry bytes) and appends them to an ATL_LEDGER stream in order.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod generations;
mod ledger;
mod sql;
mod sql_bounds;
mod store;
mod truth;

/// `docs/projections.md` carries the schema exactly as the code creates it.
#[test]
fn docs_carry_the_schema_sql() {
    let docs =
        std::fs::read_to_string(toolledger_testkit::workspace_root().join("docs/projections.md")).unwrap();
    assert!(
        docs.contains(toolledger_projector::SCHEMA_SQL),
        "docs/projections.md is out of date with projector/src/schema.sql"
    );
}
