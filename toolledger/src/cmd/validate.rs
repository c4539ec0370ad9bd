//! `toolledger validate [FILE|-]`: check events offline with the validator ingest uses.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;

/// Flags of `toolledger validate`.
#[derive(clap::Args)]
pub struct Args {
    /// A JSON document, a JSON array of documents, or NDJSON; `-` or nothing reads standard input.
    /// Documents are structured CloudEvents or the spec's own agenttool-event envelopes.
    file: Option<PathBuf>,
    /// Print the report as JSON (every violation with its JSON Pointer, keyword and reason).
    #[arg(long)]
    json: bool,
}

/// Validates and prints the report; fails when any document is invalid.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let reader: Box<dyn Read> = match args.file.as_deref() {
        None => Box::new(std::io::stdin().lock()),
        Some(path) if path.as_os_str() == "-" => Box::new(std::io::stdin().lock()),
        Some(path) => {
            Box::new(std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?)
        }
    };
    let report = toolledger_schemas::validate_stream(reader).context("reading the documents")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    anyhow::ensure!(
        report.is_ok(),
        "{} of {} documents are invalid",
        report.invalid(),
        report.documents.len()
    );
    Ok(())
}
