//! The query API and CLI end to end: generated sessions of two tenants published to a real NATS
//! (`toolledger up`: nats-server, ingest, projector, API), then every endpoint compared with the
//! generator's truth and every response body validated against `docs/openapi.json`. Bad input,
//! missing or foreign tokens get 4xx with the error body. The CLI (`show`, `session`, `search`,
//! `stats`) is checked for tables, `--json` and exit codes; `up --demo` for its promise.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use toolledger_schemas::generator::{Generated, GeneratorConfig, generate};
use toolledger_testkit::{ChildProcess, nats_server_bin, workspace_root};

use crate::fixture::Up;
use crate::toolledger;

pub(crate) const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789abcdef";
pub(crate) const ACME_TOKEN: &str = "acme-token-for-tests-0123456789abcdef";

/// A response of the tiny client below.
pub(crate) struct Reply {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`; the API answers with a content length.
pub(crate) fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> Reply {
    send(addr, method, path, token, "", "")
}

/// `POST /v1/sql` with a JSON `body`.
pub(crate) fn post_sql(addr: SocketAddr, token: Option<&str>, body: &str) -> Reply {
    send(
        addr,
        "POST",
        "/v1/sql",
        token,
        "Content-Type: application/json\r\n",
        body,
    )
}

/// A request with extra header lines (each ending in CRLF) and a body. Streamed replies come
/// chunked (HTTP/1.1 transfer coding) and are de-chunked here.
pub(crate) fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &str,
    body: &str,
) -> Reply {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, tail) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push_str(&tail[..size]);
        rest = &tail[size + 2..];
    }
}

/// Validators for the component schemas of docs/openapi.json.
struct Contract {
    document: Value,
    validators: BTreeMap<String, jsonschema::Validator>,
}

impl Contract {
    fn load() -> Self {
        let text = std::fs::read_to_string(workspace_root().join("docs/openapi.json")).unwrap();
        let document: Value = serde_json::from_str(&text).unwrap();
        let mut validators = BTreeMap::new();
        for name in document["components"]["schemas"].as_object().unwrap().keys() {
            let schema = serde_json::json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$ref": format!("#/components/schemas/{name}"),
                "components": document["components"],
            });
            validators.insert(name.clone(), jsonschema::validator_for(&schema).unwrap());
        }
        Self { document, validators }
    }

    fn check(&self, schema: &str, value: &Value) {
        let validator = &self.validators[schema];
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{schema} does not hold: {errors:#?}\n{value:#}"
        );
    }

    /// Checks an error reply: the status, the body shape, and the code.
    fn error(&self, reply: &Reply, status: u16, code: &str) -> Value {
        assert_eq!(reply.status, status, "{}", reply.body);
        let body = reply.json();
        self.check("Error", &body);
        assert_eq!(body["error"]["code"], code, "{body}");
        body
    }
}

pub(crate) fn config_file(dir: &Path) -> std::path::PathBuf {
    let digest = |t: &str| toolledger_query::token_digest(t);
    let text = format!(
        r#"data_dir = "{data}"
[nats]
server_bin = "{bin}"
listen = "127.0.0.1:0"
[telemetry]
metrics_listen = "127.0.0.1:0"
log_filter = "warn"
log_format = "text"
[api]
listen = "127.0.0.1:0"
[[api.tokens]]
name = "admin"
sha256 = "{admin}"
admin = true
[[api.tokens]]
name = "acme-reader"
sha256 = "{acme}"
tenants = ["acme"]
"#,
        data = dir.join("data").display(),
        bin = nats_server_bin().display(),
        admin = digest(ADMIN_TOKEN),
        acme = digest(ACME_TOKEN),
    );
    let path = dir.join("toolledger.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The text after `marker` on the first line holding it, up to `end`.
pub(crate) fn after<'a>(stdout: &'a str, marker: &str, end: &str) -> &'a str {
    let line = stdout.lines().find(|l| l.contains(marker)).unwrap();
    let rest = &line[line.find(marker).unwrap() + marker.len()..];
    rest.split(end).next().unwrap()
}

/// The system under test, loaded with generated sessions.
pub(crate) struct Loaded {
    pub(crate) up: ChildProcess,
    pub(crate) api: SocketAddr,
    pub(crate) nats_url: String,
    pub(crate) config: std::path::PathBuf,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) generated: Generated,
}

pub(crate) fn load() -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(dir.path(), "", &[]);
    let generated = generate(&GeneratorConfig {
        seed: 11,
        sessions: 4,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        extra_invocations: 2,
        plant_anomalies: true,
        ..GeneratorConfig::default()
    });
    up.publish(&generated.events, toolledger_wire::Mode::Binary);
    Loaded {
        up: up.child,
        api: up.api,
        nats_url: up.nats_url,
        config: up.config,
        dir,
        generated,
    }
}

/// `got` holds every id of `want`, and anything more is an invocation a planted anomaly made
/// (an orphan event creates one the scenario never planned).
fn assert_matches(got: &BTreeSet<String>, want: &BTreeSet<String>, planted: &BTreeSet<String>, what: &str) {
    assert!(
        want.is_subset(got),
        "{what}: missing {:?}",
        want.difference(got).collect::<Vec<_>>()
    );
    let extra: Vec<&String> = got.difference(want).filter(|id| !planted.contains(*id)).collect();
    assert!(extra.is_empty(), "{what}: unexpected {extra:?}");
}

fn contains_scrubbed(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("$scrubbed") || map.values().any(contains_scrubbed),
        Value::Array(items) => items.iter().any(contains_scrubbed),
        _ => false,
    }
}

fn ids(items: &Value, key: &str) -> BTreeSet<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

/// Follows `next_cursor` through every page, validating each.
fn all_pages(contract: &Contract, api: SocketAddr, path: &str, schema: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = match &cursor {
            Some(c) => format!("{path}{sep}cursor={c}"),
            None => path.to_owned(),
        };
        let reply = request(api, "GET", &url, Some(ADMIN_TOKEN));
        assert_eq!(reply.status, 200, "{url}: {}", reply.body);
        let page = reply.json();
        contract.check(schema, &page);
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return items,
        }
    }
}

#[test]
fn api_and_cli_match_the_generator_truth_and_refuse_bad_input() {
    let mut loaded = load();
    let api = loaded.api;
    let contract = Contract::load();
    let truth = &loaded.generated.truth;
    assert!(contract.document["paths"]["/v1/invocations/{invocation_id}"].is_object());
    let event_time: BTreeMap<&str, &str> = loaded
        .generated
        .events
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e["time"].as_str().unwrap()))
        .collect();

    // Reconstruct every invocation and compare it with what the generator meant to happen.
    let mut compared = 0;
    for inv in &truth.invocations {
        let path = format!("/v1/invocations/{}?tenant={}", inv.invocation_id, inv.tenant);
        let reply = request(api, "GET", &path, Some(ADMIN_TOKEN));
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let r = reply.json();
        contract.check("Reconstruction", &r);
        assert_eq!(r["tenant"], inv.tenant.as_str());
        assert_eq!(r["session_id"], inv.session_id.as_str());
        assert_eq!(r["tool_id"], inv.tool_id.as_str());
        let event_ids: BTreeSet<String> = ids(&r["timeline"], "event_id");
        let expected: BTreeSet<String> = inv.event_ids.iter().cloned().collect();
        assert_eq!(event_ids, expected, "{}: timeline events", inv.invocation_id);
        let seqs: Vec<i64> = r["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "timeline in ledger order");
        if inv.anomalies.is_empty() {
            assert_eq!(r["state"], inv.final_state.as_str(), "{}", inv.invocation_id);
            assert_eq!(r["terminal"], inv.terminal);
            let transitions: Vec<(String, String)> = r["timeline"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["transition"].is_object())
                .map(|e| {
                    (
                        e["event_id"].as_str().unwrap().to_owned(),
                        e["transition"]["to"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            // The truth lists every event that sets a state; the ledger records a transition only when
            // the state changes.
            let mut expected: Vec<(String, String)> = Vec::new();
            for t in &inv.transitions {
                if expected.last().is_none_or(|(_, last)| *last != t.state) {
                    expected.push((t.event_id.clone(), t.state.clone()));
                }
            }
            assert_eq!(transitions, expected, "{}: transitions", inv.invocation_id);
        }
        for (name, value) in [
            ("model_input", &inv.inputs.model_input),
            ("observable_input", &inv.inputs.observable_input),
            ("permission_input", &inv.inputs.permission_input),
            ("call_input", &inv.inputs.call_input),
        ] {
            if let Some(value) = value
                && !contains_scrubbed(&r["inputs"][name])
            {
                assert_eq!(&r["inputs"][name], value, "{}: {name}", inv.invocation_id);
            }
        }
        let mutations: Vec<(String, String, String, String, Value)> = r["mutations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["source"].as_str().unwrap().to_owned(),
                    m["source_id"].as_str().unwrap().to_owned(),
                    m["from_input"].as_str().unwrap_or("").to_owned(),
                    m["to_input"].as_str().unwrap_or("").to_owned(),
                    m["changed_fields"].clone(),
                )
            })
            .collect();
        let expected: Vec<(String, String, String, String, Value)> = inv
            .mutations
            .iter()
            .map(|m| {
                (
                    m.source.clone(),
                    m.source_id.clone(),
                    m.from.clone(),
                    m.to.clone(),
                    serde_json::json!(m.changed_fields),
                )
            })
            .collect();
        assert_eq!(mutations, expected, "{}: mutations", inv.invocation_id);
        // A mutation whose new value is known shows a diff naming exactly the changed fields.
        for m in r["mutations"].as_array().unwrap() {
            if let Some(diff) = m["diff"].as_array() {
                let top: BTreeSet<String> = diff
                    .iter()
                    .map(|c| {
                        c["path"]
                            .as_str()
                            .unwrap()
                            .split('/')
                            .nth(1)
                            .unwrap_or("")
                            .to_owned()
                    })
                    .collect();
                let fields: BTreeSet<String> = m["changed_fields"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_str().unwrap().to_owned())
                    .collect();
                assert_eq!(top, fields, "{}: diff of {}", inv.invocation_id, m["source_id"]);
            }
        }
        let decisions: Vec<(String, String)> = r["permission_decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["decision_id"].as_str().unwrap().to_owned(),
                    d["behavior"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = inv
            .permission_decisions
            .iter()
            .map(|d| (d.decision_id.clone(), d.behavior.clone()))
            .collect();
        assert_eq!(decisions, expected, "{}: decisions", inv.invocation_id);
        let hooks: BTreeSet<(String, String)> = r["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h["hook_id"].as_str().unwrap().to_owned(),
                    h["hook_event"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected: BTreeSet<(String, String)> = inv
            .hooks
            .iter()
            .map(|h| (h.hook_id.clone(), h.hook_event.clone()))
            .collect();
        assert_eq!(hooks, expected, "{}: hooks", inv.invocation_id);
        assert_eq!(r["progress"].as_array().unwrap().len(), inv.progress_count);
        if let Some(result) = &inv.result {
            let finals: Vec<&Value> = r["results"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["kind"] == "final")
                .collect();
            assert_eq!(finals[0]["result_id"], result.result_id.as_str());
            assert_eq!(finals[0]["status"], result.status.as_str());
        }
        assert_eq!(
            r["error"]["class"].as_str(),
            inv.error_class.as_deref(),
            "{}: error class",
            inv.invocation_id
        );
        if inv.error_class.is_some() {
            assert!(
                r["error"]["retry"]["guidance"]
                    .as_str()
                    .is_some_and(|g| !g.is_empty())
            );
        }
        assert_eq!(r["retry_of"].as_str(), inv.retry_of.as_deref());
        compared += 1;
    }
    assert!(compared >= 40, "compared {compared} invocations");

    let planted: BTreeSet<String> = truth
        .anomalies
        .iter()
        .filter_map(|a| a.invocation_id.clone())
        .chain(
            truth
                .invocations
                .iter()
                .filter(|i| !i.anomalies.is_empty())
                .map(|i| i.invocation_id.clone()),
        )
        .collect();

    // Sessions, paged two at a time, against the truth; each session's timeline and invocations.
    for tenant in ["acme", "globex"] {
        let sessions = all_pages(
            &contract,
            api,
            &format!("/v1/sessions?tenant={tenant}&limit=1"),
            "SessionPage",
        );
        let expected: BTreeSet<String> = truth
            .sessions
            .iter()
            .filter(|s| s.tenant == tenant)
            .map(|s| s.session_id.clone())
            .collect();
        assert_eq!(
            ids(&Value::from(sessions.clone()), "session_id"),
            expected,
            "{tenant} sessions"
        );
        for s in truth.sessions.iter().filter(|s| s.tenant == tenant) {
            let reply = request(
                api,
                "GET",
                &format!("/v1/sessions/{}?tenant={tenant}&limit=1000", s.session_id),
                Some(ADMIN_TOKEN),
            );
            assert_eq!(reply.status, 200, "{}", reply.body);
            let timeline = reply.json();
            contract.check("SessionTimeline", &timeline);
            let expected: BTreeSet<String> = s.invocation_ids.iter().cloned().collect();
            assert_matches(
                &ids(&timeline["invocations"], "invocation_id"),
                &expected,
                &planted,
                "session",
            );
            assert_eq!(timeline["session"]["event_count"], s.event_count as i64);
            assert_eq!(
                timeline["events"]["items"].as_array().unwrap().len(),
                s.event_count
            );
            assert_eq!(timeline["session"]["first_time"], s.started_at.as_str());
            // NDJSON: one TimelineEvent per line, the next page's cursor in a header.
            let nd = request(
                api,
                "GET",
                &format!(
                    "/v1/sessions/{}?tenant={tenant}&limit=5&format=ndjson",
                    s.session_id
                ),
                Some(ADMIN_TOKEN),
            );
            assert_eq!(nd.header("content-type"), Some("application/x-ndjson"));
            assert_eq!(nd.body.lines().count(), 5);
            for line in nd.body.lines() {
                contract.check("TimelineEvent", &serde_json::from_str(line).unwrap());
            }
            assert!(nd.header("x-next-cursor").is_some());
        }
    }

    // Search by each filter, against the truth.
    let search = |query: &str| -> BTreeSet<String> {
        ids(
            &Value::from(all_pages(
                &contract,
                api,
                &format!("/v1/invocations?{query}&limit=7"),
                "InvocationPage",
            )),
            "invocation_id",
        )
    };
    let expect = |f: &dyn Fn(&toolledger_schemas::generator::InvocationTruth) -> bool| -> BTreeSet<String> {
        truth
            .invocations
            .iter()
            .filter(|i| f(i))
            .map(|i| i.invocation_id.clone())
            .collect()
    };
    assert_matches(
        &search("tenant=acme"),
        &expect(&|i| i.tenant == "acme"),
        &planted,
        "search",
    );
    let session = &truth.sessions[1];
    assert_matches(
        &search(&format!(
            "tenant={}&session_id={}",
            session.tenant, session.session_id
        )),
        &session.invocation_ids.iter().cloned().collect(),
        &planted,
        "search by session",
    );
    // Planted anomalies may move an invocation's state; every other one is found by its final state.
    for state in [
        "succeeded",
        "failed",
        "denied",
        "timed_out",
        "canceled",
        "blocked",
    ] {
        let got = search(&format!("tenant=globex&status={state}"));
        let want = expect(&|i| i.tenant == "globex" && i.anomalies.is_empty() && i.final_state == state);
        assert!(want.is_subset(&got), "status {state}: {want:?} not in {got:?}");
        let anomalous = expect(&|i| !i.anomalies.is_empty());
        assert!(
            got.difference(&want).all(|id| anomalous.contains(id)),
            "status {state}: {got:?}"
        );
    }
    assert_matches(
        &search("tenant=acme&tool_id=fs.read_file"),
        &expect(&|i| i.tenant == "acme" && i.tool_id == "fs.read_file"),
        &planted,
        "search",
    );
    assert_matches(
        &search("tenant=acme&namespace=fs"),
        &expect(&|i| i.tenant == "acme" && i.tool_id.starts_with("fs.")),
        &planted,
        "search",
    );
    assert_matches(
        &search("tenant=acme&error_class=timeout"),
        &expect(&|i| i.tenant == "acme" && i.error_class.as_deref() == Some("timeout")),
        &planted,
        "search",
    );
    assert_matches(
        &search("tenant=acme&behavior=deny"),
        &expect(&|i| i.tenant == "acme" && i.permission_decisions.iter().any(|d| d.behavior == "deny")),
        &planted,
        "search",
    );
    assert!(!search("tenant=acme&behavior=deny").is_empty());
    // A native id found in one reconstruction finds exactly that invocation.
    let sample = truth
        .invocations
        .iter()
        .find(|i| i.tenant == "acme" && i.anomalies.is_empty())
        .unwrap();
    let r = request(
        api,
        "GET",
        &format!("/v1/invocations/{}?tenant=acme", sample.invocation_id),
        Some(ADMIN_TOKEN),
    )
    .json();
    let native = r["native_ids"]
        .as_array()
        .unwrap()
        .first()
        .expect("a native id")
        .clone();
    let found = search(&format!(
        "tenant=acme&native_id={}",
        native["value"].as_str().unwrap()
    ));
    assert!(found.contains(&sample.invocation_id), "{found:?}");
    // The first half of acme's invocations by the time of their first event.
    let first_time =
        |i: &toolledger_schemas::generator::InvocationTruth| event_time[i.event_ids[0].as_str()].to_owned();
    let mut times: Vec<String> = truth
        .invocations
        .iter()
        .filter(|i| i.tenant == "acme")
        .map(first_time)
        .collect();
    times.sort();
    let (from, to) = (times[0].clone(), times[times.len() / 2].clone());
    let enc = |t: &str| t.replace(':', "%3A");
    assert_matches(
        &search(&format!("tenant=acme&from={}&to={}", enc(&from), enc(&to))),
        &expect(&|i| i.tenant == "acme" && first_time(i) >= from && first_time(i) <= to),
        &planted,
        "search",
    );

    // Counts group exactly what the search finds over all its pages, whatever the grouping.
    for (filters, group_by) in [
        ("tenant=acme", "state"),
        ("tenant=acme&tool_id=fs.read_file", "error_class"),
        ("tenant=globex&status=failed", "tool_id"),
    ] {
        let path = format!("/v1/invocation-counts?{filters}&group_by={group_by}");
        let reply = request(api, "GET", &path, Some(ADMIN_TOKEN));
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let counts = reply.json();
        contract.check("InvocationCounts", &counts);
        assert_eq!(counts["group_by"], group_by);
        assert_eq!(
            counts["total"].as_u64().unwrap() as usize,
            search(filters).len(),
            "{path}: {counts}"
        );
    }
    // A session list narrowed by status holds the sessions of the invocations the search finds.
    let failed = all_pages(
        &contract,
        api,
        "/v1/sessions?tenant=acme&status=failed&limit=1",
        "SessionPage",
    );
    let failed_sessions: BTreeSet<String> = all_pages(
        &contract,
        api,
        "/v1/invocations?tenant=acme&status=failed",
        "InvocationPage",
    )
    .iter()
    .filter_map(|i| i["session_id"].as_str().map(str::to_owned))
    .collect();
    assert_eq!(ids(&Value::from(failed.clone()), "session_id"), failed_sessions);
    assert!(
        failed
            .iter()
            .all(|s| s["states"].as_object().unwrap().keys().all(|k| k == "failed")),
        "{failed:?}"
    );

    // Stats per tool against the truth's outcomes; the percentiles are ordered.
    let reply = request(api, "GET", "/v1/stats?tenant=acme&bucket=1d", Some(ADMIN_TOKEN));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let stats = reply.json();
    contract.check("Stats", &stats);
    let mut calls: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for row in stats["rows"].as_array().unwrap() {
        let entry = calls
            .entry(row["tool_id"].as_str().unwrap().to_owned())
            .or_default();
        entry.0 += row["calls"].as_u64().unwrap();
        entry.1 += row["denied"].as_u64().unwrap();
        entry.2 += row["timed_out"].as_u64().unwrap();
        if let (Some(p50), Some(p95), Some(p99)) = (
            row["latency_p50_ms"].as_f64(),
            row["latency_p95_ms"].as_f64(),
            row["latency_p99_ms"].as_f64(),
        ) {
            assert!(p50 <= p95 && p95 <= p99, "{row}");
        }
    }
    let mut expected: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for i in truth.invocations.iter().filter(|i| i.tenant == "acme") {
        let entry = expected.entry(i.tool_id.clone()).or_default();
        entry.0 += 1;
    }
    // Plus the invocations planted anomalies created, with the tool the ledger recorded for them.
    let known: BTreeSet<&str> = truth
        .invocations
        .iter()
        .map(|i| i.invocation_id.as_str())
        .collect();
    for extra in search("tenant=acme")
        .iter()
        .filter(|id| !known.contains(id.as_str()))
    {
        let r = request(
            api,
            "GET",
            &format!("/v1/invocations/{extra}?tenant=acme"),
            Some(ADMIN_TOKEN),
        )
        .json();
        if let Some(tool) = r["tool_id"].as_str() {
            expected.entry(tool.to_owned()).or_default().0 += 1;
        }
    }
    let totals: BTreeMap<String, u64> = calls.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    let expected_totals: BTreeMap<String, u64> = expected.iter().map(|(k, v)| (k.clone(), v.0)).collect();
    assert_eq!(totals, expected_totals, "calls per tool");
    let denied: u64 = calls.values().map(|v| v.1).sum();
    let expected_denied = truth
        .invocations
        .iter()
        .filter(|i| i.tenant == "acme" && i.final_state == "denied" && i.anomalies.is_empty())
        .count() as u64;
    assert!(denied >= expected_denied, "denied {denied} < {expected_denied}");

    // The catalog: every declared tool, its versions and lifecycle.
    let reply = request(api, "GET", "/v1/tools?tenant=acme", Some(ADMIN_TOKEN));
    let tools = reply.json();
    contract.check("ToolList", &tools);
    for tool in truth.tools.iter().filter(|t| t.tenant == "acme") {
        let found = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tool_id"] == tool.tool_id.as_str())
            .unwrap_or_else(|| panic!("{} missing", tool.tool_id));
        let versions: Vec<&str> = found["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(
            versions,
            tool.versions.iter().map(String::as_str).collect::<Vec<_>>(),
            "{}",
            tool.tool_id
        );
        assert_eq!(found["lifecycle"], tool.lifecycle.as_str());
    }

    // Tokens: none, wrong, and a tenant token on another tenant's data.
    let acme_inv = truth.invocations.iter().find(|i| i.tenant == "acme").unwrap();
    let globex_inv = truth.invocations.iter().find(|i| i.tenant == "globex").unwrap();
    contract.error(&request(api, "GET", "/v1/sessions", None), 401, "unauthenticated");
    contract.error(
        &request(api, "GET", "/v1/sessions", Some("not-a-token")),
        401,
        "unauthenticated",
    );
    let ok = request(
        api,
        "GET",
        &format!("/v1/invocations/{}", acme_inv.invocation_id),
        Some(ACME_TOKEN),
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
    contract.error(
        &request(api, "GET", "/v1/invocations?tenant=globex", Some(ACME_TOKEN)),
        403,
        "forbidden",
    );
    contract.error(
        &request(
            api,
            "GET",
            &format!("/v1/invocations/{}?tenant=globex", globex_inv.invocation_id),
            Some(ACME_TOKEN),
        ),
        403,
        "forbidden",
    );
    contract.error(
        &request(
            api,
            "GET",
            &format!("/v1/invocations/{}", globex_inv.invocation_id),
            Some(ACME_TOKEN),
        ),
        404,
        "not_found",
    );
    let scoped = request(api, "GET", "/v1/invocations?limit=1000", Some(ACME_TOKEN)).json();
    assert!(
        scoped["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["tenant"] == "acme")
    );

    // Injection attempts are ids like any other (the ledger takes them): bound as parameters, they
    // match nothing.
    contract.error(
        &request(
            api,
            "GET",
            "/v1/invocations/inv%27%20OR%20%271%27%3D%271?tenant=acme",
            Some(ADMIN_TOKEN),
        ),
        404,
        "not_found",
    );
    for path in [
        "/v1/invocations?tenant=acme&status=x%27%20OR%20%271%27%3D%271",
        "/v1/invocations?tenant=acme&tool_id=fs.read_file%3B%20DROP%20TABLE%20invocations",
    ] {
        let reply = request(api, "GET", path, Some(ADMIN_TOKEN));
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert_eq!(reply.json()["items"], serde_json::json!([]), "{path}");
    }

    // Ids outside the ledger's grammar, absurd ranges, huge pages, tampered cursors: 400 naming the field.
    for (path, field) in [
        ("/v1/invocations/inv%01?tenant=acme", "invocation_id"),
        (
            &*format!("/v1/invocations/{}?tenant=acme", "x".repeat(1025)),
            "invocation_id",
        ),
        ("/v1/invocations/%FF%FE?tenant=acme", "invocation_id"),
        ("/v1/sessions/%00?tenant=acme", "session_id"),
        ("/v1/invocations?tenant=acme&limit=1000000000", "limit"),
        ("/v1/invocations?tenant=acme&limit=0", "limit"),
        ("/v1/invocations?tenant=acme&limit=ten", "limit"),
        ("/v1/invocations?tenant=acme&from=yesterday", "from"),
        (
            "/v1/invocations?tenant=acme&from=2026-05-09T00%3A00%3A00Z&to=2026-05-08T00%3A00%3A00Z",
            "to",
        ),
        (
            "/v1/invocations?tenant=acme&from=0001-01-01T00%3A00%3A00Z&to=9999-12-31T00%3A00%3A00Z",
            "from",
        ),
        (
            "/v1/invocations?tenant=acme&from=2000-01-01T00%3A00%3A00Z&to=2026-01-01T00%3A00%3A00Z",
            "to",
        ),
        ("/v1/invocations?tenant=acme&status=failed%7F", "status"),
        ("/v1/invocations?tenant=acme&tool_id=fs.read_file%0A", "tool_id"),
        ("/v1/invocations?tenant=acme%27--", "tenant"),
        ("/v1/invocations?tenant=acme&cursor=bm90LWEtY3Vyc29y", "cursor"),
        ("/v1/invocations?tenant=acme&cursor=%25%25", "cursor"),
        ("/v1/invocations?tenant=acme&stauts=failed", "stauts"),
        (
            "/v1/invocations?tenant=acme&status=failed&status=denied",
            "status",
        ),
        ("/v1/stats?tenant=acme&bucket=1y", "bucket"),
        (
            "/v1/stats?tenant=acme&bucket=1m&from=2026-01-01T00%3A00%3A00Z&to=2026-12-31T00%3A00%3A00Z",
            "bucket",
        ),
        ("/v1/sessions?tenant=acme&format=xml", "format"),
    ] {
        let body = contract.error(
            &request(api, "GET", path, Some(ADMIN_TOKEN)),
            400,
            "invalid_parameter",
        );
        assert_eq!(body["error"]["field"], field, "{path}: {body}");
    }
    // A cursor from one listing is refused by another.
    let page = request(api, "GET", "/v1/sessions?tenant=acme&limit=1", Some(ADMIN_TOKEN)).json();
    let foreign = page["next_cursor"].as_str().unwrap();
    contract.error(
        &request(
            api,
            "GET",
            &format!("/v1/invocations?tenant=acme&cursor={foreign}"),
            Some(ADMIN_TOKEN),
        ),
        400,
        "invalid_parameter",
    );
    contract.error(
        &request(
            api,
            "GET",
            "/v1/sessions/sess_nope?tenant=acme",
            Some(ADMIN_TOKEN),
        ),
        404,
        "not_found",
    );
    contract.error(
        &request(api, "GET", "/v1/nothing", Some(ADMIN_TOKEN)),
        404,
        "not_found",
    );
    contract.error(
        &request(api, "DELETE", "/v1/sessions", Some(ADMIN_TOKEN)),
        405,
        "method_not_allowed",
    );

    // Health and metrics on the API port, without a token.
    let health = request(api, "GET", "/healthz", None);
    assert_eq!(health.status, 200, "{}", health.body);
    contract.check("Health", &health.json());
    let metrics = request(api, "GET", "/metrics", None);
    assert!(
        metrics.body.contains("toolledger_api_requests_total"),
        "{}",
        metrics.body
    );

    // The CLI reads the same projection directly.
    let data = loaded.dir.path().join("data");
    let cli = |args: &[&str]| -> (Option<i32>, String, String) {
        let out = std::process::Command::new(toolledger())
            .args(args)
            .env("TOOLLEDGER_DATA_DIR", &data)
            .env("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = cli(&["show", &acme_inv.invocation_id, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    contract.check("Reconstruction", &shown);
    assert_eq!(shown["invocation_id"], acme_inv.invocation_id.as_str());
    let (code, stdout, _) = cli(&["show", &acme_inv.invocation_id]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("timeline (") && stdout.contains(&acme_inv.invocation_id),
        "{stdout}"
    );
    assert_eq!(cli(&["show", "inv_does_not_exist"]).0, Some(1));
    // A space is an id like any other (not found); a control character is a usage error.
    assert_eq!(cli(&["show", "no such id!"]).0, Some(1));
    assert_eq!(cli(&["show", "bad\tid"]).0, Some(2));
    let (code, stdout, _) = cli(&["search", "--tenant", "acme", "--behavior", "deny", "--json"]);
    assert_eq!(code, Some(0));
    let page: Value = serde_json::from_str(&stdout).unwrap();
    contract.check("InvocationPage", &page);
    assert_eq!(
        ids(&page["items"], "invocation_id"),
        search("tenant=acme&behavior=deny")
    );
    let (code, stdout, _) = cli(&["search", "--tenant", "acme", "--status", "denied"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("TENANT") && stdout.contains("denied"),
        "{stdout}"
    );
    assert_eq!(
        cli(&["search", "--tenant", "acme", "--status", "no_such_state"]).0,
        Some(1)
    );
    assert_eq!(cli(&["search", "--limit", "1000000000"]).0, Some(2));
    assert_eq!(
        cli(&[
            "search",
            "--from",
            "2026-05-09T00:00:00Z",
            "--to",
            "2026-05-08T00:00:00Z"
        ])
        .0,
        Some(2)
    );
    let (code, stdout, _) = cli(&["session"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("TENANT") && stdout.contains(&truth.sessions[0].session_id),
        "{stdout}"
    );
    let (code, stdout, _) = cli(&[
        "session",
        &truth.sessions[0].session_id,
        "--tenant",
        &truth.sessions[0].tenant,
        "--json",
    ]);
    assert_eq!(code, Some(0));
    contract.check("SessionTimeline", &serde_json::from_str(&stdout).unwrap());
    assert_eq!(cli(&["session", "sess_missing"]).0, Some(1));
    let (code, stdout, _) = cli(&["stats", "--tenant", "acme", "--bucket", "1d"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("TOOL") && stdout.contains("fs.read_file"),
        "{stdout}"
    );
    let (code, stdout, _) = cli(&["stats", "--tenant", "acme", "--bucket", "1d", "--json"]);
    assert_eq!(code, Some(0));
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap(), stats);
    assert_eq!(cli(&["stats", "--bucket", "1y"]).0, Some(2));
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(toolledger())
        .args(["search"])
        .env("TOOLLEDGER_DATA_DIR", empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "no projection");

    // Reads through the API came back through ingest into the ledger as toolledger.access.read.
    let generation = toolledger_projector::Generations::new(&data)
        .current()
        .unwrap()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let recorded = loop {
        let store = toolledger_projector::Store::open_readonly(&generation.database()).unwrap();
        let found: Vec<(String, String, String)> = store
            .connection()
            .prepare(
                "SELECT tenant, endpoint, coalesce(invocation_ids, '') FROM access_reads
                 WHERE principal = 'acme-reader'",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        if found
            .iter()
            .any(|(_, e, _)| e == "GET /v1/invocations/{invocation_id}")
        {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no access read recorded: {found:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // acme's 404 for globex's invocation is recorded too, what it asked for in the ledger's own
    // `_system` record; none of acme's reads is globex's.
    assert!(
        recorded
            .iter()
            .all(|(tenant, _, _)| tenant == "acme" || tenant == "_system"),
        "{recorded:?}"
    );
    assert!(
        recorded
            .iter()
            .any(|(_, _, ids)| ids.contains(acme_inv.invocation_id.as_str())),
        "{recorded:?}"
    );

    assert!(loaded.up.terminate(Duration::from_secs(30)).unwrap().success());
    assert!(loaded.up.stdout().contains("api stopped"));
}

/// The README's first command: `toolledger up --demo` on an empty data directory prints a
/// reconstructed invocation and a passing verify.
#[test]
fn up_demo_prints_a_reconstructed_invocation_and_a_passing_verify() {
    up_demo(1, |_, _, _| {});
}

/// `toolledger up --demo` over a ledger of `partitions`: it prints a reconstructed invocation and a
/// passing verify of the demo tenant's partition, and its API serves that invocation; then
/// `while_running` gets its data directory, API address and admin token. Returns the output.
pub(crate) fn up_demo(partitions: u16, while_running: impl FnOnce(&Path, SocketAddr, &str)) -> String {
    let data = tempfile::tempdir().unwrap();
    let bin = nats_server_bin();
    let partitions = partitions.to_string();
    let mut up = ChildProcess::spawn(
        toolledger(),
        ["up", "--demo"],
        &[
            ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
            ("TOOLLEDGER_NATS__SERVER_BIN", bin.to_str().unwrap()),
            ("TOOLLEDGER_NATS__LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_API__LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_LEDGER__PARTITIONS", partitions.as_str()),
        ],
    );
    assert!(
        up.wait_for_output("running;", Duration::from_secs(120)),
        "{}\n{}",
        up.stdout(),
        up.stderr()
    );
    let stdout = up.stdout();
    assert!(stdout.contains("demo: reconstructed invocation inv_"), "{stdout}");
    assert!(stdout.contains("\ntimeline ("), "{stdout}");
    assert!(stdout.contains("tool.invocation.planned"), "{stdout}");
    assert!(stdout.contains("\ninputs\n"), "{stdout}");
    assert!(stdout.contains("demo: verify: ok"), "{stdout}");
    // The printed API serves the same invocation with the generated local admin token.
    let token = std::fs::read_to_string(data.path().join("api-token")).unwrap();
    let api: SocketAddr = after(&stdout, "api at http://", "/").parse().unwrap();
    let line = stdout.lines().find(|l| l.contains("GET http://")).unwrap();
    let path = line.split("GET http://").nth(1).unwrap().trim_end_matches("):");
    let path = &path[path.find('/').unwrap()..];
    let reply = request(api, "GET", path, Some(token.trim()));
    assert_eq!(reply.status, 200, "{}", reply.body);
    Contract::load().check("Reconstruction", &reply.json());
    assert_eq!(request(api, "GET", path, None).status, 401);
    while_running(data.path(), api, token.trim());
    assert!(up.terminate(Duration::from_secs(30)).unwrap().success());
    stdout
}

/// Every `tenant` field anywhere in `value` is `tenant`.
fn only_tenant(what: &str, value: &Value, tenant: &str) {
    match value {
        Value::Object(map) => {
            if let Some(t) = map.get("tenant").and_then(Value::as_str) {
                assert_eq!(t, tenant, "{what}: {value}");
            }
            map.values().for_each(|v| only_tenant(what, v, tenant));
        }
        Value::Array(items) => items.iter().for_each(|v| only_tenant(what, v, tenant)),
        _ => {}
    }
}

/// Whether `id` occurs in `text` as a whole token (not inside a longer id).
fn mentions(text: &str, id: &str) -> bool {
    let token = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c);
    text.match_indices(id).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + id.len()..].chars().next();
        !before.is_some_and(token) && !after.is_some_and(token)
    })
}

/// The isolation suite (#12): tenant acme's token against every endpoint, with filter tricks and SQL
/// that tries joins, subqueries, recursive CTEs, ATTACH, pragmas, extension loading and `main.*` to
/// reach globex's rows. Nothing of globex appears in any body; runaway SQL is cut off with
/// `sql_timeout`; the evidence endpoints answer with proofs that check; every read comes back as a
/// `toolledger.access.read` entry an admin can query through `POST /v1/sql`, and the ledger holding
/// them verifies.
#[test]
fn a_tenant_token_reads_nothing_of_another_tenant_and_every_read_is_recorded() {
    let mut loaded = load();
    let api = loaded.api;
    let contract = Contract::load();
    let truth = &loaded.generated.truth;
    let acme_inv = truth.invocations.iter().find(|i| i.tenant == "acme").unwrap();
    let globex_invs: BTreeSet<&str> = truth
        .invocations
        .iter()
        .filter(|i| i.tenant == "globex")
        .map(|i| i.invocation_id.as_str())
        .collect();
    let globex_sessions: BTreeSet<&str> = truth
        .invocations
        .iter()
        .filter(|i| i.tenant == "globex")
        .map(|i| i.session_id.as_str())
        .collect();
    let globex_inv = *globex_invs.first().unwrap();
    let globex_session = *globex_sessions.first().unwrap();
    assert!(!globex_invs.is_empty() && !globex_sessions.is_empty());
    let database = toolledger_projector::Generations::new(&loaded.dir.path().join("data"))
        .current()
        .unwrap()
        .unwrap()
        .database();
    let seqs_of = |tenant: &str| -> Vec<u64> {
        let store = toolledger_projector::Store::open_readonly(&database).unwrap();
        let mut statement = store
            .connection()
            .prepare("SELECT seq FROM events WHERE tenant = ?1 ORDER BY seq")
            .unwrap();
        statement
            .query_map([tenant], |r| r.get::<_, i64>(0))
            .unwrap()
            .map(|s| u64::try_from(s.unwrap()).unwrap())
            .collect()
    };
    let (acme_seqs, globex_seqs) = (seqs_of("acme"), seqs_of("globex"));
    assert!(!acme_seqs.is_empty() && !globex_seqs.is_empty());
    let no_leak = |what: &str, body: &str| {
        assert!(
            !body.contains("globex"),
            "{what}: the other tenant's name leaked\n{body}"
        );
        for id in globex_invs.iter().chain(globex_sessions.iter()) {
            assert!(!mentions(body, id), "{what}: {id} leaked\n{body}");
        }
    };
    let get = |path: &str| request(api, "GET", path, Some(ACME_TOKEN));

    // Every GET endpoint, with filter tricks. Allowed answers carry only acme's data; the rest are
    // errors that say nothing about globex's objects beyond echoing the request.
    let attempts: Vec<(String, u16)> = vec![
        ("/v1/invocations".to_owned(), 200),
        ("/v1/invocations?tenant=acme".to_owned(), 200),
        ("/v1/invocations?tenant=globex".to_owned(), 403),
        ("/v1/invocations?tenant=acme&tenant=globex".to_owned(), 400),
        ("/v1/invocations?tenant=acme%20OR%201%3D1".to_owned(), 400),
        (format!("/v1/invocations?session_id={globex_session}"), 200),
        (format!("/v1/invocations?tenant=acme&native_id={globex_inv}"), 200),
        (format!("/v1/invocations/{globex_inv}"), 404),
        (format!("/v1/invocations/{globex_inv}?tenant=acme"), 404),
        (format!("/v1/invocations/{globex_inv}?tenant=globex"), 403),
        ("/v1/sessions".to_owned(), 200),
        ("/v1/sessions?tenant=globex".to_owned(), 403),
        ("/v1/sessions?status=failed".to_owned(), 200),
        ("/v1/sessions?tenant=globex&status=failed".to_owned(), 403),
        ("/v1/invocation-counts?group_by=state".to_owned(), 200),
        (
            "/v1/invocation-counts?group_by=tool_id&tenant=globex".to_owned(),
            403,
        ),
        (
            format!("/v1/invocation-counts?group_by=state&session_id={globex_session}"),
            200,
        ),
        (format!("/v1/sessions/{globex_session}"), 404),
        (format!("/v1/sessions/{globex_session}?format=ndjson"), 404),
        ("/v1/stats".to_owned(), 200),
        ("/v1/stats?tenant=globex".to_owned(), 403),
        ("/v1/tools".to_owned(), 200),
        ("/v1/tools?tenant=globex".to_owned(), 403),
        (format!("/v1/sessions/{globex_session}/replay?speed=0"), 404),
        (format!("/v1/sessions/{globex_session}/replay?tenant=globex"), 403),
        (format!("/v1/sessions/{globex_session}/bundle"), 404),
        (format!("/v1/invocations/{globex_inv}/bundle"), 404),
        (format!("/v1/invocations/{globex_inv}/bundle?tenant=globex"), 403),
        ("/v1/sessions/x/replay?speed=-1".to_owned(), 400),
        ("/v1/sessions/x/replay?speed=NaN".to_owned(), 400),
    ];
    for (path, status) in &attempts {
        let reply = get(path);
        assert_eq!(reply.status, *status, "{path}: {}", reply.body);
        if *status == 200 {
            only_tenant(path, &reply.json(), "acme");
        } else {
            contract.check("Error", &reply.json());
        }
        let echoed = reply
            .body
            .replace("globex", "")
            .replace(globex_inv, "")
            .replace(globex_session, "");
        if *status == 200 {
            no_leak(path, &reply.body);
        } else {
            no_leak(path, &echoed);
        }
    }
    // Counting another tenant's session through a filter finds nothing of it.
    let counted = get(&format!(
        "/v1/invocation-counts?group_by=state&session_id={globex_session}"
    ))
    .json();
    assert_eq!(counted["total"], 0, "{counted}");
    for seq in globex_seqs.iter().take(5) {
        let reply = get(&format!("/v1/proofs/inclusion?seq={seq}"));
        contract.error(&reply, 404, "not_found");
        no_leak("inclusion of a globex seq", &reply.body);
    }

    // Replay of an acme session: NDJSON and SSE, every line a ReplayedEvent of that session.
    let reply = get(&format!("/v1/sessions/{}/replay?speed=0", acme_inv.session_id));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/x-ndjson"));
    let lines: Vec<Value> = reply
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty());
    for line in &lines {
        contract.check("ReplayedEvent", line);
        assert_eq!(line["event"]["tenant"], "acme", "{line}");
    }
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "ledger order: {seqs:?}");
    let replayed: BTreeSet<&str> = lines.iter().map(|l| l["event"]["id"].as_str().unwrap()).collect();
    let expected: BTreeSet<&str> = truth
        .invocations
        .iter()
        .filter(|i| i.tenant == "acme" && i.session_id == acme_inv.session_id)
        .flat_map(|i| i.event_ids.iter().map(String::as_str))
        .collect();
    assert!(!expected.is_empty());
    assert!(
        expected.is_subset(&replayed),
        "every event of the session's invocations is replayed: missing {:?}",
        expected.difference(&replayed).collect::<Vec<_>>()
    );
    no_leak("replay", &reply.body);
    let sse = send(
        api,
        "GET",
        &format!("/v1/sessions/{}/replay?speed=1000", acme_inv.session_id),
        Some(ACME_TOKEN),
        "Accept: text/event-stream\r\n",
        "",
    );
    assert_eq!(sse.status, 200, "{}", sse.body);
    assert_eq!(sse.header("content-type"), Some("text/event-stream"));
    let frames: Vec<&str> = sse.body.split("\n\n").filter(|f| !f.is_empty()).collect();
    assert_eq!(frames.len(), lines.len(), "{}", sse.body);
    for frame in frames {
        assert!(frame.starts_with("event: replayed\n"), "{frame}");
        let data = frame.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        contract.check("ReplayedEvent", &serde_json::from_str(data).unwrap());
    }

    // Checkpoints and proofs. The newest checkpoint covers the loaded data once the ingest's
    // checkpoint timer fires; wait for it (not a timed assertion: the deadline only bounds a hang).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let last_acme = *acme_seqs.last().unwrap();
    let latest = loop {
        let reply = get("/v1/checkpoints/latest");
        if reply.status == 200 && reply.json()["size"].as_u64().unwrap() >= last_acme {
            break reply.json();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint: {}",
            reply.body
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    contract.check("SignedCheckpoint", &latest);
    let size = latest["size"].as_u64().unwrap();
    let reply = get(&format!("/v1/checkpoints/{size}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json(), latest);
    contract.error(&get("/v1/checkpoints/abc"), 400, "invalid_parameter");
    contract.error(&get("/v1/checkpoints/999999999"), 404, "no_checkpoint");
    let reply = get(&format!("/v1/proofs/inclusion?seq={last_acme}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let proof = reply.json();
    contract.check("InclusionProof", &proof);
    assert_eq!(proof["ledger_seq"], last_acme);
    no_leak("inclusion of an acme seq", &reply.body);
    contract.error(&get("/v1/proofs/inclusion"), 400, "invalid_parameter");
    contract.error(&get("/v1/proofs/inclusion?seq=0"), 404, "not_found");
    let reply = get(&format!("/v1/proofs/consistency?from=1&to={size}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    contract.check("ConsistencyProof", &reply.json());
    contract.error(
        &get(&format!("/v1/proofs/consistency?from={}&to={size}", size + 1)),
        400,
        "invalid_parameter",
    );

    // Bundles of acme's invocation and session verify offline with the verifier key alone.
    let key = loaded.dir.path().join("data/keys/checkpoint.pub");
    for (path, kind) in [
        (
            format!("/v1/invocations/{}/bundle", acme_inv.invocation_id),
            "invocation",
        ),
        (
            format!(
                "/v1/sessions/{}/bundle?tenant=acme&since_size={size}",
                acme_inv.session_id
            ),
            "session",
        ),
    ] {
        let reply = get(&path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let bundle = reply.json();
        contract.check("EvidenceBundle", &bundle);
        assert_eq!(bundle["selection"]["kind"], kind);
        assert_eq!(bundle["selection"]["tenant"], "acme");
        assert_eq!(
            bundle["consistency"].is_object(),
            path.contains("since_size"),
            "{path}"
        );
        no_leak(&path, &reply.body);
        let file = loaded.dir.path().join(format!("{kind}.bundle.json"));
        std::fs::write(&file, &reply.body).unwrap();
        let out = std::process::Command::new(toolledger())
            .args([
                "verify-bundle",
                file.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{path}: verify-bundle\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // SQL: acme's token sees acme's views only, whatever the statement tries.
    let sql = |token: &str, body: Value| post_sql(api, Some(token), &body.to_string());
    let readable = [
        "SELECT * FROM invocations",
        "SELECT * FROM events",
        "SELECT * FROM sessions",
        "SELECT tenant, count(*) AS n FROM events GROUP BY tenant",
        "SELECT * FROM invocations WHERE tenant <> 'acme' OR 1 = 1",
        "SELECT a.invocation_id, b.session_id FROM invocations a JOIN events b ON 1 = 1 LIMIT 500",
        "SELECT * FROM events WHERE seq IN (SELECT seq FROM events) AND tenant NOT IN ('acme')",
        "SELECT (SELECT count(*) FROM events WHERE tenant <> 'acme') AS others",
        "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1000000) \
         SELECT e.* FROM events e JOIN s ON e.seq = s.n",
        "SELECT * FROM temp.invocations",
        "SELECT * FROM access_reads",
    ];
    for statement in readable {
        let reply = sql(
            ACME_TOKEN,
            serde_json::json!({ "sql": statement, "max_rows": 10000 }),
        );
        assert_eq!(reply.status, 200, "{statement}: {}", reply.body);
        let result = reply.json();
        contract.check("SqlResult", &result);
        no_leak(statement, &reply.body);
        if let Some(col) = result["columns"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c == "tenant")
        {
            for row in result["rows"].as_array().unwrap() {
                assert_eq!(row[col], "acme", "{statement}: {row}");
            }
        }
        if statement.contains("others") {
            assert_eq!(result["rows"][0][0], 0, "{statement}");
        }
    }
    let refused = [
        "SELECT * FROM main.invocations",
        "SELECT * FROM main.events WHERE tenant = 'x'",
        "ATTACH DATABASE '/tmp/other.db' AS other",
        "SELECT 1; ATTACH DATABASE ':memory:' AS m",
        "PRAGMA query_only = 0",
        "PRAGMA table_info(invocations)",
        "SELECT * FROM pragma_table_info('invocations')",
        "SELECT load_extension('/tmp/nothing.so')",
        "DELETE FROM invocations",
        "INSERT INTO sessions (session_id) VALUES ('x')",
        "CREATE TABLE t (x)",
        "DROP VIEW invocations",
    ];
    for statement in refused {
        let reply = sql(ACME_TOKEN, serde_json::json!({ "sql": statement }));
        assert_eq!(reply.status, 400, "{statement}: {}", reply.body);
        let body = reply.json();
        contract.check("Error", &body);
        assert!(
            body["error"]["code"] == "sql_refused" || body["error"]["code"] == "sql_invalid",
            "{statement}: {body}"
        );
        no_leak(statement, &reply.body);
    }
    for statement in [
        "SELECT load_extension('/tmp/nothing.so')",
        "ATTACH DATABASE '/tmp/other.db' AS other",
        "SELECT * FROM main.invocations",
        "PRAGMA query_only = 0",
    ] {
        let body = sql(ACME_TOKEN, serde_json::json!({ "sql": statement })).json();
        assert_eq!(body["error"]["code"], "sql_refused", "{statement}: {body}");
    }
    // A runaway statement is cut off with a clear error.
    let reply = sql(
        ACME_TOKEN,
        serde_json::json!({
            "sql": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
            "timeout_ms": 300,
        }),
    );
    let body = contract.error(&reply, 422, "sql_timeout");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("300 ms"),
        "{body}"
    );
    contract.error(
        &sql(
            ACME_TOKEN,
            serde_json::json!({ "sql": "SELECT 1", "tenant": "globex" }),
        ),
        403,
        "forbidden",
    );
    contract.error(
        &sql(
            ACME_TOKEN,
            serde_json::json!({ "sql": "SELECT 1", "max_rows": 10001 }),
        ),
        400,
        "invalid_parameter",
    );
    contract.error(
        &sql(
            ACME_TOKEN,
            serde_json::json!({ "sql": "SELECT 1", "timeout_ms": 60000 }),
        ),
        400,
        "invalid_parameter",
    );
    contract.error(
        &sql(ACME_TOKEN, serde_json::json!({ "query": "SELECT 1" })),
        400,
        "invalid_parameter",
    );
    contract.error(
        &send(api, "POST", "/v1/sql", None, "", "{}"),
        401,
        "unauthenticated",
    );
    let truncated = sql(
        ACME_TOKEN,
        serde_json::json!({ "sql": "SELECT * FROM events", "max_rows": 1 }),
    )
    .json();
    assert_eq!(truncated["rows"].as_array().unwrap().len(), 1);
    assert_eq!(truncated["truncated"], true);

    // Every read came back through ingest as a toolledger.access.read entry; an admin reads them
    // through SQL.
    let wanted = [
        "GET /v1/invocations",
        "GET /v1/sessions",
        "GET /v1/sessions/{session_id}/replay",
        "GET /v1/invocations/{invocation_id}/bundle",
        "GET /v1/sessions/{session_id}/bundle",
        "GET /v1/proofs/inclusion",
        "POST /v1/sql",
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let rows = loop {
        let reply = sql(
            ADMIN_TOKEN,
            serde_json::json!({ "sql": "SELECT * FROM access_reads WHERE principal = 'acme-reader' AND tenant = 'acme'", "max_rows": 10000 }),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        let result = reply.json();
        contract.check("SqlResult", &result);
        let columns: Vec<String> = result["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_owned())
            .collect();
        let rows: Vec<BTreeMap<String, Value>> = result["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                columns
                    .iter()
                    .cloned()
                    .zip(r.as_array().unwrap().iter().cloned())
                    .collect()
            })
            .collect();
        let endpoints: BTreeSet<&str> = rows.iter().filter_map(|r| r["endpoint"].as_str()).collect();
        if wanted.iter().all(|w| endpoints.contains(w)) {
            break rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "access reads missing: have {endpoints:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    for row in &rows {
        assert_eq!(row["tenant"], "acme", "{row:?}");
        assert_eq!(row["principal"], "acme-reader", "{row:?}");
    }
    assert!(
        rows.iter().any(|r| r["endpoint"] == "POST /v1/sql"
            && r["query"]
                .as_str()
                .is_some_and(|q| q.contains("FROM invocations"))),
        "the statement is recorded"
    );
    assert!(
        rows.iter()
            .any(|r| r["endpoint"] == "GET /v1/sessions/{session_id}/replay"
                && r["session_ids"]
                    .as_str()
                    .is_some_and(|s| s.contains(acme_inv.session_id.as_str()))),
        "the replayed session is recorded"
    );
    // acme's lookups of globex's objects found nothing: recorded all the same, what was asked in
    // the ledger's own record (through ingest's schema check), out of acme's sight.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let reply = sql(
            ADMIN_TOKEN,
            serde_json::json!({ "sql": "SELECT query FROM access_reads WHERE principal = 'acme-reader' AND tenant = '_system'", "max_rows": 10000 }),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        if reply.body.contains(&format!("invocation_id={globex_inv}")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "acme's probe is not recorded: {}",
            reply.body
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The ledger holding those records verifies like any other.
    let out = std::process::Command::new(toolledger())
        .args([
            "--config",
            loaded.config.to_str().unwrap(),
            "verify",
            "--nats-url",
            &loaded.nats_url,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "verify\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    assert!(loaded.up.terminate(Duration::from_secs(30)).unwrap().success());
}
