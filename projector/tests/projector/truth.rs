//! A generated run, projected, equals the generator's truth; a rebuild equals the incremental result.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use serde_json::Value;
use toolledger_projector::{Generations, Options, Store};
use toolledger_schemas::generator::{self, GeneratorConfig, Truth};
use toolledger_testkit::NatsFixture;

use crate::ledger;

fn config() -> GeneratorConfig {
    GeneratorConfig {
        seed: 4242,
        sessions: 6,
        tenants: vec!["acme".to_owned(), "globex".to_owned()],
        extra_invocations: 3,
        plant_anomalies: true,
        ..GeneratorConfig::default()
    }
}

fn json(text: Option<String>) -> Option<Value> {
    text.map(|t| serde_json::from_str(&t).unwrap())
}

fn strings(conn: &Connection, sql: &str, args: &[&dyn rusqlite::ToSql]) -> Vec<String> {
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map(args, |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_equals_the_generators_truth_and_a_rebuild_equals_it() {
    let nats = NatsFixture::start();
    let js = ledger::create_ledger(nats.client().await).await;
    let generated = generator::generate(&config());
    let mut events = generated.events.clone();
    events.insert(5, ledger::quarantine_receipt(1));
    events.push(ledger::quarantine_receipt(2));
    let last = ledger::append(&js, &events).await;
    assert_eq!(last, events.len() as u64);

    let data = tempfile::tempdir().unwrap();
    let options = Options {
        batch_size: 97,
        ..Options::new(data.path().to_path_buf())
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut run = tokio::spawn({
        let client = nats.client().await;
        let options = options.clone();
        async move {
            toolledger_projector::run(client, &options, async {
                let _ = stopped.await;
            })
            .await
        }
    });
    let started = Instant::now();
    ledger::wait_for_position(data.path(), last, Duration::from_secs(120), &mut run).await;
    let elapsed = started.elapsed();
    println!(
        "applied {last} entries in {elapsed:?} ({:.0} entries/s, batches of 97)",
        last as f64 / elapsed.as_secs_f64()
    );
    stop.send(()).unwrap();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.position, last);
    assert_eq!(summary.generation.name(), "gen-1");

    let database = summary.generation.database();
    let store = Store::open_readonly(&database).unwrap();
    check_truth(store.connection(), &generated.truth, &events);
    let incremental = store.table_contents().unwrap();
    drop(store);

    // A rebuild writes gen-2 from seq 1 and switches `current`; its tables equal the incremental ones.
    let rebuilt = toolledger_projector::rebuild(nats.client().await, &options, std::future::pending())
        .await
        .unwrap();
    assert!(rebuilt.switched);
    assert_eq!(rebuilt.position, last);
    assert_eq!(rebuilt.generation.name(), "gen-2");
    let generations = Generations::new(data.path());
    assert_eq!(generations.current().unwrap().unwrap(), rebuilt.generation);
    let fresh = Store::open_readonly(&rebuilt.generation.database())
        .unwrap()
        .table_contents()
        .unwrap();
    assert_eq!(
        fresh.keys().collect::<Vec<_>>(),
        incremental.keys().collect::<Vec<_>>()
    );
    for (table, rows) in &incremental {
        assert_eq!(rows, &fresh[table], "table {table} differs after a rebuild");
    }
    // The old generation stays readable for readers that have not reopened.
    assert!(database.exists());
    // The next rebuild keeps the generation it replaces (gen-2) and removes the ones before it.
    let again = toolledger_projector::rebuild(nats.client().await, &options, std::future::pending())
        .await
        .unwrap();
    assert_eq!(again.generation.name(), "gen-3");
    let names: Vec<String> = generations.list().unwrap().iter().map(|g| g.name()).collect();
    assert_eq!(names, ["gen-2", "gen-3"]);
}

fn check_truth(conn: &Connection, truth: &Truth, events: &[Value]) {
    // Every entry is indexed once, with its leaf hash and nothing left unprojected.
    let count: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, events.len() as i64);
    let problems = strings(conn, "SELECT problem FROM events WHERE problem IS NOT NULL", &[]);
    assert!(problems.is_empty(), "{problems:?}");
    let leaf: String = conn
        .query_row("SELECT leaf_hash FROM events WHERE seq = 1", [], |r| r.get(0))
        .unwrap();
    let expected =
        toolledger_wire::entry::hex(&toolledger_merkle::leaf_hash(&ledger::entry_bytes(&events[0])));
    assert_eq!(leaf, expected);

    let planted_illegal: BTreeSet<&str> = truth
        .anomalies
        .iter()
        .filter(|a| a.kind == "illegal_transition")
        .filter_map(|a| a.invocation_id.as_deref())
        .collect();
    let mut checked = 0;
    for inv in &truth.invocations {
        let id = inv.invocation_id.as_str();
        let tenant = inv.tenant.as_str();
        let row = conn
            .query_row(
                "SELECT state, terminal, tool_id, session_id, retry_of, attempt, error_class, result_id,
                    model_input, observable_input, permission_input, call_input
                 FROM invocations WHERE tenant = ?1 AND invocation_id = ?2",
                params![tenant, id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, bool>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                        r.get::<_, Option<String>>(6)?,
                        r.get::<_, Option<String>>(7)?,
                        [r.get(8)?, r.get(9)?, r.get(10)?, r.get(11)?],
                    ))
                },
            )
            .unwrap_or_else(|e| panic!("invocation {id}: {e}"));
        let (state, terminal, tool, session, retry_of, attempt, error_class, result_id, inputs) = row;
        let what = format!("{id} ({:?})", inv.scenario);
        assert_eq!(state, inv.final_state, "{what}: final state");
        assert_eq!(terminal, inv.terminal, "{what}");
        assert_eq!(tool.as_deref(), Some(inv.tool_id.as_str()), "{what}");
        assert_eq!(session.as_deref(), Some(inv.session_id.as_str()), "{what}");
        assert_eq!(retry_of, inv.retry_of, "{what}: retry_of");
        assert_eq!(attempt.unwrap_or(1), i64::from(inv.attempt), "{what}: attempt");
        assert_eq!(error_class, inv.error_class, "{what}: error class");

        // The four inputs.
        let [model, observable, permission, call] = inputs;
        assert_eq!(json(model), inv.inputs.model_input, "{what}: model_input");
        assert_eq!(
            json(observable),
            inv.inputs.observable_input,
            "{what}: observable_input"
        );
        assert_eq!(
            json(permission),
            inv.inputs.permission_input,
            "{what}: permission_input"
        );
        assert_eq!(json(call), inv.inputs.call_input, "{what}: call_input");

        // Every state entered, in order (an illegal move is refused, so it is not entered).
        if !planted_illegal.contains(id) {
            let states = strings(
                conn,
                "SELECT to_state FROM invocation_transitions WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq",
                &[&tenant, &id],
            );
            assert_eq!(states, inv.states, "{what}: states");
        }

        // Mutations with their sources.
        let mut stmt = conn
            .prepare(
                "SELECT source, source_id, from_input, to_input, changed_fields FROM input_mutations
                 WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq, idx",
            )
            .unwrap();
        let mutations: Vec<(String, String, String, String, Vec<String>)> = stmt
            .query_map(params![tenant, id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    serde_json::from_str(&r.get::<_, String>(4)?).unwrap(),
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected: Vec<_> = inv
            .mutations
            .iter()
            .map(|m| {
                (
                    m.source.clone(),
                    m.source_id.clone(),
                    m.from.clone(),
                    m.to.clone(),
                    m.changed_fields.clone(),
                )
            })
            .collect();
        assert_eq!(mutations, expected, "{what}: mutations");

        // Permission decisions, hooks, progress, partial results.
        let mut stmt = conn
            .prepare(
                "SELECT decision_id, behavior, updated_input IS NOT NULL FROM permission_decisions
                 WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY seq",
            )
            .unwrap();
        let decisions: Vec<(String, String, bool)> = stmt
            .query_map(params![tenant, id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected: Vec<_> = inv
            .permission_decisions
            .iter()
            .map(|d| (d.decision_id.clone(), d.behavior.clone(), d.updated_input))
            .collect();
        assert_eq!(decisions, expected, "{what}: decisions");
        let mut stmt = conn
            .prepare(
                "SELECT hook_id, hook_event, updated_input IS NOT NULL, updated_output IS NOT NULL, stop IS NOT NULL
                 FROM hooks WHERE tenant = ?1 AND invocation_id = ?2 ORDER BY first_seq",
            )
            .unwrap();
        let hooks: Vec<(String, String, bool, bool, bool)> = stmt
            .query_map(params![tenant, id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected: Vec<_> = inv
            .hooks
            .iter()
            .map(|h| {
                (
                    h.hook_id.clone(),
                    h.hook_event.clone(),
                    h.updated_input,
                    h.updated_output,
                    h.stop,
                )
            })
            .collect();
        assert_eq!(hooks, expected, "{what}: hooks");
        let progress: i64 = conn
            .query_row(
                "SELECT count(*) FROM progress WHERE tenant = ?1 AND invocation_id = ?2",
                params![tenant, id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(progress, inv.progress_count as i64, "{what}: progress");
        let partial: i64 = conn
            .query_row(
                "SELECT count(*) FROM results WHERE tenant = ?1 AND invocation_id = ?2 AND kind = 'partial'",
                params![tenant, id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(partial, inv.partial_results as i64, "{what}: partial results");

        // The result, its persistence and redaction.
        match &inv.result {
            None => assert_eq!(result_id, None, "{what}: no result"),
            Some(expected) => {
                assert_eq!(result_id.as_deref(), Some(expected.result_id.as_str()), "{what}");
                let (status, is_error, bytes, redaction): (String, bool, i64, Option<String>) = conn
                    .query_row(
                        "SELECT status, is_error, content_bytes, redaction_state FROM results
                         WHERE tenant = ?1 AND result_id = ?2",
                        params![tenant, expected.result_id],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                    )
                    .unwrap();
                assert_eq!(status, expected.status, "{what}: result status");
                assert_eq!(is_error, expected.is_error, "{what}");
                assert_eq!(bytes, expected.content_bytes as i64, "{what}: content bytes");
                match &expected.redaction_state {
                    Some(state) => assert_eq!(redaction.as_ref(), Some(state), "{what}: redaction"),
                    None => assert!(matches!(redaction.as_deref(), None | Some("none")), "{what}"),
                }
                let strategy = strings(
                    conn,
                    "SELECT strategy FROM result_persistence WHERE tenant = ?1 AND result_id = ?2",
                    &[&tenant, &expected.result_id],
                );
                assert_eq!(
                    strategy.first(),
                    expected.persistence.as_ref(),
                    "{what}: persistence"
                );
            }
        }
        for kind in &inv.anomalies {
            let found: i64 = conn
                .query_row(
                    "SELECT count(*) FROM anomalies WHERE tenant = ?1 AND invocation_id = ?2 AND kind = ?3",
                    params![tenant, id, kind],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(found > 0, "{what}: planted {kind} not recorded");
        }
        checked += 1;
    }
    assert_eq!(checked, truth.invocations.len());
    assert!(truth.invocations.iter().any(|i| i.retry_of.is_some()));

    // Every planted anomaly, on the entry that triggers it; no others except unknown values.
    let mut stmt = conn
        .prepare("SELECT a.kind, e.event_id FROM anomalies a JOIN events e ON e.seq = a.seq")
        .unwrap();
    let recorded: BTreeSet<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let planted: BTreeSet<(String, String)> = truth
        .anomalies
        .iter()
        .map(|a| (a.kind.clone(), a.event_id.clone()))
        .collect();
    assert!(planted.len() >= 7, "{planted:?}");
    let missing: Vec<_> = planted.difference(&recorded).collect();
    assert!(missing.is_empty(), "planted anomalies not recorded: {missing:?}");
    let unexpected: Vec<_> = recorded
        .difference(&planted)
        .filter(|(kind, _)| kind != "unknown_value")
        .collect();
    assert!(unexpected.is_empty(), "anomalies nobody planted: {unexpected:?}");
    let orphan_state: String = conn
        .query_row(
            "SELECT i.state FROM invocations i JOIN anomalies a ON a.invocation_id = i.invocation_id
             WHERE a.kind = 'orphan_event'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphan_state, "unknown");

    // Sessions, catalog, surfaces, deferred refs, quarantine receipts.
    for session in &truth.sessions {
        let (count, first, last): (i64, String, String) = conn
            .query_row(
                "SELECT event_count, first_time, last_time FROM sessions WHERE tenant = ?1 AND session_id = ?2",
                params![session.tenant, session.session_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            count, session.event_count as i64,
            "session {}",
            session.session_id
        );
        let ns = |t: &str| toolledger_schemas::EventTime::parse_rfc3339(t).unwrap();
        assert_eq!(ns(&first), ns(&session.started_at));
        assert_eq!(ns(&last), ns(&session.ended_at));
    }
    for tool in &truth.tools {
        let versions = strings(
            conn,
            "SELECT version FROM tool_versions WHERE tenant = ?1 AND tool_id = ?2 ORDER BY version_no",
            &[&tool.tenant, &tool.tool_id],
        );
        assert_eq!(versions, tool.versions, "{} {}", tool.tenant, tool.tool_id);
        let lifecycle: String = conn
            .query_row(
                "SELECT lifecycle FROM tools WHERE tenant = ?1 AND tool_id = ?2",
                params![tool.tenant, tool.tool_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(lifecycle, tool.lifecycle);
    }
    let aliases: i64 = conn
        .query_row("SELECT count(*) FROM tool_aliases", [], |r| r.get(0))
        .unwrap();
    assert!(aliases > 0, "re-declarations add aliases");
    for surface in &truth.surfaces {
        let revision: i64 = conn
            .query_row(
                "SELECT revision FROM surfaces WHERE tenant = ?1 AND surface_id = ?2",
                params![surface.tenant, surface.surface_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(revision, surface.revisions as i64);
        let tools = |disposition: &str| -> BTreeMap<String, Option<String>> {
            let mut stmt = conn
                .prepare(
                    "SELECT tool_id, reason FROM surface_tools
                     WHERE tenant = ?1 AND surface_id = ?2 AND revision = ?3 AND disposition = ?4",
                )
                .unwrap();
            stmt.query_map(
                params![surface.tenant, surface.surface_id, revision, disposition],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
            .map(Result::unwrap)
            .collect()
        };
        let ids = |m: BTreeMap<String, Option<String>>| m.into_keys().collect::<BTreeSet<_>>();
        assert_eq!(ids(tools("loaded")), surface.loaded.iter().cloned().collect());
        assert_eq!(ids(tools("deferred")), surface.deferred.iter().cloned().collect());
        let with_reasons = |m: BTreeMap<String, Option<String>>| {
            m.into_iter()
                .map(|(t, r)| (t, r.unwrap_or_default()))
                .collect::<BTreeSet<_>>()
        };
        assert_eq!(
            with_reasons(tools("blocked")),
            surface.blocked.iter().cloned().collect()
        );
        assert_eq!(
            with_reasons(tools("excluded")),
            surface.excluded.iter().cloned().collect()
        );
    }
    for deferred in &truth.deferred {
        let state: String = conn
            .query_row(
                "SELECT loading_state FROM deferred_tools WHERE tenant = ?1 AND tool_id = ?2",
                params![deferred.tenant, deferred.tool_id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(state, deferred.loading_state);
    }
    let receipts = strings(
        conn,
        "SELECT receipt_id FROM quarantine_receipts ORDER BY seq",
        &[],
    );
    assert_eq!(receipts, ["rcpt-1", "rcpt-2"]);
    // Native ids: every invocation's native call id is mapped.
    let native: i64 = conn
        .query_row(
            "SELECT count(*) FROM invocation_external_ids WHERE key = 'native_call_id'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(native, truth.invocations.len() as i64);
}
