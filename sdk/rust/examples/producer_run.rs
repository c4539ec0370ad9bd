//! A producer process for the end-to-end tests (`tests/e2e/sdk_rust.rs`) and the spool benchmark.
//!
//! ```text
//! producer_run emit NATS_URL SPOOL TENANT PREFIX [--count N] [--rate R] [--fsync every_event|interval]
//!                                                [--flush-timeout S]
//!     Emits invocations PREFIX-0, PREFIX-1, … through the invocation guard (tool.declared once, then
//!     planned, started, progress, succeeded, tool.result.created each), N of them (0: until killed),
//!     at most R invocations/s (0: as fast as it can); then waits up to S seconds for the acks (0: not
//!     at all). After `emit` returns for an event it writes `E <event id>` to stdout with one write(2),
//!     so a line on stdout means that event was emitted before any later kill. Prints `READY` first
//!     and `DONE {metrics}` at the end.
//! producer_run drain NATS_URL SPOOL TENANT [--timeout S]
//!     Opens the spool, waits until the sender has every event acked, prints `DRAINED {metrics}`;
//!     exits 1 if the timeout passed first.
//! producer_run upload NATS_URL SPOOL TENANT INVOCATION [--size N] [--flush-timeout S]
//!     Emits one invocation whose result is a text of N bytes (`large_text(N)`, 2 MiB by default), so
//!     it travels through the tenant's payload bucket; prints `E <id>` lines, then
//!     `UPLOADS [{name, sha256, size, file}]` (the spool's pending uploads) and `DONE {metrics}`.
//!     S = 0 (the default): exits without waiting for acks.
//! producer_run everything SPOOL
//!     Emits one of every event kind the SDK makes into SPOOL (no sender), then prints each as a
//!     structured CloudEvent, one JSON line each.
//! producer_run bench SPOOL N [--fsync every_event|interval]
//!     Emits N events with no reachable NATS (the spool alone); prints {"events_per_s": …}.
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test driver: a panic is its failure report

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolledger_producer::{
    Behavior, FsyncPolicy, Hook, HookEvent, HookPhase, HookStage, Invocation, InvocationClass,
    InvocationOptions, PermissionDecision, Producer, ProducerConfig, ResultClass, SpoolConfig, Stamp, Tool,
    ToolError, ToolResult, TraceContext,
};

/// A port nothing listens on: the producer works offline and keeps everything in its spool.
const UNREACHABLE: &str = "nats://127.0.0.1:1";
const SOURCE: &str = "urn:toolledger-producer:e2e-rust";

type Failure = Box<dyn std::error::Error>;

/// One line on stdout with one write(2) (stdout is line-buffered; the line ends in a newline).
fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(format!("{line}\n").as_bytes()).unwrap();
    stdout.flush().unwrap();
}

struct Args {
    positional: Vec<String>,
    options: HashMap<String, String>,
}

impl Args {
    fn parse() -> Self {
        let mut positional = Vec::new();
        let mut options = HashMap::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.strip_prefix("--") {
                Some(name) => {
                    options.insert(name.to_owned(), args.next().expect("option value"));
                }
                None => positional.push(arg),
            }
        }
        Self { positional, options }
    }

    fn at(&self, i: usize) -> &str {
        self.positional.get(i).map_or_else(
            || {
                eprintln!("usage: see the header of sdk/rust/examples/producer_run.rs");
                std::process::exit(2)
            },
            String::as_str,
        )
    }

    fn number(&self, name: &str, default: f64) -> f64 {
        self.options
            .get(name)
            .map_or(default, |v| v.parse().expect("a number"))
    }

    fn fsync(&self) -> FsyncPolicy {
        match self.options.get("fsync").map(String::as_str) {
            None | Some("every_event") => FsyncPolicy::EveryEvent,
            Some("interval") => FsyncPolicy::Interval(Duration::from_millis(100)),
            Some(other) => panic!("unknown fsync policy {other}"),
        }
    }
}

fn tool() -> Tool {
    Tool::new("kv.get", "get")
        .namespace("kv")
        .description("reads a key")
        .sensitive_fields(["pin"])
}

fn config(args: &Args, nats: &str, spool: &str, tenant: &str) -> ProducerConfig {
    let mut config = ProducerConfig::new(tenant, spool)
        .with_servers([nats])
        .with_source(SOURCE)
        .with_spool(SpoolConfig {
            fsync: args.fsync(),
            ..SpoolConfig::default()
        });
    config.backoff_max = Duration::from_secs(1);
    config.publish_timeout = Duration::from_secs(2);
    config
}

async fn emit(args: &Args) -> Result<i32, Failure> {
    let (nats, spool, tenant, prefix) = (args.at(1), args.at(2), args.at(3), args.at(4));
    let mut config = config(args, nats, spool, tenant);
    config.on_emitted = Some(Arc::new(|event| out(&format!("E {}", event.id))));
    let producer = Producer::open(config).await?;
    out("READY");
    let count = args.number("count", 0.0) as u64;
    let rate = args.number("rate", 0.0);
    let flush_timeout = args.number("flush-timeout", 120.0);
    let started = Instant::now();
    let tool = tool();
    let mut n = 0;
    while count == 0 || n < count {
        let input = json!({"key": format!("k{n}"), "pin": format!("secret-{n}")});
        let options = InvocationOptions::default().invocation_id(format!("{prefix}-{n}"));
        let mut inv = producer.invocation_with(&tool, input, options).await?;
        inv.progress("looked up", Some(100.0)).await?;
        inv.succeed(json!({"value": n})).await?;
        n += 1;
        if rate > 0.0 {
            let due = started + Duration::from_secs_f64(n as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
    }
    let drained = flush_timeout <= 0.0 || producer.flush(Duration::from_secs_f64(flush_timeout)).await;
    let metrics = producer.metrics();
    let grace = if flush_timeout <= 0.0 { 0 } else { 5 };
    producer.close(Duration::from_secs(grace)).await?;
    out(&format!("DONE {}", serde_json::to_string(&metrics)?));
    Ok(if drained { 0 } else { 1 })
}

async fn drain(args: &Args) -> Result<i32, Failure> {
    let (nats, spool, tenant) = (args.at(1), args.at(2), args.at(3));
    let producer = Producer::open(config(args, nats, spool, tenant)).await?;
    let drained = producer
        .flush(Duration::from_secs_f64(args.number("timeout", 60.0)))
        .await;
    let metrics = producer.metrics();
    producer.close(Duration::from_secs(5)).await?;
    let word = if drained { "DRAINED" } else { "NOT DRAINED" };
    out(&format!("{word} {}", serde_json::to_string(&metrics)?));
    Ok(if drained { 0 } else { 1 })
}

/// `row 00000000\n`, `row 00000001\n`, … cut at `size` bytes (the e2e test writes the same).
fn large_text(size: usize) -> String {
    let mut text = String::with_capacity(size + 13);
    let mut row = 0;
    while text.len() < size {
        text.push_str(&format!("row {row:08}\n"));
        row += 1;
    }
    text.truncate(size);
    text
}

async fn upload(args: &Args) -> Result<i32, Failure> {
    let (nats, spool, tenant, invocation) = (args.at(1), args.at(2), args.at(3), args.at(4));
    let mut config = config(args, nats, spool, tenant);
    config.on_emitted = Some(Arc::new(|event| out(&format!("E {}", event.id))));
    let producer = Producer::open(config).await?;
    out("READY");
    let size = args.number("size", 2.0 * 1024.0 * 1024.0) as usize;
    let flush_timeout = args.number("flush-timeout", 0.0);
    let input = json!({"key": "big", "pin": "secret-big"});
    let options = InvocationOptions::default().invocation_id(invocation);
    let inv = producer.invocation_with(&tool(), input, options).await?;
    inv.succeed(json!(large_text(size))).await?;
    let drained = flush_timeout <= 0.0 || producer.flush(Duration::from_secs_f64(flush_timeout)).await;
    let pending: Vec<_> = producer
        .spool()
        .head(1000)?
        .iter()
        .flat_map(|m| m.uploads.iter())
        .map(|u| json!({"name": u.name, "sha256": u.sha256, "size": u.size, "file": u.file}))
        .collect();
    out(&format!("UPLOADS {}", serde_json::to_string(&pending)?));
    let metrics = producer.metrics();
    let grace = if flush_timeout <= 0.0 { 0 } else { 5 };
    producer.close(Duration::from_secs(grace)).await?;
    out(&format!("DONE {}", serde_json::to_string(&metrics)?));
    Ok(if drained { 0 } else { 1 })
}

/// One of every event kind the SDK makes, through the guard and the builders.
async fn everything(args: &Args) -> Result<i32, Failure> {
    let mut config = ProducerConfig::new("acme", args.at(1))
        .with_servers([UNREACHABLE])
        .with_source("urn:toolledger-producer:schemas-check-rust")
        .with_session("sess-schemas");
    config.start_sender = false;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    config.on_emitted = Some(Arc::new(move |event| {
        seen.lock().unwrap().push(event.to_structured());
    }));
    let producer = Producer::open(config).await?;
    let secret_tool = Tool::new("vault.read", "read")
        .namespace("vault")
        .description("reads a secret")
        .version("1")
        .sensitive_fields(["api_key", "/headers/authorization"])
        .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}}));
    let note_tool = Tool::new("notes.read", "read")
        .namespace("notes")
        .description("reads a note");
    let trace = TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        Some("vendor=x".into()),
    )?;

    let options = InvocationOptions {
        native_call_id: Some("call 1/\u{fc}".into()),
        ..InvocationOptions::default()
            .invocation_id("inv-schemas-1")
            .deferred_start()
            .trace(trace)
    };
    let input = json!({"path": "db/\u{fc}n\u{ef}code", "api_key": "k-123"});
    let mut inv = producer.invocation_with(&secret_tool, input, options).await?;
    inv.hook(HookPhase::Pre, HookStage::Started, "hook-1").await?;
    let mut hook = Hook::new("hook-1", HookEvent::PreToolUse, "");
    hook.updated_input = Some(json!({"path": "db/prod"}));
    inv.hook_with(HookPhase::Pre, HookStage::Completed, hook).await?;
    let decision_id = inv.request_permission(Some(json!({"path": "db/prod"}))).await?;
    let mut decision = PermissionDecision::new(decision_id, "", Behavior::Allow);
    decision.reason = Some(json!({"by": "user"}).as_object().cloned().unwrap_or_default());
    decision.mode = Some("default".into());
    inv.decide_with(decision).await?;
    inv.start(None).await?;
    inv.progress("half way", Some(50.0)).await?;
    inv.progress("done", Some(100.0)).await?;
    inv.hook(HookPhase::Post, HookStage::Started, "hook-2").await?;
    let mut hook = Hook::new("hook-2", HookEvent::PostToolUse, "");
    hook.updated_output = Some(json!({"ok": true}));
    inv.hook_with(HookPhase::Post, HookStage::Completed, hook).await?;
    inv.succeed(json!({"value": "s3cr3t-free"})).await?;

    let opts = |id: &str| InvocationOptions::default().invocation_id(id);
    let inv = producer
        .invocation_with(&note_tool, json!({"name": "missing"}), opts("inv-schemas-2"))
        .await?;
    inv.fail_with(ToolError::new("invalid_arguments", "no note named missing").with_code("notes:missing"))
        .await?;
    let inv = producer
        .invocation_with(&note_tool, json!({"name": "slow"}), opts("inv-schemas-3"))
        .await?;
    inv.fail(&std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "took too long",
    ))
    .await?;
    let inv = producer
        .invocation_with(&note_tool, json!({"name": "x"}), opts("inv-schemas-4"))
        .await?;
    drop(inv); // canceled
    let inv = producer
        .invocation_with(&note_tool, json!({"name": "p"}), opts("inv-schemas-5"))
        .await?;
    inv.fail(&std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "denied by the file system",
    ))
    .await?;

    let builder = producer.events().clone();
    let snapshot = Invocation {
        model_input: Some(json!({"name": "big"})),
        ..Invocation::new("inv-schemas-6", "notes.read")
    };
    for class in [
        InvocationClass::Planned,
        InvocationClass::Selected,
        InvocationClass::ArgumentsReady,
        InvocationClass::Queued,
        InvocationClass::Started,
        InvocationClass::Yielded,
    ] {
        producer
            .emit(builder.invocation(class, &snapshot, &Stamp::default())?)
            .await?;
    }
    let partial = ToolResult {
        invocation_id: "inv-schemas-6".into(),
        tool_id: Some("notes.read".into()),
        status: "succeeded".into(),
        content: Some(vec![json!({"type": "text", "text": "part"})]),
        ..ToolResult::default()
    };
    producer
        .emit(builder.result(&partial, ResultClass::PartialResult, &Stamp::default())?)
        .await?;
    producer
        .emit(builder.invocation(InvocationClass::Succeeded, &snapshot, &Stamp::default())?)
        .await?;
    let redacted = ToolResult {
        status: "redacted".into(),
        redaction_state: Some("redacted".into()),
        content: None,
        ..partial
    };
    producer
        .emit(builder.result(&redacted, ResultClass::Redacted, &Stamp::default())?)
        .await?;
    let invalid = Invocation {
        error: Some(ToolError::new("schema_validation_failed", "missing name")),
        ..Invocation::new("inv-schemas-7", "notes.read")
    };
    producer
        .emit(builder.invocation(InvocationClass::ValidationFailed, &invalid, &Stamp::default())?)
        .await?;
    producer.close(Duration::ZERO).await?;
    for event in events.lock().unwrap().iter() {
        out(&serde_json::to_string(event)?);
    }
    Ok(0)
}

async fn bench(args: &Args) -> Result<i32, Failure> {
    let n = args.at(2).parse::<u64>()?;
    let mut config = ProducerConfig::new("acme", args.at(1))
        .with_servers([UNREACHABLE])
        .with_spool(SpoolConfig {
            fsync: args.fsync(),
            max_bytes: 1 << 30,
            ..SpoolConfig::default()
        });
    config.start_sender = false;
    let producer = Producer::open(config).await?;
    let snapshot = Invocation {
        model_input: Some(json!({"key": "k", "pad": "x".repeat(300)})),
        ..Invocation::new("inv-bench", "kv.get")
    };
    let events = (0..n)
        .map(|i| {
            producer
                .events()
                .invocation(InvocationClass::Started, &snapshot, &Stamp::seq(i))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let t0 = Instant::now();
    for event in events {
        producer.emit(event).await?;
    }
    let took = t0.elapsed().as_secs_f64();
    producer.close(Duration::ZERO).await?;
    let fsync = args.options.get("fsync").map_or("every_event", String::as_str);
    let report = json!({"sdk": "rust", "fsync": fsync, "events": n, "seconds": took,
                        "events_per_s": (n as f64 / took).round()});
    out(&report.to_string());
    Ok(0)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let result = match args.at(0) {
        "emit" => emit(&args).await,
        "drain" => drain(&args).await,
        "upload" => upload(&args).await,
        "everything" => everything(&args).await,
        "bench" => bench(&args).await,
        other => {
            eprintln!("unknown mode {other}");
            Ok(2)
        }
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("producer_run: {e}");
            std::process::exit(1)
        }
    }
}
