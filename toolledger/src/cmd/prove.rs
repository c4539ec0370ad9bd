//! `toolledger prove`: an inclusion proof for one entry, or a consistency proof between two tree
//! sizes, as JSON on stdout that verifies offline with the verifier key alone.
//!
//! ```text
//! --seq N [--checkpoint-size S]   ─▶ toolledger_verify::prove_inclusion   ─▶ JSON
//! --from-size A --to-size B       ─▶ toolledger_verify::prove_consistency ─▶ JSON
//! of: the ledger (p0) │ --partition K │ --tenant T (its partition) │ --directory (docs/scaling.md)
//! ```

use std::path::PathBuf;

use anyhow::Context;

use toolledger_core::config::Config;
use toolledger_verify::{ProveSource, prove_consistency, prove_inclusion};
use toolledger_wire::directory;
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::CHECKPOINTS;

use super::init::{connect, nats_url};
use super::verify::{load_verifiers, tile_store, tiles_at};

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
    /// The ledger stream (a copy, say), as p0 or as the partition --partition names.
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// A partition of a partitioned ledger (0 is `ATL_LEDGER`): its stream, origin and tiles.
    #[arg(long, value_name = "K", conflicts_with_all = ["tenant", "directory"])]
    pub partition: Option<u16>,
    /// The partition this tenant's events are in, by the ledger's partition rule.
    #[arg(long, value_name = "TENANT", conflicts_with = "directory")]
    pub tenant: Option<String>,
    /// The directory over a partitioned ledger's partitions: an entry of it (--seq) in its signed
    /// tree, or two of its sizes.
    #[arg(long, conflicts_with = "stream")]
    pub directory: bool,
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

/// The partition a command works in: the tenant's (by the partition rule), else the one named
/// (`--partition K`, below the ledger's count), else p0.
pub(crate) fn partition_of(
    config: &Config,
    tenant: Option<&str>,
    named: Option<u16>,
) -> anyhow::Result<Partition> {
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    let chosen = match named {
        Some(index) => super::chosen_partitions(config, &[index])?[0],
        None => Partition::ZERO,
    };
    match tenant {
        Some(tenant) => {
            let home = partitions.of(tenant);
            anyhow::ensure!(
                named.is_none() || chosen == home,
                "tenant {tenant:?} lives in partition {home}, not {chosen}"
            );
            Ok(home)
        }
        None => Ok(chosen),
    }
}

/// A partition's log: its stream, its checkpoints' origin and its tiles (`--tiles` for p0, or the
/// base the partitions' tiles are under; else the configured ones).
pub(crate) fn partition_log(
    config: &Config,
    partition: Partition,
    tiles_flag: Option<&str>,
) -> anyhow::Result<(String, String, Option<toolledger_merkle::TileStore>)> {
    let tiles = match partition {
        Partition::ZERO => tile_store(config, tiles_flag, false)?,
        _ => {
            let base = tiles_flag.map_or_else(|| config.tiles_location(), str::to_owned);
            tiles_at(&partition.tiles(&base), tiles_flag.is_some())?
        }
    };
    Ok((partition.stream(), partition.origin(&config.ledger.origin), tiles))
}

/// The directory's log over a partitioned ledger: its stream, its checkpoints' origin and its tiles
/// (under `--tiles` or the configured ones); refused for a ledger of one partition.
pub(crate) fn directory_log(
    config: &Config,
    tiles_flag: Option<&str>,
) -> anyhow::Result<(String, String, Option<toolledger_merkle::TileStore>)> {
    anyhow::ensure!(
        config.ledger.partitions > 1,
        "a ledger of one partition has no directory (ledger.partitions; docs/scaling.md)"
    );
    let base = tiles_flag.map_or_else(|| config.tiles_location(), str::to_owned);
    Ok((
        directory::STREAM.to_owned(),
        directory::origin(&config.ledger.origin),
        tiles_at(&directory::tiles(&base), tiles_flag.is_some())?,
    ))
}

/// Produces the proof and prints it.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let verifiers = load_verifiers(&config, args.key.as_deref())?;
    // The log proved in: its stream, its checkpoints' origin, its tiles.
    let (stream, origin, tiles) = if args.directory {
        directory_log(&config, args.tiles.as_deref()).context("--directory")?
    } else {
        let partition = partition_of(&config, args.tenant.as_deref(), args.partition)?;
        let (stream, origin, tiles) = partition_log(&config, partition, args.tiles.as_deref())?;
        (args.stream.clone().unwrap_or(stream), origin, tiles)
    };
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-prove").await?);
    // Routing by the rule needs the ledger's own count, not a lower one.
    super::verify::check_count(&js, &args.checkpoints, &config).await?;
    let source = ProveSource::new(stream, args.checkpoints, verifiers, origin, tiles);
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
