//! OpenTelemetry tool-call spans (what `toolledger otlp` receives) mapped to Agent Tool events.
//!
//! Three span vocabularies describe a tool call; a span is a tool call when it carries one of them:
//!
//! ```text
//! GenAI semantic conventions  gen_ai.operation.name = execute_tool   gen_ai.tool.{name,call.id,type,
//!                                                                    description,call.arguments,call.result}
//! MCP semantic conventions    mcp.method.name = tools/call           mcp.session.id, jsonrpc.request.id
//! OpenInference               openinference.span.kind = TOOL         tool.name, tool.description,
//!                                                                    input.value, output.value
//! ```
//!
//! Every other span is ignored (and counted). Nested tool spans of one call (an agent's
//! `execute_tool` span, the MCP client span inside it, the MCP server span inside that) are one
//! invocation: [`map_spans`] groups a request's tool spans under their outermost tool ancestor, and
//! [`Recent`] remembers the tool spans of earlier requests, so a group whose ancestor or descendant
//! already became an invocation is merged into it rather than made a second one. A group becomes:
//!
//! ```text
//! tool name/type/description ─▶ tool.declared        (fn:<name>, mcp:<name>, otel:<type>:<name>)
//! span start                 ─▶ planned, started     (arguments ─▶ model_input and call_input)
//! span end, status OK/unset  ─▶ succeeded, result    (result ─▶ content, or structured_content)
//! span end, status ERROR     ─▶ failed (+ result)    (error.type ─▶ error_class, status message)
//! error.type canceled/…      ─▶ canceled
//! ```
//!
//! Ids are digests of the trace and the outermost span, and events' ids digests of their class and
//! invocation, so the same span sent again yields identical events, which ingest drops as duplicates:
//! OTLP retries are idempotent. The session is `gen_ai.conversation.id`, else `session.id`, else the
//! MCP session, else `otel-<trace id>` (every span of one trace). Native ids are kept: the call id as
//! `native_call_id` (else the JSON-RPC request id), and `external_mappings` with the trace and span
//! ids (`otel`), the MCP request and session ids (`mcp`), the GenAI call and conversation ids
//! (`gen_ai`). The W3C trace context of the outermost span is the events' `traceparent`.
//! `docs/otlp.md` has the table.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Map, Value, json};
use toolledger_schemas::EventClass;

use crate::Options;
use crate::event::{Call, Ctx, declaration, digest, fields, rfc3339, text_content, tool_error};

const SYSTEM: &str = "otlp";

/// A span's kind (OTLP `Span.SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpanKind {
    /// Unspecified or internal.
    #[default]
    Internal,
    /// Server side of a remote call.
    Server,
    /// Client side of a remote call.
    Client,
    /// Producer or consumer of a message.
    Messaging,
}

/// A span's status (OTLP `Status`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SpanStatus {
    /// Unset.
    #[default]
    Unset,
    /// OK.
    Ok,
    /// Error, with the status message (possibly empty).
    Error(String),
}

/// One span, as the receiver decoded it from OTLP: ids in lowercase hex, times in Unix nanoseconds,
/// attributes (the resource's and the span's; the span's win) as JSON values.
#[derive(Debug, Clone, Default)]
pub struct Span {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; `None` for a root span.
    pub parent_span_id: Option<String>,
    /// The W3C trace flags (sampled = 1).
    pub trace_flags: u8,
    /// The span name.
    pub name: String,
    /// The kind.
    pub kind: SpanKind,
    /// Start, Unix nanoseconds.
    pub start_unix_nanos: u64,
    /// End, Unix nanoseconds.
    pub end_unix_nanos: u64,
    /// The span's attributes.
    pub attributes: Map<String, Value>,
    /// The resource's `service.name`, when given.
    pub service_name: Option<String>,
    /// The status.
    pub status: SpanStatus,
    /// `exception` events' `exception.type` and `exception.message`, in order.
    pub exceptions: Vec<(Option<String>, Option<String>)>,
}

/// Which vocabulary made a span a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vocabulary {
    GenAi,
    Mcp,
    OpenInference,
}

impl Span {
    fn str(&self, key: &str) -> Option<&str> {
        self.attributes
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// A scalar attribute as text (`jsonrpc.request.id` may be an int).
    fn text(&self, key: &str) -> Option<String> {
        match self.attributes.get(key)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    fn vocabulary(&self) -> Option<Vocabulary> {
        if self.str("gen_ai.operation.name") == Some("execute_tool") {
            Some(Vocabulary::GenAi)
        } else if self.str("mcp.method.name") == Some("tools/call") {
            Some(Vocabulary::Mcp)
        } else if self
            .str("openinference.span.kind")
            .is_some_and(|k| k.eq_ignore_ascii_case("TOOL"))
        {
            Some(Vocabulary::OpenInference)
        } else {
            None
        }
    }

    fn key(&self) -> (String, String) {
        (self.trace_id.clone(), self.span_id.clone())
    }

    fn tool_name(&self, vocabulary: Vocabulary) -> Option<String> {
        let named = self
            .str("gen_ai.tool.name")
            .or_else(|| self.str("tool.name"))
            .or_else(|| self.str("mcp.tool.name"));
        if let Some(name) = named {
            return Some(name.to_owned());
        }
        // The conventions' span names: `execute_tool {name}`, `tools/call {name}`.
        let prefix = match vocabulary {
            Vocabulary::GenAi => "execute_tool ",
            Vocabulary::Mcp => "tools/call ",
            Vocabulary::OpenInference => "",
        };
        self.name
            .strip_prefix(prefix)
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != "tools/call" && *n != "execute_tool")
            .map(str::to_owned)
    }
}

/// What became of a request's spans.
#[derive(Debug, Default)]
pub struct SpanBatch {
    /// Structured CloudEvents to publish, in order.
    pub events: Vec<Value>,
    /// Tool-call spans that became a new invocation (one per group).
    pub invocations: usize,
    /// Tool-call spans folded into an invocation another span of the call made.
    pub merged: usize,
    /// Spans that are not tool calls.
    pub ignored: usize,
    /// `(span id, reason)` for tool-call spans that could not be mapped.
    pub rejected: Vec<(String, String)>,
    /// Server-side tool spans held for their caller (see [`map_spans`]).
    pub held: Vec<Span>,
    /// What [`Recent::record`] remembers once the events are safely published: (trace, span id)
    /// of a tool span, or of a tool span's parent outside the request (`true`), → its invocation.
    remember: Vec<((String, String), String, bool)>,
}

/// The tool spans of recent requests, per tenant: span → the invocation its call became, and a
/// span's parent → the invocation of its call (so a parent that arrives after its child joins it).
/// Bounded: the oldest entries go first.
#[derive(Debug)]
pub struct Recent {
    capacity: usize,
    spans: HashMap<(String, String), String>,
    parents: HashMap<(String, String), String>,
    order: VecDeque<((String, String), bool)>,
    /// Server-side tool spans waiting for their caller, by (trace, parent span id), with the Unix
    /// milliseconds they were first held.
    held: HashMap<(String, String), Vec<(Span, i64)>>,
}

impl Recent {
    /// Remembers up to `capacity` spans and as many parents.
    pub fn new(capacity: usize) -> Recent {
        Recent {
            capacity: capacity.max(1),
            spans: HashMap::new(),
            parents: HashMap::new(),
            order: VecDeque::new(),
            held: HashMap::new(),
        }
    }

    fn remember(&mut self, key: (String, String), invocation: &str, parent: bool) {
        let map = if parent {
            &mut self.parents
        } else {
            &mut self.spans
        };
        if map.insert(key.clone(), invocation.to_owned()).is_none() {
            self.order.push_back((key, parent));
        }
        while self.order.len() > 2 * self.capacity {
            if let Some((old, parent)) = self.order.pop_front() {
                if parent {
                    self.parents.remove(&old);
                } else {
                    self.spans.remove(&old);
                }
            }
        }
    }

    /// Remembers the tool spans of `batch`, once its events are published (not before: a batch
    /// whose publish failed is sent again, and must map the same way).
    /// `now_ms` (Unix milliseconds) starts the grace of the spans it held.
    pub fn record(&mut self, batch: &SpanBatch, now_ms: i64) {
        for (key, invocation, parent) in &batch.remember {
            self.remember(key.clone(), invocation, *parent);
        }
        let mapped: HashSet<&(String, String)> = batch
            .remember
            .iter()
            .filter(|(_, _, parent)| !parent)
            .map(|(key, _, _)| key)
            .collect();
        self.held.retain(|_, spans| {
            spans.retain(|(span, _)| !mapped.contains(&span.key()));
            !spans.is_empty()
        });
        for span in &batch.held {
            let Some(parent) = span.parent_span_id.clone() else {
                continue;
            };
            let waiting = self.held.entry((span.trace_id.clone(), parent)).or_default();
            if !waiting.iter().any(|(s, _)| s.key() == span.key()) {
                waiting.push((span.clone(), now_ms));
            }
        }
    }

    /// The held spans whose caller has not come within `grace_ms` of `now_ms` (all of them when
    /// `grace_ms` is 0): map them with [`Hold::Nothing`], publish, and [`Recent::record`].
    pub fn expired(&self, now_ms: i64, grace_ms: i64) -> Vec<Span> {
        self.held
            .values()
            .flatten()
            .filter(|(_, at)| grace_ms == 0 || now_ms - at >= grace_ms)
            .map(|(span, _)| span.clone())
            .collect()
    }

    /// How many server spans wait for their caller.
    pub fn held(&self) -> usize {
        self.held.values().map(Vec::len).sum()
    }

    /// How many spans and parents are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// Whether [`map_spans`] may hold a server-side tool span back for its caller's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// A server-side tool span whose caller is not known yet is held (see [`Recent::held`]).
    Servers,
    /// Every span is mapped now: held spans whose grace ran out, or a receiver shutting down.
    Nothing,
}

/// Maps one request's spans for `options.tenant`, grouping nested tool spans into one invocation
/// each and consulting `recent` (the caller [`Recent::record`]s the batch once it is published).
/// Every event is checked by the project's validator; a group with an invalid event is rejected
/// whole.
///
/// A server-side tool span (kind SERVER) whose parent is in another process is the callee's view
/// of a call its caller reports: under [`Hold::Servers`] it is held rather than mapped, and joins
/// its caller's group when that arrives; a held span whose caller never comes is mapped on its
/// own once the caller had its grace ([`Recent::expired`]).
pub fn map_spans(options: &Options, spans: &[Span], recent: &Recent, hold: Hold) -> SpanBatch {
    let mut batch = SpanBatch::default();
    let mut seen = HashSet::new();
    let mut all: Vec<&Span> = spans.iter().filter(|s| seen.insert(s.key())).collect();
    // Held server spans whose caller is in this request join it.
    let mut absorbed = Vec::new();
    for span in &all {
        if let Some(held) = recent.held.get(&span.key()) {
            absorbed.extend(held.iter().map(|(span, _)| span));
        }
    }
    all.extend(absorbed.into_iter().filter(|s| seen.insert(s.key())));
    let by_key: HashMap<(String, String), &Span> = all.iter().map(|s| (s.key(), *s)).collect();

    // Each tool span's outermost tool ancestor within the request (itself when it has none), with
    // its depth below it.
    let mut groups: Vec<(&Span, Vec<(usize, &Span)>)> = Vec::new();
    let mut group_of: HashMap<(String, String), usize> = HashMap::new();
    let mut members: Vec<(&Span, &Span, usize)> = Vec::new();
    for span in &all {
        if span.vocabulary().is_none() {
            batch.ignored += 1;
            continue;
        }
        let ancestors = ancestors(span, &by_key);
        let (depth, root) = ancestors
            .iter()
            .enumerate()
            .filter(|(_, a)| a.vocabulary().is_some())
            .map(|(i, a)| (i + 1, *a))
            .next_back()
            .unwrap_or((0, *span));
        let remote_parent = span
            .parent_span_id
            .as_ref()
            .filter(|p| !by_key.contains_key(&(span.trace_id.clone(), (*p).clone())));
        if hold == Hold::Servers
            && depth == 0
            && span.kind == SpanKind::Server
            && let Some(parent) = remote_parent
            && !recent
                .spans
                .contains_key(&(span.trace_id.clone(), parent.clone()))
        {
            batch.held.push((*span).clone());
            continue;
        }
        members.push((span, root, depth));
    }
    for (span, root, depth) in members {
        let index = *group_of.entry(root.key()).or_insert_with(|| {
            groups.push((root, Vec::new()));
            groups.len() - 1
        });
        groups[index].1.push((depth, span));
    }

    let mut ctx = Ctx::new(SYSTEM, options);
    for (root, mut group) in groups {
        group.sort_by_key(|(depth, span)| (*depth, span.start_unix_nanos));
        let known = group.iter().find_map(|(_, span)| {
            let own = recent.spans.get(&span.key());
            let parent = span
                .parent_span_id
                .as_ref()
                .and_then(|p| recent.spans.get(&(span.trace_id.clone(), p.clone())));
            let child = recent.parents.get(&span.key());
            own.or(parent).or(child).cloned()
        });
        let context = Context::of(root, &group, &all, &by_key);
        let invocation = match known {
            Some(invocation) => {
                batch.merged += group.len();
                invocation
            }
            None => match map_group(&mut ctx, root, &group, &context) {
                Ok((invocation, events)) => {
                    batch.invocations += 1;
                    batch.merged += group.len() - 1;
                    batch.events.extend(events);
                    invocation
                }
                Err(reason) => {
                    batch.rejected.push((root.span_id.clone(), reason));
                    continue;
                }
            },
        };
        for (_, span) in &group {
            batch.remember.push((span.key(), invocation.clone(), false));
            if let Some(parent) = &span.parent_span_id
                && !by_key.contains_key(&(span.trace_id.clone(), parent.clone()))
            {
                batch
                    .remember
                    .push(((span.trace_id.clone(), parent.clone()), invocation.clone(), true));
            }
        }
    }
    batch
}

/// `span`'s ancestors within the request, nearest first (a cycle of made-up ids stops the walk).
fn ancestors<'a>(span: &Span, by_key: &HashMap<(String, String), &'a Span>) -> Vec<&'a Span> {
    let mut out = Vec::new();
    let mut cursor = span.parent_span_id.clone();
    while let Some(parent) = cursor {
        let Some(next) = by_key.get(&(span.trace_id.clone(), parent)) else {
            break;
        };
        if out.len() >= by_key.len() {
            break;
        }
        out.push(*next);
        cursor = next.parent_span_id.clone();
    }
    out
}

/// What a group learns from the spans around it in the request: the conversation its ancestors
/// name, and the call id a sibling LLM span gave the call (OpenInference puts `tool_call.id` on
/// the model's span, not on the tool's).
#[derive(Debug, Default)]
struct Context {
    conversation: Option<String>,
    session: Option<String>,
    call_id: Option<String>,
}

impl Context {
    fn of(
        root: &Span,
        group: &[(usize, &Span)],
        all: &[&Span],
        by_key: &HashMap<(String, String), &Span>,
    ) -> Context {
        let ancestors = ancestors(root, by_key);
        let conversation = ancestors
            .iter()
            .find_map(|a| a.str("gen_ai.conversation.id").map(str::to_owned));
        let session = ancestors
            .iter()
            .find_map(|a| a.str("session.id").map(str::to_owned));
        let call_id = group.iter().find_map(|(_, span)| {
            if span.vocabulary() != Some(Vocabulary::OpenInference)
                || span.text("gen_ai.tool.call.id").is_some()
            {
                return None;
            }
            let name = span.tool_name(Vocabulary::OpenInference)?;
            let arguments = json_attribute(span, &["input.value"]);
            all.iter()
                .filter(|other| other.trace_id == span.trace_id)
                .flat_map(|other| model_tool_calls(other))
                .find(|(_, called, args)| *called == name && (arguments.is_none() || *args == arguments))
                .map(|(id, _, _)| id)
        });
        Context {
            conversation,
            session,
            call_id,
        }
    }
}

/// The tool calls an OpenInference LLM span's output messages made: (call id, function name,
/// parsed arguments).
fn model_tool_calls(span: &Span) -> Vec<(String, String, Option<Value>)> {
    const PREFIX: &str = "llm.output_messages.";
    const ID: &str = ".tool_call.id";
    span.attributes
        .iter()
        .filter_map(|(key, value)| {
            let stem = key.strip_prefix(PREFIX)?.strip_suffix(ID)?;
            let id = value.as_str().filter(|v| !v.is_empty())?.to_owned();
            let at = |field: &str| format!("{PREFIX}{stem}.tool_call.function.{field}");
            let name = span.str(&at("name"))?.to_owned();
            let arguments = json_attribute(span, &[&at("arguments")]);
            Some((id, name, arguments))
        })
        .collect()
}

/// The first value any member (outermost first) gives.
fn first<T>(group: &[(usize, &Span)], get: impl Fn(&Span) -> Option<T>) -> Option<T> {
    group.iter().find_map(|(_, span)| get(span))
}

/// A JSON-carrying attribute (arguments, results): the parsed JSON when the text is JSON, else the
/// text itself.
fn json_attribute(span: &Span, keys: &[&str]) -> Option<Value> {
    keys.iter().find_map(|key| match span.attributes.get(*key)? {
        Value::String(text) if text.is_empty() => None,
        Value::String(text) => Some(serde_json::from_str(text).unwrap_or_else(|_| json!(text))),
        Value::Null => None,
        other => Some(other.clone()),
    })
}

const ARGUMENT_KEYS: [&str; 3] = [
    "gen_ai.tool.call.arguments",
    "mcp.request.argument",
    "input.value",
];
const RESULT_KEYS: [&str; 2] = ["gen_ai.tool.call.result", "output.value"];

/// `error.type` values that say the call was canceled rather than failed.
fn is_cancel(error_type: &str) -> bool {
    let last = error_type.rsplit(['.', ':']).next().unwrap_or(error_type);
    matches!(
        last.to_ascii_lowercase().as_str(),
        "canceled" | "cancelled" | "cancellederror" | "canceledexception" | "cancellationexception"
    )
}

/// The Agent Tool `error_class` an `error.type` (an exception class, an error code) names: a
/// timeout, a denied permission, a rate limit or an unreachable dependency by name; any other
/// error is the tool's own failure.
fn error_class(error_type: &str) -> &'static str {
    let lower = error_type.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if has(&["timeout", "timedout", "deadline"]) {
        "timeout"
    } else if has(&["permission", "forbidden", "unauthorized", "accessdenied"]) {
        "permission_denied"
    } else if has(&["ratelimit", "rate_limit", "toomanyrequests", "429"]) {
        "rate_limited"
    } else if has(&["connection", "unavailable", "network", "dns"]) {
        "dependency_unavailable"
    } else {
        "execution_failed"
    }
}

fn millis(nanos: u64) -> i64 {
    i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX)
}

/// One group's events: the invocation id and its events, validated.
fn map_group(
    ctx: &mut Ctx,
    root: &Span,
    group: &[(usize, &Span)],
    context: &Context,
) -> Result<(String, Vec<Value>), String> {
    let vocabulary = root.vocabulary().unwrap_or(Vocabulary::GenAi);
    let name =
        first(group, |s| s.vocabulary().and_then(|v| s.tool_name(v))).unwrap_or_else(|| "unknown".to_owned());
    let tool_type = first(group, |s| s.str("gen_ai.tool.type").map(str::to_owned));
    let is_mcp = group
        .iter()
        .any(|(_, s)| s.str("mcp.method.name") == Some("tools/call"));
    let (tool_id, tool_kind) = match (vocabulary, tool_type.as_deref()) {
        // An MCP tools/call anywhere in the call makes it an MCP tool, whatever the outer span says.
        _ if is_mcp => (format!("mcp:{name}"), "mcp_tool".to_owned()),
        (_, None | Some("function")) => (format!("fn:{name}"), "function".to_owned()),
        (_, Some(other)) => (format!("otel:{other}:{name}"), other.to_owned()),
    };
    let description = first(group, |s| {
        s.str("gen_ai.tool.description")
            .or_else(|| s.str("tool.description"))
            .map(str::to_owned)
    });
    let conversation = first(group, |s| s.str("gen_ai.conversation.id").map(str::to_owned))
        .or_else(|| context.conversation.clone());
    let mcp_session = first(group, |s| s.text("mcp.session.id"));
    let session = conversation
        .clone()
        .or_else(|| first(group, |s| s.str("session.id").map(str::to_owned)))
        .or_else(|| context.session.clone())
        .or_else(|| mcp_session.clone())
        .unwrap_or_else(|| format!("otel-{}", root.trace_id));
    let call_id = first(group, |s| s.text("gen_ai.tool.call.id")).or_else(|| context.call_id.clone());
    let request_id = first(group, |s| s.text("jsonrpc.request.id"));
    let arguments = first(group, |s| json_attribute(s, &ARGUMENT_KEYS));
    let result = first(group, |s| json_attribute(s, &RESULT_KEYS));

    let start = group.iter().map(|(_, s)| s.start_unix_nanos).min().unwrap_or(0);
    let end = root.end_unix_nanos.max(start);
    let (start_ms, end_ms) = (ctx.time(Some(millis(start))), ctx.time(Some(millis(end))));

    let invocation_id = ctx.open_invocation(Some(&session), &[&root.trace_id, &root.span_id]);
    let mut call = Call::new(invocation_id.clone(), tool_id.clone(), Some(session), start_ms);
    call.native_call_id = call_id.clone().or_else(|| request_id.clone());
    let mut mappings = vec![Value::Object(fields! {
        "source" => "otel",
        "trace_id" => root.trace_id.as_str(),
        "span_id" => root.span_id.as_str(),
        "parent_span_id" => root.parent_span_id.as_deref(),
        "service_name" => root.service_name.as_deref(),
    })];
    for (_, span) in group.iter().skip(1) {
        mappings.push(Value::Object(fields! {
            "source" => "otel",
            "span_id" => span.span_id.as_str(),
            "service_name" => span.service_name.as_deref(),
        }));
    }
    if call_id.is_some() || conversation.is_some() {
        mappings.push(Value::Object(fields! {
            "source" => "gen_ai",
            "tool_call_id" => call_id.as_deref(),
            "conversation_id" => conversation.as_deref(),
        }));
    }
    if is_mcp {
        mappings.push(Value::Object(fields! {
            "source" => "mcp",
            "jsonrpc_request_id" => request_id.as_deref(),
            "mcp_session_id" => mcp_session.as_deref(),
            "tool_name" => name.as_str(),
            "method" => "tools/call",
        }));
    }
    call.external_mappings = mappings;
    if let Some(arguments) = &arguments {
        call.fields.insert("model_input".into(), arguments.clone());
    }

    let mut events = Vec::new();
    let decl = fields! {
        "external_mappings" => json!([fields! {
            "source" => "otel",
            "tool_name" => name.as_str(),
            "tool_type" => tool_type.as_deref(),
        }]),
    };
    let declared = declaration(
        &tool_id,
        SYSTEM,
        &name,
        description.as_deref().unwrap_or(""),
        &tool_kind,
        decl,
    );
    // A declaration differs between spans that describe the tool differently; its content is in
    // its id, so each version is its own event rather than a conflicting repeat. Every call of the
    // tool declares it again, so the event carries nothing of the call (no time, no trace context):
    // each repeat is identical, a duplicate ingest drops, not a conflict it quarantines.
    let version = digest(&[&declared.to_string()], 16);
    events.push(ctx.event(
        EventClass::ToolDeclared,
        &tool_id,
        None,
        start_ms,
        declared,
        &version,
    ));
    events.extend(call.planned_and_started(ctx, start_ms));

    let error_type = first(group, |s| s.str("error.type").map(str::to_owned));
    let status_error = group.iter().find_map(|(_, s)| match &s.status {
        SpanStatus::Error(message) => Some(message.clone()),
        _ => None,
    });
    let exception = first(group, |s| s.exceptions.first().cloned());
    let message = status_error
        .clone()
        .filter(|m| !m.is_empty())
        .or_else(|| exception.as_ref().and_then(|(_, m)| m.clone()));
    let result_fields = result.map(|value| match value {
        Value::String(text) => fields! { "content" => text_content(&text) },
        other => fields! { "structured_content" => other },
    });
    if error_type.as_deref().is_some_and(is_cancel) {
        let mut extra = fields! { "ended_at" => rfc3339(end_ms) };
        extra.insert(
            "error".into(),
            Value::Object(tool_error("canceled", error_type.clone(), message)),
        );
        events.push(call.event(ctx, EventClass::InvocationCanceled, "canceled", end_ms, extra));
    } else if status_error.is_some() || error_type.is_some() {
        let code = error_type.clone().or_else(|| exception.and_then(|(t, _)| t));
        let class = code.as_deref().map_or("execution_failed", error_class);
        let error = Value::Object(tool_error(class, code, message));
        events.extend(call.failed(ctx, end_ms, error, result_fields));
    } else {
        events.extend(call.succeeded(ctx, end_ms, result_fields.unwrap_or_default()));
    }

    let traceparent = format!("00-{}-{}-{:02x}", root.trace_id, root.span_id, root.trace_flags);
    if let Some(declared) = events[0].as_object_mut() {
        declared.remove("time");
    }
    for event in &mut events {
        if event["type"] != EventClass::ToolDeclared.as_str() {
            event["traceparent"] = json!(traceparent);
        }
        if let Err(error) = toolledger_schemas::validate_event(event) {
            return Err(format!(
                "mapped {} event is invalid: {error}",
                event["type"].as_str().unwrap_or("?")
            ));
        }
    }
    Ok((invocation_id, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(span_id: &str, parent: Option<&str>, attributes: Value) -> Span {
        Span {
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            span_id: span_id.into(),
            parent_span_id: parent.map(str::to_owned),
            trace_flags: 1,
            name: "span".into(),
            start_unix_nanos: 1_700_000_000_000_000_000,
            end_unix_nanos: 1_700_000_000_250_000_000,
            attributes: attributes.as_object().cloned().unwrap_or_default(),
            ..Span::default()
        }
    }

    fn tool(span_id: &str, parent: Option<&str>) -> Span {
        span(
            span_id,
            parent,
            json!({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                   "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.arguments": "{\"q\":\"x\"}",
                   "gen_ai.tool.call.result": "found", "gen_ai.conversation.id": "conv-1"}),
        )
    }

    fn classes(batch: &SpanBatch) -> Vec<&str> {
        batch.events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn an_execute_tool_span_is_one_invocation_with_its_ids() {
        let batch = map_spans(
            &Options::new("acme"),
            &[tool("b7ad6b7169203331", None)],
            &Recent::new(8),
            Hold::Servers,
        );
        assert_eq!(
            classes(&batch),
            [
                "tool.declared",
                "tool.invocation.planned",
                "tool.invocation.started",
                "tool.invocation.succeeded",
                "tool.result.created"
            ]
        );
        let started = &batch.events[2];
        assert_eq!(started["data"]["native_call_id"], "call_1");
        assert_eq!(started["data"]["model_input"], json!({"q": "x"}));
        assert_eq!(started["sessionid"], "conv-1");
        assert_eq!(
            started["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(batch.events[4]["data"]["content"][0]["text"], "found");
    }

    #[test]
    fn a_tool_called_again_is_declared_identically() {
        let mut later = tool("c7ad6b7169203332", None);
        later.trace_id = "1af7651916cd43dd8448eb211c80319d".into();
        later.start_unix_nanos += 60_000_000_000;
        later.end_unix_nanos += 60_000_000_000;
        let first = map_spans(
            &Options::new("acme"),
            &[tool("b7ad6b7169203331", None)],
            &Recent::new(8),
            Hold::Servers,
        );
        let second = map_spans(&Options::new("acme"), &[later], &Recent::new(8), Hold::Servers);
        assert_eq!(first.events[0]["type"], "tool.declared");
        assert_eq!(first.events[0], second.events[0]);
    }

    #[test]
    fn the_same_span_again_gives_identical_events() {
        let spans = [tool("b7ad6b7169203331", None)];
        let a = map_spans(&Options::new("acme"), &spans, &Recent::new(8), Hold::Servers);
        let b = map_spans(&Options::new("acme"), &spans, &Recent::new(8), Hold::Servers);
        assert_eq!(a.events, b.events);
    }

    #[test]
    fn nested_tool_spans_are_one_invocation_in_either_order() {
        let outer = tool("1111111111111111", Some("ffffffffffffffff"));
        let mcp = span(
            "2222222222222222",
            Some("1111111111111111"),
            json!({"mcp.method.name": "tools/call", "jsonrpc.request.id": 7, "mcp.session.id": "s-1"}),
        );
        let together = map_spans(
            &Options::new("acme"),
            &[mcp.clone(), outer.clone()],
            &Recent::new(8),
            Hold::Servers,
        );
        assert_eq!((together.invocations, together.merged), (1, 1));
        let mappings = &together.events[1]["data"]["external_mappings"];
        assert!(
            mappings
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["jsonrpc_request_id"] == "7")
        );

        // The child first, in its own request, then the parent: the parent joins.
        let mut recent = Recent::new(8);
        let child = map_spans(&Options::new("acme"), &[mcp], &recent, Hold::Servers);
        let unpublished = map_spans(
            &Options::new("acme"),
            std::slice::from_ref(&outer),
            &recent,
            Hold::Servers,
        );
        assert_eq!(unpublished.invocations, 1, "only a published batch is remembered");
        recent.record(&child, 0);
        let parent = map_spans(&Options::new("acme"), &[outer], &recent, Hold::Servers);
        assert_eq!((child.invocations, parent.invocations, parent.merged), (1, 0, 1));
        assert!(parent.events.is_empty());
    }

    #[test]
    fn a_server_span_before_its_caller_is_held_then_joins_or_stands_alone() {
        let caller = tool("1111111111111111", None);
        let client = span(
            "2222222222222222",
            Some("1111111111111111"),
            json!({"mcp.method.name": "tools/call", "jsonrpc.request.id": "2"}),
        );
        let mut server = span(
            "3333333333333333",
            Some("2222222222222222"),
            json!({"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
                   "gen_ai.tool.name": "lookup"}),
        );
        server.kind = SpanKind::Server;
        server.service_name = Some("mcp-server".into());
        let options = Options::new("acme");
        let mut recent = Recent::new(8);

        let first = map_spans(&options, std::slice::from_ref(&server), &recent, Hold::Servers);
        assert_eq!((first.events.len(), first.held.len()), (0, 1));
        recent.record(&first, 1_000);
        assert_eq!(recent.held(), 1);
        assert!(recent.expired(5_000, 30_000).is_empty());

        let calls = map_spans(&options, &[caller, client], &recent, Hold::Servers);
        assert_eq!((calls.invocations, calls.merged), (1, 2), "the held span joined");
        assert!(calls.events[1].to_string().contains("mcp-server"));
        recent.record(&calls, 2_000);
        assert_eq!(recent.held(), 0);

        // A server span whose caller never comes stands alone once the grace is over.
        let mut orphan = server.clone();
        orphan.span_id = "4444444444444444".into();
        orphan.parent_span_id = Some("5555555555555555".into());
        let held = map_spans(&options, &[orphan], &recent, Hold::Servers);
        recent.record(&held, 3_000);
        let expired = recent.expired(40_000, 30_000);
        assert_eq!(expired.len(), 1);
        let alone = map_spans(&options, &expired, &recent, Hold::Nothing);
        assert_eq!(alone.invocations, 1);
        recent.record(&alone, 40_000);
        assert_eq!(recent.held(), 0);
    }

    #[test]
    fn errors_cancels_and_other_spans() {
        let mut failed = tool("3333333333333333", None);
        failed.status = SpanStatus::Error("boom".into());
        failed
            .attributes
            .insert("error.type".into(), json!("TimeoutError"));
        let mut canceled = tool("4444444444444444", None);
        canceled
            .attributes
            .insert("error.type".into(), json!("asyncio.CancelledError"));
        let chat = span("5555555555555555", None, json!({"gen_ai.operation.name": "chat"}));
        let batch = map_spans(
            &Options::new("acme"),
            &[failed, canceled, chat],
            &Recent::new(8),
            Hold::Servers,
        );
        assert_eq!(batch.ignored, 1);
        let types = classes(&batch);
        assert!(types.contains(&"tool.invocation.failed"));
        assert!(types.contains(&"tool.invocation.canceled"));
        let failed = batch
            .events
            .iter()
            .find(|e| e["type"] == "tool.invocation.failed")
            .unwrap();
        assert_eq!(failed["data"]["error"]["error_code"], "TimeoutError");
        assert_eq!(failed["data"]["error"]["error_class"], "timeout");
        assert_eq!(failed["data"]["error"]["message"], "boom");
    }
}
