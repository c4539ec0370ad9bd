//! Checkpoints, proofs and evidence bundles under `/v1`, for the web view and external auditors.
//!
//! ```text
//! GET /v1/checkpoints/latest | /{size}  ─▶ signed_checkpoint      (hashes and sizes: any valid token)
//! GET /v1/proofs/consistency?from&to    ─▶ prove_consistency      (hashes and sizes: any valid token)
//! GET /v1/proofs/inclusion?seq[&size]   ─▶ events: the seq's tenant ─ not the token's ─▶ 404
//!                                        ─▶ prove_inclusion (reveals the entry; access-recorded)
//! GET /v1/{invocations|sessions}/{id}/bundle?tenant&with_payloads&since_size
//!                                        ─▶ events: seqs of (tenant, id) ─▶ build_bundle ─▶ the bytes
//!                                           `toolledger bundle` writes (application/json; recorded)
//! ```
//!
//! In a partitioned ledger (`docs/scaling.md`) each partition is its own log: checkpoints and proofs
//! take `partition=K` (p0 when absent) or `partition=directory` (the directory over them, whose
//! entries are partitions' sizes and roots: any valid token), and a bundle is proved in its
//! tenant's partition.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rusqlite::{Connection, OptionalExtension};
use toolledger_verify::bundle::{BundleRequest, Selection, build_bundle};

use toolledger_verify::ProveSource;
use toolledger_wire::partition::Partition;

use super::{ApiState, LedgerAccess, Query, Shared, finish, json_response, path_id};
use crate::auth::Access;
use crate::error::{Error, Result};
use crate::params;

/// The log a checkpoint or proof route reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Log {
    Partition(Partition),
    Directory,
}

impl ApiState {
    /// The ledger, or 503 `no_ledger` naming what needed it.
    pub(super) fn ledger(&self, what: &'static str) -> Result<&LedgerAccess> {
        self.ledger.as_ref().ok_or(Error::NoLedger { what })
    }

    /// The log `partition` names: an index below the ledger's count, or `directory` over a
    /// partitioned ledger; p0 when absent (or, with `tenant`, the tenant's partition).
    fn log(&self, query: &Query) -> Result<Log> {
        let home = query
            .get("tenant")
            .map(|tenant| self.readers.partitions().of(tenant));
        match (query.get("partition"), home) {
            (Some(named), Some(home)) if named != home.index().to_string() => Err(Error::invalid(
                "partition",
                format!("`{named}`: the tenant lives in partition {}", home.index()),
            )),
            (_, Some(home)) => Ok(Log::Partition(home)),
            (named, None) => self.named_log(named),
        }
    }

    fn named_log(&self, named: Option<&str>) -> Result<Log> {
        match named {
            None => Ok(Log::Partition(Partition::ZERO)),
            Some("directory") if self.readers.partitions().count() > 1 => Ok(Log::Directory),
            Some("directory") => Err(Error::invalid(
                "partition",
                "a ledger of one partition has no directory (ledger.partitions)",
            )),
            Some(index) => Ok(Log::Partition(self.readers.partition("partition", index)?)),
        }
    }

    /// Reads the invocation or session `id` (in `column`) in its tenant's projection: `tenant`'s, or
    /// in a partitioned ledger, where an admin's read without one has no single projection to go
    /// to, its owner's ([`ApiState::owner_tenant`]). `read` gets the tenant scope to apply.
    pub(super) async fn read_id<T: Send + 'static>(
        &self,
        tenant: Option<String>,
        column: &'static str,
        what: &'static str,
        id: &str,
        read: impl FnOnce(&Connection, Option<&str>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let tenant = match tenant {
            None if self.readers.partitions().count() > 1 => Some(self.owner_tenant(column, what, id).await?),
            tenant => tenant,
        };
        self.readers
            .scoped(tenant.as_deref())?
            .read(move |conn| read(conn, tenant.as_deref()))
            .await
    }

    /// The tenant an admin means when it names none: the only tenant with entries for `id` in
    /// `column` (`invocation_id` or `session_id`) in any partition's projection.
    pub(super) async fn owner_tenant(
        &self,
        column: &'static str,
        what: &'static str,
        id: &str,
    ) -> Result<String> {
        // Every partition is asked, and one not projected yet fails the lookup (503): the id could be
        // another tenant's there too.
        let mut tenants = Vec::new();
        for (_, reader) in self.readers.all() {
            let lookup = id.to_owned();
            tenants.extend(
                reader
                    .read(move |conn| owner_tenants(conn, column, &lookup))
                    .await?,
            );
        }
        tenants.sort();
        tenants.dedup();
        match tenants.as_slice() {
            [tenant] => Ok(tenant.clone()),
            [] => Err(Error::NotFound {
                what,
                id: id.to_owned(),
            }),
            _ => Err(Error::invalid(
                "tenant",
                format!("required: {what} `{id}` exists in several tenants"),
            )),
        }
    }
}

impl LedgerAccess {
    /// The proof source of `log`.
    fn source(&self, log: Log) -> Result<&ProveSource> {
        let source = match log {
            Log::Partition(partition) => self.logs.get(usize::from(partition.index())),
            Log::Directory => self.directory.as_ref(),
        };
        source.ok_or(Error::NoLedger {
            what: "this partition's log",
        })
    }
}

/// A required whole-number query parameter.
fn number(query: &Query, field: &str) -> Result<Option<u64>> {
    query
        .get(field)
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| Error::invalid(field, format!("`{v}` is not a whole number")))
        })
        .transpose()
}

/// A `true`/`false` query parameter, `false` when absent.
fn flag(query: &Query, field: &str) -> Result<bool> {
    match query.get(field).unwrap_or("false") {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(Error::invalid(field, format!("`{other}`: use true or false"))),
    }
}

fn required(query: &Query, field: &str) -> Result<u64> {
    number(query, field)?.ok_or_else(|| Error::invalid(field, "required"))
}

pub(super) async fn latest_checkpoint(
    State(state): Shared,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result = async {
        state.authenticate(&headers)?;
        let query = Query::parse(raw, &["partition"])?;
        let log = state.log(&query)?;
        let ledger = state.ledger("checkpoints")?;
        let signed = toolledger_verify::signed_checkpoint(&ledger.js, ledger.source(log)?, None).await?;
        Ok(json_response(&signed))
    }
    .await;
    finish(&state, "checkpoint", result)
}

pub(super) async fn checkpoint(
    State(state): Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result = async {
        state.authenticate(&headers)?;
        let size = path_id("size", path)?;
        let size: u64 = size
            .parse()
            .map_err(|_| Error::invalid("size", format!("`{size}` is not a tree size (or `latest`)")))?;
        let query = Query::parse(raw, &["partition"])?;
        let log = state.log(&query)?;
        let ledger = state.ledger("checkpoints")?;
        let signed =
            toolledger_verify::signed_checkpoint(&ledger.js, ledger.source(log)?, Some(size)).await?;
        Ok(json_response(&signed))
    }
    .await;
    finish(&state, "checkpoint", result)
}

pub(super) async fn consistency(
    State(state): Shared,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let result = async {
        state.authenticate(&headers)?;
        let query = Query::parse(raw, &["from", "to", "partition"])?;
        let (from, to) = (required(&query, "from")?, required(&query, "to")?);
        let log = state.log(&query)?;
        let ledger = state.ledger("consistency proofs")?;
        let proof = toolledger_verify::prove_consistency(&ledger.js, ledger.source(log)?, from, to).await?;
        Ok(json_response(&proof))
    }
    .await;
    finish(&state, "consistency", result)
}

/// The projection's row for a ledger seq: tenant, invocation, session.
type EntryOwner = (String, Option<String>, Option<String>);

fn entry_owner(conn: &Connection, seq: u64) -> Result<Option<EntryOwner>> {
    let seq = i64::try_from(seq).map_err(|_| Error::invalid("seq", "too large"))?;
    conn.prepare_cached("SELECT tenant, invocation_id, session_id FROM events WHERE seq = ?1")
        .and_then(|mut s| {
            s.query_row([seq], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                    r.get(1)?,
                    r.get(2)?,
                ))
            })
            .optional()
        })
        .map_err(|source| Error::Sql {
            context: "entry owner",
            source,
        })
}

pub(super) async fn inclusion(State(state): Shared, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let result = async {
        let principal = state.authenticate(&headers)?;
        let query = Query::parse(raw, &["seq", "size", "partition", "tenant"])?;
        // A tenant named must be one the token reads; it only chooses the partition.
        principal.scope(query.get("tenant"))?;
        let seq = required(&query, "seq")?;
        let size = number(&query, "size")?;
        let log = state.log(&query)?;
        let ledger = state.ledger("inclusion proofs")?;
        let owner = match log {
            Log::Partition(partition) => {
                state
                    .readers
                    .of(partition)
                    .read(move |conn| entry_owner(conn, seq))
                    .await?
            }
            // The directory's entries are partitions' sizes and roots, no tenant's data.
            Log::Directory => None,
        };
        // The proof carries the entry itself: a tenant token sees only its tenants' entries, and an
        // entry it may not read is indistinguishable from one that does not exist.
        let readable = log == Log::Directory
            || match (&principal.access, &owner) {
                (Access::Admin, _) => true,
                (Access::Tenants(allowed), Some((tenant, _, _))) => allowed.contains(tenant),
                (Access::Tenants(_), None) => false,
            };
        if !readable {
            return Err(Error::NotFound {
                what: "ledger entry",
                id: seq.to_string(),
            });
        }
        let proof = toolledger_verify::prove_inclusion(&ledger.js, ledger.source(log)?, seq, size).await?;
        if let Some((tenant, invocation, session)) = owner
            && params::tenant(&tenant).is_ok()
        {
            state
                .record(
                    &principal,
                    "GET /v1/proofs/inclusion",
                    None,
                    [(tenant, invocation, session)],
                )
                .await?;
        }
        Ok(json_response(&proof))
    }
    .await;
    finish(&state, "inclusion", result)
}

/// The tenants with entries for `id` in `column` (`invocation_id` or `session_id`): two at most,
/// which is enough to know the id is not one tenant's.
fn owner_tenants(conn: &Connection, column: &'static str, id: &str) -> Result<Vec<String>> {
    let sql = |source| Error::Sql {
        context: "owner tenant",
        source,
    };
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT DISTINCT tenant FROM events WHERE {column} = ?1 AND tenant IS NOT NULL LIMIT 2"
        ))
        .map_err(sql)?;
    statement
        .query_map([id], |r| r.get(0))
        .map_err(sql)?
        .collect::<rusqlite::Result<_>>()
        .map_err(sql)
}

fn seqs(conn: &Connection, column: &'static str, tenant: &str, id: &str) -> Result<Vec<u64>> {
    let sql = |source| Error::Sql {
        context: "bundle seqs",
        source,
    };
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT seq FROM events WHERE tenant = ?1 AND {column} = ?2 ORDER BY seq"
        ))
        .map_err(sql)?;
    statement
        .query_map((tenant, id), |r| r.get::<_, i64>(0))
        .map_err(sql)?
        .map(|seq| Ok(u64::try_from(seq.map_err(sql)?).unwrap_or(0)))
        .collect()
}

pub(super) async fn invocation_bundle(
    state: Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    raw: RawQuery,
) -> Response {
    bundle(state, "invocation", path, headers, raw).await
}

pub(super) async fn session_bundle(
    state: Shared,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    raw: RawQuery,
) -> Response {
    bundle(state, "session", path, headers, raw).await
}

async fn bundle(
    State(state): Shared,
    what: &'static str,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let (field, column, endpoint) = if what == "invocation" {
        (
            "invocation_id",
            "invocation_id",
            "GET /v1/invocations/{invocation_id}/bundle",
        )
    } else {
        ("session_id", "session_id", "GET /v1/sessions/{session_id}/bundle")
    };
    let result = async {
        let principal = state.authenticate(&headers)?;
        let id = path_id(field, path)?;
        let query = Query::parse(raw, &["tenant", "with_payloads", "since_size", "with_directory"])?;
        let with_directory = flag(&query, "with_directory")?;
        let since_size = number(&query, "since_size")?;
        let with_payloads = flag(&query, "with_payloads")?;
        let tenant = principal.scope(query.get("tenant"))?;
        params::id(field, &id)?;
        let ledger = state.ledger("bundles")?;
        let tenant = match tenant {
            Some(tenant) => tenant,
            None => state.owner_tenant(column, what, &id).await?,
        };
        // A tenant's entries are in its partition: its projection, its log.
        let partition = state.readers.partitions().of(&tenant);
        let (lookup_tenant, lookup_id) = (tenant.clone(), id.clone());
        let seqs = state
            .readers
            .of(partition)
            .read(move |conn| seqs(conn, column, &lookup_tenant, &lookup_id))
            .await?;
        let source = ledger.source(Log::Partition(partition))?;
        if seqs.is_empty() {
            return Err(Error::NotFound { what, id });
        }
        let selection = if what == "invocation" {
            Selection::invocation(&tenant, &id)
        } else {
            Selection::session(&tenant, &id)
        };
        let blobs = match (with_payloads, &state.blobs) {
            (true, Some(blobs)) => Some(blobs.clone()),
            (true, None) => {
                return Err(Error::invalid(
                    "with_payloads",
                    "this server has no blob store configured",
                ));
            }
            (false, _) => None,
        };
        // An auditor holding the checkpoint of `since_size` gets the proof that the ledger only grew.
        let since_checkpoint = match since_size {
            Some(size) => Some(
                toolledger_verify::signed_checkpoint(&ledger.js, source, Some(size))
                    .await?
                    .note,
            ),
            None => None,
        };
        let request = BundleRequest {
            selection,
            seqs,
            since_checkpoint,
            blobs,
            // Every partition is witnessed (each under its own origin): the policy applies to the
            // bundle's checkpoint, whichever partition's it is.
            witness_policy: ledger.witness_policy.clone(),
            directory: match (with_directory, &ledger.directory) {
                (false, _) => None,
                (true, Some(directory)) => Some(directory.clone()),
                (true, None) => {
                    return Err(Error::invalid(
                        "with_directory",
                        "a ledger of one partition has no directory: its checkpoint is the one value",
                    ));
                }
            },
        };
        let built = build_bundle(&ledger.js, source, &request).await?;
        let row = if what == "invocation" {
            (tenant, Some(id), None)
        } else {
            (tenant, None, Some(id))
        };
        state.record(&principal, endpoint, None, [row]).await?;
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            built.bytes,
        )
            .into_response())
    }
    .await;
    finish(&state, "bundle", result)
}
