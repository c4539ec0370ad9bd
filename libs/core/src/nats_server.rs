//! A managed local `nats-server` with JetStream, run as a child process.
//!
//! `toolledger up` runs one when no NATS URL is configured, and the test fixtures run one per test.
//! The server's log goes to a file (or is dropped); readiness is taken from the server's own
//! `Server is ready` line, and the client port from its `Listening for client connections` line, so
//! asking for a random port (`port: None`) is race-free.

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Error, Result};

/// How long a server may take to say it is ready (JetStream recovery of a large store takes time).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a graceful stop may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// What to run.
#[derive(Debug, Clone)]
pub struct NatsServerSpec {
    /// The nats-server binary.
    pub bin: PathBuf,
    /// The address to listen on for clients.
    pub host: IpAddr,
    /// The client port; `None` lets the server pick a free one.
    pub port: Option<u16>,
    /// JetStream's store directory.
    pub store_dir: PathBuf,
    /// Where the server's log goes; `None` drops it.
    pub log_file: Option<PathBuf>,
    /// A server configuration file (accounts, permissions, encryption at rest); flags above override it.
    pub config_file: Option<PathBuf>,
    /// Where the server writes its pid. A server still running from an earlier start with the same
    /// pid file (its starter was killed) is stopped before the new one starts, so a crashed
    /// `toolledger up` never leaves the port and the store taken.
    pub pid_file: Option<PathBuf>,
}

/// A running nats-server child process; killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    spec: NatsServerSpec,
    child: Option<Child>,
    port: u16,
    version: String,
}

impl NatsServer {
    /// Starts the server and waits until it is ready for clients.
    pub fn start(spec: NatsServerSpec) -> Result<Self> {
        std::fs::create_dir_all(&spec.store_dir).map_err(|source| Error::Io {
            context: format!("creating nats store directory {}", spec.store_dir.display()),
            source,
        })?;
        if let Some(pid_file) = &spec.pid_file {
            stop_stale_server(pid_file);
        }
        let mut command = Command::new(&spec.bin);
        if let Some(pid_file) = &spec.pid_file {
            command.arg("-P").arg(pid_file);
        }
        if let Some(config) = &spec.config_file {
            command.arg("-c").arg(config);
        }
        command
            .arg("-a")
            .arg(spec.host.to_string())
            .arg("-p")
            .arg(spec.port.map_or_else(|| "-1".to_owned(), |p| p.to_string()))
            .arg("-js")
            .arg("-sd")
            .arg(&spec.store_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| Error::NatsServer {
            bin: spec.bin.clone(),
            reason: format!("cannot start: {e} (run scripts/setup to install the pinned server)"),
        })?;
        let stderr = child.stderr.take().ok_or_else(|| Error::NatsServer {
            bin: spec.bin.clone(),
            reason: "no stderr pipe".to_owned(),
        })?;
        let (tx, rx) = mpsc::channel();
        let log = open_log(spec.log_file.as_deref())?;
        std::thread::Builder::new()
            .name("nats-server-log".to_owned())
            .spawn(move || pump_log(stderr, log, tx))
            .map_err(|source| Error::Io {
                context: "spawning log thread".to_owned(),
                source,
            })?;

        let mut server = Self {
            spec,
            child: Some(child),
            port: 0,
            version: String::new(),
        };
        server.wait_ready(&rx)?;
        Ok(server)
    }

    fn wait_ready(&mut self, rx: &mpsc::Receiver<LogEvent>) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut recent = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(LogEvent::Version(v)) => self.version = v,
                Ok(LogEvent::Port(p)) => self.port = p,
                Ok(LogEvent::Ready) if self.port != 0 => return Ok(()),
                Ok(LogEvent::Ready) => return Err(self.failure("ready without a client port", &recent)),
                Ok(LogEvent::Line(line)) => {
                    recent.push(line);
                    if recent.len() > 20 {
                        recent.remove(0);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(self.failure("did not become ready in time", &recent));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.as_mut().and_then(|c| c.wait().ok());
                    let why = status.map_or_else(|| "exited".to_owned(), |s| format!("exited with {s}"));
                    return Err(self.failure(&why, &recent));
                }
            }
        }
    }

    fn failure(&mut self, what: &str, recent: &[String]) -> Error {
        self.kill();
        Error::NatsServer {
            bin: self.spec.bin.clone(),
            reason: format!("{what}; last output:\n{}", recent.join("\n")),
        }
    }

    /// The client URL, `nats://host:port`.
    pub fn url(&self) -> String {
        format!("nats://{}:{}", self.spec.host, self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's version as it reported it at start.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The JetStream store directory.
    pub fn store_dir(&self) -> &Path {
        &self.spec.store_dir
    }

    /// The child's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The spec to start the same server again on the same port and store.
    pub fn restart_spec(&self) -> NatsServerSpec {
        NatsServerSpec {
            port: Some(self.port),
            ..self.spec.clone()
        }
    }

    /// Stops gracefully (SIGTERM), killing the server if it takes longer than 15 s.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // Pids always fit: they come from the kernel as i32.
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        if kill(pid, Signal::SIGTERM).is_err() {
            return child.wait().ok();
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    return child.wait().ok();
                }
            }
        }
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Stops the nats-server named by `pid_file` if one still runs: SIGTERM, then SIGKILL after 15 s.
pub fn stop_stale_server(pid_file: &Path) {
    let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        return;
    };
    let is_nats = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "nats-server")
    };
    if !is_nats(pid) {
        return;
    }
    tracing::warn!(pid, pid_file = %pid_file.display(), "stopping a nats-server left running by an earlier start");
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    let deadline = Instant::now() + STOP_TIMEOUT;
    while is_nats(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if is_nats(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        while is_nats(pid) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

enum LogEvent {
    Version(String),
    Port(u16),
    Ready,
    Line(String),
}

fn open_log(path: Option<&Path>) -> Result<Option<std::fs::File>> {
    let Some(path) = path else { return Ok(None) };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(Some)
        .map_err(|source| Error::Io {
            context: format!("opening {}", path.display()),
            source,
        })
}

/// Copies the server's log to the log file and reports the lines that matter to the starter.
fn pump_log(stderr: std::process::ChildStderr, mut log: Option<std::fs::File>, tx: mpsc::Sender<LogEvent>) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        if let Some(file) = log.as_mut() {
            let _ = writeln!(file, "{line}");
        }
        // The receiver is gone once the server is ready; keep draining so the pipe never fills.
        let event = if let Some(v) = line.split("Version:").nth(1) {
            LogEvent::Version(v.trim().to_owned())
        } else if let Some(addr) = line.split("Listening for client connections on ").nth(1) {
            match addr.trim().rsplit_once(':').and_then(|(_, p)| p.parse().ok()) {
                Some(port) => LogEvent::Port(port),
                None => LogEvent::Line(line),
            }
        } else if line.contains("Server is ready") {
            LogEvent::Ready
        } else {
            LogEvent::Line(line)
        };
        let _ = tx.send(event);
    }
}
