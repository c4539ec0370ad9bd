//! `toolledger verify-bundle`: checks an evidence bundle offline, with the bundle file and the
//! verifier key alone (no NATS, no configuration needed).
//!
//! ```text
//! FILE + --key (key file or key string) + --witness policy
//!   ─▶ toolledger_verify::bundle::verify_bundle (blocking thread)
//!   ─▶ ok: summary (or --json report) ─▶ rejected: the reason, exit 1
//! ```

use std::path::PathBuf;

use anyhow::Context;
use toolledger_merkle::Verifiers;
use toolledger_verify::bundle::{BundleReport, verify_bundle};

/// Flags of `toolledger verify-bundle`.
#[derive(clap::Args)]
pub struct Args {
    /// The bundle file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The ledger's verifier key: a key file (`checkpoint.pub` from `toolledger init`; one key per
    /// line) or the key string `<name>+<key id>+<key>` itself.
    #[arg(long, value_name = "PUBKEY")]
    pub key: String,
    /// Print the verification report (or the rejection) as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The witness policy the bundle's checkpoint must meet (flags only: no configuration is read).
    #[command(flatten)]
    pub witnesses: super::verify::WitnessPolicyArgs,
}

fn load_keys(key: &str) -> anyhow::Result<Verifiers> {
    let path = std::path::Path::new(key);
    let text = if path.is_file() {
        std::fs::read_to_string(path).with_context(|| format!("reading verifier key file {key}"))?
    } else {
        key.to_owned()
    };
    let verifiers = Verifiers::parse(&text).context("parsing the verifier key (a file or a key string)")?;
    anyhow::ensure!(!verifiers.keys().is_empty(), "no verifier key in {key}");
    Ok(verifiers)
}

/// Verifies the bundle; an error (exit 1) naming the reason when it does not verify.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let verifiers = load_keys(&args.key)?;
    let policy = args.witnesses.policy(None)?;
    let file = args.file.clone();
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    // Hashing every entry and payload blob is CPU work: off the async workers.
    let result =
        tokio::task::spawn_blocking(move || verify_bundle(&bytes, &verifiers, policy.as_ref())).await?;
    match result {
        Ok(report) if args.json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({"ok": true, "report": report}))?
            );
            Ok(())
        }
        Ok(report) => {
            print_report(&args.file, &report);
            Ok(())
        }
        Err(error) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"ok": false, "error": error.to_string()})
                    )?
                );
            }
            Err(anyhow::Error::new(error).context(format!("{} does not verify", args.file.display())))
        }
    }
}

fn print_report(file: &std::path::Path, report: &BundleReport) {
    let selection = match (&report.selection.tenant, &report.selection.id) {
        (Some(tenant), Some(id)) => {
            let kind = serde_json::to_value(report.selection.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("{kind} {id} of tenant {tenant}")
        }
        _ => "entries chosen by seq".to_owned(),
    };
    println!(
        "toolledger verify-bundle: {} verifies: {} entries ({selection}) in the tree of size {} of {}, root {}, signed by {}",
        file.display(),
        report.entries.len(),
        report.tree_size,
        report.origin,
        report.root,
        report.signed_by.join(", ")
    );
    for entry in &report.entries {
        let checked = entry.payloads.iter().filter(|p| p.included).count();
        let payloads = if entry.payloads.is_empty() {
            String::new()
        } else {
            format!(
                "; payloads: {checked} carried and checked, {} commitment only",
                entry.payloads.len() - checked
            )
        };
        println!(
            "  seq {} {} {}{payloads}",
            entry.seq,
            entry.class.as_deref().unwrap_or("?"),
            entry.event_id.as_deref().unwrap_or("?"),
        );
    }
    if let Some(held) = &report.consistent_with {
        println!(
            "consistent with the held checkpoint of size {} (root {})",
            held.size, held.root
        );
    }
    if let Some(witnesses) = &report.witnesses {
        println!("{}", witnessed_line(witnesses));
    }
    if let Some(directory) = &report.directory {
        println!("{}", directory_line(directory));
    }
}

/// Which signed directory checkpoint commits to the bundle's.
pub fn directory_line(directory: &toolledger_verify::bundle::DirectoryReport) -> String {
    format!(
        "in the directory: entry {} of {} (tree of size {}, root {}) names partition p{} at size {}, \
         of which the bundle's tree is a prefix",
        directory.seq,
        directory.origin,
        directory.tree_size,
        directory.root,
        directory.partition,
        directory.partition_size
    )
}

/// Which witnesses cosigned the checkpoint, against the policy.
pub fn witnessed_line(verdict: &toolledger_merkle::WitnessVerdict) -> String {
    format!(
        "witnessed: cosigned by {} ({} of the policy's {}, quorum {})",
        verdict.names(),
        verdict.cosigned_by.len(),
        verdict.of,
        verdict.quorum
    )
}
