//! The spec's vocabularies, open and closed (DESIGN.md §3 "Open and closed vocabularies").
//!
//! A **closed** vocabulary is one the official schemas close with `enum`: a value outside it is not valid
//! under the schema, so it fails to decode here and ingest quarantines it as `schema_violation`.
//!
//! An **open** vocabulary is a field the official schemas leave a plain string while the spec lists
//! "initial values": known values decode to a variant, anything else to `Other(String)`, kept verbatim
//! and serialized back byte for byte. `Other` values surface as `unknown_value` anomalies through
//! [`super::UnknownValues`]. `from_wire` never produces `Other` for a listed value, so an `Other` always
//! means "outside the list"; build values with `from_wire` rather than by hand.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Defines an open vocabulary: typed initial values plus `Other(String)`.
macro_rules! open_vocabulary {
    (
        $(#[$meta:meta])*
        $name:ident, $vocab:literal {
            $($variant:ident => $wire:literal, $doc:literal;)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $(#[doc = $doc] $variant,)*
            /// A value outside the initial list, kept verbatim (an `unknown_value` anomaly).
            Other(String),
        }

        impl $name {
            /// The vocabulary's name, as anomalies report it.
            pub const VOCABULARY: &'static str = $vocab;

            /// The initial values the spec lists, in its order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant,)*];

            /// Decodes a wire value; anything outside the list becomes `Other`.
            pub fn from_wire(value: &str) -> Self {
                match value {
                    $($wire => $name::$variant,)*
                    other => $name::Other(other.to_owned()),
                }
            }

            /// The wire value, exactly as it was received for `Other`.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $wire,)*
                    $name::Other(value) => value,
                }
            }

            /// Whether this value is outside the spec's initial list.
            pub fn is_other(&self) -> bool {
                matches!(self, $name::Other(_))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self::from_wire(value)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
                Ok(Self::from_wire(&value))
            }
        }

        impl super::UnknownValues for $name {
            fn collect_unknown(&self, at: &str, out: &mut Vec<super::UnknownValue>) {
                if let $name::Other(value) = self {
                    out.push(super::UnknownValue {
                        path: at.to_owned(),
                        vocabulary: Self::VOCABULARY.to_owned(),
                        value: value.clone(),
                    });
                }
            }
        }
    };
}

/// Defines a closed vocabulary: exactly the values of an official schema's `enum`.
macro_rules! closed_vocabulary {
    (
        $(#[$meta:meta])*
        $name:ident {
            $($variant:ident => $wire:literal, $doc:literal;)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $(#[doc = $doc] #[serde(rename = $wire)] $variant,)*
        }

        impl $name {
            /// Every value the official schema allows, in its order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The wire value.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)*
                }
            }

            /// Decodes a wire value; `None` outside the schema's enum.
            pub fn from_wire(value: &str) -> Option<Self> {
                match value {
                    $($wire => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------------
// Closed: the official schemas' `enum`s.

closed_vocabulary! {
    /// A declaration's `lifecycle` (agenttool-tool-declaration).
    Lifecycle {
        Draft => "draft", "Being designed.";
        Available => "available", "Can be selected and invoked.";
        Disabled => "disabled", "Exists but is not selectable in the current context.";
        RequiresSetup => "requires_setup", "Needs credentials, project binding, server startup or setup.";
        Deferred => "deferred", "Discoverable, but its full schema is not loaded into the model context.";
        Deprecated => "deprecated", "Kept for compatibility; should not be newly selected.";
        Retired => "retired", "Identity kept only for historical refs.";
    }
}

closed_vocabulary! {
    /// A permission decision's `behavior` (agenttool-permission-decision).
    PermissionBehavior {
        Allow => "allow", "The call may proceed.";
        Ask => "ask", "A user, coordinator, policy tool or external authority must be asked.";
        Deny => "deny", "The call must not execute.";
        Passthrough => "passthrough", "Final resolution is delegated to another policy layer.";
    }
}

closed_vocabulary! {
    /// A hook's `hook_event` (agenttool-hook).
    HookEvent {
        PreToolUse => "pre_tool_use", "Before the tool runs.";
        PostToolUse => "post_tool_use", "After the tool ran.";
        PostToolUseFailure => "post_tool_use_failure", "After the tool failed.";
        PermissionRequest => "permission_request", "When permission is requested.";
        PermissionDecision => "permission_decision", "When permission is decided.";
        ResultPersistence => "result_persistence", "When result persistence is decided.";
    }
}

closed_vocabulary! {
    /// A deferred tool's `loading_state` (agenttool-deferred-tool).
    LoadingState {
        Loaded => "loaded", "The full schema is loaded.";
        Deferred => "deferred", "Known, schema not loaded.";
        Discoverable => "discoverable", "Can be found by search.";
        PendingProvider => "pending_provider", "Its provider or server is still starting.";
        Unavailable => "unavailable", "Cannot be loaded.";
    }
}

closed_vocabulary! {
    /// `schema_visibility` (agenttool-tool-interface, agenttool-deferred-tool).
    SchemaVisibility {
        Loaded => "loaded", "The schema is in the model context.";
        Deferred => "deferred", "The schema is sent only after discovery.";
        Internal => "internal", "The schema is never model-facing.";
        NativeRef => "native_ref", "The schema lives in the native protocol.";
    }
}

closed_vocabulary! {
    /// A result persistence decision's `strategy` (agenttool-result-persistence).
    PersistenceStrategy {
        Inline => "inline", "Kept inline.";
        PreviewAndPersist => "preview_and_persist", "A preview inline, the full payload persisted.";
        RefOnly => "ref_only", "Only a reference is kept.";
        Redact => "redact", "Redacted.";
        DropWithReason => "drop_with_reason", "Dropped, with a reason.";
        NeverPersist => "never_persist", "Never persisted.";
    }
}

closed_vocabulary! {
    /// An input mutation's `source_type` (agenttool-input-mutation).
    MutationSourceType {
        Hook => "hook", "A hook rewrote the input.";
        PermissionPrompt => "permission_prompt", "A permission prompt rewrote the input.";
        Adapter => "adapter", "A protocol adapter rewrote the input.";
        Migration => "migration", "A schema migration rewrote the input.";
        Runtime => "runtime", "The runtime rewrote the input.";
    }
}

closed_vocabulary! {
    /// A permission profile's `risk_level` (agenttool-permission-profile).
    RiskLevel {
        Low => "low", "Low risk.";
        Medium => "medium", "Medium risk.";
        High => "high", "High risk.";
        Critical => "critical", "Critical risk.";
    }
}

closed_vocabulary! {
    /// A scheduler policy's `ordering_policy` (agenttool-scheduler-policy).
    OrderingPolicy {
        PreserveTerminalOrder => "preserve_terminal_order", "Terminal results keep call order.";
        AllowUnordered => "allow_unordered", "Results may arrive in any order.";
        Serial => "serial", "One at a time.";
    }
}

closed_vocabulary! {
    /// A scheduler policy's `yield_policy` (agenttool-scheduler-policy).
    YieldPolicy {
        ProgressImmediateResultsOrdered => "progress_immediate_results_ordered",
            "Early progress, ordered results.";
        AllOrdered => "all_ordered", "Everything keeps order.";
        UnorderedStreaming => "unordered_streaming", "Everything streams as it comes.";
    }
}

closed_vocabulary! {
    /// A scheduler policy's `interrupt_behavior` (agenttool-scheduler-policy).
    InterruptBehavior {
        Cancel => "cancel", "An interrupt cancels the call.";
        Block => "block", "An interrupt waits for the call.";
    }
}

closed_vocabulary! {
    /// A scheduler policy's `sibling_failure_policy` (agenttool-scheduler-policy).
    SiblingFailurePolicy {
        Ignore => "ignore", "Siblings keep running.";
        CancelSiblings => "cancel_siblings", "All siblings are canceled.";
        CancelDependent => "cancel_dependent", "Only dependent siblings are canceled.";
    }
}

closed_vocabulary! {
    /// A scheduler policy's `context_modifier_policy` (agenttool-scheduler-policy).
    ContextModifierPolicy {
        AllowSerialOnly => "allow_serial_only", "Context modifiers only for serial calls.";
        DeferUntilBatchComplete => "defer_until_batch_complete", "Applied once the batch completes.";
        Forbid => "forbid", "Not allowed.";
    }
}

// ---------------------------------------------------------------------------------------------------
// Open: plain strings in the official schemas, "initial values" in the spec.

open_vocabulary! {
    /// An invocation's `status`: the spec's 20 invocation lifecycle states.
    InvocationStatus, "invocation_status" {
        Planned => "planned", "Planned.";
        Selected => "selected", "The tool was selected.";
        SchemaParseFailed => "schema_parse_failed", "The model input did not parse against the schema.";
        ArgumentsReady => "arguments_ready", "Arguments parsed.";
        ValidationFailed => "validation_failed", "Validation failed (terminal).";
        PreHooksRunning => "pre_hooks_running", "Pre-tool hooks are running.";
        AwaitingApproval => "awaiting_approval", "Waiting for a permission decision.";
        Approved => "approved", "Permission granted.";
        Denied => "denied", "Permission denied (terminal).";
        Queued => "queued", "Queued by the scheduler.";
        Running => "running", "Executing.";
        NeedsInput => "needs_input", "Waiting for input.";
        PartialResult => "partial_result", "A partial result was produced.";
        PostHooksRunning => "post_hooks_running", "Post-tool hooks are running.";
        Yielded => "yielded", "Yielded.";
        Succeeded => "succeeded", "Succeeded (terminal).";
        Failed => "failed", "Failed (terminal).";
        Canceled => "canceled", "Canceled (terminal).";
        TimedOut => "timed_out", "Timed out (terminal).";
        Blocked => "blocked", "Blocked by a hook (terminal).";
    }
}

open_vocabulary! {
    /// A declaration's `tool_kind`: the spec's 17 initial tool kinds.
    ToolKind, "tool_kind" {
        Function => "function", "A function-calling tool.";
        McpTool => "mcp_tool", "An MCP tool.";
        OpenapiOperation => "openapi_operation", "An OpenAPI operation.";
        NativeTool => "native_tool", "A native runtime tool.";
        BrowserAction => "browser_action", "A browser action.";
        ShellCommand => "shell_command", "A shell command.";
        CodeExecution => "code_execution", "Code execution.";
        FileOperation => "file_operation", "A file operation.";
        WebSearch => "web_search", "Web search.";
        Retrieval => "retrieval", "Retrieval.";
        ModelTask => "model_task", "A model task.";
        SkillTool => "skill_tool", "A skill's tool.";
        PeerAgentTool => "peer_agent_tool", "A peer agent's capability.";
        PolicyCheck => "policy_check", "A policy check.";
        ArtifactOperation => "artifact_operation", "An artifact operation.";
        EvidenceExport => "evidence_export", "An evidence export.";
        Custom => "custom", "A compatibility fallback.";
    }
}

open_vocabulary! {
    /// A tool error's `error_class`: the spec's 22 initial error classes.
    ErrorClass, "error_class" {
        UnknownTool => "unknown_tool", "The tool does not exist.";
        InvalidArguments => "invalid_arguments", "Values failed tool-specific validation.";
        SchemaValidationFailed => "schema_validation_failed", "Arguments failed schema validation.";
        SchemaNotLoaded => "schema_not_loaded", "The tool is deferred and its schema was not loaded.";
        PermissionDenied => "permission_denied", "Permission was denied.";
        ApprovalRejected => "approval_rejected", "A human rejected approval.";
        PolicyBlocked => "policy_blocked", "Policy blocked the call.";
        HookBlocked => "hook_blocked", "A hook blocked the call.";
        CapabilityGap => "capability_gap", "A required capability is missing.";
        SetupRequired => "setup_required", "Setup is missing.";
        CredentialMissing => "credential_missing", "Credentials are missing.";
        SandboxViolation => "sandbox_violation", "A sandbox was violated.";
        Timeout => "timeout", "The call timed out.";
        RateLimited => "rate_limited", "Rate limited.";
        DependencyUnavailable => "dependency_unavailable", "A dependency or network failed.";
        ExecutionFailed => "execution_failed", "Execution failed inside the tool.";
        PartialFailure => "partial_failure", "Part of the work failed.";
        ResultTooLarge => "result_too_large", "The result is too large.";
        ResultRedacted => "result_redacted", "The result was redacted.";
        SiblingCanceled => "sibling_canceled", "A sibling failure canceled this call.";
        StreamingFallbackDiscarded => "streaming_fallback_discarded",
            "A streaming fallback discarded the call.";
        Canceled => "canceled", "The call was canceled.";
    }
}

open_vocabulary! {
    /// A result's `status` (contracts/result-envelope: "Result status").
    ResultStatus, "result_status" {
        Succeeded => "succeeded", "Succeeded.";
        PartialSucceeded => "partial_succeeded", "Partly succeeded.";
        Failed => "failed", "Failed.";
        Denied => "denied", "Permission denied; implies the invocation is denied.";
        Rejected => "rejected", "Approval rejected.";
        Redacted => "redacted", "Redacted.";
        TooLarge => "too_large", "Too large.";
        Canceled => "canceled", "Canceled.";
        TimedOut => "timed_out", "Timed out.";
        SyntheticError => "synthetic_error", "A synthetic error result.";
        Discarded => "discarded", "Discarded.";
    }
}

open_vocabulary! {
    /// A progress record's `status` (contracts/progress-and-cancellation: "Progress classes").
    ///
    /// `needs_input` is not in the spec's list; DESIGN.md §3 names it as the progress status that moves
    /// an invocation to `needs_input`, so it is typed rather than reported as unknown.
    ProgressStatus, "progress_status" {
        Queued => "queued", "Queued.";
        Started => "started", "Started.";
        Running => "running", "Running.";
        WaitingForPermission => "waiting_for_permission", "Waiting for permission.";
        WaitingForInput => "waiting_for_input", "Waiting for input (moves the invocation to needs_input).";
        Backgrounded => "backgrounded", "Moved to the background.";
        PartialResult => "partial_result", "A partial result is available.";
        Completed => "completed", "Completed.";
        Failed => "failed", "Failed.";
        Canceled => "canceled", "Canceled.";
        NeedsInput => "needs_input", "Needs input (DESIGN.md §3; moves the invocation to needs_input).";
    }
}

open_vocabulary! {
    /// An execution profile's `execution_kind` (contracts/execution-profile: "Execution kinds").
    ExecutionKind, "execution_kind" {
        McpServer => "mcp_server", "An MCP server.";
        HttpApi => "http_api", "An HTTP API.";
        NativeApp => "native_app", "A native app.";
        LocalProcess => "local_process", "A local process.";
        Shell => "shell", "A shell.";
        Browser => "browser", "A browser.";
        ModelService => "model_service", "A model service.";
        PeerAgent => "peer_agent", "A peer agent.";
        EmbeddedRuntime => "embedded_runtime", "An embedded runtime.";
        Hybrid => "hybrid", "A mix.";
    }
}

open_vocabulary! {
    /// A permission decision reason's `type` (contracts/permission-decision: "Decision reasons").
    DecisionReasonType, "decision_reason_type" {
        Rule => "rule", "A permission rule.";
        Mode => "mode", "The permission mode.";
        Policy => "policy", "A policy.";
        Hook => "hook", "A hook.";
        Classifier => "classifier", "A safety classifier.";
        WorkingDir => "working_dir", "The working directory.";
        SandboxOverride => "sandbox_override", "A sandbox override.";
        SafetyCheck => "safety_check", "A safety check.";
        PermissionPromptTool => "permission_prompt_tool", "A permission prompt tool.";
        AsyncAgent => "async_agent", "An asynchronous agent.";
        SubcommandResults => "subcommand_results", "Results of subcommands.";
        OtherReason => "other", "The spec's own `other` reason (a listed value, not an unknown one).";
    }
}

open_vocabulary! {
    /// A permission decision's `source`, the rule's origin (contracts/permission-decision: "Rule sources").
    RuleSource, "rule_source" {
        UserSettings => "user_settings", "User settings.";
        ProjectSettings => "project_settings", "Project settings.";
        LocalSettings => "local_settings", "Local settings.";
        FlagSettings => "flag_settings", "Flag settings.";
        PolicySettings => "policy_settings", "Policy settings.";
        CliArg => "cli_arg", "A command-line argument.";
        Command => "command", "A command.";
        Session => "session", "The session.";
    }
}

open_vocabulary! {
    /// A surface's `scope` (contracts/tool-surface).
    SurfaceScope, "surface_scope" {
        Turn => "turn", "One turn.";
        Task => "task", "One task.";
        Session => "session", "One session.";
        Tenant => "tenant", "One tenant.";
        Skill => "skill", "One skill.";
        PeerAgent => "peer_agent", "One peer agent.";
        Workspace => "workspace", "One workspace.";
        Role => "role", "One role.";
        ModelRequest => "model_request", "One model request.";
    }
}

open_vocabulary! {
    /// An input contract's `argument_mode` (contracts/input-output-contracts).
    ArgumentMode, "argument_mode" {
        Json => "json", "JSON arguments.";
        Text => "text", "Text arguments.";
        File => "file", "A file.";
        Multipart => "multipart", "Multipart.";
        Stream => "stream", "A stream.";
        Custom => "custom", "Something else.";
    }
}

open_vocabulary! {
    /// A surface's blocked or excluded tool `reason` (specification: "Tool surface").
    BlockedReason, "blocked_reason" {
        PolicyBlocked => "policy_blocked", "Policy blocked it.";
        CredentialMissing => "credential_missing", "Credentials are missing.";
        SetupRequired => "setup_required", "Setup is required.";
        ModelUnsupported => "model_unsupported", "The model does not support it.";
        RecursiveToolForbidden => "recursive_tool_forbidden", "Recursive agent tools are forbidden here.";
        RoleNotAllowed => "role_not_allowed", "The role may not use it.";
        FeatureDisabled => "feature_disabled", "A feature gate is off.";
        DeferredUntilDiscovered => "deferred_until_discovered", "Deferred until discovered.";
    }
}
