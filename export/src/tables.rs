//! The archive's tables as Arrow schemas, rows → record batches, and the Parquet encoding
//! (documented and versioned in `docs/parquet.md`; evolution only adds columns).
//!
//! Partition columns (`tenant`, `event_date`) live in the Hive folder names, not in the files, so
//! DuckDB, pyarrow, Trino and Spark read them from the path without a clash.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::rows::{DecisionRow, EventRow, InvocationRow, ResultRow};
use crate::{Error, Result};

/// The archive's schema version, written into every file's key-value metadata and every manifest.
/// Bumped when columns are added; columns are never removed or retyped (a required one may become
/// optional). 2: `invocations` gained the invocation fold's error source, result id, four inputs,
/// mutations, transitions and anomalies. 3: `invocations` holds a version of an invocation per range
/// that changed it (`seq`, added), so `terminal_seq` is null while it is open.
pub const SCHEMA_VERSION: u32 = 3;

/// The metadata key holding [`SCHEMA_VERSION`].
pub const SCHEMA_VERSION_KEY: &str = "toolledger.schema_version";

/// The archive's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// One row per ledger entry.
    Events,
    /// A version of each invocation per range that changed it.
    Invocations,
    /// One row per permission decision.
    PermissionDecisions,
    /// One row per result record.
    Results,
    /// One row per signed checkpoint.
    Checkpoints,
}

impl Table {
    /// The tables cut by ledger sequence ranges, in the order their manifests are written.
    pub const LEDGER: [Table; 4] = [
        Table::Events,
        Table::Invocations,
        Table::PermissionDecisions,
        Table::Results,
    ];

    /// The folder name.
    pub const fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Invocations => "invocations",
            Table::PermissionDecisions => "permission_decisions",
            Table::Results => "results",
            Table::Checkpoints => "checkpoints",
        }
    }

    /// The table's Arrow schema.
    pub fn schema(self) -> SchemaRef {
        let s = |name: &str| Field::new(name, DataType::Utf8, true);
        let req = |name: &str, t: DataType| Field::new(name, t, false);
        let u64n = |name: &str| Field::new(name, DataType::UInt64, true);
        let i64n = |name: &str| Field::new(name, DataType::Int64, true);
        let ts = |name: &str| {
            Field::new(
                name,
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            )
        };
        let fields = match self {
            Table::Events => vec![
                req("seq", DataType::UInt64),
                req("leaf_hash", DataType::Utf8),
                req("entry", DataType::Binary),
                s("event_id"),
                s("source"),
                s("class"),
                s("session_id"),
                s("subject"),
                s("invocation_id"),
                s("tool_id"),
                ts("event_time"),
                ts("ingested_at"),
                s("origin"),
                s("traceparent"),
                s("tracestate"),
                s("trace_refs"),
                s("payload_refs"),
                s("scrubbed_paths"),
                s("status"),
                s("behavior"),
                s("decision_id"),
                s("result_id"),
                s("error_class"),
                s("problem"),
            ],
            Table::Invocations => vec![
                req("invocation_id", DataType::Utf8),
                s("session_id"),
                s("tool_id"),
                s("surface_id"),
                req("state", DataType::Utf8),
                s("native_call_id"),
                s("retry_of"),
                i64n("attempt"),
                s("error_class"),
                s("error_code"),
                s("error_message"),
                s("permission_behavior"),
                req("decision_count", DataType::UInt64),
                req("event_count", DataType::UInt64),
                req("first_seq", DataType::UInt64),
                // Schema 3: null while the invocation is open (required before).
                Field::new("terminal_seq", DataType::UInt64, true),
                ts("first_event_time"),
                ts("terminal_event_time"),
                ts("created_at"),
                ts("started_at"),
                ts("ended_at"),
                Field::new("duration_ms", DataType::Float64, true),
                s("actor_ref"),
                // Schema 2: the rest of what the invocation fold says.
                s("error_source"),
                s("result_id"),
                s("model_input"),
                s("model_input_ref"),
                s("observable_input"),
                s("observable_input_ref"),
                s("permission_input"),
                s("permission_input_ref"),
                s("call_input"),
                s("call_input_ref"),
                req("input_mutations", DataType::Utf8),
                req("transitions", DataType::Utf8),
                req("anomalies", DataType::Utf8),
                // Schema 3.
                req("seq", DataType::UInt64),
            ],
            Table::PermissionDecisions => vec![
                req("seq", DataType::UInt64),
                s("decision_id"),
                s("invocation_id"),
                s("behavior"),
                s("mode"),
                s("source"),
                s("reason"),
                s("rule_refs"),
                s("policy_refs"),
                req("updated_input", DataType::Boolean),
                Field::new("user_modified", DataType::Boolean, true),
                ts("decided_at"),
                ts("event_time"),
            ],
            Table::Results => vec![
                req("seq", DataType::UInt64),
                req("class", DataType::Utf8),
                s("invocation_id"),
                s("result_id"),
                s("status"),
                Field::new("is_error", DataType::Boolean, true),
                u64n("content_blocks"),
                s("summary"),
                s("redaction_state"),
                s("error_class"),
                s("strategy"),
                s("persisted_ref"),
                i64n("original_size_bytes"),
                s("refs"),
                s("payload_refs"),
                ts("event_time"),
            ],
            Table::Checkpoints => vec![
                req("checkpoint_seq", DataType::UInt64),
                req("origin", DataType::Utf8),
                req("size", DataType::UInt64),
                req("root", DataType::Utf8),
                req("note", DataType::Utf8),
            ],
        };
        let metadata = HashMap::from([(SCHEMA_VERSION_KEY.to_owned(), SCHEMA_VERSION.to_string())]);
        Arc::new(Schema::new_with_metadata(fields, metadata))
    }
}

/// A signed checkpoint as the `checkpoints` table stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRow {
    /// ATL_CHECKPOINTS sequence.
    pub checkpoint_seq: u64,
    /// The log's origin line.
    pub origin: String,
    /// Tree size.
    pub size: u64,
    /// Root hash, lowercase hex.
    pub root: String,
    /// The whole signed note.
    pub note: String,
}

fn utf8<R>(rows: &[&R], f: impl Fn(&R) -> Option<&str>) -> ArrayRef {
    Arc::new(rows.iter().map(|r| f(r)).collect::<StringArray>())
}
fn u64s<R>(rows: &[&R], f: impl Fn(&R) -> Option<u64>) -> ArrayRef {
    Arc::new(rows.iter().map(|r| f(r)).collect::<UInt64Array>())
}
fn i64s<R>(rows: &[&R], f: impl Fn(&R) -> Option<i64>) -> ArrayRef {
    Arc::new(rows.iter().map(|r| f(r)).collect::<Int64Array>())
}
fn bools<R>(rows: &[&R], f: impl Fn(&R) -> Option<bool>) -> ArrayRef {
    Arc::new(rows.iter().map(|r| f(r)).collect::<BooleanArray>())
}
fn times<R>(rows: &[&R], f: impl Fn(&R) -> Option<i64>) -> ArrayRef {
    Arc::new(
        rows.iter()
            .map(|r| f(r))
            .collect::<TimestampMicrosecondArray>()
            .with_timezone("UTC"),
    )
}

fn batch(table: Table, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    RecordBatch::try_new(table.schema(), columns).map_err(|e| Error::Encode {
        table: table.name().to_owned(),
        reason: e.to_string(),
    })
}

/// The `events` batch of `rows`.
pub fn events_batch(rows: &[&EventRow]) -> Result<RecordBatch> {
    batch(
        Table::Events,
        vec![
            u64s(rows, |r| Some(r.seq)),
            utf8(rows, |r| Some(&r.leaf_hash)),
            Arc::new(
                rows.iter()
                    .map(|r| Some(r.entry.as_slice()))
                    .collect::<BinaryArray>(),
            ),
            utf8(rows, |r| r.event_id.as_deref()),
            utf8(rows, |r| r.source.as_deref()),
            utf8(rows, |r| r.class.as_deref()),
            utf8(rows, |r| r.session_id.as_deref()),
            utf8(rows, |r| r.subject.as_deref()),
            utf8(rows, |r| r.invocation_id.as_deref()),
            utf8(rows, |r| r.tool_id.as_deref()),
            times(rows, |r| r.event_time_us),
            times(rows, |r| r.ingested_at_us),
            utf8(rows, |r| r.origin.as_deref()),
            utf8(rows, |r| r.traceparent.as_deref()),
            utf8(rows, |r| r.tracestate.as_deref()),
            utf8(rows, |r| r.trace_refs.as_deref()),
            utf8(rows, |r| r.payload_refs.as_deref()),
            utf8(rows, |r| r.scrubbed_paths.as_deref()),
            utf8(rows, |r| r.status.as_deref()),
            utf8(rows, |r| r.behavior.as_deref()),
            utf8(rows, |r| r.decision_id.as_deref()),
            utf8(rows, |r| r.result_id.as_deref()),
            utf8(rows, |r| r.error_class.as_deref()),
            utf8(rows, |r| r.problem.as_deref()),
        ],
    )
}

/// The `invocations` batch of `rows`.
pub fn invocations_batch(rows: &[&InvocationRow]) -> Result<RecordBatch> {
    batch(
        Table::Invocations,
        vec![
            utf8(rows, |r| Some(&r.invocation_id)),
            utf8(rows, |r| r.session_id.as_deref()),
            utf8(rows, |r| r.tool_id.as_deref()),
            utf8(rows, |r| r.surface_id.as_deref()),
            utf8(rows, |r| Some(&r.state)),
            utf8(rows, |r| r.native_call_id.as_deref()),
            utf8(rows, |r| r.retry_of.as_deref()),
            i64s(rows, |r| r.attempt),
            utf8(rows, |r| r.error_class.as_deref()),
            utf8(rows, |r| r.error_code.as_deref()),
            utf8(rows, |r| r.error_message.as_deref()),
            utf8(rows, |r| r.permission_behavior.as_deref()),
            u64s(rows, |r| Some(r.decision_count)),
            u64s(rows, |r| Some(r.event_count)),
            u64s(rows, |r| Some(r.first_seq)),
            u64s(rows, |r| r.terminal_seq),
            times(rows, |r| r.first_event_time_us),
            times(rows, |r| r.terminal_event_time_us),
            times(rows, |r| r.created_at_us),
            times(rows, |r| r.started_at_us),
            times(rows, |r| r.ended_at_us),
            Arc::new(rows.iter().map(|r| r.duration_ms).collect::<Float64Array>()),
            utf8(rows, |r| r.actor_ref.as_deref()),
            utf8(rows, |r| r.error_source.as_deref()),
            utf8(rows, |r| r.result_id.as_deref()),
            utf8(rows, |r| r.inputs[0].as_deref()),
            utf8(rows, |r| r.input_refs[0].as_deref()),
            utf8(rows, |r| r.inputs[1].as_deref()),
            utf8(rows, |r| r.input_refs[1].as_deref()),
            utf8(rows, |r| r.inputs[2].as_deref()),
            utf8(rows, |r| r.input_refs[2].as_deref()),
            utf8(rows, |r| r.inputs[3].as_deref()),
            utf8(rows, |r| r.input_refs[3].as_deref()),
            utf8(rows, |r| Some(&r.input_mutations)),
            utf8(rows, |r| Some(&r.transitions)),
            utf8(rows, |r| Some(&r.anomalies)),
            u64s(rows, |r| Some(r.seq)),
        ],
    )
}

/// The `permission_decisions` batch of `rows`.
pub fn decisions_batch(rows: &[&DecisionRow]) -> Result<RecordBatch> {
    batch(
        Table::PermissionDecisions,
        vec![
            u64s(rows, |r| Some(r.seq)),
            utf8(rows, |r| r.decision_id.as_deref()),
            utf8(rows, |r| r.invocation_id.as_deref()),
            utf8(rows, |r| r.behavior.as_deref()),
            utf8(rows, |r| r.mode.as_deref()),
            utf8(rows, |r| r.source.as_deref()),
            utf8(rows, |r| r.reason.as_deref()),
            utf8(rows, |r| r.rule_refs.as_deref()),
            utf8(rows, |r| r.policy_refs.as_deref()),
            bools(rows, |r| Some(r.updated_input)),
            bools(rows, |r| r.user_modified),
            times(rows, |r| r.decided_at_us),
            times(rows, |r| r.event_time_us),
        ],
    )
}

/// The `results` batch of `rows`.
pub fn results_batch(rows: &[&ResultRow]) -> Result<RecordBatch> {
    batch(
        Table::Results,
        vec![
            u64s(rows, |r| Some(r.seq)),
            utf8(rows, |r| Some(&r.class)),
            utf8(rows, |r| r.invocation_id.as_deref()),
            utf8(rows, |r| r.result_id.as_deref()),
            utf8(rows, |r| r.status.as_deref()),
            bools(rows, |r| r.is_error),
            u64s(rows, |r| r.content_blocks),
            utf8(rows, |r| r.summary.as_deref()),
            utf8(rows, |r| r.redaction_state.as_deref()),
            utf8(rows, |r| r.error_class.as_deref()),
            utf8(rows, |r| r.strategy.as_deref()),
            utf8(rows, |r| r.persisted_ref.as_deref()),
            i64s(rows, |r| r.original_size_bytes),
            utf8(rows, |r| r.refs.as_deref()),
            utf8(rows, |r| r.payload_refs.as_deref()),
            times(rows, |r| r.event_time_us),
        ],
    )
}

/// The `checkpoints` batch of `rows`.
pub fn checkpoints_batch(rows: &[&CheckpointRow]) -> Result<RecordBatch> {
    batch(
        Table::Checkpoints,
        vec![
            u64s(rows, |r| Some(r.checkpoint_seq)),
            utf8(rows, |r| Some(&r.origin)),
            u64s(rows, |r| Some(r.size)),
            utf8(rows, |r| Some(&r.root)),
            utf8(rows, |r| Some(&r.note)),
        ],
    )
}

/// Fixed writer properties: zstd level 3, `row_group_rows` rows per row group, no wall-clock or host
/// values anywhere, so the same rows always encode to the same bytes.
pub fn writer_properties(row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .set_created_by(format!("toolledger-export schema {SCHEMA_VERSION}"))
        .build()
}

/// Encodes one batch as a whole Parquet file. CPU-bound: call it off the async workers.
pub fn encode(table: Table, batch: &RecordBatch, properties: WriterProperties) -> Result<Vec<u8>> {
    let error = |e: parquet::errors::ParquetError| Error::Encode {
        table: table.name().to_owned(),
        reason: e.to_string(),
    };
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).map_err(error)?;
    writer.write(batch).map_err(error)?;
    writer.close().map_err(error)?;
    Ok(out)
}
