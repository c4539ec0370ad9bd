//! The lists and counts the web view reads: sessions filtered by their invocations' tool and state
//! with per-state counts, invocations counted by group, each read from an index in list order (its
//! `EXPLAIN QUERY PLAN` holds no sort and, for a tenant, no scan), and none of them crossing tenants.
//!
//! The projection is written by the projector from generated sessions of two tenants; what each
//! list must hold comes from the generator's own truth, not from the projection. Every generated
//! session plays the same scenarios, so two of acme's sessions each lose one invocation (every
//! event of it, and its truth): the tool and status filters then have sessions to leave out.

use std::collections::{BTreeMap, BTreeSet};

use toolledger_query::params::time_range;
use toolledger_query::{
    GroupBy, PlannedRead, Reader, SearchFilter, SessionFilter, StatsFilter, counts, query_plan, sessions,
};
use toolledger_schemas::generator::{Generated, GeneratorConfig, InvocationTruth, generate};

use crate::Server;

const ACME: &str = "acme";
const GLOBEX: &str = "globex";

/// A projection of generated sessions over acme and globex.
struct Fixture {
    dir: tempfile::TempDir,
    generated: Generated,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut generated = generate(&GeneratorConfig {
            seed: 25,
            sessions: 6,
            tenants: vec![ACME.to_owned(), GLOBEX.to_owned()],
            extra_invocations: 3,
            ..GeneratorConfig::default()
        });
        let acme_sessions: Vec<String> = generated
            .truth
            .sessions
            .iter()
            .filter(|s| s.tenant == ACME)
            .map(|s| s.session_id.clone())
            .collect();
        assert!(acme_sessions.len() >= 3);
        let dropped: Vec<InvocationTruth> = generated
            .truth
            .invocations
            .iter()
            .filter(|i| {
                (i.session_id == acme_sessions[0] && i.final_state == "timed_out")
                    || (i.session_id == acme_sessions[1] && i.final_state == "canceled")
            })
            .cloned()
            .collect();
        assert_eq!(dropped.len(), 2, "one timed-out and one canceled invocation");
        let dropped_events: BTreeSet<&str> = dropped
            .iter()
            .flat_map(|i| i.event_ids.iter().map(String::as_str))
            .collect();
        generated
            .events
            .retain(|e| !dropped_events.contains(e["id"].as_str().unwrap_or_default()));
        generated
            .truth
            .invocations
            .retain(|i| !dropped.iter().any(|d| d.invocation_id == i.invocation_id));
        crate::project(dir.path(), &generated.events);
        Self { dir, generated }
    }

    fn read<T>(&self, read: impl FnOnce(&rusqlite::Connection) -> T) -> T {
        let reader = Reader::new(self.dir.path());
        reader.read_blocking(|conn| Ok(read(conn))).unwrap()
    }

    /// The time of an invocation's first event, as the generator wrote it.
    fn first_time(&self, invocation: &InvocationTruth) -> String {
        let first = &invocation.event_ids[0];
        let event = self
            .generated
            .events
            .iter()
            .find(|e| e["id"] == first.as_str())
            .unwrap();
        event["time"].as_str().unwrap().to_owned()
    }

    /// `from`/`to` covering the first half of `tenant`'s invocations by their first event.
    fn first_half(&self, tenant: &str) -> (String, String) {
        let mut times: Vec<String> = self.invocations(tenant).map(|i| self.first_time(i)).collect();
        times.sort();
        (times[0].clone(), times[times.len() / 2].clone())
    }

    fn invocations(&self, tenant: &str) -> impl Iterator<Item = &InvocationTruth> {
        self.generated
            .truth
            .invocations
            .iter()
            .filter(move |i| i.tenant == tenant)
    }
}

/// The truth's invocations of `tenant` matching `keep`, by session, counted by final state.
fn states_by_session(
    fixture: &Fixture,
    tenant: &str,
    keep: impl Fn(&InvocationTruth) -> bool,
) -> BTreeMap<String, BTreeMap<String, i64>> {
    let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for invocation in fixture.invocations(tenant).filter(|i| keep(i)) {
        *out.entry(invocation.session_id.clone())
            .or_default()
            .entry(invocation.final_state.clone())
            .or_default() += 1;
    }
    out
}

/// Every page of the session list, one session a page.
fn all_sessions(conn: &rusqlite::Connection, filter: SessionFilter) -> Vec<toolledger_query::SessionSummary> {
    let mut filter = SessionFilter { limit: 1, ..filter };
    let mut items = Vec::new();
    loop {
        let page = sessions(conn, &filter).unwrap();
        items.extend(page.items);
        match page.next_cursor {
            Some(next) => filter.cursor = Some(next),
            None => return items,
        }
    }
}

/// A tool and a final state such that some, but not all, of acme's sessions hold an invocation of
/// that tool in that state: a filter that tells sessions apart.
fn discriminating(fixture: &Fixture) -> (String, String) {
    let all: BTreeSet<&str> = fixture.invocations(ACME).map(|i| i.session_id.as_str()).collect();
    let pairs: BTreeSet<(&str, &str)> = fixture
        .invocations(ACME)
        .map(|i| (i.tool_id.as_str(), i.final_state.as_str()))
        .collect();
    pairs
        .into_iter()
        .find(|(tool, state)| {
            let holding: BTreeSet<&str> = fixture
                .invocations(ACME)
                .filter(|i| i.tool_id == *tool && i.final_state == *state)
                .map(|i| i.session_id.as_str())
                .collect();
            holding.len() < all.len()
        })
        .map(|(tool, state)| (tool.to_owned(), state.to_owned()))
        .expect("a tool and state that only some sessions hold")
}

#[test]
fn sessions_filtered_by_tool_and_status_carry_the_states_of_their_matching_invocations() {
    let fixture = Fixture::new();
    let (tool, state) = discriminating(&fixture);

    // Unfiltered: every session of the tenant, in ledger order, each with all its invocations.
    let listed = fixture.read(|conn| {
        all_sessions(
            conn,
            SessionFilter {
                tenant: Some(ACME.to_owned()),
                ..SessionFilter::default()
            },
        )
    });
    let want = states_by_session(&fixture, ACME, |_| true);
    let got: BTreeMap<String, BTreeMap<String, i64>> = listed
        .iter()
        .map(|s| (s.session_id.clone(), s.states.clone()))
        .collect();
    assert_eq!(got, want);
    assert!(listed.windows(2).all(|w| w[0].first_seq < w[1].first_seq));
    assert!(listed.iter().all(|s| s.tenant == ACME));
    for session in &listed {
        assert_eq!(
            session.invocation_count,
            session.states.values().sum::<i64>(),
            "{}",
            session.session_id
        );
    }

    // By tool, by status, by both: only the sessions holding a match, counting only the matches.
    let cases: [(Option<&str>, Option<&str>); 3] = [
        (Some(&tool), None),
        (None, Some(&state)),
        (Some(&tool), Some(&state)),
    ];
    for (tool_id, status) in cases {
        let listed = fixture.read(|conn| {
            all_sessions(
                conn,
                SessionFilter {
                    tenant: Some(ACME.to_owned()),
                    tool_id: tool_id.map(str::to_owned),
                    status: status.map(str::to_owned),
                    ..SessionFilter::default()
                },
            )
        });
        let want = states_by_session(&fixture, ACME, |i| {
            tool_id.is_none_or(|t| i.tool_id == t) && status.is_none_or(|s| i.final_state == s)
        });
        let got: BTreeMap<String, BTreeMap<String, i64>> = listed
            .iter()
            .map(|s| (s.session_id.clone(), s.states.clone()))
            .collect();
        assert_eq!(got, want, "tool {tool_id:?}, status {status:?}");
        assert!(listed.windows(2).all(|w| w[0].first_seq < w[1].first_seq));
    }
    let both = states_by_session(&fixture, ACME, |i| i.tool_id == tool && i.final_state == state);
    assert!(
        !both.is_empty() && both.len() < want.len(),
        "the filter must tell sessions apart"
    );

    // Within a range, the matching invocation's first event must be in it, and only such count.
    let (from, to) = fixture.first_half(ACME);
    let listed = fixture.read(|conn| {
        all_sessions(
            conn,
            SessionFilter {
                tenant: Some(ACME.to_owned()),
                status: Some(state.clone()),
                range: time_range(Some(&from), Some(&to)).unwrap(),
                ..SessionFilter::default()
            },
        )
    });
    let want = states_by_session(&fixture, ACME, |i| {
        let first = fixture.first_time(i);
        i.final_state == state && first >= from && first <= to
    });
    let got: BTreeMap<String, BTreeMap<String, i64>> = listed
        .iter()
        .map(|s| (s.session_id.clone(), s.states.clone()))
        .collect();
    assert_eq!(got, want, "{state} from {from} to {to}");
    let in_range: i64 = want.values().flat_map(|s| s.values()).sum();
    let everywhere = fixture
        .invocations(ACME)
        .filter(|i| i.final_state == state)
        .count() as i64;
    assert!(in_range < everywhere, "the range must leave some out");

    // A range before the first event holds no session and no invocation.
    let before = time_range(None, Some("2000-01-01T00:00:00Z")).unwrap();
    let listed = fixture.read(|conn| {
        all_sessions(
            conn,
            SessionFilter {
                tenant: Some(ACME.to_owned()),
                status: Some(state.clone()),
                range: before,
                ..SessionFilter::default()
            },
        )
    });
    assert!(listed.is_empty());

    // Bad filter values are refused, naming the parameter.
    let refused = fixture.read(|conn| {
        sessions(
            conn,
            &SessionFilter {
                tool_id: Some("fs.read\u{0}".to_owned()),
                limit: 10,
                ..SessionFilter::default()
            },
        )
        .unwrap_err()
    });
    assert_eq!(refused.field(), Some("tool_id"));
}

#[test]
fn counts_group_what_the_search_matches() {
    let fixture = Fixture::new();
    let (tool, _) = discriminating(&fixture);
    let count = |group_by: GroupBy, filter: SearchFilter| {
        fixture.read(|conn| {
            let counted = counts(conn, &filter, group_by).unwrap();
            assert_eq!(counted.total, counted.groups.iter().map(|g| g.count).sum::<i64>());
            counted
                .groups
                .into_iter()
                .map(|g| (g.key, g.count))
                .collect::<BTreeMap<_, _>>()
        })
    };
    let tally = |keys: Vec<Option<String>>| {
        let mut out: BTreeMap<Option<String>, i64> = BTreeMap::new();
        for key in keys {
            *out.entry(key).or_default() += 1;
        }
        out
    };
    let acme = || SearchFilter {
        tenant: Some(ACME.to_owned()),
        ..SearchFilter::default()
    };

    assert_eq!(
        count(GroupBy::State, acme()),
        tally(
            fixture
                .invocations(ACME)
                .map(|i| Some(i.final_state.clone()))
                .collect()
        )
    );
    assert_eq!(
        count(GroupBy::ToolId, acme()),
        tally(
            fixture
                .invocations(ACME)
                .map(|i| Some(i.tool_id.clone()))
                .collect()
        )
    );
    let errors = count(
        GroupBy::ErrorClass,
        SearchFilter {
            tool_id: Some(tool.clone()),
            ..acme()
        },
    );
    assert_eq!(
        errors,
        tally(
            fixture
                .invocations(ACME)
                .filter(|i| i.tool_id == tool)
                .map(|i| i.error_class.clone())
                .collect()
        )
    );
    // Every tenant, for an admin: both tenants' invocations.
    let everything = count(GroupBy::State, SearchFilter::default());
    assert_eq!(
        everything.values().sum::<i64>(),
        fixture.generated.truth.invocations.len() as i64
    );
    // A range counts the invocations whose first event is in it.
    let (from, to) = fixture.first_half(ACME);
    assert_eq!(
        count(
            GroupBy::State,
            SearchFilter {
                range: time_range(Some(&from), Some(&to)).unwrap(),
                ..acme()
            },
        ),
        tally(
            fixture
                .invocations(ACME)
                .filter(|i| (from.as_str()..=to.as_str()).contains(&fixture.first_time(i).as_str()))
                .map(|i| Some(i.final_state.clone()))
                .collect()
        )
    );
    // A range before the first event counts nothing.
    let before = count(
        GroupBy::State,
        SearchFilter {
            range: time_range(None, Some("2000-01-01T00:00:00Z")).unwrap(),
            ..acme()
        },
    );
    assert!(before.is_empty(), "{before:?}");
}

/// Whether a plan line reads the whole of `invocations` or `sessions` (a `SCAN` of `i` or `s`).
fn scans_a_table(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("SCAN i") || line.starts_with("SCAN s")
}

#[test]
fn scans_a_table_names_whole_table_reads() {
    assert!(scans_a_table(
        "SCAN invocations USING COVERING INDEX sqlite_autoindex_invocations_1"
    ));
    assert!(!scans_a_table(
        "SEARCH invocations USING INDEX invocations_by_id (invocation_id=?)"
    ));
}

#[test]
fn the_lists_and_counts_the_web_view_reads_use_an_index_and_never_sort() {
    let fixture = Fixture::new();
    let tenant = || Some(ACME.to_owned());
    let range = time_range(Some("2026-01-01T00:00:00Z"), Some("2026-12-01T00:00:00Z")).unwrap();
    let some = |v: &str| Some(v.to_owned());
    let session_filter = |tool_id: Option<String>, status: Option<String>, range| SessionFilter {
        tenant: tenant(),
        tool_id,
        status,
        range,
        limit: 100,
        ..SessionFilter::default()
    };
    let search_filter = |tool_id: Option<String>, status: Option<String>| SearchFilter {
        tenant: tenant(),
        tool_id,
        status,
        limit: 100,
        ..SearchFilter::default()
    };
    let admin_sessions = SessionFilter {
        limit: 100,
        ..SessionFilter::default()
    };
    let admin_narrowed = SessionFilter {
        status: some("failed"),
        limit: 100,
        ..SessionFilter::default()
    };
    let sessions_plain = session_filter(None, None, Default::default());
    let sessions_by_tool = session_filter(some("fs.read_file"), None, Default::default());
    let sessions_by_both = session_filter(some("fs.read_file"), some("failed"), range);
    let search_tenant = search_filter(None, None);
    let search_tool = search_filter(some("fs.read_file"), None);
    let search_status = search_filter(None, some("failed"));
    let search_both = search_filter(some("fs.read_file"), some("failed"));
    let search_session = SearchFilter {
        session_id: some("sess-1"),
        ..search_filter(None, None)
    };
    let counts_tenant = search_filter(None, None);
    let counts_narrowed = SearchFilter {
        range,
        ..search_filter(some("fs.read_file"), some("failed"))
    };
    let every_tenant = SearchFilter::default();
    let stats_tool = StatsFilter {
        tenant: tenant(),
        tool_id: some("fs.read_file"),
        bucket: "1h".to_owned(),
        bucket_ns: 3_600_000_000_000,
        ..StatsFilter::default()
    };

    // (what, the read, whether a tenant scopes it, a step its plan must hold)
    let reads: Vec<(&str, PlannedRead<'_>, bool, &str)> = vec![
        (
            "a tenant's sessions",
            PlannedRead::Sessions(&sessions_plain),
            true,
            "SEARCH s USING INDEX sessions_by_tenant (tenant=? AND first_seq>?)",
        ),
        (
            "a tenant's sessions by tool",
            PlannedRead::Sessions(&sessions_by_tool),
            true,
            "SEARCH s USING INDEX sessions_by_tenant (tenant=? AND first_seq>?)",
        ),
        // The session's index carries tool and state: its invocations are matched and counted
        // from the index alone, never row by row.
        (
            "a tenant's sessions by tool, from the session's index alone",
            PlannedRead::Sessions(&sessions_by_tool),
            true,
            "SEARCH i USING COVERING INDEX invocations_by_session (tenant=? AND session_id=?)",
        ),
        (
            "a tenant's sessions by tool, status and time",
            PlannedRead::Sessions(&sessions_by_both),
            true,
            "SEARCH s USING INDEX sessions_by_tenant (tenant=? AND first_seq>?)",
        ),
        (
            "every tenant's sessions",
            PlannedRead::Sessions(&admin_sessions),
            false,
            "SEARCH s USING INDEX sessions_in_order (first_seq>?)",
        ),
        (
            "every tenant's sessions by status",
            PlannedRead::Sessions(&admin_narrowed),
            false,
            "SEARCH s USING INDEX sessions_in_order (first_seq>?)",
        ),
        (
            "a tenant's invocations",
            PlannedRead::Search(&search_tenant),
            true,
            "SEARCH i USING INDEX invocations_by_tenant (tenant=? AND first_seq>?)",
        ),
        (
            "a tenant's invocations of a tool",
            PlannedRead::Search(&search_tool),
            true,
            "SEARCH i USING INDEX invocations_by_tool (tenant=? AND tool_id=? AND first_seq>?)",
        ),
        (
            "a tenant's invocations in a state",
            PlannedRead::Search(&search_status),
            true,
            "SEARCH i USING INDEX invocations_by_state (tenant=? AND state=? AND first_seq>?)",
        ),
        (
            "a tenant's invocations of a tool in a state",
            PlannedRead::Search(&search_both),
            true,
            "SEARCH i USING INDEX invocations_by_tool_state (tenant=? AND tool_id=? AND state=? AND first_seq>?)",
        ),
        (
            "a session's invocations",
            PlannedRead::Search(&search_session),
            true,
            "SEARCH i USING INDEX invocations_by_session (tenant=? AND session_id=? AND first_seq>?)",
        ),
        (
            "a tenant's invocations by state",
            PlannedRead::Counts(&counts_tenant, GroupBy::State),
            true,
            "SEARCH i USING COVERING INDEX invocations_by_state (tenant=?)",
        ),
        (
            "a tenant's invocations of a tool in a state in a range, by error class",
            PlannedRead::Counts(&counts_narrowed, GroupBy::ErrorClass),
            true,
            "SEARCH i USING INDEX invocations_by_",
        ),
        (
            "a tenant's invocations of a tool, by state",
            PlannedRead::Counts(&search_tool, GroupBy::State),
            true,
            "SEARCH i USING COVERING INDEX invocations_by_tool_state (tenant=? AND tool_id=?)",
        ),
        (
            "a tenant's invocations of a tool, by error class",
            PlannedRead::Counts(&search_tool, GroupBy::ErrorClass),
            true,
            // Its own index, or the one of tool and state.
            "SEARCH i USING INDEX invocations_by_tool",
        ),
        (
            "every tenant's invocations by state",
            PlannedRead::Counts(&every_tenant, GroupBy::State),
            false,
            "SCAN i USING COVERING INDEX invocations_by_state",
        ),
        (
            "every tenant's invocations by tool",
            PlannedRead::Counts(&every_tenant, GroupBy::ToolId),
            false,
            "SCAN i USING COVERING INDEX invocations_by_tool",
        ),
        (
            "a tool's stats",
            PlannedRead::Stats(&stats_tool),
            true,
            // Its own index, or the one of tool and state.
            "SEARCH i USING INDEX invocations_by_tool",
        ),
        // Reconstruct's: without first_seq in invocations_by_retry, SQLite chose the tenant's
        // index for the order and filtered every invocation of the tenant (279 ms at 1M entries).
        (
            "an invocation's retries",
            PlannedRead::Retries(ACME, "inv-1"),
            true,
            "SEARCH invocations USING INDEX invocations_by_retry (tenant=? AND retry_of=?)",
        ),
        (
            "an invocation by id alone",
            PlannedRead::InvocationById("inv-1"),
            true,
            "SEARCH invocations USING COVERING INDEX invocations_by_id (invocation_id=?)",
        ),
    ];
    let mut report = String::new();
    for (what, read, scoped, expected) in reads {
        let plan = fixture.read(|conn| query_plan(conn, read).unwrap());
        let text = plan.join("\n");
        report.push_str(&format!("{what}:\n{text}\n"));
        assert!(
            plan.iter().any(|line| line.contains(expected)),
            "{what}: no `{expected}` in\n{text}"
        );
        assert!(!text.contains("FOR ORDER BY"), "{what}: sorts its rows\n{text}");
        if scoped {
            assert!(
                !plan.iter().any(|line| scans_a_table(line)),
                "{what}: scans a table\n{text}"
            );
        }
        // Every tenant's counts are grouped per tenant in index order first; only those few groups
        // are sorted, never every row.
        if matches!(read, PlannedRead::Counts(filter, _) if filter.tenant.is_none()) {
            assert!(
                !plan
                    .iter()
                    .any(|l| l.starts_with(' ') && l.contains("TEMP B-TREE")),
                "{what}: sorts every row\n{text}"
            );
        }
        // A listed session's invocations are read through the session's own key, never through an
        // index of the whole tenant's tool or state.
        if matches!(read, PlannedRead::Sessions(_)) {
            for line in plan.iter().map(|l| l.trim_start()) {
                assert!(
                    !(line.starts_with("SEARCH i ") || line.starts_with("SCAN i "))
                        || line.contains("invocations_by_session (tenant=? AND session_id=?"),
                    "{what}: {line}\n{text}"
                );
            }
        }
    }
    println!("{report}");
}

const ADMIN_TOKEN: &str = "admin-token-for-lists-0123456789";
const ACME_TOKEN: &str = "acme-token-for-lists-0123456789";

/// A server with an admin token and an acme-only token over the fixture.
async fn serve(fixture: &Fixture) -> Server {
    crate::serve(
        fixture.dir.path(),
        &[
            ("admin", ADMIN_TOKEN, None),
            ("acme-reader", ACME_TOKEN, Some(ACME)),
        ],
        None,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_token_counts_and_lists_only_its_own_tenant() {
    let fixture = Fixture::new();
    let (tool, state) = discriminating(&fixture);
    let served = serve(&fixture).await;
    let acme_total = fixture.invocations(ACME).count() as i64;
    let globex_total = fixture.invocations(GLOBEX).count() as i64;
    assert!(acme_total > 0 && globex_total > 0);

    // Without `tenant`, the acme token's one tenant; an admin's, every tenant.
    let (status, body) = served
        .get("/v1/invocation-counts?group_by=state", ACME_TOKEN)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["group_by"], "state");
    assert_eq!(body["total"], acme_total, "{body}");
    let (_, body) = served
        .get("/v1/invocation-counts?group_by=state", ADMIN_TOKEN)
        .await;
    assert_eq!(body["total"], acme_total + globex_total, "{body}");
    let (_, body) = served
        .get("/v1/invocation-counts?group_by=state&tenant=globex", ADMIN_TOKEN)
        .await;
    assert_eq!(body["total"], globex_total, "{body}");

    // Another tenant, asked for by name: refused, for counts and for the filtered session list.
    for path in [
        "/v1/invocation-counts?group_by=state&tenant=globex".to_owned(),
        format!("/v1/sessions?tenant=globex&status={state}"),
        format!("/v1/sessions?tenant=globex&tool_id={tool}"),
    ] {
        let (status, body) = served.get(&path, ACME_TOKEN).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["error"]["code"], "forbidden");
    }

    // The filtered session list of the acme token holds acme's matching sessions only.
    let (status, body) = served
        .get(
            &format!("/v1/sessions?tool_id={tool}&status={state}&limit=1000"),
            ACME_TOKEN,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let want = states_by_session(&fixture, ACME, |i| i.tool_id == tool && i.final_state == state);
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), want.len(), "{body}");
    for item in items {
        assert_eq!(item["tenant"], ACME);
        let states: BTreeMap<String, i64> = serde_json::from_value(item["states"].clone()).unwrap();
        assert_eq!(Some(&states), want.get(item["session_id"].as_str().unwrap()));
    }

    // Bad groupings and unknown parameters are 400s naming the parameter; no token is a 401.
    for (path, field) in [
        ("/v1/invocation-counts", "group_by"),
        ("/v1/invocation-counts?group_by=session_id", "group_by"),
        ("/v1/invocation-counts?group_by=state&limit=5", "limit"),
        ("/v1/sessions?state=failed", "state"),
    ] {
        let (status, body) = served.get(path, ACME_TOKEN).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["field"], field, "{path}: {body}");
    }
    let (status, _) = served
        .get("/v1/invocation-counts?group_by=state", "not-a-token")
        .await;
    assert_eq!(status, 401);
    served.stop().await;
}
