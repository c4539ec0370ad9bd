//! N-ACT: figures 2 and 3 (signatures, enum inputs), §6.1 versioning, §7 invocation and 5xx retries.

use toolledger_import::Format;

use crate::{all_events, import, invocations_with, lifecycle, pairs, rejected, shape};

const WEATHER: &str = "0479a45d-ad0a-49d4-94db-75edf00d2ca4";

#[test]
fn figures_2_and_3_declare_typed_inputs_and_keep_the_native_ids() {
    let outcomes = import(Format::Nact, "nact/figure2-3-signatures.json");
    assert_eq!(outcomes.len(), 1);
    assert_eq!(
        shape(&outcomes[0]),
        pairs(&[("tool.declared", ""), ("tool.declared", "")])
    );
    let weather = &outcomes[0].events[0]["data"];
    assert_eq!(weather["tool_id"], format!("nact:{WEATHER}"));
    assert_eq!(weather["name"], "Lookup Weather");
    assert_eq!(weather["version"], "1");
    assert_eq!(weather["external_mappings"][0]["source"], "nact");
    assert_eq!(weather["external_mappings"][0]["toolId"], WEATHER);
    assert_eq!(weather["external_mappings"][0]["version"], "1");
    let schema = &weather["input_contract"]["model_input_schema"];
    assert_eq!(schema["properties"]["City"]["type"], "string");
    assert_eq!(schema["required"], serde_json::json!(["City"]));
    assert_eq!(
        weather["annotations"]["tags"],
        serde_json::json!(["system", "retrievals"])
    );
    assert_eq!(
        weather["output_contract"]["output_parameters"][0]["name"],
        "Temperature in Fahrenheit"
    );

    let flight = &outcomes[0].events[1]["data"]["input_contract"]["model_input_schema"];
    assert_eq!(
        flight["properties"]["Flight Class"]["enum"],
        serde_json::json!(["ECONOMY", "PREMIUM_ECONOMY", "BUSINESS", "FIRST"])
    );
    assert_eq!(flight["properties"]["Passengers"]["type"], "integer");
    assert_eq!(flight["properties"]["Passengers"]["maximum"], 9);
    assert_eq!(flight["properties"]["Refundable"]["type"], "boolean");
    // `required` defaults to true; Refundable says false.
    assert_eq!(
        flight["required"],
        serde_json::json!(["Flight Class", "Passengers"])
    );
}

#[test]
fn a_session_keeps_every_version_links_5xx_retries_and_pins_versions() {
    let outcomes = import(Format::Nact, "nact/session.ndjson");
    assert_eq!(outcomes.len(), 8);

    // The versions listing comes newest first (§6.3); they are declared oldest first.
    let versions: Vec<&str> = outcomes[0]
        .events
        .iter()
        .map(|e| e["data"]["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["1", "2"]);
    assert_eq!(
        outcomes[0].events[0]["data"]["namespace"],
        "https://api.weather.example"
    );

    let ok = pairs(&[
        ("tool.invocation.planned", "planned"),
        ("tool.invocation.started", "running"),
        ("tool.invocation.succeeded", "succeeded"),
        ("tool.result.created", "succeeded"),
    ]);
    // §7's own example: Omaha, 80 °F; unpinned, so the latest version is recorded.
    assert_eq!(shape(&outcomes[1]), ok);
    let omaha = &outcomes[1].events[0]["data"];
    assert_eq!(omaha["model_input"]["City"], "Omaha, Nebraska");
    assert_eq!(omaha["external_mappings"][0]["version"], "2");
    assert_eq!(omaha["external_mappings"][0]["version_pinned"], false);
    assert_eq!(
        outcomes[1].events[3]["data"]["structured_content"]["output_parameters"][0]["value"],
        80
    );

    // 503, then the executor's retry with the same inputs.
    assert_eq!(
        shape(&outcomes[2]),
        pairs(&[
            ("tool.invocation.planned", "planned"),
            ("tool.invocation.started", "running"),
            ("tool.invocation.failed", "failed"),
        ])
    );
    let failed = &outcomes[2].events[2]["data"];
    assert_eq!(failed["error"]["error_class"], "dependency_unavailable");
    assert_eq!(failed["error"]["error_code"], "http_503");
    assert_eq!(failed["error"]["recoverability"], "retryable");
    assert_eq!(shape(&outcomes[3]), ok);
    let retry = &outcomes[3].events[0]["data"];
    assert_eq!(retry["retry_of"], failed["invocation_id"]);
    assert_eq!(retry["attempt"], 2);

    // Version-pinned call, with the log's request id as the native call id.
    assert_eq!(shape(&outcomes[4]), ok);
    let pinned = &outcomes[4].events[0]["data"];
    assert_eq!(pinned["external_mappings"][0]["version"], "1");
    assert_eq!(pinned["external_mappings"][0]["version_pinned"], true);
    assert_eq!(pinned["native_call_id"], "req-7f3a");

    assert!(rejected(&outcomes[5]).contains("version 1 after version 2"));
    assert!(rejected(&outcomes[6]).contains("positive integer"));
    assert!(rejected(&outcomes[7]).contains(":invoke"));

    // Lookup by toolId + version finds exactly the calls made against that version.
    let events = all_events(&outcomes);
    let v1 = invocations_with(&events, "version", "1");
    assert_eq!(v1, [pinned["invocation_id"].as_str().unwrap()]);
    assert_eq!(invocations_with(&events, "toolId", WEATHER).len(), 4);
    assert_eq!(
        lifecycle(&events, retry["invocation_id"].as_str().unwrap()).len(),
        4
    );
}

#[test]
fn a_changed_signature_must_change_its_version() {
    let mut importer =
        toolledger_import::Importer::new(Format::Nact, &toolledger_import::Options::new("acme")).unwrap();
    let sig = serde_json::json!({"toolId": "t-1", "name": "n", "description": "d", "version": 1,
        "input_parameters": [{"name": "a"}]});
    assert!(importer.map_record("1", &sig).is_ok());
    let same = importer.map_record("2", &sig);
    assert!(
        same.is_ok() && same.events.is_empty(),
        "the same version again adds nothing"
    );
    let mut changed = sig.clone();
    changed["description"] = "other".into();
    assert!(rejected(&importer.map_record("3", &changed)).contains("changed without a new version"));
    let mut bad_enum = sig.clone();
    bad_enum["version"] = 2.into();
    bad_enum["input_parameters"] = serde_json::json!([{"name": "e", "type": "enum"}]);
    assert!(rejected(&importer.map_record("4", &bad_enum)).contains("allowed-values"));
}
