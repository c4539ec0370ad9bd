//! `toolledger validate [FILE|-]`: check events offline with the validator ingest uses, and the id
//! grammar ingest applies before it (`toolledger_wire::id`): an id ingest would quarantine as `bad_id`
//! is reported refused, with the receipt's own detail.

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
    let report = toolledger_schemas::validate_stream_with(reader, bad_id).context("reading the documents")?;
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

/// Ingest's `bad_id` refusal of `document`, with the detail its quarantine receipt carries.
fn bad_id(document: &serde_json::Value) -> Option<toolledger_schemas::validate::Outcome> {
    let (pointer, problem) = toolledger_wire::id::first_bad_id_in_document(document)?;
    let error = toolledger_wire::Error::BadId { pointer, problem };
    Some(toolledger_schemas::validate::Outcome::Refused {
        reason: toolledger_wire::QuarantineReason::BadId.as_str().to_owned(),
        detail: error.quarantine_detail(),
    })
}
