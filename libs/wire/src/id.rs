//! The one grammar of ids: what ingest takes into the ledger, and so what `/v1` and the CLI must
//! serve.
//!
//! The official Agent Tool schemas make every id a plain string. The ledger narrows that only where
//! an id could not be served back: an id is at most [`MAX_ID_BYTES`] bytes of UTF-8 and holds no
//! control character (Unicode `Cc`: U+0000–U+001F, U+007F–U+009F, which a terminal, a log line or a
//! header would interpret rather than show). Spaces, `<`, `/`, `%`, quotes and any other Unicode are
//! ids like any other: the API takes them percent-encoded, SQL takes them as parameters.
//!
//! ```text
//! inbound event ─▶ decode ─▶ event_ids: `id`, `subject`, the `sessionid`/`invocationid`/`toolid`
//!                            extensions, and every top-level `data` string named `*_id` or `retry_of`
//!                  ─▶ check each ─▶ a `bad_id` rejection naming the JSON Pointer (never the value)
//! /v1 path or query, CLI argument ─▶ check ─▶ 400 `invalid_parameter` / exit 2
//! `toolledger validate` document ─▶ the event ingest would decode ─▶ event_ids ─▶ the same `bad_id`
//! ```
//!
//! Empty ids are not refused at ingest (the official schemas allow them), but no path can name one.

use std::fmt;

use serde_json::Value;

use crate::event::Event;

/// The longest id the ledger takes: 1 KiB of UTF-8.
pub const MAX_ID_BYTES: usize = 1024;

/// The extensions that carry ids (`tenant` has its own, stricter grammar).
pub const ID_EXTENSIONS: [&str; 3] = ["sessionid", "invocationid", "toolid"];

/// Why a value is not an id the ledger can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdProblem {
    /// Longer than [`MAX_ID_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// Holds a control character.
    ControlCharacter {
        /// The character's code point.
        code_point: u32,
        /// Its byte offset in the id.
        at: usize,
    },
}

impl fmt::Display for IdProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { bytes } => write!(f, "{bytes} bytes, over the {MAX_ID_BYTES}-byte limit for ids"),
            Self::ControlCharacter { code_point, at } => {
                write!(f, "control character U+{code_point:04X} at byte {at}")
            }
        }
    }
}

/// Checks `value` against the id grammar. The problem never quotes the value: it goes into
/// quarantine receipts, which the ledger keeps for ever.
pub fn check(value: &str) -> Result<(), IdProblem> {
    if value.len() > MAX_ID_BYTES {
        return Err(IdProblem::TooLong { bytes: value.len() });
    }
    match value.char_indices().find(|(_, c)| c.is_control()) {
        Some((at, c)) => Err(IdProblem::ControlCharacter {
            code_point: u32::from(c),
            at,
        }),
        None => Ok(()),
    }
}

/// Whether a top-level `data` member names an id: `*_id` (invocation_id, session_id, tool_id,
/// result_id, decision_id, hook_id, …) or `retry_of` (the earlier invocation's id).
pub fn is_id_field(name: &str) -> bool {
    name.ends_with("_id") || name == "retry_of"
}

/// The first id of `event` outside the grammar: its JSON Pointer in the structured event (`/id`,
/// `/subject`, `/invocationid`, `/data/invocation_id`) and the problem.
pub fn first_bad_id(event: &Event) -> Option<(String, IdProblem)> {
    let attributes = [("id", Some(event.id())), ("subject", event.subject())]
        .into_iter()
        .chain(ID_EXTENSIONS.map(|name| (name, event.extension_str(name))));
    for (name, value) in attributes {
        if let Some(Err(problem)) = value.map(check) {
            return Some((format!("/{name}"), problem));
        }
    }
    let Some(Value::Object(data)) = event.data() else {
        return None;
    };
    data.iter()
        .filter(|(name, _)| is_id_field(name))
        .find_map(|(name, value)| {
            let problem = check(value.as_str()?).err()?;
            let token = name.replace('~', "~0").replace('/', "~1");
            Some((format!("/data/{token}"), problem))
        })
}

/// [`first_bad_id`] of a document as `toolledger validate` reads it: a structured CloudEvent, or an
/// agenttool-event envelope mapped as ingest maps it (so its `invocation_id` is named
/// `/invocationid`, as ingest's receipt names it). `None` too for a document that is no event at
/// all: the schema check says what is wrong with it.
pub fn first_bad_id_in_document(document: &Value) -> Option<(String, IdProblem)> {
    let Value::Object(object) = document else {
        return None;
    };
    let event = if crate::envelope::is_agenttool_event(object) {
        // The tenant comes from the subject at ingest; no id depends on it.
        crate::envelope::map_agenttool_event(object.clone(), &crate::Tenant::unroutable())
            .ok()?
            .event
    } else {
        Event::from_json(document.clone()).ok()?
    };
    first_bad_id(&event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_refuse_only_control_characters_and_more_than_a_kib() {
        for fine in [
            "inv_00001",
            "a b<c>/d%2F'\"\\",
            "会話-🦀",
            "x' OR '1'='1",
            "",
            &"é".repeat(MAX_ID_BYTES / 2),
        ] {
            assert_eq!(check(fine), Ok(()), "{fine:?}");
        }
        assert_eq!(
            check(&"a".repeat(MAX_ID_BYTES + 1)),
            Err(IdProblem::TooLong { bytes: 1025 })
        );
        assert_eq!(
            check("ab\0"),
            Err(IdProblem::ControlCharacter { code_point: 0, at: 2 })
        );
        assert!(check("tab\there").is_err());
        assert!(check("next\u{85}line").is_err());
        assert!(check("del\u{7f}").is_err());
        // The problem names the place, never the value.
        let shown = check(&format!("secret{}", "\n".repeat(2)))
            .unwrap_err()
            .to_string();
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn the_first_bad_id_is_named_by_its_pointer() {
        let event = |data: Value| {
            Event::from_json(serde_json::json!({
                "specversion": "1.0", "id": "e 1", "source": "s", "type": "tool.invocation.planned",
                "tenant": "acme", "subject": "inv <1>", "data": data
            }))
            .unwrap()
        };
        assert_eq!(
            first_bad_id(&event(serde_json::json!({"invocation_id": "inv <1>"}))),
            None
        );
        let (pointer, _) = first_bad_id(&event(
            serde_json::json!({"invocation_id": "a", "retry_of": "b\u{1}"}),
        ))
        .unwrap();
        assert_eq!(pointer, "/data/retry_of");
        let (pointer, problem) =
            first_bad_id(&event(serde_json::json!({"a/b_id": "x".repeat(2000)}))).unwrap();
        assert_eq!(
            (pointer.as_str(), problem),
            ("/data/a~1b_id", IdProblem::TooLong { bytes: 2000 })
        );
        // Not an id: other fields may hold anything the official schema allows.
        assert_eq!(
            first_bad_id(&event(
                serde_json::json!({"description": "line\nbreak", "tool_id": 7})
            )),
            None
        );
        let mut extension = event(serde_json::json!({}));
        extension.set_extension("sessionid", "s\u{0}");
        assert_eq!(first_bad_id(&extension).unwrap().0, "/sessionid");
    }

    #[test]
    fn a_documents_ids_are_judged_as_ingest_decodes_them() {
        let structured = serde_json::json!({"specversion": "1.0", "id": "e1", "source": "s",
            "type": "tool.invocation.planned", "tenant": "acme",
            "data": {"invocation_id": "inv\u{7}", "request_id": "r".repeat(1025)}});
        assert_eq!(
            first_bad_id_in_document(&structured).map(|(p, _)| p).as_deref(),
            Some("/data/invocation_id")
        );
        let envelope = serde_json::json!({"event_id": "e1", "event_type": "tool.invocation.planned",
            "source": "s", "time": "2026-05-08T09:00:00Z", "schema_version": "0.2.0",
            "invocation_id": "inv\nx", "data": {"request_id": "r".repeat(1025)}});
        assert_eq!(
            first_bad_id_in_document(&envelope).map(|(p, _)| p).as_deref(),
            Some("/invocationid")
        );
        assert_eq!(first_bad_id_in_document(&serde_json::json!([1])), None);
        assert_eq!(
            first_bad_id_in_document(&serde_json::json!({"specversion": "1.0"})),
            None
        );
    }
}
