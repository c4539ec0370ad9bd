//! One projection database: a SQLite file in WAL mode holding the schema of [`SCHEMA_SQL`] and
//! the position of the last ledger entry it covers.
//!
//! [`Store::apply_batch`] applies entries in one transaction and moves the position in that same
//! transaction, so after a crash (kill -9 included) the file holds exactly the entries up to its
//! position: the next run resumes after it and no entry is applied twice or skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use toolledger_ledger::DecodedEntry;
use toolledger_schemas::state::Config as StateConfig;

use crate::apply;
use crate::error::{Error, Result, SqlContext};

/// The schema, as `docs/projections.md` documents it.
pub const SCHEMA_SQL: &str = include_str!("schema.sql");

/// The schema version this build writes; a database with another is refused (rebuild it).
pub const SCHEMA_VERSION: &str = "3";

/// WAL pages between automatic checkpoints of a projection (40 MB of 4 KiB pages).
const WAL_AUTOCHECKPOINT: i64 = 10_000;

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

/// Entries with what needs no state read from them ([`toolledger_ledger::decode_entry`]: leaf
/// hash, parse, classification), for [`Store::apply_decoded_batch`]: the runner decodes the next
/// batch on a blocking thread while the writer applies this one.
pub struct DecodedBatch {
    entries: Vec<RawEntry>,
    decoded: Vec<DecodedEntry>,
}

impl DecodedBatch {
    /// Decodes every entry, on the calling thread.
    pub fn decode(entries: Vec<RawEntry>) -> DecodedBatch {
        let decoded = entries
            .iter()
            .map(|entry| toolledger_ledger::decode_entry(&entry.bytes))
            .collect();
        DecodedBatch { entries, decoded }
    }

    /// The entries, in the order given.
    pub fn entries(&self) -> &[RawEntry] {
        &self.entries
    }
}

/// Invocation folds a rebuild holds across batches before it writes the least recently touched
/// half out (a fold is a few KB: tens of MB at most).
const REBUILD_FOLDS: usize = 20_000;

/// A projection database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    state: StateConfig,
    mode: Mode,
    /// The folds a rebuild holds before it spills ([`REBUILD_FOLDS`]; tests lower it).
    rebuild_folds: usize,
}

/// How a store writes invocation rows.
enum Mode {
    /// Each batch writes the rows of the invocations it touched (the position covers them).
    Follow,
    /// A rebuild ([`Store::open_for_rebuild`]): invocation folds kept across batches.
    Rebuild(apply::Invocations),
    /// A rebuild whose batch failed: the folds it held are gone, so nothing more is applied.
    Broken,
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
        // Checkpoint the WAL every WAL_AUTOCHECKPOINT pages rather than SQLite's 1,000: a page the
        // batches keep changing (an index's hot leaves, sessions) is copied back once per
        // checkpoint, not once per 4 MB of WAL. At 1M entries the default spent a quarter of the
        // apply in checkpoints (perf); this applies 15–25 % faster there (apply_bench onto a 1M
        // projection). A larger page cache did not help measurably.
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT)
            .sql("wal_autocheckpoint")?;
        // The apply path has about 35 distinct statements; rusqlite's default cache holds 16, so
        // a batch kept evicting and re-preparing them (6 % of the apply in a profile).
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let store = Store {
            conn,
            path: path.to_path_buf(),
            state,
            mode: Mode::Follow,
            rebuild_folds: REBUILD_FOLDS,
        };
        store.init_schema()?;
        Ok(store)
    }

    /// Opens a new database at `path` for a rebuild: a file nobody reads until
    /// [`Store::finish_rebuild`] completes it. Until then it has no secondary indexes (each is
    /// built once, at the end, instead of kept in every insert), and invocation rows are written
    /// when their folds leave memory rather than in every batch, so the file is complete only
    /// after `finish_rebuild`; a rebuild that stops before it is discarded, never resumed.
    pub fn open_for_rebuild(path: &Path, state: StateConfig) -> Result<Store> {
        if path.exists() {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a rebuild writes a new database",
                ),
            });
        }
        let mut store = Store::open(path, state)?;
        // Nobody reads the file before it is complete and a rebuild that stops is discarded, so
        // its batches need neither a WAL nor a sync: the rollback journal stays in memory (a
        // failed batch still rolls back) and `finish_rebuild` syncs the file once, then returns
        // it to WAL for the projector that follows it.
        store
            .conn
            .pragma_update(None, "journal_mode", "MEMORY")
            .sql("journal_mode")?;
        store
            .conn
            .pragma_update(None, "synchronous", "OFF")
            .sql("synchronous")?;
        let tx = store.conn.unchecked_transaction().sql("begin drop indexes")?;
        for name in schema_indexes().keys() {
            tx.execute_batch(&format!("DROP INDEX \"{name}\""))
                .sql("drop index")?;
        }
        tx.commit().sql("commit drop indexes")?;
        store.mode = Mode::Rebuild(apply::Invocations::default());
        Ok(store)
    }

    /// Completes a rebuild's database: writes the invocation folds still in memory, then builds
    /// the secondary indexes (logging each, as they take a while on a large ledger).
    pub fn finish_rebuild(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.mode, Mode::Follow) {
            Mode::Follow => {}
            Mode::Rebuild(mut folds) => {
                let tx = self.conn.transaction().sql("begin final invocations")?;
                folds.spill(&tx, 0)?;
                tx.commit().sql("commit final invocations")?;
            }
            Mode::Broken => {
                self.mode = Mode::Broken;
                return Err(Error::RebuildBroken);
            }
        }
        self.sync_indexes()?;
        std::fs::File::open(&self.path)
            .and_then(|file| file.sync_all())
            .map_err(|source| Error::Io {
                path: self.path.clone(),
                source,
            })?;
        self.conn
            .pragma_update(None, "journal_mode", "WAL")
            .sql("journal_mode")?;
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .sql("synchronous")
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
            mode: Mode::Follow,
            rebuild_folds: REBUILD_FOLDS,
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

    /// What `PRAGMA quick_check` finds wrong with the file, at most `max` lines; empty when it is
    /// sound. It reads every page, so it costs a full scan: `doctor` runs it, the services do not.
    pub fn integrity_problems(&self, max: u32) -> Result<Vec<String>> {
        let mut statement = self
            .conn
            .prepare(&format!("PRAGMA quick_check({})", max.max(1)))
            .sql("quick_check")?;
        let lines = statement
            .query_map([], |row| row.get::<_, String>(0))
            .sql("quick_check")?
            .collect::<rusqlite::Result<Vec<String>>>()
            .sql("quick_check")?;
        Ok(lines.into_iter().filter(|line| line != "ok").collect())
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
    /// [`Error::LedgerGap`] and nothing of the batch is kept. Returns the new position. Entries are
    /// decoded a little ahead on a second thread ([`toolledger_ledger::decode_ahead`]).
    pub fn apply_batch(&mut self, entries: &[RawEntry]) -> Result<u64> {
        self.apply_entries(entries, None)
    }

    /// [`Self::apply_batch`] of entries decoded beforehand ([`DecodedBatch::decode`], e.g. on
    /// another thread while this store applied the batch before).
    /// The batch is only read, so one whose transaction failed can be applied again.
    pub fn apply_decoded_batch(&mut self, batch: &DecodedBatch) -> Result<u64> {
        self.apply_entries(&batch.entries, Some(&batch.decoded))
    }

    fn apply_entries(&mut self, entries: &[RawEntry], decoded: Option<&[DecodedEntry]>) -> Result<u64> {
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
        let skipped = entries.partition_point(|entry| entry.seq <= position);
        let new = &entries[skipped..];
        for (entry, expected) in new.iter().zip(position + 1..) {
            if entry.seq != expected {
                return Err(Error::LedgerGap {
                    position: expected - 1,
                    next: entry.seq,
                });
            }
        }
        let mut leaf = None;
        let mut sessions = apply::Sessions::default();
        // A rebuild's folds come back to the store only when the batch commits.
        let (mut invocations, rebuilding) = match std::mem::replace(&mut self.mode, Mode::Broken) {
            Mode::Follow => {
                self.mode = Mode::Follow;
                (apply::Invocations::default(), false)
            }
            Mode::Rebuild(folds) => (folds, true),
            Mode::Broken => return Err(Error::RebuildBroken),
        };
        let mut apply = |entry: &RawEntry, decoded: &DecodedEntry| {
            leaf = Some(apply::apply_decoded(
                &tx,
                entry.seq,
                decoded,
                &state,
                &mut invocations,
                &mut sessions,
            )?);
            Ok::<_, Error>(())
        };
        match decoded {
            Some(decoded) => new
                .iter()
                .zip(&decoded[skipped..])
                .try_for_each(|(entry, decoded)| apply(entry, decoded))?,
            // Parsing and classifying entries needs no database: a second thread does it, a
            // bounded distance ahead, while this one writes.
            None => toolledger_ledger::decode_ahead(
                new,
                |entry| toolledger_ledger::decode_entry(&entry.bytes),
                |entry, decoded| apply(entry, decoded),
            )?,
        }
        if let Some(last) = new.last() {
            position = last.seq;
        }
        sessions.write(&tx)?;
        if rebuilding {
            if invocations.len() > self.rebuild_folds {
                invocations.spill(&tx, self.rebuild_folds / 2)?;
            }
        } else {
            // Each invocation the batch touched is written once, in the transaction of its position.
            invocations.write(&tx)?;
        }
        if let Some(leaf) = leaf {
            tx.execute(
                "UPDATE position SET seq = ?1, leaf_hash = ?2 WHERE id = 0",
                params![i64::try_from(position).unwrap_or(i64::MAX), leaf],
            )
            .sql("write position")?;
        }
        tx.commit().sql("commit batch")?;
        if rebuilding {
            self.mode = Mode::Rebuild(invocations);
        }
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

#[cfg(test)]
mod tests {
    use toolledger_schemas::generator::{GeneratorConfig, generate};

    use super::*;

    fn entries() -> Vec<RawEntry> {
        let generated = generate(&GeneratorConfig {
            seed: 77,
            sessions: 12,
            tenants: vec!["acme".to_owned(), "globex".to_owned()],
            extra_invocations: 3,
            plant_anomalies: true,
            ..GeneratorConfig::default()
        });
        generated
            .events
            .iter()
            .zip(1u64..)
            .map(|(event, seq)| RawEntry {
                seq,
                bytes: toolledger_wire::LedgerEntry::for_structured_event(
                    event,
                    chrono::DateTime::UNIX_EPOCH,
                )
                .and_then(|entry| entry.canonical_bytes())
                .unwrap_or_else(|e| panic!("entry {seq}: {e}")),
            })
            .collect()
    }

    #[test]
    fn a_rebuild_that_spills_its_folds_equals_the_followed_projection() {
        let entries = entries();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut followed = Store::open(&dir.path().join("follow.sqlite"), StateConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut rebuilt = Store::open_for_rebuild(&dir.path().join("rebuild.sqlite"), StateConfig::default())
            .unwrap_or_else(|e| panic!("{e}"));
        // Few folds held: invocations leave memory mid-rebuild and come back from their rows.
        rebuilt.rebuild_folds = 4;
        for batch in entries.chunks(7) {
            followed.apply_batch(batch).unwrap_or_else(|e| panic!("{e}"));
            rebuilt.apply_batch(batch).unwrap_or_else(|e| panic!("{e}"));
        }
        rebuilt.finish_rebuild().unwrap_or_else(|e| panic!("{e}"));
        let (followed, rebuilt) = (
            followed.table_contents().unwrap_or_else(|e| panic!("{e}")),
            rebuilt.table_contents().unwrap_or_else(|e| panic!("{e}")),
        );
        assert!(
            followed["invocations"].len() > 8,
            "the run spills: {} invocations",
            followed["invocations"].len()
        );
        assert_eq!(followed, rebuilt);
    }

    #[test]
    fn a_finished_rebuild_has_every_index_and_is_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("rebuild.sqlite");
        let mut store =
            Store::open_for_rebuild(&path, StateConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let indexes = |store: &Store| -> Vec<String> {
            let mut stmt = store
                .conn
                .prepare(
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name",
                )
                .unwrap_or_else(|e| panic!("{e}"));
            stmt.query_map([], |row| row.get(0))
                .unwrap_or_else(|e| panic!("{e}"))
                .map(|row| row.unwrap_or_else(|e| panic!("{e}")))
                .collect()
        };
        assert!(
            indexes(&store).is_empty(),
            "a rebuild writes without secondary indexes"
        );
        store
            .apply_batch(&entries()[..50])
            .unwrap_or_else(|e| panic!("{e}"));
        store.finish_rebuild().unwrap_or_else(|e| panic!("{e}"));
        let wanted: Vec<String> = schema_indexes().keys().map(|name| (*name).to_owned()).collect();
        assert_eq!(indexes(&store), wanted);
        let mode: String = store
            .conn
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode, "wal");
        assert!(
            Store::open_for_rebuild(&path, StateConfig::default()).is_err(),
            "a rebuild never reuses a file"
        );
    }
}
