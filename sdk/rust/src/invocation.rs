//! The invocation guard: one tool call's lifecycle around your code.
//!
//! ```text
//! let mut inv = producer.invocation(&tool, input).await?;   // tool.declared (once per producer),
//!                                                           // tool.invocation.planned, .started
//! inv.progress("half way", Some(50.0)).await?;              // tool.invocation.progress (1, 2, …)
//! inv.succeed(json!({"rows": 3})).await?;                   // .succeeded + tool.result.created
//! inv.fail(&err).await?;                                    // .failed | .timed_out | .canceled
//!                                                           //   (error class from the error) + an
//!                                                           //   error result
//! drop(inv) unfinished                                      // .canceled + an error result, written
//!                                                           //   synchronously in Drop
//! ```
//!
//! `InvocationOptions { start: false, .. }` keeps the call planned so permission and pre-hook events
//! come first, in the lifecycle's order; call [`InvocationGuard::start`] when it runs.
//!
//! Error classes from Rust errors ([`error_of`]): an `std::io::Error` of kind `TimedOut` or tokio's
//! `Elapsed` → `timeout` (→ timed_out); `PermissionDenied` → `permission_denied`; connection refused,
//! reset, aborted, not connected or unreachable → `dependency_unavailable`; anything else →
//! `execution_failed`, the code naming the error type (`rust:<type>`). The whole `source()` chain is
//! searched. [`InvocationGuard::fail_with`] takes a [`ToolError`] of your choosing.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Result;
use crate::events::{
    Behavior, Hook, HookEvent, HookPhase, HookStage, Invocation, InvocationClass, PermissionDecision,
    PermissionRequest, Progress, ResultClass, Stamp, Tool, ToolError, ToolResult, TraceContext, now_rfc3339,
};
use crate::producer::Producer;
use crate::wire::hex;

/// Options of [`Producer::invocation_with`].
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationOptions {
    /// The invocation's id (`inv-<32 random hex digits>` when `None`).
    pub invocation_id: Option<String>,
    /// The agent session (the producer's when `None`).
    pub session_id: Option<String>,
    /// The platform's own call id.
    pub native_call_id: Option<String>,
    /// Native ids (`{"system": …, "key": …, "value": …}`).
    pub external_mappings: Option<Vec<Value>>,
    /// Who acts.
    pub actor_ref: Option<String>,
    /// The invocation this one retries.
    pub retry_of: Option<String>,
    /// The attempt number of a retry.
    pub attempt: Option<u32>,
    /// Emit `started` at once (true); false keeps the call planned until [`InvocationGuard::start`].
    pub start: bool,
    /// Declare the tool first (true, once per producer).
    pub declare: bool,
    /// The trace context of this call's events (the producer's when `None`).
    pub trace: Option<TraceContext>,
}

impl Default for InvocationOptions {
    fn default() -> Self {
        Self {
            invocation_id: None,
            session_id: None,
            native_call_id: None,
            external_mappings: None,
            actor_ref: None,
            retry_of: None,
            attempt: None,
            start: true,
            declare: true,
            trace: None,
        }
    }
}

impl InvocationOptions {
    /// With this invocation id.
    pub fn invocation_id(mut self, id: impl Into<String>) -> Self {
        self.invocation_id = Some(id.into());
        self
    }

    /// Kept planned until [`InvocationGuard::start`].
    pub fn deferred_start(mut self) -> Self {
        self.start = false;
        self
    }

    /// With this trace context.
    pub fn trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }
}

/// What a finished invocation reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The invocation's id.
    pub invocation_id: String,
    /// The terminal class emitted.
    pub class: InvocationClass,
    /// Wall time from start to end (`None` when it never started).
    pub duration: Option<Duration>,
}

/// One invocation's events, emitted through a [`Producer`] in lifecycle order. Finish it with
/// [`succeed`](Self::succeed), [`fail`](Self::fail), [`fail_with`](Self::fail_with) or
/// [`cancel`](Self::cancel); dropped unfinished, it emits `canceled`.
#[derive(Debug)]
#[must_use = "an invocation dropped unfinished is recorded as canceled"]
pub struct InvocationGuard {
    producer: Producer,
    tool_id: String,
    input: Option<Value>,
    snapshot: Invocation,
    stamp: Stamp,
    progress: u64,
    started: Option<Instant>,
    done: bool,
}

fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to the clock and a process-wide counter, still unique here.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes[..8].copy_from_slice(&n.to_be_bytes());
        bytes[8..].copy_from_slice(&(t as u64).to_be_bytes());
    }
    hex(&bytes)
}

impl InvocationGuard {
    pub(crate) async fn begin(
        producer: Producer,
        tool: &Tool,
        input: Value,
        options: InvocationOptions,
    ) -> Result<Self> {
        let invocation_id = options
            .invocation_id
            .unwrap_or_else(|| format!("inv-{}", random_hex()));
        let input = (!input.is_null()).then_some(input);
        let snapshot = Invocation {
            session_id: options
                .session_id
                .or_else(|| producer.events().session_id().map(str::to_owned)),
            native_call_id: options.native_call_id,
            external_mappings: options.external_mappings,
            actor_ref: options.actor_ref,
            retry_of: options.retry_of,
            attempt: options.attempt,
            model_input: input.clone(),
            created_at: Some(now_rfc3339()),
            ..Invocation::new(invocation_id, tool.tool_id.clone())
        };
        if options.declare {
            producer.declare(tool).await?;
        }
        let mut guard = Self {
            producer,
            tool_id: tool.tool_id.clone(),
            input,
            snapshot,
            stamp: Stamp {
                trace: options.trace,
                ..Stamp::default()
            },
            progress: 0,
            started: None,
            // Not armed until planned is stored: a failed begin emits nothing more.
            done: true,
        };
        guard
            .emit(InvocationClass::Planned, guard.snapshot.clone())
            .await?;
        guard.done = false;
        if options.start {
            guard.start(None).await?;
        }
        Ok(guard)
    }

    /// The invocation's id.
    pub fn invocation_id(&self) -> &str {
        &self.snapshot.invocation_id
    }

    async fn emit(&self, class: InvocationClass, snapshot: Invocation) -> Result<()> {
        let event = self.producer.events().invocation(class, &snapshot, &self.stamp)?;
        self.producer.emit(event).await.map(drop)
    }

    /// `tool.invocation.started` (running) with `call_input` (default: the model input). Does nothing
    /// when it already started.
    pub async fn start(&mut self, call_input: Option<Value>) -> Result<()> {
        if self.started.is_some() {
            return Ok(());
        }
        let snapshot = Invocation {
            started_at: Some(now_rfc3339()),
            call_input: call_input.or_else(|| self.input.clone()),
            ..self.snapshot.clone()
        };
        self.emit(InvocationClass::Started, snapshot).await?;
        self.started = Some(Instant::now());
        Ok(())
    }

    /// `tool.invocation.progress` with the next sequence number, `status: running`.
    pub async fn progress(&mut self, message: impl Into<String>, percent: Option<f64>) -> Result<()> {
        let progress = Progress {
            message: Some(message.into()),
            percent,
            ..Progress::default()
        };
        self.progress_with(progress).await
    }

    /// `tool.invocation.progress` of `progress`; the guard fills the invocation, tool, sequence,
    /// `elapsed_ms`, and `status` (`running`) when empty.
    pub async fn progress_with(&mut self, mut progress: Progress) -> Result<()> {
        self.progress += 1;
        progress.invocation_id = self.snapshot.invocation_id.clone();
        progress.tool_id.get_or_insert_with(|| self.tool_id.clone());
        progress.sequence = self.progress;
        if progress.status.is_empty() {
            progress.status = "running".into();
        }
        if let Some(started) = self.started {
            progress
                .elapsed_ms
                .get_or_insert(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        }
        let event = self.producer.events().progress(&progress, &self.stamp)?;
        self.producer.emit(event).await.map(drop)
    }

    /// `tool.permission.requested` for `permission_input` (default: the model input); returns the
    /// decision id the decision must carry.
    pub async fn request_permission(&mut self, permission_input: Option<Value>) -> Result<String> {
        let request = PermissionRequest {
            permission_input: permission_input.or_else(|| self.input.clone()),
            ..PermissionRequest::default()
        };
        self.request_permission_with(request).await
    }

    /// `tool.permission.requested` of `request`; the guard fills the invocation and tool, and a
    /// `dec-<random>` decision id when empty. Returns the decision id.
    pub async fn request_permission_with(&mut self, mut request: PermissionRequest) -> Result<String> {
        if request.decision_id.is_empty() {
            request.decision_id = format!("dec-{}", random_hex());
        }
        request.invocation_id = self.snapshot.invocation_id.clone();
        request.tool_id.get_or_insert_with(|| self.tool_id.clone());
        let event = self
            .producer
            .events()
            .permission_requested(&request, &self.stamp)?;
        self.producer.emit(event).await?;
        Ok(request.decision_id)
    }

    /// `tool.permission.decided` with `behavior` under `decision_id` (a new one when `None`); returns
    /// the decision id.
    pub async fn decide(&mut self, behavior: Behavior, decision_id: Option<&str>) -> Result<String> {
        let decision = PermissionDecision::new(decision_id.unwrap_or_default(), "", behavior);
        self.decide_with(decision).await
    }

    /// `tool.permission.decided` of `decision`; the guard fills the invocation, and a decision id
    /// when empty. Returns the decision id.
    pub async fn decide_with(&mut self, mut decision: PermissionDecision) -> Result<String> {
        if decision.decision_id.is_empty() {
            decision.decision_id = format!("dec-{}", random_hex());
        }
        decision.invocation_id = self.snapshot.invocation_id.clone();
        let event = self
            .producer
            .events()
            .permission_decided(&decision, &self.stamp)?;
        self.producer.emit(event).await?;
        Ok(decision.decision_id)
    }

    /// `tool.hook.<phase>.<stage>` for hook `hook_id` (`pre_tool_use` / `post_tool_use`).
    pub async fn hook(&mut self, phase: HookPhase, stage: HookStage, hook_id: &str) -> Result<()> {
        let event = match phase {
            HookPhase::Pre => HookEvent::PreToolUse,
            HookPhase::Post => HookEvent::PostToolUse,
        };
        self.hook_with(phase, stage, Hook::new(hook_id, event, "")).await
    }

    /// `tool.hook.<phase>.<stage>` of `hook` (`updated_input`, `updated_output`, `stop`, …); the guard
    /// fills the invocation and tool.
    pub async fn hook_with(&mut self, phase: HookPhase, stage: HookStage, mut hook: Hook) -> Result<()> {
        hook.invocation_id = self.snapshot.invocation_id.clone();
        hook.tool_id.get_or_insert_with(|| self.tool_id.clone());
        let event = self.producer.events().hook(phase, stage, &hook, &self.stamp)?;
        self.producer.emit(event).await.map(drop)
    }

    /// `tool.invocation.succeeded`, then `tool.result.created` with `value` (a string becomes a text
    /// block, anything else `structured_content`; `Value::Null`: no result event).
    pub async fn succeed(self, value: Value) -> Result<Finished> {
        let result = match value {
            Value::Null => None,
            Value::String(text) => Some(ToolResult {
                content: Some(vec![serde_json::json!({"type": "text", "text": text})]),
                ..ToolResult::default()
            }),
            other => Some(ToolResult {
                structured_content: Some(other),
                ..ToolResult::default()
            }),
        };
        self.finish_async(None, result).await
    }

    /// `tool.invocation.succeeded`, then `tool.result.created` of `result` (MCP-style content blocks,
    /// a summary, …); the guard fills the invocation, tool, status and `is_error`.
    pub async fn succeed_with(self, result: ToolResult) -> Result<Finished> {
        self.finish_async(None, Some(result)).await
    }

    /// Ends the call with `err`: `failed`, `timed_out` or `canceled` by its error class ([`error_of`]),
    /// then an error result.
    pub async fn fail<E: std::error::Error + 'static>(self, err: &E) -> Result<Finished> {
        self.finish_async(Some(error_of(err)), None).await
    }

    /// Ends the call with `error`: class `timeout` → `timed_out`, `canceled` → `canceled`, anything
    /// else → `failed`; then an error result.
    pub async fn fail_with(self, error: ToolError) -> Result<Finished> {
        self.finish_async(Some(error), None).await
    }

    /// Ends the call as `canceled` with `reason`.
    pub async fn cancel(self, reason: impl Into<String>) -> Result<Finished> {
        self.finish_async(Some(ToolError::new("canceled", reason)), None)
            .await
    }

    async fn finish_async(
        mut self,
        error: Option<ToolError>,
        result: Option<ToolResult>,
    ) -> Result<Finished> {
        self.done = true;
        let (finished, events) = self.terminal_events(error, result)?;
        for event in events {
            self.producer.emit(event).await?;
        }
        Ok(finished)
    }

    /// The terminal invocation event and the result event, as Python's `InvocationScope._finish`
    /// makes them.
    fn terminal_events(
        &self,
        error: Option<ToolError>,
        result: Option<ToolResult>,
    ) -> Result<(Finished, Vec<crate::Event>)> {
        let (class, status) = match error.as_ref().map(|e| e.error_class.as_str()) {
            None => (InvocationClass::Succeeded, "succeeded"),
            Some("timeout") => (InvocationClass::TimedOut, "timed_out"),
            Some("canceled") => (InvocationClass::Canceled, "canceled"),
            Some(_) => (InvocationClass::Failed, "failed"),
        };
        let snapshot = Invocation {
            ended_at: Some(now_rfc3339()),
            error: error.clone(),
            ..self.snapshot.clone()
        };
        let builder = self.producer.events();
        let mut events = vec![builder.invocation(class, &snapshot, &self.stamp)?];
        if result.is_some() || error.is_some() {
            let mut result = result.unwrap_or_default();
            result.invocation_id = self.snapshot.invocation_id.clone();
            result.tool_id.get_or_insert_with(|| self.tool_id.clone());
            if result.status.is_empty() {
                result.status = status.into();
            }
            result.is_error.get_or_insert(error.is_some());
            if let Some(error) = error {
                if result.content.is_none() {
                    let text = error.message.clone().unwrap_or_else(|| error.error_class.clone());
                    result.content = Some(vec![serde_json::json!({"type": "text", "text": text})]);
                }
                result.error.get_or_insert(error);
            }
            events.push(builder.result(&result, ResultClass::Created, &self.stamp)?);
        }
        let finished = Finished {
            invocation_id: self.snapshot.invocation_id.clone(),
            class,
            duration: self.started.map(|s| s.elapsed()),
        };
        Ok((finished, events))
    }
}

impl Drop for InvocationGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        // Drop cannot await: the canceled event is stored on this thread (one write and, by policy,
        // one fdatasync), so it is as durable as any other emit once drop returns.
        let error =
            ToolError::new("canceled", "invocation dropped before it finished").with_code("rust:dropped");
        let stored = self.terminal_events(Some(error), None).and_then(|(_, events)| {
            events
                .iter()
                .try_for_each(|e| self.producer.emit_blocking(e).map(drop))
        });
        if let Err(e) = stored {
            tracing::error!(invocation_id = %self.snapshot.invocation_id, error = %e, "the canceled event of a dropped invocation was not stored");
        }
    }
}

/// The tool error a Rust error stands for (see the module docs for the classes).
pub fn error_of<E: std::error::Error + 'static>(err: &E) -> ToolError {
    let mut error_class = "execution_failed";
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(failure) = e.downcast_ref::<ToolFailure>() {
            return failure.0.clone();
        }
        if e.is::<tokio::time::error::Elapsed>() {
            error_class = "timeout";
            break;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            let class = match io.kind() {
                TimedOut => Some("timeout"),
                PermissionDenied => Some("permission_denied"),
                ConnectionRefused | ConnectionReset | ConnectionAborted | NotConnected | HostUnreachable
                | NetworkUnreachable => Some("dependency_unavailable"),
                _ => None,
            };
            if let Some(class) = class {
                error_class = class;
                break;
            }
        }
        cause = e.source();
    }
    let message = err.to_string();
    let type_name = std::any::type_name::<E>();
    ToolError {
        error_class: error_class.into(),
        error_code: Some(format!("rust:{type_name}")),
        message: Some(if message.is_empty() {
            type_name.to_owned()
        } else {
            message
        }),
        ..ToolError::default()
    }
}

/// An error that names its own [`ToolError`]: return it (or have it in a `source()` chain) to choose
/// the error class and code [`InvocationGuard::fail`] records.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure(pub ToolError);

impl std::fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let message = self.0.message.as_deref().unwrap_or(&self.0.error_class);
        write!(f, "{message}")
    }
}

impl std::error::Error for ToolFailure {}
