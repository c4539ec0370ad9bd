//! The importers against fixtures written from each seed specification's own examples and
//! structures, then end to end through a real nats-server, ingest and the SQLite projection.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

mod e2e;
mod mcp;
mod nact;
mod openai;
mod otc;
mod toolproto;

use std::path::PathBuf;

use serde_json::Value;
use toolledger_import::{Format, Options, RecordOutcome, map_file};

/// A fixture's path.
pub fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// Maps a fixture for tenant `acme`, with times synthesized from the default start.
pub fn import(format: Format, path: &str) -> Vec<RecordOutcome> {
    let mut options = Options::new("acme");
    options.session = Some(format!("file-{}", path.replace(['/', '.'], "-")));
    let bytes = std::fs::read(fixture(path)).unwrap();
    let outcomes = map_file(format, &options, path, &bytes).unwrap();
    for outcome in &outcomes {
        for event in &outcome.events {
            // Independently of the importer's own check: the project's validator accepts each.
            toolledger_schemas::validate_event(event)
                .unwrap_or_else(|e| panic!("{}: invalid event {event}: {e}", outcome.location));
        }
    }
    outcomes
}

/// `(class, data.status)` of every event of a record.
pub fn shape(outcome: &RecordOutcome) -> Vec<(String, String)> {
    outcome
        .events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["data"]["status"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Every event of every record, in order.
pub fn all_events(outcomes: &[RecordOutcome]) -> Vec<Value> {
    outcomes.iter().flat_map(|o| o.events.iter().cloned()).collect()
}

/// The invocation ids whose `external_mappings` hold `key = value` (scalars as text).
pub fn invocations_with(events: &[Value], key: &str, value: &str) -> Vec<String> {
    let mut ids: Vec<String> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("tool.invocation."))
        .filter(|e| {
            e["data"]["external_mappings"].as_array().is_some_and(|mappings| {
                mappings.iter().any(|m| match &m[key] {
                    Value::String(s) => s == value,
                    Value::Number(n) => n.to_string() == value,
                    Value::Bool(b) => b.to_string() == value,
                    _ => false,
                })
            })
        })
        .map(|e| e["data"]["invocation_id"].as_str().unwrap().to_owned())
        .collect();
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
    ids
}

/// Every event of one invocation: `(class, status)`.
pub fn lifecycle(events: &[Value], invocation_id: &str) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["subject"] == invocation_id)
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["data"]["status"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// `(class, status)` pairs from literals.
pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// The rejection reason of a record, which must be rejected.
pub fn rejected(outcome: &RecordOutcome) -> &str {
    outcome
        .rejected
        .as_deref()
        .unwrap_or_else(|| panic!("{} should be rejected: {:?}", outcome.location, shape(outcome)))
}

#[test]
fn reimport_yields_identical_events() {
    for (format, path) in [
        (Format::Nact, "nact/session.ndjson"),
        (Format::Otc, "otc/session.ndjson"),
        (Format::ToolProto, "toolproto/calls.ndjson"),
        (Format::Mcp, "mcp/session.ndjson"),
        (Format::OpenAi, "openai/conversation.ndjson"),
    ] {
        let first = all_events(&import(format, path));
        assert!(!first.is_empty(), "{path}");
        assert_eq!(first, all_events(&import(format, path)), "{path}");
        let mut ids: Vec<&str> = first.iter().map(|e| e["id"].as_str().unwrap()).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "{path}: event ids are unique");
    }
}

#[test]
fn times_are_synthesized_from_start_when_records_have_none() {
    let mut options = Options::new("acme");
    options.start_ms = toolledger_import::parse_start("2026-01-01T00:00:00Z").unwrap();
    let bytes = std::fs::read(fixture("toolproto/calls.ndjson")).unwrap();
    let events = all_events(&map_file(Format::ToolProto, &options, "calls", &bytes).unwrap());
    assert_eq!(events[0]["time"], "2026-01-01T00:00:00.000Z");
    let times: Vec<&str> = events.iter().map(|e| e["time"].as_str().unwrap()).collect();
    let mut sorted = times.clone();
    sorted.sort_unstable();
    assert_eq!(times, sorted, "times never go back");
    assert!(toolledger_import::parse_start("yesterday").is_err());
}

#[test]
fn a_bad_tenant_is_refused_before_any_record() {
    let error = map_file(Format::Mcp, &Options::new("bad tenant"), "x", b"{}").unwrap_err();
    assert!(error.to_string().contains("tenant"), "{error}");
}
