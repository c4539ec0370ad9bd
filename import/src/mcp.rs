//! MCP JSON-RPC logs: `tools/list` results become declarations, `tools/call` requests and their
//! responses become invocations and results.
//!
//! A record is one JSON-RPC message, bare or wrapped in a log line that names the session:
//! `{"mcp_session_id" | "session_id", "server_id"?, "timestamp" | "time"?, "message": {…}}`.
//!
//! ```text
//! initialize (request/result)      ─▶ the session's protocol version, no event
//! tools/list result                ─▶ tool.declared per tool (external mapping: server, tool_name)
//! tools/call request   (id)        ─▶ planned, started            (model_input = params.arguments)
//!   response result, isError false ─▶ succeeded, result.created   (content, structuredContent, _meta)
//!   response result, isError true  ─▶ failed (execution_failed), result.created (is_error)
//!   response error {code, message} ─▶ failed (invalid_arguments for -32602, else execution_failed)
//! notifications/progress (token)   ─▶ tool.invocation.progress (sequence, percent, message) of the
//!                                    open call whose `_meta.progressToken` it names
//! notifications/cancelled          ─▶ canceled
//! ```
//!
//! Requests wait for their responses by (session, JSON-RPC id), so parallel calls interleave freely.
//! Native ids kept: `jsonrpc_request_id` (also `native_call_id`), `mcp_session_id`, `server_id`,
//! `mcp_protocol_version`, `method`, `tool_name`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use toolledger_schemas::EventClass;

use crate::event::{Call, Ctx, declaration, fields, id_text, native_time, rfc3339, tool_error};
use crate::{Error, Mapped, Mapper, Result};

const SYSTEM: &str = "mcp";

/// The MCP mapper's state for one file.
#[derive(Debug, Default)]
pub struct McpMapper {
    /// Open `tools/call` requests by (session, JSON-RPC id).
    calls: HashMap<(String, String), Call>,
    /// Open `tools/list` requests by (session, JSON-RPC id).
    lists: HashMap<(String, String), ()>,
    /// Protocol version per session, from `initialize`.
    versions: HashMap<String, String>,
    /// Open calls by (session, `_meta.progressToken`) → their JSON-RPC id, and how many progress
    /// notifications each has had.
    progress: HashMap<(String, String), (String, u64)>,
}

fn malformed(reason: impl Into<String>) -> Error {
    Error::Malformed {
        system: SYSTEM,
        reason: reason.into(),
    }
}

struct Envelope<'a> {
    message: &'a Value,
    session: Option<String>,
    server: Option<String>,
    time: Option<i64>,
}

fn envelope(record: &Value) -> Result<Envelope<'_>> {
    if !record.is_object() {
        return Err(malformed("a record is a JSON object"));
    }
    let (message, wrapper) = match record.get("message") {
        Some(message) if message.is_object() => (message, Some(record)),
        _ => (record, None),
    };
    if message.get("jsonrpc").is_none()
        && message.get("method").is_none()
        && message.get("result").is_none()
        && message.get("error").is_none()
    {
        return Err(malformed(
            "neither a JSON-RPC message (jsonrpc, method, result or error) nor a log line with `message`",
        ));
    }
    let text = |key: &str| {
        wrapper
            .and_then(|w| w.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let time = wrapper.and_then(|w| {
        native_time(w.get("timestamp"))
            .or_else(|| native_time(w.get("time")))
            .or_else(|| native_time(w.get("ts")))
    });
    Ok(Envelope {
        message,
        session: text("mcp_session_id").or_else(|| text("session_id")),
        server: text("server_id").or_else(|| text("server")),
        time,
    })
}

impl Mapper for McpMapper {
    fn map(&mut self, ctx: &mut Ctx, record: &Value) -> Result<Mapped> {
        let env = envelope(record)?;
        let session = ctx.session(env.session.as_deref());
        let session_key = session.clone().unwrap_or_default();
        let message = env.message;
        let id = message.get("id").and_then(id_text);
        match (message.get("method").and_then(Value::as_str), id) {
            (Some("tools/call"), Some(id)) => self.call(ctx, &env, session, id),
            (Some("tools/call"), None) => Err(malformed("tools/call request without an id")),
            (Some("tools/list"), Some(id)) => {
                self.lists.insert((session_key, id), ());
                Ok(Mapped::default())
            }
            (Some("initialize"), _) => {
                if let Some(version) = message["params"]["protocolVersion"].as_str() {
                    self.versions.insert(session_key, version.to_owned());
                }
                Ok(Mapped::default())
            }
            (Some("notifications/cancelled"), _) => self.cancelled(ctx, &env, session),
            (Some("notifications/progress"), _) => self.progressed(ctx, &env, session),
            (Some(method), _) => Ok(Mapped {
                events: Vec::new(),
                notes: vec![format!("{method}: not a tool event")],
            }),
            (None, Some(id)) => self.response(ctx, &env, session, id),
            (None, None) => Err(malformed("a response without an id")),
        }
    }
}

impl McpMapper {
    fn call(
        &mut self,
        ctx: &mut Ctx,
        env: &Envelope<'_>,
        session: Option<String>,
        id: String,
    ) -> Result<Mapped> {
        let params = &env.message["params"];
        let name = params["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| malformed(format!("tools/call {id}: params.name is missing")))?;
        let session_key = session.clone().unwrap_or_default();
        if self.calls.contains_key(&(session_key.clone(), id.clone())) {
            return Err(malformed(format!(
                "tools/call {id}: a request with this id is still open in this session"
            )));
        }
        let time = ctx.time(env.time);
        let invocation_id = ctx.open_invocation(session.as_deref(), &[&id]);
        let mut call = Call::new(
            invocation_id,
            tool_id(env.server.as_deref(), name),
            session.clone(),
            time,
        );
        call.native_call_id = Some(id.clone());
        let mut mapping = fields! {
            "source" => SYSTEM,
            "method" => "tools/call",
            "tool_name" => name,
            "jsonrpc_request_id" => id.clone(),
            "mcp_session_id" => session.clone(),
            "server_id" => env.server.clone(),
            "mcp_protocol_version" => self.versions.get(&session_key).cloned(),
        };
        if let Some(meta) = params.get("_meta") {
            mapping.insert("_meta".into(), meta.clone());
        }
        call.external_mappings.push(Value::Object(mapping));
        call.fields.insert(
            "model_input".into(),
            params.get("arguments").cloned().unwrap_or_else(|| json!({})),
        );
        let events = call.planned_and_started(ctx, time);
        if let Some(token) = params["_meta"].get("progressToken").and_then(id_text) {
            self.progress
                .insert((session_key.clone(), token), (id.clone(), 0));
        }
        self.calls.insert((session_key, id), call);
        Ok(Mapped {
            events,
            notes: Vec::new(),
        })
    }

    fn response(
        &mut self,
        ctx: &mut Ctx,
        env: &Envelope<'_>,
        session: Option<String>,
        id: String,
    ) -> Result<Mapped> {
        let key = (session.clone().unwrap_or_default(), id.clone());
        let message = env.message;
        if let Some(call) = self.calls.remove(&key) {
            self.progress
                .retain(|(s, _), (i, _)| !(*s == key.0 && *i == key.1));
            let time = ctx.time(env.time);
            let events = if let Some(error) = message.get("error") {
                let code = error.get("code").and_then(Value::as_i64);
                let class = if code == Some(-32602) {
                    "invalid_arguments"
                } else {
                    "execution_failed"
                };
                let mut tool_error = tool_error(
                    class,
                    code.map(|c| format!("jsonrpc:{c}")),
                    error.get("message").and_then(Value::as_str).map(str::to_owned),
                );
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
            } else if let Some(result) = message.get("result") {
                let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
                let content = result.get("content").filter(|c| c.is_array()).cloned();
                let mut outcome = fields! {
                    "content" => content.clone(),
                    "structured_content" => result.get("structuredContent").cloned(),
                    "_meta" => result.get("_meta").cloned(),
                };
                outcome.insert(
                    "external_mapping".into(),
                    json!({ "source": SYSTEM, "jsonrpc_request_id": id, "isError": is_error }),
                );
                if is_error {
                    let message = content
                        .as_ref()
                        .and_then(|c| c.get(0))
                        .and_then(|b| b.get("text"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    let mut error = tool_error("execution_failed", Some("mcp:isError".into()), message);
                    error.insert("native_error_ref".into(), json!({ "isError": true }));
                    call.failed(ctx, time, Value::Object(error), Some(outcome))
                } else {
                    call.succeeded(ctx, time, outcome)
                }
            } else {
                return Err(malformed(format!("response {id} has neither result nor error")));
            };
            return Ok(Mapped {
                events,
                notes: Vec::new(),
            });
        }
        let tools = message["result"]["tools"].as_array();
        if self.lists.remove(&key).is_some() || tools.is_some() {
            let tools =
                tools.ok_or_else(|| malformed(format!("tools/list response {id} has no result.tools")))?;
            return self.declarations(ctx, env, session, tools);
        }
        if message["result"]["protocolVersion"].is_string() {
            if let Some(version) = message["result"]["protocolVersion"].as_str() {
                self.versions.insert(key.0, version.to_owned());
            }
            return Ok(Mapped::default());
        }
        Err(Error::Unmatched {
            system: SYSTEM,
            reason: format!("response {id} answers no tools/call or tools/list request of this session"),
        })
    }

    fn declarations(
        &mut self,
        ctx: &mut Ctx,
        env: &Envelope<'_>,
        session: Option<String>,
        tools: &[Value],
    ) -> Result<Mapped> {
        let time = ctx.time(env.time);
        let mut events = Vec::new();
        for (i, tool) in tools.iter().enumerate() {
            let name = tool["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| malformed(format!("tools/list result: tools[{i}] has no name")))?;
            let tool_id = tool_id(env.server.as_deref(), name);
            let mut input_contract = Map::new();
            if let Some(schema) = tool.get("inputSchema") {
                input_contract.insert("model_input_schema".into(), schema.clone());
            }
            let output_contract = tool
                .get("outputSchema")
                .map(|schema| json!({ "output_schema": schema }));
            let data = declaration(
                &tool_id,
                env.server.as_deref().unwrap_or(SYSTEM),
                name,
                tool["description"].as_str().unwrap_or(""),
                "mcp_tool",
                fields! {
                    "title" => tool.get("title").cloned(),
                    "input_contract" => Value::Object(input_contract),
                    "output_contract" => output_contract,
                    "annotations" => tool.get("annotations").filter(|a| a.is_object()).cloned(),
                    "external_mappings" => json!([fields! {
                        "source" => SYSTEM,
                        "server_id" => env.server.clone(),
                        "tool_name" => name,
                        "method" => "tools/call",
                        "mcp_session_id" => session.clone(),
                        "_meta" => tool.get("_meta").cloned(),
                    }]),
                },
            );
            events.push(ctx.event(
                EventClass::ToolDeclared,
                &tool_id,
                session.as_deref(),
                time,
                data,
                "",
            ));
        }
        Ok(Mapped {
            events,
            notes: Vec::new(),
        })
    }

    fn cancelled(&mut self, ctx: &mut Ctx, env: &Envelope<'_>, session: Option<String>) -> Result<Mapped> {
        let params = &env.message["params"];
        let id = params
            .get("requestId")
            .and_then(id_text)
            .ok_or_else(|| malformed("notifications/cancelled without params.requestId"))?;
        let session_key = session.unwrap_or_default();
        self.progress
            .retain(|(s, _), (i, _)| !(*s == session_key && *i == id));
        let call = self
            .calls
            .remove(&(session_key, id.clone()))
            .ok_or_else(|| Error::Unmatched {
                system: SYSTEM,
                reason: format!("notifications/cancelled names request {id}, which is not open"),
            })?;
        let time = ctx.time(env.time);
        let mut extra = fields! { "ended_at" => rfc3339(time) };
        extra.insert(
            "error".into(),
            Value::Object(tool_error(
                "canceled",
                None,
                params.get("reason").and_then(Value::as_str).map(str::to_owned),
            )),
        );
        Ok(Mapped {
            events: vec![call.event(ctx, EventClass::InvocationCanceled, "canceled", time, extra)],
            notes: Vec::new(),
        })
    }
}

impl McpMapper {
    /// `notifications/progress {progressToken, progress, total?, message?}` for an open call that
    /// asked for progress with that token.
    fn progressed(&mut self, ctx: &mut Ctx, env: &Envelope<'_>, session: Option<String>) -> Result<Mapped> {
        let params = &env.message["params"];
        let token = params
            .get("progressToken")
            .and_then(id_text)
            .ok_or_else(|| malformed("notifications/progress without params.progressToken"))?;
        let session_key = session.unwrap_or_default();
        let unmatched = || Error::Unmatched {
            system: SYSTEM,
            reason: format!("notifications/progress names token {token}, which no open tools/call uses"),
        };
        let (id, count) = self
            .progress
            .get_mut(&(session_key.clone(), token.clone()))
            .ok_or_else(unmatched)?;
        let call = self.calls.get(&(session_key, id.clone())).ok_or_else(unmatched)?;
        *count += 1;
        let sequence = *count;
        let time = ctx.time(env.time);
        let percent = match (params["progress"].as_f64(), params["total"].as_f64()) {
            (Some(done), Some(total)) if total > 0.0 => Some(json!(done / total * 100.0)),
            _ => None,
        };
        let mut data = fields! {
            "schema_version" => crate::event::SCHEMA_VERSION,
            "progress_id" => format!("prg-{}", crate::event::digest(&[&call.invocation_id, &sequence.to_string()], 24)),
            "invocation_id" => call.invocation_id.clone(),
            "tool_id" => call.tool_id.clone(),
            "status" => "running",
            "message" => params.get("message").and_then(Value::as_str),
            "percent" => percent,
            "timestamp" => rfc3339(time),
            "external_mapping" => json!({ "source": SYSTEM, "progressToken": token,
                "progress": params.get("progress"), "total": params.get("total") }),
        };
        data.insert("sequence".into(), json!(sequence));
        Ok(Mapped {
            events: vec![ctx.event(
                EventClass::InvocationProgress,
                &call.invocation_id,
                call.session.as_deref(),
                time,
                Value::Object(data),
                &sequence.to_string(),
            )],
            notes: Vec::new(),
        })
    }
}

fn tool_id(server: Option<&str>, name: &str) -> String {
    match server {
        Some(server) => format!("mcp:{server}:{name}"),
        None => format!("mcp:{name}"),
    }
}
