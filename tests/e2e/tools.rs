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

/// `validate` applies the id grammar ingest applies before the schemas (`toolledger_wire::id`): an id
/// with a control character or over 1 KiB, in an attribute, an envelope field or a `data` member
/// named `*_id`, is reported refused as `bad_id` with the detail ingest's receipt carries, never the
/// value; an id the grammar takes (spaces, `<`, Unicode) is valid.
#[test]
fn validate_refuses_ids_outside_the_grammar_as_ingest_does() {
    let planned = |id: &str, invocation: &str, request: &str| {
        serde_json::json!({"specversion": "1.0", "id": id, "source": "urn:validate", "type": "tool.invocation.planned",
            "tenant": "acme", "subject": invocation, "time": "2026-05-08T09:00:00Z",
            "data": {"schema_version": "0.2.0", "invocation_id": invocation, "tool_id": "notes.write",
                "status": "planned", "created_at": "2026-05-08T09:00:00Z", "request_id": request}})
    };
    let long = "L".repeat(1025);
    let mut envelope = serde_json::json!({"event_id": "env-1", "event_type": "tool.invocation.planned",
        "source": "urn:validate", "time": "2026-05-08T09:00:00Z", "schema_version": "0.2.0",
        "invocation_id": "inv-with\nnewline",
        "data": {"schema_version": "0.2.0", "invocation_id": "inv-with\nnewline", "tool_id": "notes.write",
            "status": "planned", "created_at": "2026-05-08T09:00:00Z"}});
    envelope["data"]["session_id"] = serde_json::json!("sess-fine");
    let documents = [
        planned("evt <odd> 会話", "inv a<b>/c", "req-1"),
        planned("evt-nul\u{0}", "inv-2", "req-2"),
        planned("evt-3", "inv-3", &long),
        envelope,
    ];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ids.ndjson");
    let lines: Vec<String> = documents.iter().map(|d| d.to_string()).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();

    let mut json = run(&["validate", "--json", file.to_str().unwrap()]);
    assert!(!json.try_status().unwrap().success(), "{}", json.stdout());
    let report: serde_json::Value = serde_json::from_str(&json.stdout()).unwrap();
    let outcomes: Vec<&serde_json::Value> = report["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["outcome"])
        .collect();
    assert_eq!(outcomes[0]["outcome"], "valid", "{report:#}");
    let expected = [
        "bad id at `/id`: control character U+0000 at byte 7",
        "bad id at `/data/request_id`: 1025 bytes, over the 1024-byte limit for ids",
        "bad id at `/invocationid`: control character U+000A at byte 8",
    ];
    for (outcome, detail) in outcomes[1..].iter().zip(expected) {
        assert_eq!(outcome["outcome"], "refused", "{report:#}");
        assert_eq!(outcome["reason"], "bad_id", "{report:#}");
        assert_eq!(outcome["detail"], detail, "{report:#}");
    }
    let printed = json.stdout();
    assert!(
        !printed.contains(&long[..64]) && !printed.contains("evt-nul"),
        "the refused value is not repeated: {printed}"
    );

    let mut text = run(&["validate", file.to_str().unwrap()]);
    assert!(!text.try_status().unwrap().success());
    let out = text.stdout();
    assert!(
        out.contains("line 2 id=-: refused (bad_id): bad id at `/id`: control character U+0000"),
        "{out}"
    );
    assert!(out.contains("4 document(s): 1 valid, 3 invalid"), "{out}");
}
