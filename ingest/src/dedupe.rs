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

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

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

/// The identity index in SQLite.
pub struct IdentityIndex {
    conn: Connection,
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
        Ok(Self { conn })
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

    /// Records `entries` (key, digest, seq) and moves the position to `position`, in one transaction.
    /// An identity already recorded keeps its first entry.
    pub fn record(&mut self, entries: &[(IdentityKey, [u8; 32], u64)], position: u64) -> Result<()> {
        let tx = self.conn.transaction().map_err(sql("begin"))?;
        {
            let mut insert = tx
                .prepare_cached("INSERT OR IGNORE INTO identities (key, digest, seq) VALUES (?1, ?2, ?3)")
                .map_err(sql("insert"))?;
            for (key, digest, seq) in entries {
                insert
                    .execute(params![
                        key.0.as_slice(),
                        digest.as_slice(),
                        i64::try_from(*seq).unwrap_or(i64::MAX)
                    ])
                    .map_err(sql("insert"))?;
            }
            tx.execute(
                "UPDATE position SET seq = max(seq, ?1) WHERE id = 1",
                params![i64::try_from(position).unwrap_or(i64::MAX)],
            )
            .map_err(sql("position"))?;
        }
        tx.commit().map_err(sql("commit"))
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
    fn identity_fields_cannot_bleed_into_each_other() {
        assert_ne!(IdentityKey::new("a", "bc", "d"), IdentityKey::new("ab", "c", "d"));
    }
}
