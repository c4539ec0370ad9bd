//! `toolledger doctor`: checks a deployment and says what to do about each problem.
//!
//! ```text
//! config (already loaded) ─▶ NATS reachable ─▶ stream contract (limits, deny flags, replicas)
//!   ─▶ ingest lag (ATL_INBOUND backlog and its oldest message) ─▶ checkpoint age against the ledger
//!   ─▶ witnesses: each one's latest cosignature against the newest checkpoint (when configured)
//!   ─▶ quarantine rate (last hour) ─▶ projection: readable (every page: `PRAGMA quick_check`) and
//!      its lag ─▶ projector: its heartbeat ─▶ data directory: private ─▶ disk space
//! ```
//!
//! Each check is `ok`, `warn` or `fail` with a detail and, when not ok, the action (the runbooks in
//! docs/runbooks.md say more). Exit codes: 0 nothing failed (warnings allowed), 1 a check failed.

use std::time::Duration;

use async_nats::jetstream;
use chrono::Utc;
use serde::Serialize;
use toolledger_core::config::Config;
use toolledger_merkle::CosignatureVerifier;
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::{self, CHECKPOINTS, INBOUND, QUARANTINE};

use super::init::nats_url;

/// Backlog above which ingest is reported as lagging.
const LAG_MESSAGES: u64 = 10_000;
/// Age of the oldest inbound message above which ingest is reported as lagging.
const LAG_AGE: Duration = Duration::from_secs(60);
/// Quarantined messages per hour above which the rate is reported.
const QUARANTINE_PER_HOUR: u64 = 100;
/// Free space below which the data directory's disk is reported.
const LOW_DISK_BYTES: u64 = 1 << 30;

/// Flags of `toolledger doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// Print the checks as JSON.
    #[arg(long)]
    pub json: bool,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`).
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// How long a witness may go without cosigning while newer checkpoints wait before it is
    /// reported as behind.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub witness_lag_secs: u64,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
struct Check {
    name: String,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<String>,
}

fn check(name: impl Into<String>, status: Status, detail: impl Into<String>, action: Option<&str>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        action: action.map(str::to_owned),
    }
}

/// Runs every check and prints them.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let mut checks = vec![check(
        "config",
        Status::Ok,
        format!("loaded; data directory {}", config.data_dir.display()),
        None,
    )];
    let url = nats_url(&config, args.nats_url.as_deref());
    let client = match url {
        Ok(url) => {
            match tokio::time::timeout(
                Duration::from_secs(5),
                toolledger_wire::connect::connect(&url, "toolledger-doctor"),
            )
            .await
            {
                Ok(Ok(client)) => {
                    checks.push(check(
                        "nats",
                        Status::Ok,
                        format!("connected to {}", toolledger_wire::connect::redacted(&url)),
                        None,
                    ));
                    Some(client)
                }
                Ok(Err(error)) => {
                    checks.push(check(
                        "nats",
                        Status::Fail,
                        error.to_string(),
                        Some("start nats-server or fix nats.url and its credentials"),
                    ));
                    None
                }
                Err(_) => {
                    checks.push(check(
                        "nats",
                        Status::Fail,
                        "no answer in 5 s",
                        Some("start nats-server or fix nats.url"),
                    ));
                    None
                }
            }
        }
        Err(error) => {
            checks.push(check(
                "nats",
                Status::Fail,
                error.to_string(),
                Some("set nats.url or pass --nats-url"),
            ));
            None
        }
    };
    // A partitioned ledger: each partition's checkpoints, projection and projector in turn
    // (`checkpoints p1`, …; a single ledger's keep their plain names).
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    let mut ledger_last = vec![None; usize::from(partitions.count())];
    if let Some(client) = client {
        let js = jetstream::new(client);
        checks.push(contract(&js, partitions).await);
        checks.push(ingest_lag(&js).await);
        for partition in partitions.all() {
            let (checkpoint, last) = checkpoint_age(&js, &config, partitions, partition).await;
            checks.push(checkpoint);
            ledger_last[usize::from(partition.index())] = last;
        }
        if !config.ledger.witnesses.is_empty() {
            checks.push(
                witnesses(
                    &js,
                    &config,
                    partitions,
                    Duration::from_secs(args.witness_lag_secs),
                )
                .await,
            );
        }
        checks.push(quarantine_rate(&js).await);
    }
    for partition in partitions.all() {
        let last = ledger_last[usize::from(partition.index())];
        checks.push(projection_lag(&config, partitions, partition, last));
        checks.push(projector(&config, partitions, partition));
    }
    checks.push(data_dir_mode(&config));
    checks.push(disk(&config));

    if args.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            let status = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!("{status}  {:<12} {}", c.name, c.detail);
            if let Some(action) = &c.action {
                println!("      {:<12} → {action}", "");
            }
        }
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    anyhow::ensure!(failed == 0, "{failed} check(s) failed");
    Ok(())
}

async fn contract(js: &jetstream::Context, partitions: Partitions) -> Check {
    let settings = streams::ContractSettings {
        partitions,
        ..streams::ContractSettings::default()
    };
    let findings = streams::check_contract_with(js, &settings).await;
    if findings.is_empty() {
        let lacking = streams::check_shortfalls(js, &settings).await;
        if !lacking.is_empty() {
            let detail = lacking
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            return check(
                "streams",
                Status::Warn,
                detail,
                Some("on nats-server 2.12+, run `toolledger init` as admin to turn on atomic batches"),
            );
        }
        let ledger = match partitions.count() {
            1 => "ATL_LEDGER".to_owned(),
            2 => "ATL_LEDGER, ATL_LEDGER_P1 and ATL_DIRECTORY".to_owned(),
            count => format!("ATL_LEDGER, ATL_LEDGER_P1…P{} and ATL_DIRECTORY", count - 1),
        };
        return check(
            "streams",
            Status::Ok,
            format!(
                "ATL_INBOUND, {ledger}, ATL_CHECKPOINTS, ATL_QUARANTINE and ATL_LEASES as DESIGN §2 requires"
            ),
            None,
        );
    }
    let detail = findings
        .iter()
        .map(|f| format!("{} {}: is {}, needs {}", f.stream, f.field, f.actual, f.required))
        .collect::<Vec<_>>()
        .join("; ");
    check(
        "streams",
        Status::Fail,
        detail,
        Some(
            "run `toolledger init` as admin to create what is missing; a weakened ledger stream needs an admin to restore its limits (docs/runbooks.md)",
        ),
    )
}

async fn ingest_lag(js: &jetstream::Context) -> Check {
    let Ok(mut inbound) = js.get_stream(INBOUND).await else {
        return check(
            "ingest lag",
            Status::Fail,
            "ATL_INBOUND is missing",
            Some("run `toolledger init`"),
        );
    };
    let Ok(info) = inbound.info().await else {
        return check("ingest lag", Status::Fail, "ATL_INBOUND is unreadable", None);
    };
    let backlog = info.state.messages;
    if backlog == 0 {
        return check("ingest lag", Status::Ok, "ATL_INBOUND is empty", None);
    }
    let oldest = Utc::now().signed_duration_since(chrono::DateTime::<Utc>::from(
        std::time::SystemTime::from(info.state.first_timestamp),
    ));
    let age = oldest.to_std().unwrap_or_default();
    let detail = format!("{backlog} messages waiting, the oldest for {}s", age.as_secs());
    if backlog > LAG_MESSAGES || age > LAG_AGE {
        check(
            "ingest lag",
            Status::Warn,
            detail,
            Some("is `toolledger ingest` running (its /healthz)? see docs/runbooks.md \"Ingest lag\""),
        )
    } else {
        check("ingest lag", Status::Ok, detail, None)
    }
}

/// A check's name, with the partition's when the ledger has several (`checkpoints p1`).
fn named(name: &str, partitions: Partitions, partition: Partition) -> String {
    match partitions.count() {
        1 => name.to_owned(),
        _ => format!("{name} {partition}"),
    }
}

async fn checkpoint_age(
    js: &jetstream::Context,
    config: &Config,
    partitions: Partitions,
    partition: Partition,
) -> (Check, Option<u64>) {
    let name = named("checkpoints", partitions, partition);
    let ledger_last = toolledger_ledger::last_sequence(js, &partition.stream())
        .await
        .ok();
    if js.get_stream(CHECKPOINTS).await.is_err() {
        return (
            check(
                name,
                Status::Fail,
                "ATL_CHECKPOINTS is missing",
                Some("run `toolledger init`"),
            ),
            ledger_last,
        );
    }
    // The partition's own newest checkpoint: the others' (and the directory's) share the stream.
    let message = match toolledger_ledger::last_stored_message(
        js,
        CHECKPOINTS,
        &partition.checkpoint_subject(),
    )
    .await
    {
        Ok(message) => message,
        Err(error) => return (check(name, Status::Fail, error.to_string(), None), ledger_last),
    };
    let entries = ledger_last.unwrap_or(0);
    let Some(message) = message else {
        let status = if entries == 0 { Status::Ok } else { Status::Warn };
        return (
            check(name, status, format!("none signed yet; the ledger holds {entries} entries"), (status != Status::Ok).then_some("is `toolledger ingest` running with its signing key? see docs/runbooks.md \"Checkpoint stall\"")),
            ledger_last,
        );
    };
    let size = checkpoint_size(&message.payload);
    let signed_at = message.time;
    let age = Utc::now()
        .signed_duration_since(signed_at)
        .to_std()
        .unwrap_or_default();
    let interval = Duration::from_millis(config.ledger.checkpoint_interval_ms);
    let behind = entries.saturating_sub(size);
    let detail = format!("newest signs {size} of {entries} entries, {}s ago", age.as_secs());
    if behind > 0 && age > interval * 3 {
        (
            check(
                name,
                Status::Warn,
                detail,
                Some(
                    "the ledger grew but no checkpoint followed: check ingest's logs and key file; see docs/runbooks.md \"Checkpoint stall\"",
                ),
            ),
            ledger_last,
        )
    } else {
        (check(name, Status::Ok, detail, None), ledger_last)
    }
}

/// Whether the configured witnesses keep up with every log (each partition's and, with several, the
/// directory's): a witness is behind on a log when newer checkpoints than its latest cosignature
/// there exist and it has not cosigned for `lag` (ingest asks every second). Fewer than the quorum
/// keeping up with any log fails.
async fn witnesses(js: &jetstream::Context, config: &Config, partitions: Partitions, lag: Duration) -> Check {
    const NAME: &str = "witnesses";
    let action = "check that each witness runs, lists every log's origin and is reachable from ingest, \
                  and ingest's log (\"witness did not cosign\"); see docs/witnesses.md";
    let mut logs: Vec<(String, String)> = partitions
        .all()
        .map(|partition| (partition.to_string(), partition.checkpoint_subject()))
        .collect();
    if partitions.count() > 1 {
        logs.push((
            "directory".to_owned(),
            toolledger_wire::directory::CHECKPOINT_SUBJECT.to_owned(),
        ));
    }
    let quorum = config.ledger.witness_quorum();
    let n = config.ledger.witnesses.len();
    // Each key parsed once: one that does not parse keeps up with no log, and is named once (when
    // some log has a checkpoint to keep up with).
    let mut bad_keys = Vec::new();
    let keys: Vec<CosignatureVerifier> = config
        .ledger
        .witnesses
        .iter()
        .filter_map(|witness| match CosignatureVerifier::parse(&witness.key) {
            Ok(key) => Some(key),
            Err(error) => {
                bad_keys.push(format!("{} (bad key: {error})", witness.url));
                None
            }
        })
        .collect();
    let (mut details, mut behind, mut short, mut signed) = (Vec::new(), Vec::new(), false, false);
    for (log, subject) in &logs {
        let standing = match witnessed_log(js, &keys, subject, lag).await {
            Ok(standing) => standing,
            Err(failed) => return failed,
        };
        // A single log keeps the plain detail; several name theirs.
        let (prefix, suffix) = match logs.len() {
            1 => (String::new(), String::new()),
            _ => (format!("{log}: "), format!(" of {log}")),
        };
        let Some(standing) = standing else {
            details.push(format!("{prefix}no checkpoint signed yet"));
            continue;
        };
        signed = true;
        short |= standing.keeping_up < quorum;
        details.push(format!(
            "{prefix}{} of {n} keep up with checkpoint {} (quorum {quorum})",
            standing.keeping_up, standing.size
        ));
        behind.extend(standing.behind.into_iter().map(|b| format!("{b}{suffix}")));
    }
    if signed {
        behind.splice(0..0, bad_keys);
    }
    let mut detail = details.join("; ");
    if !behind.is_empty() {
        detail.push_str(&format!("; behind: {}", behind.join(", ")));
    }
    let status = if short {
        Status::Fail
    } else if behind.is_empty() {
        Status::Ok
    } else {
        Status::Warn
    };
    check(NAME, status, detail, (status != Status::Ok).then_some(action))
}

/// Where the witnesses stand on one log.
struct Standing {
    /// Its newest checkpoint's size.
    size: u64,
    keeping_up: usize,
    /// `<witness> at size <S> for <N>s` for each one behind.
    behind: Vec<String>,
}

/// The standing of the witnesses with these `keys` on the log whose checkpoints are on
/// `checkpoint_subject`; `None` before its first checkpoint; the failed check when ATL_CHECKPOINTS or
/// ATL_COSIGNATURES cannot be read.
async fn witnessed_log(
    js: &jetstream::Context,
    keys: &[CosignatureVerifier],
    checkpoint_subject: &str,
    lag: Duration,
) -> Result<Option<Standing>, Check> {
    const NAME: &str = "witnesses";
    // The log's own subject: the stream holds other logs' checkpoints too.
    let latest = match toolledger_ledger::last_stored_message(js, CHECKPOINTS, checkpoint_subject).await {
        Ok(Some(message)) => message,
        Ok(None) => return Ok(None),
        Err(error) => return Err(check(NAME, Status::Fail, error.to_string(), None)),
    };
    let size = checkpoint_size(&latest.payload);
    let now = Utc::now();
    let mut standing = Standing {
        size,
        keeping_up: 0,
        behind: Vec::new(),
    };
    for key in keys {
        let subjects = streams::cosignatures_by(checkpoint_subject, key.key_id());
        let last = toolledger_ledger::last_stored_message(js, streams::COSIGNATURES, &subjects)
            .await
            .map_err(|error| {
                check(
                    NAME,
                    Status::Fail,
                    error.to_string(),
                    Some("run `toolledger init`"),
                )
            })?;
        let cosigned = last.as_ref().map_or(0, |m| checkpoint_size(&m.payload));
        // How long the oldest checkpoint it has not cosigned has waited (sizes grow with the
        // checkpoint stream's sequence, so it is found by bisection).
        let waiting = if cosigned >= size {
            Duration::ZERO
        } else {
            match first_signed_after(js, checkpoint_subject, latest.seq, cosigned).await {
                Ok(Some(since)) => now.signed_duration_since(since).to_std().unwrap_or_default(),
                Ok(None) => Duration::ZERO,
                Err(error) => return Err(check(NAME, Status::Fail, error.to_string(), None)),
            }
        };
        if cosigned >= size || waiting < lag {
            standing.keeping_up += 1;
        } else {
            standing.behind.push(format!(
                "{} at size {cosigned} for {}s",
                key.name(),
                waiting.as_secs()
            ));
        }
    }
    Ok(Some(standing))
}

/// When the log's first checkpoint larger than `size` was signed, looking at ATL_CHECKPOINTS on its
/// `checkpoint_subject` up to `last_seq`; `None` when none is larger. Other logs' checkpoints share
/// the stream, but a log's sizes grow with the stream's sequence, and so does the size of its first
/// checkpoint at or after any sequence: a bisection over that finds it in a few dozen reads.
async fn first_signed_after(
    js: &jetstream::Context,
    checkpoint_subject: &str,
    last_seq: u64,
    size: u64,
) -> anyhow::Result<Option<chrono::DateTime<Utc>>> {
    let next_of_log = |seq: u64| async move {
        anyhow::Ok(toolledger_ledger::next_stored_message(js, CHECKPOINTS, checkpoint_subject, seq).await?)
    };
    let larger = |message: &Option<toolledger_ledger::StoredMessage>| {
        message
            .as_ref()
            .is_some_and(|m| m.seq <= last_seq && checkpoint_size(&m.payload) > size)
    };
    // The smallest sequence whose next checkpoint of the log is larger than `size`.
    // `last_seq` is the log's newest checkpoint: when it is not larger, none is.
    if !larger(&next_of_log(last_seq).await?) {
        return Ok(None);
    }
    let (mut low, mut high) = (1, last_seq);
    while low < high {
        let mid = low + (high - low) / 2;
        if larger(&next_of_log(mid).await?) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    Ok(next_of_log(low).await?.map(|m| m.time))
}

/// The size line of a checkpoint note (0 when it has none).
fn checkpoint_size(note: &[u8]) -> u64 {
    String::from_utf8_lossy(note)
        .lines()
        .nth(1)
        .and_then(|l| l.parse::<u64>().ok())
        .unwrap_or(0)
}

async fn quarantine_rate(js: &jetstream::Context) -> Check {
    let Ok(mut stream) = js.get_stream(QUARANTINE).await else {
        return check(
            "quarantine",
            Status::Fail,
            "ATL_QUARANTINE is missing",
            Some("run `toolledger init`"),
        );
    };
    let state = match stream.info().await {
        Ok(info) => info.state.clone(),
        Err(error) => return check("quarantine", Status::Warn, format!("cannot read: {error}"), None),
    };
    if state.messages == 0 {
        return check("quarantine", Status::Ok, "nothing quarantined", None);
    }
    let time = |t| chrono::DateTime::<Utc>::from(std::time::SystemTime::from(t));
    let (first, last) = (time(state.first_timestamp), time(state.last_timestamp));
    let span_hours = (last - first).num_seconds().max(3600) as f64 / 3600.0;
    let per_hour = state.messages as f64 / span_hours;
    let newest = (Utc::now() - last).num_seconds().max(0);
    let detail = format!(
        "{} messages kept, about {per_hour:.0} per hour, the newest {newest}s ago",
        state.messages
    );
    if per_hour > QUARANTINE_PER_HOUR as f64 && newest < 3600 {
        check(
            "quarantine",
            Status::Warn,
            detail,
            Some("`toolledger quarantine list` shows the reasons; see docs/runbooks.md \"Quarantine spike\""),
        )
    } else {
        check("quarantine", Status::Ok, detail, None)
    }
}

fn projection_lag(
    config: &Config,
    partitions: Partitions,
    partition: Partition,
    ledger_last: Option<u64>,
) -> Check {
    let name = named("projection", partitions, partition);
    let generation = match toolledger_projector::Generations::of(&config.data_dir, partition).current() {
        Ok(Some(generation)) => generation,
        Ok(None) => {
            return check(
                &name,
                Status::Warn,
                "no projection in this data directory",
                Some("run `toolledger project` (or `toolledger up`)"),
            );
        }
        Err(error) => {
            return check(
                &name,
                Status::Fail,
                error.to_string(),
                Some("run `toolledger rebuild`"),
            );
        }
    };
    // Every page is read: a damaged page the services have not met yet is found here, before a
    // reader or the projector trips over it.
    let database = generation.database();
    let position = toolledger_projector::Store::open_readonly(&database).and_then(|store| {
        let problems = store.integrity_problems(5)?;
        Ok((store.position()?, problems))
    });
    let rebuild = "run `toolledger rebuild` (a new generation from the ledger; `toolledger project` and \
                   the query service switch to it by themselves), then `toolledger doctor` again";
    let position = match position {
        Ok((_, problems)) if !problems.is_empty() => {
            return check(
                &name,
                Status::Fail,
                format!(
                    "{} ({}) is damaged: {}",
                    generation.name(),
                    database.display(),
                    problems.join("; ")
                ),
                Some(rebuild),
            );
        }
        Ok((position, _)) => Ok(position),
        Err(error) => Err(error),
    };
    match (position, ledger_last) {
        (Err(error), _) => check(
            &name,
            Status::Fail,
            format!(
                "{} ({}) cannot be read: {}",
                generation.name(),
                database.display(),
                toolledger_core::telemetry::ErrorChain(&error)
            ),
            Some(rebuild),
        ),
        (Ok(position), Some(last)) if last > position + LAG_MESSAGES => check(
            &name,
            Status::Warn,
            format!("at seq {position} of {last}"),
            Some("is `toolledger project` running? a rebuild catches up from seq 1"),
        ),
        (Ok(position), last) => check(
            &name,
            Status::Ok,
            format!(
                "{} at seq {position}{}",
                generation.name(),
                last.map(|l| format!(" of {l}")).unwrap_or_default()
            ),
            None,
        ),
    }
}

/// Whether a projector is running on this data directory, from its heartbeat.
fn projector(config: &Config, partitions: Partitions, partition: Partition) -> Check {
    let name = named("projector", partitions, partition);
    let generations = toolledger_projector::Generations::of(&config.data_dir, partition);
    match toolledger_projector::Heartbeat::read(&generations) {
        Ok(Some(beat)) => match beat.verdict() {
            (true, detail) => check(&name, Status::Ok, detail, None),
            (false, detail) => check(
                &name,
                Status::Fail,
                detail,
                Some("start `toolledger project` (systemd: toolledger-project.service); see its log"),
            ),
        },
        Ok(None) => check(
            &name,
            Status::Warn,
            "no projector has run on this data directory (no heartbeat)",
            Some("run `toolledger project` (or `toolledger up`)"),
        ),
        Err(error) => check(&name, Status::Warn, error.to_string(), None),
    }
}

/// Whether the data directory is private to its owner: it holds projections, blobs, the identity
/// index, signing keys. New files are private whatever the umask; older ones may not be.
fn data_dir_mode(config: &Config) -> Check {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::metadata(&config.data_dir) {
        Ok(metadata) => metadata.permissions().mode() & 0o777,
        Err(error) => return check("permissions", Status::Warn, error.to_string(), None),
    };
    let detail = format!("{} is mode {mode:03o}", config.data_dir.display());
    if mode & 0o077 == 0 {
        check("permissions", Status::Ok, detail, None)
    } else {
        check(
            "permissions",
            Status::Warn,
            format!("{detail}: other users may read the ledger's data"),
            Some(&format!("chmod -R go-rwx {}", config.data_dir.display())),
        )
    }
}

fn disk(config: &Config) -> Check {
    let path = if config.data_dir.exists() {
        config.data_dir.clone()
    } else {
        std::path::PathBuf::from(".")
    };
    match toolledger_core::disk_space(&path) {
        Ok((free, total)) => {
            let detail = format!(
                "{} GiB free of {} GiB at {}",
                free >> 30,
                total >> 30,
                path.display()
            );
            if free < LOW_DISK_BYTES || free.saturating_mul(20) < total {
                check(
                    "disk",
                    Status::Warn,
                    detail,
                    Some("free space: nats-server stops accepting writes when its store is full"),
                )
            } else {
                check("disk", Status::Ok, detail, None)
            }
        }
        Err(error) => check("disk", Status::Warn, error.to_string(), None),
    }
}
