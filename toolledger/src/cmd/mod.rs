//! One module per subcommand.

pub mod backup;
pub mod bench;
pub mod bundle;
pub mod demo_data;
pub mod doctor;
pub mod emit;
pub mod erase;
pub mod export;
pub mod import;
pub mod ingest;
pub mod init;
pub mod otlp;
pub mod project;
pub mod prove;
pub mod quarantine;
pub mod replay;
pub mod search;
pub mod serve;
pub mod session;
pub mod show;
pub mod sql;
pub mod stats;
pub mod up;
pub mod validate;
pub mod verify;
pub mod verify_bundle;
pub mod witness;

/// The partitions a command works on: those named (`--partition K`, each below the ledger's count),
/// else every partition of the ledger (`ledger.partitions`), p0 first.
pub fn chosen_partitions(
    config: &toolledger_core::config::Config,
    named: &[u16],
) -> anyhow::Result<Vec<toolledger_wire::partition::Partition>> {
    use toolledger_wire::partition::{Partition, Partitions};
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    if named.is_empty() {
        return Ok(partitions.all().collect());
    }
    let mut chosen = Vec::new();
    for &index in named {
        anyhow::ensure!(
            index < partitions.count(),
            "--partition {index}: the ledger has {} partition(s) (ledger.partitions)",
            partitions.count()
        );
        if !chosen.contains(&Partition::new(index)) {
            chosen.push(Partition::new(index));
        }
    }
    chosen.sort_by_key(|p: &Partition| p.index());
    Ok(chosen)
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM, whichever comes first. The handlers are installed when
/// this is called, not when the future is first polled, so a signal right after start is not lost
/// to the default action. Must be called inside the runtime.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let interrupt = signal(SignalKind::interrupt()).ok();
    let terminate = signal(SignalKind::terminate()).ok();
    async move {
        let wait = |signal: Option<tokio::signal::unix::Signal>| async move {
            match signal {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(interrupt) => {},
            () = wait(terminate) => {},
        }
    }
}
