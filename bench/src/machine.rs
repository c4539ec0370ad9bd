//! What the report ran on: CPU, cores, memory, kernel, OS, toolchain, nats-server, disk, commit.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// A description of the machine and software a report was produced with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model from /proc/cpuinfo.
    pub cpu: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// `uname -sr`.
    pub kernel: String,
    /// PRETTY_NAME from /etc/os-release.
    pub os: String,
    /// `rustc --version` of the toolchain that built the binary (read at run time).
    pub rustc: String,
    /// Build profile of the running binary.
    pub profile: String,
    /// `nats-server --version`.
    pub nats_server: String,
    /// Free space on the work directory's filesystem when the run started, GiB.
    pub disk_free_gib: f64,
    /// `git rev-parse --short HEAD` of the checkout, when run from one.
    pub commit: String,
    /// 1-minute load average when the run started (a busy neighbour shows here).
    pub load_average: String,
}

impl Machine {
    /// Reads the machine's description; fields that cannot be read say `unknown`.
    pub fn describe(nats_server: &Path, work_dir: &Path) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
            .map_or_else(|| "unknown".to_owned(), |s| s.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
        let os = std::fs::read_to_string("/etc/os-release")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map_or_else(|| "unknown".to_owned(), |s| s.trim_matches('"').to_owned());
        let disk_free_gib = toolledger_core::disk_space(work_dir)
            .map_or(0.0, |(available, _)| available as f64 / (1u64 << 30) as f64);
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib,
            kernel: output("uname", &["-sr"]),
            os,
            rustc: output("rustc", &["--version"]),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_owned(),
            nats_server: output(&nats_server.to_string_lossy(), &["--version"]),
            disk_free_gib,
            commit: output("git", &["rev-parse", "--short", "HEAD"]),
            load_average: std::fs::read_to_string("/proc/loadavg")
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "unknown".to_owned()),
        }
    }

    /// A Markdown table.
    pub fn markdown(&self) -> String {
        let rows = [
            ("CPU", format!("{} ({} cores)", self.cpu, self.cores)),
            ("memory", format!("{:.1} GiB", self.memory_gib)),
            ("OS / kernel", format!("{} / {}", self.os, self.kernel)),
            (
                "toolchain / profile",
                format!("{} / {}", self.rustc, self.profile),
            ),
            ("nats-server", self.nats_server.clone()),
            ("disk free at start", format!("{:.0} GiB", self.disk_free_gib)),
            ("load average at start", self.load_average.clone()),
            ("commit", self.commit.clone()),
        ];
        let mut out = String::from("| | |\n|---|---|\n");
        for (k, v) in rows {
            out.push_str(&format!("| {k} | {v} |\n"));
        }
        out
    }
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}
