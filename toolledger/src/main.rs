//! `toolledger`: parses arguments and configuration, sets up tracing and the runtime, and hands over
//! to the library crates. Each subcommand lives in `cmd/`.

mod cmd;

/// mimalloc instead of glibc's malloc: ingest's profile had malloc, free and glibc's chunk
/// consolidation at ~22 % of its CPU (events are parsed into many small strings and maps and freed a
/// batch later, on another thread), and glibc's per-thread arenas keep freed memory from being reused
/// across threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolledger_core::config::Config;

#[derive(Parser)]
#[command(
    name = "toolledger",
    version,
    about = "Tamper-evident ledger for AI-agent tool invocations"
)]
struct Cli {
    /// Configuration file (TOML); `TOOLLEDGER_CONFIG` names one too. `TOOLLEDGER_*` variables override it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every service on this machine, starting a local nats-server when no NATS URL is configured.
    Up(cmd::up::Args),
    /// Create the NATS contract (streams, the leases bucket, tenants' upload buckets) and the checkpoint
    /// signing key, or check live ones and fail when their configuration is weaker than required; prints
    /// the verifier key. Needs --nats-url or nats.url.
    Init(cmd::init::Args),
    /// Publish events from JSON/NDJSON files to atl.in.<tenant>.<class>, as a producer would, and
    /// report published, duplicate and failed events. Needs --nats-url or nats.url.
    Emit(cmd::emit::Args),
    /// Map native records (N-ACT, Open Tool Calling, Tool Protocol, MCP, function calling) to Agent Tool
    /// events keeping every native id, and publish them like `emit`; prints a per-record report. Exits 1
    /// when any record was rejected (the rest are still published). Needs --nats-url or nats.url unless
    /// --dry-run.
    Import(cmd::import::Args),
    /// Receive OpenTelemetry traces (OTLP over HTTP and gRPC) and record their tool-call spans
    /// (GenAI `execute_tool`, MCP `tools/call`, OpenInference `TOOL`) as Agent Tool events, publishing
    /// as each write token's tenant; docs/otlp.md. Needs [[otlp.tokens]] and --nats-url or nats.url.
    Otlp(cmd::otlp::Args),
    /// Append inbound events to the ledger as its single writer: validate, deduplicate, quarantine
    /// rejects with a receipt. Needs --nats-url or nats.url and streams made by `toolledger init`.
    Ingest(cmd::ingest::Args),
    /// List, show and redrive messages ingest refused.
    Quarantine(cmd::quarantine::Args),
    /// Check JSON/NDJSON events offline against the project's schemas, as ingest will; every violation
    /// is reported with its JSON Pointer. Exits non-zero when any document is invalid.
    Validate(cmd::validate::Args),
    /// Recompute the ledger's Merkle tree and check it against the signed checkpoints, the tiles and
    /// the live stream configurations; exits non-zero naming the first bad position.
    Verify(cmd::verify::Args),
    /// Print an inclusion proof (--seq) or a consistency proof (--from-size/--to-size) as JSON that
    /// verifies offline with the checkpoint verifier key.
    Prove(cmd::prove::Args),
    /// Write an evidence bundle of an invocation's or a session's entries (--tenant), or of chosen
    /// ledger seqs: entries, inclusion proofs, the signed checkpoint, optionally payload bytes and a
    /// consistency proof from a checkpoint you hold (docs/evidence-bundles.md). Needs --nats-url or nats.url.
    Bundle(cmd::bundle::Args),
    /// Check an evidence bundle offline with the verifier key alone; exit 1 naming what fails.
    VerifyBundle(cmd::verify_bundle::Args),
    /// Write realistic generated sessions (all 27 event classes) as NDJSON, with the scenario's truth.
    DemoData(cmd::demo_data::Args),
    /// Follow ATL_LEDGER into the SQLite projections (<data_dir>/projections, current generation) from
    /// their stored position until Ctrl-C / SIGTERM. Needs --nats-url or nats.url.
    Project(cmd::project::Args),
    /// Erase offloaded content (payload blobs) of an invocation, a session, some blobs or a tenant,
    /// with a reason, recorded in the ledger as toolledger.erasure.completed; or run retention once.
    /// The entries and their commitments stay, so `verify` still passes. Needs --nats-url or nats.url.
    Erase(cmd::erase::Args),
    /// Run one read-only SQL statement over a tenant's projection views (or every table with
    /// --admin): writes, ATTACH, PRAGMA, extensions and other tenants' rows are refused; time and row
    /// limits apply.
    Query(cmd::sql::Args),
    /// Replay a session's events in ledger order at their original pace (scaled by --speed) as
    /// NDJSON; --publish re-publishes them under atl.replay.<tenant>.> only. Needs --nats-url or nats.url.
    Replay(cmd::replay::Args),
    /// Write the ledger and its signed checkpoints to a directory of plain files (with a manifest of
    /// counts, SHA-256s and the Merkle root). Needs --nats-url or nats.url.
    Backup(cmd::backup::BackupArgs),
    /// Restore a backup into the empty streams of a fresh `toolledger init`, byte for byte and at the
    /// same sequences; then `verify` passes and `rebuild` makes the projections.
    Restore(cmd::backup::RestoreArgs),
    /// Check the deployment — NATS, the stream contract, ingest lag, checkpoint age, quarantine rate,
    /// projection lag, disk — and say what to do about each problem. Exits 1 when a check fails.
    Doctor(cmd::doctor::Args),
    /// Run the end-to-end benchmark suite (each figure beside a baseline measured in the same run) and
    /// write a Markdown + JSON report with the command and the machine; see docs/benchmarks/.
    Bench(cmd::bench::Args),
    /// Build a new projection generation from ledger seq 1 and switch `current` to it; readers switch
    /// when they reopen. Needs --nats-url or nats.url.
    Rebuild(cmd::project::Args),
    /// Follow ATL_LEDGER into the Parquet archive (export.prefix, else <data_dir>/parquet): events,
    /// invocations, permission decisions, results, checkpoints; a progress bar while catching up.
    /// Needs --nats-url or nats.url.
    Export(cmd::export::Args),
    /// Serve the /v1 query API (reconstruct, sessions, search, stats, tools) over the projections,
    /// with /healthz and /metrics. Needs [api] tokens, or --insecure-local on a loopback address.
    Serve(cmd::serve::Args),
    /// Reconstruct one invocation from the projection: timeline, inputs and mutations, permissions,
    /// hooks, results, error and retry guidance, payload checks. Exit 1 when not found.
    Show(cmd::show::Args),
    /// List sessions, or show one session's invocations and timeline. Exit 1 when nothing matched.
    Session(cmd::session::Args),
    /// Search invocations by tenant, session, tool, namespace, status, error class, permission
    /// behavior, actor, native id and time range. Exit 1 when nothing matched.
    Search(cmd::search::Args),
    /// Calls, outcome rates and latency p50/p95/p99 per tool and time bucket.
    Stats(cmd::stats::Args),
    /// Run a C2SP tlog witness: cosign checkpoints of the configured logs ([[witness.logs]]) that are
    /// consistent with the last one it cosigned; refuse forks and rollbacks (docs/witnesses.md).
    Witness(cmd::witness::Args),
}

fn main() -> ExitCode {
    // Before anything is written: every file of the ledger's data is private, whatever the umask.
    toolledger_core::restrict_new_files();
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("toolledger: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = toolledger_core::telemetry::init_tracing(&config.telemetry) {
        eprintln!("toolledger: {error}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("toolledger: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Up(args) => cmd::up::run(config, args, cmd::shutdown_signal()).await,
            Command::Init(args) => cmd::init::run(config, args).await,
            Command::Emit(args) => cmd::emit::run(config, args).await,
            Command::Import(args) => cmd::import::run(config, args).await,
            Command::Otlp(args) => cmd::otlp::run(config, args, cmd::shutdown_signal()).await,
            Command::Erase(args) => cmd::erase::run(config, args).await,
            Command::Query(args) => cmd::sql::run(config, args).await,
            Command::Replay(args) => cmd::replay::run(config, args).await,
            Command::Backup(args) => cmd::backup::run_backup(config, args).await,
            Command::Doctor(args) => cmd::doctor::run(config, args).await,
            Command::Bench(args) => cmd::bench::run(config, args).await,
            Command::Restore(args) => cmd::backup::run_restore(config, args).await,
            Command::Ingest(args) => cmd::ingest::run(config, args, cmd::shutdown_signal()).await,
            Command::Quarantine(args) => cmd::quarantine::run(config, args).await,
            Command::Validate(args) => cmd::validate::run(&args),
            Command::Verify(args) => cmd::verify::run(config, args).await,
            Command::Prove(args) => cmd::prove::run(config, args).await,
            Command::Bundle(args) => cmd::bundle::run(config, args).await,
            Command::VerifyBundle(args) => cmd::verify_bundle::run(args).await,
            Command::DemoData(args) => cmd::demo_data::run(&args),
            Command::Project(args) => cmd::project::run(config, args, cmd::shutdown_signal()).await,
            Command::Rebuild(args) => cmd::project::rebuild(config, args, cmd::shutdown_signal()).await,
            Command::Export(args) => cmd::export::run(config, args, cmd::shutdown_signal()).await,
            Command::Serve(args) => cmd::serve::run(config, args, cmd::shutdown_signal()).await,
            Command::Show(args) => cmd::show::run(config, args).await,
            Command::Session(args) => cmd::session::run(config, args).await,
            Command::Search(args) => cmd::search::run(config, args).await,
            Command::Stats(args) => cmd::stats::run(config, args).await,
            Command::Witness(args) => cmd::witness::run(config, args, cmd::shutdown_signal()).await,
        }
    });
    // The command has finished; a blocking task it left behind (an analyst's statement past its
    // interrupt, a stuck read) must not hold the process up: dropping the runtime would wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Query commands' exit codes: 1 not found, 2 usage, 3 projection unreadable (cmd/show.rs).
        Err(error) if error.downcast_ref::<cmd::show::QueryExit>().is_some() => {
            let code = error
                .downcast_ref::<cmd::show::QueryExit>()
                .map_or(1, |exit| exit.code);
            eprintln!("toolledger: {error}");
            ExitCode::from(code)
        }
        Err(error) => {
            eprintln!("toolledger: {error:#}");
            ExitCode::FAILURE
        }
    }
}
