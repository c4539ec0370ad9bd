//! A partitioned ledger through the binary (`docs/scaling.md`): `init --partitions 3`, producers of
//! several tenants, `ingest` writing every partition, `verify` checking each partition against its
//! own checkpoints; and `up`, whose readers follow one partition for now, refusing more.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use toolledger_testkit::{ChildProcess, NatsFixture};
use toolledger_wire::partition::Partitions;

use crate::toolledger;

struct Env {
    config: PathBuf,
    data: tempfile::TempDir,
}

impl Env {
    fn new(partitions: u16) -> Self {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("toolledger.toml");
        std::fs::write(
            &config,
            format!("[ledger]\npartitions = {partitions}\ncheckpoint_interval_ms = 100\n"),
        )
        .unwrap();
        Self { config, data }
    }

    fn spawn(&self, args: &[&str]) -> ChildProcess {
        let config = self.config.display().to_string();
        let data = self.data.path().display().to_string();
        ChildProcess::spawn(
            toolledger(),
            args,
            &[
                ("TOOLLEDGER_CONFIG", config.as_str()),
                ("TOOLLEDGER_DATA_DIR", data.as_str()),
                ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
                ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ],
        )
    }

    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut child = self.spawn(args);
        let status = child
            .wait_timeout(Duration::from_secs(120))
            .expect("the tool finishes");
        (status.success(), child.stdout(), child.stderr())
    }
}

/// Messages in each partition's ledger stream, and in ATL_CHECKPOINTS on each partition's subject.
fn counts(nats: &NatsFixture, partitions: Partitions) -> (Vec<u64>, Vec<u64>) {
    let runtime = crate::init::runtime();
    runtime.block_on(async {
        let js = jetstream::new(nats.client().await);
        let mut entries = Vec::new();
        let mut checkpoints = Vec::new();
        let stream = js.get_stream("ATL_CHECKPOINTS").await.unwrap();
        for partition in partitions.all() {
            let mut ledger = js.get_stream(partition.stream()).await.unwrap();
            entries.push(ledger.info().await.unwrap().state.messages);
            let subject = partition.checkpoint_subject();
            let mut subjects = stream.info_with_subjects(subject.clone()).await.unwrap();
            let mut signed = 0;
            while let Some(Ok((name, count))) = futures::StreamExt::next(&mut subjects).await {
                if name == subject {
                    signed = count as u64;
                }
            }
            checkpoints.push(signed);
        }
        (entries, checkpoints)
    })
}

#[test]
fn a_ledger_of_three_partitions_is_written_and_verified_partition_by_partition() {
    let nats = NatsFixture::start();
    let url = nats.url();
    let env = Env::new(3);
    let partitions = Partitions::new(3).unwrap();
    let (ok, out, err) = env.run(&["init", "--nats-url", &url]);
    assert!(ok, "init failed\n{out}\n{err}");
    let events = env.data.path().join("events.ndjson");
    let tenants = "acme,globex,initech,umbrella,hooli,stark";
    let (ok, _, err) = env.run(&[
        "demo-data",
        "--sessions",
        "6",
        "--tenants",
        tenants,
        "--out",
        events.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let count = std::fs::read_to_string(&events).unwrap().lines().count() as u64;

    let mut ingest = env.spawn(&["ingest", "--nats-url", &url]);
    let (ok, out, err) = env.run(&["emit", events.to_str().unwrap(), "--nats-url", &url]);
    assert!(ok, "emit failed\n{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (entries, _) = counts(&nats, partitions);
        if entries.iter().sum::<u64>() == count {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{entries:?} of {count}\n{}",
            ingest.stderr()
        );
        assert!(
            ingest.try_status().is_none(),
            "ingest exited\n{}",
            ingest.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = ingest.terminate(Duration::from_secs(30)).expect("ingest stops");
    assert!(status.success(), "{}", ingest.stderr());
    let (entries, checkpoints) = counts(&nats, partitions);
    assert!(
        entries.iter().filter(|n| **n > 0).count() >= 2,
        "six tenants over three partitions: {entries:?}"
    );
    for (entries, checkpoints) in entries.iter().zip(&checkpoints) {
        assert_eq!(
            *entries > 0,
            *checkpoints > 0,
            "{entries} entries, {checkpoints} checkpoints"
        );
    }

    let (ok, out, err) = env.run(&["verify", "--nats-url", &url]);
    assert!(ok, "verify failed\n{out}\n{err}");
    for (partition, entries) in partitions.all().zip(&entries) {
        assert!(
            out.contains(&format!("partition {partition} ({})", partition.stream())),
            "{out}"
        );
        assert!(
            out.contains(&format!("{entries} entries of {}", partition.stream())),
            "{out}"
        );
    }
    assert!(out.trim_end().ends_with("toolledger verify: ok"), "{out}");
    let (ok, out, err) = env.run(&["verify", "--nats-url", &url, "--partition", "2", "--json"]);
    assert!(ok, "verify --partition 2 failed\n{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["ledger_stream"], "ATL_LEDGER_P2");
    assert_eq!(report["entries"], entries[2]);
    assert_eq!(report["findings"].as_array().unwrap().len(), 0, "{out}");
    let (ok, _, err) = env.run(&["verify", "--nats-url", &url, "--partition", "3"]);
    assert!(!ok && err.contains("3 partition(s)"), "{err}");

    // A configuration with another count is refused before anything is written.
    let one = Env::new(1);
    let (ok, _, err) = one.run(&["init", "--nats-url", &url]);
    assert!(!ok && err.contains("ATL_LEDGER_P1 exists"), "{err}");
}

#[test]
fn up_refuses_more_than_one_partition_until_its_readers_follow_them() {
    let env = Env::new(4);
    let (ok, out, err) = env.run(&["up"]);
    assert!(!ok, "up ran with four partitions\n{out}");
    assert!(err.contains("ledger.partitions = 4"), "{err}");
}
