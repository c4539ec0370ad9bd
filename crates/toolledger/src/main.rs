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
    /// Create the NATS streams of the contract (ATL_INBOUND for now), or check live ones and fail when
    /// their configuration is weaker than required. Needs --nats-url or nats.url.
    Init(cmd::init::Args),
    /// Publish events from JSON/NDJSON files to atl.in.<tenant>.<class>, as a producer would, and
    /// report published, duplicate and failed events. Needs --nats-url or nats.url.
    Emit(cmd::emit::Args),
    /// Check JSON/NDJSON events offline against the project's schemas, as ingest will; every violation
    /// is reported with its JSON Pointer. Exits non-zero when any document is invalid.
    Validate(cmd::validate::Args),
    /// Write realistic generated sessions (all 27 event classes) as NDJSON, with the scenario's truth.
    DemoData(cmd::demo_data::Args),
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
            Command::Validate(args) => cmd::validate::run(&args),
            Command::DemoData(args) => cmd::demo_data::run(&args),
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
