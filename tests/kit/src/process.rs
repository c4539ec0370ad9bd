use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

/// A child process with its stdout and stderr captured to files, killed when dropped.
pub struct ChildProcess {
    child: Child,
    status: Option<ExitStatus>,
    out_dir: TempDir,
}

impl ChildProcess {
    /// Starts `program` with `args` and extra environment variables.
    pub fn spawn<I, S>(program: &Path, args: I, envs: &[(&str, &str)]) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out_dir = tempfile::Builder::new()
            .prefix("toolledger-child-")
            .tempdir()
            .expect("temp dir");
        let stdout = File::create(out_dir.path().join("stdout")).expect("stdout file");
        let stderr = File::create(out_dir.path().join("stderr")).expect("stderr file");
        let child = Command::new(program)
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        Self {
            child,
            status: None,
            out_dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the child wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.read("stdout")
    }

    /// Everything the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.read("stderr")
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.output_path(name)).unwrap_or_default()
    }

    /// The file that holds `stdout` or `stderr`.
    pub fn output_path(&self, name: &str) -> PathBuf {
        self.out_dir.path().join(name)
    }

    /// Waits until stdout or stderr contains `needle`; false if the child exits or time runs out first.
    pub fn wait_for_output(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stdout().contains(needle) || self.stderr().contains(needle) {
                return true;
            }
            if self.try_status().is_some() || Instant::now() >= deadline {
                return self.stdout().contains(needle) || self.stderr().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The exit status if the child has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Waits up to `timeout` for the child to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.try_status() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.try_status()
    }

    /// Sends `signal` to the child.
    pub fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits i32"));
        // The child may already be gone; that is the caller's to observe through the status.
        let _ = kill(pid, signal);
    }

    /// Sends SIGTERM and waits up to `timeout` for the child to exit.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.signal(Signal::SIGTERM);
        self.wait_timeout(timeout)
    }

    /// Kills the child with SIGKILL, as a crash or an operator's `kill -9` would, and reaps it.
    pub fn kill9(&mut self) -> ExitStatus {
        if let Some(status) = self.try_status() {
            return status;
        }
        self.signal(Signal::SIGKILL);
        let status = self.child.wait().expect("wait for killed child");
        self.status = Some(status);
        status
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            self.kill9();
        }
    }
}
