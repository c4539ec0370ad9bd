//! The analysts' SQL sandbox: tenant A's statements see only tenant A's rows, whatever the statement
//! tries — filter tricks, joins, subqueries, recursive CTEs, ATTACH, pragmas, extensions, writes —
//! and runaway statements are cut off with a clear error.

use std::time::Duration;

use toolledger_projector::{Error, RawEntry, SqlLimits, SqlScope, Store, run_sql};
use toolledger_schemas::generator::{self, GeneratorConfig};

use crate::ledger;

/// A projection of two tenants' generated sessions.
fn two_tenants() -> (tempfile::TempDir, std::path::PathBuf) {
    let generated = generator::generate(&GeneratorConfig {
        seed: 3,
        sessions: 2,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        ..GeneratorConfig::default()
    });
    let entries: Vec<RawEntry> = generated
        .events
        .iter()
        .enumerate()
        .map(|(i, event)| RawEntry {
            seq: i as u64 + 1,
            bytes: ledger::entry_bytes(event),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.sqlite");
    let mut store = Store::open(&path, Default::default()).unwrap();
    store.apply_batch(&entries).unwrap();
    drop(store);
    (dir, path)
}

fn acme() -> SqlScope {
    SqlScope::Tenant("acme".to_owned())
}

fn scalar(path: &std::path::Path, scope: &SqlScope, sql: &str) -> serde_json::Value {
    let result = run_sql(path, scope, sql, SqlLimits::default()).unwrap_or_else(|e| panic!("{sql}: {e}"));
    result.rows[0][0].clone()
}

fn refused(path: &std::path::Path, sql: &str) -> String {
    match run_sql(path, &acme(), sql, SqlLimits::default()) {
        Err(Error::SqlRefused { reason }) => reason,
        other => panic!("{sql}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_tenant_reads_only_its_own_rows_through_every_trick() {
    let (_dir, path) = two_tenants();
    let all = scalar(&path, &SqlScope::Admin, "SELECT count(*) FROM main.events")
        .as_i64()
        .unwrap();
    let mine = scalar(
        &path,
        &SqlScope::Admin,
        "SELECT count(*) FROM events WHERE tenant = 'acme'",
    )
    .as_i64()
    .unwrap();
    assert!(
        mine > 0 && mine < all,
        "both tenants have events ({mine} of {all})"
    );

    // The views answer with the tenant's rows only, however the filter is written.
    for sql in [
        "SELECT count(*) FROM events",
        "SELECT count(*) FROM events WHERE 1 = 1 OR tenant = 'globex'",
        "SELECT count(*) FROM events WHERE tenant <> 'nobody'",
        "SELECT count(*) FROM (SELECT * FROM events UNION ALL SELECT * FROM events WHERE tenant = 'globex')",
        "WITH x AS (SELECT * FROM events) SELECT count(*) FROM x",
        "SELECT count(*) FROM events e LEFT JOIN sessions s ON s.session_id = e.session_id AND s.tenant = e.tenant",
    ] {
        assert_eq!(scalar(&path, &acme(), sql).as_i64(), Some(mine), "{sql}");
    }
    for sql in [
        "SELECT count(*) FROM invocations WHERE tenant = 'globex'",
        "SELECT count(*) FROM tools t WHERE t.tenant != 'acme'",
        "SELECT count(*) FROM (SELECT tenant FROM sessions) WHERE tenant = 'globex'",
        "SELECT count(*) FROM permission_decisions d JOIN invocations i USING (invocation_id) WHERE i.tenant = 'globex'",
    ] {
        assert_eq!(scalar(&path, &acme(), sql).as_i64(), Some(0), "{sql}");
    }
    // A bounded recursive CTE is fine.
    let sum = scalar(
        &path,
        &acme(),
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) SELECT sum(x) FROM c",
    );
    assert_eq!(sum.as_i64(), Some(55));
    // json_each over the tenant's own values works.
    let refs = scalar(
        &path,
        &acme(),
        "SELECT count(*) FROM events, json_each(events.scrubbed_paths)",
    );
    assert!(refs.as_i64().is_some());

    // Reaching past the views, or outside read-only SQL, is refused with the reason.
    for (sql, says) in [
        ("SELECT * FROM main.events", "schema-qualified"),
        (
            "SELECT (SELECT count(*) FROM MAIN . invocations)",
            "schema-qualified",
        ),
        (
            "SELECT e.seq FROM events e JOIN main.sessions s USING (session_id)",
            "schema-qualified",
        ),
        (
            "SELECT e.seq FROM events e JOIN \"Main\".\"sessions\" s USING (session_id)",
            "schema-qualified",
        ),
        (
            "SELECT e.seq FROM events e JOIN [main].sessions s USING (session_id)",
            "schema-qualified",
        ),
        (
            "SELECT e.seq FROM events e JOIN 'main'/* x */.sessions s USING (session_id)",
            "schema-qualified",
        ),
        (
            "WITH RECURSIVE t(n) AS (SELECT tenant FROM main.tools UNION SELECT n FROM t) SELECT * FROM t",
            "schema-qualified",
        ),
        ("SELECT * FROM sqlite_master", "readable only through"),
        ("SELECT value FROM meta", "readable only through"),
        ("ATTACH DATABASE '/tmp/toolledger-sql-test' AS other", "ATTACH"),
        ("PRAGMA table_info(events)", "PRAGMA"),
        ("SELECT * FROM pragma_table_info('events')", "PRAGMA"),
        ("PRAGMA query_only = 0", "PRAGMA"),
        ("SELECT load_extension('/tmp/evil')", "load_extension"),
        ("SELECT length(zeroblob(1000000000))", "zeroblob"),
        ("DELETE FROM events", "read-only"),
        ("INSERT INTO events (seq) VALUES (999999)", "read-only"),
        ("UPDATE invocations SET state = 'x'", "read-only"),
        ("CREATE TEMP VIEW leak AS SELECT * FROM main.events", "read-only"),
        ("DROP VIEW events", "read-only"),
        ("BEGIN", "read-only"),
    ] {
        let reason = refused(&path, sql);
        assert!(reason.contains(says), "{sql}: {reason}");
    }
    // `main` as a value or a column alias is fine.
    assert_eq!(
        scalar(&path, &acme(), "SELECT 'main' AS main").as_str(),
        Some("main")
    );
    // Two statements at once are not run.
    assert!(matches!(
        run_sql(
            &path,
            &acme(),
            "SELECT 1; DELETE FROM events",
            SqlLimits::default()
        ),
        Err(Error::SqlInvalid { .. } | Error::SqlRefused { .. })
    ));
    // A tenant name is never spliced into SQL unchecked.
    assert!(matches!(
        run_sql(
            &path,
            &SqlScope::Tenant("acme' OR '1'='1".to_owned()),
            "SELECT 1",
            SqlLimits::default()
        ),
        Err(Error::SqlRefused { .. })
    ));
    // Nothing changed.
    assert_eq!(
        scalar(&path, &SqlScope::Admin, "SELECT count(*) FROM events").as_i64(),
        Some(all)
    );
}

#[test]
fn runaway_statements_are_cut_off_and_rows_are_capped() {
    let (_dir, path) = two_tenants();
    let limits = SqlLimits {
        timeout: Duration::from_millis(300),
        max_rows: 5,
        ..SqlLimits::default()
    };
    for sql in [
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "SELECT count(*) FROM events a, events b, events c, events d, events e",
    ] {
        match run_sql(&path, &acme(), sql, limits) {
            Err(Error::SqlTimeout { limit_ms: 300 }) => {}
            other => panic!("{sql}: expected a timeout, got {other:?}"),
        }
    }
    let capped = run_sql(&path, &acme(), "SELECT seq FROM events ORDER BY seq", limits).unwrap();
    assert_eq!(capped.rows.len(), 5);
    assert!(capped.truncated);
    assert_eq!(capped.columns, ["seq"]);
    let all = run_sql(&path, &acme(), "SELECT seq FROM events LIMIT 3", limits).unwrap();
    assert!(!all.truncated && all.rows.len() == 3);
}
