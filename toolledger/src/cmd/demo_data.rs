//! `toolledger demo-data`: realistic generated sessions as NDJSON, with the scenario script's truth.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use toolledger_schemas::generator::{GeneratorConfig, generate};

/// Flags of `toolledger demo-data`.
#[derive(clap::Args)]
pub struct Args {
    /// Seed for every random choice; the same seed gives the same events.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many sessions; each plays every scenario once and so covers all 27 event classes.
    #[arg(long, default_value_t = 1)]
    sessions: usize,
    /// Tenants to spread sessions over (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "acme")]
    tenants: Vec<String>,
    /// Plain extra invocations per session on top of the scenarios.
    #[arg(long, default_value_t = 0)]
    extra_invocations: usize,
    /// Plant one of each projection anomaly per tenant.
    #[arg(long)]
    anomalies: bool,
    /// Where the events go (NDJSON, structured CloudEvents); standard output when absent.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Where the truth goes (JSON): the intended final state of every invocation, decisions, inputs.
    #[arg(long)]
    truth: Option<PathBuf>,
}

/// Generates and writes the events and, if asked, the truth.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = GeneratorConfig {
        seed: args.seed,
        sessions: args.sessions,
        tenants: args.tenants.clone(),
        extra_invocations: args.extra_invocations,
        plant_anomalies: args.anomalies,
        ..GeneratorConfig::default()
    };
    let generated = generate(&config);
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    for event in &generated.events {
        serde_json::to_writer(&mut out, event)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    if let Some(path) = &args.truth {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(file), &generated.truth)?;
    }
    eprintln!(
        "demo-data: {} events in {} sessions (seed {})",
        generated.events.len(),
        args.sessions,
        args.seed
    );
    Ok(())
}
