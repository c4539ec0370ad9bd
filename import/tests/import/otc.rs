//! Open Tool Calling: the definition, request and response forms (value, error with retry hints,
//! requires_authorization, artifact), with secrets and tokens kept out of every event.

use toolledger_import::Format;

use crate::{all_events, import, invocations_with, pairs, rejected, shape};

#[test]
fn the_definition_form_declares_a_versioned_toolkit_tool() {
    let outcomes = import(Format::Otc, "otc/definition.json");
    assert_eq!(shape(&outcomes[0]), pairs(&[("tool.declared", "")]));
    let data = &outcomes[0].events[0]["data"];
    assert_eq!(data["tool_id"], "otc:Slack.SendMessage");
    assert_eq!(data["namespace"], "Slack");
    assert_eq!(data["version"], "1.2.0");
    assert_eq!(data["input_contract"]["parameters"][0]["name"], "channel");
    assert_eq!(
        data["input_contract"]["requirements"]["secrets"][0]["key"],
        "SLACK_SIGNING_SECRET"
    );
    let mapping = &data["external_mappings"][0];
    assert_eq!(mapping["source"], "otc");
    assert_eq!(mapping["tool_definition_id"], "slack.send_message@1.2.0");
    assert_eq!(mapping["toolkit_version"], "1.2.0");
}

#[test]
fn requests_and_responses_become_invocations_results_errors_and_authorization() {
    let outcomes = import(Format::Otc, "otc/session.ndjson");
    assert_eq!(outcomes.len(), 9);
    assert_eq!(shape(&outcomes[0]), pairs(&[("tool.declared", "")]));

    let success = pairs(&[
        ("tool.invocation.planned", "planned"),
        ("tool.invocation.started", "running"),
        ("tool.invocation.succeeded", "succeeded"),
        ("tool.result.created", "succeeded"),
    ]);
    // Value response; the run is the session; context secrets dropped, named in the notes.
    assert_eq!(shape(&outcomes[1]), success);
    let planned = &outcomes[1].events[0];
    assert_eq!(planned["sessionid"], "run-42");
    assert_eq!(planned["data"]["native_call_id"], "exec-1");
    assert_eq!(planned["data"]["actor_ref"], "user-17");
    assert_eq!(planned["data"]["external_mappings"][0]["run_id"], "run-42");
    assert_eq!(
        outcomes[1].events[3]["data"]["structured_content"]["channel"],
        "C024BE91L"
    );
    assert_eq!(
        outcomes[1].events[2]["data"]["started_at"],
        "2026-03-03T09:00:00.020Z"
    );
    for dropped in [
        "dropped context.authorization",
        "dropped context.secrets",
        "dropped context.user_info",
    ] {
        assert!(
            outcomes[1].notes.iter().any(|n| n == dropped),
            "{:?}",
            outcomes[1].notes
        );
    }

    // Error with can_retry / retry_after_ms / developer_message.
    assert_eq!(
        shape(&outcomes[2]),
        pairs(&[
            ("tool.invocation.planned", "planned"),
            ("tool.invocation.started", "running"),
            ("tool.invocation.failed", "failed"),
            ("tool.result.created", "failed"),
        ])
    );
    let error = &outcomes[2].events[2]["data"]["error"];
    assert_eq!(error["error_class"], "execution_failed");
    assert_eq!(error["recoverability"], "retryable");
    assert_eq!(error["retry_after"]["ms"], 1500);
    assert_eq!(
        error["native_error_ref"]["developer_message"],
        "HTTP 429 from chat.postMessage"
    );
    assert_eq!(outcomes[2].events[3]["data"]["is_error"], true);

    // requires_authorization: the call waits for the user; the URL's query (OAuth state) is dropped.
    assert_eq!(
        shape(&outcomes[3]),
        pairs(&[
            ("tool.invocation.planned", "planned"),
            ("tool.permission.requested", "")
        ])
    );
    let request = &outcomes[3].events[1]["data"];
    assert_eq!(request["reason"]["authorization_id"], "auth-9");
    assert_eq!(request["reason"]["url"], "https://slack.com/oauth/v2/authorize");
    assert_eq!(request["permission_input"]["channel"], "@bob");

    // A separate request and response, with an artifact.
    // The request alone is planned; its response shows it ran.
    assert_eq!(
        shape(&outcomes[4]),
        pairs(&[("tool.invocation.planned", "planned")])
    );
    assert_eq!(shape(&outcomes[5]), success[1..]);
    assert_eq!(outcomes[5].events[0]["time"], "2026-03-03T09:03:00.100Z");
    let artifact = &outcomes[5].events[2]["data"]["artifact_refs"][0];
    assert_eq!(artifact["url"], "s3://reports/q1-2026.pdf");
    assert_eq!(artifact["size"], 48213);

    assert!(rejected(&outcomes[6]).contains("exec-404 answers no earlier tool request"));
    assert!(rejected(&outcomes[7]).contains("execution_id or call_id"));
    assert!(rejected(&outcomes[8]).contains("success"));

    let events = all_events(&outcomes);
    assert_eq!(invocations_with(&events, "execution_id", "exec-2").len(), 1);
    assert_eq!(invocations_with(&events, "run_id", "run-42").len(), 4);

    // No secret or token reaches any event.
    let text = serde_json::to_string(&events).unwrap();
    for secret in [
        "xoxb-SECRET",
        "xoxp-SECRET",
        "shh-very-secret",
        "eyJSECRET",
        "SECRET-STATE",
        "ana@example.com",
    ] {
        assert!(!text.contains(secret), "{secret} leaked into an event");
    }
}

#[test]
fn a_request_sent_again_after_authorization_continues_the_invocation() {
    let mut importer =
        toolledger_import::Importer::new(Format::Otc, &toolledger_import::Options::new("acme")).unwrap();
    let request = serde_json::json!({"run_id": "r", "call_id": "c-1", "tool": {"name": "T"}, "inputs": {}});
    let response = serde_json::json!({"call_id": "c-1", "success": false,
        "output": {"requires_authorization": {"id": "a", "status": "pending"}}});
    assert!(importer.map_record("1", &request).is_ok());
    assert!(importer.map_record("2", &response).is_ok());
    let again = importer.map_record("3", &request);
    assert!(again.is_ok() && again.events.is_empty(), "{:?}", again.rejected);
    let done = importer.map_record(
        "4",
        &serde_json::json!({"call_id": "c-1", "success": true, "output": {"value": "ok"}}),
    );
    assert_eq!(
        shape(&done),
        pairs(&[
            ("tool.invocation.started", "running"),
            ("tool.invocation.succeeded", "succeeded"),
            ("tool.result.created", "succeeded"),
        ])
    );
    assert_eq!(done.events[0]["data"]["native_call_id"], "c-1");
    assert_eq!(done.events[0]["data"]["external_mappings"][0]["call_id"], "c-1");
}
