//! The projector's heartbeat: a small file beside the generations that `toolledger project` rewrites
//! every few seconds with its state, so a reader on the same machine — the query service's
//! `/healthz`, `toolledger doctor` — can tell a running projector from a failing, stopped or dead one.
//! (The projection's position alone cannot: an idle ledger leaves it unchanged too.)
//!
//! ```text
//! <data_dir>/projections/projector.heartbeat
//!   {"pid":4242,"written_at_ms":1767225600000,"state":"running","detail":"gen-2 at seq 812"}
//!
//! project starts ─▶ running ─┬─ every HEARTBEAT_EVERY: rewritten (write .tmp, rename)
//!                            ├─ projection unreadable ─▶ failing, detail says what to run
//!                            └─ stops (or its task is dropped) ─▶ stopped
//! killed ─▶ the file stops changing ─▶ older than HEARTBEAT_STALE reads as "not running"
//! ```

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use toolledger_core::telemetry::Health;

use toolledger_wire::partition::Partition;

use crate::error::{Error, Result};
use crate::generation::Generations;

/// The heartbeat file in the projections directory.
pub const HEARTBEAT_FILE: &str = "projector.heartbeat";
/// How often a running projector rewrites its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// A heartbeat older than this is a projector that is not running: six missed beats, so a loaded
/// machine's slow beat is not mistaken for a dead projector.
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(30);
/// The health board's component for the projector (of a single ledger, or of partition p0).
pub const COMPONENT: &str = "projector";

/// The health board's component for the projector of `partition`: `projector`, `projector-p<K>`.
pub fn component(partition: Partition) -> String {
    partition.file_name(COMPONENT)
}

/// What the projector says it is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProjectorState {
    /// Following the ledger.
    Running,
    /// Running but unable to project; the detail says why and what to run.
    Failing,
    /// Stopped on purpose (or ended with an error, which the detail gives).
    Stopped,
}

/// One heartbeat, as written to [`HEARTBEAT_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The projector's process id.
    pub pid: u32,
    /// When it was written, milliseconds since the Unix epoch.
    pub written_at_ms: u64,
    /// The projector's state.
    pub state: ProjectorState,
    /// What it is doing or what is wrong.
    pub detail: String,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Heartbeat {
    /// The heartbeat file of `generations`.
    pub fn path(generations: &Generations) -> PathBuf {
        generations.root().join(HEARTBEAT_FILE)
    }

    /// Reads the heartbeat; `None` when no projector has written one.
    pub fn read(generations: &Generations) -> Result<Option<Heartbeat>> {
        let path = Self::path(generations);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path, source }),
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|error| Error::Io {
                path,
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, error),
            })
    }

    /// Writes it (to a temporary file renamed over the old one, so a reader never sees half of it).
    /// Not fsynced: a heartbeat lost in a power cut only reads as stale.
    fn write(&self, generations: &Generations) -> Result<()> {
        let path = Self::path(generations);
        let tmp = path.with_extension("heartbeat.tmp");
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(generations.root()).map_err(io)?;
        let bytes = serde_json::to_vec(self).map_err(|e| io(std::io::Error::other(e)))?;
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// How long ago it was written.
    pub fn age(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.written_at_ms))
    }

    /// Whether the projector is projecting, and the line a health board or `doctor` shows for it.
    pub fn verdict(&self) -> (bool, String) {
        let age = self.age();
        if age > HEARTBEAT_STALE {
            return (
                false,
                format!(
                    "not running: its last heartbeat (pid {}, {}) is {}s old; start `toolledger project`",
                    self.pid,
                    self.detail,
                    age.as_secs()
                ),
            );
        }
        match self.state {
            ProjectorState::Running => (true, self.detail.clone()),
            ProjectorState::Failing => (false, self.detail.clone()),
            ProjectorState::Stopped => (
                false,
                format!("stopped ({}); start `toolledger project`", self.detail),
            ),
        }
    }
}

/// The running projector's side: its state, kept on the health board (when it has one) and in the
/// heartbeat file, which a task rewrites every [`HEARTBEAT_EVERY`]. Dropping it writes `stopped`.
pub(crate) struct Pulse {
    generations: Generations,
    health: Option<Health>,
    beat: Arc<Mutex<Heartbeat>>,
    task: tokio::task::JoinHandle<()>,
}

impl Pulse {
    /// Starts beating as `running` with `detail`.
    pub(crate) fn start(generations: &Generations, health: Option<Health>, detail: &str) -> Pulse {
        let beat = Arc::new(Mutex::new(Heartbeat {
            pid: std::process::id(),
            written_at_ms: now_ms(),
            state: ProjectorState::Running,
            detail: detail.to_owned(),
        }));
        let task = tokio::spawn({
            let generations = generations.clone();
            let beat = Arc::clone(&beat);
            async move {
                let mut ticks = tokio::time::interval(HEARTBEAT_EVERY);
                loop {
                    ticks.tick().await;
                    let generations = generations.clone();
                    let beat = Arc::clone(&beat);
                    // A few hundred bytes and a rename: quick, but file I/O all the same.
                    let _ = tokio::task::spawn_blocking(move || write_current(&generations, &beat)).await;
                }
            }
        });
        let pulse = Pulse {
            generations: generations.clone(),
            health,
            beat,
            task,
        };
        pulse.set(ProjectorState::Running, detail);
        pulse
    }

    /// Records a new state at once: on the board and in the file.
    pub(crate) fn set(&self, state: ProjectorState, detail: &str) {
        if let Some(health) = &self.health {
            let component = component(self.generations.partition());
            match state {
                ProjectorState::Running => health.ok(&component, detail),
                ProjectorState::Failing | ProjectorState::Stopped => {
                    health.failing(&component, detail);
                }
            }
        }
        {
            let mut beat = self.beat.lock().unwrap_or_else(PoisonError::into_inner);
            beat.state = state;
            beat.detail = detail.to_owned();
        }
        write_current(&self.generations, &self.beat);
    }
}

impl Drop for Pulse {
    fn drop(&mut self) {
        self.task.abort();
        let state = self.beat.lock().unwrap_or_else(PoisonError::into_inner).state;
        if state != ProjectorState::Stopped {
            self.set(ProjectorState::Stopped, "the projector stopped");
        }
    }
}

fn write_current(generations: &Generations, beat: &Mutex<Heartbeat>) {
    let mut current = beat.lock().unwrap_or_else(PoisonError::into_inner).clone();
    current.written_at_ms = now_ms();
    if let Err(error) = current.write(generations) {
        tracing::warn!(error = %toolledger_core::telemetry::ErrorChain(&error), "projector heartbeat not written");
    }
}
