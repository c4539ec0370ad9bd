//! Issue 28's secret shapes after a whole run: the shape corpus (`toolledger_testkit::secrets`) sent
//! to `toolledger up` in both modes, accepted and rejected, with `up` logging at debug level, then
//! exported to Parquet. No secret is in `up`'s output or logs, the nats-server log `up` writes, the
//! exporter's output, the data directory (projection, identity index, blobs; not the NATS store,
//! which keeps deleted inbound messages' bytes until it compacts) nor any value of any Parquet table
//! read back by pyarrow; the ordinary text that names credentials comes back intact from the
//! Parquet archive and the API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use toolledger_testkit::ChildProcess;
use toolledger_testkit::secrets::{SecretShapes, ordinary_event, ordinary_texts, shapes_event};
use toolledger_wire::Mode;

use crate::fixture::{Up, files_with, python_json};
use crate::query::{ADMIN_TOKEN, request};
use crate::toolledger;

/// Every string value of every Parquet file under `prefix`, decoded by pyarrow (binary values, such
/// as an event's `entry`, as UTF-8); a value that holds JSON (an entry, a data object) is given with
/// every string inside it too.
fn parquet_strings(prefix: &Path) -> Vec<String> {
    let script = r#"
import json, pathlib, sys
import pyarrow.parquet as pq
found = []
def strings(value):
    if isinstance(value, str):
        found.append(value)
        if value[:1] in "{[":
            try:
                strings(json.loads(value))
            except ValueError:
                pass
    elif isinstance(value, (bytes, bytearray)):
        strings(value.decode("utf-8", "replace"))
    elif isinstance(value, dict):
        for v in value.values():
            strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            strings(v)
files = sorted(pathlib.Path(sys.argv[1]).rglob("*.parquet"))
for path in files:
    strings(pq.read_table(path).to_pylist())
print(json.dumps({"files": [str(f) for f in files], "strings": found}))
"#;
    let read = python_json(script, &[prefix.to_str().unwrap()]);
    let tables: Vec<&str> = read["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        tables.iter().any(|f| f.contains("/events/")) && tables.iter().any(|f| f.contains("/invocations/")),
        "the archive holds events and invocations: {tables:?}"
    );
    serde_json::from_value(read["strings"].clone()).unwrap()
}

#[test]
fn no_secret_shape_is_in_logs_the_projection_or_parquet_and_ordinary_text_is_intact() {
    let dir = tempfile::tempdir().unwrap();
    // Debug logs: whatever ingest or the projector says of an event, it says here.
    let up = Up::start(
        dir.path(),
        "[ledger]\ncheckpoint_every = 1\n",
        &[("TOOLLEDGER_TELEMETRY__LOG_FILTER", "debug")],
    );
    let SecretShapes { event, secrets } = shapes_event();
    let mut binary = event.clone();
    binary["id"] = json!("ev-shapes-binary");
    // Rejected (a schema violation) in binary mode: quarantined, with a receipt in the ledger.
    let mut violation = event.clone();
    violation["id"] = json!("ev-violation-binary");
    violation["data"]["status"] = json!(7);
    up.publish(&[event, ordinary_event()], Mode::Structured);
    let ledger = up.publish(&[binary, violation], Mode::Binary);
    assert_eq!(ledger, 4, "three events and a quarantine receipt");

    // Ordinary text comes back from the API as it went in; the secrets do not.
    for (invocation, secret_free) in [("inv-8", true), ("inv-9", false)] {
        let reply = request(
            up.api,
            "GET",
            &format!("/v1/invocations/{invocation}?tenant=acme"),
            Some(ADMIN_TOKEN),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        for secret in &secrets {
            assert!(!reply.body.contains(secret), "{secret} served: {}", reply.body);
        }
        if secret_free {
            assert_eq!(
                reply.json()["inputs"]["model_input"],
                ordinary_event()["data"]["model_input"]
            );
        }
    }

    let prefix = dir.path().join("parquet");
    let mut export = ChildProcess::spawn(
        toolledger(),
        [
            "--config",
            up.config.to_str().unwrap(),
            "export",
            "--nats-url",
            &up.nats_url,
            "--prefix",
            prefix.to_str().unwrap(),
            "--until-caught-up",
        ],
        &[("TOOLLEDGER_TELEMETRY__LOG_FILTER", "debug")],
    );
    let exported = export
        .wait_timeout(Duration::from_secs(120))
        .expect("export finishes");
    assert!(exported.success(), "{}\n{}", export.stdout(), export.stderr());

    let data = up.data.clone();
    let up = up.stop();
    let logs = [
        ("up's output", up.stdout()),
        ("up's log", up.stderr()),
        ("the exporter's output", export.stdout()),
        ("the exporter's log", export.stderr()),
        (
            "the nats-server log",
            std::fs::read_to_string(data.join("logs/nats-server.log")).unwrap(),
        ),
    ];
    assert!(logs[1].1.len() > 10_000, "debug logs were written");
    let strings = parquet_strings(&prefix);
    for secret in &secrets {
        for (what, text) in &logs {
            assert!(!text.contains(secret), "{secret} in {what}");
        }
        let found: Vec<PathBuf> = files_with(&data, secret)
            .into_iter()
            .filter(|f| !f.starts_with(data.join("nats")))
            .collect();
        assert_eq!(found, Vec::<PathBuf>::new(), "{secret} in the data directory");
        assert!(
            !strings.iter().any(|s| s.contains(secret)),
            "{secret} in the Parquet archive"
        );
    }
    // The scrubbed text is archived with its markers, and the ordinary text as it was sent.
    assert!(
        strings
            .iter()
            .any(|s| s.starts_with("db:\n  host: db.internal\n  password: [scrubbed:hmac-sha256:")),
        "the YAML text is archived with its marker"
    );
    for text in ordinary_texts() {
        assert!(
            strings.contains(&text),
            "{text:?} is not in the Parquet archive intact"
        );
    }
}
