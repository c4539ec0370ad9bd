//! RFC 8785 vectors (read from `$TOOLLEDGER_VECTORS/rfc8785.json`, never copied) and the I-JSON
//! refusals, each named, through the whole decoder.

use serde_json::Value;
use toolledger_wire::ijson::JsonProblem;
use toolledger_wire::{Error, QuarantineReason, decode, jcs};

use super::headers;

#[test]
fn rfc8785_vectors() {
    let Some(dir) = std::env::var_os("TOOLLEDGER_VECTORS") else {
        println!("skipping rfc8785_vectors: TOOLLEDGER_VECTORS is not set");
        return;
    };
    let path = std::path::Path::new(&dir).join("rfc8785.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: Value = serde_json::from_str(&text).expect("vector file is JSON");
    let cases = file["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let input = case["input"].as_str().expect("input");
        let expected = case["canonical"].as_str().expect("canonical");
        let actual = jcs::canonicalize(input.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(String::from_utf8(actual).expect("utf-8"), expected, "{name}");
    }
    println!("rfc8785_vectors: {} cases", cases.len());
}

/// A structured event whose data is `data` (raw JSON text, possibly not I-JSON).
fn decode_data(data: &[u8]) -> Result<toolledger_wire::DecodedEvent, Error> {
    let mut body =
        br#"{"specversion":"1.0","id":"1","source":"s","type":"tool.declared","tenant":"acme","data":"#
            .to_vec();
    body.extend_from_slice(data);
    body.push(b'}');
    let h = headers(&[("content-type", "application/cloudevents+json")]);
    decode("atl.in.acme.tool.declared", Some(&h), &body)
}

fn refused(data: &[u8]) -> (JsonProblem, String, String) {
    match decode_data(data) {
        Err(error @ Error::NotIJson { .. }) => {
            assert_eq!(error.quarantine_reason(), Some(QuarantineReason::NotIjson));
            let text = error.to_string();
            let Error::NotIJson { problem, path } = error else {
                unreachable!()
            };
            (problem, path, text)
        }
        other => panic!("expected not_ijson, got {other:?}"),
    }
}

#[test]
fn duplicate_key() {
    let (problem, path, text) = refused(br#"{"tool_id": "a", "tool_id": "b"}"#);
    assert_eq!(
        problem,
        JsonProblem::DuplicateKey {
            key: "tool_id".into()
        }
    );
    assert_eq!(path, "/data/tool_id");
    assert!(text.contains("duplicate key"), "{text}");
}

#[test]
fn integer_of_two_to_the_53() {
    let (problem, path, text) = refused(br#"{"n": 9007199254740992}"#);
    assert_eq!(
        problem,
        JsonProblem::IntegerOutOfRange {
            literal: "9007199254740992".into()
        }
    );
    assert_eq!(path, "/data/n");
    assert!(text.contains("2^53"), "{text}");
}

#[test]
fn number_overflowing_a_double() {
    let (problem, path, text) = refused(br#"{"x": [1e400]}"#);
    assert_eq!(
        problem,
        JsonProblem::NumberOverflow {
            literal: "1e400".into()
        }
    );
    assert_eq!(path, "/data/x/0");
    assert!(text.contains("overflows"), "{text}");
}

#[test]
fn lone_surrogate() {
    let (problem, path, text) = refused(br#"{"s": "\ud800"}"#);
    assert_eq!(problem, JsonProblem::LoneSurrogate { code_unit: 0xd800 });
    assert_eq!(path, "/data/s");
    assert!(text.contains("surrogate"), "{text}");
}

#[test]
fn invalid_utf8_bytes() {
    let (problem, path, text) = refused(b"{\"s\": \"\xc3\x28\"}");
    assert!(matches!(problem, JsonProblem::InvalidUtf8 { .. }), "{problem:?}");
    assert_eq!(path, "/data/s");
    assert!(text.contains("UTF-8"), "{text}");
}

#[test]
fn one_e_thirty_is_accepted_and_canonicalized() {
    let decoded = decode_data(br#"{"x": 1E30, "y": 4.50, "z": 2e-3}"#).expect("1E30 is I-JSON");
    let entry = toolledger_wire::LedgerEntry::new(decoded, chrono::DateTime::<chrono::Utc>::UNIX_EPOCH);
    let text = String::from_utf8(entry.canonical_bytes().unwrap()).unwrap();
    assert!(text.contains(r#""data":{"x":1e+30,"y":4.5,"z":0.002}"#), "{text}");
}
