//! One projection database: a SQLite file in WAL mode holding the schema of [`SCHEMA_SQL`] and
//! the position of the last ledger entry it covers.
//!
//! [`Store::apply_batch`] applies entries in one transaction and moves the position in that same
//! transaction, so after a crash (kill -9 included) the file holds exactly the entries up to its
//! position: the next run resumes after it and no entry is applied twice or skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use toolledger_schemas::state::Config as StateConfig;

use crate::apply;
use crate::error::{Error, Result, SqlContext};

/// The schema, as `docs/projections.md` documents it.
pub const SCHEMA_SQL: &str = include_str!("schema.sql");

/// The schema version this build writes; a database with another is refused (rebuild it).
pub const SCHEMA_VERSION: &str = "3";

/// Prepared statements kept per connection: every statement of the apply path, with room to spare.
const STATEMENT_CACHE: usize = 128;

/// The indexes [`SCHEMA_SQL`] creates, by name, each with its statement as SQLite keeps it in
/// `sqlite_master` (the line without its `;`).
fn schema_indexes() -> BTreeMap<&'static str, &'static str> {
    SCHEMA_SQL
        .lines()
        .filter(|line| line.starts_with("CREATE INDEX "))
        .filter_map(|line| {
            let sql = line.trim_end().strip_suffix(';')?;
            let name = sql.split_whitespace().nth(2)?;
            Some((name, sql))
        })
        .collect()
}

/// One ledger entry to apply: its ATL_LEDGER sequence and its bytes (the canonical entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// The stream sequence.
    pub seq: u64,
    /// The message payload.
    pub bytes: Vec<u8>,
}

/// A projection database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    state: StateConfig,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating it and its schema when new) the database at `path` for writing.
    pub fn open(path: &Path, state: StateConfig) -> Result<Store> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(path).sql("open")?;
        // WAL: readers never block the writer. synchronous=NORMAL: a power loss may lose the last
        // transactions but never splits one, and the position travels with the rows it covers, so
        // the projection simply re-applies from its (older) position.
        conn.pragma_update(None, "journal_mode", "WAL")
            .sql("journal_mode")?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .sql("synchronous")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .sql("busy_timeout")?;
        // The apply path has about 35 distinct statements; rusqlite's default cache holds 16, so
        // a batch kept evicting and re-preparing them (6 % of the apply in a profile).
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let store = Store {
            conn,
            path: path.to_path_buf(),
            state,
        };
        store.init_schema()?;
        Ok(store)
    }

    /// Opens an existing database read-only (readers: the query service, tests).
    pub fn open_readonly(path: &Path) -> Result<Store> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .sql("open read-only")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .sql("busy_timeout")?;
        // The query service's reads have about 20 statements of their own.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let store = Store {
            conn,
            path: path.to_path_buf(),
            state: StateConfig::default(),
        };
        store.check_version()?;
        Ok(store)
    }

    fn init_schema(&self) -> Result<()> {
        let exists: bool = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
                [],
                |row| row.get::<_, i64>(0),
            )
            .sql("schema lookup")?
            > 0;
        if exists {
            self.check_version()?;
            return self.sync_indexes();
        }
        let tx = self.conn.unchecked_transaction().sql("begin schema")?;
        tx.execute_batch(SCHEMA_SQL).sql("create schema")?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
            [SCHEMA_VERSION],
        )
        .sql("schema version")?;
        tx.execute(
            "INSERT INTO position (id, stream, seq, leaf_hash) VALUES (0, ?1, 0, NULL)",
            [toolledger_wire::streams::LEDGER],
        )
        .sql("initial position")?;
        tx.commit().sql("commit schema")
    }

    /// Gives an existing projection this build's indexes: each index [`SCHEMA_SQL`] creates that
    /// is missing or defined otherwise is (re)built, and one it no longer creates is dropped. An
    /// index holds nothing the tables do not, so this needs no rebuild and no new schema version;
    /// it runs once per change, when the writer opens the file, and readers see the indexes from
    /// their next statement.
    fn sync_indexes(&self) -> Result<()> {
        let wanted = schema_indexes();
        let mut existing = BTreeMap::new();
        {
            // `sql` is NULL for the indexes SQLite makes for keys; those are the tables' own.
            let mut stmt = self
                .conn
                .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
                .sql("list indexes")?;
            let rows = stmt
                .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))
                .sql("list indexes")?;
            for row in rows {
                let (name, sql) = row.sql("list indexes")?;
                existing.insert(name, sql);
            }
        }
        let stale: Vec<&String> = existing
            .iter()
            .filter(|(name, sql)| wanted.get(name.as_str()) != Some(&sql.as_str()))
            .map(|(name, _)| name)
            .collect();
        let missing: Vec<(&str, &str)> = wanted
            .iter()
            .filter(|(name, sql)| existing.get(**name).map(String::as_str) != Some(**sql))
            .map(|(name, sql)| (*name, *sql))
            .collect();
        if stale.is_empty() && missing.is_empty() {
            return Ok(());
        }
        let tx = self.conn.unchecked_transaction().sql("begin indexes")?;
        for name in stale {
            tracing::info!(index = %name, path = %self.path.display(), "dropping an index this build defines otherwise or not at all");
            tx.execute_batch(&format!("DROP INDEX \"{name}\""))
                .sql("drop index")?;
        }
        for (name, sql) in missing {
            tracing::info!(index = name, path = %self.path.display(), "building an index this build defines");
            tx.execute_batch(sql).sql("create index")?;
        }
        tx.commit().sql("commit indexes")
    }

    fn check_version(&self) -> Result<()> {
        let found: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |row| {
                row.get(0)
            })
            .optional()
            .sql("schema version")?;
        match found {
            Some(found) if found == SCHEMA_VERSION => Ok(()),
            found => Err(Error::SchemaVersion {
                path: self.path.clone(),
                found: found.unwrap_or_else(|| "none".to_owned()),
                expected: SCHEMA_VERSION.to_owned(),
            }),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection, for read queries.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The sequence of the last entry applied (0 for none).
    pub fn position(&self) -> Result<u64> {
        let seq: i64 = self
            .conn
            .query_row("SELECT seq FROM position WHERE id = 0", [], |row| row.get(0))
            .sql("read position")?;
        Ok(u64::try_from(seq).unwrap_or(0))
    }

    /// Applies `entries` in ledger order in one transaction, with the new position. Entries at or
    /// below the position are skipped (already applied); a sequence beyond position + 1 is a
    /// [`Error::LedgerGap`] and nothing of the batch is kept. Returns the new position.
    pub fn apply_batch(&mut self, entries: &[RawEntry]) -> Result<u64> {
        let state = self.state;
        let tx = self.conn.transaction().sql("begin batch")?;
        let mut position: u64 = tx
            .query_row("SELECT seq FROM position WHERE id = 0", [], |row| {
                row.get::<_, i64>(0)
            })
            .sql("read position")?
            .try_into()
            .unwrap_or(0);
        // Entries already applied are skipped; the rest must follow the position without a gap.
        let new = &entries[entries.partition_point(|entry| entry.seq <= position)..];
        for (entry, expected) in new.iter().zip(position + 1..) {
            if entry.seq != expected {
                return Err(Error::LedgerGap {
                    position: expected - 1,
                    next: entry.seq,
                });
            }
        }
        let mut leaf = None;
        let mut invocations = apply::Invocations::default();
        // Parsing and classifying entries needs no database: a second thread does it, a bounded
        // distance ahead, while this one writes.
        toolledger_ledger::decode_ahead(
            new,
            |entry| toolledger_ledger::decode_entry(&entry.bytes),
            |entry, decoded| {
                leaf = Some(apply::apply_decoded(
                    &tx,
                    entry.seq,
                    decoded,
                    &state,
                    &mut invocations,
                )?);
                Ok(())
            },
        )?;
        if let Some(last) = new.last() {
            position = last.seq;
        }
        // Each invocation the batch touched is written once, in the transaction of its position.
        invocations.write(&tx)?;
        if let Some(leaf) = leaf {
            tx.execute(
                "UPDATE position SET seq = ?1, leaf_hash = ?2 WHERE id = 0",
                params![i64::try_from(position).unwrap_or(i64::MAX), leaf],
            )
            .sql("write position")?;
        }
        tx.commit().sql("commit batch")?;
        Ok(position)
    }

    /// Every projected table's rows, each rendered as one line and sorted: what "a rebuild equals
    /// the incremental result" compares. `meta` (creation facts) is left out.
    pub fn table_contents(&self) -> Result<BTreeMap<String, Vec<String>>> {
        let mut tables = Vec::new();
        {
            let mut stmt = self
                .conn
                .prepare(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'meta' ORDER BY name",
                )
                .sql("list tables")?;
            let names = stmt
                .query_map([], |row| row.get::<_, String>(0))
                .sql("list tables")?;
            for name in names {
                tables.push(name.sql("list tables")?);
            }
        }
        let mut out = BTreeMap::new();
        for table in tables {
            let mut stmt = self
                .conn
                .prepare(&format!("SELECT * FROM \"{table}\""))
                .sql("dump table")?;
            let columns = stmt.column_count();
            let mut rows = stmt.query([]).sql("dump table")?;
            let mut lines = Vec::new();
            while let Some(row) = rows.next().sql("dump row")? {
                let mut line = Vec::with_capacity(columns);
                for i in 0..columns {
                    let value: rusqlite::types::Value = row.get(i).sql("dump value")?;
                    line.push(format!("{value:?}"));
                }
                lines.push(line.join("\u{1f}"));
            }
            lines.sort();
            out.insert(table, lines);
        }
        Ok(out)
    }
}
