//! `POST /v1/sql` under load and abuse (issue 27): the expensive statement is answered within twice
//! its time limit, one tenant's runaway statements leave another tenant a slot, clients that hang up
//! leave no statement running, and the access records of reads — an admin's statement naming another
//! tenant's ids, searches that find nothing — hold for each tenant only that tenant's ids and text,
//! also once projected into `access_reads`.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolledger_projector::{Generations, SqlLimits, SqlScope, Store, TENANT_TABLES, run_sql};
use toolledger_query::{AccessLog, AccessQueue, AccessRead};
use toolledger_schemas::generator::{Generated, GeneratorConfig, generate};

use crate::{Server, apply};

const ADMIN_TOKEN: &str = "sql-admin-token-0123456789abcdef";
const ACME_TOKEN: &str = "sql-acme-token-0123456789abcdef";
const GLOBEX_TOKEN: &str = "sql-globex-token-0123456789abcdef";

/// Counts forever; only a time limit or an interrupt ends it.
const RUNAWAY: &str =
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r";

/// A projection of acme's and globex's generated sessions, served with an admin token and one token
/// per tenant, reads recorded to a queue the test reads.
struct Served {
    dir: tempfile::TempDir,
    generated: Generated,
    server: Server,
    reads: AccessQueue,
}

async fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let generated = generate(&GeneratorConfig {
        seed: 27,
        sessions: 4,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        ..GeneratorConfig::default()
    });
    crate::project(dir.path(), &generated.events);
    let (log, reads) = AccessLog::channel();
    let server = crate::serve(
        dir.path(),
        &[
            ("admin", ADMIN_TOKEN, None),
            ("acme-reader", ACME_TOKEN, Some("acme")),
            ("globex-reader", GLOBEX_TOKEN, Some("globex")),
        ],
        Some(log),
    )
    .await;
    Served {
        dir,
        generated,
        server,
        reads,
    }
}

impl Served {
    /// Posts a statement; the status, the body and how long the answer took.
    async fn sql(&self, token: &str, body: Value) -> (u16, Value, Duration) {
        let (addr, token) = (self.server.addr, token.to_owned());
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let reply =
                toolledger_testkit::http_post(addr, "/v1/sql", Some(&token), &body.to_string()).unwrap();
            let took = started.elapsed();
            (reply.status, serde_json::from_str(&reply.body).unwrap(), took)
        })
        .await
        .unwrap()
    }

    async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.server.get(path, token).await
    }

    /// `toolledger_api_sql_running` from `/metrics`: statements holding a blocking thread.
    async fn running(&self) -> i64 {
        let addr = self.server.addr;
        let reply = tokio::task::spawn_blocking(move || toolledger_testkit::http_get(addr, "/metrics"))
            .await
            .unwrap()
            .unwrap();
        reply
            .body
            .lines()
            .find_map(|l| l.strip_prefix("toolledger_api_sql_running "))
            .unwrap_or_else(|| panic!("no sql gauge in /metrics:\n{}", reply.body))
            .trim()
            .parse()
            .unwrap()
    }

    /// Waits (bounded) until `running()` satisfies `done`; its last value.
    async fn wait_running(&self, done: impl Fn(i64) -> bool, within: Duration) -> (i64, Duration) {
        let started = Instant::now();
        loop {
            let running = self.running().await;
            if done(running) || started.elapsed() > within {
                return (running, started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The access records queued so far.
    async fn drain(&mut self) -> Vec<AccessRead> {
        let mut records = Vec::new();
        while let Ok(Some(read)) = tokio::time::timeout(Duration::from_millis(300), self.reads.recv()).await {
            records.push(read);
        }
        records
    }

    async fn stop(self) {
        self.server.stop().await;
    }
}

/// The issue's statement ran 37 s with `timeout_ms=1000` and answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_37_second_statement_is_answered_within_twice_its_timeout() {
    let served = serve().await;
    let statement = "SELECT instr(printf('%.*c',4000000,'a'), printf('%.*c',400000,'a')||'b')";
    let (status, body, took) = served
        .sql(ACME_TOKEN, json!({"sql": statement, "timeout_ms": 1000}))
        .await;
    println!("answered {status} after {took:?}: {body}");
    assert_eq!(status, 422, "{body}");
    let code = body["error"]["code"].as_str().unwrap();
    assert!(code == "sql_timeout" || code == "sql_too_large", "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let (running, _) = served.wait_running(|n| n == 0, Duration::from_secs(2)).await;
    assert_eq!(running, 0, "the statement stopped with its answer");
    served.stop().await;
}

/// Two statements of one tenant held both slots of the server, so every other tenant got 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_answers_while_another_tenants_two_runaway_statements_run() {
    let served = std::sync::Arc::new(serve().await);
    let runaways: Vec<_> = (0..2)
        .map(|_| {
            let served = std::sync::Arc::clone(&served);
            tokio::spawn(async move {
                served
                    .sql(ACME_TOKEN, json!({"sql": RUNAWAY, "timeout_ms": 5000}))
                    .await
            })
        })
        .collect();
    let (running, _) = served.wait_running(|n| n == 2, Duration::from_secs(5)).await;
    assert_eq!(running, 2, "acme's two statements run");
    let (status, body, took) = served
        .sql(
            GLOBEX_TOKEN,
            json!({"sql": "SELECT count(*) AS n, min(tenant) AS tenant FROM invocations"}),
        )
        .await;
    println!("globex answered {status} after {took:?} beside acme's two runaway statements");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rows"][0][1], "globex", "{body}");
    assert_eq!(served.running().await, 2, "acme's statements still run");
    for runaway in runaways {
        let (status, body, _) = runaway.await.unwrap();
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some("sql_timeout"))
        );
    }
    std::sync::Arc::into_inner(served).unwrap().stop().await;
}

/// A client that hung up freed its slot but its thread ran on: after ten, ten threads burned CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_up_clients_leave_no_statement_running() {
    let served = serve().await;
    let addr = served.server.addr;
    let body = json!({"sql": RUNAWAY, "timeout_ms": 10000}).to_string();
    let clients: Vec<std::net::TcpStream> = (0..10)
        .map(|i| {
            let token = if i % 2 == 0 { ACME_TOKEN } else { GLOBEX_TOKEN };
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            write!(
                stream,
                "POST /v1/sql HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            stream
        })
        .collect();
    let (running, _) = served.wait_running(|n| n == 4, Duration::from_secs(5)).await;
    assert_eq!(
        running, 4,
        "two statements of each tenant run, the rest wait for a slot"
    );
    let hung_up = Instant::now();
    drop(clients);
    let (running, took) = served.wait_running(|n| n == 0, Duration::from_secs(8)).await;
    println!(
        "{running} statements running {:?} after ten clients hung up",
        hung_up.elapsed()
    );
    assert_eq!(
        running, 0,
        "statements of clients that hung up still run after {took:?}"
    );
    // Their slots are free again.
    let (status, body, _) = served.sql(ACME_TOKEN, json!({"sql": "SELECT 1"})).await;
    assert_eq!(status, 200, "{body}");
    served.stop().await;
}

/// Whether `text` mentions `id` as a whole token.
fn mentions(text: &str, id: &str) -> bool {
    let token = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c);
    text.match_indices(id).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(token)
            && !text[at + id.len()..].chars().next().is_some_and(token)
    })
}

/// `sha256:<hex>` of a read's text, as its records carry it.
fn digest_of(text: &str) -> String {
    use sha2::Digest;
    format!(
        "sha256:{}",
        toolledger_wire::entry::hex(&sha2::Sha256::digest(text.as_bytes()))
    )
}

/// An admin's statement naming globex's ids was recorded, text and all, for every tenant; a search
/// that found nothing was not recorded at all. Now acme's records, and everything acme can read
/// once they are projected, hold nothing an admin wrote about globex.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_reads_hold_only_their_tenants_ids_and_text() {
    let mut served = serve().await;
    let globex: Vec<&toolledger_schemas::generator::InvocationTruth> = served
        .generated
        .truth
        .invocations
        .iter()
        .filter(|i| i.tenant == "globex")
        .collect();
    // Ids only admins name (acme never types them), and a session acme probes for.
    let probed_session = globex[0].session_id.clone();
    let secret_session = globex
        .iter()
        .map(|i| i.session_id.clone())
        .find(|s| *s != probed_session)
        .expect("globex has two sessions");
    let secret_invocation = globex
        .iter()
        .find(|i| i.session_id == secret_session)
        .unwrap()
        .invocation_id
        .clone();
    let admin_statement =
        format!("SELECT count(*) AS n FROM invocations WHERE invocation_id = '{secret_invocation}'");

    let (status, body, _) = served.sql(ADMIN_TOKEN, json!({"sql": admin_statement})).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = served
        .get(
            &format!("/v1/invocations?session_id={secret_session}"),
            ADMIN_TOKEN,
        )
        .await;
    assert_eq!(status, 200);
    // acme probes for globex's session: nothing comes back, and that is recorded.
    let (status, body) = served
        .get(
            &format!("/v1/invocations?session_id={probed_session}"),
            ACME_TOKEN,
        )
        .await;
    assert_eq!((status, body["items"].as_array().map(Vec::len)), (200, Some(0)));
    let (status, _) = served
        .get(&format!("/v1/sessions/{probed_session}"), ACME_TOKEN)
        .await;
    assert_eq!(status, 404);
    let (status, body) = served.get("/v1/sessions?status=no-such-state", ACME_TOKEN).await;
    assert_eq!((status, body["items"].as_array().map(Vec::len)), (200, Some(0)));
    let (status, body, _) = served
        .sql(ACME_TOKEN, json!({"sql": "SELECT * FROM invocations WHERE 0"}))
        .await;
    assert_eq!(status, 200, "{body}");

    let records = served.drain().await;
    for record in &records {
        println!(
            "{:8} {:38} rows {:2} ids {:?} query {:?} digest {:?}",
            record.tenant,
            record.endpoint,
            record.row_count,
            record.invocation_ids,
            record.query,
            record.query_sha256
        );
    }
    let acme: Vec<&AccessRead> = records.iter().filter(|r| r.tenant == "acme").collect();
    for record in &acme {
        let text =
            serde_json::to_string(&json!([record.query, record.invocation_ids, record.session_ids])).unwrap();
        for secret in [&secret_invocation, &secret_session] {
            assert!(
                !mentions(&text, secret),
                "acme's record holds {secret}: {record:?}"
            );
        }
    }
    // The admin's statement: its digest in acme's and globex's records, its text only in `_system`'s.
    let digest = digest_of(&admin_statement);
    let of_statement: Vec<&AccessRead> = records
        .iter()
        .filter(|r| r.query_sha256.as_deref() == Some(digest.as_str()))
        .collect();
    let tenants: BTreeSet<&str> = of_statement.iter().map(|r| r.tenant.as_str()).collect();
    assert_eq!(
        tenants,
        BTreeSet::from(["_system", "acme", "globex"]),
        "{of_statement:?}"
    );
    for record in &of_statement {
        assert_eq!(record.query.is_some(), record.tenant == "_system", "{record:?}");
    }
    // Reads that found nothing are recorded: for the tenant they were confined to, with the digest
    // of what was asked (a probe may name another tenant's ids), and the text in `_system`'s.
    for (endpoint, query) in [
        ("GET /v1/invocations", format!("session_id={probed_session}")),
        (
            "GET /v1/sessions/{session_id}",
            format!("session_id={probed_session}"),
        ),
        ("GET /v1/sessions", "status=no-such-state".to_owned()),
        ("POST /v1/sql", "SELECT * FROM invocations WHERE 0".to_owned()),
    ] {
        let digest = digest_of(&query);
        let recorded = |tenant: &str, text: Option<&str>| {
            records.iter().any(|r| {
                r.tenant == tenant
                    && r.principal == "acme-reader"
                    && r.endpoint == endpoint
                    && r.row_count == 0
                    && r.query.as_deref() == text
                    && r.query_sha256.as_deref() == Some(digest.as_str())
            })
        };
        assert!(
            recorded("acme", None),
            "no acme record of its empty read {endpoint} {query}"
        );
        assert!(
            recorded("_system", Some(query.as_str())),
            "no _system record of acme's empty read {endpoint} {query}"
        );
    }
    // A read that returned acme's rows keeps its text in acme's record.
    let (status, body, _) = served
        .sql(ACME_TOKEN, json!({"sql": "SELECT count(*) FROM invocations"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let own = served.drain().await;
    assert!(
        own.iter().any(|r| r.tenant == "acme"
            && r.query.as_deref() == Some("SELECT count(*) FROM invocations")
            && r.row_count == 1),
        "{own:?}"
    );

    // Projected as ingest would append them, nothing acme can read holds what the admin wrote.
    let database = Generations::new(served.dir.path())
        .current()
        .unwrap()
        .unwrap()
        .database();
    let mut store = Store::open(&database, Default::default()).unwrap();
    let entries = records
        .iter()
        .enumerate()
        .map(|(i, read)| {
            let event =
                toolledger_query::access::event(read, &format!("acc_test_{i}"), "2026-01-01T00:00:00.000Z");
            toolledger_testkit::entry_bytes(&event)
        })
        .collect();
    apply(&mut store, entries);
    drop(store);
    let as_acme = |sql: &str| {
        run_sql(
            &database,
            &SqlScope::Tenant("acme".to_owned()),
            sql,
            SqlLimits::default(),
        )
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    let projected = as_acme("SELECT * FROM access_reads");
    assert!(
        projected.rows.len() >= acme.len(),
        "acme reads its records: {projected:?}"
    );
    for table in TENANT_TABLES {
        let body = serde_json::to_string(&as_acme(&format!("SELECT * FROM {table}"))).unwrap();
        for secret in [&secret_invocation, &secret_session] {
            assert!(!mentions(&body, secret), "acme reads {secret} in {table}");
        }
        assert!(
            !body.contains("count(*) AS n FROM invocations WHERE"),
            "acme reads the admin's statement in {table}"
        );
    }
    // An admin reads the statement in the ledger's own record.
    let admin = run_sql(
        &database,
        &SqlScope::Admin,
        "SELECT query FROM access_reads WHERE tenant = '_system' AND endpoint = 'POST /v1/sql' AND principal = 'admin'",
        SqlLimits::default(),
    )
    .unwrap();
    assert_eq!(admin.rows, vec![vec![Value::from(admin_statement.as_str())]]);
    served.stop().await;
}
