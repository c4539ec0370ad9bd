//! The producer SDKs' suite: events/s that `emit` accepts into the durable spool, per SDK and fsync
//! policy, beside the unavoidable work of the same policy.
//!
//! ```text
//! workload  N `tool.invocation.started` events with a 300-byte input, built before timing; `emit`
//!           each into a fresh spool on the work dir; no NATS reachable and no sender, so the figure
//!           is the spool alone (what `emit` costs the caller)
//!           Rust: toolledger-producer in this process · Python: sdk/python/tests/producer_run.py
//!           bench in the checkout's .venv · TypeScript: sdk/typescript's compiled
//!           e2e/producer_run.js bench under node (each skipped, with a note, when the checkout this
//!           binary was built from does not have it set up)
//! baseline  N records of the Rust spool's mean record size, one write(2) each to an O_APPEND file:
//!           every_event: fdatasync after each · interval: a thread fdatasyncs every 100 ms
//! ```
//!
//! N is `scale.events` under the interval policy and a tenth of it under every_event (each event
//! waits for the disk there).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;
use toolledger_producer::{
    FsyncPolicy, Invocation, InvocationClass, Producer, ProducerConfig, SpoolConfig, Stamp,
};

use crate::Options;
use crate::report::{Better, Figure, Section};

/// A port nothing listens on: the producer keeps everything in its spool.
const UNREACHABLE: &str = "nats://127.0.0.1:1";
/// The interval policy's fsync period, the SDKs' default.
const INTERVAL: Duration = Duration::from_millis(100);
/// Bytes of the spool format's segment header (`TLSPOOL1`).
const MAGIC_BYTES: u64 = 8;

#[derive(Clone, Copy)]
enum Policy {
    EveryEvent,
    Interval,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Self::EveryEvent => "every_event",
            Self::Interval => "interval",
        }
    }

    fn events(self, options: &Options) -> usize {
        match self {
            Self::EveryEvent => (options.scale.events / 10).max(100),
            Self::Interval => options.scale.events,
        }
    }
}

/// The suite.
pub async fn sdk(options: &Options) -> anyhow::Result<Section> {
    let scripts: Vec<ScriptSdk> = [ScriptSdk::python(), ScriptSdk::typescript()]
        .into_iter()
        .flatten()
        .collect();
    let mut section = Section::new(
        "sdk",
        "Producer SDKs: events/s into the durable spool",
        "`emit` of N `tool.invocation.started` events (300-byte input, built before timing) into a fresh \
         spool, with no NATS reachable and no sender running, so the figure is what the durable spool \
         costs the caller; N is the suite's event count under `interval` and a tenth of it under \
         `every_event`. Rust: `toolledger-producer` in this process; Python: \
         `sdk/python/tests/producer_run.py bench` in the checkout's `.venv`; TypeScript: the compiled \
         `sdk/typescript` `producer_run.js bench` under node. Baseline: N records of the \
         Rust spool's mean record size appended with one `write(2)` each to an `O_APPEND` file, \
         `fdatasync` after each (`every_event`) or from a thread every 100 ms (`interval`): the \
         unavoidable work of each policy.",
    );
    for policy in [Policy::EveryEvent, Policy::Interval] {
        let n = policy.events(options);
        let (mut rust, mut baseline) = (Vec::new(), Vec::new());
        let mut script_runs: Vec<Vec<f64>> = vec![Vec::new(); scripts.len()];
        for run in 0..options.runs {
            let dir = tempfile::Builder::new()
                .prefix("sdk-")
                .tempdir_in(&options.work_dir)?;
            let (rate, record_bytes) = rust_emit(&dir.path().join("rust"), n, policy).await?;
            rust.push(rate);
            for (sdk, runs) in scripts.iter().zip(&mut script_runs) {
                let (sdk, spool) = (sdk.clone(), dir.path().join(sdk.id));
                runs.push(tokio::task::spawn_blocking(move || sdk.emit(&spool, n, policy)).await??);
            }
            let base = tokio::task::spawn_blocking({
                let file = dir.path().join("baseline.seg");
                move || raw_appends(&file, n, record_bytes, policy)
            })
            .await??;
            baseline.push(base);
            let others: String = scripts
                .iter()
                .zip(&script_runs)
                .filter_map(|(sdk, runs)| runs.last().map(|r| format!(", {} {r:.0}", sdk.id)))
                .collect();
            eprintln!(
                "bench: sdk {} run {}/{}: rust {rate:.0}{others} events/s, baseline {base:.0} events/s ({record_bytes} bytes a record)",
                policy.name(),
                run + 1,
                options.runs,
            );
        }
        let name = policy.name();
        let baseline = section.figure(Figure::new(
            &format!("sdk.{name}.baseline"),
            &format!("raw appends, {name}"),
            "events/s",
            Better::Higher,
            baseline,
        ));
        let rust = section.figure(Figure::new(
            &format!("sdk.{name}.rust"),
            &format!("Rust SDK emit, {name}"),
            "events/s",
            Better::Higher,
            rust,
        ));
        section.compare(&format!("sdk_rust_{name}_vs_raw"), &rust, &baseline);
        for (sdk, runs) in scripts.iter().zip(script_runs) {
            let figure = section.figure(Figure::new(
                &format!("sdk.{name}.{}", sdk.id),
                &format!("{} SDK emit, {name}", sdk.title),
                "events/s",
                Better::Higher,
                runs,
            ));
            section.compare(&format!("sdk_{}_{name}_vs_raw", sdk.id), &figure, &baseline);
        }
    }
    section.notes.push(
        "Under `every_event` the fdatasync per event is most of the cost, for the SDKs and the baseline \
         alike. Under `interval` the baseline writes bytes encoded beforehand, while each SDK also builds \
         the event's binary-mode message and record per `emit` (JSON, percent-encoded `ce-*` headers, \
         CRC), so the ratios there measure that encoding as much as the spool. A profile of the Rust SDK \
         (`perf record --call-graph dwarf`, `producer_run bench … --fsync interval`) found half of \
         `emit` in the hop to tokio's blocking pool (futex wake and wait); `interval` appends now run on \
         the calling task (29,600 → 114,400 events/s), and what remains is `wire::binary_message` and \
         the append's `write(2)`."
            .to_owned(),
    );
    for missing in ["python", "typescript"]
        .into_iter()
        .filter(|id| !scripts.iter().any(|s| s.id == *id))
    {
        section.notes.push(format!(
            "The {missing} SDK was not measured: the checkout this binary was built from does not have it \
             set up (run `scripts/setup` there)."
        ));
    }
    Ok(section)
}

/// Emits `n` events with the Rust SDK into a spool at `dir`; (events/s, mean record bytes).
async fn rust_emit(dir: &Path, n: usize, policy: Policy) -> anyhow::Result<(f64, u64)> {
    let mut config = ProducerConfig::new("acme", dir)
        .with_servers([UNREACHABLE])
        .with_spool(SpoolConfig {
            fsync: match policy {
                Policy::EveryEvent => FsyncPolicy::EveryEvent,
                Policy::Interval => FsyncPolicy::Interval(INTERVAL),
            },
            max_bytes: 1 << 32,
            ..SpoolConfig::default()
        });
    config.start_sender = false;
    let producer = Producer::open(config).await?;
    let snapshot = Invocation {
        model_input: Some(json!({"key": "k", "pad": "x".repeat(300)})),
        ..Invocation::new("inv-bench", "kv.get")
    };
    let events = (0..n as u64)
        .map(|i| {
            producer
                .events()
                .invocation(InvocationClass::Started, &snapshot, &Stamp::seq(i))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    for event in events {
        producer.emit(event).await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    producer.close(Duration::ZERO).await?;
    let (bytes, segments) = segment_bytes(dir)?;
    let record = (bytes - segments * MAGIC_BYTES) / n.max(1) as u64;
    Ok((n as f64 / seconds, record))
}

/// Bytes of the spool's segment files and how many there are.
fn segment_bytes(dir: &Path) -> anyhow::Result<(u64, u64)> {
    let mut total = (0, 0);
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "seg") {
            total.0 += entry.metadata()?.len();
            total.1 += 1;
        }
    }
    Ok(total)
}

/// The baseline: `n` appends of `record_bytes` each, synced as `policy` says; events/s.
fn raw_appends(path: &Path, n: usize, record_bytes: u64, policy: Policy) -> anyhow::Result<f64> {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let record = vec![b'x'; usize::try_from(record_bytes)?];
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = match policy {
        Policy::EveryEvent => None,
        Policy::Interval => {
            let (file, stop) = (file.try_clone()?, Arc::clone(&stop));
            Some(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(INTERVAL);
                    let _ = file.sync_data();
                }
            }))
        }
    };
    let started = Instant::now();
    for _ in 0..n {
        file.write_all(&record)?;
        if matches!(policy, Policy::EveryEvent) {
            file.sync_data()?;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    if let Some(syncer) = syncer {
        let _ = syncer.join();
    }
    Ok(n as f64 / seconds)
}

/// An SDK measured through its own bench script (`<script> bench SPOOL N --fsync P`, printing one
/// JSON line with `events_per_s`), in the checkout this binary was built from.
#[derive(Clone)]
struct ScriptSdk {
    id: &'static str,
    title: &'static str,
    program: PathBuf,
    script: PathBuf,
    env: Vec<(&'static str, PathBuf)>,
}

/// The checkout this binary was built from.
fn checkout() -> Option<&'static Path> {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent()
}

impl ScriptSdk {
    fn python() -> Option<Self> {
        let root = checkout()?;
        let sdk = Self {
            id: "python",
            title: "Python",
            program: root.join(".venv/bin/python"),
            script: root.join("sdk/python/tests/producer_run.py"),
            env: vec![("PYTHONPATH", root.join("sdk/python/src"))],
        };
        (sdk.program.is_file() && sdk.script.is_file()).then_some(sdk)
    }

    fn typescript() -> Option<Self> {
        let script = checkout()?.join("sdk/typescript/dist/e2e/producer_run.js");
        script.is_file().then(|| Self {
            id: "typescript",
            title: "TypeScript",
            program: PathBuf::from("node"),
            script,
            env: Vec::new(),
        })
    }

    /// events/s of `emit` alone (the script builds its events before timing).
    fn emit(&self, dir: &Path, n: usize, policy: Policy) -> anyhow::Result<f64> {
        let output = std::process::Command::new(&self.program)
            .arg(&self.script)
            .args(["bench", &dir.display().to_string(), &n.to_string()])
            .args(["--fsync", policy.name()])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .with_context(|| format!("running the {} SDK's bench", self.title))?;
        anyhow::ensure!(
            output.status.success(),
            "{} bench failed: {}",
            self.script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&output.stdout)
            .with_context(|| format!("{:?}", String::from_utf8_lossy(&output.stdout)))?;
        line["events_per_s"]
            .as_f64()
            .with_context(|| format!("{} bench printed no events_per_s", self.title))
    }
}
