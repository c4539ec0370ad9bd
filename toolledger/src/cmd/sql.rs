//! `toolledger query "SELECT …"`: analysts' read-only SQL over one tenant's projection views.
//!
//! ```text
//! current projection generation ─▶ toolledger_projector::run_sql(scope, statement, limits)
//!   (blocking thread) ─▶ a table, --json or --csv on stdout
//! ```
//!
//! Exit codes: 0 rows printed, 1 refused / timed out / SQLite error, 2 usage.

use std::time::Duration;

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_projector::{Generations, SqlLimits, SqlResult, SqlScope, run_sql};
use toolledger_wire::partition::{Partition, Partitions};

/// Flags of `toolledger query`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["tenant", "admin"])))]
pub struct Args {
    /// One SELECT (or WITH … SELECT, VALUES) statement. The tables are the tenant's views of the
    /// projection (docs/projections.md); `main.` names, writes, ATTACH, PRAGMA and extensions are refused.
    #[arg(value_name = "SQL")]
    pub statement: String,
    /// The tenant whose rows the statement reads.
    #[arg(long, value_name = "TENANT")]
    pub tenant: Option<String>,
    /// Read every table of every tenant (an operator on the projection's machine).
    #[arg(long)]
    pub admin: bool,
    /// With --admin on a partitioned ledger: the partition whose projection is read (each has its
    /// own; a tenant's is found by its name).
    #[arg(long, value_name = "K", requires = "admin")]
    pub partition: Option<u16>,
    /// Rows printed at most; more are cut and said so.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_rows: usize,
    /// Interrupt the statement after this many milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub timeout_ms: u64,
    /// Print `{columns, rows, truncated, elapsed_ms}` as JSON.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV with a header line.
    #[arg(long)]
    pub csv: bool,
}

/// Runs the statement against the current projection generation and prints the rows.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    let partition = match (&args.tenant, args.partition) {
        (Some(tenant), named) => super::prove::partition_of(&config, Some(tenant), named)?,
        (None, Some(_)) => super::prove::partition_of(&config, None, args.partition)?,
        (None, None) if partitions.count() == 1 => Partition::ZERO,
        (None, None) => anyhow::bail!(
            "ledger.partitions = {}: each partition has its own projection; add --partition K to \
             --admin (docs/scaling.md)",
            partitions.count()
        ),
    };
    let generation = Generations::of(&config.data_dir, partition)
        .current()?
        .context("no projection yet: run `toolledger project` or `toolledger up`")?;
    let scope = match &args.tenant {
        Some(tenant) => SqlScope::Tenant(tenant.clone()),
        None => SqlScope::Admin,
    };
    let limits = SqlLimits {
        timeout: Duration::from_millis(args.timeout_ms.max(1)),
        max_rows: args.max_rows.max(1),
        ..SqlLimits::default()
    };
    let statement = args.statement.clone();
    let database = generation.database();
    let result =
        tokio::task::spawn_blocking(move || run_sql(&database, &scope, &statement, limits)).await??;
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else if args.csv {
        print_csv(&result);
    } else {
        print_table(&result);
    }
    if result.truncated {
        eprintln!(
            "toolledger query: more than {} rows; the rest were cut (--max-rows)",
            result.rows.len()
        );
    }
    Ok(())
}

fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "NULL".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_table(result: &SqlResult) {
    const MAX_WIDTH: usize = 60;
    let cells: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|v| {
                    let t = text(v).replace(['\n', '\t'], " ");
                    if t.chars().count() > MAX_WIDTH {
                        format!("{}…", t.chars().take(MAX_WIDTH - 1).collect::<String>())
                    } else {
                        t
                    }
                })
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = result.columns.iter().map(|c| c.chars().count()).collect();
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |values: &[String]| {
        values
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    println!("{}", line(&result.columns));
    println!(
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ")
    );
    for row in &cells {
        println!("{}", line(row));
    }
    println!("({} rows, {} ms)", result.rows.len(), result.elapsed_ms);
}

fn print_csv(result: &SqlResult) {
    let field = |s: &str| {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_owned()
        }
    };
    println!(
        "{}",
        result
            .columns
            .iter()
            .map(|c| field(c))
            .collect::<Vec<_>>()
            .join(",")
    );
    for row in &result.rows {
        let values: Vec<String> = row
            .iter()
            .map(|v| match v {
                serde_json::Value::Null => String::new(),
                other => field(&text(other)),
            })
            .collect();
        println!("{}", values.join(","));
    }
}
