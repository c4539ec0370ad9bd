//! MCP: a session log with initialize, tools/list, parallel tools/call requests answered out of
//! order, isError, a JSON-RPC error, a cancellation and a reused request id.

use toolledger_import::Format;

use crate::{all_events, import, invocations_with, lifecycle, pairs, rejected, shape};

const SESSION: &str = "1868a90c-5f2b-4b0a-9c1e-7d3f2a9b8c01";

#[test]
fn a_session_log_maps_declarations_parallel_calls_errors_and_cancellation() {
    let outcomes = import(Format::Mcp, "mcp/session.ndjson");
    assert_eq!(outcomes.len(), 23);
    for i in [0, 1, 2, 3] {
        assert!(outcomes[i].is_ok() && outcomes[i].events.is_empty(), "{i}");
    }
    assert_eq!(
        shape(&outcomes[4]),
        pairs(&[("tool.declared", ""), ("tool.declared", "")])
    );
    let declared = &outcomes[4].events[0]["data"];
    assert_eq!(declared["tool_id"], "mcp:weather:get_weather");
    assert_eq!(declared["tool_kind"], "mcp_tool");
    assert_eq!(declared["title"], "Weather Information Provider");
    assert_eq!(
        declared["output_contract"]["output_schema"]["required"][0],
        "temperature"
    );
    assert_eq!(declared["external_mappings"][0]["server_id"], "weather");

    let events = all_events(&outcomes);
    let by_id = |id: &str| invocations_with(&events, "jsonrpc_request_id", id);

    // id 7: structuredContent; the protocol version from initialize is kept.
    let seven = by_id("7");
    assert_eq!(seven.len(), 2, "id 7 was reused after its call completed");
    assert_eq!(
        lifecycle(&events, &seven[0]),
        pairs(&[
            ("tool.invocation.planned", "planned"),
            ("tool.invocation.started", "running"),
            ("tool.invocation.succeeded", "succeeded"),
            ("tool.result.created", "succeeded"),
        ])
    );
    let planned = &outcomes[5].events[0];
    assert_eq!(planned["sessionid"], SESSION);
    assert_eq!(planned["data"]["native_call_id"], "7");
    let mapping = &planned["data"]["external_mappings"][0];
    assert_eq!(mapping["source"], "mcp");
    assert_eq!(mapping["mcp_session_id"], SESSION);
    assert_eq!(mapping["mcp_protocol_version"], "2025-06-18");
    assert_eq!(mapping["_meta"]["progressToken"], "tok-7");
    assert_eq!(planned["data"]["model_input"]["location"], "New York");
    assert_eq!(
        outcomes[6].events[1]["data"]["structured_content"]["humidity"],
        65
    );

    // Parallel: 8, 9, 10 sent together; 9 answers first with isError, then 8; 10 is cancelled.
    assert_eq!(
        lifecycle(&events, &by_id("9")[0])[2..],
        pairs(&[
            ("tool.invocation.failed", "failed"),
            ("tool.result.created", "failed")
        ])
    );
    let failed = &outcomes[10].events[0]["data"];
    assert_eq!(failed["error"]["message"], "Unknown state code: ZZ");
    assert_eq!(outcomes[10].events[1]["data"]["is_error"], true);
    assert_eq!(
        lifecycle(&events, &by_id("8")[0])[2..],
        pairs(&[
            ("tool.invocation.succeeded", "succeeded"),
            ("tool.result.created", "succeeded")
        ])
    );
    assert_eq!(outcomes[11].events[1]["data"]["_meta"]["cache"], "miss");
    assert_eq!(
        lifecycle(&events, &by_id("10")[0])[2..],
        pairs(&[("tool.invocation.canceled", "canceled")])
    );

    // A JSON-RPC error: unknown tool → invalid_arguments with the native error kept.
    let error = &outcomes[14].events[0]["data"]["error"];
    assert_eq!(error["error_class"], "invalid_arguments");
    assert_eq!(error["error_code"], "jsonrpc:-32602");
    assert_eq!(error["native_error_ref"]["message"], "Unknown tool: get_forecast");

    assert!(rejected(&outcomes[15]).contains("response 99 answers no tools/call"));
    assert!(rejected(&outcomes[16]).contains("params.name"));
    assert!(rejected(&outcomes[17]).contains("JSON-RPC"));
    assert_eq!(invocations_with(&events, "mcp_session_id", SESSION).len(), 7);

    // Progress by the call's _meta.progressToken.
    assert_eq!(
        lifecycle(&events, &by_id("13")[0]),
        pairs(&[
            ("tool.invocation.planned", "planned"),
            ("tool.invocation.started", "running"),
            ("tool.invocation.progress", "running"),
            ("tool.invocation.succeeded", "succeeded"),
            ("tool.result.created", "succeeded"),
        ])
    );
    let progress = &outcomes[21].events[0]["data"];
    assert_eq!(progress["sequence"], 1);
    assert_eq!(progress["percent"], 50.0);
    assert_eq!(progress["message"], "Fetched northern counties");
}
