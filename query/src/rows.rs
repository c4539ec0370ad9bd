//! Rows as JSON objects: the projection's sub-records (hooks, decisions, results …) are returned with
//! their columns as fields and their JSON columns parsed, so the API shows exactly what was projected.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, Params};
use serde_json::{Map, Value};

use crate::error::{Result, SqlContext};

/// Columns that hold JSON text in the projection schema.
const JSON_COLUMNS: &[&str] = &[
    "data",
    "details",
    "outputs",
    "permission_result",
    "updated_input",
    "updated_output",
    "additional_context",
    "stop",
    "rule_refs",
    "policy_refs",
    "reason",
    "persistence_refs",
    "permission_input",
    "changed_fields",
    "value",
    "persisted_ref",
    "mapping",
    "detail",
    "payload_refs",
    "scrubbed_paths",
    "trace_refs",
    "source_ref",
];

/// Runs `sql` and returns each row as an object of its columns.
pub(crate) fn objects(
    conn: &Connection,
    context: &'static str,
    sql: &str,
    params: impl Params,
) -> Result<Vec<Value>> {
    let mut statement = conn.prepare_cached(sql).sql(context)?;
    let names: Vec<String> = statement.column_names().iter().map(|n| (*n).to_owned()).collect();
    let mut rows = statement.query(params).sql(context)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().sql(context)? {
        let mut object = Map::new();
        for (i, name) in names.iter().enumerate() {
            let value = row.get_ref(i).sql(context)?;
            object.insert(name.clone(), column_value(name, value));
        }
        out.push(Value::Object(object));
    }
    Ok(out)
}

/// One column as JSON: integers and reals as numbers, JSON columns parsed, other text as strings.
pub(crate) fn column_value(name: &str, value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            if JSON_COLUMNS.contains(&name) {
                serde_json::from_str(&text).unwrap_or(Value::String(text.into_owned()))
            } else {
                Value::String(text.into_owned())
            }
        }
        ValueRef::Blob(bytes) => Value::String(toolledger_wire::entry::hex(bytes)),
    }
}

/// Parses a JSON text column, keeping unparsable text as a string.
pub(crate) fn json(text: Option<String>) -> Value {
    match text {
        None => Value::Null,
        Some(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}
