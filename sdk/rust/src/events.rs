//! Typed builders for the Agent Tool v0.2.0 event classes a producer emits (DESIGN.md §3).
//!
//! ```text
//! Tool ─▶ EventBuilder::tool_declared              (subject tool_id; input_contract.sensitive_fields)
//! Invocation snapshot ─▶ EventBuilder::invocation  (tool.invocation.<planned … timed_out>)
//! PermissionRequest / PermissionDecision ─▶ tool.permission.requested / .decided
//! Hook ─▶ tool.hook.<pre|post>.<started|completed>;  Progress ─▶ tool.invocation.progress
//! ToolResult ─▶ tool.result.created / .redacted, tool.invocation.partial_result
//! ```
//!
//! Every builder returns an [`Event`] (a structured CloudEvent) with the `tenant` extension,
//! `invocationid`, `toolid`, `sessionid` where they apply, and `traceparent`/`tracestate` when a
//! [`TraceContext`] was given.
//!
//! **Stable ids.** An event's `id` is a digest of the producer's `source`, the object it is about (the
//! invocation id; for a declaration the tool id and the declaration's content), the class and a
//! sequence ([`Stamp::seq`], 0 for the first event of a class for that object; progress counts up), computed
//! exactly as the Python SDK's `events.py` does, so the same event built by either SDK has the same id.
//! Built again for a retry, an event has the same id, so the ledger's dedupe (tenant, source, id) makes
//! retries duplicates. Building one event twice with different content makes a `duplicate_conflict`
//! quarantine receipt: bump the sequence for a genuinely new event.
//!
//! The data objects carry the official schemas' fields the SDK fills or a producer commonly sets, plus
//! the fields the ledger reads besides (`session_id`, `error`, `retry_of`, `attempt`,
//! `external_mappings`); anything else goes in each object's `extra` map, as the official schemas
//! allow unknown fields. Closed vocabularies of the schemas are enums ([`Behavior`], [`HookEvent`],
//! [`Lifecycle`]); open ones (`status`, `tool_kind`, `error_class`) are strings.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::wire::{self, hex};
use crate::{Error, Result};

/// The Agent Tool schema version every object declares.
pub const SCHEMA_VERSION: &str = "0.2.0";

/// A JSON object: the `extra` fields of every data object.
pub type Object = Map<String, Value>;

/// The classes that carry an invocation snapshot, with the status each reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InvocationClass {
    /// `tool.invocation.planned`
    Planned,
    /// `tool.invocation.selected`
    Selected,
    /// `tool.invocation.arguments_ready`
    ArgumentsReady,
    /// `tool.invocation.validation_failed` (terminal)
    ValidationFailed,
    /// `tool.invocation.queued`
    Queued,
    /// `tool.invocation.started` (status `running`)
    Started,
    /// `tool.invocation.yielded`
    Yielded,
    /// `tool.invocation.succeeded` (terminal)
    Succeeded,
    /// `tool.invocation.failed` (terminal)
    Failed,
    /// `tool.invocation.canceled` (terminal)
    Canceled,
    /// `tool.invocation.timed_out` (terminal)
    TimedOut,
}

impl InvocationClass {
    /// Every invocation class, in lifecycle order.
    pub const ALL: [Self; 11] = [
        Self::Planned,
        Self::Selected,
        Self::ArgumentsReady,
        Self::ValidationFailed,
        Self::Queued,
        Self::Started,
        Self::Yielded,
        Self::Succeeded,
        Self::Failed,
        Self::Canceled,
        Self::TimedOut,
    ];

    /// The CloudEvents `type`.
    pub fn event_class(self) -> &'static str {
        match self {
            Self::Planned => "tool.invocation.planned",
            Self::Selected => "tool.invocation.selected",
            Self::ArgumentsReady => "tool.invocation.arguments_ready",
            Self::ValidationFailed => "tool.invocation.validation_failed",
            Self::Queued => "tool.invocation.queued",
            Self::Started => "tool.invocation.started",
            Self::Yielded => "tool.invocation.yielded",
            Self::Succeeded => "tool.invocation.succeeded",
            Self::Failed => "tool.invocation.failed",
            Self::Canceled => "tool.invocation.canceled",
            Self::TimedOut => "tool.invocation.timed_out",
        }
    }

    /// The status the snapshot reports by default: the class decides the transition, and an equal
    /// status keeps the ledger from recording a `status_mismatch` anomaly.
    pub fn status(self) -> &'static str {
        match self {
            Self::Started => "running",
            other => other
                .event_class()
                .strip_prefix("tool.invocation.")
                .unwrap_or_default(),
        }
    }
}

/// The class a result is carried by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultClass {
    /// `tool.result.created`
    Created,
    /// `tool.result.redacted`
    Redacted,
    /// `tool.invocation.partial_result`
    PartialResult,
}

impl ResultClass {
    /// The CloudEvents `type`.
    pub fn event_class(self) -> &'static str {
        match self {
            Self::Created => "tool.result.created",
            Self::Redacted => "tool.result.redacted",
            Self::PartialResult => "tool.invocation.partial_result",
        }
    }
}

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookPhase {
    /// Before the call (`tool.hook.pre.*`).
    Pre,
    /// After the call (`tool.hook.post.*`).
    Post,
}

/// Which end of a hook run an event marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookStage {
    /// `tool.hook.<phase>.started`
    Started,
    /// `tool.hook.<phase>.completed`
    Completed,
}

/// A permission decision's behavior (closed vocabulary of the official schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behavior {
    /// The call may run.
    Allow,
    /// A person must be asked.
    Ask,
    /// The call is denied (terminal).
    Deny,
    /// No decision; the state is unchanged.
    Passthrough,
}

/// What a hook is attached to (closed vocabulary of the official schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// Before a tool runs.
    PreToolUse,
    /// After it succeeded.
    PostToolUse,
    /// After it failed.
    PostToolUseFailure,
    /// On a permission request.
    PermissionRequest,
    /// On a permission decision.
    PermissionDecision,
    /// On a result's persistence.
    ResultPersistence,
}

/// A tool's lifecycle (closed vocabulary of the official schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    /// Not yet usable.
    Draft,
    /// Usable.
    #[default]
    Available,
    /// Switched off.
    Disabled,
    /// Needs setup first.
    RequiresSetup,
    /// Loaded on demand.
    Deferred,
    /// To be removed.
    Deprecated,
    /// Removed.
    Retired,
}

/// A tool error (spec "Errors and retries"); `error_class` from the spec's initial classes
/// (`execution_failed`, `timeout`, `canceled`, `permission_denied`, `dependency_unavailable`, …).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolError {
    /// The error class.
    pub error_class: String,
    /// A producer-specific code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether and how a retry may help.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverability: Option<String>,
    /// When a retry may be made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Value>,
    /// The native error, by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_error_ref: Option<Value>,
    /// Fields beyond these.
    #[serde(flatten)]
    pub extra: Object,
}

impl ToolError {
    /// An error of `error_class` with `message`.
    pub fn new(error_class: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            error_class: error_class.into(),
            message: Some(message.into()),
            ..Self::default()
        }
    }

    /// With an error code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.error_code = Some(code.into());
        self
    }
}

/// An invocation snapshot (official `agenttool-invocation`); may be partial: the ledger merges
/// snapshots field by field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Invocation {
    /// The invocation's id.
    pub invocation_id: String,
    /// The tool called.
    pub tool_id: String,
    /// Defaults to the class's own status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// RFC 3339; defaults to the event's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// When it started running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it reached a terminal state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// The surface it was offered on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface_id: Option<String>,
    /// The platform's own call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_call_id: Option<String>,
    /// The input as the model produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_input: Option<Value>,
    /// The input as shown to observers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observable_input: Option<Value>,
    /// The input permission was decided on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_input: Option<Value>,
    /// The input the tool was called with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_input: Option<Value>,
    /// Who acts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_ref: Option<String>,
    /// The agent session (read by the ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The invocation this one retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// The attempt number of a retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The error of a failed, timed-out or canceled call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// Native ids (`{"system": …, "key": …, "value": …}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_mappings: Option<Vec<Value>>,
    /// Telemetry references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_refs: Option<Vec<Value>>,
    /// Fields beyond these.
    #[serde(flatten)]
    pub extra: Object,
}

impl Invocation {
    /// A snapshot of `invocation_id` calling `tool_id`.
    pub fn new(invocation_id: impl Into<String>, tool_id: impl Into<String>) -> Self {
        Self {
            invocation_id: invocation_id.into(),
            tool_id: tool_id.into(),
            ..Self::default()
        }
    }
}

/// Data of `tool.permission.requested` (the ledger's `ledger/permission-request` shape).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PermissionRequest {
    /// The id the decision will carry.
    pub decision_id: String,
    /// The invocation asking.
    pub invocation_id: String,
    /// Its tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The input permission is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_input: Option<Value>,
    /// The permission profile applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_profile_ref: Option<String>,
    /// The permission mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Why permission is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Object>,
    /// RFC 3339; defaults to the event's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
    /// Fields beyond these.
    #[serde(flatten)]
    pub extra: Object,
}

/// A permission decision (official `agenttool-permission-decision`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDecision {
    /// The decision's id (the request's).
    pub decision_id: String,
    /// The invocation decided on.
    pub invocation_id: String,
    /// allow | ask | deny | passthrough.
    pub behavior: Behavior,
    /// RFC 3339; defaults to the event's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    /// The permission mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Who or what decided (`user`, `policy`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Object>,
    /// An input the decision replaced the call's with (an input mutation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// Whether a person edited the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_modified: Option<bool>,
    /// Rules applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_refs: Option<Vec<String>>,
    /// Policies applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_refs: Option<Vec<String>>,
    /// Fields beyond these.
    #[serde(flatten)]
    pub extra: Object,
}

impl PermissionDecision {
    /// A decision `behavior` under `decision_id` for `invocation_id`.
    pub fn new(decision_id: impl Into<String>, invocation_id: impl Into<String>, behavior: Behavior) -> Self {
        Self {
            decision_id: decision_id.into(),
            invocation_id: invocation_id.into(),
            behavior,
            decided_at: None,
            mode: None,
            source: None,
            reason: None,
            updated_input: None,
            user_modified: None,
            rule_refs: None,
            policy_refs: None,
            extra: Object::new(),
        }
    }
}

/// A hook run (official `agenttool-hook`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hook {
    /// The hook's id.
    pub hook_id: String,
    /// What it is attached to.
    pub hook_event: HookEvent,
    /// The invocation it ran for.
    pub invocation_id: String,
    /// Its tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// What it matched on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<Object>,
    /// Its outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<Value>>,
    /// An input the hook replaced the call's with (an input mutation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// An output the hook replaced the result with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_output: Option<Value>,
    /// A stop: the call is blocked (terminal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Object>,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Fields beyond these.
    #[serde(flatten)]
    pub extra: Object,
}

impl Hook {
    /// A run of `hook_id` on `hook_event` for `invocation_id`.
    pub fn new(hook_id: impl Into<String>, hook_event: HookEvent, invocation_id: impl Into<String>) -> Self {
        Self {
            hook_id: hook_id.into(),
            hook_event,
            invocation_id: invocation_id.into(),
            tool_id: None,
            matcher: None,
            outputs: None,
            updated_input: None,
            updated_output: None,
            stop: None,
            started_at: None,
            ended_at: None,
            extra: Object::new(),
        }
    }
}

/// A progress update (official `agenttool-progress`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Progress {
    /// Defaults to a digest of the invocation id and the sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_id: Option<String>,
    /// The invocation it is about.
    pub invocation_id: String,
    /// Its tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// 1, 2, … for one invocation; also the event's sequence.
    pub sequence: u64,
    /// `running`, `needs_input`, …
    pub status: String,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// 0–100; must be finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// The step running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    /// How many steps there are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<u64>,
    /// Milliseconds since the call started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// RFC 3339; defaults to the event's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Fields beyond these.
    #[serde(flatten)]
    pub extra: Object,
}

/// A tool result (official `agenttool-result`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolResult {
    /// Defaults to a digest of the invocation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_id: Option<String>,
    /// The invocation it is the result of.
    pub invocation_id: String,
    /// Its tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// `succeeded`, `failed`, `denied`, `redacted`, …
    pub status: String,
    /// Whether it reports an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// MCP-style content blocks (`{"type": "text", "text": …}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
    /// A structured value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// A summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// `none`, `redacted`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction_state: Option<String>,
    /// The error, for an error result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// RFC 3339; defaults to the event's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// A native id of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_mapping: Option<Value>,
    /// Fields beyond these.
    #[serde(flatten)]
    pub extra: Object,
}

/// A tool as its producer declares it.
///
/// `sensitive_fields` (property names, matched at any depth of an input, or JSON Pointers such as
/// `/headers/authorization`) go into the declaration's `input_contract.sensitive_fields`, so ingest
/// scrubs them from every invocation of the tool — once the declaration is in the ledger: declare
/// before the first invocation ([`crate::Producer::invocation`] does).
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The tool's id.
    pub tool_id: String,
    /// Its name.
    pub name: String,
    /// Its namespace (`default`).
    pub namespace: String,
    /// What it does (empty).
    pub description: String,
    /// `function` by default.
    pub tool_kind: String,
    /// `available` by default.
    pub lifecycle: Lifecycle,
    /// A version; a new one is a new declaration in the catalog.
    pub version: Option<String>,
    /// Fields ingest must scrub from its inputs.
    pub sensitive_fields: Vec<String>,
    /// `input_contract.model_input_schema`.
    pub input_schema: Option<Value>,
    /// `output_contract.output_schema`.
    pub output_schema: Option<Value>,
    /// Declaration fields beyond these (they override the ones above).
    pub extra: Object,
}

impl Tool {
    /// A tool `tool_id` named `name`, with the defaults of the Python SDK's `Tool`.
    pub fn new(tool_id: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            tool_id: tool_id.into(),
            name: name.into(),
            namespace: "default".to_owned(),
            description: String::new(),
            tool_kind: "function".to_owned(),
            lifecycle: Lifecycle::Available,
            version: None,
            sensitive_fields: Vec::new(),
            input_schema: None,
            output_schema: None,
            extra: Object::new(),
        }
    }

    /// With `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// With `description`.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// With `version`.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// With these sensitive fields (names or JSON Pointers).
    pub fn sensitive_fields<S: Into<String>>(mut self, fields: impl IntoIterator<Item = S>) -> Self {
        self.sensitive_fields = fields.into_iter().map(Into::into).collect();
        self
    }

    /// With the JSON Schema of the model's input.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The `tool-declaration` object.
    pub fn declaration(&self) -> Object {
        let mut data = Object::new();
        data.insert("schema_version".into(), SCHEMA_VERSION.into());
        data.insert("tool_id".into(), self.tool_id.clone().into());
        data.insert("namespace".into(), self.namespace.clone().into());
        data.insert("name".into(), self.name.clone().into());
        data.insert("description".into(), self.description.clone().into());
        data.insert(
            "lifecycle".into(),
            serde_json::to_value(self.lifecycle).unwrap_or(Value::Null),
        );
        data.insert("tool_kind".into(), self.tool_kind.clone().into());
        if let Some(version) = &self.version {
            data.insert("version".into(), version.clone().into());
        }
        let mut contract = Object::new();
        if let Some(schema) = &self.input_schema {
            contract.insert("model_input_schema".into(), schema.clone());
        }
        if !self.sensitive_fields.is_empty() {
            contract.insert(
                "sensitive_fields".into(),
                self.sensitive_fields.iter().cloned().map(Value::from).collect(),
            );
        }
        if !contract.is_empty() {
            data.insert("input_contract".into(), contract.into());
        }
        if let Some(schema) = &self.output_schema {
            let mut output = Object::new();
            output.insert("output_schema".into(), schema.clone());
            data.insert("output_contract".into(), output.into());
        }
        data.extend(self.extra.clone());
        data
    }

    /// Hex SHA-256 of the declaration as the Python SDK serializes it for its id (`json.dumps` with
    /// sorted keys, compact separators, ASCII escapes).
    pub fn declaration_digest(&self) -> String {
        let mut text = String::new();
        python_json(&Value::Object(self.declaration()), &mut text);
        hex(&Sha256::digest(text.as_bytes()))
    }
}

/// W3C trace context (`traceparent`, optional `tracestate`) carried as CloudEvents extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// The trace context of the ambient OpenTelemetry span (`opentelemetry::Context::current()`),
    /// when there is a valid one. Feature `opentelemetry`; events take it when neither their stamp
    /// nor the builder has a trace context.
    #[cfg(feature = "opentelemetry")]
    pub fn current() -> Option<Self> {
        use opentelemetry::trace::TraceContextExt as _;
        let context = opentelemetry::Context::current();
        let span = context.span();
        let span = span.span_context();
        if !span.is_valid() {
            return None;
        }
        let traceparent = format!(
            "00-{}-{}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        );
        Self::new(traceparent, Some(span.trace_state().header())).ok()
    }

    /// Checks `traceparent` (`<version>-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, ids not
    /// all zero, version not `ff`) and keeps `tracestate` as given (empty means none).
    pub fn new(traceparent: impl Into<String>, tracestate: Option<String>) -> Result<Self> {
        let traceparent = traceparent.into();
        let parts: Vec<&str> = traceparent.split('-').collect();
        let lower_hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let ok = parts.len() >= 4
            && lower_hex(parts[0], 2)
            && parts[0] != "ff"
            && (parts[0] != "00" || parts.len() == 4)
            && lower_hex(parts[1], 32)
            && parts[1].bytes().any(|b| b != b'0')
            && lower_hex(parts[2], 16)
            && parts[2].bytes().any(|b| b != b'0')
            && lower_hex(parts[3], 2);
        if !ok {
            return Err(Error::invalid(
                "/traceparent",
                format!("{traceparent:?} is not a W3C traceparent"),
            ));
        }
        if let Some(state) = &tracestate
            && state.contains(|c: char| c.is_control())
        {
            return Err(Error::invalid("/tracestate", "control character"));
        }
        Ok(Self {
            traceparent,
            tracestate: tracestate.filter(|s| !s.is_empty()),
        })
    }

    /// The `traceparent` value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// The per-event choices a builder takes besides the data: the sequence in the event's id, the time,
/// and the trace context.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stamp {
    /// 0 for the first event of a class for an object; bump it for a genuinely new one.
    pub seq: u64,
    /// RFC 3339 time of the event (and the data's default timestamps); now when `None`.
    pub time: Option<String>,
    /// Trace context; the builder's own when `None`.
    pub trace: Option<TraceContext>,
}

impl Stamp {
    /// Sequence `seq`, now, the builder's trace context.
    pub fn seq(seq: u64) -> Self {
        Self {
            seq,
            ..Self::default()
        }
    }
}

/// A structured CloudEvent as the builders make it: attributes, extensions, and `data` (an object).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `id` (`tlp-` and 32 hex digits for the builders' events).
    pub id: String,
    /// `source`: the producer.
    pub source: String,
    /// `type`: the event class.
    pub event_class: String,
    /// `subject`: the id of the object the event is about.
    pub subject: String,
    /// `time`; `None` only for `tool.declared` (so re-declaring is a duplicate).
    pub time: Option<String>,
    /// The `tenant` extension.
    pub tenant: String,
    /// The `sessionid` extension.
    pub sessionid: Option<String>,
    /// The `invocationid` extension.
    pub invocationid: Option<String>,
    /// The `toolid` extension.
    pub toolid: Option<String>,
    /// The `traceparent` extension.
    pub traceparent: Option<String>,
    /// The `tracestate` extension.
    pub tracestate: Option<String>,
    /// The data object.
    pub data: Value,
}

impl Event {
    /// Attribute and extension names with their values, in the order the Python SDK writes them.
    pub fn attributes(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![
            ("specversion", "1.0"),
            ("id", self.id.as_str()),
            ("source", self.source.as_str()),
            ("type", self.event_class.as_str()),
            ("subject", self.subject.as_str()),
        ];
        if let Some(time) = &self.time {
            out.push(("time", time));
        }
        out.push(("datacontenttype", "application/json"));
        out.push(("tenant", self.tenant.as_str()));
        for (name, value) in [
            ("sessionid", &self.sessionid),
            ("invocationid", &self.invocationid),
            ("toolid", &self.toolid),
            ("traceparent", &self.traceparent),
            ("tracestate", &self.tracestate),
        ] {
            if let Some(value) = value {
                out.push((name, value));
            }
        }
        out
    }

    /// The event as structured-mode JSON (attributes, extensions and `data`).
    pub fn to_structured(&self) -> Value {
        let mut out: Object = self
            .attributes()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::from(v)))
            .collect();
        out.insert("data".into(), self.data.clone());
        Value::Object(out)
    }

    /// With `trace` as its trace context.
    pub fn with_trace(mut self, trace: &TraceContext) -> Self {
        self.traceparent = Some(trace.traceparent.clone());
        self.tracestate = trace.tracestate.clone();
        self
    }
}

/// The current UTC time, RFC 3339 with milliseconds and `Z`.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Hex SHA-256 over length-prefixed `parts`, truncated to `length` digits (the Python SDK's
/// `stable_id`).
pub fn stable_id(parts: &[&str], length: usize) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"toolledger.producer.v1");
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let mut digest = hex(&hasher.finalize());
    digest.truncate(length);
    digest
}

/// Builds events for one producer: its tenant, source, and (optionally) agent session and trace
/// context.
#[derive(Debug, Clone)]
pub struct EventBuilder {
    tenant: String,
    source: String,
    session_id: Option<String>,
    trace: Option<TraceContext>,
}

impl EventBuilder {
    /// A builder for `tenant` (checked against the tenant grammar) and `source` (not empty).
    pub fn new(tenant: impl Into<String>, source: impl Into<String>) -> Result<Self> {
        let tenant = tenant.into();
        wire::check_tenant(&tenant)?;
        let source = source.into();
        if source.is_empty() {
            return Err(Error::invalid("/source", "source must not be empty"));
        }
        Ok(Self {
            tenant,
            source,
            session_id: None,
            trace: None,
        })
    }

    /// With the agent session every event is in (unless its data names another).
    pub fn with_session(mut self, session_id: Option<String>) -> Self {
        self.session_id = session_id;
        self
    }

    /// With the trace context every event (but `tool.declared`) carries unless its stamp has one.
    pub fn with_trace(mut self, trace: Option<TraceContext>) -> Self {
        self.trace = trace;
        self
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The default session.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// An event of `event_class` about `subject` with `data` (an object; `schema_version` added when
    /// absent); its id is a digest of the source, `key` (what identifies the object), the class and
    /// `stamp.seq`.
    pub fn event(
        &self,
        event_class: &str,
        subject: &str,
        data: Object,
        key: &[&str],
        stamp: &Stamp,
    ) -> Event {
        let mut body = data;
        body.entry("schema_version")
            .or_insert_with(|| SCHEMA_VERSION.into());
        let seq = stamp.seq.to_string();
        let mut parts = Vec::with_capacity(key.len() + 3);
        parts.push(self.source.as_str());
        parts.extend_from_slice(key);
        parts.push(event_class);
        parts.push(&seq);
        let id = format!("tlp-{}", stable_id(&parts, 32));
        let text = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
        let sessionid = text("session_id").or_else(|| self.session_id.clone());
        let (invocationid, toolid) = if event_class == "tool.declared" {
            (None, Some(subject.to_owned()))
        } else {
            (text("invocation_id"), text("tool_id"))
        };
        #[cfg(feature = "opentelemetry")]
        let ambient = TraceContext::current();
        #[cfg(not(feature = "opentelemetry"))]
        let ambient: Option<TraceContext> = None;
        let trace = stamp.trace.as_ref().or(self.trace.as_ref()).or(ambient.as_ref());
        Event {
            id,
            source: self.source.clone(),
            event_class: event_class.to_owned(),
            subject: subject.to_owned(),
            time: Some(stamp.time.clone().unwrap_or_else(now_rfc3339)),
            tenant: self.tenant.clone(),
            sessionid,
            invocationid,
            toolid,
            traceparent: trace.map(|t| t.traceparent.clone()),
            tracestate: trace.and_then(|t| t.tracestate.clone()),
            data: Value::Object(body),
        }
    }

    /// `tool.declared`. Its id covers the declaration's content, so declaring the same tool again
    /// (every producer start does) is a duplicate and a changed declaration a new event. For that it
    /// carries no time, session or trace context unless `time` is given: the ledger compares a
    /// repeat's whole content, and a new time under the same id would be a `duplicate_conflict`.
    pub fn tool_declared(&self, tool: &Tool, time: Option<&str>) -> Event {
        let digest = tool.declaration_digest();
        let stamp = Stamp {
            time: time.map(str::to_owned),
            ..Stamp::default()
        };
        let mut event = self.event(
            "tool.declared",
            &tool.tool_id,
            tool.declaration(),
            &[&tool.tool_id, &digest],
            &stamp,
        );
        event.sessionid = None;
        event.traceparent = None;
        event.tracestate = None;
        if time.is_none() {
            event.time = None;
        }
        event
    }

    /// A `tool.invocation.*` event carrying `snapshot`; `status` defaults to the class's own and
    /// `created_at` to the event's time.
    pub fn invocation(&self, class: InvocationClass, snapshot: &Invocation, stamp: &Stamp) -> Result<Event> {
        let time = stamp.time.clone().unwrap_or_else(now_rfc3339);
        let mut data = to_object(snapshot)?;
        data.entry("status").or_insert_with(|| class.status().into());
        data.entry("created_at").or_insert_with(|| time.clone().into());
        let stamp = Stamp {
            time: Some(time),
            ..stamp.clone()
        };
        let id = snapshot.invocation_id.as_str();
        Ok(self.event(class.event_class(), id, data, &[id], &stamp))
    }

    /// `tool.permission.requested`; `requested_at` defaults to the event's time.
    pub fn permission_requested(&self, request: &PermissionRequest, stamp: &Stamp) -> Result<Event> {
        let (data, stamp) = timed(to_object(request)?, "requested_at", stamp);
        let (inv, decision) = (request.invocation_id.as_str(), request.decision_id.as_str());
        Ok(self.event("tool.permission.requested", inv, data, &[inv, decision], &stamp))
    }

    /// `tool.permission.decided` (behavior allow | ask | deny | passthrough); `decided_at` defaults to
    /// the event's time.
    pub fn permission_decided(&self, decision: &PermissionDecision, stamp: &Stamp) -> Result<Event> {
        let (data, stamp) = timed(to_object(decision)?, "decided_at", stamp);
        let (inv, id) = (decision.invocation_id.as_str(), decision.decision_id.as_str());
        Ok(self.event("tool.permission.decided", inv, data, &[inv, id], &stamp))
    }

    /// `tool.hook.<phase>.<stage>`.
    pub fn hook(&self, phase: HookPhase, stage: HookStage, hook: &Hook, stamp: &Stamp) -> Result<Event> {
        let class = format!(
            "tool.hook.{}.{}",
            match phase {
                HookPhase::Pre => "pre",
                HookPhase::Post => "post",
            },
            match stage {
                HookStage::Started => "started",
                HookStage::Completed => "completed",
            }
        );
        let inv = hook.invocation_id.as_str();
        Ok(self.event(&class, inv, to_object(hook)?, &[inv, &hook.hook_id], stamp))
    }

    /// `tool.invocation.progress`; its `sequence` is the event's sequence (`stamp.seq` is not used),
    /// `timestamp` defaults to the event's time and `progress_id` to a digest of the invocation id and
    /// the sequence.
    pub fn progress(&self, progress: &Progress, stamp: &Stamp) -> Result<Event> {
        if progress.percent.is_some_and(|p| !p.is_finite()) {
            return Err(Error::invalid("/data/percent", "NaN and infinities are not JSON"));
        }
        let (mut data, mut stamp) = timed(to_object(progress)?, "timestamp", stamp);
        let inv = progress.invocation_id.as_str();
        let sequence = progress.sequence.to_string();
        data.entry("progress_id")
            .or_insert_with(|| format!("prg-{}", stable_id(&[inv, &sequence], 24)).into());
        stamp.seq = progress.sequence;
        Ok(self.event("tool.invocation.progress", inv, data, &[inv], &stamp))
    }

    /// A result, carried by `class`; `created_at` defaults to the event's time and `result_id` to a
    /// digest of the invocation id.
    pub fn result(&self, result: &ToolResult, class: ResultClass, stamp: &Stamp) -> Result<Event> {
        let (mut data, stamp) = timed(to_object(result)?, "created_at", stamp);
        let inv = result.invocation_id.as_str();
        data.entry("result_id")
            .or_insert_with(|| format!("res-{}", stable_id(&[inv], 24)).into());
        Ok(self.event(class.event_class(), inv, data, &[inv], &stamp))
    }
}

/// `data` with `field` defaulted to the stamp's time (now when it has none), and the stamp with
/// that time, so the event and its data agree.
fn timed(mut data: Object, field: &str, stamp: &Stamp) -> (Object, Stamp) {
    let time = stamp.time.clone().unwrap_or_else(now_rfc3339);
    data.entry(field).or_insert_with(|| time.clone().into());
    (
        data,
        Stamp {
            time: Some(time),
            ..stamp.clone()
        },
    )
}

fn to_object<T: Serialize>(value: &T) -> Result<Object> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::invalid("/data", "data must be a JSON object")),
        Err(e) => Err(Error::invalid("/data", e.to_string())),
    }
}

/// `value` as Python's `json.dumps(value, sort_keys=True, separators=(",", ":"))` writes it
/// (`ensure_ascii`: non-ASCII as `\uXXXX`, lowercase, surrogate pairs; floats as `repr`).
fn python_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => out.push_str(&u.to_string()),
            (None, Some(i), _) => out.push_str(&i.to_string()),
            (None, None, Some(f)) => out.push_str(&python_float(f)),
            (None, None, None) => out.push_str(&n.to_string()),
        },
        Value::String(s) => python_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                python_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                python_string(key, out);
                out.push(':');
                python_json(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn python_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// `repr(f)` in Python: the shortest round-trip digits, fixed notation for exponents -4 … 15,
/// scientific (`1e+16`, `1.5e-07`) beyond.
fn python_float(f: f64) -> String {
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exponent) {
        if exponent >= 0 {
            let point = usize::try_from(exponent).unwrap_or(0) + 1;
            let (int, frac) = if digits.len() > point {
                (digits[..point].to_owned(), digits[point..].to_owned())
            } else {
                (format!("{digits:0<point$}"), "0".to_owned())
            };
            format!("{sign}{int}.{frac}")
        } else {
            let zeros = "0".repeat(usize::try_from(-exponent - 1).unwrap_or(0));
            format!("{sign}0.{zeros}{digits}")
        }
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let mantissa = if rest.is_empty() {
            first.to_owned()
        } else {
            format!("{first}.{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SOURCE: &str = "urn:toolledger-producer:golden";

    fn builder() -> EventBuilder {
        EventBuilder::new("acme", SOURCE).unwrap()
    }

    #[cfg(feature = "opentelemetry")]
    #[test]
    fn events_take_the_ambient_opentelemetry_span_unless_given_one() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
        };
        let b = builder();
        let started = |stamp: &Stamp| {
            b.invocation(InvocationClass::Started, &Invocation::new("inv-1", "t"), stamp)
                .unwrap()
        };
        assert_eq!(
            started(&Stamp::default()).traceparent,
            None,
            "no span, no context"
        );
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::from_key_value([("vendor", "v1")]).unwrap(),
        );
        let _attached = opentelemetry::Context::current()
            .with_remote_span_context(span)
            .attach();
        let event = started(&Stamp::default());
        assert_eq!(
            event.traceparent.as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(event.tracestate.as_deref(), Some("vendor=v1"));
        // A stamp's own context wins; a declaration carries none.
        let own = TraceContext::new("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", None).unwrap();
        let stamped = started(&Stamp {
            trace: Some(own),
            ..Stamp::default()
        });
        assert_eq!(
            stamped.traceparent.as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
        );
        assert_eq!(b.tool_declared(&Tool::new("t", "t"), None).traceparent, None);
    }

    // Golden values below come from the Python SDK (`toolledger_producer.events`) run on the same
    // inputs: the two SDKs must give an event the same id.

    #[test]
    fn stable_ids_match_the_python_sdk() {
        assert_eq!(stable_id(&["a", "b"], 32), "3292936ce4e5d85178a33f7ad3c3d7c3");
        assert_eq!(stable_id(&["inv-1"], 24), "393c24b22de5f51e19c0b85c");
        let b = builder();
        let snap = Invocation::new("inv-1", "t");
        let planned = b
            .invocation(InvocationClass::Planned, &snap, &Stamp::default())
            .unwrap();
        assert_eq!(planned.id, "tlp-dce04691960fc7170e44e643c6f5402c");
        let started = b
            .invocation(InvocationClass::Started, &snap, &Stamp::seq(3))
            .unwrap();
        assert_eq!(started.id, "tlp-2bd641d0ffbfd4b563e96c8de900d01e");
        let progress = Progress {
            invocation_id: "inv-1".into(),
            tool_id: Some("t".into()),
            sequence: 2,
            status: "running".into(),
            ..Progress::default()
        };
        let progress = b.progress(&progress, &Stamp::default()).unwrap();
        assert_eq!(progress.id, "tlp-ad365620cf04a66c8d06d4b3b5087438");
        assert_eq!(progress.data["progress_id"], "prg-bf3ea668c1b198ac67ea9b37");
        let result = ToolResult {
            invocation_id: "inv-1".into(),
            status: "succeeded".into(),
            ..ToolResult::default()
        };
        let result = b
            .result(&result, ResultClass::Created, &Stamp::default())
            .unwrap();
        assert_eq!(result.id, "tlp-e1b7342b89459fde4c8878250fbbcb18");
        assert_eq!(result.data["result_id"], "res-393c24b22de5f51e19c0b85c");
        let request = PermissionRequest {
            decision_id: "dec-1".into(),
            invocation_id: "inv-1".into(),
            ..PermissionRequest::default()
        };
        let request = b.permission_requested(&request, &Stamp::default()).unwrap();
        assert_eq!(request.id, "tlp-f6deff27bb4d026b4f8455509d503aba");
        let decision = PermissionDecision::new("dec-1", "inv-1", Behavior::Allow);
        let decision = b.permission_decided(&decision, &Stamp::default()).unwrap();
        assert_eq!(decision.id, "tlp-3886882c7c2dbe9d6348b2ace2857e72");
        let hook = Hook::new("h-1", HookEvent::PreToolUse, "inv-1");
        let hook = b
            .hook(HookPhase::Pre, HookStage::Completed, &hook, &Stamp::default())
            .unwrap();
        assert_eq!(hook.id, "tlp-4c25870083c462995b05ecfb8a536457");
    }

    #[test]
    fn declaration_ids_match_the_python_sdk_including_unicode_and_floats() {
        let b = builder();
        assert_eq!(
            b.tool_declared(&Tool::new("t", "t"), None).id,
            "tlp-fc7211aae8419faf17690a0c24e25504"
        );
        let tool = Tool::new("vault.read", "read")
            .namespace("vault")
            .description("reads a secret \u{fc} \u{1F600} \"q\"\n")
            .version("1")
            .sensitive_fields(["api_key", "/headers/authorization"])
            .input_schema(json!({"type": "object", "properties": {"n": {
                "type": "number", "maximum": 1e16, "minimum": -0.5, "multipleOf": 1e-7,
                "z": 123_456_789.125, "big": 1_000_000_000_000_000_u64, "f": 100.0}}}));
        let mut text = String::new();
        python_json(&Value::Object(tool.declaration()), &mut text);
        assert_eq!(
            text,
            r#"{"description":"reads a secret \u00fc \ud83d\ude00 \"q\"\n","input_contract":{"model_input_schema":{"properties":{"n":{"big":1000000000000000,"f":100.0,"maximum":1e+16,"minimum":-0.5,"multipleOf":1e-07,"type":"number","z":123456789.125}},"type":"object"},"sensitive_fields":["api_key","/headers/authorization"]},"lifecycle":"available","name":"read","namespace":"vault","schema_version":"0.2.0","tool_id":"vault.read","tool_kind":"function","version":"1"}"#
        );
        assert_eq!(
            b.tool_declared(&tool, None).id,
            "tlp-f2b358ced60d93b650ddd3be0f7d2acd"
        );
    }

    #[test]
    fn python_float_repr() {
        for (f, repr) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123_456.789, "123456.789"),
            (-2.5e-7, "-2.5e-07"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(python_float(f), repr, "{f}");
        }
    }

    #[test]
    fn declarations_carry_no_time_session_or_trace() {
        let trace =
            TraceContext::new("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", None).unwrap();
        let b = builder()
            .with_session(Some("sess-1".into()))
            .with_trace(Some(trace.clone()));
        let declared = b.tool_declared(&Tool::new("t", "t"), None);
        assert_eq!(declared.time, None);
        assert_eq!(declared.sessionid, None);
        assert_eq!(declared.traceparent, None);
        assert_eq!(declared.toolid.as_deref(), Some("t"));
        let planned = b
            .invocation(
                InvocationClass::Planned,
                &Invocation::new("i", "t"),
                &Stamp::default(),
            )
            .unwrap();
        assert_eq!(planned.sessionid.as_deref(), Some("sess-1"));
        assert_eq!(planned.traceparent.as_deref(), Some(trace.traceparent()));
        assert_eq!(planned.invocationid.as_deref(), Some("i"));
        assert_eq!(planned.data["status"], "planned");
        assert_eq!(planned.data["schema_version"], SCHEMA_VERSION);
        assert_eq!(
            Some(planned.data["created_at"].as_str().unwrap()),
            planned.time.as_deref()
        );
    }

    #[test]
    fn each_class_reports_its_own_status() {
        let statuses: Vec<_> = InvocationClass::ALL.iter().map(|c| c.status()).collect();
        assert_eq!(
            statuses,
            [
                "planned",
                "selected",
                "arguments_ready",
                "validation_failed",
                "queued",
                "running",
                "yielded",
                "succeeded",
                "failed",
                "canceled",
                "timed_out"
            ]
        );
    }

    #[test]
    fn ids_differ_by_class_and_seq_and_repeat_for_the_same_event() {
        let b = builder();
        let snap = Invocation {
            created_at: Some("2026-01-01T00:00:00.000Z".into()),
            ..Invocation::new("inv-stable", "t")
        };
        let a = b
            .invocation(InvocationClass::Planned, &snap, &Stamp::default())
            .unwrap();
        let again = b
            .invocation(InvocationClass::Planned, &snap, &Stamp::default())
            .unwrap();
        assert_eq!(a.id, again.id);
        let started = b
            .invocation(InvocationClass::Started, &snap, &Stamp::default())
            .unwrap();
        assert_ne!(a.id, started.id);
        assert_ne!(
            a.id,
            b.invocation(InvocationClass::Planned, &snap, &Stamp::seq(1))
                .unwrap()
                .id
        );
        let v2 = Tool::new("t", "t").version("2");
        assert_ne!(
            b.tool_declared(&Tool::new("t", "t"), None).id,
            b.tool_declared(&v2, None).id
        );
    }

    #[test]
    fn bad_trace_context_and_percent_are_refused() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n",
        ] {
            assert!(TraceContext::new(bad, None).is_err(), "{bad:?}");
        }
        let progress = Progress {
            invocation_id: "i".into(),
            sequence: 1,
            status: "running".into(),
            percent: Some(f64::NAN),
            ..Progress::default()
        };
        assert!(builder().progress(&progress, &Stamp::default()).is_err());
        assert!(EventBuilder::new("_system", "s").is_err());
        assert!(EventBuilder::new("acme", "").is_err());
    }

    #[test]
    fn unknown_fields_are_kept() {
        let mut snap = Invocation::new("i", "t");
        snap.extra.insert("vendor_field".into(), json!({"x": 1}));
        let event = builder()
            .invocation(InvocationClass::Queued, &snap, &Stamp::default())
            .unwrap();
        assert_eq!(event.data["vendor_field"], json!({"x": 1}));
    }
}
