//! Function-calling logs (OpenAI-style chat completions and responses): `tools` become declarations,
//! each `tool_calls` entry an invocation, and each `tool` message its result by `tool_call_id`.
//!
//! A record is one of:
//! - a message: `{"role": "assistant", "tool_calls": [{id, type: "function", function: {name,
//!   arguments}}]}` or `{"role": "tool", "tool_call_id", "content"}` (other roles carry no tool event);
//! - a request body `{"messages": […], "tools": […]}` or a completion `{"id", "created", "choices":
//!   [{"message": …}]}`; history repeated in later requests is recognized by its ids and skipped;
//! - a Responses API item: `{"type": "function_call", "call_id", "name", "arguments"}` or
//!   `{"type": "function_call_output", "call_id", "output"}`.
//!
//! ```text
//! tools[]                           ─▶ tool.declared (fn:<name>; strict, parameters)
//! tool_calls[i], arguments parse    ─▶ planned, arguments_ready        (model_input = parsed JSON)
//! tool_calls[i], arguments malformed ─▶ planned, arguments_ready with status schema_parse_failed
//!                                      (model_input = the raw string, error invalid_arguments)
//! tool message (tool_call_id)       ─▶ succeeded, result.created        (content)
//! ```
//!
//! Native ids kept (source `function_calling`): `tool_call_id` (also `native_call_id`),
//! `function_name`, `parallel_tool_calls` (true when one message asked for several calls),
//! `completion_id`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};
use toolledger_schemas::EventClass;

use crate::event::{Call, Ctx, declaration, fields, native_time, text_content, tool_error};
use crate::{Error, Mapped, Mapper, Result};

const SYSTEM: &str = "function_calling";

/// The function-calling mapper's state for one file.
#[derive(Debug, Default)]
pub struct OpenAiMapper {
    /// Calls by tool_call_id, until their result arrives.
    open: HashMap<String, Call>,
    /// Calls whose result arrived, so repeated history is skipped rather than rejected.
    closed: HashSet<String>,
    /// Declarations already made, by name, with their data, to skip identical repeats.
    declared: HashMap<String, Value>,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::Malformed {
        system: "openai",
        reason: reason.into(),
    }
}

/// Where a record's messages came from.
struct Origin {
    time: Option<i64>,
    completion_id: Option<String>,
}

impl Mapper for OpenAiMapper {
    fn map(&mut self, ctx: &mut Ctx, record: &Value) -> Result<Mapped> {
        if !record.is_object() {
            return Err(malformed("a record is a JSON object"));
        }
        let origin = Origin {
            time: native_time(record.get("timestamp"))
                .or_else(|| native_time(record.get("time")))
                .or_else(|| native_time(record.get("created"))),
            completion_id: record
                .get("choices")
                .and(record.get("id"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        let session = ctx.session(record.get("session_id").and_then(Value::as_str));
        let mut mapped = Mapped::default();
        let mut recognized = false;
        if let Some(tools) = record.get("tools") {
            recognized = true;
            let tools = tools
                .as_array()
                .ok_or_else(|| malformed("`tools` is not an array"))?;
            self.declare(ctx, &origin, session.as_deref(), tools, &mut mapped)?;
        }
        if let Some(messages) = record.get("messages") {
            recognized = true;
            let messages = messages
                .as_array()
                .ok_or_else(|| malformed("`messages` is not an array"))?;
            for (i, message) in messages.iter().enumerate() {
                self.message(ctx, &origin, session.as_deref(), message, &mut mapped)
                    .map_err(|e| prefix(e, &format!("messages[{i}]")))?;
            }
        }
        if let Some(choices) = record.get("choices") {
            recognized = true;
            let choices = choices
                .as_array()
                .ok_or_else(|| malformed("`choices` is not an array"))?;
            for (i, choice) in choices.iter().enumerate() {
                let message = choice
                    .get("message")
                    .ok_or_else(|| malformed(format!("choices[{i}] has no message")))?;
                self.message(ctx, &origin, session.as_deref(), message, &mut mapped)
                    .map_err(|e| prefix(e, &format!("choices[{i}]")))?;
            }
        }
        if !recognized {
            match record.get("type").and_then(Value::as_str) {
                Some("function_call") => {
                    let call = json!({
                        "id": record.get("call_id").cloned().unwrap_or(Value::Null),
                        "function": { "name": record.get("name").cloned().unwrap_or(Value::Null),
                                      "arguments": record.get("arguments").cloned().unwrap_or(Value::Null) },
                    });
                    self.calls(ctx, &origin, session.as_deref(), &[call], &mut mapped)?;
                }
                Some("function_call_output") => {
                    let id = record.get("call_id").and_then(Value::as_str);
                    self.result(ctx, &origin, id, record.get("output"), &mut mapped)?;
                }
                _ if record.get("role").is_some() => {
                    self.message(ctx, &origin, session.as_deref(), record, &mut mapped)?;
                }
                _ => {
                    return Err(malformed(
                        "not a message (role), a request (messages/tools), a completion (choices) or a \
                         function_call item",
                    ));
                }
            }
        }
        Ok(mapped)
    }
}

fn prefix(error: Error, at: &str) -> Error {
    match error {
        Error::Malformed { system, reason } => Error::Malformed {
            system,
            reason: format!("{at}: {reason}"),
        },
        Error::Unmatched { system, reason } => Error::Unmatched {
            system,
            reason: format!("{at}: {reason}"),
        },
        other => other,
    }
}

impl OpenAiMapper {
    fn declare(
        &mut self,
        ctx: &mut Ctx,
        origin: &Origin,
        session: Option<&str>,
        tools: &[Value],
        mapped: &mut Mapped,
    ) -> Result<()> {
        let mut pending = Vec::new();
        for (i, tool) in tools.iter().enumerate() {
            // Chat completions nest the function; the Responses API does not.
            let function = tool.get("function").unwrap_or(tool);
            let name = function["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| malformed(format!("tools[{i}] has no function name")))?;
            let strict = function.get("strict").and_then(Value::as_bool);
            let mut input_contract = Map::new();
            if let Some(parameters) = function.get("parameters") {
                input_contract.insert("model_input_schema".into(), parameters.clone());
            }
            if let Some(strict) = strict {
                input_contract.insert("strict".into(), json!(strict));
            }
            let tool_id = format!("fn:{name}");
            let data = declaration(
                &tool_id,
                SYSTEM,
                name,
                function["description"].as_str().unwrap_or(""),
                "function",
                fields! {
                    "input_contract" => Value::Object(input_contract),
                    "external_mappings" => json!([fields! {
                        "source" => SYSTEM,
                        "function_name" => name,
                        "strict" => strict.map(Value::Bool),
                    }]),
                },
            );
            if self.declared.get(name) != Some(&data) {
                pending.push((tool_id, name.to_owned(), data));
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        let time = ctx.time(origin.time);
        for (tool_id, name, data) in pending {
            mapped.events.push(ctx.event(
                EventClass::ToolDeclared,
                &tool_id,
                session,
                time,
                data.clone(),
                "",
            ));
            self.declared.insert(name, data);
        }
        Ok(())
    }

    fn message(
        &mut self,
        ctx: &mut Ctx,
        origin: &Origin,
        session: Option<&str>,
        message: &Value,
        mapped: &mut Mapped,
    ) -> Result<()> {
        match message.get("role").and_then(Value::as_str) {
            Some("assistant") => match message.get("tool_calls") {
                Some(Value::Array(calls)) => self.calls(ctx, origin, session, calls, mapped),
                Some(Value::Null) | None => Ok(()),
                Some(_) => Err(malformed("`tool_calls` is not an array")),
            },
            Some("tool") => {
                let id = message.get("tool_call_id").and_then(Value::as_str);
                self.result(ctx, origin, id, message.get("content"), mapped)
            }
            Some(_) => Ok(()),
            None => Err(malformed("a message without a role")),
        }
    }

    fn calls(
        &mut self,
        ctx: &mut Ctx,
        origin: &Origin,
        session: Option<&str>,
        calls: &[Value],
        mapped: &mut Mapped,
    ) -> Result<()> {
        let parallel = calls.len() > 1;
        // Check every call of the message first: a message maps whole or not at all.
        let mut fresh = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let id = call["id"]
                .as_str()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| malformed(format!("tool_calls[{i}] has no id")))?;
            let name = call["function"]["name"]
                .as_str()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| malformed(format!("tool_calls[{i}] ({id}) has no function.name")))?;
            if self.open.contains_key(id) || self.closed.contains(id) {
                continue; // history repeated by a later request
            }
            fresh.push((id, name, &call["function"]["arguments"]));
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let time = ctx.time(origin.time);
        for (id, name, arguments) in fresh {
            let invocation_id = ctx.open_invocation(session, &[id]);
            let mut call = Call::new(
                invocation_id,
                format!("fn:{name}"),
                session.map(str::to_owned),
                time,
            );
            call.native_call_id = Some(id.to_owned());
            call.external_mappings.push(Value::Object(fields! {
                "source" => SYSTEM,
                "tool_call_id" => id,
                "function_name" => name,
                "parallel_tool_calls" => parallel,
                "completion_id" => origin.completion_id.clone(),
            }));
            let parsed = match arguments {
                Value::String(text) => {
                    serde_json::from_str::<Value>(text).map_err(|e| (text.clone(), e.to_string()))
                }
                Value::Object(_) => Ok(arguments.clone()),
                Value::Null => Ok(json!({})),
                other => Err((
                    other.to_string(),
                    "arguments are neither a JSON string nor an object".into(),
                )),
            };
            mapped
                .events
                .push(call.event(ctx, EventClass::InvocationPlanned, "planned", time, Map::new()));
            match parsed {
                Ok(input) => {
                    call.fields.insert("model_input".into(), input);
                    mapped.events.push(call.event(
                        ctx,
                        EventClass::InvocationArgumentsReady,
                        "arguments_ready",
                        time,
                        Map::new(),
                    ));
                }
                Err((raw, reason)) => {
                    // The model's bytes are kept as they were: the audit needs what it emitted.
                    call.fields.insert("model_input".into(), json!(raw));
                    let mut extra = Map::new();
                    extra.insert(
                        "error".into(),
                        Value::Object(tool_error(
                            "invalid_arguments",
                            Some("arguments_not_json".into()),
                            Some(reason),
                        )),
                    );
                    mapped.events.push(call.event(
                        ctx,
                        EventClass::InvocationArgumentsReady,
                        "schema_parse_failed",
                        time,
                        extra,
                    ));
                    mapped.notes.push(format!(
                        "tool_call {id}: arguments are not valid JSON; recorded as schema_parse_failed"
                    ));
                }
            }
            self.open.insert(id.to_owned(), call);
        }
        Ok(())
    }

    fn result(
        &mut self,
        ctx: &mut Ctx,
        origin: &Origin,
        id: Option<&str>,
        content: Option<&Value>,
        mapped: &mut Mapped,
    ) -> Result<()> {
        let id = id
            .filter(|s| !s.is_empty())
            .ok_or_else(|| malformed("a tool result without tool_call_id"))?;
        let Some(call) = self.open.remove(id) else {
            if self.closed.contains(id) {
                return Ok(()); // history repeated by a later request
            }
            return Err(Error::Unmatched {
                system: "openai",
                reason: format!("tool result for {id}, which no earlier tool_calls entry opened"),
            });
        };
        self.closed.insert(id.to_owned());
        let time = ctx.time(origin.time);
        let content = match content {
            Some(Value::String(text)) => Some(text_content(text)),
            Some(Value::Array(parts)) => Some(Value::Array(
                parts
                    .iter()
                    .map(|p| match p {
                        Value::Object(_) => p.clone(),
                        other => json!({ "type": "text", "text": other.to_string() }),
                    })
                    .collect(),
            )),
            Some(Value::Null) | None => None,
            Some(other) => Some(text_content(&other.to_string())),
        };
        mapped.events.extend(call.succeeded(
            ctx,
            time,
            fields! {
                "content" => content,
                "external_mapping" => json!({ "source": SYSTEM, "tool_call_id": id }),
            },
        ));
        Ok(())
    }
}
