//! `toolledger prove`: an inclusion proof for one entry, or a consistency proof between two tree
//! sizes, as JSON on stdout that verifies offline with the verifier key alone.
//!
//! ```text
//! --seq N [--checkpoint-size S]   ─▶ toolledger_verify::prove_inclusion   ─▶ JSON
//! --from-size A --to-size B       ─▶ toolledger_verify::prove_consistency ─▶ JSON
//! ```

use std::path::PathBuf;

use toolledger_core::config::Config;
use toolledger_verify::{ProveSource, prove_consistency, prove_inclusion};
use toolledger_wire::streams::{CHECKPOINTS, LEDGER};

use super::init::{connect, nats_url};
use super::verify::{load_verifiers, tile_store};

/// Flags of `toolledger prove`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["seq", "from_size"])))]
pub struct Args {
    /// Prove the entry at this ledger sequence is in a signed tree.
    #[arg(long, value_name = "N", conflicts_with_all = ["from_size", "to_size"])]
    pub seq: Option<u64>,
    /// The signed tree to prove it in (a checkpoint's size); default the newest.
    #[arg(long, value_name = "S", requires = "seq")]
    pub checkpoint_size: Option<u64>,
    /// Prove the tree of this size is a prefix of the tree of --to-size.
    #[arg(long, value_name = "A", requires = "to_size")]
    pub from_size: Option<u64>,
    /// A signed checkpoint's size.
    #[arg(long, value_name = "B", requires = "from_size")]
    pub to_size: Option<u64>,
    /// The ledger stream.
    #[arg(long, value_name = "NAME", default_value = LEDGER)]
    pub stream: String,
    /// The stream of signed checkpoints.
    #[arg(long, value_name = "NAME", default_value = CHECKPOINTS)]
    pub checkpoints: String,
    /// Verifier key file (default: the `.pub` beside `ledger.key_file`).
    #[arg(long, value_name = "PUBKEY_FILE")]
    pub key: Option<PathBuf>,
    /// Tiles to read proofs from (default `ledger.tiles` when it exists; else from the ledger).
    #[arg(long, value_name = "LOCATION")]
    pub tiles: Option<String>,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// Produces the proof and prints it.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let verifiers = load_verifiers(&config, args.key.as_deref())?;
    let tiles = tile_store(&config, args.tiles.as_deref(), false)?;
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-prove").await?);
    let source = ProveSource {
        ledger_stream: args.stream,
        checkpoint_stream: args.checkpoints,
        verifiers,
        origin: Some(config.ledger.origin.clone()),
        tiles,
        trusted: Default::default(),
    };
    let json = match (args.seq, args.from_size, args.to_size) {
        (Some(seq), _, _) => {
            serde_json::to_string_pretty(&prove_inclusion(&js, &source, seq, args.checkpoint_size).await?)?
        }
        (None, Some(from), Some(to)) => {
            serde_json::to_string_pretty(&prove_consistency(&js, &source, from, to).await?)?
        }
        _ => anyhow::bail!("pass --seq N, or --from-size A --to-size B"),
    };
    println!("{json}");
    Ok(())
}
