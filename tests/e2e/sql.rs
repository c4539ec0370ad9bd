//! `toolledger query`: a tenant's read-only SQL from the command line, refusals and limits with exit
//! code 1 and the reason.

use std::time::Duration;

use toolledger_projector::{Generations, RawEntry, Store};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::ChildProcess;

use crate::toolledger;

/// `toolledger <args>` over the projections in `data`, logging warnings only.
fn spawn(data: &std::path::Path, args: &[&str]) -> ChildProcess {
    ChildProcess::spawn(
        toolledger(),
        args,
        &[
            ("TOOLLEDGER_DATA_DIR", data.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
        ],
    )
}

fn query(data: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = spawn(data, &[&["query"], args].concat());
    let status = child
        .wait_timeout(Duration::from_secs(60))
        .expect("query finishes");
    (status.code(), child.stdout(), child.stderr())
}

#[test]
fn query_reads_the_tenants_views_and_refuses_the_rest() {
    let data = tempfile::tempdir().unwrap();
    let store = projection(data.path(), 9);
    let acme: i64 = store
        .connection()
        .query_row(
            "SELECT count(*) FROM invocations WHERE tenant = 'acme'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    drop(store);

    let (code, out, err) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "--json",
            "SELECT count(*) AS n FROM invocations",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["columns"], serde_json::json!(["n"]));
    assert_eq!(json["rows"][0][0].as_i64(), Some(acme));

    let (code, out, _) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "--csv",
            "SELECT DISTINCT tenant FROM invocations",
        ],
    );
    assert_eq!((code, out.as_str()), (Some(0), "tenant\nacme\n"));
    let (code, out, _) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "SELECT state, count(*) FROM invocations GROUP BY 1",
        ],
    );
    assert_eq!(code, Some(0));
    assert!(out.contains("state") && out.contains("rows"), "{out}");

    for (sql, says) in [
        ("SELECT * FROM main.invocations", "schema-qualified"),
        ("DELETE FROM invocations", "read-only"),
        ("ATTACH DATABASE 'x' AS y", "ATTACH"),
    ] {
        let (code, _, err) = query(data.path(), &["--tenant", "acme", sql]);
        assert_eq!(code, Some(1), "{sql}");
        assert!(err.contains(says), "{sql}: {err}");
    }
    let (code, _, err) = query(
        data.path(),
        &[
            "--tenant",
            "acme",
            "--timeout-ms",
            "200",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("longer than 200 ms"), "{err}");
    let (code, _, _) = query(data.path(), &["SELECT 1"]);
    assert_eq!(code, Some(2), "a scope is required");
    let (code, out, _) = query(
        data.path(),
        &[
            "--admin",
            "--json",
            "SELECT count(DISTINCT tenant) FROM invocations",
        ],
    );
    assert_eq!(code, Some(0));
    assert!(out.contains("[[2]]"), "{out}");
}

/// A projection of two tenants' generated sessions (from `seed`) in `data`'s current generation, open.
fn projection(data: &std::path::Path, seed: u64) -> Store {
    let generated = generate(&GeneratorConfig {
        seed,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        sessions: 2,
        ..GeneratorConfig::default()
    });
    let generation = Generations::new(data).current_or_init().unwrap();
    let mut store = Store::open(&generation.database(), Default::default()).unwrap();
    let entries: Vec<RawEntry> = generated
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| RawEntry {
            seq: i as u64 + 1,
            bytes: toolledger_testkit::entry_bytes(e),
        })
        .collect();
    store.apply_batch(&entries).unwrap();
    store
}

/// `toolledger serve` over `data` on a free loopback port, tokenless (`--insecure-local`: the
/// caller is an admin); its address.
fn serve(data: &std::path::Path) -> (ChildProcess, std::net::SocketAddr) {
    let mut serve = spawn(data, &["serve", "--insecure-local", "--listen", "127.0.0.1:0"]);
    assert!(
        serve.wait_for_output("api at http://", Duration::from_secs(30)),
        "serve did not start\n{}\n{}",
        serve.stdout(),
        serve.stderr()
    );
    let stdout = serve.stdout();
    let addr = stdout
        .split("api at http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    (serve, addr)
}

/// `POST /v1/sql` without a token (the server is `--insecure-local`); status and body.
fn post_sql(addr: std::net::SocketAddr, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let reply = toolledger_testkit::http_post(addr, "/v1/sql", None, &body.to_string())
        .map(|r| (r.status, serde_json::from_str(&r.body).unwrap_or_default()));
    reply.unwrap_or((0, serde_json::Value::Null))
}

/// `VmHWM` (peak resident set) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `toolledger_api_sql_running` of a server.
fn sql_running(addr: std::net::SocketAddr) -> i64 {
    let metrics = toolledger_testkit::http_get(addr, "/metrics").unwrap().body;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("toolledger_api_sql_running "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sql gauge in /metrics:\n{metrics}"))
}

/// The issue's 320 MB answer (twenty 16 MB strings), the same rows within the string limit, and a
/// JSON aggregate that would grow to 4 GB are each refused with `sql_too_large`, and serve's peak
/// resident set stays bounded (`serve` in a 1.5 GiB cgroup was OOM-killed by 120 such rows).
#[test]
fn serve_refuses_oversized_answers_and_its_memory_stays_bounded() {
    let data = tempfile::tempdir().unwrap();
    projection(data.path(), 27);
    let (mut serve, addr) = serve(data.path());
    let rows = |n: u32, bytes: u32| {
        format!(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n<{n}) \
             SELECT printf('%.*c',{bytes},'x') FROM r"
        )
    };
    let idle = peak_rss_kib(serve.pid());
    for (sql, says) in [
        (rows(20, 16_000_000), "string or blob"),
        (rows(120, 16_000_000), "string or blob"),
        (rows(120, 4_000_000), "the answer"),
        (
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n<1000) \
             SELECT length(json_group_array(printf('%.*c',4000000,'x'))) FROM r"
                .to_owned(),
            "memory",
        ),
    ] {
        let (status, body) = post_sql(addr, &serde_json::json!({"sql": sql, "timeout_ms": 10000}));
        assert_eq!(status, 422, "{sql}: {body}");
        assert_eq!(body["error"]["code"], "sql_too_large", "{sql}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{sql}: {message}");
    }
    let peak = peak_rss_kib(serve.pid());
    println!(
        "serve VmHWM: {} MiB idle, {} MiB after the oversized statements",
        idle / 1024,
        peak / 1024
    );
    assert!(
        peak < 512 * 1024,
        "serve's peak resident set is {} MiB",
        peak / 1024
    );
    // Still serving.
    let (status, body) = post_sql(
        addr,
        &serde_json::json!({"sql": "SELECT count(*) FROM invocations"}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        serve
            .terminate(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
}

/// SIGTERM while statements run (two in the admins' slots, two waiting for one): `serve` printed
/// "stopped" and stayed alive for minutes; it now stops their statements and exits within 5 s.
#[test]
fn serve_stops_within_5_seconds_of_sigterm_while_statements_run() {
    let data = tempfile::tempdir().unwrap();
    projection(data.path(), 27);
    let (mut serve, addr) = serve(data.path());
    let runaway = serde_json::json!({
        "sql": "SELECT instr(printf('%.*c',4000000,'a'), printf('%.*c',400000,'a')||'b')",
        "timeout_ms": 10000,
    });
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let runaway = runaway.clone();
            std::thread::spawn(move || post_sql(addr, &runaway))
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sql_running(addr) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the statements did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let signaled = std::time::Instant::now();
    let status = serve.terminate(Duration::from_secs(30));
    let took = signaled.elapsed();
    println!("serve exited {took:?} after SIGTERM with statements running");
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        serve.stderr()
    );
    assert!(took < Duration::from_secs(5), "serve took {took:?} to stop");
    assert!(serve.stdout().contains("stopped"), "{}", serve.stdout());
    for client in clients {
        let (status, body) = client.join().unwrap();
        // Stopped mid-statement (503 sql_canceled), or the connection closed with the server.
        assert!(
            status == 0 || body["error"]["code"] == "sql_canceled",
            "{status}: {body}"
        );
    }
}
