//! Function calling: tools, parallel tool_calls with arguments as JSON strings, results by
//! tool_call_id, a malformed arguments string, repeated history and the Responses API items.

use toolledger_import::Format;

use crate::{all_events, import, invocations_with, lifecycle, pairs, rejected, shape};

#[test]
fn a_conversation_maps_parallel_calls_results_and_a_malformed_arguments_string() {
    let outcomes = import(Format::OpenAi, "openai/conversation.ndjson");
    assert_eq!(outcomes.len(), 11);
    assert_eq!(
        shape(&outcomes[0]),
        pairs(&[("tool.declared", ""), ("tool.declared", "")])
    );
    assert_eq!(outcomes[0].events[0]["data"]["tool_id"], "fn:get_weather");
    assert_eq!(outcomes[0].events[0]["data"]["input_contract"]["strict"], true);

    // Two parallel calls in one completion; arguments parsed from their JSON strings.
    assert_eq!(
        shape(&outcomes[1]),
        pairs(&[
            ("tool.invocation.planned", "planned"),
            ("tool.invocation.arguments_ready", "arguments_ready"),
            ("tool.invocation.planned", "planned"),
            ("tool.invocation.arguments_ready", "arguments_ready"),
        ])
    );
    let paris = &outcomes[1].events[1]["data"];
    assert_eq!(paris["model_input"]["location"], "Paris, France");
    assert_eq!(paris["native_call_id"], "call_12345xyz");
    let mapping = &paris["external_mappings"][0];
    assert_eq!(mapping["source"], "function_calling");
    assert_eq!(mapping["tool_call_id"], "call_12345xyz");
    assert_eq!(mapping["parallel_tool_calls"], true);
    assert_eq!(mapping["completion_id"], "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG");
    assert_eq!(outcomes[1].events[0]["time"], "2026-03-05T08:00:01.000Z");

    // Results arrive out of order, each by its tool_call_id.
    let events = all_events(&outcomes);
    for id in ["call_12345xyz", "call_67890abc"] {
        let invocation = invocations_with(&events, "tool_call_id", id);
        assert_eq!(invocation.len(), 1, "{id}");
        assert_eq!(
            lifecycle(&events, &invocation[0]),
            pairs(&[
                ("tool.invocation.planned", "planned"),
                ("tool.invocation.arguments_ready", "arguments_ready"),
                ("tool.invocation.succeeded", "succeeded"),
                ("tool.result.created", "succeeded"),
            ])
        );
    }
    assert_eq!(
        outcomes[2].events[1]["data"]["content"][0]["text"],
        "{\"temperature_c\": 18}"
    );

    // The malformed arguments string is kept verbatim and the call marked schema_parse_failed.
    assert_eq!(
        shape(&outcomes[4]),
        pairs(&[
            ("tool.invocation.planned", "planned"),
            ("tool.invocation.arguments_ready", "schema_parse_failed"),
        ])
    );
    let bad = &outcomes[4].events[1]["data"];
    assert!(
        bad["model_input"]
            .as_str()
            .unwrap()
            .starts_with("{\"to\": \"ana@example.com\"")
    );
    assert_eq!(bad["error"]["error_class"], "invalid_arguments");
    assert_eq!(bad["external_mappings"][0]["parallel_tool_calls"], false);
    assert!(outcomes[4].notes[0].contains("schema_parse_failed"));

    // A later request repeats the history: nothing new, nothing rejected.
    assert!(outcomes[6].is_ok() && outcomes[6].events.is_empty());

    assert!(rejected(&outcomes[7]).contains("call_unknown"));
    assert!(rejected(&outcomes[8]).contains("not a message"));

    // Responses API items.
    let lima = invocations_with(&events, "tool_call_id", "call_resp_01");
    assert_eq!(lifecycle(&events, &lima[0]).len(), 4);
}
