//! RFC 8785 JSON Canonicalization Scheme: the one byte form of a ledger entry.
//!
//! Object members sorted by the UTF-16 code units of their names, no whitespace, strings escaped the
//! way ECMAScript's `JSON.stringify` does, numbers written the way ECMAScript's `Number.prototype.toString`
//! does (via `ryu-js`). The input is a `serde_json::Value`; integers beyond ±(2^53−1) have no faithful
//! double and are refused, as in [`crate::ijson`].

use std::io::Write as _;

use serde_json::{Map, Value};

use crate::ijson::{self, JsonError, JsonProblem, MAX_SAFE_INTEGER};

/// The canonical bytes of `value`.
pub fn to_vec(value: &Value) -> Result<Vec<u8>, JsonError> {
    let mut out = Vec::with_capacity(128);
    write_into(&mut out, value)?;
    Ok(out)
}

/// Appends the canonical bytes of `value` to `out` (what [`to_vec`] returns).
pub fn write_into(out: &mut Vec<u8>, value: &Value) -> Result<(), JsonError> {
    write_value(out, value).map_err(into_json_error)
}

/// Appends the canonical bytes of the object `map` holds, as [`write_into`] writes it, without a
/// `Value` around it.
pub fn write_object_into(out: &mut Vec<u8>, map: &Map<String, Value>) -> Result<(), JsonError> {
    write_object(out, map).map_err(into_json_error)
}

/// Appends the canonical bytes of the array of `items`, as [`write_into`] writes it, without a
/// `Value` around it.
pub fn write_array_into(out: &mut Vec<u8>, items: &[Value]) -> Result<(), JsonError> {
    write_array(out, items).map_err(into_json_error)
}

fn into_json_error((problem, mut segments): WriteError) -> JsonError {
    segments.reverse();
    JsonError {
        problem,
        path: segments.concat(),
    }
}

/// The order RFC 8785 puts object members in: by the UTF-16 code units of their names.
pub fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        // ASCII is one code unit a byte: the common case without the UTF-16 walk.
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// Canonicalizes a JSON text the way RFC 8785 does: every number a double. Duplicate keys, invalid
/// UTF-8, lone surrogates and overflowing numbers are refused; integer literals beyond 2^53 are read as
/// the nearest double, as RFC 8785 prescribes, which makes this idempotent. Inbound messages go through
/// the stricter [`ijson::parse`] first, which refuses those literals instead.
pub fn canonicalize(bytes: &[u8]) -> Result<Vec<u8>, JsonError> {
    to_vec(&ijson::parse_canonical(bytes)?)
}

/// A problem with the pointer segments collected on the way out (innermost first).
type WriteError = (JsonProblem, Vec<String>);

fn segment(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

fn write_value(out: &mut Vec<u8>, value: &Value) -> Result<(), WriteError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(out, number)?,
        Value::String(text) => write_string(out, text),
        Value::Array(items) => write_array(out, items)?,
        Value::Object(map) => write_object(out, map)?,
    }
    Ok(())
}

fn write_array(out: &mut Vec<u8>, items: &[Value]) -> Result<(), WriteError> {
    out.push(b'[');
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_value(out, item).map_err(|(p, mut s)| {
            s.push(format!("/{index}"));
            (p, s)
        })?;
    }
    out.push(b']');
    Ok(())
}

fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>) -> Result<(), WriteError> {
    // serde_json's map iterates by key bytes, which is RFC 8785's order whenever the keys are ASCII
    // (nearly always): then the members are written as they come, without sorting a copy. The order
    // is checked, not assumed, so another map (`preserve_order`) still sorts.
    let ordered = map
        .keys()
        .zip(map.keys().skip(1))
        .all(|(a, b)| key_order(a, b).is_lt());
    if ordered {
        write_members(out, map.iter())
    } else {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_by(|(a, _), (b, _)| key_order(a, b));
        write_members(out, members.into_iter())
    }
}

/// An object's members, in the order given.
fn write_members<'v>(
    out: &mut Vec<u8>,
    members: impl Iterator<Item = (&'v String, &'v Value)>,
) -> Result<(), WriteError> {
    out.push(b'{');
    for (index, (key, item)) in members.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_string(out, key);
        out.push(b':');
        write_value(out, item).map_err(|(p, mut s)| {
            s.push(segment(key));
            (p, s)
        })?;
    }
    out.push(b'}');
    Ok(())
}

fn write_number(out: &mut Vec<u8>, number: &serde_json::Number) -> Result<(), WriteError> {
    if let Some(i) = number.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err((
                JsonProblem::IntegerOutOfRange {
                    literal: i.to_string(),
                },
                Vec::new(),
            ));
        }
        // A safe integer's ECMAScript form is its decimal digits. Writing to a `Vec` cannot fail.
        let _ = write!(out, "{i}");
        return Ok(());
    }
    if let Some(u) = number.as_u64() {
        return Err((
            JsonProblem::IntegerOutOfRange {
                literal: u.to_string(),
            },
            Vec::new(),
        ));
    }
    let float = number.as_f64().filter(|f| f.is_finite()).ok_or_else(|| {
        (
            JsonProblem::NumberOverflow {
                literal: number.to_string(),
            },
            Vec::new(),
        )
    })?;
    if float == 0.0 {
        // Both zeros are "0" in ECMAScript.
        out.push(b'0');
    } else {
        out.extend_from_slice(ryu_js::Buffer::new().format_finite(float).as_bytes());
    }
    Ok(())
}

/// Appends `text` as an RFC 8785 string: quoted, with ECMAScript's escapes and nothing else escaped.
pub fn write_string(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    // Runs of characters that need no escape are copied at once.
    let mut rest = text.as_bytes();
    loop {
        let plain = plain_run(rest);
        out.extend_from_slice(&rest[..plain]);
        let Some(&b) = rest.get(plain) else {
            break;
        };
        write_escape(out, b);
        rest = &rest[plain + 1..];
    }
    out.push(b'"');
}

/// The length of the run at the start of `bytes` with nothing a JSON string must escape (`"`, `\`,
/// a control character). Looks at 16 bytes at a time, without branching on each, which the
/// compiler turns into vector compares: most strings are one plain run.
pub(crate) fn plain_run(bytes: &[u8]) -> usize {
    let special = |b: u8| (b == b'"') | (b == b'\\') | (b < 0x20);
    let mut at = 0;
    for chunk in bytes.chunks_exact(16) {
        if chunk.iter().fold(false, |any, &b| any | special(b)) {
            break;
        }
        at += 16;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| special(b))
        .unwrap_or(bytes.len() - at)
}

/// The escape of an ASCII byte that needs one.
fn write_escape(out: &mut Vec<u8>, b: u8) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_run_stops_at_the_first_byte_to_escape_wherever_it_is() {
        for len in [0, 1, 15, 16, 17, 31, 32, 33, 70] {
            let plain = "é".repeat(len / 2) + &"a".repeat(len % 2);
            assert_eq!(plain_run(plain.as_bytes()), plain.len());
            for at in 0..=plain.len() {
                for special in [b'"', b'\\', b'\n', 0x1f, 0] {
                    let mut bytes = plain.as_bytes().to_vec();
                    bytes.insert(at, special);
                    bytes.extend_from_slice(b"\"tail");
                    assert_eq!(plain_run(&bytes), at, "{len} {at} {special}");
                }
            }
        }
    }

    fn canon(text: &str) -> String {
        String::from_utf8(canonicalize(text.as_bytes()).unwrap()).unwrap()
    }

    /// Number serialization samples from RFC 8785 Appendix B (IEEE-754 bit patterns and their text).
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, expected) in cases {
            let value = Value::Number(serde_json::Number::from_f64(f64::from_bits(*bits)).unwrap());
            assert_eq!(
                String::from_utf8(to_vec(&value).unwrap()).unwrap(),
                *expected,
                "{bits:#x}"
            );
        }
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // RFC 8785 section 3.2.3's sorting example: UTF-16 order puts U+1F600 (a surrogate pair,
        // 0xD83D…) before U+FB33 although its code point is larger.
        let input = r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canon(input), expected);
    }

    #[test]
    fn strings_escape_like_ecmascript() {
        assert_eq!(
            canon(r#""\u0000\u001f\u007f\b\f\n\r\t\"\\\/é""#),
            "\"\\u0000\\u001f\u{7f}\\b\\f\\n\\r\\t\\\"\\\\/é\""
        );
    }

    #[test]
    fn unsafe_integers_in_a_value_are_refused_with_their_path() {
        let value = serde_json::json!({"a": [1, {"b": 9007199254740993_u64}]});
        let error = to_vec(&value).unwrap_err();
        assert_eq!(error.path, "/a/1/b");
        assert!(matches!(error.problem, JsonProblem::IntegerOutOfRange { .. }));
        let value = serde_json::json!({"x/y": -9007199254740993_i64});
        assert_eq!(to_vec(&value).unwrap_err().path, "/x~1y");
    }
}
