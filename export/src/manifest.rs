//! Per-table manifests: `<table>/_manifest/<first>-<last>.json` (20-digit, zero-padded sequences;
//! `<table>/_manifest_p<K>/…` for partition K ≥ 1 of a partitioned ledger, whose sequences are its own)
//! names a file boundary and the files it covers, and is written before any of those files. The
//! exporter's position is recovered from manifests alone: the newest one is redone on start (the
//! same rows, the same bytes), and export continues after its last sequence.

use serde::{Deserialize, Serialize};

use toolledger_wire::partition::Partition;

use crate::store::Archive;
use crate::tables::{SCHEMA_VERSION, Table};
use crate::{Error, Result};

/// One file a manifest covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Path relative to the table's folder (`tenant=acme/event_date=2026-05-08/part-….parquet`).
    pub path: String,
    /// Rows in the file.
    pub rows: u64,
}

/// A file boundary of one table: a sequence range of its source stream and the files for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The archive schema version the files use.
    pub schema_version: u32,
    /// The table.
    pub table: String,
    /// The stream whose sequences `first_seq..=last_seq` count (`ATL_LEDGER`, or `ATL_CHECKPOINTS`
    /// for the checkpoints table).
    pub stream: String,
    /// First sequence covered.
    pub first_seq: u64,
    /// Last sequence covered.
    pub last_seq: u64,
    /// Rows over all files.
    pub rows: u64,
    /// The files, in path order; none when the range has no rows for this table.
    pub files: Vec<ManifestFile>,
    /// The ledger partition whose sequences these are, for K ≥ 1 (absent for p0, so a single
    /// ledger's manifests keep their bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u16>,
}

impl Manifest {
    /// A manifest for `table` over `first..=last` of `stream`.
    pub fn new(table: Table, stream: &str, first: u64, last: u64, files: Vec<ManifestFile>) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            table: table.name().to_owned(),
            stream: stream.to_owned(),
            first_seq: first,
            last_seq: last,
            rows: files.iter().map(|f| f.rows).sum(),
            files,
            partition: None,
        }
    }

    /// This manifest as one of `partition`'s.
    #[must_use]
    pub fn of_partition(self, partition: Partition) -> Self {
        Self {
            partition: (partition != Partition::ZERO).then(|| partition.index()),
            ..self
        }
    }

    /// Its object path relative to the archive root.
    pub fn path(&self) -> String {
        let partition = Partition::new(self.partition.unwrap_or(0));
        format!(
            "{}/{}/{}",
            self.table,
            manifest_folder(partition),
            range_name(self.first_seq, self.last_seq, "json")
        )
    }

    /// Its bytes (deterministic: fixed field order, no whitespace).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|e| Error::Manifest {
            path: self.path(),
            reason: e.to_string(),
        })
    }
}

/// The folder of a partition's manifests in each table: `_manifest`, `_manifest_p<K>`.
pub fn manifest_folder(partition: Partition) -> String {
    partition_folder("_manifest", partition)
}

/// The archive folder `p0_name` of `partition`: `p0_name` itself for p0, `<p0_name>_p<K>` after
/// (manifests, tracker snapshots).
pub fn partition_folder(p0_name: &str, partition: Partition) -> String {
    match partition.index() {
        0 => p0_name.to_owned(),
        k => format!("{p0_name}_p{k}"),
    }
}

/// `<first>-<last>.<ext>` with 20-digit sequences, so names sort in sequence order.
pub fn range_name(first: u64, last: u64, ext: &str) -> String {
    format!("{first:020}-{last:020}.{ext}")
}

/// The data file name of a range: `part-<first>-<last>.parquet`.
pub fn part_name(first: u64, last: u64) -> String {
    format!("part-{}", range_name(first, last, "parquet"))
}

/// Parses `…/<first>-<last>.<ext>` or `…/part-<first>-<last>.parquet` into the range.
pub fn parse_range(path: &str) -> Option<(u64, u64)> {
    let name = path.rsplit('/').next()?;
    let name = name.strip_prefix("part-").unwrap_or(name);
    let (stem, _) = name.split_once('.')?;
    let (first, last) = stem.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// Every manifest of `table` of `partition`, in sequence order.
pub async fn list(archive: &Archive, table: Table, partition: Partition) -> Result<Vec<(u64, u64, String)>> {
    let mut out: Vec<(u64, u64, String)> = archive
        .list(&format!("{}/{}", table.name(), manifest_folder(partition)))
        .await?
        .into_iter()
        .filter(|p| p.ends_with(".json"))
        .filter_map(|p| parse_range(&p).map(|(a, b)| (a, b, p)))
        .collect();
    out.sort();
    Ok(out)
}

/// The newest manifest of `table` of `partition`, read and checked against its name.
pub async fn newest(archive: &Archive, table: Table, partition: Partition) -> Result<Option<Manifest>> {
    let Some((first, last, path)) = list(archive, table, partition).await?.pop() else {
        return Ok(None);
    };
    let bytes = archive.get(&path).await?.ok_or_else(|| Error::Manifest {
        path: path.clone(),
        reason: "listed but not readable".to_owned(),
    })?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| Error::Manifest {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if (manifest.first_seq, manifest.last_seq) != (first, last) || first > last || first == 0 {
        return Err(Error::Manifest {
            path,
            reason: format!(
                "covers {}..={}, its name says {first}..={last}",
                manifest.first_seq, manifest.last_seq
            ),
        });
    }
    Ok(Some(manifest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_names_sort_in_sequence_order_and_parse_back() {
        let names: Vec<String> = [(1, 9), (10, 99), (100, 100)]
            .iter()
            .map(|(a, b)| format!("events/tenant=acme/event_date=2026-05-08/{}", part_name(*a, *b)))
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        assert_eq!(parse_range(&names[1]), Some((10, 99)));
        assert_eq!(
            parse_range(&format!("events/_manifest/{}", range_name(7, 8, "json"))),
            Some((7, 8))
        );
        assert_eq!(parse_range("events/_manifest/notes.txt"), None);
    }
}
