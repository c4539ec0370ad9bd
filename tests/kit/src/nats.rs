use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use toolledger_core::nats_server::{NatsServer, NatsServerSpec};

/// The workspace root (two levels above this crate's manifest).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The nats-server binary tests run: `TOOLLEDGER_NATS_SERVER`, else the pinned one in `.tools/`.
pub fn nats_server_bin() -> PathBuf {
    std::env::var_os("TOOLLEDGER_NATS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/nats/bin/nats-server"))
}

/// A real nats-server with JetStream for one test. Dropping it stops the server and deletes its store.
pub struct NatsFixture {
    // Declared before `dir` so the server stops before its store directory is removed.
    server: NatsServer,
    dir: TempDir,
}

impl NatsFixture {
    /// Starts a server on a free loopback port with a fresh store directory.
    ///
    /// Panics with the reason when the server cannot start: a fixture failing is a test failing.
    pub fn start() -> Self {
        Self::start_with_config(None)
    }

    /// Like [`NatsFixture::start`], with a server configuration file (accounts, encryption at rest).
    pub fn start_with_config(config_file: Option<PathBuf>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("toolledger-nats-")
            .tempdir()
            .expect("temp dir for nats");
        let spec = NatsServerSpec {
            bin: nats_server_bin(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
            store_dir: dir.path().join("jetstream"),
            log_file: Some(dir.path().join("nats-server.log")),
            config_file,
            pid_file: None,
        };
        let server = NatsServer::start(spec).unwrap_or_else(|e| panic!("nats fixture: {e}"));
        Self { server, dir }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The client port, the same across restarts.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// JetStream's store directory, the same across restarts.
    pub fn store_dir(&self) -> &Path {
        self.server.store_dir()
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    /// The server's process id.
    pub fn pid(&self) -> Option<u32> {
        self.server.pid()
    }

    /// Freezes the server (SIGSTOP): its connections stay open but nothing is answered. Call
    /// [`NatsFixture::resume`] before the fixture is dropped.
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.pid().expect("nats-server is running");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits i32"));
        nix::sys::signal::kill(pid, signal).unwrap_or_else(|e| panic!("nats fixture: {signal}: {e}"));
    }

    /// Stops the server gracefully and starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.server.stop();
        self.start_again();
    }

    /// Kills the server (SIGKILL) and starts it again on the same port and store.
    pub fn kill_and_restart(&mut self) {
        self.server.kill();
        self.start_again();
    }

    fn start_again(&mut self) {
        let spec = self.server.restart_spec();
        self.server = NatsServer::start(spec).unwrap_or_else(|e| panic!("nats fixture restart: {e}"));
    }

    /// A connected client.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url())
            .await
            .expect("connect to nats fixture")
    }

    /// A connected client that keeps reconnecting while the server is killed and restarted.
    pub async fn reconnecting_client(&self) -> async_nats::Client {
        async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(self.url())
            .await
            .expect("connect to nats fixture")
    }
}

/// The project virtualenv's Python, where `scripts/setup` installs the independent test clients.
/// Panics with the remedy when it is missing.
pub fn python() -> PathBuf {
    let python = workspace_root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup",
        python.display()
    );
    python
}
