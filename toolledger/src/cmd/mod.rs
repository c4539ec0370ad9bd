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
