//! Duplicate detection for all time: the identity index.
//!
//! An event's identity is `(tenant, source, id)`; its content is the digest of the scrubbed event
//! before payloads are offloaded ([`toolledger_wire::LedgerEntry::content_digest`]). The same
//! identity again with the same content is a duplicate (acked, counted, not appended); with other
//! content it is a `duplicate_conflict`. JetStream's own dedupe window covers minutes; this index
//! covers the whole ledger.
//!
//! The index is ingest's own SQLite file, a projection of the ledger like any other: each entry's
//! identity and recorded `content_digest` are stored with the ledger position in one transaction,
//! and on start the index catches up from its position to the ledger's tail, so a crash between an
//! append and the index update loses nothing. Deleting the file rebuilds it from the ledger.
//!
//! Commits are grouped: batches are recorded into one open transaction, committed every
//! [`COMMIT_ROWS`] identities or [`COMMIT_AFTER`] (checked on each batch and, through
//! [`IdentityIndex::flush_if_due`], on the session's idle tick), on [`IdentityIndex::flush`] and when
//! the index is dropped. Lookups use the same connection, so they see what is recorded but not yet committed.
//! Identity keys are hashes, so each insert lands on a random page of the B-tree: a commit per batch
//! wrote nearly every page a batch touched to the WAL again (the profile put ~11 % of ingest's CPU
//! there); a group commit writes a page once however many batches touched it. A crash loses at most
//! the uncommitted group, position included, which the catch-up on start reads again from the ledger.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rusqlite::types::Value;
use rusqlite::{Connection, params};
use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The identity of an event, hashed: `SHA-256` over the length-prefixed tenant, source and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdentityKey(pub [u8; 32]);

impl IdentityKey {
    /// The key of `(tenant, source, id)`.
    pub fn new(tenant: &str, source: &str, id: &str) -> Self {
        let mut hasher = Sha256::new();
        for field in [tenant, source, id] {
            hasher.update((field.len() as u64).to_be_bytes());
            hasher.update(field.as_bytes());
        }
        Self(hasher.finalize().into())
    }
}

/// What the index knows about an identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The content digest first appended under this identity.
    pub digest: [u8; 32],
    /// The ledger sequence of that entry.
    pub seq: u64,
}

/// Identities recorded in one transaction before it is committed.
pub const COMMIT_ROWS: usize = 8192;
/// The longest a recorded identity waits for its commit while batches keep coming.
pub const COMMIT_AFTER: Duration = Duration::from_secs(1);

/// The identity index in SQLite.
pub struct IdentityIndex {
    conn: Connection,
    /// When the open transaction began, and how many identities it holds; `None` when none is open.
    open: Option<(Instant, usize)>,
}

fn sql(context: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| Error::index(context, e)
}

impl IdentityIndex {
    /// Opens (creating if needed) the index at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::index(format!("creating {}", dir.display()), e))?;
        }
        let conn = Connection::open(path).map_err(sql("open"))?;
        // `rarray(?)`: a whole batch's keys bound as one parameter, looked up in one query.
        rusqlite::vtab::array::load_module(&conn).map_err(sql("array module"))?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             -- A group of random-key inserts stays in memory until its commit (16 MiB).
             PRAGMA cache_size = -16384;
             CREATE TABLE IF NOT EXISTS identities (
                 key BLOB PRIMARY KEY,   -- IdentityKey
                 digest BLOB NOT NULL,   -- content digest of the first entry
                 seq INTEGER NOT NULL    -- its ledger sequence
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS position (
                 id INTEGER PRIMARY KEY CHECK (id = 1),
                 seq INTEGER NOT NULL    -- every ledger entry up to here is indexed
             );
             INSERT OR IGNORE INTO position (id, seq) VALUES (1, 0);",
        )
        .map_err(sql("schema"))?;
        Ok(Self { conn, open: None })
    }

    /// The last ledger sequence the index covers.
    pub fn position(&self) -> Result<u64> {
        let seq: i64 = self
            .conn
            .query_row("SELECT seq FROM position WHERE id = 1", [], |r| r.get(0))
            .map_err(sql("position"))?;
        Ok(u64::try_from(seq).unwrap_or(0))
    }

    /// What is recorded for each of `keys` that is recorded at all, in one query.
    pub fn lookup_many(&self, keys: &[IdentityKey]) -> Result<HashMap<IdentityKey, Recorded>> {
        let mut found = HashMap::new();
        if keys.is_empty() {
            return Ok(found);
        }
        let values: Vec<Value> = keys.iter().map(|key| Value::Blob(key.0.to_vec())).collect();
        let mut query = self
            .conn
            .prepare_cached("SELECT key, digest, seq FROM identities WHERE key IN rarray(?1)")
            .map_err(sql("lookup"))?;
        let mut rows = query.query(params![Rc::new(values)]).map_err(sql("lookup"))?;
        while let Some(row) = rows.next().map_err(sql("lookup"))? {
            let key: Vec<u8> = row.get(0).map_err(sql("lookup"))?;
            let digest: Vec<u8> = row.get(1).map_err(sql("lookup"))?;
            let seq: i64 = row.get(2).map_err(sql("lookup"))?;
            let key = <[u8; 32]>::try_from(key.as_slice())
                .map_err(|e| Error::index("reading a stored key (not 32 bytes)", e))?;
            let digest = <[u8; 32]>::try_from(digest.as_slice())
                .map_err(|e| Error::index("reading a stored digest (not 32 bytes)", e))?;
            found.insert(
                IdentityKey(key),
                Recorded {
                    digest,
                    seq: u64::try_from(seq).unwrap_or(0),
                },
            );
        }
        Ok(found)
    }

    /// Records `entries` (key, digest, seq) and moves the position to `position`, together: in the
    /// open group transaction, committed once it is large or old enough. An identity already recorded
    /// keeps its first entry.
    pub fn record(&mut self, entries: &[(IdentityKey, [u8; 32], u64)], position: u64) -> Result<()> {
        let (since, rows) = match self.open {
            Some(open) => open,
            None => {
                if !self.conn.is_autocommit() {
                    // A transaction a failed COMMIT or ROLLBACK left open: nothing of it is promised.
                    self.conn.execute_batch("ROLLBACK").map_err(sql("rollback"))?;
                }
                self.conn.execute_batch("BEGIN").map_err(sql("begin"))?;
                (Instant::now(), 0)
            }
        };
        // Inserted in key order (neighbours in a batch share B-tree pages); an identity twice in one
        // call keeps its first entry, so equal keys stay in sequence order.
        let mut sorted: Vec<_> = entries.iter().collect();
        sorted.sort_unstable_by_key(|(key, _, seq)| (key.0, *seq));
        let written = (|| {
            let mut insert = self
                .conn
                .prepare_cached("INSERT OR IGNORE INTO identities (key, digest, seq) VALUES (?1, ?2, ?3)")
                .map_err(sql("insert"))?;
            for (key, digest, seq) in sorted {
                insert
                    .execute(params![
                        key.0.as_slice(),
                        digest.as_slice(),
                        i64::try_from(*seq).unwrap_or(i64::MAX)
                    ])
                    .map_err(sql("insert"))?;
            }
            self.conn
                .prepare_cached("UPDATE position SET seq = max(seq, ?1) WHERE id = 1")
                .map_err(sql("position"))?
                .execute(params![i64::try_from(position).unwrap_or(i64::MAX)])
                .map_err(sql("position"))?;
            Ok(())
        })();
        if let Err(error) = written {
            // Nothing half-recorded stays behind: the whole group goes, and the catch-up redoes it.
            self.open = None;
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(error);
        }
        self.open = Some((since, rows + entries.len()));
        if rows + entries.len() >= COMMIT_ROWS || since.elapsed() >= COMMIT_AFTER {
            self.flush()?;
        }
        Ok(())
    }

    /// Commits the open group once it is older than [`COMMIT_AFTER`], so an idle ingest does not hold
    /// the write transaction.
    pub fn flush_if_due(&mut self) -> Result<()> {
        match self.open {
            Some((since, _)) if since.elapsed() >= COMMIT_AFTER => self.flush(),
            _ => Ok(()),
        }
    }

    /// Commits what is recorded; nothing to do when no group is open.
    pub fn flush(&mut self) -> Result<()> {
        if self.open.take().is_some()
            && let Err(error) = self.conn.execute_batch("COMMIT")
        {
            // A failed COMMIT can leave the transaction open; end it so the next group can begin.
            // What it held is redone by the catch-up after the session that sees this error ends.
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(sql("commit")(error));
        }
        Ok(())
    }

    /// How many identities are recorded.
    pub fn len(&self) -> Result<u64> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM identities", [], |r| r.get(0))
            .map_err(sql("count"))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Whether no identity is recorded.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

impl Drop for IdentityIndex {
    fn drop(&mut self) {
        if let Err(error) = self.flush() {
            tracing::warn!(%error, "identity index: the last group was not committed; the catch-up on start redoes it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_entry_wins_and_position_moves_with_the_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = IdentityIndex::open(&dir.path().join("ids.sqlite")).unwrap();
        let key = IdentityKey::new("acme", "src", "1");
        assert_eq!(index.lookup_many(&[key]).unwrap().get(&key), None);
        index.record(&[(key, [1; 32], 5)], 5).unwrap();
        index.record(&[(key, [2; 32], 9)], 9).unwrap();
        assert_eq!(
            index.lookup_many(&[key]).unwrap().get(&key),
            Some(&Recorded {
                digest: [1; 32],
                seq: 5
            })
        );
        assert_eq!(index.position().unwrap(), 9);
        let other = IdentityKey::new("acme", "src", "2");
        let many = index.lookup_many(&[other, key, key]).unwrap();
        assert_eq!(many.len(), 1, "only recorded keys come back, each once");
        assert_eq!(many[&key].digest, [1; 32]);
        drop(index);
        let index = IdentityIndex::open(&dir.path().join("ids.sqlite")).unwrap();
        assert_eq!(index.position().unwrap(), 9, "position survives reopening");
        assert_eq!(index.len().unwrap(), 1);
    }

    #[test]
    fn a_group_is_seen_by_its_own_lookups_at_once_and_committed_when_flushed_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ids.sqlite");
        let mut index = IdentityIndex::open(&path).unwrap();
        let key = IdentityKey::new("acme", "src", "1");
        index.record(&[(key, [1; 32], 1)], 1).unwrap();
        assert_eq!(
            index.lookup_many(&[key]).unwrap()[&key].seq,
            1,
            "visible before its commit"
        );
        let other = Connection::open(&path).unwrap();
        let committed = || -> i64 {
            other
                .query_row("SELECT count(*) FROM identities", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(committed(), 0, "one small batch is not committed on its own");
        index.flush().unwrap();
        assert_eq!(committed(), 1);
        let second = IdentityKey::new("acme", "src", "2");
        index.record(&[(second, [2; 32], 2)], 2).unwrap();
        drop(index);
        assert_eq!(committed(), 2, "dropping the index commits its open group");
        // A large group commits by itself.
        let mut index = IdentityIndex::open(&path).unwrap();
        let many: Vec<_> = (0..COMMIT_ROWS as u64)
            .map(|i| (IdentityKey::new("acme", "bulk", &i.to_string()), [3; 32], 3 + i))
            .collect();
        index.record(&many, 2 + COMMIT_ROWS as u64).unwrap();
        assert_eq!(committed(), 2 + COMMIT_ROWS as i64);
    }

    #[test]
    fn identity_fields_cannot_bleed_into_each_other() {
        assert_ne!(IdentityKey::new("a", "bc", "d"), IdentityKey::new("ab", "c", "d"));
    }
}
