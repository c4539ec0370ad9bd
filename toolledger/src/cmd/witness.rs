//! `toolledger witness`: a C2SP tlog witness for ledgers run by someone else (docs/witnesses.md).
//!
//! ```text
//! [witness] key_file ─ absent? make one named witness.name (0600) ─▶ print the verifier key
//! [witness] state_dir ─ lock, load the latest cosigned checkpoint of each [[witness.logs]] origin
//! bind [witness] listen (or --listen) ─▶ POST /add-checkpoint until Ctrl-C / SIGTERM
//! ```

use std::future::Future;
use std::net::SocketAddr;

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_merkle::{NoteVerifier, Verifiers};
use toolledger_witness::{KnownLog, Witness};

/// Flags of `toolledger witness`.
#[derive(clap::Args)]
pub struct Args {
    /// Listen here instead of `witness.listen`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
}

/// The configured logs with their parsed verifier keys.
fn known_logs(config: &Config) -> anyhow::Result<Vec<KnownLog>> {
    config
        .witness
        .logs
        .iter()
        .map(|log| {
            let keys = log
                .keys
                .iter()
                .map(|k| NoteVerifier::parse(k))
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("witness.logs: a key of {:?}", log.origin))?;
            Ok(KnownLog {
                origin: log.origin.clone(),
                verifiers: Verifiers::new(keys),
            })
        })
        .collect()
}

/// Serves until `shutdown` completes.
pub async fn run(
    config: Config,
    args: Args,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let logs = known_logs(&config)?;
    let key_file = config.witness_key_file();
    let (signer, created) =
        toolledger_witness::load_or_create_key(&key_file, config.witness.name.as_deref())?;
    if created {
        println!(
            "toolledger witness: made a cosigning key at {}",
            key_file.display()
        );
    }
    println!("toolledger witness: verifier key {}", signer.verifier());
    let witness = Witness::open(&config.witness_state_dir(), signer, logs)?;
    for log in &config.witness.logs {
        let size = witness.latest_size(&log.origin).await.unwrap_or_default();
        tracing::info!(origin = %log.origin, size, "witnessing log");
    }
    let listen = args.listen.unwrap_or(config.witness.listen);
    let (addr, task) = toolledger_witness::serve(witness, listen, shutdown).await?;
    println!(
        "toolledger witness: cosigning {} log(s) at http://{addr}/add-checkpoint",
        config.witness.logs.len()
    );
    task.await?;
    println!("toolledger witness: stopped");
    Ok(())
}
