//! The spec's core objects: see the module doc of [`crate::model`].
//!
//! Each struct follows its official schema field for field; `extra` keeps everything else.

use super::vocab::*;
use super::{Loose, Object, SafetyFlag, UnknownValue, UnknownValues, unknown_values_in};
use crate::class::{EventClass, UnknownClass};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// A `tool_declaration`: stable description of one callable capability (agenttool-tool-declaration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDeclaration {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// Stable id scoped by producer.
    pub tool_id: String,
    /// Collision boundary.
    pub namespace: String,
    /// Machine-oriented name, the primary model-callable name.
    pub name: String,
    /// Backwards-compatible names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aliases: Option<Vec<String>>,
    /// A 3-10 word capability phrase for discovery and deferred loading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_hint: Option<String>,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Model-facing usage guidance.
    pub description: String,
    /// Lifecycle state (closed).
    pub lifecycle: Lifecycle,
    /// Execution kind (open).
    pub tool_kind: ToolKind,
    /// Capability keys or external capability refs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_refs: Option<Vec<String>>,
    /// The input contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_contract: Option<Loose<InputContract>>,
    /// The output contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_contract: Option<Loose<OutputContract>>,
    /// Where runtime behavior is described.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_ref: Option<String>,
    /// The execution profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_profile_ref: Option<String>,
    /// The permission profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_profile_ref: Option<String>,
    /// Native protocol ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_mappings: Option<Vec<Loose<ExternalMapping>>>,
    /// Untrusted, display and model hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Object>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolDeclaration {
    tool_kind,
    input_contract,
    external_mappings
});

/// A `tool_interface`: the runtime contract of a tool (agenttool-tool-interface).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInterface {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The interface's id.
    pub interface_id: String,
    /// The tool it describes.
    pub tool_id: String,
    /// Primary name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Compatibility names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aliases: Option<Vec<String>>,
    /// Discovery phrase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_hint: Option<String>,
    /// Model-facing input schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_input_schema: Option<Object>,
    /// Runtime input schema, with internal fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_input_schema: Option<Object>,
    /// Output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Object>,
    /// Whether schemas are enforced strictly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// Schema visibility (closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_visibility: Option<SchemaVisibility>,
    /// Whether the tool is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_enabled: Option<SafetyFlag>,
    /// Whether it only reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_read_only: Option<SafetyFlag>,
    /// Whether it can run in parallel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_concurrency_safe: Option<SafetyFlag>,
    /// Whether it destroys data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_destructive: Option<SafetyFlag>,
    /// Whether it reaches the open world.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_open_world: Option<SafetyFlag>,
    /// Whether a human must interact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_user_interaction: Option<bool>,
    /// What a safety classifier sees.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub classifier_input: Option<Value>,
    /// How permission rules match calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_matcher: Option<String>,
    /// The execution profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_profile_ref: Option<String>,
    /// The permission profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_profile_ref: Option<String>,
    /// The result persistence policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_policy_ref: Option<String>,
    /// Largest result kept inline, in characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inline_chars: Option<Number>,
    /// Rendering hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendering: Option<Object>,
    /// Native protocol ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_mappings: Option<Vec<Loose<ExternalMapping>>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolInterface { external_mappings });

/// A `tool_surface`: the tools visible in one context (agenttool-tool-surface).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSurface {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// Stable id of the surfaced set.
    pub surface_id: String,
    /// Context in which the surface applies (open).
    pub scope: SurfaceScope,
    /// When it was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Who produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// Tools that can be considered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_refs: Option<Vec<String>>,
    /// Tools whose schemas are visible now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_tools: Option<Vec<Value>>,
    /// Discoverable but not fully loaded tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_tools: Option<Vec<Value>>,
    /// Tools hidden, with machine-readable reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_tools: Option<Vec<Loose<ToolFilter>>>,
    /// Tools removed by role, recursion, feature, model or policy filters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_tools: Option<Vec<Loose<ToolFilter>>>,
    /// How tools may be selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_policy: Option<Object>,
    /// `auto`, `none`, `required`, or a tool-specific hint.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub default_tool_choice: Option<Value>,
    /// Required capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_requirements: Option<Vec<String>>,
    /// Provider support for strict schemas, parallel calls, deferred refs, media.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_capabilities: Option<Object>,
    /// Agent type, coordinator mode, worker or human role constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_constraints: Option<Object>,
    /// Why this surface exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface_reason: Option<String>,
    /// Adjacent policy decisions or constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_refs: Option<Vec<String>>,
    /// Runtime, session, task or sandbox refs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_refs: Option<Vec<String>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolSurface {
    scope,
    blocked_tools,
    excluded_tools
});

/// A blocked or excluded tool on a surface. The official schema leaves these objects open; this is the shape
/// the spec describes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFilter {
    /// The tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Machine-readable reason (open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<BlockedReason>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolFilter { reason });

/// A `tool_namespace`: grouping and collision boundary for tools from one domain, server, skill, provider or
/// runtime. No official schema; every field is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolNamespace {
    /// The Agent Tool schema version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    /// The namespace, as declarations name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the namespace groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The domain, server, skill, provider or runtime behind it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Tools in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_refs: Option<Vec<String>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolNamespace {});

/// A `tool_input_contract` (contracts/input-output-contracts). No official schema: a declaration's
/// `input_contract` is any object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputContract {
    /// JSON Schema-compatible model-facing schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_input_schema: Option<Object>,
    /// Runtime schema, with internal fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_input_schema: Option<Object>,
    /// Whether the provider or runtime enforces the schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// Defaults, where safe.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub defaults: Option<Value>,
    /// Examples for model grounding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples: Option<Vec<Value>>,
    /// Fields to redact: the ledger reads an array of property names or JSON Pointers (ingest's
    /// scrubber, ignoring entries that are not strings). Open like the official schema leaves it, so
    /// any value — `null` included — is kept as it came.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub sensitive_fields: Option<Value>,
    /// Fields that must not be model-generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_only_fields: Option<Vec<String>>,
    /// `json`, `text`, `file`, `multipart`, `stream` or `custom` (open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument_mode: Option<ArgumentMode>,
    /// Whether hooks or permission prompts may replace input.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub mutation_policy: Option<Value>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(InputContract { argument_mode });

/// A `tool_output_contract` (contracts/input-output-contracts). No official schema: a declaration's
/// `output_contract` is any object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputContract {
    /// Schema of structured content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_schema: Option<Object>,
    /// Text, image, audio, video, file, log or resource refs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_types: Option<Vec<String>>,
    /// Durable deliverables the tool should produce.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_expectations: Option<Value>,
    /// Largest inline payload in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inline_bytes: Option<Number>,
    /// Largest inline payload in characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inline_chars: Option<Number>,
    /// Preview, persist, redaction and never-persist rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_policy_ref: Option<String>,
    /// Separation of model content, UI rendering and transcript search text.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub rendering_boundary: Option<Value>,
    /// Redaction rules.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub redaction_rules: Option<Value>,
    /// Fallback summary guidance.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub fallback_summary: Option<Value>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(OutputContract {});

/// A `tool_execution_profile`: how a tool runs (agenttool-execution-profile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolExecutionProfile {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The profile's id.
    pub execution_profile_id: String,
    /// Executor kind (open).
    pub execution_kind: ExecutionKind,
    /// Streams progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_progress: Option<bool>,
    /// Can be canceled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_cancel: Option<bool>,
    /// Can resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_resume: Option<bool>,
    /// Can be retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_retries: Option<bool>,
    /// Produces partial results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_partial_results: Option<bool>,
    /// Runs in the background.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_background: Option<bool>,
    /// Produces artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_artifacts: Option<bool>,
    /// Emits context modifiers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supports_context_modifiers: Option<bool>,
    /// Runs sandboxed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandboxed: Option<bool>,
    /// The sandbox profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_profile: Option<String>,
    /// Timeout in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<Number>,
    /// Native protocol ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_mappings: Option<Vec<Loose<ExternalMapping>>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolExecutionProfile {
    execution_kind,
    external_mappings
});

/// A `tool_permission_profile`: risk and access facts (agenttool-permission-profile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPermissionProfile {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The profile's id.
    pub permission_profile_id: String,
    /// Risk level (closed).
    pub risk_level: RiskLevel,
    /// File read, file write, network, browser, credential, payment, external send, code execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_kinds: Option<Vec<String>>,
    /// None, local draft, local persistent, remote mutation, irreversible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_effects: Option<Vec<String>>,
    /// Network scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_scope: Option<String>,
    /// Tenant scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_scope: Option<String>,
    /// Credentials used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_refs: Option<Vec<String>>,
    /// The sandbox profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_profile: Option<String>,
    /// Whether approval is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_required: Option<bool>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_reason: Option<String>,
    /// How permission is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_channel: Option<String>,
    /// Path, command, URL, native operation id or resource id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_matching_fields: Option<Vec<String>>,
    /// Data sensitivity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_sensitivity: Option<String>,
    /// Retention hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_hint: Option<String>,
    /// Whether redaction is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction_required: Option<bool>,
    /// Policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_refs: Option<Vec<String>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolPermissionProfile {});

/// A `tool_permission_decision`: the outcome of one permission check (agenttool-permission-decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPermissionDecision {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The decision's id.
    pub decision_id: String,
    /// The invocation decided on.
    pub invocation_id: String,
    /// `allow`, `ask`, `deny` or `passthrough` (closed).
    pub behavior: PermissionBehavior,
    /// Permission mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Origin of the deciding rule (open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<RuleSource>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Loose<DecisionReason>>,
    /// Rules applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_refs: Option<Vec<String>>,
    /// Policies applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_refs: Option<Vec<String>>,
    /// An input mutation by the decision.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub updated_input: Option<Value>,
    /// A reference to the updated input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input_ref: Option<String>,
    /// Whether the user edited the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_modified: Option<bool>,
    /// Suggested rule or mode updates (not decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_updates: Option<Vec<Object>>,
    /// A classifier check still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_classifier_check: Option<Object>,
    /// The path that was blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_path: Option<String>,
    /// Content shown with the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_blocks: Option<Vec<Object>>,
    /// Feedback given when accepting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_feedback: Option<String>,
    /// When it was decided.
    pub decided_at: String,
    /// When it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolPermissionDecision { source, reason });

/// A `tool_hook` record: one run of a lifecycle extension point (agenttool-hook).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolHook {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The hook's id (the source of its input mutations).
    pub hook_id: String,
    /// Which extension point (closed).
    pub hook_event: HookEvent,
    /// The invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// What the hook matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<Object>,
    /// Messages, progress and the like it emitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<Object>>,
    /// An allow/ask/deny/passthrough hint for the permission resolver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_result: Option<Object>,
    /// An input mutation by the hook.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub updated_input: Option<Value>,
    /// Context appended to the conversation or record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<Vec<Object>>,
    /// A stop request: the invocation becomes `blocked`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Object>,
    /// A protocol-specific output update.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub updated_output: Option<Value>,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolHook {});

/// A `tool_invocation`: one requested or executed tool call (agenttool-invocation).
///
/// A retry is a new invocation naming the earlier one: see [`ToolInvocation::retry_of`] and
/// [`ToolInvocation::attempt`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInvocation {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// Portable invocation id.
    pub invocation_id: String,
    /// The tool.
    pub tool_id: String,
    /// The surface it was selected from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface_id: Option<String>,
    /// The native protocol's call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_call_id: Option<String>,
    /// Lifecycle status (open).
    pub status: InvocationStatus,
    /// Arguments as emitted by the model or caller.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub model_input: Option<Value>,
    /// A reference to them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_input_ref: Option<String>,
    /// Normalized copy visible to hooks, permission UI and transcripts.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub observable_input: Option<Value>,
    /// A reference to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observable_input_ref: Option<String>,
    /// Input evaluated by policy, approval and classifiers.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub permission_input: Option<Value>,
    /// A reference to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_input_ref: Option<String>,
    /// Final input passed to the executor.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub call_input: Option<Value>,
    /// A reference to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_input_ref: Option<String>,
    /// Who asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_ref: Option<String>,
    /// Runtime refs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_refs: Option<Vec<String>>,
    /// Policy refs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_refs: Option<Vec<String>>,
    /// Permission decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_decision_refs: Option<Vec<String>>,
    /// Hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_refs: Option<Vec<String>>,
    /// Evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_refs: Option<Vec<String>>,
    /// Telemetry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_refs: Option<Vec<Object>>,
    /// Artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_refs: Option<Vec<Object>>,
    /// The scheduler policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_policy_ref: Option<String>,
    /// The producer's own transition log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_transitions: Option<Vec<Object>>,
    /// When it was created.
    pub created_at: String,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

impl UnknownValues for ToolInvocation {
    fn collect_unknown(&self, at: &str, out: &mut Vec<UnknownValue>) {
        self.status.collect_unknown(&format!("{at}/status"), out);
        self.error().collect_unknown(&format!("{at}/error"), out);
    }
}

/// An input mutation record (agenttool-input-mutation), as carried in an invocation's `input_mutations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputMutation {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The mutation's id.
    pub mutation_id: String,
    /// The invocation.
    pub invocation_id: String,
    /// `hook`, `permission_prompt`, `adapter`, `migration` or `runtime` (closed).
    pub source_type: MutationSourceType,
    /// The hook, decision or adapter that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
    /// The input before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_input_ref: Option<String>,
    /// The input after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_input_ref: Option<String>,
    /// What changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_fields: Option<Vec<String>>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When.
    pub created_at: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(InputMutation {});

/// A `tool_scheduler_policy`: concurrency, ordering, interrupt, sibling failure and yield policy
/// (agenttool-scheduler-policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchedulerPolicy {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The policy's id.
    pub scheduler_policy_id: String,
    /// Where it applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Most calls at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<Number>,
    /// Result ordering (closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_policy: Option<OrderingPolicy>,
    /// Yield policy (closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yield_policy: Option<YieldPolicy>,
    /// `cancel` or `block` (closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_behavior: Option<InterruptBehavior>,
    /// Sibling failure policy (closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sibling_failure_policy: Option<SiblingFailurePolicy>,
    /// Context modifier policy (closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_modifier_policy: Option<ContextModifierPolicy>,
    /// Locks held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_locks: Option<Vec<Object>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolSchedulerPolicy {});

/// A `deferred_tool_ref`: a discoverable tool whose full schema is not loaded yet (agenttool-deferred-tool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeferredToolRef {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The tool.
    pub tool_id: String,
    /// Its name.
    pub name: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Discovery phrase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_hint: Option<String>,
    /// Where it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Schema visibility (closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_visibility: Option<SchemaVisibility>,
    /// Loading state (closed).
    pub loading_state: LoadingState,
    /// Why it is deferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The provider or server still pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_provider_or_server: Option<String>,
    /// How to select it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_ref: Option<String>,
    /// Native ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_ref: Option<Object>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(DeferredToolRef {});

/// A `tool_progress` record: an ordered progress update (agenttool-progress).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The record's id.
    pub progress_id: String,
    /// The invocation.
    pub invocation_id: String,
    /// Order within the invocation.
    pub sequence: Number,
    /// Progress status (open; its own vocabulary, not an invocation state).
    pub status: ProgressStatus,
    /// Message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<Number>,
    /// Current step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    /// Total steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<Number>,
    /// Elapsed milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<Number>,
    /// Bytes read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_read: Option<Number>,
    /// Bytes written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<Number>,
    /// Lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_count: Option<Number>,
    /// Background task id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Partial results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_result_refs: Option<Vec<String>>,
    /// Artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_refs: Option<Vec<Object>>,
    /// When.
    pub timestamp: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolProgress { status });

/// A `tool_result`: the result envelope of an invocation (agenttool-result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The result's id.
    pub result_id: String,
    /// The invocation.
    pub invocation_id: String,
    /// Result status (open; `denied` implies the invocation is denied).
    pub status: ResultStatus,
    /// Whether it is an error result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Content blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Object>>,
    /// Structured content.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub structured_content: Option<Value>,
    /// What the model receives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_facing_content: Option<Vec<Object>>,
    /// UI summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui_facing_summary: Option<String>,
    /// Resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_refs: Option<Vec<Object>>,
    /// Artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_refs: Option<Vec<Object>>,
    /// Evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_refs: Option<Vec<String>>,
    /// Policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_refs: Option<Vec<String>>,
    /// Telemetry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_refs: Option<Vec<Object>>,
    /// Persistence decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_refs: Option<Vec<String>>,
    /// Summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Redaction state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction_state: Option<String>,
    /// The error, for error results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Loose<ToolError>>,
    /// When.
    pub created_at: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolResult { status, error });

/// A `tool_result_persistence` decision (agenttool-result-persistence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultPersistence {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// The decision's id.
    pub decision_id: String,
    /// The invocation.
    pub invocation_id: String,
    /// The result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_id: Option<String>,
    /// Strategy (closed).
    pub strategy: PersistenceStrategy,
    /// The threshold applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<Object>,
    /// Original size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_size_bytes: Option<Number>,
    /// Preview size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_size_bytes: Option<Number>,
    /// Where the payload was persisted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persisted_ref: Option<Object>,
    /// Redaction state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction_state: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When.
    pub created_at: String,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolResultPersistence {});

/// A `tool_error`: structured failure reason and retry guidance. No official schema: a result's `error` is
/// any object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// Stable error code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Error class (open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
    /// Message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether and how to retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverability: Option<String>,
    /// Retry hint (may be `null`).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_after: Option<Value>,
    /// The native protocol's error.
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub native_error_ref: Option<Value>,
    /// Policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_refs: Option<Vec<String>>,
    /// Evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_refs: Option<Vec<String>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolError { error_class });

/// A `tool_event`: the spec's own event envelope (agenttool-event). Ingest maps it to a CloudEvent (DESIGN.md
/// §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolEvent {
    /// The Agent Tool schema version, `0.2.0` for this draft.
    pub schema_version: String,
    /// Event id (CloudEvents `id`).
    pub event_id: String,
    /// Event class (CloudEvents `type`); see [`ToolEvent::class`].
    pub event_type: String,
    /// Source.
    pub source: String,
    /// Subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Time.
    pub time: String,
    /// The invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The object the class names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Object>,
    /// Trace context refs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_refs: Option<Vec<Object>>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ToolEvent {});

/// A `tool_external_mapping`: native MCP, OpenAPI, provider, CLI, browser, A2A or app ids. No official
/// schema; the native fields (`server_id`, `operation_id`, `tool_call_id`, …) stay in `extra` under their
/// native names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExternalMapping {
    /// The native source, e.g. `mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

unknown_values_in!(ExternalMapping {});

/// A permission decision's `reason` (contracts/permission-decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionReason {
    /// Reason type (open).
    #[serde(rename = "type")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_type: Option<DecisionReasonType>,
    /// The rule, for rule reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_ref: Option<String>,
    /// Explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: Object,
}

impl UnknownValues for DecisionReason {
    fn collect_unknown(&self, at: &str, out: &mut Vec<UnknownValue>) {
        self.reason_type.collect_unknown(&format!("{at}/type"), out);
    }
}

impl ToolDeclaration {
    /// The declaration's `version` (DESIGN.md §3: a change makes a new catalog version). Not in the
    /// official schema, so read from `extra`.
    pub fn version(&self) -> Option<&str> {
        self.extra.get("version").and_then(Value::as_str)
    }
}

impl ToolInvocation {
    /// The invocation this one retries (`data.retry_of`; the spec names it, its schema does not).
    pub fn retry_of(&self) -> Option<&str> {
        self.extra.get("retry_of").and_then(Value::as_str)
    }

    /// Which attempt this is, counting from 1 (`data.attempt`), when given as a whole number.
    pub fn attempt(&self) -> Option<u64> {
        self.extra.get("attempt").and_then(Value::as_u64)
    }

    /// The session the invocation belongs to (`data.session_id`), when given.
    pub fn session_id(&self) -> Option<&str> {
        self.extra.get("session_id").and_then(Value::as_str)
    }

    /// The error an invocation carries on `validation_failed` or `failed` (`data.error`), when it is an
    /// object of the `tool_error` shape.
    pub fn error(&self) -> Option<ToolError> {
        let value = self.extra.get("error")?;
        ToolError::deserialize(value).ok()
    }

    /// The official input-mutation objects carried in `data.input_mutations`. Entries that are not
    /// valid input mutations are skipped; the raw array stays in `extra`.
    pub fn input_mutations(&self) -> Vec<InputMutation> {
        match self.extra.get("input_mutations") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| InputMutation::deserialize(item).ok())
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl ToolEvent {
    /// The event class `event_type` names.
    pub fn class(&self) -> Result<EventClass, UnknownClass> {
        self.event_type.parse()
    }
}
