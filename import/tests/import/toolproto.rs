//! Tool Protocol: the specification's own tool schemas (sentimentAnalysis, weatherCheck with an
//! Activity, the composed greetUser) and calls, latent and explicit, with their meta-properties.

use toolledger_import::Format;

use crate::{all_events, import, invocations_with, pairs, rejected, shape};

#[test]
fn tool_schemas_declare_latent_and_explicit_tools() {
    let outcomes = import(Format::ToolProto, "toolproto/tools.json");
    assert_eq!(outcomes.len(), 3);
    let sentiment = &outcomes[0].events[0]["data"];
    assert_eq!(sentiment["tool_id"], "toolproto:sentimentAnalysis");
    assert_eq!(sentiment["description"], "Analyzes text sentiment");
    let input = &sentiment["input_contract"]["model_input_schema"]["properties"];
    assert!(input.get("text").is_some() && input.get("_tool").is_none() && input.get("_output").is_none());
    assert_eq!(
        sentiment["output_contract"]["output_schema"]["properties"]["confidence"]["type"],
        "number"
    );
    assert_eq!(sentiment["external_mappings"][0]["execution"], "unresolved");

    let weather = &outcomes[1].events[0]["data"];
    assert_eq!(weather["tool_kind"], "function");
    assert_eq!(weather["external_mappings"][0]["execution"], "explicit");
    assert_eq!(weather["external_mappings"][0]["activity"], "weatherCheck");
    assert_eq!(
        weather["input_contract"]["model_input_schema"]["required"],
        serde_json::json!(["location"])
    );

    // The composed request schema of 004: its call item is the greetUser tool.
    assert_eq!(outcomes[2].events[0]["data"]["tool_id"], "toolproto:greetUser");
    assert!(outcomes[2].notes[0].contains("no _output"));
}

#[test]
fn calls_record_latent_versus_explicit_execution_and_meta_properties() {
    let mut options = toolledger_import::Options::new("acme");
    options.session = Some("agent-run-1".to_owned());
    let mut importer = toolledger_import::Importer::new(Format::ToolProto, &options).unwrap();
    let read = |path: &str| std::fs::read(crate::fixture(path)).unwrap();
    let declared = importer.map_file("tools.json", &read("toolproto/tools.json"));
    assert!(declared.iter().all(|o| o.is_ok()));
    let outcomes = importer.map_file("calls.ndjson", &read("toolproto/calls.ndjson"));
    assert_eq!(outcomes.len(), 6);

    let latent = pairs(&[
        ("tool.invocation.planned", "planned"),
        ("tool.invocation.started", "running"),
        ("tool.invocation.succeeded", "succeeded"),
        ("tool.result.created", "succeeded"),
    ]);
    // The example LLM output: the model filled _output itself → latent execution.
    assert_eq!(shape(&outcomes[0]), latent);
    let data = &outcomes[0].events[0]["data"];
    assert_eq!(data["execution"], "latent");
    assert_eq!(
        data["model_input"],
        serde_json::json!({"text": "This is the best!"})
    );
    assert_eq!(
        outcomes[0].events[3]["data"]["structured_content"]["sentiment"],
        "positive"
    );

    // Two calls in one response: weatherCheck has an Activity (explicit, no outcome yet);
    // greetUser is latent with its _output.
    let shape1 = shape(&outcomes[1]);
    assert_eq!(shape1[..2], latent[..2]);
    assert_eq!(shape1[2..], latent);
    assert_eq!(outcomes[1].events[0]["data"]["execution"], "explicit");
    assert_eq!(
        outcomes[1].events[0]["data"]["reasoning_for_call"],
        "The user asked about Boston's weather."
    );

    // An executed explicit call with every meta-property.
    assert_eq!(shape(&outcomes[2]), latent);
    let lima = &outcomes[2].events[0]["data"];
    assert_eq!(lima["native_call_id"], "call-17");
    let mapping = &lima["external_mappings"][0];
    assert_eq!(mapping["execution"], "explicit");
    assert_eq!(mapping["delegate"], "weather-sandbox");
    assert_eq!(mapping["output_path"], "trip.weather.lima");
    assert_eq!(mapping["instance"], "agent-2");
    assert_eq!(outcomes[2].events[2]["time"], "2026-03-06T15:00:00.420Z");
    assert_eq!(
        outcomes[2].events[3]["data"]["structured_content"]["conditions"],
        "overcast"
    );

    assert_eq!(
        shape(&outcomes[3])[2..],
        pairs(&[("tool.invocation.failed", "failed")])
    );
    assert!(rejected(&outcomes[4]).contains("_tool"));
    assert!(rejected(&outcomes[5]).contains("calls[0] has no _tool"));

    let events = all_events(&outcomes);
    assert_eq!(invocations_with(&events, "execution", "latent").len(), 2);
    assert_eq!(invocations_with(&events, "call_id", "call-18").len(), 1);
}
