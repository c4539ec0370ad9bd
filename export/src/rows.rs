//! From ledger entries to table rows: one [`EventRow`] per entry, a [`DecisionRow`] per permission
//! decision, a [`ResultRow`] per result record, and an [`InvocationRow`] for every invocation a
//! range of entries changed, as it stands at the range's end ([`Tracker`], which keeps each
//! invocation's [`InvocationFold`] — the one invocation fold the projector's SQLite rows come from
//! too — and its [`InvocationLog`]).
//!
//! Everything here is a pure function of the entries in ledger order, so the same sequence range
//! (with the same tracker state before it) gives the same rows on every run.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};
use toolledger_schemas::fold::{FoldEntry, InputStage, InvocationFold, InvocationLog};
use toolledger_schemas::state::Config as StateConfig;
use toolledger_schemas::{EventTime, contract};
use toolledger_wire::event::format_time;
use toolledger_wire::{LedgerEntry, PayloadRef, entry};

/// The partition of an entry whose tenant cannot be read (it does not decode as a ledger entry).
pub const UNDECODABLE_TENANT: &str = "_undecodable";
/// The date partition of an entry with no readable time at all.
pub const NO_DATE: &str = "1970-01-01";

/// Partition values of a row: `tenant=…/event_date=…`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition {
    /// The entry's tenant.
    pub tenant: String,
    /// The UTC date (`YYYY-MM-DD`) of the event's time, else of its ingestion.
    pub event_date: String,
}

impl Partition {
    /// The Hive-style folder, `tenant=<t>/event_date=<d>`.
    pub fn folder(&self) -> String {
        format!("tenant={}/event_date={}", self.tenant, self.event_date)
    }
}

/// One ledger entry, as the `events` table stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    /// Where the row is filed.
    pub partition: Partition,
    /// ATL_LEDGER sequence.
    pub seq: u64,
    /// `SHA-256(0x00 || entry)`, lowercase hex.
    pub leaf_hash: String,
    /// The canonical entry bytes, exactly as the ledger holds them.
    pub entry: Vec<u8>,
    /// CloudEvents `id`.
    pub event_id: Option<String>,
    /// CloudEvents `source`.
    pub source: Option<String>,
    /// The event class (`type`).
    pub class: Option<String>,
    /// The session (extension or `data.session_id`).
    pub session_id: Option<String>,
    /// CloudEvents `subject`.
    pub subject: Option<String>,
    /// The invocation the event is about.
    pub invocation_id: Option<String>,
    /// The tool (`toolid` extension).
    pub tool_id: Option<String>,
    /// Event time, microseconds since the epoch (UTC).
    pub event_time_us: Option<i64>,
    /// Ingestion time, microseconds since the epoch (UTC).
    pub ingested_at_us: Option<i64>,
    /// How the event arrived.
    pub origin: Option<String>,
    /// W3C trace context.
    pub traceparent: Option<String>,
    /// W3C trace state.
    pub tracestate: Option<String>,
    /// An agenttool-event envelope's `trace_refs`, JSON text.
    pub trace_refs: Option<String>,
    /// Payload references, JSON text.
    pub payload_refs: Option<String>,
    /// Scrubbed JSON Pointers, JSON text.
    pub scrubbed_paths: Option<String>,
    /// Promoted: `data.status`.
    pub status: Option<String>,
    /// Promoted: `data.behavior` (permission decisions).
    pub behavior: Option<String>,
    /// Promoted: `data.decision_id`.
    pub decision_id: Option<String>,
    /// Promoted: `data.result_id`.
    pub result_id: Option<String>,
    /// Promoted: `data.error.error_class`.
    pub error_class: Option<String>,
    /// Why the entry could not be read further, if it could not.
    pub problem: Option<String>,
}

/// One version of an invocation: what its [`InvocationFold`] and [`InvocationLog`] say after `seq`,
/// the last entry of a range that changed it. The latest version (the greatest `seq`) is the
/// invocation as the SQLite projection holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationRow {
    /// Tenant and the date of the event at `seq`.
    pub partition: Partition,
    /// The invocation id.
    pub invocation_id: String,
    /// Its session.
    pub session_id: Option<String>,
    /// Its tool (the fold's one rule).
    pub tool_id: Option<String>,
    /// Its surface.
    pub surface_id: Option<String>,
    /// Its state after `seq`.
    pub state: String,
    /// The producer's native call id.
    pub native_call_id: Option<String>,
    /// The invocation this one retries.
    pub retry_of: Option<String>,
    /// Attempt number.
    pub attempt: Option<i64>,
    /// Error class, under the fold's one precedence rule: the invocation's own error, else its first
    /// final result's.
    pub error_class: Option<String>,
    /// Error code.
    pub error_code: Option<String>,
    /// Error message.
    pub error_message: Option<String>,
    /// The last permission decision's behavior.
    pub permission_behavior: Option<String>,
    /// Permission decisions seen.
    pub decision_count: u64,
    /// Events of the invocation up to and including `seq`.
    pub event_count: u64,
    /// The invocation's first entry.
    pub first_seq: u64,
    /// The entry that made it terminal, once it is.
    pub terminal_seq: Option<u64>,
    /// Time of its first event (µs).
    pub first_event_time_us: Option<i64>,
    /// Time of the terminal event (µs).
    pub terminal_event_time_us: Option<i64>,
    /// `data.created_at` (µs).
    pub created_at_us: Option<i64>,
    /// `data.started_at` (µs).
    pub started_at_us: Option<i64>,
    /// `data.ended_at` (µs).
    pub ended_at_us: Option<i64>,
    /// `ended_at − started_at` in milliseconds, when both are known.
    pub duration_ms: Option<f64>,
    /// `data.actor_ref`.
    pub actor_ref: Option<String>,
    /// Which rule supplied the error: `invocation` or `result`.
    pub error_source: Option<String>,
    /// The first `tool.result.created`'s `result_id`.
    pub result_id: Option<String>,
    /// The four inputs (JSON text) in [`InputStage::ALL`] order: model, observable, permission,
    /// call.
    pub inputs: [Option<String>; 4],
    /// Their `*_ref`s, in the same order.
    pub input_refs: [Option<String>; 4],
    /// Every input mutation, JSON array of the fold's records.
    pub input_mutations: String,
    /// Every state change, JSON array of `{seq, from, to, class, time}`.
    pub transitions: String,
    /// Every anomaly of the invocation's entries, JSON array of `{seq, kind, …details}`.
    pub anomalies: String,
    /// The entry this version is the invocation after: the last of its range that changed it.
    pub seq: u64,
}

/// One `tool.permission.decided` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRow {
    /// Tenant and event date.
    pub partition: Partition,
    /// The entry.
    pub seq: u64,
    /// The decision id.
    pub decision_id: Option<String>,
    /// The invocation decided on.
    pub invocation_id: Option<String>,
    /// allow | ask | deny | passthrough.
    pub behavior: Option<String>,
    /// Permission mode.
    pub mode: Option<String>,
    /// The rule source.
    pub source: Option<String>,
    /// The reason, JSON text (a string or the reason object).
    pub reason: Option<String>,
    /// Rule refs, JSON text.
    pub rule_refs: Option<String>,
    /// Policy refs, JSON text.
    pub policy_refs: Option<String>,
    /// Whether the decision replaced the input (the input itself is not exported).
    pub updated_input: bool,
    /// Whether a user modified the input.
    pub user_modified: Option<bool>,
    /// `data.decided_at` (µs).
    pub decided_at_us: Option<i64>,
    /// Event time (µs).
    pub event_time_us: Option<i64>,
}

/// One result record (`tool.result.created`, `.persisted`, `.redacted`): metadata and references,
/// never content.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultRow {
    /// Tenant and event date.
    pub partition: Partition,
    /// The entry.
    pub seq: u64,
    /// The class.
    pub class: String,
    /// The invocation.
    pub invocation_id: Option<String>,
    /// The result id.
    pub result_id: Option<String>,
    /// Result status (created, redacted).
    pub status: Option<String>,
    /// Whether the result is an error.
    pub is_error: Option<bool>,
    /// Content blocks in the result (their bytes are not exported).
    pub content_blocks: Option<u64>,
    /// `ui_facing_summary`.
    pub summary: Option<String>,
    /// Redaction state.
    pub redaction_state: Option<String>,
    /// Error class of the result's error.
    pub error_class: Option<String>,
    /// Persistence strategy (persisted).
    pub strategy: Option<String>,
    /// Where the full result was persisted (a reference).
    pub persisted_ref: Option<String>,
    /// Original size in bytes (persisted).
    pub original_size_bytes: Option<i64>,
    /// Resource and artifact refs, JSON text.
    pub refs: Option<String>,
    /// Payload references of the entry under `/data`, JSON text.
    pub payload_refs: Option<String>,
    /// Event time (µs).
    pub event_time_us: Option<i64>,
}

/// Everything one entry contributes.
#[derive(Debug, Default)]
pub struct EntryRows {
    /// Its `events` row.
    pub event: Option<EventRow>,
    /// Its decision row.
    pub decision: Option<DecisionRow>,
    /// Its result row.
    pub result: Option<ResultRow>,
}

/// An invocation the tracker holds: its fold, the transitions and anomalies its row lists, and
/// when it ended.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenInvocation {
    fold: InvocationFold,
    log: InvocationLog,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended: Option<Ended>,
}

/// The entry that made an invocation terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Ended {
    seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time_us: Option<i64>,
    /// The ledger's time when it ended (µs): the greatest `ingested_at` seen by then, so a clock
    /// stepping back does not move it. Ended invocations are let go by ledger time.
    at_us: i64,
}

/// The last entry of the open range that changed an invocation.
#[derive(Debug, Clone)]
struct Change {
    seq: u64,
    partition: Partition,
}

/// Ended invocations are kept (events after the terminal one still change their row) for this much
/// ledger time after they ended…
pub const KEEP_ENDED_FOR_US: i64 = 7 * 24 * 3600 * 1_000_000;
/// …and at most this many of them, the longest ended let go first.
pub const KEEP_ENDED: usize = 100_000;

/// The invocations, keyed by (tenant, invocation id), each an [`InvocationFold`] with its
/// [`InvocationLog`], and which of them the open range changed. Every range writes one row per
/// invocation it changed ([`Tracker::take_rows`]), so the newest row of an invocation follows every
/// change, events after its terminal state included. Open invocations are held until they end;
/// ended ones for [`KEEP_ENDED_FOR_US`] of ledger time (the greatest `ingested_at` seen), and at
/// most [`KEEP_ENDED`] of them. An event for an invocation let go starts a new fold under the same
/// key, as an event for an unknown invocation does (`docs/parquet.md`). Both rules depend on the
/// ledger alone, so a range redone from a snapshot gives the same rows.
#[derive(Debug, Default)]
pub struct Tracker {
    open: HashMap<(String, String), OpenInvocation>,
    /// Ended invocations by the entry that ended them, the oldest first.
    ended: BTreeMap<u64, (String, String)>,
    /// The greatest `ingested_at` seen (µs).
    latest_us: i64,
    /// Invocations the open range changed (rows only).
    changed: HashMap<(String, String), Change>,
    /// Rows of changed invocations let go before the range closed.
    let_go: Vec<InvocationRow>,
    config: StateConfig,
}

fn micros(time: Option<EventTime>) -> Option<i64> {
    time.map(|t| t.0.div_euclid(1000))
}

fn date_of(us: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_micros(us).map(|t| t.format("%Y-%m-%d").to_string())
}

fn parse_us(value: Option<&Value>) -> Option<i64> {
    micros(value.and_then(Value::as_str).and_then(EventTime::parse_rfc3339))
}

fn text_of(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// A JSON array of records. They are plain data (string keys only), so serializing cannot fail.
fn json_array<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

fn json_text(value: Option<&Value>) -> Option<String> {
    value.filter(|v| !v.is_null()).map(Value::to_string)
}

/// A tracker's state as stored: open invocations sorted by key, so equal states are equal bytes.
/// `fold` names the shape: a snapshot written before the invocation fold does not parse, and the
/// exporter replays from an older one (or from seq 1) instead of half-reading it.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TrackerSnapshot {
    fold: u32,
    latest_us: i64,
    open: Vec<(String, String, OpenInvocation)>,
}

/// The version of [`TrackerSnapshot`]'s shape: 2 holds ended invocations too (a version-1
/// snapshot lacks them, so it is skipped and the ledger replayed).
const SNAPSHOT_FOLD: u32 = 2;

impl Tracker {
    /// The invocations held as JSON bytes (a cache that spares a restart the replay of the ledger).
    /// Taken between ranges: what the open range changed is not in it.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut open: Vec<(String, String, OpenInvocation)> = self
            .open
            .iter()
            .map(|((tenant, id), open)| (tenant.clone(), id.clone(), open.clone()))
            .collect();
        open.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        serde_json::to_vec(&TrackerSnapshot {
            fold: SNAPSHOT_FOLD,
            latest_us: self.latest_us,
            open,
        })
        .unwrap_or_default()
    }

    /// A tracker from [`Tracker::snapshot`] bytes; `None` when they do not parse.
    pub fn restore(bytes: &[u8]) -> Option<Tracker> {
        let snapshot: TrackerSnapshot = serde_json::from_slice(bytes).ok()?;
        if snapshot.fold != SNAPSHOT_FOLD {
            return None;
        }
        let mut ended = BTreeMap::new();
        let open = snapshot
            .open
            .into_iter()
            .map(|(tenant, id, open)| {
                if let Some(end) = open.ended {
                    ended.insert(end.seq, (tenant.clone(), id.clone()));
                }
                ((tenant, id), open)
            })
            .collect();
        Some(Tracker {
            open,
            ended,
            latest_us: snapshot.latest_us,
            ..Tracker::default()
        })
    }

    /// Invocations held, open and ended.
    pub fn open_invocations(&self) -> usize {
        self.open.len()
    }

    /// One row for every invocation changed since the last call (in the order of the entries that
    /// last changed them): the open range's `invocations` rows.
    pub fn take_rows(&mut self) -> Vec<InvocationRow> {
        let mut rows = std::mem::take(&mut self.let_go);
        for (key, change) in self.changed.drain() {
            if let Some(open) = self.open.get(&key) {
                rows.push(invocation_row(key.1, change, open));
            }
        }
        rows.sort_by(|a, b| {
            (a.seq, &a.partition.tenant, &a.invocation_id).cmp(&(
                b.seq,
                &b.partition.tenant,
                &b.invocation_id,
            ))
        });
        rows
    }

    /// Lets go of ended invocations past [`KEEP_ENDED_FOR_US`] or beyond [`KEEP_ENDED`] (before each
    /// invocation entry applies); a changed one leaves its row behind for the range.
    fn let_go_of_ended(&mut self) {
        while let Some((_, key)) = self.ended.first_key_value() {
            let Some(open) = self.open.get(key) else {
                self.ended.pop_first();
                continue;
            };
            let expired = open
                .ended
                .is_some_and(|end| self.latest_us.saturating_sub(end.at_us) > KEEP_ENDED_FOR_US);
            if !expired && self.ended.len() <= KEEP_ENDED {
                return;
            }
            let Some((_, key)) = self.ended.pop_first() else {
                return;
            };
            let Some(open) = self.open.remove(&key) else {
                continue;
            };
            if let Some(change) = self.changed.remove(&key) {
                self.let_go.push(invocation_row(key.1, change, &open));
            }
        }
    }

    /// The rows of the entry at `seq`. With `rows = false` only the tracker moves (replaying the
    /// ledger before a recovered position).
    pub fn apply(&mut self, seq: u64, bytes: &[u8], rows: bool) -> EntryRows {
        self.apply_decoded(seq, bytes, &mut toolledger_ledger::decode_entry(bytes), rows)
    }

    /// [`Tracker::apply`] of an entry already decoded by [`toolledger_ledger::decode_entry`] (the
    /// exporter decodes on a second thread, [`toolledger_ledger::decode_ahead`], which frees what
    /// is left of the entry there).
    pub fn apply_decoded(
        &mut self,
        seq: u64,
        bytes: &[u8],
        decoded: &mut toolledger_ledger::DecodedEntry,
        rows: bool,
    ) -> EntryRows {
        let leaf = std::mem::take(&mut decoded.leaf);
        let (entry, classified) = match &mut decoded.entry {
            Ok(entry) => entry,
            Err(error) => {
                let event = rows.then(|| EventRow {
                    partition: Partition {
                        tenant: UNDECODABLE_TENANT.to_owned(),
                        event_date: NO_DATE.to_owned(),
                    },
                    seq,
                    leaf_hash: leaf,
                    entry: bytes.to_vec(),
                    problem: Some(format!("not a ledger entry: {error}")),
                    ..empty_event()
                });
                return EntryRows {
                    event,
                    ..EntryRows::default()
                };
            }
        };
        let class = classified.class;
        let problem = classified.problem.take();
        let session = classified.session_id.take();
        let invocation_id = classified.invocation_id.take();
        let LedgerEntry { event, ledger } = &*entry;
        let text = |value: Option<&str>| value.map(str::to_owned);
        let tenant = event
            .extension_str("tenant")
            .map_or_else(|| UNDECODABLE_TENANT.to_owned(), str::to_owned);
        let time_text = event.time().map(format_time);
        let time_us = event.time().map(|t| t.timestamp_micros());
        let ingested_us = Some(ledger.ingested_at.timestamp_micros());
        let partition = Partition {
            tenant: tenant.clone(),
            event_date: time_us
                .or(ingested_us)
                .and_then(date_of)
                .unwrap_or_else(|| NO_DATE.to_owned()),
        };
        let data = event.data().unwrap_or(&Value::Null);
        let is_invocation_event = class.is_some_and(|c| contract(c).is_invocation_event());
        let data_text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);

        let mut out = EntryRows::default();
        if rows {
            out.event = Some(EventRow {
                partition: partition.clone(),
                seq,
                leaf_hash: leaf,
                entry: bytes.to_vec(),
                event_id: Some(event.id().to_owned()),
                source: Some(event.source().to_owned()),
                class: Some(event.ty().to_owned()),
                session_id: session.clone(),
                subject: text(event.subject()),
                invocation_id: invocation_id.clone(),
                tool_id: text(event.extension_str("toolid")),
                event_time_us: time_us,
                ingested_at_us: ingested_us,
                origin: Some(ledger.origin.as_str().to_owned()),
                traceparent: text(event.extension_str("traceparent")),
                tracestate: text(event.extension_str("tracestate")),
                trace_refs: ledger.trace_refs.as_deref().map(entry::json_text),
                payload_refs: Some(entry::json_text(&ledger.payload_refs)),
                scrubbed_paths: Some(entry::json_text(&ledger.scrubbed_paths)),
                status: data_text("status"),
                behavior: data_text("behavior"),
                decision_id: data_text("decision_id"),
                result_id: data_text("result_id"),
                error_class: data
                    .get("error")
                    .and_then(|e| e.get("error_class"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                problem,
            });
        }
        let (Some(class), Some(decoded)) = (class, &classified.decoded) else {
            return out;
        };
        let class_str = class.as_str();
        if rows && class_str == "tool.permission.decided" {
            out.decision = Some(DecisionRow {
                partition: partition.clone(),
                seq,
                decision_id: data_text("decision_id"),
                invocation_id: invocation_id.clone(),
                behavior: data_text("behavior"),
                mode: data_text("mode"),
                source: text_of(data.get("source")),
                reason: json_text(data.get("reason")),
                rule_refs: json_text(data.get("rule_refs")),
                policy_refs: json_text(data.get("policy_refs")),
                updated_input: data.get("updated_input").is_some_and(|v| !v.is_null())
                    || data.get("updated_input_ref").is_some_and(|v| !v.is_null()),
                user_modified: data.get("user_modified").and_then(Value::as_bool),
                decided_at_us: parse_us(data.get("decided_at")),
                event_time_us: time_us,
            });
        }
        if rows && class_str.starts_with("tool.result.") {
            let data_refs: Vec<&PayloadRef> = ledger
                .payload_refs
                .iter()
                .filter(|r| r.path.starts_with("/data"))
                .collect();
            let mut refs = Map::new();
            for key in ["resource_refs", "artifact_refs", "persisted_ref", "evidence_refs"] {
                if let Some(value) = data.get(key) {
                    refs.insert(key.to_owned(), value.clone());
                }
            }
            out.result = Some(ResultRow {
                partition: partition.clone(),
                seq,
                class: class_str.to_owned(),
                invocation_id: invocation_id.clone(),
                result_id: data_text("result_id"),
                status: data_text("status"),
                is_error: data.get("is_error").and_then(Value::as_bool),
                content_blocks: data
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|c| c.len() as u64),
                summary: data_text("ui_facing_summary"),
                redaction_state: data_text("redaction_state"),
                error_class: data
                    .get("error")
                    .and_then(|e| e.get("error_class"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                strategy: data_text("strategy"),
                persisted_ref: text_of(data.get("persisted_ref")),
                original_size_bytes: data.get("original_size_bytes").and_then(Value::as_i64),
                refs: (!refs.is_empty()).then(|| Value::Object(refs).to_string()),
                payload_refs: (!data_refs.is_empty()).then(|| entry::json_text(&data_refs)),
                event_time_us: time_us,
            });
        }
        if !is_invocation_event {
            return out;
        }
        let Some(invocation_id) = invocation_id else {
            return out;
        };
        self.latest_us = self.latest_us.max(ledger.ingested_at.timestamp_micros());
        // Before the entry applies: an entry past an ended invocation's hold finds it let go.
        self.let_go_of_ended();
        let key = (tenant, invocation_id);
        let open = self.open.entry(key.clone()).or_default();
        let was_terminal = open.fold.is_terminal();
        let applied = open.fold.apply(
            &FoldEntry {
                seq,
                class,
                data: decoded,
                time: time_text.as_deref(),
                session_id: session.as_deref(),
                tool_id: event.extension_str("toolid"),
            },
            &self.config,
        );
        open.log.record(&applied);
        if !was_terminal && open.fold.is_terminal() {
            open.ended = Some(Ended {
                seq,
                time_us,
                at_us: self.latest_us,
            });
            self.ended.insert(seq, key.clone());
        }
        if rows {
            self.changed.insert(key, Change { seq, partition });
        }
        out
    }
}

/// The invocation's row as it stands after `change`, read from its fold and log.
fn invocation_row(invocation_id: String, change: Change, open: &OpenInvocation) -> InvocationRow {
    let Change { seq, partition } = change;
    let fold = &open.fold;
    let snapshot = fold.snapshot();
    let error = fold.error();
    let parse = |text: Option<&str>| micros(text.and_then(EventTime::parse_rfc3339));
    let started = parse(snapshot.and_then(|s| s.started_at.as_deref()));
    let ended = parse(snapshot.and_then(|s| s.ended_at.as_deref()));
    let owned = |text: Option<&str>| text.map(str::to_owned);
    let inputs = fold.inputs();
    InvocationRow {
        partition,
        invocation_id,
        session_id: owned(fold.session_id()),
        tool_id: owned(fold.tool_id()),
        surface_id: owned(snapshot.and_then(|s| s.surface_id.as_deref())),
        state: fold.state().as_str().to_owned(),
        native_call_id: owned(snapshot.and_then(|s| s.native_call_id.as_deref())),
        retry_of: owned(fold.retry_of()),
        attempt: fold.attempt().and_then(|a| i64::try_from(a).ok()),
        error_class: owned(error.as_ref().and_then(|e| e.class())),
        error_code: owned(error.as_ref().and_then(|e| e.code())),
        error_message: owned(error.as_ref().and_then(|e| e.message())),
        permission_behavior: fold.last_behavior().map(|b| b.as_str().to_owned()),
        decision_count: fold.decision_count(),
        event_count: fold.event_count(),
        first_seq: fold.first_seq().unwrap_or(seq),
        terminal_seq: open.ended.map(|end| end.seq),
        first_event_time_us: micros(fold.first_time()),
        terminal_event_time_us: open.ended.and_then(|end| end.time_us),
        created_at_us: parse(snapshot.map(|s| s.created_at.as_str())),
        started_at_us: started,
        ended_at_us: ended,
        duration_ms: match (started, ended) {
            (Some(start), Some(end)) => Some((end - start) as f64 / 1000.0),
            _ => None,
        },
        actor_ref: owned(snapshot.and_then(|s| s.actor_ref.as_deref())),
        error_source: error.as_ref().map(|e| e.source.as_str().to_owned()),
        result_id: owned(fold.result_id()),
        inputs: InputStage::ALL.map(|stage| inputs.value(stage).map(Value::to_string)),
        input_refs: InputStage::ALL.map(|stage| owned(inputs.reference(stage))),
        input_mutations: json_array(fold.mutations()),
        transitions: json_array(&open.log.transitions),
        anomalies: json_array(&open.log.anomalies),
        seq,
    }
}

fn empty_event() -> EventRow {
    EventRow {
        partition: Partition {
            tenant: String::new(),
            event_date: String::new(),
        },
        seq: 0,
        leaf_hash: String::new(),
        entry: Vec::new(),
        event_id: None,
        source: None,
        class: None,
        session_id: None,
        subject: None,
        invocation_id: None,
        tool_id: None,
        event_time_us: None,
        ingested_at_us: None,
        origin: None,
        traceparent: None,
        tracestate: None,
        trace_refs: None,
        payload_refs: None,
        scrubbed_paths: None,
        status: None,
        behavior: None,
        decision_id: None,
        result_id: None,
        error_class: None,
        problem: None,
    }
}
