//! The tool catalog: each tool's current declaration, its versions, lifecycle history, the surfaces
//! that list it and its deferred loading state.

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::Value;

use crate::error::{Result, SqlContext};
use crate::rows::objects;

/// One tool.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    /// Tenant.
    pub tenant: String,
    /// Tool id.
    pub tool_id: String,
    /// Namespace.
    pub namespace: Option<String>,
    /// Name.
    pub name: Option<String>,
    /// Title.
    pub title: Option<String>,
    /// Current version.
    pub version: Option<String>,
    /// Current lifecycle.
    pub lifecycle: Option<String>,
    /// Kind.
    pub tool_kind: Option<String>,
    /// Every version, oldest first.
    pub versions: Vec<Value>,
    /// Each lifecycle change with the entry that made it.
    pub lifecycle_history: Vec<Value>,
    /// Surfaces listing it in their latest revision, with the disposition.
    pub surfaces: Vec<Value>,
    /// Its deferred-tool record, when it is deferred.
    pub deferred: Option<Value>,
}

/// Every tool of `tenant` (all tenants for `None`), by tenant and id.
pub fn catalog(conn: &Connection, tenant: Option<&str>) -> Result<Vec<Tool>> {
    let mut statement = conn
        .prepare_cached(
            "SELECT tenant, tool_id, namespace, name, title, version, lifecycle, tool_kind FROM tools
             WHERE (?1 IS NULL OR tenant = ?1) ORDER BY tenant, tool_id",
        )
        .sql("tools")?;
    let heads = statement
        .query_map(params![tenant], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, Option<String>>(6)?,
                r.get::<_, Option<String>>(7)?,
            ))
        })
        .sql("tools")?
        .collect::<rusqlite::Result<Vec<_>>>()
        .sql("tools")?;
    let mut tools = Vec::with_capacity(heads.len());
    for (tenant, tool_id, namespace, name, title, version, lifecycle, tool_kind) in heads {
        let key = params![tenant, tool_id];
        let versions = objects(
            conn,
            "tool versions",
            "SELECT version_no, version, lifecycle, tool_kind, first_seq, last_seq FROM tool_versions
             WHERE tenant = ?1 AND tool_id = ?2 ORDER BY version_no",
            key,
        )?;
        let lifecycle_history = objects(
            conn,
            "tool lifecycle",
            "SELECT seq, lifecycle FROM tool_lifecycle WHERE tenant = ?1 AND tool_id = ?2 ORDER BY seq",
            key,
        )?;
        let surfaces = objects(
            conn,
            "tool surfaces",
            "SELECT st.surface_id, st.revision, st.disposition, st.reason FROM surface_tools st
             JOIN surfaces s ON s.tenant = st.tenant AND s.surface_id = st.surface_id AND s.revision = st.revision
             WHERE st.tenant = ?1 AND st.tool_id = ?2 ORDER BY st.surface_id, st.disposition",
            key,
        )?;
        let deferred = objects(
            conn,
            "deferred tool",
            "SELECT loading_state, schema_visibility, search_hint, source, reason, first_seq, last_seq
             FROM deferred_tools WHERE tenant = ?1 AND tool_id = ?2",
            key,
        )?
        .into_iter()
        .next();
        tools.push(Tool {
            tenant,
            tool_id,
            namespace,
            name,
            title,
            version,
            lifecycle,
            tool_kind,
            versions,
            lifecycle_history,
            surfaces,
            deferred,
        });
    }
    Ok(tools)
}
