//! Hand-written sample objects, one valid minimal and one fuller document per kind, with the
//! required fields the spec's schemas name (written here independently of `schemas/`).

use serde_json::{Value, json};
use toolledger_schemas::validate::ObjectKind;

/// A minimal valid object of `kind` and the fields the spec requires of it.
pub fn minimal(kind: ObjectKind) -> (Value, &'static [&'static str]) {
    match kind {
        ObjectKind::ToolDeclaration => (
            json!({"schema_version": "0.2.0", "tool_id": "fs.read", "namespace": "fs", "name": "read",
                "description": "Read a file.", "lifecycle": "available", "tool_kind": "file_operation"}),
            &[
                "schema_version",
                "tool_id",
                "namespace",
                "name",
                "description",
                "lifecycle",
                "tool_kind",
            ],
        ),
        ObjectKind::ToolInterface => (
            json!({"schema_version": "0.2.0", "interface_id": "iface_1", "tool_id": "fs.read"}),
            &["schema_version", "interface_id", "tool_id"],
        ),
        ObjectKind::ToolSurface => (
            json!({"schema_version": "0.2.0", "surface_id": "surf_1", "scope": "session"}),
            &["schema_version", "surface_id", "scope"],
        ),
        ObjectKind::Invocation => (
            json!({"schema_version": "0.2.0", "invocation_id": "inv_1", "tool_id": "fs.read",
                "status": "planned", "created_at": "2026-05-08T00:00:00Z"}),
            &[
                "schema_version",
                "invocation_id",
                "tool_id",
                "status",
                "created_at",
            ],
        ),
        ObjectKind::PermissionProfile => (
            json!({"schema_version": "0.2.0", "permission_profile_id": "pp_1", "risk_level": "high"}),
            &["schema_version", "permission_profile_id", "risk_level"],
        ),
        ObjectKind::PermissionDecision => (
            json!({"schema_version": "0.2.0", "decision_id": "perm_1", "invocation_id": "inv_1",
                "behavior": "deny", "decided_at": "2026-05-08T00:00:00Z"}),
            &[
                "schema_version",
                "decision_id",
                "invocation_id",
                "behavior",
                "decided_at",
            ],
        ),
        ObjectKind::InputMutation => (
            json!({"schema_version": "0.2.0", "mutation_id": "mut_1", "invocation_id": "inv_1",
                "source_type": "hook", "created_at": "2026-05-08T00:00:00Z"}),
            &[
                "schema_version",
                "mutation_id",
                "invocation_id",
                "source_type",
                "created_at",
            ],
        ),
        ObjectKind::Hook => (
            json!({"schema_version": "0.2.0", "hook_id": "hook_1", "hook_event": "pre_tool_use"}),
            &["schema_version", "hook_id", "hook_event"],
        ),
        ObjectKind::SchedulerPolicy => (
            json!({"schema_version": "0.2.0", "scheduler_policy_id": "sched_1"}),
            &["schema_version", "scheduler_policy_id"],
        ),
        ObjectKind::DeferredTool => (
            json!({"schema_version": "0.2.0", "tool_id": "gh.issue", "name": "create_issue",
                "loading_state": "discoverable"}),
            &["schema_version", "tool_id", "name", "loading_state"],
        ),
        ObjectKind::ToolResult => (
            json!({"schema_version": "0.2.0", "result_id": "res_1", "invocation_id": "inv_1",
                "status": "succeeded", "created_at": "2026-05-08T00:00:00Z"}),
            &[
                "schema_version",
                "result_id",
                "invocation_id",
                "status",
                "created_at",
            ],
        ),
        ObjectKind::ResultPersistence => (
            json!({"schema_version": "0.2.0", "decision_id": "persist_1", "invocation_id": "inv_1",
                "strategy": "ref_only", "created_at": "2026-05-08T00:00:00Z"}),
            &[
                "schema_version",
                "decision_id",
                "invocation_id",
                "strategy",
                "created_at",
            ],
        ),
        ObjectKind::Progress => (
            json!({"schema_version": "0.2.0", "progress_id": "prog_1", "invocation_id": "inv_1",
                "sequence": 1, "status": "running", "timestamp": "2026-05-08T00:00:00Z"}),
            &[
                "schema_version",
                "progress_id",
                "invocation_id",
                "sequence",
                "status",
                "timestamp",
            ],
        ),
        ObjectKind::ExecutionProfile => (
            json!({"schema_version": "0.2.0", "execution_profile_id": "exec_1", "execution_kind": "shell"}),
            &["schema_version", "execution_profile_id", "execution_kind"],
        ),
        ObjectKind::AgentToolEvent => (
            json!({"schema_version": "0.2.0", "event_id": "evt_1", "event_type": "tool.invocation.planned",
                "source": "urn:rt", "time": "2026-05-08T00:00:00Z"}),
            &["schema_version", "event_id", "event_type", "source", "time"],
        ),
        ObjectKind::PermissionRequest => (
            json!({"decision_id": "perm_1", "invocation_id": "inv_1", "permission_input": {"path": "/x"},
                "requested_at": "2026-05-08T00:00:00Z"}),
            // The official schemas define no request, so none of its fields is required: those the
            // ledger expects are `missing_field` anomalies when absent.
            &[],
        ),
        ObjectKind::AccessRead => (
            json!({"access_id": "acc_1", "principal": "token:ops", "endpoint": "GET /v1/invocations/inv_1",
                "tenant": "acme", "invocation_ids": ["inv_1"], "read_at": "2026-05-08T00:00:00Z"}),
            &["access_id", "principal", "endpoint", "tenant", "read_at"],
        ),
        ObjectKind::QuarantineRecorded => (
            json!({"receipt_id": "q_1", "digest": format!("sha256:{}", "ab".repeat(32)), "size_bytes": 512,
                "tenant": "_unroutable", "reason": "unknown_class", "quarantined_at": "2026-05-08T00:00:00Z"}),
            &[
                "receipt_id",
                "digest",
                "size_bytes",
                "tenant",
                "reason",
                "quarantined_at",
            ],
        ),
        ObjectKind::ErasureCompleted => (
            json!({"erasure_id": "er_1", "blob_ids": ["blob_1"], "reason": "data subject request",
                "authority": "DPO ticket 42", "completed_at": "2026-05-08T00:00:00Z"}),
            &["erasure_id", "blob_ids", "reason", "authority", "completed_at"],
        ),
        ObjectKind::PartitionsRecorded => (
            json!({"record_id": "partitions-2", "partitions": 2, "rule": "fnv1a32-mod",
                "layout": [
                    {"partition": 0, "stream": "ATL_LEDGER", "checkpoint_subject": "atl.checkpoints",
                        "origin": "toolledger.example/ledger"},
                    {"partition": 1, "stream": "ATL_LEDGER_P1", "checkpoint_subject": "atl.checkpoints.1",
                        "origin": "toolledger.example/ledger/p1"}],
                "recorded_at": "2026-05-08T00:00:00Z"}),
            &["record_id", "partitions", "rule", "layout", "recorded_at"],
        ),
        other => panic!("no sample for {other:?}"),
    }
}

/// Fuller valid documents, taken in spirit from the spec's examples.
pub fn full() -> Vec<(ObjectKind, Value)> {
    vec![
        (
            ObjectKind::PermissionDecision,
            json!({"schema_version": "0.2.0", "decision_id": "perm_01HZ",
            "invocation_id": "inv_write_secret", "behavior": "deny", "mode": "default", "source": "project_settings",
            "reason": {"type": "rule", "rule_ref": "rule_deny_secrets_dir"}, "blocked_path": "/workspace/.secrets/token.txt",
            "decided_at": "2026-05-08T00:00:00Z", "updated_input": null, "user_modified": false,
            "suggested_updates": [{"rule": "allow"}], "content_blocks": [], "expires_at": "2026-05-09T00:00:00Z"}),
        ),
        (
            ObjectKind::ToolResult,
            json!({"schema_version": "0.2.0", "result_id": "result_write_secret",
            "invocation_id": "inv_write_secret", "status": "denied", "is_error": true,
            "error": {"error_class": "permission_denied", "retry_after": null}, "policy_refs": ["policy:p"],
            "structured_content": [1, "two", null], "created_at": "2026-05-08T00:00:01Z"}),
        ),
        (
            ObjectKind::ResultPersistence,
            json!({"schema_version": "0.2.0", "decision_id": "persist_grep_01",
            "invocation_id": "inv_grep_big", "result_id": "result_grep_big", "strategy": "preview_and_persist",
            "threshold": {"max_inline_chars": 50000}, "original_size_bytes": 481204, "preview_size_bytes": 2048,
            "persisted_ref": {"uri": "agent-runtime://x", "digest": "sha256:example"}, "created_at": "2026-05-08T00:00:00Z"}),
        ),
        (
            ObjectKind::ToolInterface,
            json!({"schema_version": "0.2.0", "interface_id": "i", "tool_id": "t",
            "is_enabled": "feature_flag('x')", "is_read_only": true, "is_concurrency_safe": false,
            "is_destructive": "input.force == true", "is_open_world": false, "schema_visibility": "native_ref",
            "strict": true, "max_inline_chars": 30000, "classifier_input": "rm -rf", "rendering": {}}),
        ),
        (
            ObjectKind::SchedulerPolicy,
            json!({"schema_version": "0.2.0", "scheduler_policy_id": "s",
            "max_parallel": 4, "ordering_policy": "preserve_terminal_order", "yield_policy": "all_ordered",
            "interrupt_behavior": "block", "sibling_failure_policy": "cancel_dependent",
            "context_modifier_policy": "defer_until_batch_complete", "resource_locks": [{"path": "/x"}]}),
        ),
        (
            ObjectKind::Progress,
            json!({"schema_version": "0.2.0", "progress_id": "p", "invocation_id": "i",
            "sequence": 3, "status": "needs_input", "percent": 100, "elapsed_ms": 10, "timestamp": "t",
            "partial_result_refs": ["r1"], "artifact_refs": [{"uri": "a"}]}),
        ),
        (
            ObjectKind::ToolSurface,
            json!({"schema_version": "0.2.0", "surface_id": "s", "scope": "turn",
            "loaded_tools": ["a", {"tool_id": "b"}, 3], "deferred_tools": [{"tool_id": "c"}],
            "blocked_tools": [{"tool_id": "d", "reason": "policy_blocked"}], "default_tool_choice": {"type": "auto"}}),
        ),
        (
            ObjectKind::Hook,
            json!({"schema_version": "0.2.0", "hook_id": "h", "hook_event": "result_persistence",
            "updated_input": "anything", "updated_output": 42, "stop": {"reason": "x"}, "outputs": []}),
        ),
        (
            ObjectKind::DeferredTool,
            json!({"schema_version": "0.2.0", "tool_id": "t", "name": "n",
            "loading_state": "pending_provider", "schema_visibility": "internal", "native_ref": {"x": 1},
            "pending_provider_or_server": "mcp:slack"}),
        ),
        (
            ObjectKind::PermissionProfile,
            json!({"schema_version": "0.2.0", "permission_profile_id": "p",
            "risk_level": "critical", "approval_required": true, "credential_refs": ["cred:x"],
            "redaction_required": false, "unknown_future_field": {"kept": true}}),
        ),
        (
            ObjectKind::ExecutionProfile,
            json!({"schema_version": "0.2.0", "execution_profile_id": "e",
            "execution_kind": "peer_agent", "supports_cancel": false, "timeout_ms": 1000, "sandboxed": true}),
        ),
        (
            ObjectKind::AgentToolEvent,
            json!({"schema_version": "0.2.0", "event_id": "e", "event_type": "tool.declared",
            "source": "s", "time": "t", "data": {"anything": 1}, "trace_refs": [{"traceparent": "00-x"}]}),
        ),
        (
            ObjectKind::Invocation,
            json!({"schema_version": "0.2.0", "invocation_id": "i", "tool_id": "t",
            "status": "some_future_state", "created_at": "c", "model_input": "raw text", "call_input": [1],
            "telemetry_refs": [{}], "status_transitions": [{"from": "planned", "to": "selected"}],
            "retry_of": 17, "attempt": "second"}),
        ),
    ]
}
