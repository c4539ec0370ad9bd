//! Offline tools: `validate` and `demo-data`.

use std::time::Duration;

use toolledger_testkit::ChildProcess;

use crate::toolledger;

fn run(args: &[&str]) -> ChildProcess {
    let mut child = ChildProcess::spawn(toolledger(), args, &[]);
    child.wait_timeout(Duration::from_secs(60)).expect("tool exits");
    child
}

#[test]
fn demo_data_validates_and_a_broken_event_is_reported_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.ndjson");
    let truth = dir.path().join("truth.json");
    let mut generate = run(&[
        "demo-data",
        "--seed",
        "7",
        "--out",
        events.to_str().unwrap(),
        "--truth",
        truth.to_str().unwrap(),
    ]);
    assert!(generate.try_status().unwrap().success(), "{}", generate.stderr());
    let text = std::fs::read_to_string(&events).unwrap();
    let count = text.lines().count();
    assert!(
        count > 27,
        "one session covers all 27 classes, got {count} events"
    );
    let truth: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&truth).unwrap()).unwrap();
    assert!(truth.is_object());

    let mut valid = run(&["validate", events.to_str().unwrap()]);
    assert!(
        valid.try_status().unwrap().success(),
        "{}{}",
        valid.stdout(),
        valid.stderr()
    );

    // Break one invocation event: drop a required field and give another the wrong type.
    let mut broken: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let target = broken
        .iter_mut()
        .find(|e| e["type"] == "tool.invocation.planned")
        .expect("a planned invocation");
    target["data"].as_object_mut().unwrap().remove("invocation_id");
    target["data"]["tool_id"] = serde_json::json!(42);
    let broken_file = dir.path().join("broken.ndjson");
    let lines: Vec<String> = broken.iter().map(|e| e.to_string()).collect();
    std::fs::write(&broken_file, lines.join("\n")).unwrap();
    let mut invalid = run(&["validate", "--json", broken_file.to_str().unwrap()]);
    assert!(!invalid.try_status().unwrap().success());
    let report = invalid.stdout();
    assert!(report.contains("/data/invocation_id"), "{report}");
    assert!(report.contains("/data/tool_id"), "{report}");
}
