//! The tool catalog (declarations and their versions), surfaces and deferred refs.

use rusqlite::{OptionalExtension, params};
use serde_json::{Map, Value};
use toolledger_schemas::model::{DeferredToolRef, Loose, ToolDeclaration, ToolFilter, ToolSurface};

use super::{Ctx, load_object, merge, to_json, typed};
use crate::error::{Result, SqlContext};

/// A `tools` row as stored: version number, version, lifecycle, first sequence, merged data.
type StoredTool = (i64, Option<String>, Option<String>, i64, String);

/// `tool.declared`: a new catalog version when `version` changes, else the current version's
/// declaration merged field by field.
pub(super) fn declare(ctx: &mut Ctx<'_>, declaration: &ToolDeclaration) -> Result<()> {
    let tx = ctx.tx;
    let current: Option<StoredTool> = tx
        .prepare_cached(
            "SELECT version_no, version, lifecycle, first_seq, data FROM tools WHERE tenant = ?1 AND tool_id = ?2",
        )
        .sql("prepare tool lookup")?
        .query_row(params![ctx.tenant, declaration.tool_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()
        .sql("tool lookup")?;
    let version = declaration.version().map(str::to_owned);
    let (version_no, new_version, first_seq, mut tool_data, previous_lifecycle) = match current {
        None => (1, true, ctx.seq, Map::new(), None),
        Some((no, stored_version, lifecycle, first_seq, data)) => {
            let data = match serde_json::from_str(&data) {
                Ok(Value::Object(map)) => map,
                _ => Map::new(),
            };
            if stored_version == version {
                (no, false, first_seq, data, lifecycle)
            } else {
                (no + 1, true, first_seq, data, lifecycle)
            }
        }
    };
    // The version's own declaration: fresh for a new version, merged for a re-declaration.
    let (mut version_data, version_first) = if new_version {
        (Map::new(), ctx.seq)
    } else {
        load_object(
            tx,
            "tool_versions",
            "tenant = ?1 AND tool_id = ?2 AND version_no = ?3",
            &[&ctx.tenant, &declaration.tool_id, &version_no],
        )?
        .unwrap_or_else(|| (Map::new(), ctx.seq))
    };
    merge(&mut version_data, ctx.raw, &[]);
    merge(&mut tool_data, ctx.raw, &[]);
    let merged: ToolDeclaration = typed(&version_data, declaration);
    tx.prepare_cached(
        "INSERT OR REPLACE INTO tool_versions (tenant, tool_id, version_no, version, lifecycle, tool_kind,
            first_seq, last_seq, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .sql("prepare tool version")?
    .execute(params![
        ctx.tenant,
        merged.tool_id,
        version_no,
        merged.version(),
        merged.lifecycle.as_str(),
        merged.tool_kind.as_str(),
        version_first,
        ctx.seq,
        Value::Object(version_data.clone()).to_string()
    ])
    .sql("insert tool version")?;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO tools (tenant, tool_id, namespace, name, title, version, version_no, lifecycle,
            tool_kind, first_seq, last_seq, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )
    .sql("prepare tool")?
    .execute(params![
        ctx.tenant,
        merged.tool_id,
        merged.namespace,
        merged.name,
        merged.title,
        merged.version(),
        version_no,
        merged.lifecycle.as_str(),
        merged.tool_kind.as_str(),
        first_seq,
        ctx.seq,
        Value::Object(tool_data).to_string()
    ])
    .sql("insert tool")?;
    if previous_lifecycle.as_deref() != Some(merged.lifecycle.as_str()) {
        tx.prepare_cached(
            "INSERT OR REPLACE INTO tool_lifecycle (tenant, tool_id, seq, lifecycle) VALUES (?1, ?2, ?3, ?4)",
        )
        .sql("prepare lifecycle")?
        .execute(params![
            ctx.tenant,
            merged.tool_id,
            ctx.seq,
            merged.lifecycle.as_str()
        ])
        .sql("insert lifecycle")?;
    }
    for alias in merged.aliases.iter().flatten() {
        tx.prepare_cached(
            "INSERT OR IGNORE INTO tool_aliases (tenant, tool_id, alias, version_no, seq) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .sql("prepare alias")?
        .execute(params![ctx.tenant, merged.tool_id, alias, version_no, ctx.seq])
        .sql("insert alias")?;
    }
    tx.prepare_cached(
        "DELETE FROM tool_external_mappings WHERE tenant = ?1 AND tool_id = ?2 AND version_no = ?3",
    )
    .sql("prepare clear mappings")?
    .execute(params![ctx.tenant, merged.tool_id, version_no])
    .sql("clear mappings")?;
    if let Some(Value::Array(mappings)) = version_data.get("external_mappings") {
        for (idx, mapping) in mappings.iter().enumerate() {
            let source = mapping
                .get("source")
                .or_else(|| mapping.get("protocol"))
                .and_then(Value::as_str);
            tx.prepare_cached(
                "INSERT INTO tool_external_mappings (tenant, tool_id, version_no, idx, source, mapping)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .sql("prepare mapping")?
            .execute(params![
                ctx.tenant,
                merged.tool_id,
                version_no,
                i64::try_from(idx).unwrap_or(i64::MAX),
                source,
                mapping.to_string()
            ])
            .sql("insert mapping")?;
        }
    }
    Ok(())
}

/// The id a surface lists a tool by: a string, or an object's `tool_id` (else `name`).
fn tool_ref(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o
            .get("tool_id")
            .or_else(|| o.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// `tool.surface.created` / `.updated`: a new revision, the merged surface and its tools.
pub(super) fn surface(ctx: &mut Ctx<'_>) -> Result<()> {
    let tx = ctx.tx;
    let Some(surface_id) = ctx
        .raw
        .get("surface_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Ok(());
    };
    let stored = load_object(
        tx,
        "surfaces",
        "tenant = ?1 AND surface_id = ?2",
        &[&ctx.tenant, &surface_id],
    )?;
    let revision: i64 = tx
        .prepare_cached("SELECT revision FROM surfaces WHERE tenant = ?1 AND surface_id = ?2")
        .sql("prepare revision")?
        .query_row(params![ctx.tenant, surface_id], |r| r.get(0))
        .optional()
        .sql("revision")?
        .map_or(1, |r: i64| r + 1);
    let (mut data, first_seq) = stored.unwrap_or_else(|| (Map::new(), ctx.seq));
    merge(&mut data, ctx.raw, &[]);
    let surface: Option<ToolSurface> = serde::Deserialize::deserialize(Value::Object(data.clone())).ok();
    let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);
    let data_text = Value::Object(data.clone()).to_string();
    let session: Option<String> = tx
        .prepare_cached("SELECT session_id FROM surfaces WHERE tenant = ?1 AND surface_id = ?2")
        .sql("prepare surface session")?
        .query_row(params![ctx.tenant, surface_id], |r| r.get(0))
        .optional()
        .sql("surface session")?
        .flatten()
        .or_else(|| ctx.session.clone());
    tx.prepare_cached(
        "INSERT OR REPLACE INTO surfaces (tenant, surface_id, scope, producer, session_id, revision, first_seq,
            last_seq, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .sql("prepare surface")?
    .execute(params![
        ctx.tenant,
        surface_id,
        text("scope"),
        text("producer"),
        session,
        revision,
        first_seq,
        ctx.seq,
        data_text
    ])
    .sql("insert surface")?;
    tx.prepare_cached(
        "INSERT INTO surface_revisions (tenant, surface_id, revision, seq, class, surface_reason, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .sql("prepare surface revision")?
    .execute(params![
        ctx.tenant,
        surface_id,
        revision,
        ctx.seq,
        ctx.class.as_str(),
        text("surface_reason"),
        data_text
    ])
    .sql("insert surface revision")?;

    let mut tools: Vec<(&str, String, Option<String>, String)> = Vec::new();
    if let Some(surface) = &surface {
        for tool in surface.tool_refs.iter().flatten() {
            tools.push(("ref", tool.clone(), None, Value::String(tool.clone()).to_string()));
        }
        for tool in surface.loaded_tools.iter().flatten() {
            if let Some(id) = tool_ref(tool) {
                tools.push(("loaded", id, None, tool.to_string()));
            }
        }
        for tool in surface.deferred_tools.iter().flatten() {
            if let Some(id) = tool_ref(tool) {
                let reason = tool.get("reason").and_then(Value::as_str).map(str::to_owned);
                tools.push(("deferred", id, reason, tool.to_string()));
            }
        }
        let filters = |list: &Option<Vec<Loose<ToolFilter>>>, disposition: &'static str, out: &mut Vec<_>| {
            for filter in list.iter().flatten() {
                let (id, reason) = match filter {
                    Loose::Typed(f) => (
                        f.tool_id.clone().or_else(|| f.name.clone()),
                        f.reason.as_ref().map(|r| r.as_str().to_owned()),
                    ),
                    Loose::Raw(value) => (
                        tool_ref(value),
                        value.get("reason").and_then(Value::as_str).map(str::to_owned),
                    ),
                };
                let detail = serde_json::to_string(filter).unwrap_or_default();
                if let Some(id) = id {
                    out.push((disposition, id, reason, detail));
                }
            }
        };
        filters(&surface.blocked_tools, "blocked", &mut tools);
        filters(&surface.excluded_tools, "excluded", &mut tools);
    }
    let mut stmt = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO surface_tools (tenant, surface_id, revision, disposition, tool_id, reason, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .sql("prepare surface tool")?;
    for (disposition, tool, reason, detail) in tools {
        stmt.execute(params![
            ctx.tenant,
            surface_id,
            revision,
            disposition,
            tool,
            reason,
            detail
        ])
        .sql("insert surface tool")?;
    }
    Ok(())
}

/// `tool.deferred.discovered` / `.loaded`: the deferred ref merged, and its loading history.
pub(super) fn deferred(ctx: &mut Ctx<'_>) -> Result<()> {
    let tx = ctx.tx;
    let Some(tool_id) = ctx.raw.get("tool_id").and_then(Value::as_str).map(str::to_owned) else {
        return Ok(());
    };
    let (mut data, first_seq) = load_object(
        tx,
        "deferred_tools",
        "tenant = ?1 AND tool_id = ?2",
        &[&ctx.tenant, &tool_id],
    )?
    .unwrap_or_else(|| (Map::new(), ctx.seq));
    merge(&mut data, ctx.raw, &[]);
    let Ok(d) = <DeferredToolRef as serde::Deserialize>::deserialize(Value::Object(data.clone())) else {
        return Ok(());
    };
    tx.prepare_cached(
        "INSERT OR REPLACE INTO deferred_tools (tenant, tool_id, name, namespace, search_hint, source,
            schema_visibility, loading_state, reason, pending_provider_or_server, selection_ref, native_ref,
            first_seq, last_seq, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )
    .sql("prepare deferred")?
    .execute(params![
        ctx.tenant,
        d.tool_id,
        d.name,
        d.namespace,
        d.search_hint,
        d.source,
        d.schema_visibility.map(|v| v.as_str()),
        d.loading_state.as_str(),
        d.reason,
        d.pending_provider_or_server,
        d.selection_ref,
        to_json(&d.native_ref),
        first_seq,
        ctx.seq,
        Value::Object(data).to_string()
    ])
    .sql("insert deferred")?;
    tx.prepare_cached(
        "INSERT INTO deferred_loading (seq, tenant, tool_id, class, loading_state, schema_visibility, reason,
            selection_ref)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .sql("prepare deferred loading")?
    .execute(params![
        ctx.seq,
        ctx.tenant,
        d.tool_id,
        ctx.class.as_str(),
        d.loading_state.as_str(),
        d.schema_visibility.map(|v| v.as_str()),
        d.reason,
        d.selection_ref
    ])
    .sql("insert deferred loading")?;
    Ok(())
}
