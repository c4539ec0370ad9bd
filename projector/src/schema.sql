-- toolledger projection schema 3 (DESIGN §6). Every table is derived from ATL_LEDGER and can be
-- rebuilt from it; `position` is written in the same transaction as the rows it covers.
-- JSON values are stored as TEXT (JSON). Times are kept as the event carried them (RFC 3339 text),
-- with `*_ns` columns (nanoseconds since the Unix epoch, UTC) where they are compared or ordered.
-- Indexes hold nothing the tables do not: a projection opened for writing takes this file's indexes
-- (each `CREATE INDEX` one line), so adding or changing one needs no new schema version.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The last ledger entry applied. One row.
CREATE TABLE position (
    id        INTEGER PRIMARY KEY CHECK (id = 0),
    stream    TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    leaf_hash TEXT
);

-- Every ledger entry, in ledger order.
CREATE TABLE events (
    seq            INTEGER PRIMARY KEY,
    leaf_hash      TEXT NOT NULL,          -- hex SHA-256(0x00 || entry bytes)
    event_id       TEXT,
    source         TEXT,
    class          TEXT,                   -- CloudEvents type
    tenant         TEXT,
    session_id     TEXT,                   -- `sessionid`, else data.session_id
    subject        TEXT,                   -- CloudEvents subject
    invocation_id  TEXT,                   -- `invocationid`, else the subject of an invocation class
    tool_id        TEXT,                   -- `toolid`
    event_time     TEXT,
    event_time_ns  INTEGER,
    ingested_at    TEXT,
    origin         TEXT,                   -- binary | structured | agenttool-event | ledger
    traceparent    TEXT,
    tracestate     TEXT,
    trace_refs     TEXT,                   -- JSON array, agenttool-event envelopes only
    payload_refs   TEXT NOT NULL,          -- JSON array of {path, blob_id, commitment, size, content_type}
    scrubbed_paths TEXT NOT NULL,          -- JSON array of JSON Pointers
    problem        TEXT                    -- why the entry could not be projected beyond this row, if so
);
CREATE INDEX events_by_session ON events (tenant, session_id, seq);
CREATE INDEX events_by_invocation ON events (tenant, invocation_id, seq);
CREATE INDEX events_by_class ON events (class, seq);

CREATE TABLE sessions (
    tenant        TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    first_seq     INTEGER NOT NULL,
    last_seq      INTEGER NOT NULL,
    first_time    TEXT,                    -- earliest event time seen
    first_time_ns INTEGER,
    last_time     TEXT,                    -- latest event time seen
    last_time_ns  INTEGER,
    event_count   INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id)
);
-- Lists are ordered by first entry and paged by it: a tenant's, and every tenant's (admins).
CREATE INDEX sessions_by_tenant ON sessions (tenant, first_seq);
CREATE INDEX sessions_in_order ON sessions (first_seq);

-- One row per invocation, written from its fold (toolledger_schemas::fold): the state machine's state,
-- the merged snapshot, the four inputs, the error and the tool under the fold's one rule each.
CREATE TABLE invocations (
    tenant               TEXT NOT NULL,
    invocation_id        TEXT NOT NULL,
    session_id           TEXT,
    tool_id              TEXT,
    surface_id           TEXT,
    state                TEXT NOT NULL,    -- planned … blocked, or unknown before `planned` arrives
    planned              INTEGER NOT NULL, -- whether tool.invocation.planned has arrived
    terminal             INTEGER NOT NULL,
    native_call_id       TEXT,
    retry_of             TEXT,
    attempt              INTEGER,
    error_class          TEXT,             -- the invocation's own data.error, else its first final result's
    error_code           TEXT,
    error_message        TEXT,
    error_source         TEXT,             -- invocation | result
    actor_ref            TEXT,
    created_at           TEXT,
    started_at           TEXT,
    ended_at             TEXT,
    first_seq            INTEGER NOT NULL,
    last_seq             INTEGER NOT NULL,
    latest_time_ns       INTEGER,          -- the latest event time seen (state machine track)
    event_count          INTEGER NOT NULL,
    result_id            TEXT,             -- the first tool.result.created
    model_input          TEXT,             -- as first seen, never overwritten
    model_input_ref      TEXT,
    observable_input     TEXT,             -- the last carried
    observable_input_ref TEXT,
    permission_input     TEXT,             -- the last carried (invocation, permission request, pre hook)
    permission_input_ref TEXT,
    call_input           TEXT,             -- the last carried (invocation, decision's updated_input)
    call_input_ref       TEXT,
    snapshot             TEXT NOT NULL,    -- invocation objects merged field by field in ledger order
    fold                 TEXT NOT NULL,    -- the fold's state (JSON), which the next batch continues
    PRIMARY KEY (tenant, invocation_id)
);
-- Searches are ordered by first entry and paged by it; each filter the web view uses has an index
-- ending in first_seq, so a page is read in order and stops at its limit (tool and status together
-- too: with the tool's index alone a rare status read every invocation of the tool, 18 ms at 1M
-- entries against 1 ms). A session's index carries its invocations' tool and state, so a session
-- list filtered by them, and its per-session counts, read the index alone (a session list filtered
-- by a rare tool and status read every invocation row of every session: 65 ms at 1M entries
-- against 6 ms).
CREATE INDEX invocations_by_tenant ON invocations (tenant, first_seq);
CREATE INDEX invocations_by_session ON invocations (tenant, session_id, first_seq, tool_id, state);
CREATE INDEX invocations_by_tool ON invocations (tenant, tool_id, first_seq);
CREATE INDEX invocations_by_state ON invocations (tenant, state, first_seq);
CREATE INDEX invocations_by_tool_state ON invocations (tenant, tool_id, state, first_seq);
-- Reconstruct lists an invocation's retries in order: without first_seq here, SQLite (no ANALYZE
-- statistics) chose invocations_by_tenant for the order and filtered the whole tenant: 279 ms at
-- 1M entries against 0.05 ms.
CREATE INDEX invocations_by_retry ON invocations (tenant, retry_of, first_seq);
-- An admin's reconstruct without a tenant finds the invocation by id alone (a scan otherwise).
CREATE INDEX invocations_by_id ON invocations (invocation_id, tenant);

-- Every state change, with the event that caused it.
CREATE TABLE invocation_transitions (
    seq           INTEGER PRIMARY KEY,
    tenant        TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    from_state    TEXT NOT NULL,
    to_state      TEXT NOT NULL,
    class         TEXT NOT NULL,
    event_time    TEXT
);
CREATE INDEX transitions_by_invocation ON invocation_transitions (tenant, invocation_id, seq);

-- Native protocol ids: native_call_id and every scalar field of data.external_mappings and
-- data.telemetry_refs (MCP jsonrpc_request_id, function-calling tool_call_id, task ids, …).
CREATE TABLE invocation_external_ids (
    tenant        TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    source        TEXT NOT NULL,           -- native | the mapping's source/protocol | telemetry
    key           TEXT NOT NULL,
    value         TEXT NOT NULL,
    seq           INTEGER NOT NULL,        -- first seen
    PRIMARY KEY (tenant, invocation_id, source, key, value)
);
CREATE INDEX external_ids_by_value ON invocation_external_ids (key, value);

-- Every change between the four inputs, with its source.
CREATE TABLE input_mutations (
    tenant         TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    source         TEXT NOT NULL,          -- hook | permission_decision | an input-mutation source_type
    source_id      TEXT NOT NULL,          -- hook id | decision id | mutation_id
    seq            INTEGER NOT NULL,
    idx            INTEGER NOT NULL,       -- position within the entry
    source_ref     TEXT,
    from_input     TEXT,                   -- model_input | observable_input | permission_input | call_input
    to_input       TEXT,
    changed_fields TEXT NOT NULL,          -- JSON array of top-level field names
    reason         TEXT,
    created_at     TEXT,
    value          TEXT,                   -- the updated input (hooks and decisions)
    PRIMARY KEY (tenant, invocation_id, source, source_id)
);
CREATE INDEX mutations_in_order ON input_mutations (tenant, invocation_id, seq, idx);

CREATE TABLE permission_requests (
    tenant                 TEXT NOT NULL,
    decision_id            TEXT NOT NULL,
    invocation_id          TEXT NOT NULL,
    tool_id                TEXT,
    permission_input       TEXT,
    permission_profile_ref TEXT,
    mode                   TEXT,
    reason                 TEXT,
    requested_at           TEXT,
    seq                    INTEGER NOT NULL,
    data                   TEXT NOT NULL,
    PRIMARY KEY (tenant, decision_id)
);
CREATE INDEX requests_by_invocation ON permission_requests (tenant, invocation_id, seq);

-- One row per tool.permission.decided.
CREATE TABLE permission_decisions (
    seq            INTEGER PRIMARY KEY,
    tenant         TEXT NOT NULL,
    decision_id    TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    behavior       TEXT NOT NULL,          -- allow | ask | deny | passthrough
    mode           TEXT,
    source         TEXT,
    reason_type    TEXT,
    reason_message TEXT,
    reason         TEXT,
    rule_refs      TEXT,
    policy_refs    TEXT,
    updated_input  TEXT,
    user_modified  INTEGER,
    decided_at     TEXT NOT NULL,
    expires_at     TEXT,
    data           TEXT NOT NULL
);
CREATE INDEX decisions_by_invocation ON permission_decisions (tenant, invocation_id, seq);

-- One row per hook run; started and completed snapshots merged.
CREATE TABLE hooks (
    tenant             TEXT NOT NULL,
    hook_id            TEXT NOT NULL,
    invocation_id      TEXT,
    tool_id            TEXT,
    phase              TEXT NOT NULL,      -- pre | post
    hook_event         TEXT NOT NULL,
    matcher            TEXT,
    outputs            TEXT,
    permission_result  TEXT,
    updated_input      TEXT,
    additional_context TEXT,
    stop               TEXT,
    updated_output     TEXT,
    started_at         TEXT,
    ended_at           TEXT,
    first_seq          INTEGER NOT NULL,
    last_seq           INTEGER NOT NULL,
    data               TEXT NOT NULL,
    PRIMARY KEY (tenant, hook_id)
);
CREATE INDEX hooks_by_invocation ON hooks (tenant, invocation_id, first_seq);

CREATE TABLE progress (
    tenant        TEXT NOT NULL,
    progress_id   TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    sequence      REAL,
    status        TEXT NOT NULL,
    message       TEXT,
    percent       REAL,
    current_step  TEXT,
    total_steps   REAL,
    elapsed_ms    REAL,
    bytes_read    REAL,
    bytes_written REAL,
    line_count    REAL,
    task_id       TEXT,
    timestamp     TEXT,
    seq           INTEGER NOT NULL,
    data          TEXT NOT NULL,
    PRIMARY KEY (tenant, progress_id)
);
CREATE INDEX progress_by_invocation ON progress (tenant, invocation_id, seq);

-- Results (final and partial); tool.result.redacted merges into the result it names.
CREATE TABLE results (
    tenant            TEXT NOT NULL,
    result_id         TEXT NOT NULL,
    invocation_id     TEXT NOT NULL,
    kind              TEXT NOT NULL,       -- final | partial
    status            TEXT NOT NULL,
    is_error          INTEGER,
    content_bytes     INTEGER,             -- bytes of inline text content as created
    summary           TEXT,
    ui_facing_summary TEXT,
    redaction_state   TEXT,
    redacted_seq      INTEGER,             -- the tool.result.redacted entry, if any
    error_class       TEXT,
    error_code        TEXT,
    persistence_refs  TEXT,
    created_at        TEXT,
    first_seq         INTEGER NOT NULL,
    last_seq          INTEGER NOT NULL,
    duplicate         INTEGER NOT NULL,    -- a second tool.result.created with another result_id
    data              TEXT NOT NULL,
    PRIMARY KEY (tenant, result_id)
);
CREATE INDEX results_by_invocation ON results (tenant, invocation_id, first_seq);

CREATE TABLE result_persistence (
    tenant              TEXT NOT NULL,
    decision_id         TEXT NOT NULL,
    invocation_id       TEXT NOT NULL,
    result_id           TEXT,
    strategy            TEXT NOT NULL,
    threshold           TEXT,
    original_size_bytes INTEGER,
    preview_size_bytes  INTEGER,
    persisted_ref       TEXT,
    redaction_state     TEXT,
    reason              TEXT,
    created_at          TEXT,
    seq                 INTEGER NOT NULL,
    data                TEXT NOT NULL,
    PRIMARY KEY (tenant, decision_id)
);
CREATE INDEX persistence_by_invocation ON result_persistence (tenant, invocation_id, seq);

-- The tool catalog: the current declaration, every version, aliases, lifecycle changes.
CREATE TABLE tools (
    tenant     TEXT NOT NULL,
    tool_id    TEXT NOT NULL,
    namespace  TEXT,
    name       TEXT,
    title      TEXT,
    version    TEXT,
    version_no INTEGER NOT NULL,           -- 1, 2, … a new one each time `version` changes
    lifecycle  TEXT,
    tool_kind  TEXT,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (tenant, tool_id)
);

CREATE TABLE tool_versions (
    tenant     TEXT NOT NULL,
    tool_id    TEXT NOT NULL,
    version_no INTEGER NOT NULL,
    version    TEXT,
    lifecycle  TEXT,
    tool_kind  TEXT,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    data       TEXT NOT NULL,              -- declarations of this version merged in ledger order
    PRIMARY KEY (tenant, tool_id, version_no)
);

CREATE TABLE tool_aliases (
    tenant     TEXT NOT NULL,
    tool_id    TEXT NOT NULL,
    alias      TEXT NOT NULL,
    version_no INTEGER NOT NULL,           -- first declared in
    seq        INTEGER NOT NULL,
    PRIMARY KEY (tenant, tool_id, alias)
);

-- A row each time a declaration changes the lifecycle (the first declaration included).
CREATE TABLE tool_lifecycle (
    tenant    TEXT NOT NULL,
    tool_id   TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    lifecycle TEXT NOT NULL,
    PRIMARY KEY (tenant, tool_id, seq)
);

CREATE TABLE tool_external_mappings (
    tenant     TEXT NOT NULL,
    tool_id    TEXT NOT NULL,
    version_no INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    source     TEXT,                       -- the mapping's source or protocol
    mapping    TEXT NOT NULL,
    PRIMARY KEY (tenant, tool_id, version_no, idx)
);

CREATE TABLE surfaces (
    tenant     TEXT NOT NULL,
    surface_id TEXT NOT NULL,
    scope      TEXT,
    producer   TEXT,
    session_id TEXT,
    revision   INTEGER NOT NULL,           -- the latest
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    data       TEXT NOT NULL,              -- every revision merged field by field
    PRIMARY KEY (tenant, surface_id)
);

CREATE TABLE surface_revisions (
    tenant         TEXT NOT NULL,
    surface_id     TEXT NOT NULL,
    revision       INTEGER NOT NULL,       -- 1 for the first event, +1 for each later one
    seq            INTEGER NOT NULL,
    class          TEXT NOT NULL,
    surface_reason TEXT,
    data           TEXT NOT NULL,          -- the merged surface as of this revision
    PRIMARY KEY (tenant, surface_id, revision)
);

-- The tools of each revision and what the surface does with them.
CREATE TABLE surface_tools (
    tenant      TEXT NOT NULL,
    surface_id  TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    disposition TEXT NOT NULL,             -- ref | loaded | deferred | blocked | excluded
    tool_id     TEXT NOT NULL,
    reason      TEXT,                      -- blocked/excluded/deferred reason
    detail      TEXT,                      -- the entry as the surface listed it
    PRIMARY KEY (tenant, surface_id, revision, disposition, tool_id)
);

CREATE TABLE deferred_tools (
    tenant                     TEXT NOT NULL,
    tool_id                    TEXT NOT NULL,
    name                       TEXT,
    namespace                  TEXT,
    search_hint                TEXT,
    source                     TEXT,
    schema_visibility          TEXT,
    loading_state              TEXT NOT NULL,
    reason                     TEXT,
    pending_provider_or_server TEXT,
    selection_ref              TEXT,
    native_ref                 TEXT,
    first_seq                  INTEGER NOT NULL,
    last_seq                   INTEGER NOT NULL,
    data                       TEXT NOT NULL,
    PRIMARY KEY (tenant, tool_id)
);

-- Every deferred-tool event: the loading history.
CREATE TABLE deferred_loading (
    seq               INTEGER PRIMARY KEY,
    tenant            TEXT NOT NULL,
    tool_id           TEXT NOT NULL,
    class             TEXT NOT NULL,
    loading_state     TEXT NOT NULL,
    schema_visibility TEXT,
    reason            TEXT,
    selection_ref     TEXT
);

-- The ledger's own records.
CREATE TABLE quarantine_receipts (
    receipt_id         TEXT PRIMARY KEY,
    tenant             TEXT NOT NULL,      -- the rejected message's tenant (data.tenant)
    reason             TEXT NOT NULL,
    detail             TEXT,
    digest             TEXT NOT NULL,
    size_bytes         INTEGER,
    quarantine_subject TEXT,
    quarantine_seq     INTEGER,
    inbound_subject    TEXT,
    event_id           TEXT,
    event_source       TEXT,
    quarantined_at     TEXT NOT NULL,
    seq                INTEGER NOT NULL,
    data               TEXT NOT NULL
);
CREATE INDEX quarantine_by_tenant ON quarantine_receipts (tenant, seq);

CREATE TABLE access_reads (
    access_id      TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL,
    principal      TEXT NOT NULL,
    endpoint       TEXT NOT NULL,
    invocation_ids TEXT,
    session_ids    TEXT,
    query          TEXT,
    row_count      INTEGER,
    read_at        TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    data           TEXT NOT NULL
);

CREATE TABLE erasures (
    erasure_id     TEXT PRIMARY KEY,
    tenant         TEXT,                   -- whose content (data.tenant)
    blob_ids       TEXT NOT NULL,
    invocation_ids TEXT,
    session_ids    TEXT,
    reason         TEXT NOT NULL,
    authority      TEXT NOT NULL,
    requested_by   TEXT,
    completed_at   TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    data           TEXT NOT NULL
);

-- Every blob an erasure deleted: where a payload reference meets one of these, the content is
-- "erased", not missing.
CREATE TABLE erased_blobs (
    tenant     TEXT NOT NULL,
    blob_id    TEXT NOT NULL,
    erasure_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    PRIMARY KEY (tenant, blob_id)
);

-- Anomalies (DESIGN §6), recorded, never dropped: one row per anomaly, in the order the state
-- machine reports them for the entry.
CREATE TABLE anomalies (
    seq           INTEGER NOT NULL,
    idx           INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    tenant        TEXT,
    invocation_id TEXT,
    subject       TEXT,
    details       TEXT NOT NULL,           -- the anomaly as JSON, {"kind": …, …}
    PRIMARY KEY (seq, idx)
);
CREATE INDEX anomalies_by_kind ON anomalies (kind, seq);
CREATE INDEX anomalies_by_invocation ON anomalies (tenant, invocation_id, seq);
