//! The tool catalog the generated agent platform offers, its declarations and its surfaces.

use serde_json::{Value, json};

use super::{DeferredTruth, Gen, SCHEMA_VERSION, Session, SurfaceTruth, ToolTruth};
use crate::class::EventClass;

/// One tool of the catalog.
pub(super) struct Tool {
    pub id: &'static str,
    pub namespace: &'static str,
    pub name: &'static str,
    pub kind: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub search_hint: &'static str,
    /// Lifecycle in the first declaration.
    pub lifecycle: &'static str,
    /// Property names or JSON Pointers the input contract lists as sensitive.
    pub sensitive: &'static [&'static str],
    pub risk: &'static str,
    pub timeout_ms: i64,
}

pub(super) const READ_FILE: &str = "fs.read_file";
pub(super) const WRITE_FILE: &str = "fs.write_file";
pub(super) const SHELL: &str = "shell.run";
pub(super) const HTTP: &str = "http.request";
pub(super) const SEARCH: &str = "web.search";
pub(super) const DB: &str = "db.query";
pub(super) const IMAGE: &str = "image.generate";
pub(super) const GITHUB: &str = "github.create_issue";
pub(super) const ADMIN: &str = "admin.delete_user";
pub(super) const FTP: &str = "ftp.upload";
/// Declared only when anomalies are planted: its `tool_kind` is outside the spec's initial values.
pub(super) const ORACLE: &str = "lab.oracle";

pub(super) const TOOLS: &[Tool] = &[
    Tool {
        id: READ_FILE,
        namespace: "fs",
        name: "read_file",
        kind: "file_operation",
        title: "Read file",
        description: "Read a UTF-8 text file inside the workspace. Use for source files and logs.",
        search_hint: "read workspace text file contents",
        lifecycle: "available",
        sensitive: &[],
        risk: "low",
        timeout_ms: 10_000,
    },
    Tool {
        id: WRITE_FILE,
        namespace: "fs",
        name: "write_file",
        kind: "file_operation",
        title: "Write file",
        description: "Create or overwrite a file inside the workspace. Requires approval.",
        search_hint: "write or overwrite workspace file",
        lifecycle: "available",
        sensitive: &[],
        risk: "high",
        timeout_ms: 10_000,
    },
    Tool {
        id: SHELL,
        namespace: "shell",
        name: "run",
        kind: "shell_command",
        title: "Run shell command",
        description: "Run a command in the sandboxed workspace shell and return stdout, stderr and exit code.",
        search_hint: "run sandboxed shell command",
        lifecycle: "available",
        sensitive: &["/env/DEPLOY_TOKEN"],
        risk: "high",
        timeout_ms: 120_000,
    },
    Tool {
        id: HTTP,
        namespace: "http",
        name: "request",
        kind: "openapi_operation",
        title: "HTTP request",
        description: "Call the billing API. Pass the API key in api_key; headers are forwarded.",
        search_hint: "call billing http api endpoint",
        lifecycle: "available",
        sensitive: &["api_key", "/headers/authorization"],
        risk: "medium",
        timeout_ms: 30_000,
    },
    Tool {
        id: SEARCH,
        namespace: "web",
        name: "search",
        kind: "web_search",
        title: "Web search",
        description: "Search the web and return ranked results with snippets.",
        search_hint: "search the public web",
        lifecycle: "available",
        sensitive: &[],
        risk: "low",
        timeout_ms: 20_000,
    },
    Tool {
        id: DB,
        namespace: "db",
        name: "query",
        kind: "retrieval",
        title: "Query database",
        description: "Run a read-only SQL query against the analytics replica.",
        search_hint: "run read only sql query",
        lifecycle: "available",
        sensitive: &["connection_string"],
        risk: "medium",
        timeout_ms: 30_000,
    },
    Tool {
        id: IMAGE,
        namespace: "media",
        name: "generate_image",
        kind: "model_task",
        title: "Generate image",
        description: "Generate an image from a prompt; long-running, reports progress.",
        search_hint: "generate image from text prompt",
        lifecycle: "available",
        sensitive: &[],
        risk: "low",
        timeout_ms: 300_000,
    },
    Tool {
        id: GITHUB,
        namespace: "mcp.github",
        name: "create_issue",
        kind: "mcp_tool",
        title: "Create GitHub issue",
        description: "Create an issue in a GitHub repository through the GitHub MCP server.",
        search_hint: "create github repository issue",
        lifecycle: "deferred",
        sensitive: &[],
        risk: "medium",
        timeout_ms: 30_000,
    },
    Tool {
        id: ADMIN,
        namespace: "admin",
        name: "delete_user",
        kind: "native_tool",
        title: "Delete user",
        description: "Delete a user account and all its data.",
        search_hint: "delete user account",
        lifecycle: "available",
        sensitive: &[],
        risk: "critical",
        timeout_ms: 30_000,
    },
    Tool {
        id: FTP,
        namespace: "legacy",
        name: "ftp_upload",
        kind: "function",
        title: "FTP upload",
        description: "Upload a file to the legacy FTP server.",
        search_hint: "upload file over ftp",
        lifecycle: "deprecated",
        sensitive: &[],
        risk: "medium",
        timeout_ms: 60_000,
    },
];

pub(super) fn tool(id: &str) -> &'static Tool {
    TOOLS.iter().find(|t| t.id == id).unwrap_or(&TOOLS[0])
}

fn input_schema(id: &str) -> Value {
    let props = match id {
        READ_FILE => json!({"path": {"type": "string"}, "max_bytes": {"type": "integer"}}),
        WRITE_FILE => json!({"path": {"type": "string"}, "content": {"type": "string"}}),
        SHELL => json!({"command": {"type": "string"}, "cwd": {"type": "string"}, "env": {"type": "object"}}),
        HTTP => {
            json!({"method": {"type": "string"}, "url": {"type": "string"}, "headers": {"type": "object"},
            "api_key": {"type": "string"}, "body": {}})
        }
        SEARCH => json!({"query": {"type": "string"}, "max_results": {"type": "integer"}}),
        DB => json!({"sql": {"type": "string"}, "connection_string": {"type": "string"}}),
        IMAGE => json!({"prompt": {"type": "string"}, "size": {"type": "string"}}),
        GITHUB => {
            json!({"repo": {"type": "string"}, "title": {"type": "string"}, "body": {"type": "string"}})
        }
        _ => json!({}),
    };
    json!({"type": "object", "properties": props, "additionalProperties": false})
}

/// A declaration of `t` at `version`.
pub(super) fn declaration(t: &Tool, version: &str, lifecycle: &str, kind: &str) -> Value {
    let mut d = json!({
        "schema_version": SCHEMA_VERSION,
        "tool_id": t.id,
        "namespace": t.namespace,
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "search_hint": t.search_hint,
        "lifecycle": lifecycle,
        "tool_kind": kind,
        "version": version,
        "capability_refs": [format!("capability:{}", t.namespace)],
        "input_contract": {
            "model_input_schema": input_schema(t.id),
            "strict": true,
            "argument_mode": "json",
            "sensitive_fields": t.sensitive,
            "internal_only_fields": [],
            "mutation_policy": "hooks_and_permission_prompts",
        },
        "output_contract": {"content_types": ["text"], "max_inline_chars": 32_000,
            "persistence_policy_ref": "persist:default"},
        "interface_ref": format!("iface:{}", t.id),
        "execution_profile_ref": format!("exec:{}", t.kind),
        "permission_profile_ref": format!("permprof:{}:{}", t.id, t.risk),
        "annotations": {"risk": t.risk, "timeout_ms": t.timeout_ms},
    });
    if t.id == GITHUB {
        d["external_mappings"] = json!([{"protocol": "mcp", "server_id": "github",
            "tool_name": "create_issue", "mcp_protocol_version": "2025-06-18"}]);
    }
    d
}

impl Gen {
    /// Declares the whole catalog of a tenant at `time`.
    pub(super) fn declare_catalog(&mut self, tenant: &str, time: i64) {
        let mut time = time;
        for t in TOOLS {
            time += 3;
            let d = declaration(t, "1.0.0", t.lifecycle, t.kind);
            self.emit_catalog(time, tenant, t.id, d);
            self.truth.tools.push(ToolTruth {
                tenant: tenant.to_owned(),
                tool_id: t.id.to_owned(),
                versions: vec!["1.0.0".to_owned()],
                lifecycle: t.lifecycle.to_owned(),
                sensitive_fields: t.sensitive.iter().map(|s| (*s).to_owned()).collect(),
            });
        }
        if self.plant_anomalies {
            time += 3;
            let oracle = Tool {
                id: ORACLE,
                namespace: "lab",
                name: "oracle",
                kind: "quantum_oracle",
                title: "Oracle",
                description: "Experimental.",
                search_hint: "experimental oracle",
                lifecycle: "draft",
                sensitive: &[],
                risk: "low",
                timeout_ms: 1_000,
            };
            let id = self.emit_catalog(
                time,
                tenant,
                ORACLE,
                declaration(&oracle, "0.1.0", "draft", "quantum_oracle"),
            );
            self.truth.tools.push(ToolTruth {
                tenant: tenant.to_owned(),
                tool_id: ORACLE.to_owned(),
                versions: vec!["0.1.0".to_owned()],
                lifecycle: "draft".to_owned(),
                sensitive_fields: Vec::new(),
            });
            self.truth.anomalies.push(super::PlantedAnomaly {
                kind: "unknown_value".to_owned(),
                invocation_id: None,
                event_id: id,
            });
        }
    }

    /// Declares a new version of a tool mid-session (not a session event: no `sessionid`).
    pub(super) fn redeclare(&mut self, s: &mut Session, tool_id: &str, version: &str) {
        s.wait(self, 50, 500);
        let t = tool(tool_id);
        let mut d = declaration(t, version, "available", t.kind);
        d["aliases"] = json!([format!("{}_v1", t.name)]);
        d["description"] = json!(format!("{} Now supports byte ranges.", t.description));
        self.emit_catalog(s.clock, &s.tenant, t.id, d);
        if let Some(tt) = self
            .truth
            .tools
            .iter_mut()
            .find(|x| x.tenant == s.tenant && x.tool_id == tool_id)
        {
            tt.versions.push(version.to_owned());
            tt.lifecycle = "available".to_owned();
        }
    }

    /// Publishes a session's surface (created, or an update when the deferred tool was loaded).
    pub(super) fn surface(&mut self, s: &mut Session, github_loaded: bool) {
        let mut loaded: Vec<&str> = vec![READ_FILE, WRITE_FILE, SHELL, HTTP, SEARCH, DB, IMAGE];
        let mut deferred = vec![json!({"tool_id": GITHUB, "name": "create_issue",
            "reason": "deferred_until_discovered", "search_hint": tool(GITHUB).search_hint})];
        if github_loaded {
            loaded.push(GITHUB);
            deferred.clear();
        }
        let blocked = [(ADMIN, "policy_blocked")];
        let excluded = [(FTP, "model_unsupported")];
        let data = json!({
            "schema_version": SCHEMA_VERSION,
            "surface_id": s.surface_id,
            "scope": "session",
            "created_at": s.now(),
            "producer": "agent-runtime/surface-builder",
            "tool_refs": TOOLS.iter().map(|t| t.id).collect::<Vec<_>>(),
            "loaded_tools": loaded,
            "deferred_tools": deferred,
            "blocked_tools": blocked.iter().map(|(t, r)| json!({"tool_id": t, "reason": r,
                "policy_ref": "policy:no-account-deletion"})).collect::<Vec<_>>(),
            "excluded_tools": excluded.iter().map(|(t, r)| json!({"tool_id": t, "reason": r,
                "detail": "tool is deprecated and not offered to this model"})).collect::<Vec<_>>(),
            "selection_policy": {"mode": "auto", "max_loaded": 16},
            "default_tool_choice": "auto",
            "model_capabilities": {"parallel_tool_calls": true, "strict_schemas": true},
            "surface_reason": if github_loaded { "deferred tool loaded" } else { "session start" },
            "policy_refs": ["policy:no-account-deletion"],
        });
        let class = if github_loaded {
            EventClass::SurfaceUpdated
        } else {
            EventClass::SurfaceCreated
        };
        let surface_id = s.surface_id.clone();
        self.emit(s, class, &surface_id, super::Ext::default(), data);
        let truth = SurfaceTruth {
            tenant: s.tenant.clone(),
            surface_id: surface_id.clone(),
            revisions: 1,
            loaded: loaded.iter().map(|t| (*t).to_owned()).collect(),
            deferred: if github_loaded {
                vec![]
            } else {
                vec![GITHUB.to_owned()]
            },
            blocked: blocked
                .iter()
                .map(|(t, r)| ((*t).to_owned(), (*r).to_owned()))
                .collect(),
            excluded: excluded
                .iter()
                .map(|(t, r)| ((*t).to_owned(), (*r).to_owned()))
                .collect(),
        };
        match self
            .truth
            .surfaces
            .iter_mut()
            .find(|x| x.surface_id == surface_id)
        {
            Some(existing) => {
                let revisions = existing.revisions + 1;
                *existing = SurfaceTruth { revisions, ..truth };
            }
            None => self.truth.surfaces.push(truth),
        }
    }

    /// Discovers and loads the deferred MCP tool, then updates the surface.
    pub(super) fn load_deferred(&mut self, s: &mut Session) {
        let t = tool(GITHUB);
        for (class, state, visibility) in [
            (EventClass::DeferredDiscovered, "discoverable", "deferred"),
            (EventClass::DeferredLoaded, "loaded", "loaded"),
        ] {
            s.wait(self, 80, 900);
            let data = json!({
                "schema_version": SCHEMA_VERSION,
                "tool_id": t.id,
                "name": t.name,
                "namespace": t.namespace,
                "search_hint": t.search_hint,
                "source": "mcp:github",
                "schema_visibility": visibility,
                "loading_state": state,
                "reason": if state == "loaded" { "selected_by_tool_search" } else { "matched_tool_search" },
                "selection_ref": format!("toolsearch:{}", s.session_id),
                "native_ref": {"server_id": "github", "tool_name": "create_issue"},
            });
            let ext = super::Ext {
                tool: Some(t.id),
                ..Default::default()
            };
            self.emit(s, class, t.id, ext, data);
            let tenant = s.tenant.clone();
            match self
                .truth
                .deferred
                .iter_mut()
                .find(|d| d.tenant == tenant && d.tool_id == t.id)
            {
                Some(d) => d.loading_state = state.to_owned(),
                None => self.truth.deferred.push(DeferredTruth {
                    tenant,
                    tool_id: t.id.to_owned(),
                    loading_state: state.to_owned(),
                }),
            }
        }
        s.wait(self, 10, 80);
        self.surface(s, true);
    }
}
