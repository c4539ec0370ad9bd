//! The report: figures measured over several runs, ratios against baselines measured in the same
//! runs, and the targets checked against them; written as Markdown for people and JSON for
//! tools, with the exact command and the machine it ran on.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;

/// Which direction of a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Rates: more is better.
    Higher,
    /// Latencies, sizes, memory: less is better.
    Lower,
}

/// One measured quantity, one value per run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Figure {
    /// Stable identifier, e.g. `ingest.rate`; comparisons and targets refer to figures by it.
    pub id: String,
    /// What was measured, for people.
    pub title: String,
    /// Unit of every value, e.g. `events/s`, `ms`, `MiB`, `bytes/event`.
    pub unit: String,
    /// Which direction is better.
    pub better: Better,
    /// One value per run, in run order.
    pub runs: Vec<f64>,
    /// Median of `runs`.
    pub median: f64,
    /// Smallest of `runs`.
    pub min: f64,
    /// Largest of `runs`.
    pub max: f64,
    /// (max − min) / median, in percent: the noise of this figure on this machine.
    pub spread_pct: f64,
}

impl Figure {
    /// A figure from its per-run values (at least one).
    pub fn new(id: &str, title: &str, unit: &str, better: Better, runs: Vec<f64>) -> Self {
        let (median, min, max) = summarize(&runs);
        Self {
            id: id.to_owned(),
            title: title.to_owned(),
            unit: unit.to_owned(),
            better,
            spread_pct: if median.abs() > f64::EPSILON {
                100.0 * (max - min) / median.abs()
            } else {
                0.0
            },
            runs,
            median,
            min,
            max,
        }
    }
}

/// A figure beside its baseline: per-run ratios `subject / baseline` (run i of each was measured
/// in the same round, on the same server and data).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// Stable identifier, e.g. `ingest_vs_relay`.
    pub id: String,
    /// Id of the measured figure.
    pub subject: String,
    /// Id of the baseline figure.
    pub baseline: String,
    /// `subject / baseline` per run.
    pub ratios: Vec<f64>,
    /// Median of `ratios`.
    pub median: f64,
    /// Smallest ratio.
    pub min: f64,
    /// Largest ratio.
    pub max: f64,
}

impl Comparison {
    /// Pairs run i of `subject` with run i of `baseline`.
    pub fn new(id: &str, subject: &Figure, baseline: &Figure) -> Self {
        let ratios: Vec<f64> = subject
            .runs
            .iter()
            .zip(&baseline.runs)
            .map(|(s, b)| if *b == 0.0 { f64::NAN } else { s / b })
            .collect();
        let (median, min, max) = summarize(&ratios);
        Self {
            id: id.to_owned(),
            subject: subject.id.clone(),
            baseline: baseline.id.clone(),
            ratios,
            median,
            min,
            max,
        }
    }
}

/// One of the targets, checked against the median of a figure or a comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetCheck {
    /// The target as the issue states it, e.g. `ingest ≥ 0.7 × relay`.
    pub target: String,
    /// Id of the figure or comparison it is checked on.
    pub on: String,
    /// The measured median.
    pub measured: f64,
    /// Unit of `measured` (`×` for a ratio).
    pub unit: String,
    /// The bound.
    pub bound: f64,
    /// `at_least` or `at_most`.
    pub direction: Bound,
    /// Whether the median meets the bound.
    pub met: bool,
    /// When missed: why, and what would close it (from the suite that measured it).
    pub why: Option<String>,
}

/// Direction of a target's bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// measured ≥ bound
    AtLeast,
    /// measured ≤ bound
    AtMost,
}

impl TargetCheck {
    /// Checks `measured` against `bound`.
    pub fn new(target: &str, on: &str, measured: f64, unit: &str, direction: Bound, bound: f64) -> Self {
        let met = match direction {
            Bound::AtLeast => measured >= bound,
            Bound::AtMost => measured <= bound,
        };
        Self {
            target: target.to_owned(),
            on: on.to_owned(),
            measured,
            unit: unit.to_owned(),
            bound,
            direction,
            met,
            why: None,
        }
    }

    /// Attaches the explanation shown when the target is missed (ignored when it is met).
    pub fn explain_miss(mut self, why: impl Into<String>) -> Self {
        if !self.met {
            self.why = Some(why.into());
        }
        self
    }
}

/// The outcome of one suite (ingest, latency, rebuild, …).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Section {
    /// Suite name as given to `--only`.
    pub id: String,
    /// Heading.
    pub title: String,
    /// How it was measured: data, sizes, what each figure includes and excludes (Markdown).
    pub method: String,
    /// Measured figures.
    pub figures: Vec<Figure>,
    /// Ratios against baselines.
    pub comparisons: Vec<Comparison>,
    /// Targets checked here.
    pub targets: Vec<TargetCheck>,
    /// Observations worth reading beside the numbers (Markdown lines).
    pub notes: Vec<String>,
    /// Wall time the suite took.
    pub seconds: f64,
    /// Set when the section was kept from an earlier report because this run (`--only`) did not
    /// measure its suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_from: Option<Earlier>,
}

/// Where a section kept from an earlier report was measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Earlier {
    /// The command of that run.
    pub command: String,
    /// When that run started.
    pub started_at: String,
    /// The commit it measured.
    pub commit: String,
    /// The load average when it started.
    pub load_average: String,
}

impl Section {
    /// An empty section.
    pub fn new(id: &str, title: &str, method: impl Into<String>) -> Self {
        Self {
            id: id.to_owned(),
            title: title.to_owned(),
            method: method.into(),
            figures: Vec::new(),
            comparisons: Vec::new(),
            targets: Vec::new(),
            notes: Vec::new(),
            seconds: 0.0,
            kept_from: None,
        }
    }

    /// Adds a figure and returns a copy for comparisons.
    pub fn figure(&mut self, figure: Figure) -> Figure {
        self.figures.push(figure.clone());
        figure
    }

    /// Adds `subject / baseline`.
    pub fn compare(&mut self, id: &str, subject: &Figure, baseline: &Figure) -> Comparison {
        let comparison = Comparison::new(id, subject, baseline);
        self.comparisons.push(comparison.clone());
        comparison
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The exact command line that produced it.
    pub command: String,
    /// Where it ran.
    pub machine: Machine,
    /// RFC 3339 start time.
    pub started_at: String,
    /// Wall time of the whole run so far.
    pub seconds: f64,
    /// Runs per figure.
    pub runs: usize,
    /// Suites run, in order.
    pub sections: Vec<Section>,
}

impl Report {
    /// The sections of `earlier` (a report read back from `report.json`) whose suites are not in
    /// `rerun`, each marked with the run that measured it.
    pub fn kept_sections(earlier: Report, rerun: &[String]) -> Vec<Section> {
        let from = Earlier {
            command: earlier.command,
            started_at: earlier.started_at,
            commit: earlier.machine.commit,
            load_average: earlier.machine.load_average,
        };
        earlier
            .sections
            .into_iter()
            .filter(|section| !rerun.contains(&section.id))
            .map(|mut section| {
                section.kept_from.get_or_insert_with(|| from.clone());
                section
            })
            .collect()
    }

    /// Every target of every section.
    pub fn targets(&self) -> impl Iterator<Item = &TargetCheck> {
        self.sections.iter().flat_map(|s| s.targets.iter())
    }

    /// The largest spread of any figure: the noise a rerun should stay within.
    pub fn max_spread_pct(&self) -> f64 {
        self.sections
            .iter()
            .flat_map(|s| s.figures.iter())
            .map(|f| f.spread_pct)
            .fold(0.0, f64::max)
    }

    /// The Markdown rendering.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# toolledger benchmark report\n");
        let _ = writeln!(
            out,
            "Produced by `{}` on {} ({:.0} s). Each figure is the median of {} runs with the min–max \
             spread; a comparison pairs run *i* of a figure with run *i* of its baseline, measured in the \
             same round on the same server and data. The JSON twin of this file is `report.json`.\n",
            self.command, self.started_at, self.seconds, self.runs
        );
        let _ = writeln!(out, "## Machine\n");
        out.push_str(&self.machine.markdown());
        let _ = writeln!(out, "\n## Targets\n");
        let _ = writeln!(out, "| target | measured | met |\n|---|---|---|");
        for t in self.targets() {
            let _ = writeln!(
                out,
                "| {} | {} {} | {} |",
                t.target,
                number(t.measured),
                t.unit,
                if t.met { "yes" } else { "**no**" }
            );
        }
        let missed: Vec<_> = self.targets().filter(|t| !t.met).collect();
        if !missed.is_empty() {
            let _ = writeln!(out, "\nWhere a target is missed, why and what would close it:\n");
            for t in missed {
                let _ = writeln!(
                    out,
                    "- **{}** — {}",
                    t.target,
                    t.why.as_deref().unwrap_or("no explanation recorded")
                );
            }
        }
        let _ = writeln!(
            out,
            "\n## Noise\n\nThe largest min–max spread of any figure in this run is {:.1} % of its median; a \
             rerun on this machine class is expected to land within each figure's own spread shown below \
             (this machine is shared, so a busy neighbour widens it).",
            self.max_spread_pct()
        );
        for section in &self.sections {
            let _ = writeln!(out, "\n## {}\n", section.title);
            if let Some(earlier) = &section.kept_from {
                let _ = writeln!(
                    out,
                    "_Kept from an earlier run, which this one (`--only`) did not repeat: `{}` on {}, \
                     commit {}, load average {}._\n",
                    earlier.command, earlier.started_at, earlier.commit, earlier.load_average
                );
            }
            let _ = writeln!(out, "{}\n", section.method.trim());
            if !section.figures.is_empty() {
                let _ = writeln!(
                    out,
                    "| figure | median | min | max | spread | runs |\n|---|---:|---:|---:|---:|---|"
                );
                for f in &section.figures {
                    let runs: Vec<String> = f.runs.iter().map(|v| number(*v)).collect();
                    let _ = writeln!(
                        out,
                        "| {} ({}) | {} | {} | {} | {:.1} % | {} |",
                        f.title,
                        f.unit,
                        number(f.median),
                        number(f.min),
                        number(f.max),
                        f.spread_pct,
                        runs.join(", ")
                    );
                }
            }
            if !section.comparisons.is_empty() {
                let _ = writeln!(
                    out,
                    "\n| comparison | median | min | max | per run |\n|---|---:|---:|---:|---|"
                );
                for c in &section.comparisons {
                    let runs: Vec<String> = c.ratios.iter().map(|v| format!("{v:.3}")).collect();
                    let _ = writeln!(
                        out,
                        "| {} / {} | {:.3} × | {:.3} × | {:.3} × | {} |",
                        c.subject,
                        c.baseline,
                        c.median,
                        c.min,
                        c.max,
                        runs.join(", ")
                    );
                }
            }
            for note in &section.notes {
                let _ = writeln!(out, "\n{note}");
            }
            let _ = writeln!(out, "\n_Suite wall time: {:.0} s._", section.seconds);
        }
        out
    }

    /// Writes `report.md` and `report.json` into `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(self)?)?;
        Ok(())
    }
}

/// Median, min and max (NaN-tolerant: NaNs sort last and are ignored when others exist).
pub fn summarize(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    (median, sorted[0], sorted[n - 1])
}

/// Percentile (nearest rank, as the query API's stats compute it) of unsorted samples; `q` in 0..=1.
pub fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    toolledger_query::stats::percentile(samples, q * 100.0).unwrap_or(f64::NAN)
}

/// A number with sensible precision for a table.
fn number(v: f64) -> String {
    if !v.is_finite() {
        "n/a".to_owned()
    } else if v.abs() >= 1000.0 {
        let s = format!("{:.0}", v);
        // thousands separators for readability
        let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        format!("{sign}{grouped}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_and_ratios() {
        let a = Figure::new("a", "A", "events/s", Better::Higher, vec![100.0, 300.0, 200.0]);
        assert_eq!((a.median, a.min, a.max), (200.0, 100.0, 300.0));
        assert!((a.spread_pct - 100.0).abs() < 1e-9);
        let b = Figure::new("b", "B", "events/s", Better::Higher, vec![200.0, 300.0, 400.0]);
        let c = Comparison::new("a_vs_b", &a, &b);
        assert_eq!(c.ratios, vec![0.5, 1.0, 0.5]);
        assert_eq!(c.median, 0.5);
        let mut samples = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&mut samples, 0.5), 3.0);
        assert_eq!(percentile(&mut samples, 0.99), 5.0);
        assert_eq!(number(1234567.0), "1,234,567");
        let t = TargetCheck::new("x ≥ 0.7", "a_vs_b", 0.5, "×", Bound::AtLeast, 0.7).explain_miss("slow");
        assert!(!t.met);
        assert_eq!(t.why.as_deref(), Some("slow"));
    }
}
