//! The scenario script: what each kind of invocation does, event by event, and what it intends.

use rand::Rng;
use rand::seq::SliceRandom;
use serde_json::{Value, json};

use super::catalog::{self, DB, GITHUB, HTTP, IMAGE, READ_FILE, SEARCH, SHELL, Tool, WRITE_FILE};
use super::{
    DecisionTruth, Ext, Gen, HookTruth, Inputs, InvocationTruth, MutationTruth, PlantedAnomaly, ResultTruth,
    SCHEMA_VERSION, Scenario, SecretKind, Session, TransitionTruth,
};
use crate::class::EventClass;

/// Bytes above which a payload is "large" (DESIGN.md §5's default offload threshold).
const LARGE: usize = 32 * 1024;

/// How the arguments turn out.
enum Args {
    Parsed,
    /// The model's argument text does not parse.
    Unparseable(String),
    /// Parsed, but tool validation rejects them with this message.
    Invalid(&'static str),
}

enum PreHook {
    Pass,
    Mutate(Value, Vec<String>),
    Stop(&'static str),
}

enum Exec {
    Succeed,
    Partial(usize),
    NeedsInput,
    Yield,
    Fail(&'static str),
    Timeout,
    Cancel,
}

/// Anomalies a plan may carry on purpose.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plant {
    None,
    StatusMismatch,
    AfterTerminal,
    IllegalTransition,
    OutOfOrder,
    DuplicateResult,
}

struct Plan {
    scenario: Scenario,
    tool: &'static Tool,
    model_input: Value,
    args: Args,
    /// Adapter normalization model_input → observable_input (changed fields).
    normalize: Option<(Value, Vec<String>)>,
    pre_hook: Option<PreHook>,
    /// Permission behaviors in order; the last allow may carry an updated input.
    decisions: Vec<&'static str>,
    allow_update: Option<(Value, Vec<String>)>,
    /// OTC context the runtime injects into call_input (source `runtime`).
    context: Option<Value>,
    exec: Exec,
    progress: usize,
    post_hook: bool,
    large: bool,
    redact: bool,
    retry_of: Option<(String, u32)>,
    plant: Plant,
}

impl Plan {
    fn new(scenario: Scenario, tool_id: &str, model_input: Value) -> Plan {
        Plan {
            scenario,
            tool: catalog::tool(tool_id),
            model_input,
            args: Args::Parsed,
            normalize: None,
            pre_hook: None,
            decisions: Vec::new(),
            allow_update: None,
            context: None,
            exec: Exec::Succeed,
            progress: 0,
            post_hook: false,
            large: false,
            redact: false,
            retry_of: None,
            plant: Plant::None,
        }
    }
}

/// Plays one session: its surface, every scenario once in a seeded order, extra invocations.
pub(super) fn play_session(g: &mut Gen, s: &mut Session, first_of_tenant: bool) {
    g.surface(s, false);
    let mut script = vec![
        Scenario::PlainSuccess,
        Scenario::AskThenAllow,
        Scenario::Denied,
        Scenario::HookMutation,
        Scenario::HookStop,
        Scenario::ValidationFailed,
        Scenario::SchemaParseFailed,
        Scenario::FailedThenRetry,
        Scenario::TimedOut,
        Scenario::Canceled,
        Scenario::Yielded,
        Scenario::NeedsInput,
        Scenario::PartialResults,
        Scenario::LargeResult,
        Scenario::Redacted,
        Scenario::Secrets,
        Scenario::DeferredTool,
    ];
    for _ in 0..g.extra_invocations() {
        script.push(if g.rng.random_bool(0.7) {
            Scenario::PlainSuccess
        } else {
            Scenario::AskThenAllow
        });
    }
    script.shuffle(&mut g.rng);
    for (n, scenario) in script.into_iter().enumerate() {
        // The user thinks, the model answers: a pause between calls.
        s.wait(g, 400, 6_000);
        if first_of_tenant && n == 3 {
            g.redeclare(s, READ_FILE, "1.1.0");
        }
        play(g, s, scenario);
    }
    if first_of_tenant && g.plant_anomalies {
        plant_anomalies(g, s);
    }
}

fn play(g: &mut Gen, s: &mut Session, scenario: Scenario) {
    match scenario {
        Scenario::SchemaParseFailed => {
            let raw = "{\"query\": \"rust tokio select cancel safety\", \"max_results\": 5".to_owned();
            let mut p = Plan::new(scenario, SEARCH, json!(raw.clone()));
            p.args = Args::Unparseable(raw);
            let first = run(g, s, p);
            s.wait(g, 300, 2_000);
            let mut retry = Plan::new(Scenario::Retry, SEARCH, search_input(g));
            retry.retry_of = Some((first, 2));
            retry.progress = 1;
            run(g, s, retry);
        }
        Scenario::FailedThenRetry => {
            let input = json!({"sql": "select region, sum(amount) from orders group by region", "connection_string": "postgres://analytics@replica:5432/shop"});
            let mut p = Plan::new(scenario, DB, input.clone());
            p.exec = Exec::Fail(if g.rng.random_bool(0.5) {
                "rate_limited"
            } else {
                "dependency_unavailable"
            });
            p.progress = 1;
            let first = run(g, s, p);
            s.wait(g, 1_000, 5_000);
            let mut retry = Plan::new(Scenario::Retry, DB, input);
            retry.retry_of = Some((first, 2));
            retry.progress = 1;
            run(g, s, retry);
        }
        Scenario::DeferredTool => {
            g.load_deferred(s);
            s.wait(g, 300, 1_500);
            let input = json!({"repo": "acme/widgets", "title": "Flaky test in ci", "body": "test_resume fails about 1 in 20 runs"});
            let mut p = Plan::new(scenario, GITHUB, input);
            p.decisions = vec!["allow"];
            run(g, s, p);
        }
        _ => {
            let p = plan(g, s, scenario);
            run(g, s, p);
        }
    }
}

fn search_input(g: &mut Gen) -> Value {
    let queries = [
        "rust tokio select cancel safety",
        "sqlite wal checkpoint starvation",
        "nats jetstream dedupe window",
        "rfc 6962 consistency proof",
    ];
    let q = queries[g.rng.random_range(0..queries.len())];
    json!({"query": q, "max_results": g.rng.random_range(3..10)})
}

fn read_input(g: &mut Gen) -> (Value, Value) {
    let files = [
        "src/main.rs",
        "Cargo.toml",
        "docs/design.md",
        "src/lib.rs",
        "tests/replay.rs",
    ];
    let f = files[g.rng.random_range(0..files.len())];
    (
        json!({"path": format!("./{f}")}),
        json!({"path": format!("/workspace/{f}")}),
    )
}

fn plan(g: &mut Gen, s: &Session, scenario: Scenario) -> Plan {
    match scenario {
        Scenario::PlainSuccess | Scenario::Retry => {
            let (model, normalized) = read_input(g);
            let mut p = Plan::new(scenario, READ_FILE, model);
            p.normalize = Some((normalized, vec!["path".to_owned()]));
            p.progress = g.rng.random_range(0..2);
            if g.rng.random_bool(0.5) {
                p.pre_hook = Some(PreHook::Pass);
            }
            p
        }
        Scenario::AskThenAllow => {
            let input =
                json!({"path": "/workspace/src/config.rs", "content": "pub const RETRIES: u32 = 5;\n"});
            let mut p = Plan::new(scenario, WRITE_FILE, input);
            p.decisions = vec!["ask", "allow"];
            p.allow_update = Some((
                json!({"path": "/workspace/src/config.rs", "content": "pub const RETRIES: u32 = 3;\n"}),
                vec!["content".to_owned()],
            ));
            p
        }
        Scenario::Denied => {
            let input = json!({"path": "/workspace/.secrets/token.txt", "content": "rotated"});
            let mut p = Plan::new(scenario, WRITE_FILE, input);
            p.decisions = vec!["deny"];
            p
        }
        Scenario::HookMutation => {
            let token = g.secret(SecretKind::SensitiveField, &s.tenant);
            let input = json!({"command": "cargo test --workspace", "cwd": "/workspace", "env": {"DEPLOY_TOKEN": token, "RUST_LOG": "info"}});
            let mut updated = input.clone();
            updated["command"] = json!("sandbox-exec --profile ci -- cargo test --workspace");
            let mut p = Plan::new(scenario, SHELL, input);
            p.pre_hook = Some(PreHook::Mutate(updated, vec!["command".to_owned()]));
            p.post_hook = true;
            p.progress = 2;
            p
        }
        Scenario::HookStop => {
            let input = json!({"command": "rm -rf / --no-preserve-root", "cwd": "/workspace"});
            let mut p = Plan::new(scenario, SHELL, input);
            p.pre_hook = Some(PreHook::Stop("destructive_command"));
            p
        }
        Scenario::ValidationFailed => {
            let mut p = Plan::new(scenario, READ_FILE, json!({"path": "../../etc/shadow"}));
            p.args = Args::Invalid("path escapes the workspace root");
            p
        }
        Scenario::TimedOut => {
            let input = json!({"sql": "select * from events e join sessions s using (session_id)", "connection_string": "postgres://analytics@replica:5432/shop"});
            let mut p = Plan::new(scenario, DB, input);
            p.exec = Exec::Timeout;
            p.progress = 2;
            p
        }
        Scenario::Canceled => {
            let mut p = Plan::new(
                scenario,
                IMAGE,
                json!({"prompt": "isometric diagram of a merkle tree", "size": "1024x1024"}),
            );
            p.exec = Exec::Cancel;
            p.progress = 2;
            p
        }
        Scenario::Yielded => {
            let mut p = Plan::new(
                scenario,
                IMAGE,
                json!({"prompt": "a lighthouse in a storm, oil painting", "size": "1792x1024"}),
            );
            p.exec = Exec::Yield;
            p.progress = 3;
            p
        }
        Scenario::NeedsInput => {
            let mut p = Plan::new(
                scenario,
                SHELL,
                json!({"command": "npm init", "cwd": "/workspace/web"}),
            );
            p.exec = Exec::NeedsInput;
            p.progress = 1;
            p
        }
        Scenario::PartialResults => {
            let mut p = Plan::new(scenario, SEARCH, search_input(g));
            p.exec = Exec::Partial(g.rng.random_range(2..4));
            p
        }
        Scenario::LargeResult => {
            let mut p = Plan::new(scenario, READ_FILE, json!({"path": "/workspace/logs/build.log"}));
            p.large = true;
            p.progress = 2;
            p
        }
        Scenario::Redacted => {
            let input = json!({"sql": "select email, plan from customers limit 20", "connection_string": "postgres://analytics@replica:5432/shop"});
            let mut p = Plan::new(scenario, DB, input);
            p.redact = true;
            p
        }
        Scenario::Secrets => {
            let bearer = g.secret(SecretKind::BearerToken, &s.tenant);
            let api_key = g.secret(SecretKind::SensitiveField, &s.tenant);
            let auth = g.secret(SecretKind::OtcAuthorization, &s.tenant);
            let otc_secret = g.secret(SecretKind::OtcSecret, &s.tenant);
            let input = json!({"method": "POST", "url": "https://billing.example.com/v1/refunds",
                "headers": {"authorization": format!("Bearer {bearer}"), "content-type": "application/json"},
                "api_key": api_key, "body": {"charge": "ch_3N", "amount": 1200}});
            let mut p = Plan::new(scenario, HTTP, input);
            p.context = Some(json!({
                "authorization": [{"type": "bearer", "token": auth}],
                "secrets": [{"id": "BILLING_WEBHOOK_SECRET", "value": otc_secret}],
                "user_id": "user_4812",
            }));
            p.decisions = vec!["allow"];
            p
        }
        // Composite scenarios are played in `play`; anything else is an ordinary read.
        _ => {
            let (model, _) = read_input(g);
            Plan::new(Scenario::PlainSuccess, READ_FILE, model)
        }
    }
}

/// An invocation being played.
struct Inv {
    truth: InvocationTruth,
    tool: &'static Tool,
    native_call_id: String,
    created_at: String,
    hook_refs: Vec<String>,
    decision_refs: Vec<String>,
}

impl Inv {
    /// Enters `state` by the event just published.
    fn enter(&mut self, state: &str) {
        if let Some(event_id) = self.truth.event_ids.last() {
            self.truth.transitions.push(TransitionTruth {
                event_id: event_id.clone(),
                state: state.to_owned(),
            });
        }
        if self.truth.states.last().map(String::as_str) != Some(state) {
            self.truth.states.push(state.to_owned());
        }
        self.truth.final_state = state.to_owned();
        self.truth.terminal = matches!(
            state,
            "succeeded" | "failed" | "canceled" | "timed_out" | "denied" | "blocked" | "validation_failed"
        );
    }

    /// An invocation snapshot with `status` and extra fields.
    fn snapshot(&self, s: &Session, status: &str, extra: Value) -> Value {
        let mut d = json!({
            "schema_version": SCHEMA_VERSION,
            "invocation_id": self.truth.invocation_id,
            "tool_id": self.truth.tool_id,
            "surface_id": s.surface_id,
            "native_call_id": self.native_call_id,
            "status": status,
            "actor_ref": format!("agent:{}", s.session_id),
            "runtime_refs": ["runtime:agent-rt/2.4.1"],
            "session_id": s.session_id,
            "created_at": self.created_at,
        });
        if !self.hook_refs.is_empty() {
            d["hook_refs"] = json!(self.hook_refs);
        }
        if !self.decision_refs.is_empty() {
            d["permission_decision_refs"] = json!(self.decision_refs);
        }
        merge(&mut d, extra);
        d
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(into), Value::Object(extra)) = (into, extra) {
        for (k, v) in extra {
            into.insert(k, v);
        }
    }
}

/// Publishes one event of an invocation and records it.
fn ev(g: &mut Gen, s: &mut Session, inv: &mut Inv, class: EventClass, data: Value) -> String {
    let inv_id = inv.truth.invocation_id.clone();
    let ext = Ext {
        invocation: Some(&inv_id),
        tool: Some(inv.tool.id),
        backdate_ms: 0,
    };
    let id = g.emit(s, class, &inv_id, ext, data);
    inv.truth.event_ids.push(id.clone());
    id
}

/// Publishes an invocation snapshot event and enters `state`.
fn step(g: &mut Gen, s: &mut Session, inv: &mut Inv, class: EventClass, state: &str, extra: Value) -> String {
    let data = inv.snapshot(s, state, extra);
    let id = ev(g, s, inv, class, data);
    inv.enter(state);
    id
}

fn error(class: &str, message: &str, recoverability: &str) -> Value {
    json!({"error_class": class, "error_code": class.to_uppercase(), "message": message,
        "recoverability": recoverability})
}

/// Runs one invocation through its plan; returns its id.
fn run(g: &mut Gen, s: &mut Session, plan: Plan) -> String {
    let invocation_id = g.id("inv");
    let native_call_id = format!("call_{}", g.hex(24));
    s.invocation_ids.push(invocation_id.clone());
    let (retry_of, attempt) = match &plan.retry_of {
        Some((of, n)) => (Some(of.clone()), *n),
        None => (None, 1),
    };
    let mut inv = Inv {
        truth: InvocationTruth {
            tenant: s.tenant.clone(),
            session_id: s.session_id.clone(),
            invocation_id: invocation_id.clone(),
            tool_id: plan.tool.id.to_owned(),
            scenario: plan.scenario,
            final_state: String::new(),
            states: Vec::new(),
            transitions: Vec::new(),
            terminal: false,
            inputs: Inputs::default(),
            mutations: Vec::new(),
            permission_decisions: Vec::new(),
            hooks: Vec::new(),
            progress_count: 0,
            partial_results: 0,
            result: None,
            error_class: None,
            retry_of: retry_of.clone(),
            attempt,
            anomalies: Vec::new(),
            event_ids: Vec::new(),
        },
        tool: plan.tool,
        native_call_id,
        created_at: s.now(),
        hook_refs: Vec::new(),
        decision_refs: Vec::new(),
    };
    let mut planned = json!({});
    if let Some(of) = &retry_of {
        planned = json!({"retry_of": of, "attempt": attempt});
    }
    step(g, s, &mut inv, EventClass::InvocationPlanned, "planned", planned);
    s.wait(g, 5, 40);
    step(
        g,
        s,
        &mut inv,
        EventClass::InvocationSelected,
        "selected",
        json!({}),
    );
    // The model streams its arguments.
    s.wait(g, 250, 2_500);

    let model_input = plan.model_input.clone();
    inv.truth.inputs.model_input = Some(model_input.clone());
    if let Args::Unparseable(raw) = &plan.args {
        step(
            g,
            s,
            &mut inv,
            EventClass::InvocationArgumentsReady,
            "schema_parse_failed",
            json!({
                "model_input": raw,
                "error": error("invalid_arguments", "arguments are not valid JSON: EOF while parsing an object", "retry_with_valid_arguments"),
            }),
        );
        inv.truth.error_class = Some("invalid_arguments".to_owned());
        result(
            g,
            s,
            &mut inv,
            &plan,
            "failed",
            Some(error(
                "schema_validation_failed",
                "arguments did not parse",
                "retry_with_valid_arguments",
            )),
        );
        return finish(g, inv);
    }
    let mut observable = model_input.clone();
    let mut ready = json!({"model_input": model_input});
    if let Some((normalized, changed)) = &plan.normalize {
        observable = normalized.clone();
        let mutation_id = g.id("mut");
        ready["input_mutations"] = json!([{
            "schema_version": SCHEMA_VERSION,
            "mutation_id": mutation_id,
            "invocation_id": invocation_id,
            "source_type": "adapter",
            "source_ref": "adapter:path-normalizer",
            "from_input_ref": "model_input",
            "to_input_ref": "observable_input",
            "changed_fields": changed,
            "reason": "relative paths resolved against the workspace root",
            "created_at": s.now(),
        }]);
        inv.truth.mutations.push(MutationTruth {
            source: "adapter".to_owned(),
            source_id: mutation_id,
            from: "model_input".to_owned(),
            to: "observable_input".to_owned(),
            changed_fields: changed.clone(),
        });
    }
    ready["observable_input"] = observable.clone();
    inv.truth.inputs.observable_input = Some(observable.clone());
    step(
        g,
        s,
        &mut inv,
        EventClass::InvocationArgumentsReady,
        "arguments_ready",
        ready,
    );

    if let Args::Invalid(message) = plan.args {
        s.wait(g, 2, 30);
        step(
            g,
            s,
            &mut inv,
            EventClass::InvocationValidationFailed,
            "validation_failed",
            json!({
                "ended_at": s.now(),
                "error": error("invalid_arguments", message, "change_arguments"),
            }),
        );
        inv.truth.error_class = Some("invalid_arguments".to_owned());
        result(
            g,
            s,
            &mut inv,
            &plan,
            "failed",
            Some(error("invalid_arguments", message, "change_arguments")),
        );
        return finish(g, inv);
    }

    let mut permission_input = observable.clone();
    if let Some(hook) = &plan.pre_hook {
        s.wait(g, 2, 20);
        let hook_id = g.id("hook");
        inv.hook_refs.push(hook_id.clone());
        let base = json!({"schema_version": SCHEMA_VERSION, "hook_id": hook_id, "hook_event": "pre_tool_use",
            "invocation_id": invocation_id, "tool_id": plan.tool.id,
            "matcher": {"tool_name": plan.tool.id}, "started_at": s.now()});
        ev(g, s, &mut inv, EventClass::HookPreStarted, base.clone());
        inv.enter("pre_hooks_running");
        s.wait(g, 15, 400);
        let mut done = base;
        done["ended_at"] = json!(s.now());
        let mut truth = HookTruth {
            hook_id: hook_id.clone(),
            hook_event: "pre_tool_use".to_owned(),
            updated_input: false,
            updated_output: false,
            stop: false,
        };
        match hook {
            PreHook::Pass => {
                done["outputs"] = json!([{"type": "message", "text": "pre-tool checks passed"}]);
            }
            PreHook::Mutate(updated, changed) => {
                done["updated_input"] = updated.clone();
                done["additional_context"] =
                    json!([{"type": "text", "text": "command wrapped in the ci sandbox profile"}]);
                permission_input = updated.clone();
                truth.updated_input = true;
                inv.truth.mutations.push(MutationTruth {
                    source: "hook".to_owned(),
                    source_id: hook_id.clone(),
                    from: "observable_input".to_owned(),
                    to: "permission_input".to_owned(),
                    changed_fields: changed.clone(),
                });
            }
            PreHook::Stop(reason) => {
                done["stop"] =
                    json!({"reason": reason, "message": "command would delete the filesystem root"});
                truth.stop = true;
            }
        }
        inv.truth.hooks.push(truth);
        ev(g, s, &mut inv, EventClass::HookPreCompleted, done);
        if !matches!(hook, PreHook::Stop(_)) {
            inv.enter("pre_hooks_running");
        }
        if let PreHook::Stop(_) = hook {
            inv.enter("blocked");
            inv.truth.error_class = Some("hook_blocked".to_owned());
            result(
                g,
                s,
                &mut inv,
                &plan,
                "rejected",
                Some(error(
                    "hook_blocked",
                    "stopped by pre-tool hook",
                    "change_arguments",
                )),
            );
            return finish(g, inv);
        }
        inv.truth.inputs.permission_input = Some(permission_input.clone());
    }

    let mut call_input = permission_input.clone();
    if !plan.decisions.is_empty() {
        s.wait(g, 2, 30);
        let first_decision = g.id("perm");
        let data = json!({"schema_version": SCHEMA_VERSION, "decision_id": first_decision,
            "invocation_id": invocation_id, "tool_id": plan.tool.id, "permission_input": permission_input,
            "permission_profile_ref": format!("permprof:{}:{}", plan.tool.id, plan.tool.risk),
            "mode": "default", "reason": {"type": "profile", "approval_required": plan.tool.risk != "low"},
            "requested_at": s.now()});
        ev(g, s, &mut inv, EventClass::PermissionRequested, data);
        inv.enter("awaiting_approval");
        inv.truth.inputs.permission_input = Some(permission_input.clone());
        let mut decision_id = first_decision;
        for (n, behavior) in plan.decisions.iter().enumerate() {
            if n > 0 {
                decision_id = g.id("perm");
                // A human reads the prompt.
                s.wait(g, 2_500, 45_000);
            } else {
                s.wait(g, 3, 120);
            }
            inv.decision_refs.push(decision_id.clone());
            let (source, reason) = match *behavior {
                "ask" => (
                    "policy",
                    json!({"type": "rule", "rule_ref": "rule_ask_writes", "message": "writes need approval"}),
                ),
                "deny" => (
                    "project_settings",
                    json!({"type": "rule", "rule_ref": "rule_deny_secrets_dir", "message": "writes under .secrets are denied by project policy"}),
                ),
                _ if n > 0 => ("user", json!({"type": "user", "message": "approved in prompt"})),
                _ => (
                    "policy",
                    json!({"type": "rule", "rule_ref": "rule_allow_known_hosts", "message": "allowed by rule"}),
                ),
            };
            let mut d = json!({"schema_version": SCHEMA_VERSION, "decision_id": decision_id,
                "invocation_id": invocation_id, "behavior": behavior, "mode": "default", "source": source,
                "reason": reason, "rule_refs": [reason["rule_ref"].as_str().unwrap_or("user_prompt")],
                "policy_refs": ["policy:project-file-access"], "decided_at": s.now()});
            let mut updated = false;
            if *behavior == "allow" {
                if let Some((new_input, changed)) = &plan.allow_update {
                    d["updated_input"] = new_input.clone();
                    d["user_modified"] = json!(true);
                    d["accept_feedback"] = json!("use 3 retries, not 5");
                    call_input = new_input.clone();
                    updated = true;
                    inv.truth.mutations.push(MutationTruth {
                        source: "permission_decision".to_owned(),
                        source_id: decision_id.clone(),
                        from: "permission_input".to_owned(),
                        to: "call_input".to_owned(),
                        changed_fields: changed.clone(),
                    });
                }
                d["expires_at"] = json!(super::rfc3339(s.clock + 3_600_000));
            }
            if *behavior == "deny" {
                d["blocked_path"] = permission_input["path"].clone();
            }
            inv.truth.permission_decisions.push(DecisionTruth {
                decision_id: decision_id.clone(),
                behavior: (*behavior).to_owned(),
                updated_input: updated,
            });
            ev(g, s, &mut inv, EventClass::PermissionDecided, d);
            match *behavior {
                "allow" => inv.enter("approved"),
                "ask" => inv.enter("awaiting_approval"),
                "deny" => {
                    inv.enter("denied");
                    inv.truth.error_class = Some("permission_denied".to_owned());
                    result(
                        g,
                        s,
                        &mut inv,
                        &plan,
                        "denied",
                        Some(error(
                            "permission_denied",
                            "denied by project policy",
                            "change_arguments_or_policy",
                        )),
                    );
                    return finish(g, inv);
                }
                _ => {}
            }
        }
    }

    // The runtime injects the caller's OTC context into the call input; the mutation is recorded
    // where call_input first appears (queued), the context itself again when execution starts.
    let mut queued_extra = json!({});
    let mut started_extra = json!({});
    if let Some(context) = &plan.context {
        call_input["context"] = context.clone();
        started_extra["context"] = context.clone();
        let mutation_id = g.id("mut");
        queued_extra["input_mutations"] = json!([{
            "schema_version": SCHEMA_VERSION, "mutation_id": mutation_id, "invocation_id": invocation_id,
            "source_type": "runtime", "source_ref": "runtime:credential-injector",
            "from_input_ref": "permission_input", "to_input_ref": "call_input",
            "changed_fields": ["context"], "reason": "caller context attached for the executor",
            "created_at": s.now()}]);
        inv.truth.mutations.push(MutationTruth {
            source: "runtime".to_owned(),
            source_id: mutation_id,
            from: "permission_input".to_owned(),
            to: "call_input".to_owned(),
            changed_fields: vec!["context".to_owned()],
        });
    }
    inv.truth.inputs.permission_input = Some(permission_input.clone());
    inv.truth.inputs.call_input = Some(call_input.clone());

    s.wait(g, 2, 80);
    let mut queued = json!({"call_input": call_input, "scheduler_policy_ref": "sched:session-default"});
    merge(&mut queued, queued_extra);
    step(g, s, &mut inv, EventClass::InvocationQueued, "queued", queued);
    s.wait(g, 3, 150);
    let started_at = s.clock + 1;
    let mut started = json!({"call_input": call_input, "permission_input": permission_input,
        "started_at": super::rfc3339(started_at)});
    merge(&mut started, started_extra);
    if plan.plant == Plant::StatusMismatch {
        // The class says running; the producer's snapshot still says queued.
        let data = inv.snapshot(s, "queued", started.clone());
        let id = ev(g, s, &mut inv, EventClass::InvocationStarted, data);
        inv.enter("running");
        plant(g, &mut inv, "status_mismatch", id);
    } else {
        step(
            g,
            s,
            &mut inv,
            EventClass::InvocationStarted,
            "running",
            started.clone(),
        );
    }
    if plan.plant == Plant::IllegalTransition {
        s.wait(g, 5, 50);
        let id = step(g, s, &mut inv, EventClass::InvocationQueued, "queued", json!({}));
        plant(g, &mut inv, "illegal_transition", id);
        s.wait(g, 5, 50);
        step(
            g,
            s,
            &mut inv,
            EventClass::InvocationStarted,
            "running",
            json!({}),
        );
    }

    let mut seq = 0u32;
    let total = plan.progress + usize::from(matches!(plan.exec, Exec::NeedsInput | Exec::Yield));
    for _ in 0..plan.progress {
        progress(g, s, &mut inv, &mut seq, total, started_at, "running");
    }
    if plan.plant == Plant::OutOfOrder {
        s.wait(g, 20, 100);
        let data = progress_data(g, s, &inv, 99, total, started_at, "running");
        let inv_id = invocation_id.clone();
        let ext = Ext {
            invocation: Some(&inv_id),
            tool: Some(inv.tool.id),
            backdate_ms: 10_000,
        };
        let id = g.emit(s, EventClass::InvocationProgress, &inv_id, ext, data);
        inv.truth.event_ids.push(id.clone());
        inv.truth.progress_count += 1;
        plant(g, &mut inv, "out_of_order", id);
    }
    match plan.exec {
        Exec::Succeed => {}
        Exec::Partial(n) => {
            for k in 0..n {
                s.wait(g, 150, 1_200);
                let result_id = g.id("res");
                let data = json!({"schema_version": SCHEMA_VERSION, "result_id": result_id,
                    "invocation_id": invocation_id, "status": "partial_succeeded", "is_error": false,
                    "content": [{"type": "text", "text": format!("result {}: https://example.org/r/{}", k + 1, g.hex(8))}],
                    "created_at": s.now()});
                ev(g, s, &mut inv, EventClass::InvocationPartialResult, data);
                inv.enter("partial_result");
                inv.truth.partial_results += 1;
            }
        }
        Exec::NeedsInput => {
            progress(g, s, &mut inv, &mut seq, total, started_at, "needs_input");
            inv.enter("needs_input");
            // The user answers the prompt.
            s.wait(g, 4_000, 60_000);
            step(
                g,
                s,
                &mut inv,
                EventClass::InvocationStarted,
                "running",
                json!({"call_input": call_input}),
            );
            progress(g, s, &mut inv, &mut seq, total, started_at, "running");
        }
        Exec::Yield => {
            s.wait(g, 200, 1_500);
            let task = format!("task_{}", g.hex(10));
            step(
                g,
                s,
                &mut inv,
                EventClass::InvocationYielded,
                "yielded",
                json!({"telemetry_refs": [{"task_id": task}]}),
            );
            s.wait(g, 10_000, 90_000);
            step(
                g,
                s,
                &mut inv,
                EventClass::InvocationStarted,
                "running",
                json!({}),
            );
            progress(g, s, &mut inv, &mut seq, total, started_at, "running");
        }
        Exec::Fail(class) => {
            s.wait(g, 100, 3_000);
            post_hook(g, s, &mut inv, "post_tool_use_failure");
            let err = error(class, "upstream replica refused the query", "retry_later");
            s.wait(g, 5, 60);
            step(
                g,
                s,
                &mut inv,
                EventClass::InvocationFailed,
                "failed",
                json!({"ended_at": s.now(), "error": err.clone()}),
            );
            inv.truth.error_class = Some(class.to_owned());
            result(g, s, &mut inv, &plan, "failed", Some(err));
            return finish(g, inv);
        }
        Exec::Timeout => {
            s.clock = s.clock.max(started_at + plan.tool.timeout_ms);
            let err = error(
                "timeout",
                &format!("no result within {} ms", plan.tool.timeout_ms),
                "retry_with_narrower_arguments",
            );
            step(
                g,
                s,
                &mut inv,
                EventClass::InvocationTimedOut,
                "timed_out",
                json!({"ended_at": s.now(), "error": err.clone()}),
            );
            inv.truth.error_class = Some("timeout".to_owned());
            result(g, s, &mut inv, &plan, "timed_out", Some(err));
            return finish(g, inv);
        }
        Exec::Cancel => {
            s.wait(g, 500, 8_000);
            let err = error("canceled", "interrupted by the user", "not_retryable");
            step(
                g,
                s,
                &mut inv,
                EventClass::InvocationCanceled,
                "canceled",
                json!({"ended_at": s.now(), "error": err.clone(), "cancel_reason": "user_interrupt"}),
            );
            inv.truth.error_class = Some("canceled".to_owned());
            result(g, s, &mut inv, &plan, "canceled", Some(err));
            return finish(g, inv);
        }
    }
    s.wait(g, 20, 2_500);
    if plan.post_hook {
        post_hook(g, s, &mut inv, "post_tool_use");
    }
    step(
        g,
        s,
        &mut inv,
        EventClass::InvocationSucceeded,
        "succeeded",
        json!({"ended_at": s.now()}),
    );
    result(g, s, &mut inv, &plan, "succeeded", None);
    if plan.plant == Plant::AfterTerminal {
        s.wait(g, 10, 200);
        let data = progress_data(g, s, &inv, seq + 1, total, started_at, "running");
        let id = ev(g, s, &mut inv, EventClass::InvocationProgress, data);
        inv.truth.progress_count += 1;
        plant(g, &mut inv, "event_after_terminal", id);
    }
    if plan.plant == Plant::DuplicateResult {
        s.wait(g, 10, 200);
        let data = json!({"schema_version": SCHEMA_VERSION, "result_id": g.id("res"),
            "invocation_id": invocation_id, "status": "succeeded", "is_error": false,
            "content": [{"type": "text", "text": "duplicate"}], "created_at": s.now()});
        let id = ev(g, s, &mut inv, EventClass::ResultCreated, data);
        plant(g, &mut inv, "duplicate_result", id);
    }
    finish(g, inv)
}

fn plant(g: &mut Gen, inv: &mut Inv, kind: &str, event_id: String) {
    inv.truth.anomalies.push(kind.to_owned());
    g.truth.anomalies.push(PlantedAnomaly {
        kind: kind.to_owned(),
        invocation_id: Some(inv.truth.invocation_id.clone()),
        event_id,
    });
}

fn finish(g: &mut Gen, inv: Inv) -> String {
    let id = inv.truth.invocation_id.clone();
    g.truth.invocations.push(inv.truth);
    id
}

fn progress_data(
    g: &mut Gen,
    s: &Session,
    inv: &Inv,
    seq: u32,
    total: usize,
    started_at: i64,
    status: &str,
) -> Value {
    let total = total.max(1) as u32;
    let percent = (f64::from(seq.min(total)) * 100.0 / f64::from(total + 1)).round();
    let mut d = json!({"schema_version": SCHEMA_VERSION, "progress_id": g.id("prog"),
        "invocation_id": inv.truth.invocation_id, "sequence": seq, "status": status,
        "percent": percent, "current_step": format!("step {seq}"), "total_steps": total,
        "elapsed_ms": (s.clock - started_at).max(0), "timestamp": s.now()});
    if status == "needs_input" {
        d["message"] = json!("package name: (web)");
    } else {
        d["message"] = json!(format!("{percent}% done"));
        d["bytes_read"] = json!(g.rng.random_range(1_000..2_000_000));
    }
    d
}

fn progress(
    g: &mut Gen,
    s: &mut Session,
    inv: &mut Inv,
    seq: &mut u32,
    total: usize,
    started_at: i64,
    status: &str,
) {
    s.wait(g, 150, 2_500);
    *seq += 1;
    let data = progress_data(g, s, inv, *seq, total, started_at, status);
    ev(g, s, inv, EventClass::InvocationProgress, data);
    inv.truth.progress_count += 1;
}

fn post_hook(g: &mut Gen, s: &mut Session, inv: &mut Inv, hook_event: &str) {
    let hook_id = g.id("hook");
    inv.hook_refs.push(hook_id.clone());
    let base = json!({"schema_version": SCHEMA_VERSION, "hook_id": hook_id, "hook_event": hook_event,
        "invocation_id": inv.truth.invocation_id, "tool_id": inv.tool.id,
        "matcher": {"tool_name": inv.tool.id}, "started_at": s.now()});
    ev(g, s, inv, EventClass::HookPostStarted, base.clone());
    inv.enter("post_hooks_running");
    s.wait(g, 10, 300);
    let mut done = base;
    done["ended_at"] = json!(s.now());
    let updated_output = hook_event == "post_tool_use";
    if updated_output {
        done["updated_output"] = json!({"summary": "tests passed", "exit_code": 0});
    } else {
        done["outputs"] = json!([{"type": "message", "text": "failure reported to the run log"}]);
    }
    ev(g, s, inv, EventClass::HookPostCompleted, done);
    inv.enter("post_hooks_running");
    inv.truth.hooks.push(HookTruth {
        hook_id,
        hook_event: hook_event.to_owned(),
        updated_input: false,
        updated_output,
        stop: false,
    });
}

/// Text of `bytes` bytes that looks like a build log.
fn log_text(g: &mut Gen, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 128);
    let mut line = 0u32;
    while out.len() < bytes {
        line += 1;
        let crates = [
            "toolledger-core",
            "toolledger-merkle",
            "serde_json",
            "tokio",
            "async-nats",
        ];
        let c = crates[g.rng.random_range(0..crates.len())];
        out.push_str(&format!(
            "[{line:05}] Compiling {c} v1.{}.{} ({})\n",
            g.rng.random_range(0..40),
            g.rng.random_range(0..20),
            g.hex(12)
        ));
    }
    out
}

/// Publishes the terminal result (and its persistence and redaction when planned).
fn result(g: &mut Gen, s: &mut Session, inv: &mut Inv, plan: &Plan, status: &str, err: Option<Value>) {
    s.wait(g, 1, 40);
    let result_id = g.id("res");
    let is_error = err.is_some();
    let text = if plan.large && !is_error {
        let size = LARGE + g.rng.random_range(1_024..LARGE);
        log_text(g, size)
    } else if plan.redact && !is_error {
        (0..5)
            .map(|i| format!("customer{i}@example.com\tpro\n"))
            .collect()
    } else if let Some(e) = &err {
        e["message"].as_str().unwrap_or("error").to_owned()
    } else {
        format!(
            "ok: {} completed ({} bytes)",
            plan.tool.title,
            g.rng.random_range(40..4_000)
        )
    };
    let mut data = json!({"schema_version": SCHEMA_VERSION, "result_id": result_id,
        "invocation_id": inv.truth.invocation_id, "status": status, "is_error": is_error,
        "content": [{"type": "text", "text": text}],
        "ui_facing_summary": format!("{} {}", plan.tool.title, status),
        "redaction_state": "none",
        "created_at": s.now()});
    let mut persistence = None;
    let mut persist_id = None;
    if plan.large && !is_error {
        let id = g.id("persist");
        data["model_facing_content"] = json!([{"type": "text", "text": format!("Output too large ({} bytes). Preview: {}", text.len(), &text[..200.min(text.len())])}]);
        data["persistence_refs"] = json!([id]);
        persist_id = Some(id);
        persistence = Some("preview_and_persist");
    } else if plan.redact && !is_error {
        let id = g.id("persist");
        data["persistence_refs"] = json!([id]);
        persist_id = Some(id);
        persistence = Some("redact");
    }
    if let Some(e) = err {
        data["error"] = e;
        data["policy_refs"] = json!(["policy:project-file-access"]);
    }
    ev(g, s, inv, EventClass::ResultCreated, data);
    if status == "denied" {
        inv.enter("denied");
    }
    if let (Some(strategy), Some(decision_id)) = (persistence, persist_id) {
        s.wait(g, 5, 200);
        let mut p = json!({"schema_version": SCHEMA_VERSION, "decision_id": decision_id,
            "invocation_id": inv.truth.invocation_id, "result_id": result_id, "strategy": strategy,
            "original_size_bytes": text.len(), "created_at": s.now()});
        if strategy == "preview_and_persist" {
            p["threshold"] = json!({"max_inline_chars": 32_000});
            p["preview_size_bytes"] = json!(200);
            p["persisted_ref"] = json!({"uri": format!("agent-runtime://session/{}/tool-results/{}.txt", s.session_id, inv.truth.invocation_id),
                "media_type": "text/plain", "digest": format!("sha256:{}", g.hex(64))});
            p["reason"] = json!("result_exceeded_inline_limit");
        } else {
            p["redaction_state"] = json!("redacted");
            p["reason"] = json!("pii_in_result");
        }
        ev(g, s, inv, EventClass::ResultPersisted, p);
    }
    let mut redaction_state = None;
    if plan.redact && !is_error {
        s.wait(g, 5, 200);
        let data = json!({"schema_version": SCHEMA_VERSION, "result_id": result_id,
            "invocation_id": inv.truth.invocation_id, "status": "redacted", "is_error": false,
            "content": [{"type": "text", "text": "[5 rows; email column redacted]"}],
            "redaction_state": "redacted", "created_at": s.now()});
        ev(g, s, inv, EventClass::ResultRedacted, data);
        redaction_state = Some("redacted".to_owned());
    }
    inv.truth.result = Some(ResultTruth {
        result_id,
        status: status.to_owned(),
        is_error,
        content_bytes: text.len(),
        persistence: persistence.map(str::to_owned),
        redaction_state,
    });
}

/// One of each invocation-level anomaly of DESIGN.md §6, plus an orphan event.
fn plant_anomalies(g: &mut Gen, s: &mut Session) {
    for which in [
        Plant::StatusMismatch,
        Plant::AfterTerminal,
        Plant::IllegalTransition,
        Plant::OutOfOrder,
        Plant::DuplicateResult,
    ] {
        s.wait(g, 300, 3_000);
        let (model, _) = read_input(g);
        let mut p = Plan::new(Scenario::PlainSuccess, READ_FILE, model);
        p.plant = which;
        p.progress = 1;
        run(g, s, p);
    }
    // An event for an invocation that was never planned.
    s.wait(g, 300, 3_000);
    let orphan = g.id("inv");
    let data = json!({"schema_version": SCHEMA_VERSION, "progress_id": g.id("prog"),
        "invocation_id": orphan, "sequence": 1, "status": "running", "timestamp": s.now()});
    let ext = Ext {
        invocation: Some(&orphan),
        tool: Some(READ_FILE),
        backdate_ms: 0,
    };
    let id = g.emit(s, EventClass::InvocationProgress, &orphan, ext, data);
    g.truth.anomalies.push(PlantedAnomaly {
        kind: "orphan_event".to_owned(),
        invocation_id: Some(orphan),
        event_id: id,
    });
}
