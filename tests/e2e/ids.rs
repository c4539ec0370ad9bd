//! Ids end to end (`toolledger_wire::id`): what ingest takes, `/v1` and the CLI serve. Under `up`, an
//! invocation whose ids hold a space, `<`, `/`, `%`, quotes and Unicode, and one whose id is exactly
//! 1 KiB, are appended, reconstructed by `/v1/invocations/{id}` (percent-encoded), found by session
//! and tool, bundled by the API and by `toolledger bundle`, and shown by `toolledger show`; ids with a
//! control character or over 1 KiB are quarantined as `bad_id` and refused by the API.

use std::time::Duration;

use serde_json::{Value, json};
use toolledger_testkit::ChildProcess;

use crate::fixture::{Up, projected};
use crate::query::{ADMIN_TOKEN, request};
use crate::toolledger;

/// Every byte but RFC 3986's unreserved characters as `%XX`: how a client puts any id in a URL.
fn encoded(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn event(id: &str, class: &str, invocation: &str, session: &str, data: Value) -> Value {
    json!({"specversion": "1.0", "id": id, "source": "urn:ids-e2e", "type": class, "tenant": "acme",
        "subject": invocation, "invocationid": invocation, "sessionid": session,
        "time": "2026-05-08T09:00:00Z", "data": data})
}

/// A planned invocation of `tool` and its result, their event ids starting with `tag`.
fn invocation(tag: &str, invocation: &str, session: &str, tool: &str) -> Vec<Value> {
    vec![
        event(
            &format!("{tag} planned"),
            "tool.invocation.planned",
            invocation,
            session,
            json!({"schema_version": "0.2.0", "invocation_id": invocation, "tool_id": tool,
                "session_id": session, "status": "planned", "created_at": "2026-05-08T09:00:00Z"}),
        ),
        event(
            &format!("{tag} result"),
            "tool.result.created",
            invocation,
            session,
            json!({"schema_version": "0.2.0", "result_id": format!("{tag} res"),
                "invocation_id": invocation, "status": "succeeded", "is_error": false,
                "created_at": "2026-05-08T09:00:01Z", "content": [{"type": "text", "text": "ok"}]}),
        ),
    ]
}

#[test]
fn every_id_ingest_takes_is_served_by_the_api_and_the_cli_and_bad_ones_are_refused_with_a_reason() {
    const ODD: &str = "inv a<b>/c%2F d \"q\" 'x' OR '1'='1 会話🦀";
    const SESSION: &str = "sess <x>/y% z";
    const TOOL: &str = "notes/write <v2>";
    let kib = "é".repeat(512);
    assert_eq!(kib.len(), 1024);

    let dir = tempfile::tempdir().unwrap();
    // A checkpoint after every entry, so a bundle can be made as soon as the entries are in.
    let up = Up::start(dir.path(), "[ledger]\ncheckpoint_every = 1\n", &[]);
    let (api, data, nats_url) = (up.api, up.data.clone(), up.nats_url.clone());
    let config = up.config.clone();
    let config_arg = config.to_str().unwrap();

    let mut accepted = invocation("evt <odd>/%", ODD, SESSION, TOOL);
    accepted.extend(invocation("evt-kib", &kib, SESSION, TOOL));
    let refused = [
        invocation("evt-nul", "inv-with-nul\u{0}", SESSION, TOOL).remove(0),
        invocation("evt-long", &"L".repeat(1025), SESSION, TOOL).remove(0),
    ];
    // The accepted events and a receipt per refused one.
    let events: Vec<Value> = accepted.iter().chain(&refused).cloned().collect();
    let ledger = up.publish(&events, toolledger_wire::Mode::Binary);
    assert_eq!(ledger, (accepted.len() + refused.len()) as u64);

    // Refused at ingest, each with its machine-readable reason and where, never the value.
    let receipts = projected(
        &data,
        "SELECT reason || ' ' || detail FROM quarantine_receipts ORDER BY seq",
    );
    assert_eq!(receipts.len(), 2, "{receipts:?}");
    assert!(
        receipts[0].starts_with("bad_id ") && receipts[0].contains("`/subject`: control character U+0000"),
        "{receipts:?}"
    );
    assert!(
        receipts[1].starts_with("bad_id ") && receipts[1].contains("1025 bytes, over the 1024-byte limit"),
        "{receipts:?}"
    );

    // Served by /v1, percent-encoded.
    let get = |path: &str| request(api, "GET", path, Some(ADMIN_TOKEN));
    for id in [ODD, kib.as_str()] {
        let reply = get(&format!("/v1/invocations/{}?tenant=acme", encoded(id)));
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
        let body = reply.json();
        assert_eq!(body["invocation_id"], id);
        assert_eq!(body["session_id"], SESSION);
        assert_eq!(body["tool_id"], TOOL);
        let reply = get(&format!("/v1/invocations/{}/bundle?tenant=acme", encoded(id)));
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
    }
    let reply = get(&format!("/v1/sessions/{}?tenant=acme", encoded(SESSION)));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = get(&format!(
        "/v1/invocations?tenant=acme&session_id={}&tool_id={}",
        encoded(SESSION),
        encoded(TOOL)
    ));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let mut found: Vec<String> = reply.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["invocation_id"].as_str().unwrap().to_owned())
        .collect();
    found.sort();
    let mut want = vec![ODD.to_owned(), kib.clone()];
    want.sort();
    assert_eq!(found, want);
    // Outside the grammar: 400 naming the parameter.
    for path in [
        "/v1/invocations/inv-with-nul%00?tenant=acme".to_owned(),
        format!("/v1/invocations/{}?tenant=acme", "L".repeat(1025)),
        "/v1/invocations?tenant=acme&session_id=sess%0A".to_owned(),
    ] {
        let reply = get(&path);
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], "invalid_parameter", "{path}");
    }

    // Served by the CLI: `show` reconstructs, `bundle` bundles and the bundle verifies.
    let tool = |args: &[&str]| {
        let mut child = ChildProcess::spawn(toolledger(), [&["--config", config_arg], args].concat(), &[]);
        let status = child
            .wait_timeout(Duration::from_secs(120))
            .expect("the tool finishes");
        (status.success(), child.stdout(), child.stderr())
    };
    let (ok, out, err) = tool(&["show", ODD, "--tenant", "acme", "--json"]);
    assert!(ok, "{out}\n{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["invocation_id"], ODD);
    let bundle = dir.path().join("odd.bundle.json");
    let (ok, out, err) = tool(&[
        "bundle",
        "--nats-url",
        &nats_url,
        "--invocation",
        ODD,
        "--tenant",
        "acme",
        "--out",
        bundle.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    let key = data.join("keys/checkpoint.pub");
    let (ok, out, err) = tool(&[
        "verify-bundle",
        bundle.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{out}\n{err}");
    let verdict: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(verdict["report"]["selection"]["id"], ODD);
    assert_eq!(verdict["report"]["entries"].as_array().unwrap().len(), 2);
    let (ok, out, err) = tool(&["show", "inv-with-nul\u{1}", "--tenant", "acme"]);
    assert!(!ok && err.contains("control character"), "{out}\n{err}");

    up.stop();
}
