//! Tool Protocol / Agent Tool: tool schemas become declarations, calls become invocations, and each
//! call records whether it ran latently (the model produced `_output` itself) or explicitly (an
//! Activity ran).
//!
//! A record is a tool schema (a JSON Schema whose `properties` hold `_tool`; or `{"name", "schema"}`
//! as `Tool.register` takes it; or a composed request schema whose `calls.items.anyOf` lists tool
//! schemas), a call (`{"_tool": "name", …params, "_output"?, "_activity"?, "_reasoningForCall"?,
//! "_delegate"?, "_outputPath"?, "_instance"?}`), a model response `{"calls": […], "output"}`, or an
//! executed call `{"call": {…}, "id"?, "result"? | "error"?, "timestamp"?}`.
//!
//! ```text
//! tool schema                  ─▶ tool.declared toolproto:<_tool>; _activity "" → latent (model_task),
//!                                 a name → explicit (function), absent → resolved per call
//! call, latent, _output given  ─▶ planned, started, succeeded, result.created (structured_content = _output)
//! call, explicit, result given ─▶ planned, started, succeeded, result.created (structured_content = result)
//! call, explicit, error given  ─▶ planned, started, failed
//! call, no outcome yet         ─▶ planned, started (stays running)
//! ```
//!
//! Meta fields never enter `model_input` (they are not tool parameters); `_reasoningForCall` is kept
//! as `reasoning_for_call`, and `_activity`, `_delegate`, `_outputPath`, `_instance` in the external
//! mapping (source `toolproto`) with `tool`, `execution` and `call_id` when the record has one.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use toolledger_schemas::EventClass;

use crate::event::{Call, Ctx, declaration, fields, id_text, native_time, tool_error};
use crate::{Error, Mapped, Mapper, Result};

const SYSTEM: &str = "toolproto";

/// The Tool Protocol mapper's state for one file.
#[derive(Debug, Default)]
pub struct ToolProtoMapper {
    /// `_activity` per declared tool: `Some("")` latent, `Some(name)` explicit, `None` unresolved.
    activities: HashMap<String, Option<String>>,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::Malformed {
        system: SYSTEM,
        reason: reason.into(),
    }
}

/// A fixed string a schema gives a property (`const`, else `default`).
fn schema_string(schema: Option<&Value>) -> Option<String> {
    let schema = schema?;
    schema
        .get("const")
        .or_else(|| schema.get("default"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

impl Mapper for ToolProtoMapper {
    fn map(&mut self, ctx: &mut Ctx, record: &Value) -> Result<Mapped> {
        let Some(object) = record.as_object() else {
            return Err(malformed("a record is a JSON object"));
        };
        let time = native_time(record.get("timestamp")).or_else(|| native_time(record.get("time")));
        if object.get("_tool").is_some_and(Value::is_string) {
            return self.call(ctx, record, None, time, None);
        }
        if let Some(call) = object.get("call").filter(|c| c.is_object()) {
            let id = record
                .get("id")
                .or_else(|| record.get("call_id"))
                .and_then(id_text);
            return self.call(ctx, call, Some(record), time, id);
        }
        if let Some(calls) = object.get("calls").and_then(Value::as_array) {
            let mut mapped = Mapped::default();
            for (i, call) in calls.iter().enumerate() {
                if !call.get("_tool").is_some_and(Value::is_string) {
                    return Err(malformed(format!("calls[{i}] has no _tool")));
                }
            }
            for call in calls {
                let one = self.call(ctx, call, None, time, None)?;
                mapped.events.extend(one.events);
                mapped.notes.extend(one.notes);
            }
            return Ok(mapped);
        }
        let items = &record["properties"]["calls"]["items"];
        if items.is_object() {
            // A composed request schema: `anyOf` the tool schemas, or a single one.
            let schemas = match items["anyOf"].as_array() {
                Some(any_of) => any_of.iter().collect(),
                None => vec![items],
            };
            let mut mapped = Mapped::default();
            for schema in schemas {
                let one = self.schema(ctx, None, schema, time)?;
                mapped.events.extend(one.events);
                mapped.notes.extend(one.notes);
            }
            return Ok(mapped);
        }
        if let Some(schema) = object.get("schema").filter(|s| s.is_object()) {
            return self.schema(ctx, record.get("name").and_then(Value::as_str), schema, time);
        }
        if record["properties"].get("_tool").is_some() {
            return self.schema(ctx, None, record, time);
        }
        Err(malformed(
            "not a tool schema (properties._tool), a call (_tool), a response (calls) or an executed call (call)",
        ))
    }
}

impl ToolProtoMapper {
    fn schema(
        &mut self,
        ctx: &mut Ctx,
        registered: Option<&str>,
        schema: &Value,
        time: Option<i64>,
    ) -> Result<Mapped> {
        let properties = schema["properties"]
            .as_object()
            .ok_or_else(|| malformed("a tool schema without properties"))?;
        let name = schema_string(properties.get("_tool"))
            .or_else(|| registered.map(str::to_owned))
            .filter(|n| !n.is_empty())
            .ok_or_else(|| malformed("a tool schema whose _tool names no tool (const)"))?;
        let mut notes = Vec::new();
        if !properties.contains_key("_output") {
            // Tool Protocol requires it, but its own composed-schema example leaves it out.
            notes.push(format!(
                "tool {name}: no _output; declared without an output contract"
            ));
        }
        let activity = schema_string(properties.get("_activity"));
        let (execution, kind) = match activity.as_deref() {
            Some("") => ("latent", "model_task"),
            Some(_) => ("explicit", "function"),
            None => ("unresolved", "function"),
        };
        // The model-facing input: the parameters, without the meta fields.
        let mut input = schema.clone();
        if let Some(props) = input.get_mut("properties").and_then(Value::as_object_mut) {
            props.retain(|k, _| !k.starts_with('_'));
        }
        if let Some(required) = input.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|r| !r.as_str().is_some_and(|s| s.starts_with('_')));
        }
        if let Some(object) = input.as_object_mut() {
            object.remove("description");
            object.remove("title");
        }
        let tool_id = format!("{SYSTEM}:{name}");
        let data = declaration(
            &tool_id,
            SYSTEM,
            &name,
            schema["description"].as_str().unwrap_or(""),
            kind,
            fields! {
                "title" => schema.get("title").cloned(),
                "input_contract" => json!({ "model_input_schema": input }),
                "output_contract" => properties.get("_output").map(|o| json!({ "output_schema": o })),
                "external_mappings" => json!([fields! {
                    "source" => SYSTEM,
                    "tool" => name.clone(),
                    "activity" => activity.clone(),
                    "execution" => execution,
                }]),
            },
        );
        self.activities.insert(name, activity);
        let time = ctx.time(time);
        Ok(Mapped {
            events: vec![ctx.event(EventClass::ToolDeclared, &tool_id, None, time, data, "")],
            notes,
        })
    }

    fn call(
        &mut self,
        ctx: &mut Ctx,
        call: &Value,
        wrapper: Option<&Value>,
        time: Option<i64>,
        call_id: Option<String>,
    ) -> Result<Mapped> {
        let Some(fields_in) = call.as_object() else {
            return Err(malformed("a call is a JSON object"));
        };
        let name = call["_tool"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| malformed("a call without _tool"))?;
        let activity = match call.get("_activity") {
            Some(Value::String(a)) => Some(a.clone()),
            Some(_) => return Err(malformed(format!("call {name}: _activity must be a string"))),
            None => self.activities.get(name).cloned().flatten(),
        };
        let output = call.get("_output").filter(|o| !o.is_null());
        let outcome = wrapper.and_then(|w| w.get("result").or_else(|| w.get("error")));
        let execution = match activity.as_deref() {
            Some("") => "latent",
            Some(_) => "explicit",
            // Zero-config resolution fell back to latent when the model filled _output itself.
            None if output.is_some() && outcome.is_none() => "latent",
            None if outcome.is_some() => "explicit",
            None => "unresolved",
        };
        let params: Map<String, Value> = fields_in
            .iter()
            .filter(|(k, _)| !k.starts_with('_'))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let session = ctx.session(wrapper.and_then(|w| w.get("session_id")).and_then(Value::as_str));
        let start = ctx.time(time);
        let native = call_id.clone().unwrap_or_default();
        let invocation_id = ctx.open_invocation(session.as_deref(), &[name, &native]);
        let mut invocation = Call::new(invocation_id, format!("{SYSTEM}:{name}"), session, start);
        invocation.native_call_id = call_id.clone();
        invocation.external_mappings.push(Value::Object(fields! {
            "source" => SYSTEM,
            "tool" => name,
            "activity" => activity.clone(),
            "execution" => execution,
            "call_id" => call_id,
            "delegate" => call.get("_delegate").cloned(),
            "output_path" => call.get("_outputPath").cloned(),
            "instance" => call.get("_instance").cloned(),
        }));
        invocation
            .fields
            .insert("model_input".into(), Value::Object(params));
        invocation.fields.insert("execution".into(), json!(execution));
        if let Some(reasoning) = call.get("_reasoningForCall") {
            invocation
                .fields
                .insert("reasoning_for_call".into(), reasoning.clone());
        }
        let mut events = invocation.planned_and_started(ctx, start);
        let mut notes = Vec::new();
        match (execution, output, wrapper) {
            ("latent", Some(output), _) => {
                let end = ctx.time(None);
                events.extend(invocation.succeeded(
                    ctx,
                    end,
                    fields! { "structured_content" => output.clone() },
                ));
            }
            (_, _, Some(wrapper)) if wrapper.get("error").is_some() => {
                let end = ctx.time(native_time(wrapper.get("ended_at")));
                let error = &wrapper["error"];
                let message = error
                    .as_str()
                    .or_else(|| error.get("message").and_then(Value::as_str))
                    .map(str::to_owned);
                let mut tool_error = tool_error("execution_failed", None, message);
                tool_error.insert("native_error_ref".into(), error.clone());
                events.extend(invocation.failed(ctx, end, Value::Object(tool_error), None));
            }
            (_, _, Some(wrapper)) if wrapper.get("result").is_some() => {
                let end = ctx.time(native_time(wrapper.get("ended_at")));
                events.extend(invocation.succeeded(
                    ctx,
                    end,
                    fields! { "structured_content" => wrapper.get("result").cloned() },
                ));
            }
            _ => notes.push(format!(
                "{name}: no outcome recorded; the invocation stays running"
            )),
        }
        if execution == "explicit" && output.is_some() {
            notes.push(format!(
                "{name}: _output filled by the model is not the activity's result; dropped"
            ));
        }
        Ok(Mapped { events, notes })
    }
}
