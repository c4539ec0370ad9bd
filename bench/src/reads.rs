//! The projection at size: a ledger of `scale.reads_entries` distinct entries (1M in the committed
//! report) rebuilt and exported beside their baselines, the projection's bytes per entry, and the
//! API's reads over it — reconstruct one invocation, the session listing (plain and filtered by
//! tool and status, as the web view filters it), a tool/status-filtered invocation list — first
//! with nothing else running, then while the projector applies new entries appended at ingest's
//! rate.
//!
//! ```text
//! ledger of N entries ─▶ rebuild ×runs (kept: the last projection) ─▶ export ×runs
//!   ─▶ serve over the projection ─▶ per run: reads idle; reads while appending R entries/s for S s
//!      with the projector applying them (its catch-up rate measured)
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use rand::seq::IndexedRandom as _;
use rand::{Rng as _, SeedableRng as _};
use toolledger_core::telemetry::Telemetry;
use toolledger_ingest::append::PendingEntry;
use toolledger_query::ApiOptions;

use crate::Options;
use crate::offline::{ExportRuns, Ledger, RebuildRuns, measure_export, measure_rebuild};
use crate::report::{Better, Bound, Figure, Section, TargetCheck, percentile};
use crate::workload;

/// Requests of each kind in one idle phase of one run.
const REQUESTS: usize = 200;

/// Untimed requests of each kind before the first run.
const WARM_UP: usize = 20;

/// While the projector applies, one read every this often (the kinds in turn): a steady reader,
/// not a flood competing with the projector for the two cores.
const READ_EVERY: Duration = Duration::from_millis(10);

/// The kinds of read, as (figure id, title, acceptance bound in ms).
const KINDS: [(&str, &str, f64); 4] = [
    (
        "reconstruct",
        "reconstruct one invocation (`GET /v1/invocations/{id}`)",
        2.0,
    ),
    (
        "sessions",
        "session listing (`GET /v1/sessions?tenant=…&limit=50`)",
        20.0,
    ),
    (
        "sessions_filtered",
        "session listing filtered by tool and status (`…&tool_id=…&status=…`)",
        20.0,
    ),
    (
        "invocations_filtered",
        "invocation list filtered by tool and status (`GET /v1/invocations?tenant=…&tool_id=…&status=…&limit=50`)",
        20.0,
    ),
];

/// The reads suite (see the module's documentation).
pub async fn reads(options: &Options) -> anyhow::Result<Section> {
    let n = options.scale.reads_entries;
    let per_run = usize::try_from(options.scale.reads_apply_rate * options.scale.reads_apply_secs)?;
    let started = Instant::now();
    let mut entries = workload::distinct_entries(n + per_run * options.runs, 7)?;
    let fresh = entries.split_off(n);
    eprintln!(
        "bench: reads: {} distinct entries generated in {:.0} s",
        n + fresh.len(),
        started.elapsed().as_secs_f64()
    );
    let mut ledger = Ledger::load(options, entries).await?;
    // Described now: the reads below append more entries.
    let described = ledger.describe();
    let rebuilt = measure_rebuild(options, &ledger, "reads").await?;
    let exported = measure_export(options, &ledger, "reads").await?;

    let data = rebuilt.data.path().to_owned();
    let generation = toolledger_projector::Generations::new(&data)
        .current()?
        .context("the rebuild left no current generation")?;
    let database = generation.database();
    let (probes, by_table) =
        tokio::task::block_in_place(|| anyhow::Ok((Probes::sample(&database)?, table_bytes(&database)?)))?;
    if let Some(keep) = std::env::var_os("TOOLLEDGER_BENCH_KEEP_PROJECTION") {
        // For looking at query plans at size afterwards: the rebuilt generation's files.
        std::fs::create_dir_all(&keep)?;
        for file in std::fs::read_dir(&generation.dir)? {
            let file = file?;
            std::fs::copy(file.path(), std::path::Path::new(&keep).join(file.file_name()))?;
        }
    }
    let (stop_serving, serving) = tokio::sync::oneshot::channel::<()>();
    let (addr, served) = toolledger_query::serve(
        &data,
        ApiOptions::insecure_local("127.0.0.1:0".parse()?),
        Telemetry::new(),
        async move {
            let _ = serving.await;
        },
    )
    .await?;

    let probes = Arc::new(probes);
    let mut idle: Vec<Latencies> = KINDS.iter().map(|_| Latencies::default()).collect();
    let mut busy: Vec<Latencies> = KINDS.iter().map(|_| Latencies::default()).collect();
    let (mut offered, mut applied) = (Vec::new(), Vec::new());
    let mut rng = rand::rngs::StdRng::seed_from_u64(25);
    // Connections, statements and pages warmed before the first timed read.
    for kind in 0..KINDS.len() {
        let mut warm = Latencies::default();
        warm.run(addr, &probes, kind, WARM_UP, &mut rng).await?;
    }
    for (run, fresh) in fresh.chunks(per_run.max(1)).take(options.runs).enumerate() {
        for (kind, latencies) in idle.iter_mut().enumerate() {
            latencies.run(addr, &probes, kind, REQUESTS, &mut rng).await?;
            latencies.close()?;
        }
        let phase = under_apply(options, &mut ledger, &data, fresh, addr, &probes, run as u64).await?;
        offered.push(phase.offered);
        applied.push(phase.applied);
        for (latencies, read) in busy.iter_mut().zip(phase.reads) {
            latencies.samples = read.samples;
            latencies.close()?;
        }
        eprintln!(
            "bench: reads run {}/{}: idle p99 {}; while applying (appended at {:.0}/s, applied at {:.0}/s) p99 {}",
            run + 1,
            options.runs,
            p99s(&idle),
            phase.offered,
            phase.applied,
            p99s(&busy)
        );
    }
    let _ = stop_serving.send(());
    served.await?;

    let mut section = section(
        options, &ledger, &described, &rebuilt, &exported, &idle, &busy, offered, applied,
    )?;
    let total: u64 = by_table.iter().map(|(_, bytes)| bytes).sum();
    let per_entry = |bytes: u64| bytes as f64 / ledger.len().max(1) as f64;
    section.notes.push(format!(
        "Where the projection's bytes go (SQLite's `dbstat`, the last rebuild's database without its WAL; \
         each table with its indexes, bytes per entry): {} of {:.0} in all.",
        by_table
            .iter()
            .take(8)
            .map(|(table, bytes)| format!("`{table}` {:.0}", per_entry(*bytes)))
            .collect::<Vec<_>>()
            .join(", "),
        per_entry(total)
    ));
    Ok(section)
}

/// Bytes of each table of `database` with its indexes (pages in use, SQLite's `dbstat`), largest
/// first.
fn table_bytes(database: &std::path::Path) -> anyhow::Result<Vec<(String, u64)>> {
    let conn = rusqlite::Connection::open_with_flags(database, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut rows = conn
        .prepare(
            "SELECT m.tbl_name, SUM(d.pgsize) FROM dbstat d JOIN sqlite_master m ON m.name = d.name \
             GROUP BY m.tbl_name ORDER BY 2 DESC",
        )?
        .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows
        .drain(..)
        .map(|(table, bytes)| (table, u64::try_from(bytes).unwrap_or_default()))
        .collect())
}

/// What one phase of appends beside the projector measured.
struct Phase {
    /// Entries/s appended, from the start of pacing to the checkpoint signed after the last append.
    offered: f64,
    /// Entries/s applied, from the start of pacing to the projection's position reaching the last
    /// appended entry.
    applied: f64,
    /// Each kind's read latencies in this phase (samples only).
    reads: Vec<Latencies>,
}

/// Appends `fresh` at the suite's rate while the projector (started on `data`, resuming from the
/// projection) applies them and a reader task of its own reads the kinds in turn, one read every
/// [`READ_EVERY`], until the projector has caught up.
async fn under_apply(
    options: &Options,
    ledger: &mut Ledger,
    data: &std::path::Path,
    fresh: &[PendingEntry],
    addr: SocketAddr,
    probes: &Arc<Probes>,
    run: u64,
) -> anyhow::Result<Phase> {
    let target = ledger.loader.appended + fresh.len() as u64;
    let database = toolledger_projector::Generations::new(data)
        .current()?
        .context("no current generation")?
        .database();
    let client = async_nats::connect(ledger.server.url()).await?;
    let (stop_projector, stopping) = tokio::sync::oneshot::channel::<()>();
    let projector_options = toolledger_projector::Options::new(data.to_owned());
    let mut projector = tokio::spawn(async move {
        toolledger_projector::run(client, &projector_options, async move {
            let _ = stopping.await;
        })
        .await
    });

    // The reader is a task of its own, so the appender's work never runs inside a read's timing.
    let done = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn({
        let (done, probes) = (done.clone(), probes.clone());
        async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(1_000 + run);
            let mut reads: Vec<Latencies> = KINDS.iter().map(|_| Latencies::default()).collect();
            let (mut kind, mut next) = (0, Instant::now());
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep_until(next.into()).await;
                reads[kind].run(addr, &probes, kind, 1, &mut rng).await?;
                // At most one read every READ_EVERY: a slow read is not followed by a catch-up burst.
                next = (next + READ_EVERY).max(Instant::now());
                kind = (kind + 1) % KINDS.len();
            }
            anyhow::Ok(reads)
        }
    });

    let rate = options.scale.reads_apply_rate as f64;
    let started = Instant::now();
    let caught_up = async {
        for (i, chunk) in fresh.chunks(1_000).enumerate() {
            // A chunk is due once the offered rate has produced it.
            let due = started + Duration::from_secs_f64(((i + 1) * 1_000) as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
            ledger.loader.append(chunk).await?;
        }
        ledger.loader.finish().await?;
        let offered = fresh.len() as f64 / started.elapsed().as_secs_f64();
        // Caught up: the projection's position reaches the last appended entry.
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let at = tokio::task::block_in_place(|| position(&database))?;
            if at >= target {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the projector did not catch up in 300 s");
            tokio::select! {
                ended = &mut projector => anyhow::bail!("the projector stopped at {at} of {target}: {ended:?}"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        anyhow::Ok((offered, fresh.len() as f64 / started.elapsed().as_secs_f64()))
    }
    .await;
    done.store(true, Ordering::Relaxed);
    let _ = stop_projector.send(());
    // The phase's own failure first (the projector's, the appender's), then the reader's.
    let reads = reader.await;
    let (offered, applied) = caught_up?;
    projector.await??;
    let reads = reads??;
    Ok(Phase {
        offered,
        applied,
        reads,
    })
}

/// Why a read misses its bound while the projector applies (see the section's figures).
const READS_MISS: &str = "the same reads idle are within their bounds (compare the idle figures): \
    while the fresh entries are appended the two cores are shared by nats-server storing and delivering \
    them, the appender (publish, tiles, checkpoint signatures), the projector and the reader, and the \
    projector alone is behind the offered rate the whole phase (its catch-up rate is about a third of \
    the appended rate; its apply alone in follow mode onto a 1M-entry projection, with nothing else \
    running, is about 20k entries/s: `APPLY_ONTO=<gen dir> apply_bench 600 2`), so a read's tail is \
    mostly the wait for a core, not its own work (the p50 about doubles, the p99 grows several times). What would close it: a \
    projector apply cheap enough to keep up with ingest on its share of the machine, or reads served \
    from cores the writers do not share";

/// Why the filtered session listing misses its bound (see the section's figures).
const SESSIONS_FILTERED_MISS: &str = "a session list filtered by tool and status walks the tenant's \
    sessions in order and asks the session's index (tenant, session, first_seq, tool, state) whether \
    one of its invocations matches, so a rare filter reads every session of the tenant before its page \
    is full: about 1,600 sessions at this size, about 7 ms idle (p99 about 15 ms), several times that \
    while the cores are shared with the projector and the appends (see the reconstruct \
    miss). What would close it: give each invocation its session's first seq and index (tenant, tool, \
    state, session first seq), so a filtered page reads only the matching sessions in order";

/// The projection's position (the last applied ledger seq).
fn position(database: &std::path::Path) -> anyhow::Result<u64> {
    let conn = rusqlite::Connection::open_with_flags(database, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let seq: i64 = conn.query_row("SELECT seq FROM position WHERE id = 0", [], |row| row.get(0))?;
    Ok(u64::try_from(seq)?)
}

/// What the reads ask for, drawn from the rebuilt projection.
struct Probes {
    /// (tenant, invocation id), a random sample.
    invocations: Vec<(String, String)>,
    /// (tenant, tool id, state), every combination present (rare ones as likely as common ones:
    /// a filter the web view offers is any of them).
    filters: Vec<(String, String, String)>,
}

impl Probes {
    fn sample(database: &std::path::Path) -> anyhow::Result<Self> {
        let conn =
            rusqlite::Connection::open_with_flags(database, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let invocations = conn
            .prepare("SELECT tenant, invocation_id FROM invocations ORDER BY random() LIMIT 1000")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        let filters = conn
            .prepare(
                "SELECT DISTINCT tenant, tool_id, state FROM invocations WHERE tool_id IS NOT NULL \
                 ORDER BY 1, 2, 3",
            )?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        anyhow::ensure!(
            !invocations.is_empty() && !filters.is_empty(),
            "the projection holds no invocations to read"
        );
        Ok(Self { invocations, filters })
    }

    /// A path of `kind` ([`KINDS`]), drawn at random.
    fn path(&self, kind: usize, rng: &mut rand::rngs::StdRng) -> String {
        let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
        let (tenant, tool, state) = self
            .filters
            .choose(rng)
            .unwrap_or_else(|| unreachable!("not empty"));
        match KINDS[kind].0 {
            "reconstruct" => {
                let (tenant, id) = self
                    .invocations
                    .choose(rng)
                    .unwrap_or_else(|| unreachable!("not empty"));
                format!("/v1/invocations/{}?tenant={}", enc(id), enc(tenant))
            }
            "sessions" => {
                let tenant = workload::TENANTS[rng.random_range(0..workload::TENANTS.len())];
                format!("/v1/sessions?tenant={tenant}&limit=50")
            }
            "sessions_filtered" => format!(
                "/v1/sessions?tenant={}&tool_id={}&status={}&limit=50",
                enc(tenant),
                enc(tool),
                enc(state)
            ),
            _ => format!(
                "/v1/invocations?tenant={}&tool_id={}&status={}&limit=50",
                enc(tenant),
                enc(tool),
                enc(state)
            ),
        }
    }
}

/// One kind's latencies: each run's p50 and p99 in ms.
#[derive(Default)]
struct Latencies {
    p50: Vec<f64>,
    p99: Vec<f64>,
    /// The current run's samples (ms), summarized into `p50`/`p99` when the run ends.
    samples: Vec<f64>,
}

impl Latencies {
    /// `count` reads of `kind`, one after another, each on a new connection; their samples
    /// accumulate until [`Latencies::close`].
    async fn run(
        &mut self,
        addr: SocketAddr,
        probes: &Probes,
        kind: usize,
        count: usize,
        rng: &mut rand::rngs::StdRng,
    ) -> anyhow::Result<()> {
        for _ in 0..count {
            let path = probes.path(kind, rng);
            let started = Instant::now();
            let status = crate::pipeline::http_get_status(&addr.to_string(), &path).await?;
            self.samples.push(started.elapsed().as_secs_f64() * 1e3);
            anyhow::ensure!(status == 200, "GET {path}: {status}");
        }
        Ok(())
    }

    /// Ends a run: its samples become one p50 and one p99 (a run without samples is an error, not
    /// a figure one run short).
    fn close(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.samples.is_empty(), "a run without a read of some kind");
        self.p50.push(percentile(&mut self.samples, 0.50));
        self.p99.push(percentile(&mut self.samples, 0.99));
        self.samples.clear();
        Ok(())
    }
}

fn p99s(latencies: &[Latencies]) -> String {
    KINDS
        .iter()
        .zip(latencies)
        .map(|((id, ..), l)| format!("{id} {:.1} ms", l.p99.last().copied().unwrap_or(f64::NAN)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[allow(clippy::too_many_arguments)]
fn section(
    options: &Options,
    ledger: &Ledger,
    described: &str,
    rebuilt: &RebuildRuns,
    exported: &ExportRuns,
    idle: &[Latencies],
    busy: &[Latencies],
    offered: Vec<f64>,
    applied: Vec<f64>,
) -> anyhow::Result<Section> {
    let size = crate::bulk::count(ledger.len() as u64);
    let scale = &options.scale;
    let mut section = Section::new(
        "reads",
        &format!("The projection at size: rebuild, export and reads in a {size} ledger"),
        format!(
            "{} (distinct generator seeds: an id repeats only where two seeds' 32 random bits collide). \
             **rebuild**, **raw SQLite insert**, **export** and **raw arrow write** as in the rebuild and \
             export suites, at this size (the last rebuild's projection is the one read below). \
             **reads**: `toolledger_query::serve` in this process over that projection (no tokens, \
             loopback), each request on a new connection, {WARM_UP} untimed of each kind first, then per run \
             {REQUESTS} of each kind one after another with nothing else running (**idle**); then {} fresh \
             entries paced at {} entries/s (about ingest's rate in the ingest suite; batches of 1,000 with \
             checkpoints) while `toolledger_projector::run` applies them (resuming from the projection), \
             and a reader task reads at most every {} ms, the kinds in turn, until the projector has caught up \
             (**while applying**). The fresh entries stay: the projection grows by them run by run (run r \
             reads it at {} + (r − 1) × {} entries idle). What is read is drawn at random: an invocation \
             from a sample of 1,000, a tenant, and a (tenant, tool, status) filter from every combination \
             the projection holds, rare ones as likely as common ones. **appended**: the fresh entries \
             over the time from the start of pacing to the checkpoint after the last append (below the paced rate when \
             the appender falls behind); **projector catch-up rate**: the same entries over the time from \
             the start of pacing to the projection's position reaching the last of them.",
            described,
            scale.reads_apply_rate * scale.reads_apply_secs,
            scale.reads_apply_rate,
            READ_EVERY.as_millis(),
            ledger.len(),
            scale.reads_apply_rate * scale.reads_apply_secs,
        ),
    );
    let mut rate = |id: &str, title: &str, runs: &[f64]| {
        section.figure(Figure::new(id, title, "entries/s", Better::Higher, runs.to_vec()))
    };
    let rebuild = rate("reads.rebuild", "rebuild", &rebuilt.rebuild);
    let raw_insert = rate("reads.raw_insert", "raw SQLite insert", &rebuilt.raw);
    rate(
        "reads.apply_only",
        "projector apply alone (no NATS)",
        &rebuilt.apply,
    );
    let export = rate("reads.export", "export", &exported.export);
    let raw_write = rate("reads.raw_write", "raw arrow write", &exported.raw);
    rate("reads.nats_read", "NATS read alone", &rebuilt.read);
    section.figure(Figure::new(
        "reads.projection_bytes",
        "projection bytes per entry (database and WAL, after each rebuild)",
        "bytes/entry",
        Better::Lower,
        rebuilt
            .db_bytes
            .iter()
            .map(|bytes| *bytes as f64 / ledger.len().max(1) as f64)
            .collect(),
    ));
    section.compare("reads_rebuild_vs_raw_insert", &rebuild, &raw_insert);
    section.compare("reads_export_vs_raw_write", &export, &raw_write);
    section.figure(Figure::new(
        "reads.offered",
        "fresh entries appended while read (achieved rate)",
        "entries/s",
        Better::Higher,
        offered,
    ));
    section.figure(Figure::new(
        "reads.applied",
        "projector catch-up rate while read",
        "entries/s",
        Better::Higher,
        applied,
    ));
    for (phase, latencies) in [("idle", idle), ("applying", busy)] {
        for ((id, title, bound), latency) in KINDS.iter().zip(latencies) {
            let when = if phase == "idle" { "idle" } else { "while applying" };
            section.figure(Figure::new(
                &format!("reads.{id}_{phase}_p50"),
                &format!("{title} p50, {when}"),
                "ms",
                Better::Lower,
                latency.p50.clone(),
            ));
            let p99 = section.figure(Figure::new(
                &format!("reads.{id}_{phase}_p99"),
                &format!("{title} p99, {when}"),
                "ms",
                Better::Lower,
                latency.p99.clone(),
            ));
            if phase == "applying" {
                let why = if *id == "sessions_filtered" {
                    SESSIONS_FILTERED_MISS
                } else {
                    READS_MISS
                };
                section.targets.push(
                    TargetCheck::new(
                        &format!("{id} p99 ≤ {bound} ms in a {size} ledger while the projector applies"),
                        &p99.id,
                        p99.median,
                        "ms",
                        Bound::AtMost,
                        *bound,
                    )
                    .explain_miss(why),
                );
            }
        }
    }
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_summarized_when_closed_and_an_empty_one_is_an_error() {
        let mut latencies = Latencies::default();
        latencies.samples.extend([3.0, 1.0, 2.0]);
        latencies.close().unwrap();
        assert!(latencies.close().is_err());
        assert_eq!(latencies.p50, [2.0]);
        assert_eq!(latencies.p99, [3.0]);
    }
}
