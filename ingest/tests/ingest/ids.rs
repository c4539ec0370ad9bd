//! The id grammar at ingest (`toolledger_wire::id`): control characters and ids over 1 KiB are
//! quarantined as `bad_id`, with a receipt naming where and never the value; every other id the
//! official schemas accept (spaces, `<`, `/`, `%`, Unicode, exactly 1 KiB) is appended as sent.

use async_nats::jetstream;
use serde_json::{Value, json};
use toolledger_testkit::NatsFixture;
use toolledger_wire::Mode;

use crate::pipeline::{Running, class_of, contract_streams, drained, id_of, ledger, publish};

/// A planned invocation of tenant `acme` whose ids are `invocation` and `session`.
fn planned(event_id: &str, invocation: &str, session: &str) -> Value {
    json!({"specversion": "1.0", "id": event_id, "source": "urn:ids-test", "type": "tool.invocation.planned",
        "tenant": "acme", "subject": invocation, "invocationid": invocation, "sessionid": session,
        "time": "2026-05-08T09:00:00Z",
        "data": {"schema_version": "0.2.0", "invocation_id": invocation, "tool_id": "notes.write",
            "session_id": session, "status": "planned", "created_at": "2026-05-08T09:00:00Z"}})
}

#[tokio::test]
async fn control_characters_and_ids_over_a_kib_are_bad_id_and_every_other_id_lands() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    contract_streams(&js).await;
    let dir = tempfile::tempdir().unwrap();
    let ingest = Running::start(&nats, dir.path());

    let too_long = "L".repeat(1025);
    let nul_event = planned("evt-nul\u{0}", "inv-fine-1", "sess-fine");
    let long_invocation = planned("evt-long", &too_long, "sess-fine");
    let tab_session = planned("evt-tab", "inv-fine-2", "sess\tion");
    let mut escape_in_data = planned("evt-esc", "inv-fine-3", "sess-fine");
    escape_in_data["data"]["retry_of"] = json!("inv-\u{1b}[31mred");
    // Each with the JSON Pointer its receipt must name.
    let refused = [
        (nul_event, "/id"),
        (long_invocation, "/subject"),
        (tab_session, "/sessionid"),
        (escape_in_data, "/data/retry_of"),
    ];
    let refused_events: Vec<Value> = refused.iter().map(|(e, _)| e.clone()).collect();
    publish(&js, &refused_events, Mode::Structured, false).await;

    let odd = "inv a<b>/c%2F d \"q\" 会話🦀";
    let odd_session = "sess <x>/y% z";
    let kib = "k".repeat(1024);
    let accepted = [
        planned("evt odd <1>/%", odd, odd_session),
        planned(&format!("evt-{}", "é".repeat(500)), &kib, "sess-fine"),
    ];
    // Binary mode too: the ids travel percent-encoded in `ce-*` headers.
    publish(&js, &accepted[..1], Mode::Binary, false).await;
    publish(&js, &accepted[1..], Mode::Structured, false).await;
    drained(&js).await;

    let stored = ledger(&js).await;
    let receipts: Vec<Value> = stored
        .iter()
        .filter(|e| class_of(e) == "toolledger.quarantine.recorded")
        .map(|e| e.event_json()["data"].clone())
        .collect();
    assert_eq!(receipts.len(), refused.len(), "{receipts:#?}");
    for (receipt, (_, pointer)) in receipts.iter().zip(&refused) {
        assert_eq!(receipt["reason"], "bad_id", "{receipt}");
        let detail = receipt["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("`{pointer}`")), "{detail}");
        // The receipt names the place and the rule, never the value.
        assert!(
            !detail.contains(&too_long[..64]) && !detail.contains("sess\t"),
            "{detail}"
        );
        // A rejected id is not copied into the ledger through the receipt's event_id either.
        assert!(receipt.get("event_id").is_none(), "{receipt}");
        assert_eq!(receipt["tenant"], "acme");
    }
    assert!(
        receipts[1]["detail"]
            .as_str()
            .unwrap()
            .contains("1025 bytes, over the 1024-byte limit"),
        "{}",
        receipts[1]
    );
    assert!(
        receipts[0]["detail"]
            .as_str()
            .unwrap()
            .contains("control character U+0000"),
        "{}",
        receipts[0]
    );

    let appended: Vec<&toolledger_wire::LedgerEntry> = stored
        .iter()
        .filter(|e| class_of(e) == "tool.invocation.planned")
        .collect();
    assert_eq!(
        appended.iter().map(|e| id_of(e)).collect::<Vec<_>>(),
        accepted
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    );
    let first = appended[0].event_json();
    assert_eq!(first["subject"], odd);
    assert_eq!(first["sessionid"], odd_session);
    assert_eq!(first["data"]["invocation_id"], odd);
    assert_eq!(appended[1].event_json()["data"]["invocation_id"], kib.as_str());
    ingest.stop().await;
}
