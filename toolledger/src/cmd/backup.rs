//! `toolledger backup --out DIR` and `toolledger restore DIR`: the ledger and its signed checkpoints
//! as plain files, and back into a fresh NATS contract byte for byte (docs/runbooks.md, "Restore").
//!
//! ```text
//! backup:  ATL_CHECKPOINTS, ATL_COSIGNATURES (when there), ATL_LEDGER (then ATL_LEDGER_P<K>,
//!          ATL_DIRECTORY of a partitioned ledger) ─▶ DIR/<stream>.jsonl + DIR/manifest.json (last)
//! restore: DIR checked (SHA-256, sequences, Merkle root) ─▶ empty streams of `toolledger init` ─▶
//!          published with expected last sequences ─▶ then `toolledger verify`, `toolledger rebuild`
//! ```

use std::path::PathBuf;

use toolledger_core::config::Config;
use toolledger_verify::backup;
use toolledger_wire::directory;
use toolledger_wire::partition::Partitions;
use toolledger_wire::streams::{CHECKPOINTS, COSIGNATURES, LEDGER};

use super::init::{connect, nats_url};

/// Flags of `toolledger backup`.
#[derive(clap::Args)]
pub struct BackupArgs {
    /// The directory to write (created; must not hold a backup).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// NATS server URL; overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the two is required.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

/// Flags of `toolledger restore`.
#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A directory written by `toolledger backup`.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// NATS server URL of the fresh deployment (after `toolledger init`); overrides `nats.url`.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
}

fn progress() -> impl FnMut(&str, u64, u64) + Send {
    let mut last = std::time::Instant::now();
    move |stream: &str, done: u64, total: u64| {
        if done == total || last.elapsed() >= std::time::Duration::from_secs(2) {
            last = std::time::Instant::now();
            eprintln!("toolledger: {stream} {done}/{total}");
        }
    }
}

/// Writes the backup.
pub async fn run_backup(config: Config, args: BackupArgs) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-backup").await?);
    // A partitioned ledger: every partition's stream and the directory too (docs/scaling.md), so
    // the count must be the ledger's own.
    super::verify::check_count(&js, CHECKPOINTS, &config).await?;
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    if partitions.count() > 1 {
        toolledger_wire::streams::check_partition_count(&js, partitions)
            .await
            .map_err(|e| anyhow::anyhow!("ledger.partitions: {e}"))?;
    }
    // A deployment made before witnesses has no ATL_COSIGNATURES: nothing of it to back up.
    let cosignatures = match js.get_stream(COSIGNATURES).await {
        Ok(_) => Some(COSIGNATURES.to_owned()),
        Err(error)
            if matches!(error.kind(), async_nats::jetstream::context::GetStreamErrorKind::JetStream(inner)
                if inner.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND) =>
        {
            None
        }
        Err(error) => return Err(anyhow::Error::new(error).context(format!("opening {COSIGNATURES}"))),
    };
    let extra = backup::Extra {
        partitions: partitions.all().skip(1).map(|p| p.stream()).collect(),
        directory: (partitions.count() > 1).then(|| directory::STREAM.to_owned()),
        cosignatures,
    };
    let manifest = backup::backup(&js, LEDGER, CHECKPOINTS, &extra, &args.out, &mut progress()).await?;
    println!(
        "toolledger backup: {} ledger entries (root {}) and {} checkpoints in {}",
        manifest.ledger.messages,
        manifest.ledger_root,
        manifest.checkpoints.messages,
        args.out.display()
    );
    for partition in &manifest.partitions {
        println!(
            "toolledger backup: {} entries of {} (root {})",
            partition.stream.messages, partition.stream.stream, partition.root
        );
    }
    if let Some(directory) = &manifest.directory {
        println!(
            "toolledger backup: {} directory entries (as far as its checkpoints sign it)",
            directory.messages
        );
    }
    if let Some(cosignatures) = &manifest.cosignatures {
        println!(
            "toolledger backup: {} witness cosignatures",
            cosignatures.messages
        );
    }
    Ok(())
}

/// Restores a backup.
pub async fn run_restore(config: Config, args: RestoreArgs) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-restore").await?);
    let manifest = backup::restore(&js, &args.dir, LEDGER, CHECKPOINTS, &mut progress()).await?;
    println!(
        "toolledger restore: {} ledger entries (root {}) and {} checkpoints restored; run `toolledger verify`, then `toolledger rebuild`",
        manifest.ledger.messages, manifest.ledger_root, manifest.checkpoints.messages
    );
    for partition in &manifest.partitions {
        println!(
            "toolledger restore: {} entries of {} (root {})",
            partition.stream.messages, partition.stream.stream, partition.root
        );
    }
    if let Some(directory) = &manifest.directory {
        println!("toolledger restore: {} directory entries", directory.messages);
    }
    if let Some(cosignatures) = &manifest.cosignatures {
        println!(
            "toolledger restore: {} witness cosignatures",
            cosignatures.messages
        );
    }
    Ok(())
}
