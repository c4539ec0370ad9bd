//! Ledger partitions (DESIGN §8): each its own ledger stream, single writer (lease), Merkle tree,
//! tiles prefix and checkpoint origin. A tenant lives in exactly one partition.
//!
//! ```text
//! tenant ─▶ Partitions::of: `_`-reserved tenants (and anything not a tenant) ─▶ p0
//!                           any other tenant ─▶ FNV-1a 32 of its name, mod the count
//!
//!            p0 (exactly the single-ledger layout)      pK, K ≥ 1
//! stream     ATL_LEDGER                                  ATL_LEDGER_P<K>
//! subjects   atl.ledger.<tenant>.<class>                 atl.p<K>.ledger.<tenant>.<class>
//! checkpoint atl.checkpoints                             atl.checkpoints.<K>   (both on ATL_CHECKPOINTS)
//! origin     <origin>                                    <origin>/p<K>
//! tiles      <tiles>                                     <tiles>/p<K>
//! lease key  ledger                                      ledger-p<K>
//! ```
//!
//! The rule is a pure function of the tenant's name and the count, so anyone holding the count (the
//! configuration, `toolledger init --partitions`) knows where a tenant's events are. The count is
//! fixed when the ledger is made: a different count would move tenants.

use std::fmt;

use toolledger_schemas::EventClass;
use toolledger_schemas::model::PartitionLayout;

use crate::Tenant;

/// The most partitions a ledger may have.
pub const MAX_PARTITIONS: u16 = 64;

/// How many partitions a ledger has (1 to [`MAX_PARTITIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Partitions(u16);

impl Default for Partitions {
    fn default() -> Self {
        Self(1)
    }
}

impl Partitions {
    /// The rule's name as the ledger records it (`toolledger.partitions.recorded`): [`Partitions::of`].
    pub const RULE: &'static str = "fnv1a32-mod";

    /// A count, refused outside 1 to [`MAX_PARTITIONS`].
    pub fn new(count: u16) -> Result<Self, String> {
        if (1..=MAX_PARTITIONS).contains(&count) {
            Ok(Self(count))
        } else {
            Err(format!(
                "a ledger has 1 to {MAX_PARTITIONS} partitions, not {count}"
            ))
        }
    }

    /// The count.
    pub fn count(self) -> u16 {
        self.0
    }

    /// Every partition, p0 first.
    pub fn all(self) -> impl Iterator<Item = Partition> {
        (0..self.0).map(Partition)
    }

    /// Every partition's names under the ledger's `origin`, p0 first, as the partition rule's
    /// record (`toolledger.partitions.recorded`) lists them.
    pub fn layout(self, origin: &str) -> Vec<PartitionLayout> {
        self.all()
            .map(|partition| PartitionLayout {
                partition: partition.index(),
                stream: partition.stream(),
                checkpoint_subject: partition.checkpoint_subject(),
                origin: partition.origin(origin),
                extra: Default::default(),
            })
            .collect()
    }

    /// The partition of a tenant token (an inbound subject's, or an entry's `tenant`): p0 for the
    /// ledger's own reserved tenants and for tokens that are no tenant at all, else FNV-1a 32 of
    /// the name modulo the count.
    pub fn of(self, tenant: &str) -> Partition {
        if self.0 == 1 || tenant.starts_with('_') || Tenant::parse(tenant).is_err() {
            return Partition::ZERO;
        }
        Partition(u16::try_from(fnv1a32(tenant.as_bytes()) % u32::from(self.0)).unwrap_or(0))
    }
}

/// FNV-1a, 32 bits: small, stable and documented everywhere, so any verifier can recompute where a
/// tenant lives.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

/// One partition of the ledger: its index and the names of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition(u16);

impl Partition {
    /// The first partition: the single-ledger layout, and the home of `_system`.
    pub const ZERO: Self = Self(0);

    /// The partition with this index (not checked against a count).
    pub fn new(index: u16) -> Self {
        Self(index)
    }

    /// Its index.
    pub fn index(self) -> u16 {
        self.0
    }

    /// Its ledger stream: `ATL_LEDGER`, `ATL_LEDGER_P1`, …
    pub fn stream(self) -> String {
        match self.0 {
            0 => crate::streams::LEDGER.to_owned(),
            k => format!("{}_P{k}", crate::streams::LEDGER),
        }
    }

    /// The first tokens of its subjects: `atl.ledger`, `atl.p1.ledger`, …
    pub fn subject_prefix(self) -> String {
        match self.0 {
            0 => "atl.ledger".to_owned(),
            k => format!("atl.p{k}.ledger"),
        }
    }

    /// Its stream's subjects: `<prefix>.>`.
    pub fn subjects(self) -> String {
        format!("{}.>", self.subject_prefix())
    }

    /// Where one tenant's entries of a class go: `<prefix>.<tenant>.<class>`.
    pub fn ledger_subject(self, tenant: &Tenant, class: EventClass) -> String {
        format!("{}.{tenant}.{class}", self.subject_prefix())
    }

    /// Its checkpoints' subject on ATL_CHECKPOINTS: `atl.checkpoints`, `atl.checkpoints.1`, …
    pub fn checkpoint_subject(self) -> String {
        match self.0 {
            0 => crate::streams::CHECKPOINTS_SUBJECT.to_owned(),
            k => format!("{}.{k}", crate::streams::CHECKPOINTS_SUBJECT),
        }
    }

    /// Its checkpoint origin, from the ledger's: the same for p0, `<origin>/p<K>` after.
    pub fn origin(self, ledger_origin: &str) -> String {
        match self.0 {
            0 => ledger_origin.to_owned(),
            k => format!("{ledger_origin}/p{k}"),
        }
    }

    /// Its tiles location, from the ledger's: the same for p0, `<tiles>/p<K>` after.
    pub fn tiles(self, ledger_tiles: &str) -> String {
        match self.0 {
            0 => ledger_tiles.to_owned(),
            k => format!("{}/p{k}", ledger_tiles.trim_end_matches('/')),
        }
    }

    /// Its single-writer lease key in ATL_LEASES: `ledger`, `ledger-p1`, …
    pub fn lease_key(self) -> String {
        match self.0 {
            0 => "ledger".to_owned(),
            k => format!("ledger-p{k}"),
        }
    }

    /// A file name beside p0's (`identities.sqlite` ─▶ `identities-p1.sqlite`).
    pub fn file_name(self, p0_name: &str) -> String {
        match (self.0, p0_name.rsplit_once('.')) {
            (0, _) => p0_name.to_owned(),
            (k, Some((stem, extension))) => format!("{stem}-p{k}.{extension}"),
            (k, None) => format!("{p0_name}-p{k}"),
        }
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_partition_is_the_single_ledger_layout() {
        let p0 = Partition::ZERO;
        assert_eq!(p0.stream(), "ATL_LEDGER");
        assert_eq!(p0.subjects(), crate::streams::LEDGER_SUBJECTS);
        let tenant = Tenant::parse("acme").unwrap();
        assert_eq!(
            p0.ledger_subject(&tenant, EventClass::ToolDeclared),
            crate::subject::ledger_subject(&tenant, EventClass::ToolDeclared)
        );
        assert_eq!(p0.checkpoint_subject(), "atl.checkpoints");
        assert_eq!(p0.origin("toolledger/ATL_LEDGER"), "toolledger/ATL_LEDGER");
        assert_eq!(p0.tiles("/data/tiles"), "/data/tiles");
        assert_eq!(p0.lease_key(), "ledger");
        assert_eq!(p0.file_name("identities.sqlite"), "identities.sqlite");
        let one = Partitions::default();
        for tenant in ["acme", "globex", "_system", "bad token"] {
            assert_eq!(one.of(tenant), Partition::ZERO);
        }
    }

    #[test]
    fn other_partitions_have_names_of_their_own() {
        let p3 = Partition::new(3);
        assert_eq!(p3.stream(), "ATL_LEDGER_P3");
        assert_eq!(p3.subjects(), "atl.p3.ledger.>");
        let tenant = Tenant::parse("acme").unwrap();
        assert_eq!(
            p3.ledger_subject(&tenant, EventClass::ToolDeclared),
            "atl.p3.ledger.acme.tool.declared"
        );
        assert_eq!(p3.checkpoint_subject(), "atl.checkpoints.3");
        assert_eq!(p3.origin("example.com/ledger"), "example.com/ledger/p3");
        assert_eq!(p3.tiles("s3://bucket/tiles/"), "s3://bucket/tiles/p3");
        assert_eq!(p3.lease_key(), "ledger-p3");
        assert_eq!(p3.file_name("identities.sqlite"), "identities-p3.sqlite");
        assert_eq!(p3.to_string(), "p3");
    }

    #[test]
    fn the_rule_is_fnv1a_modulo_the_count_with_reserved_tenants_in_p0() {
        // FNV-1a 32 reference values.
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
        let four = Partitions::new(4).unwrap();
        assert_eq!(four.of("a"), Partition::new((0xe40c_292c_u32 % 4) as u16));
        for reserved in [Tenant::SYSTEM, Tenant::UNROUTABLE, "", "no.dots", "_x"] {
            assert_eq!(four.of(reserved), Partition::ZERO, "{reserved}");
        }
        // Every partition gets tenants.
        let mut seen = [false; 4];
        for i in 0..64 {
            seen[usize::from(four.of(&format!("tenant-{i}")).index())] = true;
        }
        assert_eq!(seen, [true; 4]);
        assert_eq!(four.all().map(Partition::index).collect::<Vec<_>>(), [0, 1, 2, 3]);
    }

    #[test]
    fn counts_outside_the_range_are_refused() {
        assert!(Partitions::new(0).is_err());
        assert!(Partitions::new(MAX_PARTITIONS + 1).is_err());
        assert_eq!(Partitions::new(MAX_PARTITIONS).unwrap().count(), MAX_PARTITIONS);
    }
}
