//! Open Tool Calling: tool definitions become declarations, tool requests and tool responses become
//! invocations, results, errors, authorization requests and artifact refs.
//!
//! A record is a tool definition (`toolkit` with `input` or `output`), a tool request (`run_id`,
//! `execution_id` or `call_id`, `tool`, `inputs`, `context`), a tool response (`success` with
//! `execution_id` or `call_id`), or a pair `{"request": …, "response": …}`. A wrapper's `timestamp` /
//! `time` times the request; a response's `finished_at` (less `duration` for the start) times it.
//!
//! ```text
//! definition                        ─▶ tool.declared (otc:<toolkit>.<name>, version = toolkit.version)
//! request                           ─▶ planned               (model_input = inputs, actor_ref = user_id)
//! response value                    ─▶ started, succeeded, result.created (structured_content = value)
//! response artifact                 ─▶ started, succeeded, result.created (artifact_refs)
//! response error                    ─▶ started, failed (error: can_retry → recoverability,
//!                                      retry_after_ms → retry_after, developer_message kept), result
//! response requires_authorization   ─▶ tool.permission.requested (awaiting_approval); the same
//!                                      request sent again continues the invocation
//! ```
//!
//! `started` comes with the response, timed at `finished_at − duration` (else the request's time):
//! only the response shows the tool ran, and a call that waited for authorization must not look
//! as if it had been running.
//!
//! Secrets never enter an event: `context.authorization`, `context.secrets` and `context.user_info`
//! (issued by the authorization server) are dropped here, and so is the query string of an
//! authorization URL (it carries OAuth state); each drop is noted by field name only.
//! Native ids kept (source `otc`): `run_id` (also the session), `execution_id`, `call_id`,
//! `tool_name`, `toolkit_name`, `toolkit_version`, `authorization_id`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};
use toolledger_schemas::EventClass;

use crate::event::{Call, Ctx, declaration, digest, fields, id_text, native_time, rfc3339, tool_error};
use crate::{Error, Mapped, Mapper, Result};

const SYSTEM: &str = "otc";

/// The Open Tool Calling mapper's state for one file.
#[derive(Debug, Default)]
pub struct OtcMapper {
    /// Requests waiting for their response, by execution id (or call id).
    open: HashMap<String, Call>,
    /// Open requests whose response asked for authorization: the request sent again after the
    /// user authorized continues the same invocation.
    awaiting: HashSet<String>,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::Malformed {
        system: SYSTEM,
        reason: reason.into(),
    }
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

impl Mapper for OtcMapper {
    fn map(&mut self, ctx: &mut Ctx, record: &Value) -> Result<Mapped> {
        if !record.is_object() {
            return Err(malformed("a record is a JSON object"));
        }
        let time = native_time(record.get("timestamp")).or_else(|| native_time(record.get("time")));
        if record.get("request").is_some() || record.get("response").is_some() {
            // Check the response's shape first, so a bad pair leaves no request open.
            if let Some(response) = record.get("response")
                && !response.get("success").is_some_and(Value::is_boolean)
            {
                return Err(malformed("tool response: `success` is required (a boolean)"));
            }
            let mut mapped = Mapped::default();
            if let Some(request) = record.get("request") {
                let m = self.request(ctx, request, time)?;
                mapped.events.extend(m.events);
                mapped.notes.extend(m.notes);
            }
            if let Some(response) = record.get("response") {
                let m = self.response(ctx, response)?;
                mapped.events.extend(m.events);
                mapped.notes.extend(m.notes);
            }
            return Ok(mapped);
        }
        if record.get("success").is_some() {
            return self.response(ctx, record);
        }
        if record.get("run_id").is_some() || record.get("inputs").is_some() {
            return self.request(ctx, record, time);
        }
        if record.get("toolkit").is_some() || (record.get("input").is_some() && record.get("name").is_some())
        {
            return self.definition(ctx, record, time);
        }
        Err(malformed(
            "not a tool definition (toolkit, input), a tool request (run_id, inputs), a tool response \
             (success) or a request/response pair",
        ))
    }
}

impl OtcMapper {
    fn definition(&mut self, ctx: &mut Ctx, def: &Value, time: Option<i64>) -> Result<Mapped> {
        let name = text(def, "name").ok_or_else(|| malformed("tool definition without a name"))?;
        let toolkit = def.get("toolkit").cloned().unwrap_or(Value::Null);
        let toolkit_name = text(&toolkit, "name");
        let version = toolkit
            .get("version")
            .and_then(id_text)
            .or_else(|| def.get("version").and_then(id_text));
        let tool_id = tool_id(toolkit_name, name);
        let mut input_contract = Map::new();
        if let Some(input) = def.get("input") {
            input_contract.insert(
                "parameters".into(),
                input.get("parameters").unwrap_or(input).clone(),
            );
        }
        if let Some(requirements) = def.get("requirements") {
            // Requirements name the secrets and authorization a tool needs, never their values.
            input_contract.insert("requirements".into(), requirements.clone());
        }
        let data = declaration(
            &tool_id,
            toolkit_name.unwrap_or(SYSTEM),
            name,
            text(def, "description").unwrap_or(""),
            "function",
            fields! {
                "version" => version.clone(),
                "title" => text(def, "fully_qualified_name"),
                "input_contract" => Value::Object(input_contract),
                "output_contract" => def.get("output").cloned(),
                "external_mappings" => json!([fields! {
                    "source" => SYSTEM,
                    "tool_definition_id" => def.get("id").and_then(id_text),
                    "tool_name" => name,
                    "fully_qualified_name" => text(def, "fully_qualified_name"),
                    "toolkit_name" => toolkit_name,
                    "toolkit_version" => version,
                }]),
                "annotations" => toolkit.get("description").map(|d| json!({ "toolkit_description": d })),
            },
        );
        let time = ctx.time(time);
        Ok(Mapped {
            events: vec![ctx.event(EventClass::ToolDeclared, &tool_id, None, time, data, "")],
            notes: Vec::new(),
        })
    }

    fn request(&mut self, ctx: &mut Ctx, request: &Value, time: Option<i64>) -> Result<Mapped> {
        let execution_id = text(request, "execution_id");
        let call_id = text(request, "call_id");
        let key = execution_id
            .or(call_id)
            .ok_or_else(|| malformed("tool request without execution_id or call_id"))?;
        let tool = request.get("tool").cloned().unwrap_or(Value::Null);
        let name = text(&tool, "name")
            .or_else(|| request.get("tool").and_then(Value::as_str))
            .ok_or_else(|| malformed(format!("tool request {key}: tool.name is missing")))?;
        let toolkit_name = text(&tool, "toolkit");
        let toolkit_version = tool.get("version").and_then(id_text);
        if self.awaiting.remove(key) && self.open.contains_key(key) {
            // The same call sent again once the user authorized: its response will show it ran.
            ctx.time(time);
            return Ok(Mapped {
                events: Vec::new(),
                notes: vec![format!("tool request {key}: sent again after authorization")],
            });
        }
        if self.open.contains_key(key) {
            return Err(malformed(format!(
                "tool request {key}: a request with this id is still open"
            )));
        }
        let run_id = text(request, "run_id");
        let session = ctx.session(run_id);
        let time = ctx.time(time);
        let invocation_id = ctx.open_invocation(session.as_deref(), &[key]);
        let mut call = Call::new(invocation_id, tool_id(toolkit_name, name), session, time);
        call.native_call_id = Some(key.to_owned());
        call.external_mappings.push(Value::Object(fields! {
            "source" => SYSTEM,
            "run_id" => run_id,
            "execution_id" => execution_id,
            "call_id" => call_id,
            "tool_name" => name,
            "toolkit_name" => toolkit_name,
            "toolkit_version" => toolkit_version,
        }));
        call.fields.insert(
            "model_input".into(),
            request.get("inputs").cloned().unwrap_or_else(|| json!({})),
        );
        let mut notes = Vec::new();
        if let Some(context) = request.get("context").and_then(Value::as_object) {
            if let Some(user) = context.get("user_id").and_then(id_text) {
                call.fields.insert("actor_ref".into(), json!(user));
            }
            for key in context.keys() {
                if key != "user_id" {
                    notes.push(format!("dropped context.{key}"));
                }
            }
        }
        // Only the response shows the tool ran: `started` comes with it.
        let events = vec![call.event(ctx, EventClass::InvocationPlanned, "planned", time, Map::new())];
        self.open.insert(key.to_owned(), call);
        Ok(Mapped { events, notes })
    }

    fn response(&mut self, ctx: &mut Ctx, response: &Value) -> Result<Mapped> {
        let key = text(response, "execution_id")
            .or_else(|| text(response, "call_id"))
            .ok_or_else(|| malformed("tool response without execution_id or call_id"))?;
        let success = response
            .get("success")
            .and_then(Value::as_bool)
            .ok_or_else(|| malformed(format!("tool response {key}: `success` is required (a boolean)")))?;
        // The forms may sit under `output` or at the top level.
        let output = response
            .get("output")
            .filter(|o| o.is_object())
            .unwrap_or(response);
        if !self.open.contains_key(key) {
            return Err(Error::Unmatched {
                system: SYSTEM,
                reason: format!("tool response {key} answers no earlier tool request"),
            });
        }
        let finished = native_time(response.get("finished_at"));
        let time = ctx.time(finished);
        let mut notes = Vec::new();
        let Some(mut call) = self.open.remove(key) else {
            return Err(Error::Unmatched {
                system: SYSTEM,
                reason: format!("tool response {key} answers no earlier tool request"),
            });
        };
        let duration = response.get("duration").and_then(Value::as_f64);
        let started_ms = match (finished, duration) {
            (Some(finished), Some(duration)) => (finished - duration as i64).max(call.created_ms),
            _ => call.created_ms,
        };
        if let Some(duration) = duration {
            call.fields.insert("duration_ms".into(), json!(duration));
        }
        let started = |call: &Call, ctx: &Ctx| {
            let mut extra = fields! { "started_at" => rfc3339(started_ms) };
            if let Some(input) = call.fields.get("model_input") {
                extra.insert("call_input".into(), input.clone());
            }
            call.event(ctx, EventClass::InvocationStarted, "running", started_ms, extra)
        };
        let mut events = Vec::new();
        if output
            .get("requires_authorization")
            .is_none_or(|a| !a.is_object())
        {
            events.push(started(&call, ctx));
            call.fields
                .insert("started_at".into(), json!(rfc3339(started_ms)));
        }
        let outcome = if let Some(auth) = output.get("requires_authorization").filter(|a| a.is_object()) {
            let authorization_id = auth.get("id").and_then(id_text);
            let url = auth
                .get("url")
                .and_then(Value::as_str)
                .map(|url| match url.split_once('?') {
                    Some((base, _)) => {
                        notes.push("dropped requires_authorization.url query".to_owned());
                        base.to_owned()
                    }
                    None => url.to_owned(),
                });
            if let Some(id) = &authorization_id
                && let Some(Value::Object(mapping)) = call.external_mappings.first_mut()
            {
                mapping.insert("authorization_id".into(), json!(id));
            }
            let decision_id = format!("authz-{}", digest(&[&call.invocation_id], 24));
            let request = json!({
                "schema_version": crate::event::SCHEMA_VERSION,
                "decision_id": decision_id,
                "invocation_id": call.invocation_id,
                "tool_id": call.tool_id,
                "permission_input": call.fields.get("model_input").cloned().unwrap_or(Value::Null),
                "requested_at": rfc3339(time),
                "mode": "requires_authorization",
                "reason": fields! {
                    "kind" => "requires_authorization",
                    "authorization_id" => authorization_id,
                    "url" => url,
                    "scopes" => auth.get("scopes").cloned(),
                    "status" => auth.get("status").cloned(),
                },
            });
            // The call waits for the user: keep it open for a later response with the same id.
            let event = ctx.event(
                EventClass::PermissionRequested,
                &call.invocation_id,
                call.session.as_deref(),
                time,
                request,
                "",
            );
            self.open.insert(key.to_owned(), call);
            self.awaiting.insert(key.to_owned());
            vec![event]
        } else if let Some(error) = output.get("error").filter(|e| e.is_object()) {
            let can_retry = error.get("can_retry").and_then(Value::as_bool);
            let mut tool_error = tool_error(
                "execution_failed",
                None,
                error.get("message").and_then(Value::as_str).map(str::to_owned),
            );
            if let Some(can_retry) = can_retry {
                tool_error.insert(
                    "recoverability".into(),
                    json!(if can_retry { "retryable" } else { "not_retryable" }),
                );
            }
            if let Some(after) = error.get("retry_after_ms") {
                tool_error.insert("retry_after".into(), json!({ "ms": after }));
            }
            tool_error.insert("native_error_ref".into(), error.clone());
            let shown = error
                .get("message")
                .and_then(Value::as_str)
                .map(crate::event::text_content);
            call.failed(
                ctx,
                time,
                Value::Object(tool_error),
                Some(fields! { "content" => shown }),
            )
        } else if let Some(artifact) = output.get("artifact").filter(|a| a.is_object()) {
            call.succeeded(ctx, time, fields! { "artifact_refs" => json!([artifact]) })
        } else if let Some(value) = output.get("value") {
            if success {
                call.succeeded(ctx, time, fields! { "structured_content" => value.clone() })
            } else {
                let error = tool_error("execution_failed", Some("otc:success_false".into()), None);
                call.failed(
                    ctx,
                    time,
                    Value::Object(error),
                    Some(fields! { "structured_content" => value.clone() }),
                )
            }
        } else if success {
            call.succeeded(ctx, time, Map::new())
        } else {
            let error = tool_error("execution_failed", Some("otc:success_false".into()), None);
            call.failed(ctx, time, Value::Object(error), None)
        };
        events.extend(outcome);
        Ok(Mapped { events, notes })
    }
}

fn tool_id(toolkit: Option<&str>, name: &str) -> String {
    match toolkit {
        Some(toolkit) => format!("otc:{toolkit}.{name}"),
        None => format!("otc:{name}"),
    }
}
