//! `toolledger export` killed with SIGKILL at seeded random moments while entries flow into the
//! ledger; then a run with `--until-caught-up`. Every ledger sequence must be in the archive exactly
//! once (read back by pyarrow), and `toolledger verify --parquet` must pass, then name the position
//! of a removed file. Set `TOOLLEDGER_FAULT_SEED` to replay a run; the seed is printed either way.

use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::Value;
use toolledger_merkle::{Checkpoint, CompactRange, NoteSigner};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::{ChildProcess, NatsFixture, entry_bytes};
use toolledger_wire::streams::{self, CHECKPOINTS_SUBJECT, ContractSettings};

use crate::fixture::{Rng, fault_seed, python_json};
use crate::toolledger;

/// STYLE.md asks for at least 20 kills.
const CYCLES: usize = 24;
const ORIGIN: &str = "toolledger/ATL_LEDGER";

/// Appends `events` in chunks with a signed checkpoint after each, pausing between chunks so the
/// ledger grows while the exporter is being killed. Returns the last sequence.
async fn feed(js: jetstream::Context, signer: NoteSigner, events: Vec<Value>, pause: Duration) -> u64 {
    let mut tree = CompactRange::new();
    let mut last = 0;
    for chunk in events.chunks(60) {
        let mut acks = Vec::new();
        for event in chunk {
            let subject = toolledger_testkit::ledger_subject(event);
            let bytes = entry_bytes(event);
            tree.append(toolledger_merkle::leaf_hash(&bytes));
            acks.push(js.publish(subject, bytes.into()).await.unwrap());
        }
        for ack in acks {
            last = ack.await.unwrap().sequence;
        }
        let note = Checkpoint::new(ORIGIN, tree.size(), tree.root())
            .sign(&[&signer])
            .unwrap();
        js.publish(CHECKPOINTS_SUBJECT, note.into_bytes().into())
            .await
            .unwrap()
            .await
            .unwrap();
        tokio::time::sleep(pause).await;
    }
    last
}

fn export(url: &str, prefix: &Path, extra: &[&str]) -> ChildProcess {
    let mut args = vec![
        "export",
        "--nats-url",
        url,
        "--prefix",
        prefix.to_str().unwrap(),
        "--rows-per-file",
        "45",
        "--max-delay-ms",
        "40",
    ];
    args.extend_from_slice(extra);
    ChildProcess::spawn(
        toolledger(),
        &args,
        &[("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn")],
    )
}

/// pyarrow's view of the archive: row and distinct counts of the events' seqs, min and max seq;
/// the invocations' versions (rows) and distinct (tenant, invocation_id, seq), and the latest
/// version of each invocation.
fn read_back(prefix: &Path) -> Value {
    let script = r#"
import json, sys
import pyarrow.dataset as ds
root = sys.argv[1]
seqs = ds.dataset(root + "/events", format="parquet", partitioning="hive").to_table(columns=["seq"])["seq"].to_pylist()
columns = ["tenant", "invocation_id", "seq", "state", "terminal_seq", "tool_id", "permission_behavior", "event_count", "duration_ms"]
inv = ds.dataset(root + "/invocations", format="parquet", partitioning="hive").to_table(columns=columns).to_pydict()
versions = list(zip(inv["tenant"], inv["invocation_id"], inv["seq"]))
latest = {}
for i, (tenant, invocation, seq) in enumerate(versions):
    if (tenant, invocation) not in latest or latest[(tenant, invocation)][0] < seq:
        latest[(tenant, invocation)] = (seq, i)
rows = sorted(json.dumps([str(inv[c][i]) for c in columns]) for _, i in latest.values())
print(json.dumps({"rows": len(seqs), "distinct": len(set(seqs)), "min": min(seqs), "max": max(seqs),
                  "versions": len(versions), "distinct_versions": len(set(versions)),
                  "invocations": len(latest), "invocation_rows": rows}))
"#;
    python_json(script, &[prefix.to_str().unwrap()])
}

#[test]
fn kill9_under_load_leaves_every_event_exactly_once_and_verify_parquet_passes() {
    let seed = fault_seed();
    println!("export kill test seed: {seed} (TOOLLEDGER_FAULT_SEED={seed} replays it)");
    let mut delays = Rng(seed);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let nats = NatsFixture::start();
    let url = nats.url();
    let signer = NoteSigner::generate(ORIGIN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("parquet");
    let key_file = dir.path().join("checkpoint.pub");
    std::fs::write(&key_file, format!("{}\n", signer.verifier())).unwrap();
    let events = generate(&GeneratorConfig {
        seed: seed % 1000,
        sessions: 12,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        extra_invocations: 3,
        ..GeneratorConfig::default()
    })
    .events;
    let js = runtime.block_on(async {
        let js = jetstream::new(nats.client().await);
        let settings = ContractSettings::default();
        js.create_stream(streams::ledger_config(&settings)).await.unwrap();
        js.create_stream(streams::checkpoints_config(&settings))
            .await
            .unwrap();
        js
    });
    // The feed runs for most of the kill phase: ~40 chunks, 500 ms apart.
    let feeder = runtime.spawn(feed(js, signer, events, Duration::from_millis(500)));

    let started = Instant::now();
    let mut position = 0;
    let mut advanced = 0;
    for _ in 0..CYCLES {
        let mut child = export(&url, &prefix, &[]);
        std::thread::sleep(delays.between(300, 1800));
        child.kill9();
        let now = manifest_position(&prefix);
        assert!(
            now >= position,
            "the manifests went back from {position} to {now}"
        );
        advanced += usize::from(now > position);
        position = now;
    }
    let last = runtime.block_on(feeder).unwrap();
    println!(
        "{CYCLES} kills in {:.1}s while the ledger grew to {last}; {advanced} runs advanced the archive, \
         to seq {position} before the final run",
        started.elapsed().as_secs_f64()
    );
    // A run killed while it replays or redoes the newest range is a fault point too; but a third
    // of the runs must write new ranges, or the kills never landed inside writing.
    assert!(
        advanced >= CYCLES / 3,
        "too few runs exported anything before the kill"
    );

    let final_run = Instant::now();
    let mut child = export(&url, &prefix, &["--until-caught-up"]);
    let status = child
        .wait_timeout(Duration::from_secs(120))
        .expect("export finishes");
    assert!(status.success(), "{}", child.stderr());
    println!(
        "final run from seq {position} to {last}: {:.2}s (from its tracker snapshot)",
        final_run.elapsed().as_secs_f64()
    );
    assert!(
        child.stdout().contains(&format!("exported through seq {last}")),
        "{}",
        child.stdout()
    );

    let read = read_back(&prefix);
    println!(
        "pyarrow: {} rows, {} distinct seqs in {}..={}, {} invocations",
        read["rows"], read["distinct"], read["min"], read["max"], read["invocations"]
    );
    assert_eq!(read["rows"], Value::from(last), "every seq exactly once: {read}");
    assert_eq!(read["distinct"], Value::from(last), "{read}");
    assert_eq!(read["min"], Value::from(1), "{read}");
    assert_eq!(read["max"], Value::from(last), "{read}");
    assert_eq!(read["versions"], read["distinct_versions"], "{read}");
    // Each invocation's latest version equals that of one uninterrupted export of the same ledger
    // (the versions in between follow the ranges, which the kills moved).
    let fresh = dir.path().join("fresh");
    let mut child = export(&url, &fresh, &["--until-caught-up"]);
    assert!(
        child
            .wait_timeout(Duration::from_secs(120))
            .expect("export finishes")
            .success()
    );
    assert_eq!(read["invocation_rows"], read_back(&fresh)["invocation_rows"]);

    let verify = |prefix: &Path| {
        let mut child = ChildProcess::spawn(
            toolledger(),
            [
                "verify",
                "--parquet",
                prefix.to_str().unwrap(),
                "--key",
                key_file.to_str().unwrap(),
            ],
            &[],
        );
        let status = child
            .wait_timeout(Duration::from_secs(60))
            .expect("verify finishes");
        (status, child.stdout(), child.stderr())
    };
    let (status, stdout, stderr) = verify(&prefix);
    assert!(status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("{last} entries")) && stdout.contains("ok"),
        "{stdout}"
    );

    // Remove one events file: verify fails and names the first missing position.
    let victim = walk(&prefix.join("events"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "parquet"))
        .unwrap();
    std::fs::remove_file(&victim).unwrap();
    let (status, stdout, stderr) = verify(&prefix);
    assert!(!status.success(), "{stdout}");
    assert!(stderr.contains("first bad position: ledger seq"), "{stderr}");
    println!("tampered: {}", stderr.trim());
}

/// The last sequence the events manifests name (0 before the first).
fn manifest_position(prefix: &Path) -> u64 {
    let dir = prefix.join("events/_manifest");
    if !dir.is_dir() {
        return 0;
    }
    walk(&dir)
        .iter()
        .filter_map(|p| p.file_stem()?.to_str()?.split('-').nth(1)?.parse().ok())
        .max()
        .unwrap_or(0)
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}
