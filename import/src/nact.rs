//! N-ACT (IETF draft): tool signatures become declarations, every version kept; `:invoke` exchanges
//! become invocations, with 5xx responses as failed attempts and the executor's retries linked to them.
//!
//! A record is a tool signature (`toolId`, `name`, `description`, integer `version`, `currentVersion`,
//! `input_parameters`, `output_parameters`), an enumeration page `{"items": [signatures], "paging"}`
//! (each page's versions are declared oldest first, whatever order the server listed them in), or an
//! exchange as an executor logs it:
//! `{"request": {"method": "POST", "path": "/tools/{toolId}[/versions/{v}]:invoke", "body": {"name",
//! "input_parameters": [{"name", "value"}]}}, "response": {"status", "body": {"output_parameters"}},
//! "timestamp"?, "ended_at"?, "duration_ms"?, "request_id"?}`.
//!
//! ```text
//! signature version v     ─▶ tool.declared nact:<toolId>, version "v" (v must be a positive integer and
//!                            increase per toolId; the same v again must be the same signature)
//! exchange                ─▶ planned, started (model_input = {name: value})
//!   2xx                   ─▶ succeeded, result.created (structured_content = the response body)
//!   5xx                   ─▶ failed (dependency_unavailable, retryable); no result: the executor
//!                            retries rather than show the model (§7)
//!   4xx                   ─▶ failed (invalid_arguments), result.created
//! the next exchange for the same tool, version and inputs after a 5xx ─▶ retry_of + attempt
//! ```
//!
//! N-ACT has no call id; an invocation id is a digest of the session, the toolId and the call's
//! ordinal in the file. Native ids kept (source `nact`): `toolId`, `version`, `version_pinned`,
//! `path`, `http_status`, `request_id` when the log has one (also `native_call_id`).

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use toolledger_schemas::EventClass;

use crate::event::{Call, Ctx, declaration, fields, id_text, native_time, tool_error};
use crate::{Error, Mapped, Mapper, Result};

const SYSTEM: &str = "nact";

/// N-ACT's default maximum for an `int` input (§6.1).
const DEFAULT_INT_MAX: u64 = 65_535;

/// The N-ACT mapper's state for one file.
#[derive(Debug, Default)]
pub struct NactMapper {
    /// Per toolId: the latest version declared and its signature (without `currentVersion`).
    versions: HashMap<String, (u64, Value)>,
    /// 5xx failures waiting for the executor's retry, by (toolId, pinned version, inputs):
    /// (invocation id, attempt).
    failures: HashMap<(String, Option<u64>, String), (String, u64)>,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::Malformed {
        system: SYSTEM,
        reason: reason.into(),
    }
}

/// A positive integer version, as a number or a string of digits.
fn version_of(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .filter(|v| *v >= 1)
}

impl Mapper for NactMapper {
    fn map(&mut self, ctx: &mut Ctx, record: &Value) -> Result<Mapped> {
        if !record.is_object() {
            return Err(malformed("a record is a JSON object"));
        }
        let time = native_time(record.get("timestamp"))
            .or_else(|| native_time(record.get("time")))
            .or_else(|| native_time(record.get("started_at")));
        if let Some(items) = record.get("items") {
            let items = items
                .as_array()
                .ok_or_else(|| malformed("`items` is not an array"))?;
            let mut sorted: Vec<(&str, u64, &Value)> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let tool = item["toolId"]
                    .as_str()
                    .ok_or_else(|| malformed(format!("items[{i}] has no toolId")))?;
                let version = version_of(item.get("version")).ok_or_else(|| {
                    malformed(format!("items[{i}] ({tool}): version must be a positive integer"))
                })?;
                sorted.push((tool, version, item));
            }
            sorted.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            let mut mapped = Mapped::default();
            for (_, _, item) in sorted {
                let one = self.signature(ctx, record, item, time)?;
                mapped.events.extend(one.events);
                mapped.notes.extend(one.notes);
            }
            return Ok(mapped);
        }
        if record.get("toolId").is_some() {
            return self.signature(ctx, record, record, time);
        }
        if record.get("request").is_some() {
            return self.exchange(ctx, record, time);
        }
        Err(malformed(
            "not a tool signature (toolId), an enumeration page (items) or an invoke exchange (request)",
        ))
    }
}

impl NactMapper {
    fn signature(&mut self, ctx: &mut Ctx, record: &Value, sig: &Value, time: Option<i64>) -> Result<Mapped> {
        let tool = sig["toolId"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| malformed("signature without toolId"))?;
        let name = sig["name"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| malformed(format!("signature {tool}: no name")))?;
        let version = version_of(sig.get("version")).ok_or_else(|| {
            malformed(format!(
                "signature {tool}: version must be a positive integer (§6.1)"
            ))
        })?;
        let current = match sig.get("currentVersion") {
            None => None,
            some => Some(version_of(some).ok_or_else(|| {
                malformed(format!(
                    "signature {tool}: currentVersion must be a positive integer"
                ))
            })?),
        };
        if let Some(current) = current
            && current < version
        {
            return Err(Error::VersionNotMonotonic {
                tool_id: tool.to_owned(),
                reason: format!("currentVersion {current} is below version {version}"),
            });
        }
        // The signature is locked per version except for currentVersion (§6.1).
        let mut locked = sig.clone();
        if let Some(object) = locked.as_object_mut() {
            object.remove("currentVersion");
        }
        if let Some((latest, previous)) = self.versions.get(tool) {
            if version < *latest {
                return Err(Error::VersionNotMonotonic {
                    tool_id: tool.to_owned(),
                    reason: format!("version {version} after version {latest}; versions increase from 1"),
                });
            }
            if version == *latest {
                if *previous == locked {
                    return Ok(Mapped {
                        events: Vec::new(),
                        notes: vec![format!("{tool} version {version} already declared")],
                    });
                }
                return Err(Error::VersionNotMonotonic {
                    tool_id: tool.to_owned(),
                    reason: format!("the signature of version {version} changed without a new version"),
                });
            }
        }
        let inputs = sig.get("input_parameters").cloned().unwrap_or_else(|| json!([]));
        let schema = input_schema(tool, &inputs)?;
        let tool_id = format!("nact:{tool}");
        let namespace = record
            .get("platform_root")
            .or_else(|| record.get("server"))
            .and_then(Value::as_str)
            .unwrap_or(SYSTEM);
        let data = declaration(
            &tool_id,
            namespace,
            name,
            sig["description"].as_str().unwrap_or(""),
            "openapi_operation",
            fields! {
                "version" => version.to_string(),
                "input_contract" => json!({ "model_input_schema": schema, "parameters": inputs }),
                "output_contract" => sig.get("output_parameters").map(|o| json!({ "output_parameters": o })),
                "external_mappings" => json!([fields! {
                    "source" => SYSTEM,
                    "toolId" => tool,
                    "version" => version.to_string(),
                    "currentVersion" => current.map(|c| json!(c.to_string())),
                    "platform_root" => record.get("platform_root").cloned(),
                    "method" => "POST",
                    "path" => format!("/tools/{tool}/versions/{version}:invoke"),
                }]),
                "annotations" => annotations(sig),
            },
        );
        let time = ctx.time(time);
        let event = ctx.event(
            EventClass::ToolDeclared,
            &tool_id,
            None,
            time,
            data,
            &version.to_string(),
        );
        self.versions.insert(tool.to_owned(), (version, locked));
        Ok(Mapped {
            events: vec![event],
            notes: Vec::new(),
        })
    }

    fn exchange(&mut self, ctx: &mut Ctx, record: &Value, time: Option<i64>) -> Result<Mapped> {
        let request = &record["request"];
        let path = request["path"]
            .as_str()
            .or_else(|| request["url"].as_str())
            .ok_or_else(|| malformed("exchange: request.path (or url) is missing"))?;
        let (tool, pinned) = invoke_target(path)?;
        let body = &request["body"];
        let mut input = Map::new();
        match body.get("input_parameters") {
            Some(Value::Array(params)) => {
                for (i, param) in params.iter().enumerate() {
                    let name = param["name"].as_str().ok_or_else(|| {
                        malformed(format!("exchange {path}: input_parameters[{i}] has no name"))
                    })?;
                    input.insert(
                        name.to_owned(),
                        param.get("value").cloned().unwrap_or(Value::Null),
                    );
                }
            }
            None => {}
            Some(_) => {
                return Err(malformed(format!(
                    "exchange {path}: input_parameters is not an array"
                )));
            }
        }
        let status = match record.get("response") {
            Some(response) => Some(
                response["status"]
                    .as_u64()
                    .ok_or_else(|| malformed(format!("exchange {path}: response.status is missing")))?,
            ),
            None => None,
        };
        let mut notes = self.check_inputs(&tool, pinned, &input);
        let session = ctx.session(record.get("session_id").and_then(Value::as_str));
        let start = ctx.time(time);
        let invocation_id = ctx.open_invocation(session.as_deref(), &[&tool, "invoke"]);
        let version = pinned.or_else(|| self.versions.get(&tool).map(|(v, _)| *v));
        let request_id = record.get("request_id").and_then(id_text);
        let mut call = Call::new(invocation_id, format!("nact:{tool}"), session, start);
        call.native_call_id = request_id.clone();
        call.external_mappings.push(Value::Object(fields! {
            "source" => SYSTEM,
            "toolId" => tool.clone(),
            "version" => version.map(|v| json!(v.to_string())),
            "version_pinned" => pinned.is_some(),
            "method" => "POST",
            "path" => path,
            "http_status" => status.map(|s| json!(s)),
            "request_id" => request_id,
            "function_name" => body.get("name").cloned(),
        }));
        let input = Value::Object(input);
        call.fields.insert("model_input".into(), input.clone());
        let retry_key = (tool.clone(), pinned, input.to_string());
        let attempt = match self.failures.remove(&retry_key) {
            Some((previous, attempt)) => {
                call.fields.insert("retry_of".into(), json!(previous));
                call.fields.insert("attempt".into(), json!(attempt + 1));
                attempt + 1
            }
            None => 1,
        };
        let mut events = call.planned_and_started(ctx, start);
        let Some(status) = status else {
            notes.push("no response recorded: the invocation stays running".to_owned());
            return Ok(Mapped { events, notes });
        };
        let ended = native_time(record.get("ended_at")).or_else(|| {
            record
                .get("duration_ms")
                .and_then(Value::as_f64)
                .map(|d| start + d as i64)
        });
        let end = ctx.time(ended);
        let response_body = record["response"].get("body").cloned();
        let message = response_body
            .as_ref()
            .and_then(|b| b.get("message").or_else(|| b.get("error")))
            .and_then(Value::as_str)
            .map(str::to_owned);
        match status {
            200..=299 => {
                if let Some(outputs) = response_body
                    .as_ref()
                    .and_then(|b| b.get("output_parameters"))
                    .and_then(Value::as_array)
                {
                    notes.extend(self.check_outputs(&tool, version, outputs));
                }
                events.extend(call.succeeded(ctx, end, fields! { "structured_content" => response_body }));
            }
            500..=599 => {
                let mut error = tool_error("dependency_unavailable", Some(format!("http_{status}")), message);
                error.insert("recoverability".into(), json!("retryable"));
                error.insert("native_error_ref".into(), json!({ "http_status": status }));
                events.extend(call.failed(ctx, end, Value::Object(error), None));
                self.failures
                    .insert(retry_key, (call.invocation_id.clone(), attempt));
            }
            _ => {
                let mut error = tool_error("invalid_arguments", Some(format!("http_{status}")), message);
                error.insert("native_error_ref".into(), json!({ "http_status": status }));
                events.extend(call.failed(
                    ctx,
                    end,
                    Value::Object(error),
                    Some(fields! { "structured_content" => response_body }),
                ));
            }
        }
        Ok(Mapped { events, notes })
    }

    /// Inputs that break the declared signature (an enum value not allowed, an int above max, an
    /// unknown parameter), as notes: the log says they were sent, so they are recorded as sent.
    fn check_inputs(&self, tool: &str, pinned: Option<u64>, input: &Map<String, Value>) -> Vec<String> {
        let Some((latest, sig)) = self.versions.get(tool) else {
            return Vec::new();
        };
        if pinned.is_some_and(|v| v != *latest) {
            return Vec::new();
        }
        let params = sig["input_parameters"].as_array().cloned().unwrap_or_default();
        let mut notes = Vec::new();
        for (name, value) in input {
            let Some(param) = params.iter().find(|p| p["name"].as_str() == Some(name)) else {
                notes.push(format!("input {name} is not in the signature"));
                continue;
            };
            match param["type"].as_str().unwrap_or("string") {
                "enum" => {
                    let allowed = allowed_values(param);
                    if !value
                        .as_str()
                        .is_some_and(|v| allowed.iter().any(|a| a["name"].as_str() == Some(v)))
                    {
                        notes.push(format!("input {name} = {value} is not an allowed value"));
                    }
                }
                "int" => {
                    let max = param["max"].as_u64().unwrap_or(DEFAULT_INT_MAX);
                    if value.as_i64().is_none_or(|v| v > max as i64) {
                        notes.push(format!("input {name} = {value} is not an int up to {max}"));
                    }
                }
                _ => {}
            }
        }
        notes
    }

    fn check_outputs(&self, tool: &str, version: Option<u64>, outputs: &[Value]) -> Vec<String> {
        let Some((latest, sig)) = self.versions.get(tool) else {
            return Vec::new();
        };
        if version != Some(*latest) {
            return Vec::new();
        }
        let declared: Vec<&str> = match &sig["output_parameters"] {
            Value::Array(items) => items.iter().filter_map(|o| o["name"].as_str()).collect(),
            Value::Object(o) => o.get("name").and_then(Value::as_str).into_iter().collect(),
            _ => Vec::new(),
        };
        outputs
            .iter()
            .filter_map(|o| o["name"].as_str())
            .filter(|name| !declared.contains(name))
            .map(|name| format!("output {name} matches no output name of the signature"))
            .collect()
    }
}

/// `allowed-values` as an array (the draft's figure 3 also nests it in an object).
fn allowed_values(param: &Value) -> Vec<Value> {
    match &param["allowed-values"] {
        Value::Array(items) => items.clone(),
        Value::Object(object) => object
            .values()
            .filter_map(Value::as_array)
            .flatten()
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

/// The model-facing JSON Schema of N-ACT's typed inputs: string (default), int (max, default
/// 65535), boolean, enum (allowed-values names); `required` defaults to true (§6.1).
fn input_schema(tool: &str, inputs: &Value) -> Result<Value> {
    let params = inputs
        .as_array()
        .ok_or_else(|| malformed(format!("signature {tool}: input_parameters is not an array")))?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (i, param) in params.iter().enumerate() {
        let name = param["name"]
            .as_str()
            .ok_or_else(|| malformed(format!("signature {tool}: input_parameters[{i}] has no name")))?;
        let mut schema = Map::new();
        match param["type"].as_str().unwrap_or("string") {
            "string" => {
                schema.insert("type".into(), json!("string"));
                if let Some(max) = param.get("max_length").or_else(|| param.get("maxLength")) {
                    schema.insert("maxLength".into(), max.clone());
                }
            }
            "int" => {
                schema.insert("type".into(), json!("integer"));
                schema.insert(
                    "maximum".into(),
                    json!(param["max"].as_u64().unwrap_or(DEFAULT_INT_MAX)),
                );
                if let Some(min) = param.get("min") {
                    schema.insert("minimum".into(), min.clone());
                }
            }
            "boolean" => {
                schema.insert("type".into(), json!("boolean"));
            }
            "enum" => {
                let allowed = allowed_values(param);
                if allowed.is_empty() {
                    return Err(malformed(format!(
                        "signature {tool}: enum input {name} has no allowed-values (§6.1)"
                    )));
                }
                schema.insert("type".into(), json!("string"));
                schema.insert(
                    "enum".into(),
                    Value::Array(allowed.iter().filter_map(|a| a.get("name").cloned()).collect()),
                );
            }
            other => {
                return Err(malformed(format!(
                    "signature {tool}: input {name} has type `{other}`; N-ACT allows string, int, boolean, enum"
                )));
            }
        }
        if let Some(description) = param.get("description") {
            schema.insert("description".into(), description.clone());
        }
        if param.get("required").and_then(Value::as_bool).unwrap_or(true) {
            required.push(json!(name));
        }
        properties.insert(name.to_owned(), Value::Object(schema));
    }
    Ok(json!({ "type": "object", "properties": properties, "required": required }))
}

fn annotations(sig: &Value) -> Option<Value> {
    let mut annotations = Map::new();
    for key in ["tags", "img"] {
        if let Some(value) = sig.get(key) {
            annotations.insert(key.to_owned(), value.clone());
        }
    }
    (!annotations.is_empty()).then_some(Value::Object(annotations))
}

/// `(toolId, pinned version)` from `…/tools/{toolId}:invoke` or `…/tools/{toolId}/versions/{v}:invoke`.
fn invoke_target(path: &str) -> Result<(String, Option<u64>)> {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let rest = path.rsplit_once("/tools/").map(|(_, rest)| rest).ok_or_else(|| {
        malformed(format!(
            "`{path}` is not an N-ACT invoke path (…/tools/{{toolId}}:invoke)"
        ))
    })?;
    let target = rest
        .strip_suffix(":invoke")
        .ok_or_else(|| malformed(format!("`{path}` does not end in :invoke")))?;
    match target.split_once("/versions/") {
        Some((tool, version)) => {
            let version = version_of(Some(&json!(version)))
                .ok_or_else(|| malformed(format!("`{path}`: the version must be a positive integer")))?;
            Ok((tool.to_owned(), Some(version)))
        }
        None if !target.is_empty() && !target.contains('/') => Ok((target.to_owned(), None)),
        None => Err(malformed(format!("`{path}` names no toolId"))),
    }
}
