//! What every mapper shares: deterministic ids, the clock, the CloudEvent envelope, and the
//! invocation and result snapshots.
//!
//! Ids are digests of the source system and the native ids, so importing the same file twice
//! produces the same events (same `id`, `source`, tenant, content) and JetStream and ingest
//! deduplicate them. Times come from the records when they have them; otherwise the clock hands out
//! times 1 ms apart from the start, never going back, so the ledger keeps the records' order.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolledger_schemas::EventClass;

use crate::Options;

/// The default `--start`: a fixed instant, so a re-import without `--start` publishes byte-identical
/// events (a different start would change their times and make ingest see a conflict, not a
/// duplicate).
pub const DEFAULT_START: &str = "2000-01-01T00:00:00Z";

/// The Agent Tool schema version every mapped object declares.
pub(crate) const SCHEMA_VERSION: &str = "0.2.0";

pub(crate) fn default_start_ms() -> i64 {
    parse_rfc3339(DEFAULT_START).unwrap_or(946_684_800_000)
}

/// Parses an RFC 3339 time to Unix milliseconds.
pub(crate) fn parse_rfc3339(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// A native timestamp: an RFC 3339 string, or a number of Unix seconds (below 10^11) or
/// milliseconds.
pub(crate) fn native_time(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::String(text) => parse_rfc3339(text),
        Value::Number(n) => {
            let v = n.as_f64()?;
            if !v.is_finite() || v < 0.0 {
                None
            } else if v < 1e11 {
                Some((v * 1000.0) as i64)
            } else {
                Some(v as i64)
            }
        }
        _ => None,
    }
}

/// Unix milliseconds as RFC 3339 with milliseconds, UTC.
pub(crate) fn rfc3339(ms: i64) -> String {
    toolledger_schemas::generator::rfc3339(ms)
}

/// Hex SHA-256 over length-prefixed parts, truncated to `len` hex digits.
pub(crate) fn digest(parts: &[&str], len: usize) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"toolledger.import.v1");
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let hex = toolledger_wire::entry::hex(&hasher.finalize());
    hex[..len.min(hex.len())].to_owned()
}

/// A JSON scalar as the text a native id lookup uses (`7`, `"call_1"` → `call_1`).
pub(crate) fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Per-file state every mapper uses.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// The source system (`mcp`, `otc`, …).
    pub system: &'static str,
    tenant: String,
    session: Option<String>,
    clock_ms: i64,
    /// How often each invocation key has been opened, so a native id reused later in a file (a
    /// JSON-RPC id after its call completed) gets its own invocation.
    occurrences: HashMap<String, usize>,
}

impl Ctx {
    pub fn new(system: &'static str, options: &Options) -> Ctx {
        Ctx {
            system,
            tenant: options.tenant.clone(),
            session: options.session.clone(),
            // The first tick lands on the start itself.
            clock_ms: options.start_ms - 1,
            occurrences: HashMap::new(),
        }
    }

    /// The session: the record's own when it has one, else the import's.
    pub fn session(&self, own: Option<&str>) -> Option<String> {
        own.filter(|s| !s.is_empty())
            .map(str::to_owned)
            .or_else(|| self.session.clone())
    }

    /// A time for an event: the record's own (`native`, Unix ms) when present, else 1 ms after the
    /// latest time handed out. The clock never goes back.
    pub fn time(&mut self, native: Option<i64>) -> i64 {
        match native {
            Some(ms) => {
                self.clock_ms = self.clock_ms.max(ms);
                ms
            }
            None => {
                self.clock_ms += 1;
                self.clock_ms
            }
        }
    }

    /// A new invocation id from the native ids that identify the call; the nth reuse of the same
    /// ids in this file gets a distinct id.
    pub fn open_invocation(&mut self, session: Option<&str>, native: &[&str]) -> String {
        let key = self.invocation_key(session, native);
        let n = self.occurrences.entry(key.clone()).or_insert(0);
        *n += 1;
        let occurrence = n.to_string();
        let id = if *n == 1 {
            digest(&[&key], 24)
        } else {
            digest(&[&key, &occurrence], 24)
        };
        format!("{}-{id}", self.system)
    }

    fn invocation_key(&self, session: Option<&str>, native: &[&str]) -> String {
        let mut parts = vec![self.system, session.unwrap_or("")];
        parts.extend_from_slice(native);
        digest(&parts, 64)
    }

    /// A structured CloudEvent; its id is a digest of the class, the subject and `discriminator`
    /// (empty unless one record yields several events of a class for a subject).
    pub fn event(
        &self,
        class: EventClass,
        subject: &str,
        session: Option<&str>,
        time_ms: i64,
        data: Value,
        discriminator: &str,
    ) -> Value {
        let id = format!(
            "imp-{}",
            digest(&[self.system, class.as_str(), subject, discriminator], 32)
        );
        let mut event = json!({
            "specversion": "1.0",
            "id": id,
            "source": format!("urn:toolledger:import:{}", self.system),
            "type": class.as_str(),
            "subject": subject,
            "time": rfc3339(time_ms),
            "datacontenttype": "application/json",
            "tenant": self.tenant,
            "data": data,
        });
        if let Some(session) = session {
            event["sessionid"] = json!(session);
        }
        match class {
            EventClass::ToolDeclared => event["toolid"] = json!(subject),
            _ => {
                if let Some(invocation) = event["data"]["invocation_id"].as_str().map(str::to_owned) {
                    event["invocationid"] = json!(invocation);
                }
                if let Some(tool) = event["data"]["tool_id"].as_str().map(str::to_owned) {
                    event["toolid"] = json!(tool);
                }
            }
        }
        event
    }
}

/// One native call, as every invocation event of it repeats: ids, the tool, native ids, inputs.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub invocation_id: String,
    pub tool_id: String,
    pub session: Option<String>,
    pub native_call_id: Option<String>,
    /// The `external_mappings` array: one object per native system, each with `source`.
    pub external_mappings: Vec<Value>,
    pub created_ms: i64,
    /// Further invocation fields (model_input, actor_ref, retry_of, attempt …).
    pub fields: Map<String, Value>,
}

impl Call {
    pub fn new(invocation_id: String, tool_id: String, session: Option<String>, created_ms: i64) -> Call {
        Call {
            invocation_id,
            tool_id,
            session,
            native_call_id: None,
            external_mappings: Vec::new(),
            created_ms,
            fields: Map::new(),
        }
    }

    /// The invocation snapshot for a state, with `extra` fields on top.
    pub fn snapshot(&self, status: &str, extra: Map<String, Value>) -> Value {
        let mut data = Map::new();
        data.insert("schema_version".into(), json!(SCHEMA_VERSION));
        data.insert("invocation_id".into(), json!(self.invocation_id));
        data.insert("tool_id".into(), json!(self.tool_id));
        data.insert("status".into(), json!(status));
        data.insert("created_at".into(), json!(rfc3339(self.created_ms)));
        if let Some(native) = &self.native_call_id {
            data.insert("native_call_id".into(), json!(native));
        }
        if let Some(session) = &self.session {
            data.insert("session_id".into(), json!(session));
        }
        if !self.external_mappings.is_empty() {
            data.insert(
                "external_mappings".into(),
                Value::Array(self.external_mappings.clone()),
            );
        }
        for (k, v) in &self.fields {
            data.insert(k.clone(), v.clone());
        }
        for (k, v) in extra {
            data.insert(k, v);
        }
        Value::Object(data)
    }

    /// An invocation event of `class` in `status`.
    pub fn event(
        &self,
        ctx: &Ctx,
        class: EventClass,
        status: &str,
        time_ms: i64,
        extra: Map<String, Value>,
    ) -> Value {
        self.event_again(ctx, class, status, time_ms, extra, "")
    }

    /// An invocation event of a class this invocation already had: `discriminator` keeps its id
    /// distinct.
    pub fn event_again(
        &self,
        ctx: &Ctx,
        class: EventClass,
        status: &str,
        time_ms: i64,
        extra: Map<String, Value>,
        discriminator: &str,
    ) -> Value {
        ctx.event(
            class,
            &self.invocation_id,
            self.session.as_deref(),
            time_ms,
            self.snapshot(status, extra),
            discriminator,
        )
    }

    /// `planned` then `started` (running) at `time_ms`, the shape of a call that was sent to its
    /// executor: the model's arguments are `model_input` and, unchanged, `call_input`.
    pub fn planned_and_started(&self, ctx: &Ctx, time_ms: i64) -> Vec<Value> {
        let mut started = Map::new();
        started.insert("started_at".into(), json!(rfc3339(time_ms)));
        if let Some(input) = self.fields.get("model_input") {
            started.insert("call_input".into(), input.clone());
        }
        vec![
            self.event(ctx, EventClass::InvocationPlanned, "planned", time_ms, Map::new()),
            self.event(ctx, EventClass::InvocationStarted, "running", time_ms, started),
        ]
    }

    /// `succeeded` and its `tool.result.created` at `time_ms`; `result` holds the result's own
    /// fields (content, structured_content, artifact_refs …).
    pub fn succeeded(&self, ctx: &Ctx, time_ms: i64, result: Map<String, Value>) -> Vec<Value> {
        let mut ended = Map::new();
        ended.insert("ended_at".into(), json!(rfc3339(time_ms)));
        vec![
            self.event(ctx, EventClass::InvocationSucceeded, "succeeded", time_ms, ended),
            self.result(ctx, time_ms, "succeeded", false, result),
        ]
    }

    /// `failed` with `error` (a tool_error) at `time_ms`, and a result carrying the error when
    /// `result` is given (what the model was shown).
    pub fn failed(
        &self,
        ctx: &Ctx,
        time_ms: i64,
        error: Value,
        result: Option<Map<String, Value>>,
    ) -> Vec<Value> {
        let mut ended = Map::new();
        ended.insert("ended_at".into(), json!(rfc3339(time_ms)));
        ended.insert("error".into(), error.clone());
        let mut events = vec![self.event(ctx, EventClass::InvocationFailed, "failed", time_ms, ended)];
        if let Some(mut fields) = result {
            fields.insert("error".into(), error);
            events.push(self.result(ctx, time_ms, "failed", true, fields));
        }
        events
    }

    /// A `tool.result.created` event.
    pub fn result(
        &self,
        ctx: &Ctx,
        time_ms: i64,
        status: &str,
        is_error: bool,
        fields: Map<String, Value>,
    ) -> Value {
        let mut data = Map::new();
        data.insert("schema_version".into(), json!(SCHEMA_VERSION));
        data.insert(
            "result_id".into(),
            json!(format!("res-{}", digest(&[&self.invocation_id], 24))),
        );
        data.insert("invocation_id".into(), json!(self.invocation_id));
        data.insert("tool_id".into(), json!(self.tool_id));
        data.insert("status".into(), json!(status));
        data.insert("is_error".into(), json!(is_error));
        data.insert("created_at".into(), json!(rfc3339(time_ms)));
        for (k, v) in fields {
            data.insert(k, v);
        }
        ctx.event(
            EventClass::ResultCreated,
            &self.invocation_id,
            self.session.as_deref(),
            time_ms,
            Value::Object(data),
            "",
        )
    }
}

/// A tool_error object.
pub(crate) fn tool_error(class: &str, code: Option<String>, message: Option<String>) -> Map<String, Value> {
    let mut error = Map::new();
    error.insert("error_class".into(), json!(class));
    if let Some(code) = code {
        error.insert("error_code".into(), json!(code));
    }
    if let Some(message) = message {
        error.insert("message".into(), json!(message));
    }
    error
}

/// A tool declaration's required fields plus `fields`.
pub(crate) fn declaration(
    tool_id: &str,
    namespace: &str,
    name: &str,
    description: &str,
    tool_kind: &str,
    fields: Map<String, Value>,
) -> Value {
    let mut data = Map::new();
    data.insert("schema_version".into(), json!(SCHEMA_VERSION));
    data.insert("tool_id".into(), json!(tool_id));
    data.insert("namespace".into(), json!(namespace));
    data.insert("name".into(), json!(name));
    data.insert("description".into(), json!(description));
    data.insert("lifecycle".into(), json!("available"));
    data.insert("tool_kind".into(), json!(tool_kind));
    for (k, v) in fields {
        data.insert(k, v);
    }
    Value::Object(data)
}

/// Text content blocks (`[{type: text, text}]`) from a string.
pub(crate) fn text_content(text: &str) -> Value {
    json!([{ "type": "text", "text": text }])
}

/// `map!{ "k" => v, … }`: a JSON object map, skipping `None`s when given `Option`s via [`opt`].
macro_rules! fields {
    ($($key:expr => $value:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut map = serde_json::Map::new();
        $( if let Some(v) = $crate::event::IntoField::into_field($value) { map.insert($key.to_owned(), v); } )*
        map
    }};
}
pub(crate) use fields;

/// A value for [`fields!`]: `None` is left out.
pub(crate) trait IntoField {
    fn into_field(self) -> Option<Value>;
}

impl IntoField for Value {
    fn into_field(self) -> Option<Value> {
        Some(self)
    }
}

impl IntoField for Option<Value> {
    fn into_field(self) -> Option<Value> {
        self
    }
}

impl IntoField for &str {
    fn into_field(self) -> Option<Value> {
        Some(Value::String(self.to_owned()))
    }
}

impl IntoField for String {
    fn into_field(self) -> Option<Value> {
        Some(Value::String(self))
    }
}

impl IntoField for Option<String> {
    fn into_field(self) -> Option<Value> {
        self.map(Value::String)
    }
}

impl IntoField for Option<&str> {
    fn into_field(self) -> Option<Value> {
        self.map(|s| Value::String(s.to_owned()))
    }
}

impl IntoField for bool {
    fn into_field(self) -> Option<Value> {
        Some(Value::Bool(self))
    }
}
