//! What the producer SDK tests (`sdk_python`, `sdk_typescript`, `sdk_rust`) share: a ledger with
//! ingest running, the ids a producer says it emitted, the exactly-once check, the official schema of
//! each class, and the syscall-trace reading of the fsync check.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use toolledger_testkit::{ChildProcess, NatsFixture};
use toolledger_wire::LedgerEntry;
use toolledger_wire::streams::{LEDGER, QUARANTINE};

use crate::toolledger;

/// Kill cycles (STYLE.md: at least 20 for a fault test).
pub(crate) const CYCLES: usize = 20;
/// A port nothing listens on: a producer pointed there keeps everything in its spool.
pub(crate) const UNREACHABLE: &str = "nats://127.0.0.1:1";

/// Event ids a producer said it emitted: complete `E <id>` lines only.
pub(crate) fn emitted(stdout: &str) -> Vec<String> {
    let complete = &stdout[..stdout.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .filter_map(|l| l.strip_prefix("E "))
        .map(str::to_owned)
        .collect()
}

/// A nats-server with the contract `init` creates and an ingest running against it.
pub(crate) struct Ledger {
    pub(crate) nats: NatsFixture,
    ingest: ChildProcess,
    _data: tempfile::TempDir,
}

impl Ledger {
    pub(crate) fn start() -> Self {
        let nats = NatsFixture::start();
        let data = tempfile::tempdir().unwrap();
        let url = nats.url();
        let env = [
            ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ];
        let mut init = ChildProcess::spawn(toolledger(), ["init", "--nats-url", &url], &env);
        let status = init.wait_timeout(Duration::from_secs(60)).expect("init exits");
        assert!(status.success(), "init failed\n{}", init.stderr());
        let ingest = ChildProcess::spawn(toolledger(), ["ingest", "--nats-url", &url], &env);
        Self {
            nats,
            ingest,
            _data: data,
        }
    }

    /// How often each event id of `tenant` is in the ledger, and how many rejects there are
    /// (quarantine receipts in the ledger plus messages in ATL_QUARANTINE). Every entry is also
    /// checked for a `secret-` value: the producers' inputs carry `pin: secret-<n>`, a field only
    /// their tool declares sensitive, so ingest must have scrubbed every one.
    pub(crate) fn ids(&self, tenant: &str) -> (HashMap<String, usize>, usize) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let js = async_nats::jetstream::new(async_nats::connect(self.nats.url()).await.unwrap());
                let tail = toolledger_ledger::last_sequence(&js, LEDGER).await.unwrap();
                let mut ids = HashMap::new();
                let mut receipts = 0;
                if tail > 0 {
                    for (_, bytes) in toolledger_ledger::read_range(&js, LEDGER, 1, tail).await.unwrap() {
                        assert!(
                            !bytes.windows(7).any(|w| w == b"secret-"),
                            "a declared sensitive field reached the ledger: {}",
                            String::from_utf8_lossy(&bytes)
                        );
                        let entry = LedgerEntry::parse(&bytes).unwrap();
                        if entry.event.ty() == "toolledger.quarantine.recorded" {
                            receipts += 1;
                        }
                        if entry.event.extension("tenant").map(|t| t.to_string()).as_deref() == Some(tenant) {
                            *ids.entry(entry.event.id().to_owned()).or_insert(0) += 1;
                        }
                    }
                }
                let mut quarantine = js.get_stream(QUARANTINE).await.unwrap();
                let quarantined = quarantine.info().await.unwrap().state.messages;
                (ids, receipts + quarantined as usize)
            })
    }

    /// Waits until every id in `want` is in the ledger (at most 90 s); returns the ids then.
    pub(crate) fn wait_for(&mut self, tenant: &str, want: &HashSet<String>) -> HashMap<String, usize> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (ids, _) = self.ids(tenant);
            let missing = want.iter().filter(|id| !ids.contains_key(*id)).count();
            if missing == 0 {
                return ids;
            }
            assert!(
                self.ingest.try_status().is_none(),
                "ingest exited\n{}",
                self.ingest.stderr()
            );
            assert!(
                Instant::now() < deadline,
                "{missing} of {} emitted events never reached the ledger",
                want.len()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// [`Self::wait_for`], then half a second for anything that would follow (a duplicate), then the
    /// ids and rejects.
    pub(crate) fn settled(
        &mut self,
        tenant: &str,
        want: &HashSet<String>,
    ) -> (HashMap<String, usize>, usize) {
        self.wait_for(tenant, want);
        std::thread::sleep(Duration::from_millis(500));
        self.ids(tenant)
    }

    pub(crate) fn stop(mut self) {
        let status = self
            .ingest
            .terminate(Duration::from_secs(30))
            .expect("ingest stops");
        assert!(status.success(), "{}", self.ingest.stderr());
    }
}

/// Every emitted id is in the ledger exactly once, nothing of the tenant twice, nothing quarantined.
pub(crate) fn assert_exactly_once(
    seed: u64,
    ids: &HashMap<String, usize>,
    receipts: usize,
    want: &HashSet<String>,
) {
    for id in want {
        assert_eq!(
            ids.get(id),
            Some(&1),
            "seed {seed}: event {id} in the ledger {:?} times",
            ids.get(id)
        );
    }
    let twice: Vec<_> = ids.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "seed {seed}: appended twice: {twice:?}");
    assert_eq!(
        receipts, 0,
        "seed {seed}: a retry was quarantined (duplicate_conflict?)"
    );
}

/// The official object each class's data is (DESIGN.md §3); permission requests have none.
pub(crate) fn official_for(class: &str) -> Option<&'static str> {
    Some(match class {
        "tool.declared" => "agenttool-tool-declaration",
        "tool.permission.decided" => "agenttool-permission-decision",
        "tool.permission.requested" => return None,
        "tool.invocation.progress" => "agenttool-progress",
        "tool.invocation.partial_result" | "tool.result.created" | "tool.result.redacted" => {
            "agenttool-result"
        }
        c if c.starts_with("tool.hook.") => "agenttool-hook",
        c if c.starts_with("tool.invocation.") => "agenttool-invocation",
        _ => return None,
    })
}

/// Under `every_event`, each `E` line (written after `emit` returned) follows a write of the
/// spool record and an `fdatasync` of the same file, in the emitting thread. Returns how many
/// `E` lines had that, and how many there were.
fn synced_before_return(trace: &str) -> (usize, usize) {
    // strace -f lines: `<tid> write(<fd>, …) = n`, `<tid> fdatasync(<fd>) = 0`; a call another
    // thread interrupts is split: `<tid> fdatasync(<fd> <unfinished ...>`, later
    // `<tid> <... fdatasync resumed>) = 0`. Between two `E` lines a thread may write other fds too
    // (a runtime's eventfd wake-up): an `E` line counts as synced when some fd the thread wrote since
    // its last `E` line was fdatasync'ed after its last write.
    #[derive(Default)]
    struct Thread<'a> {
        /// Each fd written since the last `E` line: synced since its last write?
        written: HashMap<&'a str, bool>,
        /// The fd of an fdatasync strace printed unfinished.
        unfinished: Option<&'a str>,
    }
    let mut threads: HashMap<&str, Thread> = HashMap::new();
    let (mut synced, mut total) = (0, 0);
    for line in trace.lines() {
        let Some((tid, call)) = line.trim().split_once(char::is_whitespace) else {
            continue;
        };
        let call = call.trim_start();
        let state = threads.entry(tid).or_default();
        let mut sync = |fd: Option<&str>, call: &str| {
            if let Some(flag) = fd.and_then(|fd| state.written.get_mut(fd))
                && call.ends_with("= 0")
            {
                *flag = true;
            }
        };
        if let Some(rest) = call.strip_prefix("write(") {
            let fd = rest.split(',').next().unwrap_or_default();
            if fd == "1" {
                if rest.contains("\"E ") {
                    total += 1;
                    if state.written.values().any(|synced| *synced) {
                        synced += 1;
                    }
                }
                state.written.clear();
            } else if fd != "2" {
                state.written.insert(fd, false);
            }
        } else if let Some(rest) = call.strip_prefix("fdatasync(") {
            let fd = rest.split([')', ' ']).next().unwrap_or_default();
            if call.ends_with("<unfinished ...>") {
                state.unfinished = Some(fd);
            } else {
                sync(Some(fd), call);
            }
        } else if call.starts_with("<... fdatasync resumed>") {
            let fd = state.unfinished.take();
            sync(fd, call);
        }
    }
    (synced, total)
}

/// Runs the producer `command(policy, spool dir)` makes (emitting 10 invocations to [`UNREACHABLE`]
/// with `--fsync <policy>`, an `E <id>` line on stdout after each `emit` returned) under strace, once
/// per policy: under `every_event` every `E` line follows the spool record's write and an `fdatasync`
/// of that file in the same thread; under `interval`, the control, not every one does.
pub(crate) fn assert_fdatasync_before_emit_returns(command: impl Fn(&str, &str) -> std::process::Command) {
    let strace = std::path::Path::new("/usr/bin/strace");
    assert!(strace.exists(), "strace is missing: run scripts/setup");
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for policy in ["every_event", "interval"] {
        let trace = dir.path().join(format!("{policy}.trace"));
        let spool = dir.path().join(format!("{policy}-spool"));
        let producer = command(policy, spool.to_str().unwrap());
        let output = std::process::Command::new(strace)
            .args(["-f", "-qq", "-s", "24", "-e", "trace=write,fdatasync", "-o"])
            .arg(&trace)
            .arg(producer.get_program())
            .args(producer.get_args())
            .envs(
                producer
                    .get_envs()
                    .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
            )
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        results.push(synced_before_return(&std::fs::read_to_string(&trace).unwrap()));
    }
    let (synced, total) = results[0];
    assert!(total >= 50, "every_event: {total} emits traced");
    assert_eq!(
        synced, total,
        "every_event: an emit returned before its fdatasync"
    );
    let (synced, total) = results[1];
    assert!(
        synced < total,
        "interval: the check cannot tell the policies apart"
    );
}

#[test]
fn the_fsync_trace_reader_follows_calls_strace_split() {
    let trace = "\
100 write(11, \"rec\", 3) = 3
100 fdatasync(11 <unfinished ...>
101 write(5, \"x\", 1) = 1
100 <... fdatasync resumed>) = 0
100 write(1, \"E id1\\n\", 6) = 6
100 write(11, \"rec\", 3) = 3
100 fdatasync(11) = 0
100 write(4, \"\\1\\0\\0\\0\\0\\0\\0\\0\", 8) = 8
100 write(1, \"E id2\\n\", 6) = 6
100 write(11, \"rec\", 3) = 3
101 fdatasync(11) = 0
100 write(1, \"E id3\\n\", 6) = 6
";
    // The third emit's record was synced by another thread, not before that emit returned.
    assert_eq!(synced_before_return(trace), (2, 3));
}
