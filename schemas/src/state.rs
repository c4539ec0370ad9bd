//! The invocation state machine shared by the projector and the exporter.
//!
//! [`step`] is a pure function: `(track, event facts, config) → (track', anomalies, transition)`. It
//! does no I/O and never fails; every event is kept, and whatever is odd about it becomes an
//! [`Anomaly`] (DESIGN.md §6). Callers fold it over an invocation's events in ledger order.
//!
//! ```text
//!  rank  state                                  reached by
//!   -    (unknown)                              any event before `planned` (orphans wait here, flagged)
//!   0    planned                                tool.invocation.planned
//!   1    selected                               tool.invocation.selected
//!   2    arguments_ready | schema_parse_failed  tool.invocation.arguments_ready (data.status picks)
//!   3    pre_hooks_running                      tool.hook.pre.*          ── stop ──▶ [blocked]
//!   4    awaiting_approval                      tool.permission.requested, decided `ask`
//!   5    approved                               decided `allow`          ── deny ──▶ [denied]
//!   6    queued                                 tool.invocation.queued
//!   7    running | needs_input | yielded        .started | progress needs_input (*) | .yielded
//!   8    partial_result | post_hooks_running    .partial_result | tool.hook.post.*
//!   9    [succeeded] [failed] [canceled] [timed_out]   their classes
//!        [validation_failed]                    .validation_failed (from anywhere)
//!        [denied]                               decided `deny`, or result.created with status `denied`
//!        [blocked]                              a pre hook's `stop`
//!
//!  down the table, or skipping rows: legal.   up the table: illegal_transition (state stays).
//!  also legal: back to running from needs_input, yielded or partial_result (resuming).
//!  [terminal] states stick: later lifecycle events are kept and flagged event_after_terminal.
//!  (*) or the spec's own progress status `waiting_for_input`.
//! ```
//!
//! Rules, as DESIGN.md §3 and §6 fix them:
//! - **The class decides the transition** ([`crate::contract::Effect`]). The data refines it only where
//!   the table says so: `arguments_ready` with data.status `schema_parse_failed`; a pre hook's `stop`
//!   (→ blocked); a decision's behavior; a progress status `needs_input` (or the spec's own
//!   `waiting_for_input`); a result status `denied`.
//! - `status_mismatch`: an invocation object whose `status` disagrees with its class (an unknown status
//!   disagrees too, and is also an `unknown_value`). Results and progress are not compared.
//! - `orphan_event`: every event of an invocation before its `planned` event. The invocation exists in
//!   state `unknown` and its state does not move until `planned` arrives; the events are still kept.
//! - `event_after_terminal`: an event that would drive the lifecycle (a transition class, a permission
//!   decision, progress, a result with status `denied`) after a terminal state. The state sticks. Results,
//!   persistence and redaction records are not lifecycle moves: the spec emits the terminal result after
//!   the terminal state, so they are expected there (a `denied` result after `denied` is the same fact).
//! - `illegal_transition`: a move to a lower rank. The state does not move backwards: an old event
//!   arriving late cannot undo a newer one.
//! - `out_of_order`: an event whose `time` is earlier than the latest seen by more than the skew.
//! - `unknown_value`: every open-vocabulary value outside its list, as the caller found them in the data.
//! - `duplicate_result`: a second `tool.result.created` with a different `result_id` than the first.
//! - `missing_field`: a field the ledger's own schema expects (not the official ones) is absent — a
//!   permission request without `permission_input`, say. The event still moves the invocation.

use crate::class::EventClass;
use crate::contract::{Data, DataObject, Effect, contract};
use crate::model::{
    InvocationStatus, PermissionBehavior, ProgressStatus, ResultStatus, UnknownValue, UnknownValues,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// An invocation's state: the spec's 20 lifecycle states, plus `unknown` for an invocation whose
/// `planned` event has not arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationState {
    /// Events arrived before `planned` (orphans); a new invocation starts here.
    #[default]
    Unknown,
    /// Planned.
    Planned,
    /// The tool was selected.
    Selected,
    /// The model input did not parse.
    SchemaParseFailed,
    /// Arguments parsed.
    ArgumentsReady,
    /// Validation failed (terminal).
    ValidationFailed,
    /// Pre-tool hooks are running.
    PreHooksRunning,
    /// Waiting for a permission decision.
    AwaitingApproval,
    /// Permission granted.
    Approved,
    /// Permission denied (terminal).
    Denied,
    /// Queued.
    Queued,
    /// Running.
    Running,
    /// Waiting for input.
    NeedsInput,
    /// A partial result was produced.
    PartialResult,
    /// Post-tool hooks are running.
    PostHooksRunning,
    /// Yielded.
    Yielded,
    /// Succeeded (terminal).
    Succeeded,
    /// Failed (terminal).
    Failed,
    /// Canceled (terminal).
    Canceled,
    /// Timed out (terminal).
    TimedOut,
    /// Blocked by a hook (terminal).
    Blocked,
}

impl InvocationState {
    /// Every state, `unknown` first, then the spec's order.
    pub const ALL: &'static [InvocationState] = &[
        Self::Unknown,
        Self::Planned,
        Self::Selected,
        Self::SchemaParseFailed,
        Self::ArgumentsReady,
        Self::ValidationFailed,
        Self::PreHooksRunning,
        Self::AwaitingApproval,
        Self::Approved,
        Self::Denied,
        Self::Queued,
        Self::Running,
        Self::NeedsInput,
        Self::PartialResult,
        Self::PostHooksRunning,
        Self::Yielded,
        Self::Succeeded,
        Self::Failed,
        Self::Canceled,
        Self::TimedOut,
        Self::Blocked,
    ];

    /// The wire name (the spec's status word; `unknown` for orphans).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Planned => "planned",
            Self::Selected => "selected",
            Self::SchemaParseFailed => "schema_parse_failed",
            Self::ArgumentsReady => "arguments_ready",
            Self::ValidationFailed => "validation_failed",
            Self::PreHooksRunning => "pre_hooks_running",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Queued => "queued",
            Self::Running => "running",
            Self::NeedsInput => "needs_input",
            Self::PartialResult => "partial_result",
            Self::PostHooksRunning => "post_hooks_running",
            Self::Yielded => "yielded",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::TimedOut => "timed_out",
            Self::Blocked => "blocked",
        }
    }

    /// The state an invocation `status` names; `None` for a status outside the spec's list.
    pub fn from_status(status: &InvocationStatus) -> Option<Self> {
        Some(match status {
            InvocationStatus::Planned => Self::Planned,
            InvocationStatus::Selected => Self::Selected,
            InvocationStatus::SchemaParseFailed => Self::SchemaParseFailed,
            InvocationStatus::ArgumentsReady => Self::ArgumentsReady,
            InvocationStatus::ValidationFailed => Self::ValidationFailed,
            InvocationStatus::PreHooksRunning => Self::PreHooksRunning,
            InvocationStatus::AwaitingApproval => Self::AwaitingApproval,
            InvocationStatus::Approved => Self::Approved,
            InvocationStatus::Denied => Self::Denied,
            InvocationStatus::Queued => Self::Queued,
            InvocationStatus::Running => Self::Running,
            InvocationStatus::NeedsInput => Self::NeedsInput,
            InvocationStatus::PartialResult => Self::PartialResult,
            InvocationStatus::PostHooksRunning => Self::PostHooksRunning,
            InvocationStatus::Yielded => Self::Yielded,
            InvocationStatus::Succeeded => Self::Succeeded,
            InvocationStatus::Failed => Self::Failed,
            InvocationStatus::Canceled => Self::Canceled,
            InvocationStatus::TimedOut => Self::TimedOut,
            InvocationStatus::Blocked => Self::Blocked,
            InvocationStatus::Other(_) => return None,
        })
    }

    /// Whether no event can move it any more: succeeded, failed, canceled, timed_out, denied, blocked,
    /// validation_failed.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded
                | Self::Failed
                | Self::Canceled
                | Self::TimedOut
                | Self::Denied
                | Self::Blocked
                | Self::ValidationFailed
        )
    }

    /// Its place in the lifecycle order (module doc); `None` for `unknown`, which may go anywhere.
    pub const fn rank(self) -> Option<u8> {
        Some(match self {
            Self::Unknown => return None,
            Self::Planned => 0,
            Self::Selected => 1,
            Self::ArgumentsReady | Self::SchemaParseFailed => 2,
            Self::PreHooksRunning => 3,
            Self::AwaitingApproval => 4,
            Self::Approved => 5,
            Self::Queued => 6,
            Self::Running | Self::NeedsInput | Self::Yielded => 7,
            Self::PartialResult | Self::PostHooksRunning => 8,
            Self::ValidationFailed
            | Self::Denied
            | Self::Succeeded
            | Self::Failed
            | Self::Canceled
            | Self::TimedOut
            | Self::Blocked => 9,
        })
    }

    /// Whether moving from `self` to `to` is legal: forward or sideways in rank (skipping is legal), or
    /// resuming to `running` from `needs_input`, `yielded` or `partial_result`.
    pub fn may_move_to(self, to: InvocationState) -> bool {
        let resumes =
            to == Self::Running && matches!(self, Self::NeedsInput | Self::Yielded | Self::PartialResult);
        match (self.rank(), to.rank()) {
            (Some(from), Some(to)) => to >= from || resumes,
            _ => true,
        }
    }
}

impl fmt::Display for InvocationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event's `time` as nanoseconds since the Unix epoch (UTC), parsed from RFC 3339.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventTime(pub i64);

impl EventTime {
    /// Parses an RFC 3339 timestamp (`2026-05-08T00:00:02.5+02:00`, `…Z`, lowercase `t`/`z` too).
    /// `None` when it is not one, or lies outside the years 1678–2261 that nanoseconds in an `i64`
    /// cover: such an event simply has no time to compare.
    pub fn parse_rfc3339(text: &str) -> Option<EventTime> {
        let b = text.as_bytes();
        let num = |from: usize, to: usize| -> Option<i64> {
            let digits = b.get(from..to)?;
            digits.iter().try_fold(0i64, |acc, d| {
                d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
            })
        };
        let sep = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
        if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
            return None;
        }
        let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
        let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
        let mut at = 19;
        let mut nanos = 0i64;
        if b.get(at) == Some(&b'.') {
            at += 1;
            let start = at;
            while b.get(at).is_some_and(u8::is_ascii_digit) {
                if at - start < 9 {
                    nanos = nanos * 10 + i64::from(b[at] - b'0');
                }
                at += 1;
            }
            if at == start {
                return None;
            }
            for _ in (at - start)..9 {
                nanos *= 10;
            }
        }
        let offset = match b.get(at)? {
            b'Z' | b'z' if at + 1 == b.len() => 0,
            sign @ (b'+' | b'-') if at + 6 == b.len() && sep(at + 3, b":") => {
                let (oh, om) = (num(at + 1, at + 3)?, num(at + 4, at + 6)?);
                if oh > 23 || om > 59 {
                    return None;
                }
                let offset = oh * 3600 + om * 60;
                if *sign == b'-' { -offset } else { offset }
            }
            _ => return None,
        };
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 60
        {
            return None;
        }
        let seconds =
            days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
        seconds
            .checked_mul(1_000_000_000)?
            .checked_add(nanos)
            .map(EventTime)
    }
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// What the state machine needs to know about one event. Build it with [`EventFacts::from_data`] from
/// the decoded data, or field by field (the generator and tests do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFacts {
    /// The class (CloudEvents `type`).
    pub class: EventClass,
    /// Its ledger sequence.
    pub seq: u64,
    /// Its CloudEvents `time`, when present and parseable.
    pub time: Option<EventTime>,
    /// data.status, when the data is an invocation object.
    pub invocation_status: Option<InvocationStatus>,
    /// data.status, when the data is a progress record.
    pub progress_status: Option<ProgressStatus>,
    /// data.behavior, when the data is a permission decision.
    pub behavior: Option<PermissionBehavior>,
    /// Whether the data is a hook record with a `stop` request.
    pub hook_stop: bool,
    /// data.status, when the data is a result.
    pub result_status: Option<ResultStatus>,
    /// data.result_id, when the data is a result.
    pub result_id: Option<String>,
    /// The open-vocabulary values outside their lists found in the data
    /// ([`UnknownValues::unknown_values`]).
    pub unknown_values: Vec<UnknownValue>,
    /// The fields the ledger's own schema expects that the data lacks, as JSON Pointers under `data`
    /// ([`Data::missing_fields`]).
    pub missing_fields: Vec<String>,
}

impl EventFacts {
    /// Facts with nothing known about the data: only class and sequence.
    pub fn new(class: EventClass, seq: u64) -> Self {
        EventFacts {
            class,
            seq,
            time: None,
            invocation_status: None,
            progress_status: None,
            behavior: None,
            hook_stop: false,
            result_status: None,
            result_id: None,
            unknown_values: Vec::new(),
            missing_fields: Vec::new(),
        }
    }

    /// The facts of an event whose data was decoded with [`Data::decode_for`]; `time` is the
    /// CloudEvents `time` (see [`EventTime::parse_rfc3339`]).
    pub fn from_data(class: EventClass, seq: u64, time: Option<EventTime>, data: &Data) -> Self {
        let mut facts = EventFacts::new(class, seq);
        facts.time = time;
        facts.unknown_values = data.unknown_values();
        facts.missing_fields = data.missing_fields();
        match data {
            Data::Invocation(invocation) => facts.invocation_status = Some(invocation.status.clone()),
            Data::Progress(progress) => facts.progress_status = Some(progress.status.clone()),
            Data::PermissionDecision(decision) => facts.behavior = Some(decision.behavior),
            Data::Hook(hook) => facts.hook_stop = hook.stop.is_some(),
            Data::Result(result) => {
                facts.result_status = Some(result.status.clone());
                facts.result_id = Some(result.result_id.clone());
            }
            _ => {}
        }
        facts
    }
}

/// Knobs of the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How much earlier than the latest event's time an event may be before it is `out_of_order`.
    pub out_of_order_skew: Duration,
}

impl Default for Config {
    /// A skew of 5 s (DESIGN.md §6).
    fn default() -> Self {
        Config {
            out_of_order_skew: Duration::from_secs(5),
        }
    }
}

/// What the state machine remembers about one invocation between events.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InvocationTrack {
    /// The current state.
    pub state: InvocationState,
    /// Whether the `planned` event has arrived.
    pub planned: bool,
    /// The latest event time seen.
    pub latest_time: Option<EventTime>,
    /// The `result_id` of the first `tool.result.created`.
    pub result_id: Option<String>,
    /// The sequence of the last event applied.
    pub last_seq: Option<u64>,
    /// How many events were applied.
    pub events: u64,
}

impl InvocationTrack {
    /// Whether the invocation is in a terminal state.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }
}

/// The anomaly kinds of DESIGN.md §6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    /// An invocation object's status disagrees with its class.
    StatusMismatch,
    /// A lifecycle event after a terminal state.
    EventAfterTerminal,
    /// A move backwards in the lifecycle.
    IllegalTransition,
    /// An event for an invocation not (yet) planned.
    OrphanEvent,
    /// An event earlier than the latest by more than the skew.
    OutOfOrder,
    /// A value outside a typed open vocabulary.
    UnknownValue,
    /// A second result with a different result_id.
    DuplicateResult,
    /// A field the ledger's own schemas add (not the official ones) is absent.
    MissingField,
}

impl AnomalyKind {
    /// Every kind.
    pub const ALL: &'static [AnomalyKind] = &[
        Self::StatusMismatch,
        Self::EventAfterTerminal,
        Self::IllegalTransition,
        Self::OrphanEvent,
        Self::OutOfOrder,
        Self::UnknownValue,
        Self::DuplicateResult,
        Self::MissingField,
    ];

    /// The wire name, e.g. `status_mismatch`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::StatusMismatch => "status_mismatch",
            Self::EventAfterTerminal => "event_after_terminal",
            Self::IllegalTransition => "illegal_transition",
            Self::OrphanEvent => "orphan_event",
            Self::OutOfOrder => "out_of_order",
            Self::UnknownValue => "unknown_value",
            Self::DuplicateResult => "duplicate_result",
            Self::MissingField => "missing_field",
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An anomaly with the facts an operator needs. Serializes as `{"kind": "...", ...details}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Anomaly {
    /// data.status (verbatim) disagrees with the state the class moves to.
    StatusMismatch {
        /// The status the data carries.
        status: String,
        /// The state the class names (and the invocation moved to).
        class_state: InvocationState,
    },
    /// A lifecycle event arrived after this terminal state; it was kept, the state stuck.
    EventAfterTerminal {
        /// The terminal state.
        terminal: InvocationState,
    },
    /// The event would move the lifecycle backwards; the state did not move.
    IllegalTransition {
        /// The current state.
        from: InvocationState,
        /// The state the event names.
        to: InvocationState,
    },
    /// The invocation's `planned` event has not arrived.
    OrphanEvent,
    /// The event's time is earlier than the latest by more than the skew.
    OutOfOrder {
        /// The event's time.
        time: EventTime,
        /// The latest time seen before it.
        latest: EventTime,
    },
    /// A value outside a typed open vocabulary.
    UnknownValue(UnknownValue),
    /// A second `tool.result.created` named a different result.
    DuplicateResult {
        /// The first result's id.
        first: String,
        /// This result's id.
        result_id: String,
    },
    /// A field the ledger's own schema expects is absent; the event was kept and applied.
    MissingField {
        /// Its JSON Pointer under `data` (`/permission_input`).
        path: String,
    },
}

impl Anomaly {
    /// Its kind.
    pub fn kind(&self) -> AnomalyKind {
        match self {
            Anomaly::StatusMismatch { .. } => AnomalyKind::StatusMismatch,
            Anomaly::EventAfterTerminal { .. } => AnomalyKind::EventAfterTerminal,
            Anomaly::IllegalTransition { .. } => AnomalyKind::IllegalTransition,
            Anomaly::OrphanEvent => AnomalyKind::OrphanEvent,
            Anomaly::OutOfOrder { .. } => AnomalyKind::OutOfOrder,
            Anomaly::UnknownValue(_) => AnomalyKind::UnknownValue,
            Anomaly::DuplicateResult { .. } => AnomalyKind::DuplicateResult,
            Anomaly::MissingField { .. } => AnomalyKind::MissingField,
        }
    }
}

/// A state change an event caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// The state before.
    pub from: InvocationState,
    /// The state after.
    pub to: InvocationState,
}

/// The outcome of one [`step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The track after the event.
    pub track: InvocationTrack,
    /// What was odd about the event, in a fixed order (unknown values, missing fields, time, result,
    /// status, then lifecycle).
    pub anomalies: Vec<Anomaly>,
    /// The state change, when there was one.
    pub transition: Option<Transition>,
}

/// The state the event's class (refined by its data) moves the invocation to; `None` when it does not
/// move it (records, passthrough, progress that is not `needs_input`, non-invocation classes).
pub fn target_state(event: &EventFacts) -> Option<InvocationState> {
    use InvocationState as S;
    match contract(event.class).effect {
        Effect::Transition(S::ArgumentsReady)
            if event.invocation_status == Some(InvocationStatus::SchemaParseFailed) =>
        {
            Some(S::SchemaParseFailed)
        }
        Effect::Transition(S::PreHooksRunning)
            if event.hook_stop
                && matches!(
                    event.class,
                    EventClass::HookPreStarted | EventClass::HookPreCompleted
                ) =>
        {
            Some(S::Blocked)
        }
        Effect::Transition(state) => Some(state),
        Effect::PermissionDecision => match event.behavior? {
            PermissionBehavior::Allow => Some(S::Approved),
            PermissionBehavior::Ask => Some(S::AwaitingApproval),
            PermissionBehavior::Deny => Some(S::Denied),
            PermissionBehavior::Passthrough => None,
        },
        Effect::Progress => match event.progress_status {
            Some(ProgressStatus::NeedsInput | ProgressStatus::WaitingForInput) => Some(S::NeedsInput),
            _ => None,
        },
        Effect::Result => (event.result_status == Some(ResultStatus::Denied)).then_some(S::Denied),
        _ => None,
    }
}

/// Applies one event to an invocation's track. Pure: same inputs, same outputs; never panics.
///
/// Events of classes that do not belong to an invocation (declarations, surfaces, deferred refs, the
/// ledger's own) leave the track as it is; only their unknown values are reported.
pub fn step(track: &InvocationTrack, event: &EventFacts, config: &Config) -> Step {
    let row = contract(event.class);
    let mut next = track.clone();
    let mut anomalies: Vec<Anomaly> = event
        .unknown_values
        .iter()
        .cloned()
        .map(Anomaly::UnknownValue)
        .chain(
            event
                .missing_fields
                .iter()
                .map(|path| Anomaly::MissingField { path: path.clone() }),
        )
        .collect();
    if !row.is_invocation_event() {
        return Step {
            track: next,
            anomalies,
            transition: None,
        };
    }
    next.events = next.events.saturating_add(1);
    next.last_seq = Some(event.seq);

    if let Some(time) = event.time {
        if let Some(latest) = track.latest_time {
            let skew = i64::try_from(config.out_of_order_skew.as_nanos()).unwrap_or(i64::MAX);
            if time.0 < latest.0.saturating_sub(skew) {
                anomalies.push(Anomaly::OutOfOrder { time, latest });
            }
        }
        next.latest_time = Some(track.latest_time.map_or(time, |latest| latest.max(time)));
    }

    if let (EventClass::ResultCreated, Some(result_id)) = (event.class, &event.result_id) {
        match &track.result_id {
            Some(first) if first != result_id => anomalies.push(Anomaly::DuplicateResult {
                first: first.clone(),
                result_id: result_id.clone(),
            }),
            Some(_) => {}
            None => next.result_id = Some(result_id.clone()),
        }
    }

    let target = target_state(event);
    if let (DataObject::Invocation, Some(status), Some(class_state)) =
        (row.data, &event.invocation_status, target)
        && InvocationState::from_status(status) != Some(class_state)
    {
        anomalies.push(Anomaly::StatusMismatch {
            status: status.as_str().to_owned(),
            class_state,
        });
    }

    if !track.planned {
        if event.class == EventClass::InvocationPlanned {
            next.planned = true;
            next.state = InvocationState::Planned;
            let transition = Some(Transition {
                from: track.state,
                to: InvocationState::Planned,
            });
            return Step {
                track: next,
                anomalies,
                transition,
            };
        }
        anomalies.push(Anomaly::OrphanEvent);
        return Step {
            track: next,
            anomalies,
            transition: None,
        };
    }

    let drives_lifecycle = matches!(
        row.effect,
        Effect::Transition(_) | Effect::PermissionDecision | Effect::Progress
    ) || target.is_some();
    if track.state.is_terminal() {
        let same_fact = row.effect == Effect::Result && target == Some(track.state);
        if drives_lifecycle && !same_fact {
            anomalies.push(Anomaly::EventAfterTerminal {
                terminal: track.state,
            });
        }
        return Step {
            track: next,
            anomalies,
            transition: None,
        };
    }

    let Some(to) = target else {
        return Step {
            track: next,
            anomalies,
            transition: None,
        };
    };
    let from = track.state;
    if to == from {
        return Step {
            track: next,
            anomalies,
            transition: None,
        };
    }
    if !from.may_move_to(to) {
        anomalies.push(Anomaly::IllegalTransition { from, to });
        return Step {
            track: next,
            anomalies,
            transition: None,
        };
    }
    next.state = to;
    Step {
        track: next,
        anomalies,
        transition: Some(Transition { from, to }),
    }
}

/// Folds [`step`] over an invocation's events in ledger order, from a new track.
pub fn replay<'a>(
    events: impl IntoIterator<Item = &'a EventFacts>,
    config: &Config,
) -> (InvocationTrack, Vec<Anomaly>) {
    let mut track = InvocationTrack::default();
    let mut anomalies = Vec::new();
    for event in events {
        let outcome = step(&track, event, config);
        track = outcome.track;
        anomalies.extend(outcome.anomalies);
    }
    (track, anomalies)
}

#[cfg(test)]
mod tests;
