"""Reads a toolledger Parquet archive with DuckDB and with pyarrow, and the SQLite projection of the
same ledger, and prints the same counts and aggregates from each as JSON.

usage: read_archive.py ARCHIVE_DIR PROJECTION_SQLITE
"""
import datetime
import json
import math
import os
import sqlite3
import sys

import duckdb
import pyarrow.dataset as ds

archive, sqlite_path = sys.argv[1], sys.argv[2]
TABLES = ["events", "invocations", "permission_decisions", "results", "checkpoints"]


def p95(values):
    values = sorted(values)
    if not values:
        return None
    return round(values[max(0, math.ceil(0.95 * len(values)) - 1)], 3)


def aggregates(events, invocations, decisions, results, checkpoints, latest):
    """events: [(tenant, date)], invocations: [(tool, state, duration_ms|None)] of terminal ones,
    decisions: [behavior], latest: [[tenant, invocation_id, state, event_count, decision_count, result_id]]
    of every invocation"""
    out = {
        "events": len(events),
        "invocations": len(invocations),
        "permission_decisions": len(decisions),
        "results": results,
        "checkpoints": checkpoints,
    }
    per_tenant, per_date = {}, {}
    for tenant, date in events:
        per_tenant[tenant] = per_tenant.get(tenant, 0) + 1
        per_date[date] = per_date.get(date, 0) + 1
    out["events_per_tenant"] = per_tenant
    out["events_per_date"] = per_date
    calls, denied, durations = {}, {}, {}
    for tool, state, duration in invocations:
        tool = tool or "(none)"
        calls[tool] = calls.get(tool, 0) + 1
        denied[tool] = denied.get(tool, 0) + (state == "denied")
        if duration is not None:
            durations.setdefault(tool, []).append(round(duration, 3))
    out["calls_per_tool"] = calls
    total = sum(calls.values())
    out["denial_rate"] = round(sum(denied.values()) / total, 6) if total else None
    out["denial_rate_per_tool"] = {t: round(denied[t] / calls[t], 6) for t in calls}
    out["p95_latency_ms_per_tool"] = {t: p95(v) for t, v in durations.items()}
    behaviors = {}
    for behavior in decisions:
        behaviors[behavior] = behaviors.get(behavior, 0) + 1
    out["permission_behaviors"] = behaviors
    out["latest"] = sorted(latest)
    return out


def glob(table):
    return os.path.join(archive, table, "**", "*.parquet")


def with_duckdb():
    con = duckdb.connect()
    q = lambda sql: con.execute(sql).fetchall()
    read = lambda t: f"read_parquet('{glob(t)}', hive_partitioning = true)"
    events = [(t, str(d)) for t, d in q(f"SELECT tenant, event_date FROM {read('events')}")]
    # The archive's documented "latest version per invocation" view (docs/parquet.md).
    con.execute(
        f"""CREATE VIEW invocations_latest AS SELECT * FROM {read('invocations')}
            QUALIFY row_number() OVER (PARTITION BY tenant, invocation_id ORDER BY seq DESC) = 1"""
    )
    invocations = q("SELECT tool_id, state, duration_ms FROM invocations_latest WHERE terminal_seq IS NOT NULL")
    latest = [
        list(row)
        for row in q(
            "SELECT tenant, invocation_id, state, event_count, decision_count, result_id FROM invocations_latest"
        )
    ]
    decisions = [b for (b,) in q(f"SELECT behavior FROM {read('permission_decisions')}")]
    results = q(f"SELECT count(*) FROM {read('results')}")[0][0]
    checkpoints = q(f"SELECT count(*) FROM read_parquet('{os.path.join(archive, 'checkpoints', '*.parquet')}')")[0][0]
    # Every row of the events table carries its canonical entry and leaf hash.
    nulls = q(f"SELECT count(*) FROM {read('events')} WHERE entry IS NULL OR length(leaf_hash) <> 64")[0][0]
    assert nulls == 0, nulls
    return aggregates(events, invocations, decisions, results, checkpoints, latest)


def with_pyarrow():
    def table(name, columns, partitioned=True):
        dataset = ds.dataset(
            os.path.join(archive, name), format="parquet", partitioning="hive" if partitioned else None
        )
        return dataset.to_table(columns=columns).to_pydict()

    e = table("events", ["tenant", "event_date", "seq"])
    events = [(str(t), str(d)) for t, d in zip(e["tenant"], e["event_date"])]
    assert len(set(e["seq"])) == len(e["seq"]), "a seq appears twice"
    columns = ["tenant", "invocation_id", "seq", "tool_id", "state", "duration_ms", "terminal_seq",
               "event_count", "decision_count", "result_id"]
    versions = table("invocations", columns)
    newest = {}
    for n, key in enumerate(zip(versions["tenant"], versions["invocation_id"])):
        if key not in newest or versions["seq"][newest[key]] < versions["seq"][n]:
            newest[key] = n
    i = {c: [versions[c][n] for n in newest.values()] for c in columns}
    ended = [n for n, end in enumerate(i["terminal_seq"]) if end is not None]
    invocations = [(i["tool_id"][n], i["state"][n], i["duration_ms"][n]) for n in ended]
    latest = [
        [str(i["tenant"][n]), i["invocation_id"][n], i["state"][n], i["event_count"][n], i["decision_count"][n],
         i["result_id"][n]]
        for n in range(len(i["seq"]))
    ]
    decisions = table("permission_decisions", ["behavior"])["behavior"]
    results = len(table("results", ["seq"])["seq"])
    checkpoints = len(table("checkpoints", ["checkpoint_seq"], partitioned=False)["checkpoint_seq"])
    out = aggregates(events, invocations, decisions, results, checkpoints, latest)
    # Invocations whose latest version came after the entry that ended them.
    out["changed_after_terminal"] = sum(1 for n in ended if i["seq"][n] > i["terminal_seq"][n])
    out["invocation_states"] = [
        [str(i["tenant"][n]), i["invocation_id"][n], i["state"][n], i["tool_id"][n]] for n in ended
    ]
    return out


def parse_time(text):
    if text is None:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


def with_sqlite():
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    q = lambda sql: con.execute(sql).fetchall()
    events = []
    for tenant, time_ns, ingested_at in q("SELECT tenant, event_time_ns, ingested_at FROM events"):
        if time_ns is not None:
            date = datetime.datetime.fromtimestamp(time_ns // 1000 / 1e6, datetime.timezone.utc).strftime("%Y-%m-%d")
        else:
            date = (ingested_at or "1970-01-01")[:10]
        events.append((tenant or "_undecodable", date))
    invocations = []
    for tool, state, started, ended in q(
        "SELECT tool_id, state, started_at, ended_at FROM invocations WHERE terminal = 1"
    ):
        start, end = parse_time(started), parse_time(ended)
        duration = (end - start) / datetime.timedelta(milliseconds=1) if start and end else None
        invocations.append((tool, state, duration))
    decisions = [b for (b,) in q("SELECT behavior FROM permission_decisions")]
    results = q("SELECT count(*) FROM events WHERE class LIKE 'tool.result.%' AND problem IS NULL")[0][0]
    latest = [
        list(row)
        for row in q(
            """SELECT i.tenant, i.invocation_id, i.state, i.event_count,
                      (SELECT count(*) FROM permission_decisions d
                       WHERE d.tenant = i.tenant AND d.invocation_id = i.invocation_id),
                      i.result_id
               FROM invocations i"""
        )
    ]
    return aggregates(events, invocations, decisions, results, None, latest)


print(json.dumps({"duckdb": with_duckdb(), "pyarrow": with_pyarrow(), "sqlite": with_sqlite()}, sort_keys=True))
