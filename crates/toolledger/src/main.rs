//! `toolledger`: parses arguments and configuration, sets up tracing and the runtime, and hands over
//! to the library crates. Each subcommand lives in `cmd/`.

mod cmd;

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
    /// Write realistic generated sessions (all 27 event classes) as NDJSON, with the scenario's truth.
    DemoData(cmd::demo_data::Args),
    /// Follow ATL_LEDGER into the SQLite projections (<data_dir>/projections, current generation) from
    /// their stored position until Ctrl-C / SIGTERM. Needs --nats-url or nats.url.
    Project(cmd::project::Args),
    /// Build a new projection generation from ledger seq 1 and switch `current` to it; readers switch
    /// when they reopen. Needs --nats-url or nats.url.
    Rebuild(cmd::project::Args),
}

fn main() -> ExitCode {
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
            Command::Ingest(args) => cmd::ingest::run(config, args, cmd::shutdown_signal()).await,
            Command::Quarantine(args) => cmd::quarantine::run(config, args).await,
            Command::Validate(args) => cmd::validate::run(&args),
            Command::Verify(args) => cmd::verify::run(config, args).await,
            Command::Prove(args) => cmd::prove::run(config, args).await,
            Command::DemoData(args) => cmd::demo_data::run(&args),
            Command::Project(args) => cmd::project::run(config, args, cmd::shutdown_signal()).await,
            Command::Rebuild(args) => cmd::project::rebuild(config, args, cmd::shutdown_signal()).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("toolledger: {error:#}");
            ExitCode::FAILURE
        }
    }
}
