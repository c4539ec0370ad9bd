//! The one invocation fold: an invocation's ledger entries, taken one at a time in ledger order, give
//! everything the ledger says about the invocation. The projector (SQLite) and the exporter (Parquet)
//! both write their invocation rows from it, so the two cannot disagree (DESIGN.md §11: each meaning
//! has one home).
//!
//! ```text
//!  ledger entry ─▶ ClassifiedEvent (class, typed data, session, invocation id) ─▶ FoldEntry
//!                                                                                   │
//!  InvocationFold::apply(entry) ───────────────────────────────────────────────────┘
//!     ├─ state::step                    ─▶ track: state, planned, result_id, times, counts
//!     ├─ invocation objects             ─▶ snapshot, merged field by field (typed)
//!     ├─ inputs and updated_input       ─▶ the four inputs, input mutations with their source
//!     ├─ first tool.result.created      ─▶ its error (the fallback of the one error rule)
//!     └─ decisions, session, tool ids   ─▶ decision count and last behavior, session, tool id
//!     ▼
//!  Applied: what this entry did (transition, anomalies, mutations touched)
//!     └─▶ InvocationLog::record: the transitions and anomalies so far, for whoever keeps them
//! ```
//!
//! [`InvocationFold`] is pure (no I/O, never fails) and serializable: the projector stores it with
//! the invocation's row and continues from it in the next batch; the exporter snapshots the folds
//! of open invocations. A fold that went through serde continues exactly as the one that did not,
//! so where a caller cuts its batches never shows in what it writes (DESIGN.md §1: a rebuild equals
//! the incremental result).
//!
//! The rules (DESIGN.md §3 and §6; `docs/projections.md` repeats them for readers of the tables):
//! - **Which invocation**: an entry belongs to the invocation [`crate::ClassifiedEvent`] names
//!   (`invocationid`, else the data's `invocation_id`, else the CloudEvents `subject`). Only classes
//!   whose contract row is an invocation event are folded; others change nothing.
//! - **State**: [`crate::state::step`], unchanged. Its transitions and anomalies come back per entry
//!   in [`Applied`].
//! - **Snapshot**: the invocation objects (data of `tool.invocation.*` classes that carry one) merged
//!   field by field in ledger order: a field an object carries replaces the earlier value, fields it
//!   does not carry stay, unknown fields merge by name. `model_input` and `model_input_ref` keep the
//!   value first seen.
//! - **The four inputs**: `model_input` as first seen, never overwritten. `observable_input`,
//!   `permission_input` and `call_input` hold the last value any entry carried: an invocation
//!   object's, a permission request's `permission_input`, a hook's `updated_input` (into
//!   `permission_input` before any permission decision, into `call_input` after one), a decision's
//!   `updated_input` (into `call_input`). Each `*_ref` likewise (`model_input_ref` first seen).
//! - **Input mutations**: a hook's or a decision's `updated_input` is a mutation from the nearest
//!   input upstream of its target that is present, with the top-level fields that differ; an
//!   official `input-mutation` object in `data.input_mutations` is one as the producer states it.
//!   A mutation is keyed by its source and source id (hook id, decision id, `mutation_id`): the same
//!   key again updates the record in place, keeping its first place (`seq`, `idx`) in the order.
//! - **Error, one precedence rule**: the invocation's own `data.error` (a `tool_error` object, as the
//!   merged snapshot holds it: the latest invocation object that carried `error`) wins; else the
//!   error of its first final result (the first `tool.result.created`, the one `result_id` names);
//!   else none. The invocation's error is the producer's account of why the invocation ended
//!   (DESIGN.md §3: `validation_failed`, `failed` carry "invocation (+ error)"); a result's error says
//!   what the tool returned and stands in only when the invocation says nothing. Partial results,
//!   later (duplicate) results and redactions never supply it.
//! - **Tool id, one rule**: the merged snapshot's `tool_id` (an invocation object always carries
//!   one); before any invocation object, the first tool an entry names: its data's `tool_id` (a
//!   hook's, a permission request's, or any object's), else its `toolid` extension.
//! - **Session**: the first session an entry names ([`crate::ClassifiedEvent::session_id`]).
//! - **Retries**: `retry_of` and `attempt` of the merged snapshot.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::class::EventClass;
use crate::contract::{Data, contract};
use crate::model::{Loose, PermissionBehavior, ToolError, ToolInvocation, present};
use crate::state::{self, Anomaly, Config, EventFacts, EventTime, InvocationState, InvocationTrack};

/// One ledger entry of an invocation, as the fold takes it: what [`crate::ClassifiedEvent`] and the
/// CloudEvent's attributes say, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct FoldEntry<'a> {
    /// The ledger sequence.
    pub seq: u64,
    /// The event class.
    pub class: EventClass,
    /// The data, decoded as the class's object.
    pub data: &'a Data,
    /// The CloudEvents `time`, as the event carried it.
    pub time: Option<&'a str>,
    /// The session ([`crate::ClassifiedEvent::session_id`]).
    pub session_id: Option<&'a str>,
    /// The `toolid` extension.
    pub tool_id: Option<&'a str>,
}

/// One of the four inputs of an invocation, upstream first (DESIGN.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputStage {
    /// Arguments as the model or caller emitted them.
    ModelInput,
    /// The normalized copy hooks, permission UI and transcripts see.
    ObservableInput,
    /// What policy, approval and classifiers evaluate.
    PermissionInput,
    /// What the executor gets.
    CallInput,
}

impl InputStage {
    /// The four, upstream first.
    pub const ALL: [InputStage; 4] = [
        Self::ModelInput,
        Self::ObservableInput,
        Self::PermissionInput,
        Self::CallInput,
    ];

    /// The field name, e.g. `permission_input`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ModelInput => "model_input",
            Self::ObservableInput => "observable_input",
            Self::PermissionInput => "permission_input",
            Self::CallInput => "call_input",
        }
    }
}

/// The four inputs and their references, as the fold holds them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    // `present` keeps an explicit JSON null (an input that is null) apart from an absent one
    // through serde, so a stored fold continues exactly as the one in memory.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    model_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model_input_ref: Option<String>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    observable_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observable_input_ref: Option<String>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    permission_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    permission_input_ref: Option<String>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    call_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    call_input_ref: Option<String>,
}

impl Inputs {
    /// The input's value, when some entry carried one (`Some(Value::Null)` for an explicit null).
    pub fn value(&self, stage: InputStage) -> Option<&Value> {
        match stage {
            InputStage::ModelInput => self.model_input.as_ref(),
            InputStage::ObservableInput => self.observable_input.as_ref(),
            InputStage::PermissionInput => self.permission_input.as_ref(),
            InputStage::CallInput => self.call_input.as_ref(),
        }
    }

    /// The input's `*_ref`.
    pub fn reference(&self, stage: InputStage) -> Option<&str> {
        match stage {
            InputStage::ModelInput => self.model_input_ref.as_deref(),
            InputStage::ObservableInput => self.observable_input_ref.as_deref(),
            InputStage::PermissionInput => self.permission_input_ref.as_deref(),
            InputStage::CallInput => self.call_input_ref.as_deref(),
        }
    }

    fn slots(&mut self, stage: InputStage) -> (&mut Option<Value>, &mut Option<String>) {
        match stage {
            InputStage::ModelInput => (&mut self.model_input, &mut self.model_input_ref),
            InputStage::ObservableInput => (&mut self.observable_input, &mut self.observable_input_ref),
            InputStage::PermissionInput => (&mut self.permission_input, &mut self.permission_input_ref),
            InputStage::CallInput => (&mut self.call_input, &mut self.call_input_ref),
        }
    }

    /// The nearest input upstream of `stage` that is present.
    fn upstream_of(&self, stage: InputStage) -> Option<InputStage> {
        let at = InputStage::ALL.iter().position(|s| *s == stage)?;
        InputStage::ALL[..at]
            .iter()
            .rev()
            .copied()
            .find(|s| self.value(*s).is_some())
    }

    /// Takes what an invocation object carries: `model_input` only if none yet, the others always.
    fn carry(&mut self, invocation: &ToolInvocation) {
        for stage in InputStage::ALL {
            let (value, reference) = stage_of(invocation, stage);
            let first_only = stage == InputStage::ModelInput;
            let (slot, ref_slot) = self.slots(stage);
            if let Some(value) = value
                && (!first_only || slot.is_none())
            {
                *slot = Some(value.clone());
            }
            if let Some(reference) = reference
                && (!first_only || ref_slot.is_none())
            {
                *ref_slot = Some(reference.clone());
            }
        }
    }
}

fn stage_of(invocation: &ToolInvocation, stage: InputStage) -> (Option<&Value>, Option<&String>) {
    match stage {
        InputStage::ModelInput => (
            invocation.model_input.as_ref(),
            invocation.model_input_ref.as_ref(),
        ),
        InputStage::ObservableInput => (
            invocation.observable_input.as_ref(),
            invocation.observable_input_ref.as_ref(),
        ),
        InputStage::PermissionInput => (
            invocation.permission_input.as_ref(),
            invocation.permission_input_ref.as_ref(),
        ),
        InputStage::CallInput => (invocation.call_input.as_ref(), invocation.call_input_ref.as_ref()),
    }
}

/// The source of a hook's `updated_input`.
pub const SOURCE_HOOK: &str = "hook";
/// The source of a permission decision's `updated_input`.
pub const SOURCE_PERMISSION_DECISION: &str = "permission_decision";

/// One change between the four inputs, with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputMutationRecord {
    /// [`SOURCE_HOOK`], [`SOURCE_PERMISSION_DECISION`], or an official input-mutation object's
    /// `source_type`.
    pub source: String,
    /// The hook id, the decision id, or the object's `mutation_id`.
    pub source_id: String,
    /// The entry that first recorded it (a later one with the same source updates it in place).
    pub seq: u64,
    /// Its position among the mutations of that entry.
    pub idx: u32,
    /// The official object's `source_ref`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
    /// The input it changed: an [`InputStage`] name for hooks and decisions (the nearest present
    /// input upstream of the target), the object's `from_input_ref` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_input: Option<String>,
    /// The input it produced: an [`InputStage`] name, or the object's `to_input_ref`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_input: Option<String>,
    /// Top-level fields that differ (hooks and decisions: computed, both inputs objects; else empty);
    /// the object's `changed_fields` otherwise.
    pub changed_fields: Vec<String>,
    /// The object's `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The object's `created_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// The updated input (hooks and decisions).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
}

/// A state change, with the entry that caused it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransitionRecord {
    /// The entry.
    pub seq: u64,
    /// The state before.
    pub from: InvocationState,
    /// The state after.
    pub to: InvocationState,
    /// The entry's class.
    pub class: EventClass,
    /// The entry's CloudEvents `time`, as carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// An anomaly with the entry that triggered it. Serializes as `{"seq": …, "kind": …, …details}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnomalyRecord {
    /// The entry.
    pub seq: u64,
    /// The anomaly.
    #[serde(flatten)]
    pub anomaly: Anomaly,
}

/// What one entry did to its invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The entry.
    pub seq: u64,
    /// The state change, when there was one.
    pub transition: Option<TransitionRecord>,
    /// What was odd about the entry, in [`crate::state::step`]'s order.
    pub anomalies: Vec<Anomaly>,
    /// The input mutations it recorded or updated, as indexes into [`InvocationFold::mutations`].
    pub mutations: Vec<usize>,
}

/// Where the invocation's error comes from under the one precedence rule (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorSource {
    /// The invocation's own `data.error`.
    Invocation,
    /// Its first final result's `error`.
    Result,
}

impl ErrorSource {
    /// `invocation` or `result`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Invocation => "invocation",
            Self::Result => "result",
        }
    }
}

/// The invocation's error and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationError {
    /// Which rule supplied it.
    pub source: ErrorSource,
    /// The error.
    pub error: ToolError,
}

impl InvocationError {
    /// `error_class` as its wire string.
    pub fn class(&self) -> Option<&str> {
        self.error.error_class.as_ref().map(|class| class.as_str())
    }

    /// `error_code`.
    pub fn code(&self) -> Option<&str> {
        self.error.error_code.as_deref()
    }

    /// `message`.
    pub fn message(&self) -> Option<&str> {
        self.error.message.as_deref()
    }
}

/// One invocation folded from its entries (module doc). Start from [`InvocationFold::default`] and
/// [`InvocationFold::apply`] each entry in ledger order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationFold {
    track: InvocationTrack,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first_time: Option<EventTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot: Option<ToolInvocation>,
    #[serde(default)]
    inputs: Inputs,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    mutations: Vec<InputMutationRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    carried_tool_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result_error: Option<ToolError>,
    #[serde(default)]
    decisions: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_behavior: Option<PermissionBehavior>,
}

impl InvocationFold {
    /// Folds the next entry of this invocation. Pure; never fails. An entry of a class that does not
    /// belong to an invocation changes nothing (its unknown values still come back as anomalies).
    pub fn apply(&mut self, entry: &FoldEntry<'_>, config: &Config) -> Applied {
        let time = entry.time.and_then(EventTime::parse_rfc3339);
        let facts = EventFacts::from_data(entry.class, entry.seq, time, entry.data);
        let step = state::step(&self.track, &facts, config);
        let mut applied = Applied {
            seq: entry.seq,
            transition: step.transition.map(|t| TransitionRecord {
                seq: entry.seq,
                from: t.from,
                to: t.to,
                class: entry.class,
                time: entry.time.map(str::to_owned),
            }),
            anomalies: step.anomalies,
            mutations: Vec::new(),
        };
        if !contract(entry.class).is_invocation_event() {
            return applied;
        }
        let first_result = entry.class == EventClass::ResultCreated && self.track.result_id.is_none();
        self.track = step.track;
        self.first_seq.get_or_insert(entry.seq);
        if self.first_time.is_none() {
            self.first_time = time;
        }
        if self.session_id.is_none() {
            self.session_id = entry.session_id.map(str::to_owned);
        }
        match entry.data {
            Data::Invocation(invocation) => {
                match &mut self.snapshot {
                    Some(snapshot) => merge_invocation(snapshot, invocation),
                    None => self.snapshot = Some(invocation.as_ref().clone()),
                }
                self.inputs.carry(invocation);
                for (idx, mutation) in (0u32..).zip(invocation.input_mutations()) {
                    let at = self.upsert_mutation(InputMutationRecord {
                        source: mutation.source_type.as_str().to_owned(),
                        source_id: mutation.mutation_id,
                        seq: entry.seq,
                        idx,
                        source_ref: mutation.source_ref,
                        from_input: mutation.from_input_ref,
                        to_input: mutation.to_input_ref,
                        changed_fields: mutation.changed_fields.unwrap_or_default(),
                        reason: mutation.reason,
                        created_at: Some(mutation.created_at),
                        value: None,
                    });
                    applied.mutations.push(at);
                }
            }
            Data::Hook(hook) => {
                if let Some(updated) = &hook.updated_input {
                    // Before any permission decision a hook's update is what the permission check
                    // sees; after one, it is what the executor gets.
                    let to = if self.decisions > 0 {
                        InputStage::CallInput
                    } else {
                        InputStage::PermissionInput
                    };
                    let at = self.mutate(SOURCE_HOOK, &hook.hook_id, to, updated, entry.seq);
                    applied.mutations.push(at);
                }
            }
            Data::PermissionRequest(request) => {
                if let Some(input) = &request.permission_input {
                    self.inputs.permission_input = Some(input.clone());
                }
            }
            Data::PermissionDecision(decision) => {
                self.decisions += 1;
                self.last_behavior = Some(decision.behavior);
                if let Some(updated) = &decision.updated_input {
                    let at = self.mutate(
                        SOURCE_PERMISSION_DECISION,
                        &decision.decision_id,
                        InputStage::CallInput,
                        updated,
                        entry.seq,
                    );
                    applied.mutations.push(at);
                }
            }
            Data::Result(result) if first_result => {
                self.result_error = result.error.as_ref().and_then(Loose::typed).cloned();
            }
            _ => {}
        }
        if self.carried_tool_id.is_none() {
            self.carried_tool_id = data_tool_id(entry.data).or(entry.tool_id).map(str::to_owned);
        }
        applied
    }

    /// A hook's or a decision's `updated_input` into `to`, from the nearest input upstream of it.
    fn mutate(&mut self, source: &str, source_id: &str, to: InputStage, updated: &Value, seq: u64) -> usize {
        let from = self.inputs.upstream_of(to);
        let changed_fields = changed_fields(from.and_then(|stage| self.inputs.value(stage)), updated);
        *self.inputs.slots(to).0 = Some(updated.clone());
        self.upsert_mutation(InputMutationRecord {
            source: source.to_owned(),
            source_id: source_id.to_owned(),
            seq,
            idx: 0,
            source_ref: None,
            from_input: from.map(|stage| stage.as_str().to_owned()),
            to_input: Some(to.as_str().to_owned()),
            changed_fields,
            reason: None,
            created_at: None,
            value: Some(updated.clone()),
        })
    }

    /// Records `record`, or updates the one with the same source and source id in place (its `seq`
    /// and `idx` stay). Returns its index.
    fn upsert_mutation(&mut self, record: InputMutationRecord) -> usize {
        let found = self
            .mutations
            .iter()
            .position(|m| m.source == record.source && m.source_id == record.source_id);
        match found {
            Some(at) => {
                let kept = &mut self.mutations[at];
                let (seq, idx) = (kept.seq, kept.idx);
                *kept = InputMutationRecord { seq, idx, ..record };
                at
            }
            None => {
                self.mutations.push(record);
                self.mutations.len() - 1
            }
        }
    }

    /// The state machine's track.
    pub fn track(&self) -> &InvocationTrack {
        &self.track
    }

    /// The current state.
    pub fn state(&self) -> InvocationState {
        self.track.state
    }

    /// Whether the invocation is in a terminal state.
    pub fn is_terminal(&self) -> bool {
        self.track.is_terminal()
    }

    /// The first entry folded.
    pub fn first_seq(&self) -> Option<u64> {
        self.first_seq
    }

    /// The last entry folded.
    pub fn last_seq(&self) -> Option<u64> {
        self.track.last_seq
    }

    /// How many entries were folded.
    pub fn event_count(&self) -> u64 {
        self.track.events
    }

    /// The first event time seen, in ledger order.
    pub fn first_time(&self) -> Option<EventTime> {
        self.first_time
    }

    /// The latest event time seen.
    pub fn latest_time(&self) -> Option<EventTime> {
        self.track.latest_time
    }

    /// The session.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The invocation objects merged field by field; `None` before the first one.
    pub fn snapshot(&self) -> Option<&ToolInvocation> {
        self.snapshot.as_ref()
    }

    /// The four inputs.
    pub fn inputs(&self) -> &Inputs {
        &self.inputs
    }

    /// Every input mutation, in the order first recorded.
    pub fn mutations(&self) -> &[InputMutationRecord] {
        &self.mutations
    }

    /// The tool, under the one tool id rule (module doc).
    pub fn tool_id(&self) -> Option<&str> {
        self.snapshot
            .as_ref()
            .map(|s| s.tool_id.as_str())
            .or(self.carried_tool_id.as_deref())
    }

    /// The error, under the one precedence rule (module doc).
    pub fn error(&self) -> Option<InvocationError> {
        if let Some(error) = self.snapshot.as_ref().and_then(ToolInvocation::error) {
            return Some(InvocationError {
                source: ErrorSource::Invocation,
                error,
            });
        }
        self.result_error.clone().map(|error| InvocationError {
            source: ErrorSource::Result,
            error,
        })
    }

    /// The invocation this one retries.
    pub fn retry_of(&self) -> Option<&str> {
        self.snapshot.as_ref().and_then(ToolInvocation::retry_of)
    }

    /// Which attempt this is.
    pub fn attempt(&self) -> Option<u64> {
        self.snapshot.as_ref().and_then(ToolInvocation::attempt)
    }

    /// The first `tool.result.created`'s `result_id`.
    pub fn result_id(&self) -> Option<&str> {
        self.track.result_id.as_deref()
    }

    /// How many permission decisions were folded.
    pub fn decision_count(&self) -> u64 {
        self.decisions
    }

    /// The last permission decision's behavior.
    pub fn last_behavior(&self) -> Option<PermissionBehavior> {
        self.last_behavior
    }
}

/// The transitions and anomalies of an invocation so far, for a reader that keeps them with the
/// fold rather than writing each as it comes (the exporter; tests).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationLog {
    /// Every state change, in ledger order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transitions: Vec<TransitionRecord>,
    /// Every anomaly, in ledger order and, within an entry, in [`crate::state::step`]'s order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anomalies: Vec<AnomalyRecord>,
}

impl InvocationLog {
    /// Appends what one entry did.
    pub fn record(&mut self, applied: &Applied) {
        self.transitions.extend(applied.transition.clone());
        self.anomalies
            .extend(applied.anomalies.iter().cloned().map(|anomaly| AnomalyRecord {
                seq: applied.seq,
                anomaly,
            }));
    }
}

/// Merges a later invocation object into the snapshot field by field (module doc). The
/// destructuring names every field, so a field added to [`ToolInvocation`] does not compile until
/// its merge is decided here.
fn merge_invocation(base: &mut ToolInvocation, later: &ToolInvocation) {
    fn take<T: Clone>(base: &mut Option<T>, later: &Option<T>) {
        if let Some(value) = later {
            *base = Some(value.clone());
        }
    }
    fn keep_first<T: Clone>(base: &mut Option<T>, later: &Option<T>) {
        if base.is_none() {
            base.clone_from(later);
        }
    }
    let ToolInvocation {
        schema_version,
        invocation_id,
        tool_id,
        surface_id,
        native_call_id,
        status,
        model_input,
        model_input_ref,
        observable_input,
        observable_input_ref,
        permission_input,
        permission_input_ref,
        call_input,
        call_input_ref,
        actor_ref,
        runtime_refs,
        policy_refs,
        permission_decision_refs,
        hook_refs,
        evidence_refs,
        telemetry_refs,
        artifact_refs,
        scheduler_policy_ref,
        status_transitions,
        created_at,
        started_at,
        ended_at,
        extra,
    } = later;
    base.schema_version.clone_from(schema_version);
    base.invocation_id.clone_from(invocation_id);
    base.tool_id.clone_from(tool_id);
    take(&mut base.surface_id, surface_id);
    take(&mut base.native_call_id, native_call_id);
    base.status.clone_from(status);
    keep_first(&mut base.model_input, model_input);
    keep_first(&mut base.model_input_ref, model_input_ref);
    take(&mut base.observable_input, observable_input);
    take(&mut base.observable_input_ref, observable_input_ref);
    take(&mut base.permission_input, permission_input);
    take(&mut base.permission_input_ref, permission_input_ref);
    take(&mut base.call_input, call_input);
    take(&mut base.call_input_ref, call_input_ref);
    take(&mut base.actor_ref, actor_ref);
    take(&mut base.runtime_refs, runtime_refs);
    take(&mut base.policy_refs, policy_refs);
    take(&mut base.permission_decision_refs, permission_decision_refs);
    take(&mut base.hook_refs, hook_refs);
    take(&mut base.evidence_refs, evidence_refs);
    take(&mut base.telemetry_refs, telemetry_refs);
    take(&mut base.artifact_refs, artifact_refs);
    take(&mut base.scheduler_policy_ref, scheduler_policy_ref);
    take(&mut base.status_transitions, status_transitions);
    base.created_at.clone_from(created_at);
    take(&mut base.started_at, started_at);
    take(&mut base.ended_at, ended_at);
    for (key, value) in extra {
        base.extra.insert(key.clone(), value.clone());
    }
}

/// The tool an entry's data names: the typed field where the object has one, else a `tool_id` it
/// carries as an unknown field.
fn data_tool_id(data: &Data) -> Option<&str> {
    match data {
        Data::Invocation(invocation) => Some(&invocation.tool_id),
        Data::Hook(hook) => hook.tool_id.as_deref(),
        Data::PermissionRequest(request) => request.tool_id.as_deref(),
        other => other.extra().get("tool_id").and_then(Value::as_str),
    }
}

/// Top-level fields that differ between two inputs when both are objects; empty otherwise.
fn changed_fields(from: Option<&Value>, to: &Value) -> Vec<String> {
    let (Some(Value::Object(from)), Value::Object(to)) = (from, to) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = from
        .keys()
        .chain(to.keys())
        .filter(|key| from.get(*key) != to.get(*key))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests;
