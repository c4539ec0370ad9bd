//! A seeded generator of realistic sessions, with the truth tests compare against.
//!
//! [`generate`] plays a script of scenarios per session and emits what an agent platform would
//! publish: structured CloudEvents of all 27 Agent Tool classes, in publish order. Each scenario
//! knows what it intends — the state each invocation should end in, its permission decisions, its
//! four inputs and every mutation between them, its result, and any anomaly planted on purpose — and
//! writes that into the [`Truth`] as it goes. The truth never comes from the state machine or the
//! projector: those are what it checks.
//!
//! ```text
//! per tenant: tool.declared × catalog
//! per session: tool.surface.created ─▶ scenarios (shuffled, seeded) ─▶ …
//!   one invocation: planned ▸ selected ▸ arguments_ready ▸ [validation_failed]
//!                   ▸ [hook.pre.started ▸ hook.pre.completed (updated_input | stop)]
//!                   ▸ [permission.requested ▸ permission.decided (ask ▸ allow | deny)]
//!                   ▸ queued ▸ started ▸ progress* ▸ [partial_result* | needs_input | yielded ▸ started]
//!                   ▸ [hook.post.*] ▸ succeeded | failed | canceled | timed_out
//!                   ▸ result.created ▸ [result.persisted] ▸ [result.redacted]
//! ```
//!
//! Same seed and config, same bytes: only a ChaCha RNG seeded from the config decides anything.

mod catalog;
mod scenarios;

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::class::EventClass;

/// Agent Tool schema version the generator writes.
pub const SCHEMA_VERSION: &str = "0.2.0";

/// Marker inside every planted secret, so a test can search stored bytes for any of them at once.
pub const SECRET_MARKER: &str = "TLSECRET";

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneratorConfig {
    /// Seeds every random choice; the same config gives the same events and truth.
    pub seed: u64,
    /// How many agent sessions; each plays every scenario once, so one session covers all 27 classes.
    pub sessions: usize,
    /// Tenants the sessions are spread over (round-robin). Each must be a valid tenant token.
    pub tenants: Vec<String>,
    /// Extra ordinary invocations per session (plain successes and approvals) on top of the scenarios.
    pub extra_invocations: usize,
    /// Plant one of each anomaly kind of DESIGN.md §6 per tenant (recorded in the truth).
    pub plant_anomalies: bool,
    /// Unix time in milliseconds of the first event.
    pub start_unix_ms: i64,
    /// The CloudEvents `source` of generated events.
    pub source: String,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            seed: 0,
            sessions: 1,
            tenants: vec!["acme".to_owned()],
            extra_invocations: 2,
            plant_anomalies: false,
            // 2026-05-08T09:00:00Z
            start_unix_ms: 1_778_230_800_000,
            source: "urn:toolledger:generator".to_owned(),
        }
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generated {
    /// Structured CloudEvents (`specversion`, `id`, …, `data`), in publish order.
    pub events: Vec<Value>,
    /// What the scenarios intended.
    pub truth: Truth,
}

/// The intended outcome of a generated run, written by the scenario script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Truth {
    /// The seed used.
    pub seed: u64,
    /// Sessions in the order they started.
    pub sessions: Vec<SessionTruth>,
    /// Every invocation, in the order it was planned within its session.
    pub invocations: Vec<InvocationTruth>,
    /// Tool declarations per tenant, with every version declared.
    pub tools: Vec<ToolTruth>,
    /// Surfaces and their revisions.
    pub surfaces: Vec<SurfaceTruth>,
    /// Deferred tools and their last loading state.
    pub deferred: Vec<DeferredTruth>,
    /// Every secret planted, with every place it appears.
    pub secrets: Vec<PlantedSecret>,
    /// Anomalies planted on purpose (empty unless `plant_anomalies`).
    pub anomalies: Vec<PlantedAnomaly>,
    /// How many events of each class were published.
    pub class_counts: BTreeMap<String, usize>,
}

impl Truth {
    /// The truth of one invocation.
    pub fn invocation(&self, invocation_id: &str) -> Option<&InvocationTruth> {
        self.invocations.iter().find(|i| i.invocation_id == invocation_id)
    }
}

/// One session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTruth {
    /// Tenant.
    pub tenant: String,
    /// Session id (the `sessionid` extension).
    pub session_id: String,
    /// Its surface.
    pub surface_id: String,
    /// Its invocations, in planning order.
    pub invocation_ids: Vec<String>,
    /// Events published for it.
    pub event_count: usize,
    /// Time of its first event.
    pub started_at: String,
    /// Time of its last event.
    pub ended_at: String,
}

/// The script a scenario follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Scenario {
    /// Planned to succeeded, nothing in the way.
    PlainSuccess,
    /// Permission asked, the user allows (and edits the input).
    AskThenAllow,
    /// Permission denied; a terminal `denied` result.
    Denied,
    /// A pre-hook rewrites the input; post hooks update the output.
    HookMutation,
    /// A pre-hook stops the call: blocked.
    HookStop,
    /// Arguments parse but fail tool validation.
    ValidationFailed,
    /// Arguments do not parse (arguments_ready with status schema_parse_failed); retried.
    SchemaParseFailed,
    /// Execution fails; retried as a new invocation.
    FailedThenRetry,
    /// A retry of an earlier invocation (`retry_of`, `attempt`).
    Retry,
    /// Execution exceeds its timeout.
    TimedOut,
    /// The user interrupts execution.
    Canceled,
    /// The invocation yields to the background and resumes.
    Yielded,
    /// The tool needs user input mid-run, then resumes.
    NeedsInput,
    /// Partial results stream before the final result.
    PartialResults,
    /// A result above 32 KiB, persisted with a preview.
    LargeResult,
    /// A result redacted by its producer.
    Redacted,
    /// Bearer tokens, OTC `context.authorization`/`context.secrets` and sensitive fields planted.
    Secrets,
    /// A deferred MCP tool is discovered, loaded, added to the surface and called.
    DeferredTool,
}

/// One invocation as its scenario intends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvocationTruth {
    /// Tenant.
    pub tenant: String,
    /// Session.
    pub session_id: String,
    /// Invocation id (`subject` and `invocationid` of its events).
    pub invocation_id: String,
    /// The tool called.
    pub tool_id: String,
    /// The script followed.
    pub scenario: Scenario,
    /// Spec state after the last event (planned … blocked).
    pub final_state: String,
    /// Every state entered, in order, consecutive repeats collapsed.
    pub states: Vec<String>,
    /// Every event that sets the state by the contract table (DESIGN.md §3), in order, repeats
    /// kept: progress without `needs_input`, permission requests' data, results other than `denied`
    /// and persistence decisions set none.
    pub transitions: Vec<TransitionTruth>,
    /// Whether the final state is terminal.
    pub terminal: bool,
    /// The four inputs as their events carried them last.
    pub inputs: Inputs,
    /// Every change between inputs, with its source, in order.
    pub mutations: Vec<MutationTruth>,
    /// Permission decisions, in order.
    pub permission_decisions: Vec<DecisionTruth>,
    /// Hooks that ran, in order.
    pub hooks: Vec<HookTruth>,
    /// Progress updates published.
    pub progress_count: usize,
    /// Partial results published.
    pub partial_results: usize,
    /// The final result, when one was created.
    pub result: Option<ResultTruth>,
    /// Error class of the failure, when there was one.
    pub error_class: Option<String>,
    /// The invocation this one retries.
    pub retry_of: Option<String>,
    /// Attempt number, 1 for a first try.
    pub attempt: u32,
    /// Anomaly kinds planted on this invocation.
    pub anomalies: Vec<String>,
    /// Ids of its events, in publish order.
    pub event_ids: Vec<String>,
}

/// One event and the state it sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionTruth {
    /// The event.
    pub event_id: String,
    /// The state it sets.
    pub state: String,
}

/// The four inputs of an invocation (DESIGN.md §3); `None` where no event carried one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    /// As the model emitted it; never overwritten.
    pub model_input: Option<Value>,
    /// Normalized copy shown to hooks and UIs.
    pub observable_input: Option<Value>,
    /// Input the permission check evaluated.
    pub permission_input: Option<Value>,
    /// Final input passed to the executor.
    pub call_input: Option<Value>,
}

/// One change between inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutationTruth {
    /// `hook`, `permission_decision`, or the official input-mutation `source_type` (`adapter`, `runtime`, …).
    pub source: String,
    /// Id of the hook run, the permission decision, or the input-mutation object.
    pub source_id: String,
    /// Input changed from (`model_input`, …).
    pub from: String,
    /// Input changed to.
    pub to: String,
    /// Top-level fields that changed.
    pub changed_fields: Vec<String>,
}

/// One permission decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionTruth {
    /// Decision id.
    pub decision_id: String,
    /// allow, ask, deny or passthrough.
    pub behavior: String,
    /// Whether it carried `updated_input`.
    pub updated_input: bool,
}

/// One hook run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookTruth {
    /// Hook run id.
    pub hook_id: String,
    /// `pre_tool_use`, `post_tool_use`, `post_tool_use_failure`.
    pub hook_event: String,
    /// Whether it carried `updated_input`.
    pub updated_input: bool,
    /// Whether it carried `updated_output`.
    pub updated_output: bool,
    /// Whether it stopped the call.
    pub stop: bool,
}

/// The final result of an invocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultTruth {
    /// Result id.
    pub result_id: String,
    /// Result status (succeeded, denied, failed, …).
    pub status: String,
    /// Whether it is an error result.
    pub is_error: bool,
    /// Bytes of text content inline in `tool.result.created`.
    pub content_bytes: usize,
    /// The persistence decision's strategy, when one was published.
    pub persistence: Option<String>,
    /// Redaction state after `tool.result.redacted`, when published.
    pub redaction_state: Option<String>,
}

/// A tool's declarations in one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolTruth {
    /// Tenant.
    pub tenant: String,
    /// Tool id.
    pub tool_id: String,
    /// Every `version` declared, in order.
    pub versions: Vec<String>,
    /// Lifecycle in the last declaration.
    pub lifecycle: String,
    /// Sensitive fields its input contract lists.
    pub sensitive_fields: Vec<String>,
}

/// A surface and its revisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurfaceTruth {
    /// Tenant.
    pub tenant: String,
    /// Surface id.
    pub surface_id: String,
    /// Number of revisions published (created + updates).
    pub revisions: usize,
    /// Loaded tools in the last revision.
    pub loaded: Vec<String>,
    /// Deferred tools in the last revision.
    pub deferred: Vec<String>,
    /// Blocked tools and reasons in the last revision.
    pub blocked: Vec<(String, String)>,
    /// Excluded tools and reasons in the last revision.
    pub excluded: Vec<(String, String)>,
}

/// A deferred tool's last state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeferredTruth {
    /// Tenant.
    pub tenant: String,
    /// Tool id.
    pub tool_id: String,
    /// Last loading state.
    pub loading_state: String,
}

/// Where a planted secret came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SecretKind {
    /// A field the declaration's input contract lists as sensitive.
    SensitiveField,
    /// An OTC `context.authorization` token.
    OtcAuthorization,
    /// An OTC `context.secrets` value.
    OtcSecret,
    /// An `Authorization: Bearer …` token.
    BearerToken,
}

/// A secret planted in the events; none of it may be found at rest after scrubbing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlantedSecret {
    /// The secret itself (contains [`SECRET_MARKER`]).
    pub value: String,
    /// What kind of secret.
    pub kind: SecretKind,
    /// Tenant.
    pub tenant: String,
    /// Every place it appears.
    pub locations: Vec<SecretLocation>,
}

/// One place a secret appears.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretLocation {
    /// The event's id.
    pub event_id: String,
    /// JSON Pointer within the structured CloudEvent (e.g. `/data/model_input/api_key`).
    pub pointer: String,
}

/// An anomaly planted on purpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlantedAnomaly {
    /// Anomaly kind (DESIGN.md §6): status_mismatch, event_after_terminal, …
    pub kind: String,
    /// The invocation it concerns, when there is one.
    pub invocation_id: Option<String>,
    /// The event that triggers it.
    pub event_id: String,
}

/// `count` events of the benchmark workload for `tenants`: the sessions of seeds `seed`, `seed + 1`,
/// … (10 sessions a seed, 5 extra invocations), the generator's mix of classes and sizes, sessions
/// kept whole except the last. What `toolledger bench` and ingest's cost examples measure over.
pub fn workload(tenants: &[&str], count: usize, seed: u64) -> Vec<Value> {
    let mut events = Vec::with_capacity(count);
    let mut seed = seed;
    while events.len() < count {
        let generated = generate(&GeneratorConfig {
            seed,
            sessions: 10,
            tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
            extra_invocations: 5,
            ..GeneratorConfig::default()
        });
        events.extend(generated.events);
        seed += 1;
    }
    events.truncate(count);
    events
}

/// Generates sessions as configured. Deterministic in the config.
pub fn generate(config: &GeneratorConfig) -> Generated {
    let mut g = Gen::new(config);
    let tenants: Vec<String> = if config.tenants.is_empty() {
        vec!["acme".to_owned()]
    } else {
        config.tenants.clone()
    };
    let mut first_session_of: BTreeMap<String, bool> = BTreeMap::new();
    let mut session_start = config.start_unix_ms;
    for n in 0..config.sessions {
        let tenant = tenants[n % tenants.len()].clone();
        let first = !first_session_of.contains_key(&tenant);
        first_session_of.insert(tenant.clone(), true);
        if first {
            g.declare_catalog(&tenant, session_start);
        }
        let mut s = Session::new(&mut g, &tenant, session_start + 1_000);
        scenarios::play_session(&mut g, &mut s, first);
        g.finish_session(s);
        // Sessions overlap in time: the next starts a few seconds to a minute later.
        session_start += g.rng.random_range(3_000..60_000);
    }
    g.finish()
}

/// The generator's working state.
struct Gen {
    rng: ChaCha8Rng,
    source: String,
    plant_anomalies: bool,
    extra_invocations: usize,
    counter: u64,
    /// (publish time, publish order, event)
    events: Vec<(i64, u64, Value)>,
    truth: Truth,
    secrets: Vec<(String, SecretKind, String)>,
}

/// One session being played.
struct Session {
    tenant: String,
    session_id: String,
    surface_id: String,
    trace_id: String,
    clock: i64,
    first_ms: i64,
    invocation_ids: Vec<String>,
    event_count: usize,
}

impl Session {
    fn new(g: &mut Gen, tenant: &str, start: i64) -> Session {
        let session_id = g.id("sess");
        let surface_id = g.id("surf");
        let trace_id = g.hex(32);
        Session {
            tenant: tenant.to_owned(),
            session_id,
            surface_id,
            trace_id,
            clock: start,
            first_ms: start,
            invocation_ids: Vec::new(),
            event_count: 0,
        }
    }

    /// Moves the session's clock forward by a plausible duration.
    fn wait(&mut self, g: &mut Gen, min_ms: i64, max_ms: i64) {
        self.clock += g.rng.random_range(min_ms..=max_ms.max(min_ms));
    }

    fn now(&self) -> String {
        rfc3339(self.clock)
    }
}

/// Extension attributes of one event beyond tenant and session.
#[derive(Default)]
struct Ext<'a> {
    invocation: Option<&'a str>,
    tool: Option<&'a str>,
    /// Event time earlier than publish time (the `out_of_order` anomaly).
    backdate_ms: i64,
}

impl Gen {
    fn new(config: &GeneratorConfig) -> Gen {
        Gen {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            source: config.source.clone(),
            plant_anomalies: config.plant_anomalies,
            extra_invocations: config.extra_invocations,
            counter: 0,
            events: Vec::new(),
            truth: Truth {
                seed: config.seed,
                ..Truth::default()
            },
            secrets: Vec::new(),
        }
    }

    fn extra_invocations(&self) -> usize {
        self.extra_invocations
    }

    /// A unique id: a running counter (uniqueness) and random hex (realism).
    fn id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let r: u32 = self.rng.random();
        format!("{prefix}_{:06}{r:08x}", self.counter)
    }

    fn hex(&mut self, len: usize) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        (0..len)
            .map(|_| char::from(DIGITS[self.rng.random_range(0..16)]))
            .collect()
    }

    /// A recognizable secret, remembered for the truth.
    fn secret(&mut self, kind: SecretKind, tenant: &str) -> String {
        let tag = match kind {
            SecretKind::SensitiveField => "field",
            SecretKind::OtcAuthorization => "otcauth",
            SecretKind::OtcSecret => "otcsecret",
            SecretKind::BearerToken => "bearer",
        };
        let value = format!("sk-{SECRET_MARKER}-{tag}-{}", self.hex(24));
        self.secrets.push((value.clone(), kind, tenant.to_owned()));
        value
    }

    /// Publishes one event of a session; returns its id.
    fn emit(
        &mut self,
        s: &mut Session,
        class: EventClass,
        subject: &str,
        ext: Ext<'_>,
        data: Value,
    ) -> String {
        // Strictly increasing times within a session.
        s.clock += 1;
        let span = self.hex(16);
        let mut event = self.envelope(class, subject, &s.tenant, s.clock - ext.backdate_ms, data);
        event["sessionid"] = json!(s.session_id);
        if let Some(inv) = ext.invocation {
            event["invocationid"] = json!(inv);
        }
        if let Some(tool) = ext.tool {
            event["toolid"] = json!(tool);
        }
        event["traceparent"] = json!(format!("00-{}-{span}-01", s.trace_id));
        if self.rng.random_bool(0.1) {
            event["tracestate"] = json!(format!("agentrt={}", self.hex(8)));
        }
        let id = event["id"].as_str().unwrap_or_default().to_owned();
        self.push(s.clock, event);
        s.event_count += 1;
        *self
            .truth
            .class_counts
            .entry(class.as_str().to_owned())
            .or_default() += 1;
        id
    }

    /// Publishes an event outside any session (catalog declarations).
    fn emit_catalog(&mut self, time: i64, tenant: &str, tool_id: &str, data: Value) -> String {
        let mut event = self.envelope(EventClass::ToolDeclared, tool_id, tenant, time, data);
        event["toolid"] = json!(tool_id);
        let id = event["id"].as_str().unwrap_or_default().to_owned();
        self.push(time, event);
        *self
            .truth
            .class_counts
            .entry(EventClass::ToolDeclared.as_str().to_owned())
            .or_default() += 1;
        id
    }

    fn envelope(&mut self, class: EventClass, subject: &str, tenant: &str, time: i64, data: Value) -> Value {
        json!({
            "specversion": "1.0",
            "id": self.id("evt"),
            "source": self.source,
            "type": class.as_str(),
            "subject": subject,
            "time": rfc3339(time),
            "datacontenttype": "application/json",
            "tenant": tenant,
            "data": data,
        })
    }

    fn push(&mut self, publish_ms: i64, event: Value) {
        let order = self.events.len() as u64;
        self.events.push((publish_ms, order, event));
    }

    fn finish_session(&mut self, s: Session) {
        self.truth.sessions.push(SessionTruth {
            tenant: s.tenant,
            session_id: s.session_id,
            surface_id: s.surface_id,
            invocation_ids: s.invocation_ids,
            event_count: s.event_count,
            started_at: rfc3339(s.first_ms + 1),
            ended_at: rfc3339(s.clock),
        });
    }

    fn finish(mut self) -> Generated {
        self.events.sort_by_key(|(t, order, _)| (*t, *order));
        let events: Vec<Value> = self.events.into_iter().map(|(_, _, e)| e).collect();
        // Locate every planted secret by searching the events themselves, so the truth lists
        // every copy (inputs are copied between the four variants and into hooks and decisions).
        let mut secrets: Vec<PlantedSecret> = self
            .secrets
            .into_iter()
            .map(|(value, kind, tenant)| PlantedSecret {
                value,
                kind,
                tenant,
                locations: Vec::new(),
            })
            .collect();
        for event in &events {
            let id = event["id"].as_str().unwrap_or_default();
            find_strings(event, SECRET_MARKER, &mut String::new(), &mut |pointer, text| {
                for secret in secrets.iter_mut().filter(|s| text.contains(&s.value)) {
                    secret.locations.push(SecretLocation {
                        event_id: id.to_owned(),
                        pointer: pointer.clone(),
                    });
                }
            });
        }
        self.truth.secrets = secrets;
        Generated {
            events,
            truth: self.truth,
        }
    }
}

/// Calls `found` with the JSON Pointer and text of every string in `value` that contains `needle`.
fn find_strings(value: &Value, needle: &str, at: &mut String, found: &mut dyn FnMut(String, &str)) {
    match value {
        Value::String(s) if s.contains(needle) => found(at.clone(), s),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                find_strings(item, needle, at, found);
                at.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                find_strings(v, needle, at, found);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds.
pub fn rfc3339(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let millis = unix_ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_778_230_800_000), "2026-05-08T09:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
    }
}
