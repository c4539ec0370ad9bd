//! `toolledger import`: --dry-run output, the per-record report, exit codes, and publishing to a real
//! nats-server (a re-import sends the same events again, under the same ids, for ingest to drop).

use std::path::PathBuf;
use std::time::Duration;

use toolledger_testkit::{ChildProcess, NatsFixture};

use crate::toolledger;

fn fixture(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../import/tests/fixtures")
        .join(path)
        .display()
        .to_string()
}

fn run(args: &[&str]) -> ChildProcess {
    run_in(args, &[])
}

fn run_in(args: &[&str], env: &[(&str, &str)]) -> ChildProcess {
    let mut child = ChildProcess::spawn(toolledger(), args, env);
    child.wait_timeout(Duration::from_secs(60)).expect("import exits");
    child
}

fn code(child: &mut ChildProcess) -> i32 {
    child.try_status().unwrap().code().unwrap()
}

#[test]
fn dry_run_prints_events_and_reports_rejections_with_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mcp = fixture("mcp/session.ndjson");
    let mut child = run(&[
        "import",
        "--format",
        "mcp",
        "--tenant",
        "acme",
        "--dry-run",
        "--report",
        report.to_str().unwrap(),
        &mcp,
    ]);
    assert_eq!(code(&mut child), 1, "{}", child.stderr());
    let events: Vec<serde_json::Value> = child
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(events.len() > 20);
    assert!(
        events
            .iter()
            .all(|e| e["specversion"] == "1.0" && e["tenant"] == "acme")
    );
    let stderr = child.stderr();
    assert!(
        stderr.contains("rejected") && stderr.contains("response 99"),
        "{stderr}"
    );
    assert!(stderr.contains("3 rejected"), "{stderr}");

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(report["format"], "mcp");
    assert_eq!(report["summary"]["records"], 23);
    assert_eq!(report["summary"]["rejected"], 3);
    assert_eq!(report["summary"]["events"], events.len());
    let record = &report["records"][15];
    assert_eq!(record["status"], "rejected");
    assert!(record["location"].as_str().unwrap().ends_with(":16"));
    assert!(
        record["reason"]
            .as_str()
            .unwrap()
            .contains("answers no tools/call")
    );
    assert_eq!(
        report["records"][5]["events"][0]["type"],
        "tool.invocation.planned"
    );
}

#[test]
fn a_clean_file_exits_0_and_usage_errors_exit_2() {
    let definition = fixture("otc/definition.json");
    let mut ok = run(&[
        "import",
        "--format",
        "otc",
        "--tenant",
        "acme",
        "--dry-run",
        &definition,
    ]);
    assert_eq!(code(&mut ok), 0, "{}", ok.stderr());
    assert_eq!(ok.stdout().lines().count(), 1);
    assert!(
        ok.stderr().contains("1 records, 1 mapped, 0 rejected"),
        "{}",
        ok.stderr()
    );

    let mut no_tenant = run(&["import", "--format", "otc", "--dry-run", &definition]);
    assert_eq!(code(&mut no_tenant), 2);
    let mut bad_format = run(&["import", "--format", "soap", "--tenant", "acme", &definition]);
    assert_eq!(code(&mut bad_format), 2);
}

#[test]
fn import_publishes_to_atl_inbound_and_a_reimport_sends_the_same_events_again() {
    let nats = NatsFixture::start();
    let url = nats.url();
    let data = tempfile::tempdir().unwrap();
    let mut init = run_in(
        &["init", "--nats-url", &url],
        &[("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap())],
    );
    assert!(init.try_status().unwrap().success(), "{}", init.stderr());
    let openai = fixture("openai/conversation.ndjson");
    let args = [
        "import",
        "--format",
        "openai",
        "--tenant",
        "acme",
        "--nats-url",
        &url,
        &openai,
    ];
    let mut first = run(&args);
    // Two records of the fixture are malformed on purpose: exit 1, the rest published.
    assert_eq!(code(&mut first), 1, "{}", first.stderr());
    let out = first.stdout();
    let published: usize = out
        .split("published ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(published > 10, "{out}");
    let mut second = run(&args);
    assert_eq!(code(&mut second), 1);
    assert!(
        second
            .stdout()
            .contains(&format!("published {published}, duplicates 0, failed 0")),
        "{}",
        second.stdout()
    );
}
