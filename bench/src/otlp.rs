//! The OTLP receiver's suite: tool-call spans through the receiver into the ledger, beside ingest's
//! own rate for the very events the receiver makes of them.
//!
//! ```text
//! workload  conversations of 6 GenAI execute_tool spans + 2 chat spans, in OTLP/HTTP protobuf
//!           requests of 512 spans, encoded up front; the events the receiver makes of them, mapped
//!           as it maps them and prepared as a producer prepares them
//! receiver  per run, fresh server + contract + in-process ingest + in-process receiver ─▶ warm-up
//!           request ─▶ timed: 4 exporter connections POST every request (keep-alive), each answered
//!           once ATL_INBOUND acked its events ─▶ until ingest has emptied ATL_INBOUND
//!           ─▶ check: ATL_LEDGER holds every expected entry
//! baseline  per run, fresh server + contract + in-process ingest ─▶ warm-up events ─▶ timed: the
//!           same events published straight to ATL_INBOUND, request by request
//!           (`produce::publish_all`) ─▶ until ingest has emptied ATL_INBOUND ─▶ the same check
//! ```
//!
//! Ingest acks an inbound message only once its entry is appended (and ATL_INBOUND, a work queue,
//! then drops it), so an empty ATL_INBOUND after the last publish means every event is in the
//! ledger or quarantined; the check after each run makes sure the ledger holds exactly the events
//! the suite expects.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream;
use futures::TryStreamExt as _;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span, status};
use prost::Message as _;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use toolledger_core::config::{Config, OtlpToken};
use toolledger_import::otlp::{Hold, Recent, map_spans};
use toolledger_wire::produce::{self, Outgoing};
use toolledger_wire::streams::{
    INBOUND, LEDGER, LEDGER_SUBJECTS, QUARANTINE, QUARANTINE_SUBJECTS, ensure_contract,
};
use toolledger_wire::{Mode, Tenant};

use crate::Options;
use crate::pipeline::{CpuClock, InProcessIngest, stream_messages};
use crate::report::{Better, Figure, Section};
use crate::workload::Server;

/// Spans per OTLP request: the OpenTelemetry SDKs' batch span processors export up to 512.
const SPANS_PER_REQUEST: usize = 512;
/// Requests in flight at once: an exporter's concurrent export calls, one connection each.
const IN_FLIGHT: usize = 4;
/// Tool spans and chat spans of one conversation (one trace): a chat span per three tool calls.
const TOOLS_PER_CONVERSATION: usize = 6;
const CHATS_PER_CONVERSATION: usize = 2;
/// Tools the agent has; each is declared once in the ledger however often it is called.
const TOOLS: [(&str, &str); 7] = [
    (
        "query_warehouse",
        "Runs a read-only SQL query against the analytics warehouse",
    ),
    ("search_docs", "Full-text search over the internal documentation"),
    ("get_customer", "Fetches a customer record by id"),
    ("create_ticket", "Opens a support ticket"),
    ("send_email", "Sends an email on the user's behalf"),
    ("fetch_url", "Fetches a web page and returns its text"),
    ("run_python", "Runs a Python snippet in a sandbox"),
];
/// The tenant the receiver's write token writes for, and the token.
const TENANT: &str = "bench";
const TOKEN: &str = "bench-otlp-write-token-0123456789abcdef";
/// The class of the ledger's own entry recording a quarantined message.
const RECEIPT_CLASS: &str = "toolledger.quarantine.recorded";
/// How long ingest may take to drain ATL_INBOUND.
const BOUND: Duration = Duration::from_secs(300);

/// The suite.
pub async fn otlp(options: &Options) -> anyhow::Result<Section> {
    let workload = Workload::new(options.scale.events)?;
    let tool_spans = workload.tool_spans as f64;
    let entries = workload.entries as f64;
    let (mut spans_rate, mut events_rate, mut accepted_rate, mut direct_rate) =
        (vec![], vec![], vec![], vec![]);
    let (mut receiver_cpu, mut direct_cpu) = (vec![], vec![]);
    let mut quarantined = vec![];
    for run in 0..options.runs {
        let through = through_receiver(options, &workload).await?;
        spans_rate.push(tool_spans / through.into_ledger.as_secs_f64());
        events_rate.push(entries / through.into_ledger.as_secs_f64());
        accepted_rate.push(tool_spans / through.answered.as_secs_f64());
        receiver_cpu.push(through.cpu_seconds * 1e6 / entries);
        let direct = straight_to_inbox(options, &workload).await?;
        direct_rate.push(entries / direct.into_ledger.as_secs_f64());
        direct_cpu.push(direct.cpu_seconds * 1e6 / entries);
        eprintln!(
            "bench: otlp run {}/{}: receiver {:.0} tool spans/s ({:.0} events/s) into the ledger, \
             answered at {:.0} spans/s; ingest alone {:.0} events/s; quarantined: {} through the \
             receiver, {} straight",
            run + 1,
            options.runs,
            spans_rate[run],
            events_rate[run],
            accepted_rate[run],
            direct_rate[run],
            through.quarantine_text(),
            direct.quarantine_text(),
        );
        quarantined.push((through, direct));
    }
    let mut section = Section::new(
        "otlp",
        "OTLP receiver: tool-call spans into the ledger beside ingest's own rate",
        format!(
            "{tool_spans} GenAI `execute_tool` spans per run — {tools} tools, each span with its tool \
             name, type and description, call id, conversation id, arguments of {args:.0} bytes of \
             JSON and a result of {result:.0} bytes (one call in ten failed: `error.type` and an error \
             status instead) — and one `chat` span per three (ignored by the mapper), {conversations} \
             conversations of {TOOLS_PER_CONVERSATION} tool calls, {spans} spans in {requests} \
             OTLP/HTTP protobuf requests of up to {SPANS_PER_REQUEST} spans ({request_kib:.0} KiB \
             each), encoded before timing. The receiver makes {published} Agent Tool events of them, \
             {entries} identities — the ledger's entries (every call of a tool declares it again, \
             under one id). Each run times, on a \
             fresh nats-server with the contract of `toolledger init` and the real ingest service \
             (`session::run`, default settings) in this process, after a warm-up request (one tool \
             call, untimed, so connections and lanes are up):\n\n\
             - **receiver**: the requests POSTed to the receiver (`toolledger_otlp::start`, in this \
               process, one write token) over {IN_FLIGHT} keep-alive connections, a request in flight \
               on each — decode, map and validate, prepare, publish to ATL_INBOUND as the tenant's \
               producer and await every ack, answer `200` — until ingest has taken every message from \
               ATL_INBOUND (it acks once the entry is appended; the ledger is then checked to hold \
               every entry): the whole path of a span. `receiver.answered` stops at the last answer instead (every \
               event in ATL_INBOUND, ingest still behind). One tenant's requests are mapped and \
               published one at a time (the receiver's design: its memory of recent spans is their \
               lock), so the {IN_FLIGHT} connections overlap only reading and decoding;\n\
             - **baseline**: the same events, prepared beforehand as a producer prepares them \
               (`produce::prepare`, binary mode), published straight to ATL_INBOUND request by \
               request as the receiver publishes them (`produce::publish_all`, every ack awaited) \
               while ingest drains it, until ingest has taken every message: ingest's own rate for \
               these events, the work the receiver adds to.\n\n\
             CPU per entry is this process's user + system time over the timed phase (receiver, \
             ingest and the exporters' client; ingest and the publishing client in the baseline), \
             so their difference is the receiver's own CPU.",
            tools = TOOLS.len(),
            args = workload.argument_bytes,
            result = workload.result_bytes,
            conversations = workload.tool_spans.div_ceil(TOOLS_PER_CONVERSATION),
            spans = workload.spans,
            requests = workload.bodies.len(),
            request_kib = workload.request_bytes / 1024.0,
            published = workload.published,
            entries = workload.entries,
        ),
    );
    section.figure(Figure::new(
        "receiver.spans",
        "tool spans through the receiver into the ledger",
        "spans/s",
        Better::Higher,
        spans_rate,
    ));
    let via = section.figure(Figure::new(
        "receiver.events",
        "events through the receiver into the ledger",
        "events/s",
        Better::Higher,
        events_rate,
    ));
    section.figure(Figure::new(
        "receiver.answered",
        "tool spans answered by the receiver (every event in ATL_INBOUND)",
        "spans/s",
        Better::Higher,
        accepted_rate,
    ));
    let direct = section.figure(Figure::new(
        "baseline.events",
        "the same events published straight to ATL_INBOUND, into the ledger (ingest's own rate)",
        "events/s",
        Better::Higher,
        direct_rate,
    ));
    let via_cpu = section.figure(Figure::new(
        "receiver.cpu_per_event",
        "CPU per entry through the receiver (receiver + ingest + client)",
        "µs/event",
        Better::Lower,
        receiver_cpu,
    ));
    let direct_cpu = section.figure(Figure::new(
        "baseline.cpu_per_event",
        "CPU per entry published straight (ingest + producer)",
        "µs/event",
        Better::Lower,
        direct_cpu,
    ));
    section.compare("receiver_vs_ingest", &via, &direct);
    section.compare("receiver_cpu_vs_ingest_cpu", &via_cpu, &direct_cpu);
    if let Some((through, direct)) = quarantined.last() {
        let varied = quarantined
            .iter()
            .any(|(t, d)| t.quarantined != through.quarantined || d.quarantined != direct.quarantined);
        section.notes.push(format!(
            "Messages ingest quarantined{}: through the receiver {}; published straight {}.{}",
            if varied {
                " in the last run (other runs differed)"
            } else {
                " in every run"
            },
            through.quarantine_text(),
            direct.quarantine_text(),
            if through.quarantined.contains_key("duplicate_conflict") {
                " A `duplicate_conflict` is a tool's declaration again: the mapper declares the tool \
                 with every call, under one id but with the call's own `time` and `traceparent`, so a \
                 declaration in a later request differs from the first and is quarantined, with a \
                 receipt in the ledger (a repeat within one request is not sent twice)."
            } else {
                ""
            }
        ));
    }
    let own = (via_cpu.median - direct_cpu.median) * entries / tool_spans;
    section.notes.push(format!(
        "The receiver's own CPU, from the medians: {:.0} µs per entry more than ingest alone, \
         {own:.0} µs per tool span ({:.1} entries per tool span).",
        via_cpu.median - direct_cpu.median,
        entries / tool_spans
    ));
    Ok(section)
}

/// The spans, as requests, and what the ledger will hold of them.
struct Workload {
    /// The warm-up request (one tool call of a tool no other span names).
    warm_up: Vec<u8>,
    /// The timed requests, protobuf-encoded.
    bodies: Vec<Vec<u8>>,
    /// The warm-up's events, prepared as a producer prepares them.
    warm_up_events: Vec<(String, Outgoing)>,
    /// The timed requests' events, request by request, prepared as a producer prepares them.
    events: Vec<Vec<(String, Outgoing)>>,
    /// Distinct warm-up events: the ledger's entries before timing.
    warm_up_entries: usize,
    /// Distinct timed events not among the warm-up's: the entries the timed phase adds.
    entries: usize,
    /// Events the receiver publishes for the timed requests (repeated declarations included).
    published: usize,
    tool_spans: usize,
    spans: usize,
    request_bytes: f64,
    argument_bytes: f64,
    result_bytes: f64,
}

impl Workload {
    /// About `events` ledger entries' worth of tool spans (at least one full request).
    fn new(events: usize) -> anyhow::Result<Self> {
        // A successful call is four entries (planned, started, succeeded, result), a failed one three.
        let tool_spans = (events / 4).max(SPANS_PER_REQUEST);
        let spans = conversation_spans(1, tool_spans);
        let tool_count = spans
            .iter()
            .filter(|s| s.name.starts_with("execute_tool"))
            .count();
        let mean = |key: &str| {
            let sizes: Vec<usize> = spans
                .iter()
                .flat_map(|s| &s.attributes)
                .filter(|kv| kv.key == key)
                .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    any_value::Value::StringValue(s) => Some(s.len()),
                    _ => None,
                })
                .collect();
            sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64
        };
        let (argument_bytes, result_bytes) = (
            mean("gen_ai.tool.call.arguments"),
            mean("gen_ai.tool.call.result"),
        );
        let span_count = spans.len();
        let requests: Vec<ExportTraceServiceRequest> = spans.chunks(SPANS_PER_REQUEST).map(request).collect();
        let warm_up = request(&warm_up_spans());

        // The events the receiver makes of them: the same conversion, the same mapping and memory of
        // recent spans, request by request in the order they are sent.
        let config = Config::default();
        let mapping = toolledger_import::Options::new(TENANT);
        let tenant = Tenant::parse(TENANT)?;
        let mut recent = Recent::new(config.otlp.recent_spans);
        let mut prepared = |request: &ExportTraceServiceRequest| -> anyhow::Result<Vec<(String, Outgoing)>> {
            let (spans, malformed) = toolledger_otlp::spans_of(request);
            anyhow::ensure!(malformed.is_empty(), "malformed spans: {malformed:?}");
            let batch = map_spans(&mapping, &spans, &recent, Hold::Servers);
            anyhow::ensure!(batch.rejected.is_empty(), "rejected spans: {:?}", batch.rejected);
            anyhow::ensure!(batch.held.is_empty(), "{} spans held", batch.held.len());
            recent.record(&batch, 0);
            batch
                .events
                .iter()
                .enumerate()
                .map(|(i, event)| {
                    let message = produce::prepare(event.clone(), Some(&tenant), Mode::Binary)?;
                    Ok((format!("event {i}"), message))
                })
                .collect()
        };
        let warm_up_events = prepared(&warm_up)?;
        let events = requests
            .iter()
            .map(&mut prepared)
            .collect::<anyhow::Result<Vec<_>>>()?;
        // The ledger keeps the first event of each identity: every call of a tool declares it
        // again under the same id (a repeat in the same request is not even sent; one in a later
        // request is a duplicate, or a conflict when it differs, which ingest quarantines).
        let mut seen: HashSet<&str> = warm_up_events.iter().map(|(_, m)| m.msg_id.as_str()).collect();
        let warm_up_entries = seen.len();
        let entries = events
            .iter()
            .flatten()
            .filter(|(_, m)| seen.insert(m.msg_id.as_str()))
            .count();
        let bodies: Vec<Vec<u8>> = requests.iter().map(|r| r.encode_to_vec()).collect();
        Ok(Self {
            warm_up: warm_up.encode_to_vec(),
            request_bytes: bodies.iter().map(Vec::len).sum::<usize>() as f64 / bodies.len() as f64,
            bodies,
            published: events.iter().map(Vec::len).sum(),
            warm_up_events,
            events,
            warm_up_entries,
            entries,
            tool_spans: tool_count,
            spans: span_count,
            argument_bytes,
            result_bytes,
        })
    }
}

fn text(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..KeyValue::default()
    }
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..KeyValue::default()
    }
}

/// Conversations of [`TOOLS_PER_CONVERSATION`] tool calls and [`CHATS_PER_CONVERSATION`] chat
/// spans each, as an agent SDK's instrumentation reports them, until `tool_spans` tool calls; the
/// first conversation is number `first`.
fn conversation_spans(first: usize, tool_spans: usize) -> Vec<Span> {
    let base: u64 = 1_780_000_000_000_000_000;
    let mut spans = Vec::with_capacity(tool_spans * 4 / 3 + CHATS_PER_CONVERSATION);
    let mut call = 0;
    let mut conversation = first;
    while call < tool_spans {
        let trace_id = (0x5eed_0000_0000_0000_0000_0000_0000_0000_u128 + conversation as u128)
            .to_be_bytes()
            .to_vec();
        // The agent's own span (exported in a later batch, as its end comes last) is every span's parent.
        let agent_span = (conversation as u64) << 8;
        let conversation_id = format!("conv_{conversation:08x}");
        let mut at = base + conversation as u64 * 60_000_000_000;
        for step in 0..TOOLS_PER_CONVERSATION + CHATS_PER_CONVERSATION {
            let span_id = (agent_span + step as u64 + 1).to_be_bytes().to_vec();
            // A chat turn, then three tool calls, then the next chat turn.
            if step % 4 == 0 {
                let end = at + 1_200_000_000;
                spans.push(Span {
                    trace_id: trace_id.clone(),
                    span_id,
                    parent_span_id: agent_span.to_be_bytes().to_vec(),
                    flags: 0x101,
                    name: "chat gpt-4o".into(),
                    kind: span::SpanKind::Client as i32,
                    start_time_unix_nano: at,
                    end_time_unix_nano: end,
                    attributes: vec![
                        text("gen_ai.operation.name", "chat"),
                        text("gen_ai.provider.name", "openai"),
                        text("gen_ai.request.model", "gpt-4o"),
                        text("gen_ai.response.id", format!("chatcmpl-{conversation:08x}{step}")),
                        text("gen_ai.conversation.id", conversation_id.clone()),
                        int("gen_ai.usage.input_tokens", 1_800 + step as i64 * 150),
                        int("gen_ai.usage.output_tokens", 120),
                    ],
                    ..Span::default()
                });
                at = end;
                continue;
            }
            if call == tool_spans {
                continue;
            }
            let (tool, description) = TOOLS[call % TOOLS.len()];
            let failed = call % 10 == 9;
            let end = at + 180_000_000 + (call as u64 % 5) * 40_000_000;
            let mut attributes = vec![
                text("gen_ai.operation.name", "execute_tool"),
                text("gen_ai.tool.name", tool),
                text("gen_ai.tool.type", "function"),
                text("gen_ai.tool.description", description),
                text(
                    "gen_ai.tool.call.id",
                    format!(
                        "call_{:024x}",
                        ((conversation as u128) << 8 | step as u128) * 0x9e37_79b9
                    ),
                ),
                text("gen_ai.conversation.id", conversation_id.clone()),
                text("gen_ai.tool.call.arguments", arguments(tool, call)),
            ];
            if failed {
                attributes.push(text("error.type", "TimeoutError"));
            } else {
                attributes.push(text("gen_ai.tool.call.result", result(call)));
            }
            spans.push(Span {
                trace_id: trace_id.clone(),
                span_id,
                parent_span_id: agent_span.to_be_bytes().to_vec(),
                flags: 0x101,
                name: format!("execute_tool {tool}"),
                kind: span::SpanKind::Internal as i32,
                start_time_unix_nano: at,
                end_time_unix_nano: end,
                attributes,
                status: failed.then(|| Status {
                    message: format!("{tool} timed out after 30s"),
                    code: status::StatusCode::Error as i32,
                }),
                ..Span::default()
            });
            at = end;
            call += 1;
        }
        conversation += 1;
    }
    spans
}

/// A tool call's arguments as the model wrote them: a few hundred bytes of JSON.
fn arguments(tool: &str, call: usize) -> String {
    serde_json::json!({
        "query": format!(
            "SELECT region, product_line, sum(amount) AS revenue, count(*) AS orders FROM sales.orders \
             WHERE fiscal_quarter = 'Q{}' AND status <> 'cancelled' GROUP BY 1, 2 ORDER BY revenue DESC",
            call % 4 + 1
        ),
        "tool": tool,
        "limit": 50 + call % 50,
        "filters": {"region": ["emea", "apac", "amer"], "year": 2026, "customer_id": format!("cus_{call:010}")},
        "reason": "the user asked for the quarter's revenue by region and product line",
    })
    .to_string()
}

/// A tool call's result: a couple of hundred bytes of JSON.
fn result(call: usize) -> String {
    serde_json::json!({
        "rows": [
            {"region": "emea", "product_line": "storage", "revenue": 1_204_331.5 + call as f64, "orders": 812},
            {"region": "apac", "product_line": "compute", "revenue": 998_120.25, "orders": 640},
        ],
        "truncated": true,
        "elapsed_ms": 40 + call % 200,
    })
    .to_string()
}

/// One tool call of a tool nothing else calls, in a conversation of its own (number 0; the timed
/// ones start at 1).
fn warm_up_spans() -> Vec<Span> {
    let mut spans = conversation_spans(0, 1);
    for span in &mut spans {
        for kv in &mut span.attributes {
            if kv.key == "gen_ai.tool.name" {
                *kv = text("gen_ai.tool.name", "warm_up");
            }
        }
    }
    spans
}

/// `spans` as one export request from an agent process.
fn request(spans: &[Span]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    text("service.name", "support-agent"),
                    text("service.version", "2.14.0"),
                    text("telemetry.sdk.language", "python"),
                    text("telemetry.sdk.name", "opentelemetry"),
                    text("telemetry.sdk.version", "1.38.0"),
                ],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "openinference.instrumentation.openai_agents".into(),
                    version: "1.2.0".into(),
                    ..InstrumentationScope::default()
                }),
                spans: spans.to_vec(),
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// What one timed phase took.
struct Timed {
    /// Start ─▶ the ledger holds every entry.
    into_ledger: Duration,
    /// Start ─▶ the last answer (the receiver's phase only).
    answered: Duration,
    /// This process's CPU over the timed phase.
    cpu_seconds: f64,
    /// Receipts of quarantined messages ingest appended in the timed phase, and the messages it
    /// quarantined, by reason.
    receipts: u64,
    quarantined: BTreeMap<String, u64>,
}

impl Timed {
    fn quarantine_text(&self) -> String {
        if self.quarantined.is_empty() {
            return "none".to_owned();
        }
        let reasons: Vec<String> = self
            .quarantined
            .iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        format!(
            "{} ({} receipts in the ledger)",
            reasons.join(", "),
            self.receipts
        )
    }
}

/// A fresh server with the contract and ingest running in this process.
async fn fresh(options: &Options) -> anyhow::Result<(Server, jetstream::Context, InProcessIngest)> {
    let server = Server::start(&options.nats_server, &options.work_dir)?;
    let js = server.jetstream().await?;
    ensure_contract(&js, &Default::default()).await?;
    let ingest = InProcessIngest::start(&server, &options.work_dir)?;
    Ok((server, js, ingest))
}

/// Waits until ingest has taken everything in ATL_INBOUND: it acks a message (and ATL_INBOUND,
/// a work queue, drops it) once its entry is appended and recorded, so everything published before
/// is in the ledger then.
async fn drained(js: &jetstream::Context, ingest: &InProcessIngest) -> anyhow::Result<()> {
    let deadline = Instant::now() + BOUND;
    loop {
        let waiting = stream_messages(js, INBOUND).await?;
        if waiting == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline && !ingest.task.is_finished(),
            "ingest left {waiting} messages in ATL_INBOUND after {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What the ledger holds: entries of producers' events and quarantine receipts; and what
/// ATL_QUARANTINE holds, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Landed {
    events: u64,
    receipts: u64,
    quarantined: BTreeMap<String, u64>,
}

impl Landed {
    async fn read(js: &jetstream::Context) -> anyhow::Result<Landed> {
        let mut landed = Landed::default();
        let ledger = js.get_stream(LEDGER).await?;
        let mut subjects = ledger.info_with_subjects(LEDGER_SUBJECTS).await?;
        while let Some((subject, count)) = subjects.try_next().await? {
            if subject.ends_with(RECEIPT_CLASS) {
                landed.receipts += count as u64;
            } else {
                landed.events += count as u64;
            }
        }
        let quarantine = js.get_stream(QUARANTINE).await?;
        let mut subjects = quarantine.info_with_subjects(QUARANTINE_SUBJECTS).await?;
        while let Some((subject, count)) = subjects.try_next().await? {
            // atl.quarantine.<tenant>.<reason>
            let reason = subject.rsplit('.').next().unwrap_or_default().to_owned();
            *landed.quarantined.entry(reason).or_default() += count as u64;
        }
        Ok(landed)
    }

    /// Checks that the ledger holds exactly `expected` event entries.
    fn holds(self, expected: usize) -> anyhow::Result<Landed> {
        anyhow::ensure!(
            self.events == expected as u64,
            "ATL_LEDGER holds {} event entries, {expected} expected ({self:?})",
            self.events
        );
        Ok(self)
    }

    fn quarantined(&self) -> u64 {
        self.quarantined.values().sum()
    }
}

/// Waits for ingest to take the warm-up; the ledger as it then stands, none of it quarantined.
async fn warmed_up(
    js: &jetstream::Context,
    ingest: &InProcessIngest,
    workload: &Workload,
) -> anyhow::Result<Landed> {
    drained(js, ingest).await?;
    let before = Landed::read(js).await?.holds(workload.warm_up_entries)?;
    anyhow::ensure!(
        before.quarantined() == 0,
        "the warm-up was quarantined: {before:?}"
    );
    Ok(before)
}

/// Ends a timed phase that started at `started` and had every message sent at `answered`: waits
/// for ingest to take them all, and checks the ledger holds every entry.
async fn landed(
    js: &jetstream::Context,
    ingest: &InProcessIngest,
    workload: &Workload,
    before: &Landed,
    cpu: &CpuClock,
    started: Instant,
    answered: Duration,
) -> anyhow::Result<Timed> {
    drained(js, ingest).await?;
    let into_ledger = started.elapsed();
    let cpu_seconds = cpu.own_seconds();
    let after = Landed::read(js)
        .await?
        .holds(workload.warm_up_entries + workload.entries)?;
    Ok(Timed {
        into_ledger,
        answered,
        cpu_seconds,
        receipts: after.receipts - before.receipts,
        quarantined: after.quarantined,
    })
}

async fn through_receiver(options: &Options, workload: &Workload) -> anyhow::Result<Timed> {
    let (server, js, ingest) = fresh(options).await?;
    let mut config = Config::default();
    config.otlp.http_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.otlp.grpc_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.otlp.tokens = vec![OtlpToken {
        name: "bench".into(),
        sha256: toolledger_core::tokens::token_digest(TOKEN),
        tenant: TENANT.into(),
        nats_url: None,
    }];
    let receiver = toolledger_otlp::Receiver::new(&config, &server.url(), Default::default())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = toolledger_otlp::start(&config.otlp, Arc::new(receiver), async {
        let _ = stopped.await;
    })
    .await?;
    let addr = running.http_addr;
    export(addr, std::slice::from_ref(&workload.warm_up), 1).await?;
    let before = warmed_up(&js, &ingest, workload).await?;

    let cpu = CpuClock::start(server.server.pid());
    let started = Instant::now();
    export(addr, &workload.bodies, IN_FLIGHT).await?;
    let answered = started.elapsed();
    let timed = landed(&js, &ingest, workload, &before, &cpu, started, answered).await?;
    let _ = stop.send(());
    running.task.await?;
    ingest.stop().await?;
    drop(server);
    Ok(timed)
}

async fn straight_to_inbox(options: &Options, workload: &Workload) -> anyhow::Result<Timed> {
    let (server, js, ingest) = fresh(options).await?;
    let warm_up = produce::publish_all(&js, workload.warm_up_events.clone()).await;
    anyhow::ensure!(
        warm_up.failed.is_empty(),
        "warm-up publish failed: {:?}",
        warm_up.failed
    );
    let before = warmed_up(&js, &ingest, workload).await?;
    let requests = workload.events.clone();

    let cpu = CpuClock::start(server.server.pid());
    let started = Instant::now();
    // Request by request, as the receiver publishes them, so ATL_INBOUND gets the same messages.
    for events in requests {
        let report = produce::publish_all(&js, events).await;
        anyhow::ensure!(
            report.failed.is_empty(),
            "{} publishes failed, the first: {:?}",
            report.failed.len(),
            report.failed.first()
        );
    }
    let answered = started.elapsed();
    let timed = landed(&js, &ingest, workload, &before, &cpu, started, answered).await?;
    ingest.stop().await?;
    drop(server);
    Ok(timed)
}

/// POSTs every body to the receiver at `addr` as an exporter with `connections` concurrent export
/// calls does: each connection kept alive, sending the next request once the last was answered.
/// Every answer must be `200` with no rejected spans.
async fn export(addr: SocketAddr, bodies: &[Vec<u8>], connections: usize) -> anyhow::Result<()> {
    let next = AtomicUsize::new(0);
    let exporters = (0..connections.min(bodies.len())).map(|_| async {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let mut line = String::new();
        while let Some(body) = bodies.get(next.fetch_add(1, Ordering::Relaxed)) {
            let head = format!(
                "POST /v1/traces HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            write.write_all(head.as_bytes()).await?;
            write.write_all(body).await?;
            // The answer: status line, headers up to the blank line, a body of Content-Length.
            line.clear();
            read.read_line(&mut line).await?;
            let status: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("no status line from the receiver: {line:?}"))?;
            let mut length = None;
            loop {
                line.clear();
                anyhow::ensure!(
                    read.read_line(&mut line).await? > 0,
                    "the receiver closed the connection"
                );
                let header = line.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse::<usize>().ok();
                }
            }
            let mut answer = vec![0; length.context("an answer without Content-Length")?];
            read.read_exact(&mut answer).await?;
            anyhow::ensure!(
                status == 200,
                "the receiver answered {status}: {}",
                String::from_utf8_lossy(&answer)
            );
            let answer = ExportTraceServiceResponse::decode(&answer[..])?;
            anyhow::ensure!(
                answer.partial_success.is_none(),
                "the receiver rejected spans: {:?}",
                answer.partial_success
            );
        }
        anyhow::Ok(())
    });
    futures::future::try_join_all(exporters).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_span_maps_and_chat_spans_are_one_in_four() {
        let workload = Workload::new(2_000).unwrap();
        assert_eq!(workload.tool_spans, SPANS_PER_REQUEST);
        let chats = workload.spans - workload.tool_spans;
        assert_eq!(chats, workload.tool_spans.div_ceil(TOOLS_PER_CONVERSATION) * 2);
        assert_eq!(workload.bodies.len(), workload.spans.div_ceil(SPANS_PER_REQUEST));
        // Four entries a successful call, three a failed one, and one declaration per tool.
        let failed = workload.tool_spans / 10;
        assert_eq!(workload.entries, 4 * workload.tool_spans - failed + TOOLS.len());
        assert!(workload.published > workload.entries, "declarations repeat");
        assert!((200.0..600.0).contains(&workload.argument_bytes));
    }
}
