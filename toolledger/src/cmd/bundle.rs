//! `toolledger bundle`: an evidence bundle (`docs/evidence-bundles.md`) of one invocation's or one
//! session's entries, or of chosen ledger sequences, written to a file that verifies offline with
//! `toolledger verify-bundle` and the verifier key alone.
//!
//! ```text
//! --invocation ID | --session ID, --tenant T ─▶ SQLite projection (current generation): their seqs
//! --seq N…                                   ─▶ those seqs, no claim about them
//!   ─▶ toolledger_verify::bundle::build_bundle (newest checkpoint, proofs, blobs with --with-payloads,
//!      consistency from --since-checkpoint) ─▶ checked ─▶ --out FILE (written whole, then renamed)
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_projector::{Generations, Store};
use toolledger_verify::ProveSource;
use toolledger_verify::bundle::{BundleRequest, Selection, build_bundle};
use toolledger_wire::partition::Partition;
use toolledger_wire::streams::CHECKPOINTS;

use super::init::{connect, nats_url};
use super::verify::load_verifiers;

/// Flags of `toolledger bundle`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["invocation", "session", "seq"])))]
pub struct Args {
    /// Bundle the events of this invocation (needs --tenant).
    #[arg(long, value_name = "ID", requires = "tenant")]
    pub invocation: Option<String>,
    /// Bundle the events of this session (needs --tenant).
    #[arg(long, value_name = "ID", requires = "tenant")]
    pub session: Option<String>,
    /// Bundle the entries at these ledger sequences (repeat the flag), with no claim about them.
    #[arg(long, value_name = "N")]
    pub seq: Vec<u64>,
    /// The tenant of the invocation or session.
    #[arg(long, value_name = "T")]
    pub tenant: Option<String>,
    /// A signed checkpoint note you already hold: the bundle then proves the ledger only grew since.
    #[arg(long, value_name = "FILE")]
    pub since_checkpoint: Option<PathBuf>,
    /// Include the offloaded payload bytes (blob nonce and content; anyone holding the bundle can read
    /// them). Erased payloads are left out and reported.
    #[arg(long)]
    pub with_payloads: bool,
    /// The blob store to read payloads from (default `payloads.blob_store`, else `<data_dir>/blobs`).
    #[arg(long, value_name = "URL", requires = "with_payloads")]
    pub blobs: Option<String>,
    /// In a partitioned ledger: add the proof that the newest signed directory checkpoint commits
    /// to the bundle's checkpoint, so one signed directory checkpoint vouches for the bundle.
    #[arg(long)]
    pub with_directory: bool,
    /// Where to write the bundle.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The ledger stream (a copy, say), as p0 or as the partition --partition names.
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// The partition of a partitioned ledger the --seq entries are in (0 is `ATL_LEDGER`); with
    /// --tenant, the tenant's partition (by the ledger's partition rule) is taken.
    #[arg(long, value_name = "K")]
    pub partition: Option<u16>,
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
    /// Prove in the newest checkpoint enough of these witnesses cosigned (its cosignatures go in
    /// the bundle); without a policy, the newest checkpoint with the cosignatures it has.
    #[command(flatten)]
    pub witnesses: super::verify::WitnessPolicyArgs,
}

/// The seqs of an invocation's or session's events in the current projection of `partition`, and
/// its position.
fn projected_seqs(
    data_dir: &Path,
    partition: Partition,
    column: &'static str,
    tenant: &str,
    id: &str,
) -> anyhow::Result<(Vec<u64>, u64)> {
    let generation = Generations::of(data_dir, partition).current()?.with_context(|| {
        format!(
            "no projection under {}: run `toolledger project` or `toolledger rebuild` first",
            Generations::of(data_dir, partition).root().display()
        )
    })?;
    let store = Store::open_readonly(&generation.database())?;
    let sql = format!("SELECT seq FROM events WHERE tenant = ?1 AND {column} = ?2 ORDER BY seq");
    let mut statement = store.connection().prepare(&sql)?;
    let seqs = statement
        .query_map((tenant, id), |row| row.get::<_, i64>(0))?
        .map(|seq| Ok(u64::try_from(seq?)?))
        .collect::<anyhow::Result<Vec<u64>>>()?;
    Ok((seqs, store.position()?))
}

/// Builds, checks and writes the bundle.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let (selection, what) = match (&args.invocation, &args.session, &args.tenant) {
        (Some(id), None, Some(tenant)) => {
            (Selection::invocation(tenant, id), ("invocation_id", "invocation"))
        }
        (None, Some(id), Some(tenant)) => (Selection::session(tenant, id), ("session_id", "session")),
        (None, None, _) if !args.seq.is_empty() => (Selection::entries(), ("", "entries")),
        _ => anyhow::bail!("pass one of --invocation ID or --session ID (with --tenant T), or --seq N"),
    };
    // A tenant's entries are in its partition: its projection, its log.
    let partition = super::prove::partition_of(&config, args.tenant.as_deref(), args.partition)?;
    let seqs = match (&selection.tenant, &selection.id) {
        (Some(tenant), Some(id)) => {
            let (data_dir, column, tenant, id) =
                (config.data_dir.clone(), what.0, tenant.clone(), id.clone());
            let (seqs, position) = tokio::task::spawn_blocking(move || {
                projected_seqs(&data_dir, partition, column, &tenant, &id)
            })
            .await??;
            anyhow::ensure!(
                !seqs.is_empty(),
                "the projection (at ledger seq {position}) has no events of {} {:?} of tenant {:?}",
                what.1,
                selection.id.as_deref().unwrap_or_default(),
                selection.tenant.as_deref().unwrap_or_default()
            );
            seqs
        }
        _ => args.seq.clone(),
    };
    let since_checkpoint = match &args.since_checkpoint {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the held checkpoint {}", path.display()))?,
        ),
        None => None,
    };
    let blobs = if args.with_payloads {
        let url = args.blobs.clone().unwrap_or_else(|| config.blob_store_url());
        Some(toolledger_ledger::BlobStore::open(&url)?)
    } else {
        None
    };
    let verifiers = load_verifiers(&config, args.key.as_deref())?;
    let (stream, origin, tiles) = super::prove::partition_log(&config, partition, args.tiles.as_deref())?;
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-bundle").await?);
    // Routing by the rule needs the ledger's own count, not a lower one.
    super::verify::check_count(&js, &args.checkpoints, &config).await?;
    let directory = if args.with_directory {
        let (stream, origin, tiles) =
            super::prove::directory_log(&config, args.tiles.as_deref()).context("--with-directory")?;
        Some(ProveSource::new(
            stream,
            args.checkpoints.clone(),
            verifiers.clone(),
            origin,
            tiles,
        ))
    } else {
        None
    };
    let source = ProveSource::new(
        args.stream.clone().unwrap_or(stream),
        args.checkpoints,
        verifiers,
        origin,
        tiles,
    );
    let request = BundleRequest {
        selection,
        seqs,
        since_checkpoint,
        blobs,
        // Every partition is witnessed, each under its own origin (docs/witnesses.md).
        witness_policy: args.witnesses.policy(Some(&config))?,
        directory,
    };
    let built = build_bundle(&js, &source, &request).await?;

    // Written whole under a temporary name and renamed, so a reader never sees half a bundle.
    let partial = args.out.with_extension("partial");
    std::fs::write(&partial, &built.bytes).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &args.out).with_context(|| format!("writing {}", args.out.display()))?;

    let report = &built.report;
    println!(
        "toolledger bundle: wrote {} ({} bytes): {} entries ({}), proved in the tree of size {} of {}",
        args.out.display(),
        built.bytes.len(),
        report.entries.len(),
        match (&request.selection.tenant, &request.selection.id) {
            (Some(tenant), Some(id)) => format!("{} {id} of tenant {tenant}", what.1),
            _ => "chosen by seq".to_owned(),
        },
        report.tree_size,
        report.origin
    );
    println!(
        "payloads: {} included, {} commitments only",
        report.payloads_checked(),
        report.payloads_not_included()
    );
    for left_out in &built.payloads_left_out {
        println!(
            "payload {} of seq {} left out: {}",
            left_out.blob_id, left_out.seq, left_out.reason
        );
    }
    if let Some(held) = &report.consistent_with {
        println!("consistent with the held checkpoint of size {}", held.size);
    }
    if let Some(witnesses) = &report.witnesses {
        println!("{}", super::verify_bundle::witnessed_line(witnesses));
    }
    if let Some(directory) = &report.directory {
        println!("{}", super::verify_bundle::directory_line(directory));
    }
    Ok(())
}
