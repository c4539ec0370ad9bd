//! The single-writer lease in the `ATL_LEASES` key-value bucket.
//!
//! One key per ledger partition (`ledger` for the only partition today). The value names the holder
//! and when the lease expires. A holder renews it every third of its duration with a
//! compare-and-set on the revision it last wrote; a contender takes it only once it has expired,
//! again by compare-and-set, so two contenders can never both win. The lease keeps a second ingest
//! from working in vain; correctness does not rest on clocks: every append is conditional on the
//! ledger's last sequence ([`crate::append`]), so a writer that lost its lease fails its next append.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv::{self, CreateErrorKind, UpdateErrorKind};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The bucket that holds the leases.
pub const LEASE_BUCKET: &str = "ATL_LEASES";

/// The key of ATL_LEASES that records the scrubber key's fingerprint every ingest of the ledger
/// must share.
pub const SCRUB_KEY_KEY: &str = "ingest-scrub-key";

/// Records `fingerprint` as the ledger's scrubber key when none is recorded yet, else checks it is
/// the one recorded: every ingest process of a ledger must scrub with the same key, or an event
/// carrying a secret that one appended and another is redelivered compares unequal and is
/// quarantined as `duplicate_conflict` (docs/scaling.md).
pub async fn agree_on_scrub_key(store: &kv::Store, fingerprint: &str) -> Result<()> {
    let recorded = match store.create(SCRUB_KEY_KEY, fingerprint.to_owned().into()).await {
        Ok(_) => return Ok(()),
        Err(error) if error.kind() == CreateErrorKind::AlreadyExists => store
            .get(SCRUB_KEY_KEY)
            .await
            .map_err(|e| lease_error(SCRUB_KEY_KEY, e))?
            .map(|value| String::from_utf8_lossy(&value).into_owned())
            .unwrap_or_default(),
        Err(error) => return Err(lease_error(SCRUB_KEY_KEY, error)),
    };
    if recorded == fingerprint {
        Ok(())
    } else {
        Err(Error::ScrubKeyDiffers {
            ours: fingerprint.to_owned(),
            recorded,
        })
    }
}

/// What a lease key holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Who holds it: host, pid and a random part, unique per process start.
    pub holder: String,
    /// Milliseconds since the Unix epoch at which it lapses unless renewed.
    pub expires_at_ms: u64,
}

/// A lease this process holds.
#[derive(Debug)]
pub struct Lease {
    store: kv::Store,
    key: String,
    holder: String,
    revision: u64,
    duration: Duration,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lease_error(key: &str, reason: impl std::fmt::Display) -> Error {
    Error::Lease {
        key: key.to_owned(),
        reason: reason.to_string(),
    }
}

impl Lease {
    /// Tries once to take the lease `key` for `holder`. `Ok(None)` means someone else holds it.
    pub async fn try_acquire(
        store: &kv::Store,
        key: &str,
        holder: &str,
        duration: Duration,
    ) -> Result<Option<Self>> {
        let record = |holder: &str| LeaseRecord {
            holder: holder.to_owned(),
            expires_at_ms: now_ms() + u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        };
        let value = serde_json::to_vec(&record(holder)).map_err(|e| lease_error(key, e))?;
        let lease = |revision| Self {
            store: store.clone(),
            key: key.to_owned(),
            holder: holder.to_owned(),
            revision,
            duration,
        };
        match store.create(key, value.clone().into()).await {
            Ok(revision) => return Ok(Some(lease(revision))),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(lease_error(key, e)),
        }
        let Some(entry) = store.entry(key).await.map_err(|e| lease_error(key, e))? else {
            return Ok(None);
        };
        let current: Option<LeaseRecord> = serde_json::from_slice(&entry.value).ok();
        let takeable = match &current {
            Some(current) => current.holder == holder || current.expires_at_ms <= now_ms(),
            // A deleted or unreadable record holds nothing.
            None => true,
        };
        if !takeable {
            return Ok(None);
        }
        match store.update(key, value.into(), entry.revision).await {
            Ok(revision) => Ok(Some(lease(revision))),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(lease_error(key, e)),
        }
    }

    /// Waits until the lease can be taken, retrying every `poll`.
    pub async fn acquire(
        store: &kv::Store,
        key: &str,
        holder: &str,
        duration: Duration,
        poll: Duration,
    ) -> Result<Self> {
        loop {
            if let Some(lease) = Self::try_acquire(store, key, holder, duration).await? {
                return Ok(lease);
            }
            tracing::info!(key, "ledger lease held by another ingest; waiting");
            tokio::time::sleep(poll).await;
        }
    }

    /// Extends the lease. Fails with [`Error::LeaseLost`] when someone else has taken it.
    pub async fn renew(&mut self) -> Result<()> {
        let record = LeaseRecord {
            holder: self.holder.clone(),
            expires_at_ms: now_ms() + u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
        };
        let value = serde_json::to_vec(&record).map_err(|e| lease_error(&self.key, e))?;
        match self.store.update(&self.key, value.into(), self.revision).await {
            Ok(revision) => {
                self.revision = revision;
                Ok(())
            }
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Err(Error::LeaseLost {
                key: self.key.clone(),
                holder: self.holder.clone(),
            }),
            Err(e) => Err(lease_error(&self.key, e)),
        }
    }

    /// How often [`Lease::renew`] should run.
    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// Gives the lease up so another ingest can start at once.
    pub async fn release(self) -> Result<()> {
        let record = LeaseRecord {
            holder: self.holder.clone(),
            expires_at_ms: 0,
        };
        let value = serde_json::to_vec(&record).map_err(|e| lease_error(&self.key, e))?;
        match self.store.update(&self.key, value.into(), self.revision).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(()),
            Err(e) => Err(lease_error(&self.key, e)),
        }
    }

    /// The holder name.
    pub fn holder(&self) -> &str {
        &self.holder
    }
}

/// The prefix of the ingest processes' membership keys in `ATL_LEASES`.
const MEMBER_PREFIX: &str = "members.";

/// What a membership key holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The process.
    pub holder: String,
    /// Milliseconds since the Unix epoch at which it lapses unless renewed.
    pub expires_at_ms: u64,
    /// Whether one of its writers has got as far as waiting for a lease (its connection, stream
    /// and partition-count checks passed): only such a process counts towards the shares, so one
    /// that cannot write never takes partitions away from one that can.
    #[serde(default)]
    pub ready: bool,
}

/// How the partitions' leases are shared among the ingest processes that run.
///
/// ```text
/// every third of the lease time: own record `members.<holder>` {holder, expires_at_ms, ready}
///   renewed ─▶ ready members counted (records not expired; long-expired ones deleted)
///   ─▶ share = ⌈partitions / members⌉
///   more leases held than the share? ─▶ the highest partition whose lease is held is asked to stop
///   (one at a time): it finishes its batch, signs, releases its lease and waits a lease time before
///   trying again
/// a partition's writer takes its lease only while this process holds fewer than its share
/// ```
///
/// Until the first count, or when counting has failed for a lease time, the share is every
/// partition, as one process alone has. The count only decides who tries; the leases decide who
/// writes.
#[derive(Debug)]
pub struct Membership {
    holder: String,
    key: String,
    ttl: Duration,
    count: usize,
    state: std::sync::Mutex<Shares>,
}

#[derive(Debug, Default)]
struct Shares {
    share: usize,
    /// Partitions reserved: being tried for, or leased.
    held: std::collections::BTreeSet<u16>,
    /// Partitions whose lease a session of this process holds.
    leased: std::collections::BTreeSet<u16>,
    yielding: Option<u16>,
    ready: bool,
    /// When the share was last counted.
    counted: Option<std::time::Instant>,
    stops: std::collections::HashMap<u16, tokio::sync::watch::Sender<bool>>,
}

impl Membership {
    /// A member named `holder` among writers of `count` partitions with leases of `ttl`.
    pub fn new(holder: &str, ttl: Duration, count: u16) -> Self {
        let key: String = holder
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Self {
            holder: holder.to_owned(),
            key: format!("{MEMBER_PREFIX}{key}"),
            ttl,
            count: usize::from(count),
            state: std::sync::Mutex::new(Shares {
                share: usize::from(count),
                ..Shares::default()
            }),
        }
    }

    fn shares(&self) -> std::sync::MutexGuard<'_, Shares> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How often [`Membership::refresh`] should run.
    pub fn refresh_every(&self) -> Duration {
        self.ttl / 3
    }

    /// Where partition `index`'s writer is told to stop and hand its partition on.
    pub fn register(&self, index: u16, stop: tokio::sync::watch::Sender<bool>) {
        self.shares().stops.insert(index, stop);
    }

    /// One of this process's writers got as far as waiting for a lease.
    pub fn ready(&self) {
        self.shares().ready = true;
    }

    /// Room for partition `index`: true (and counted as held) while this process holds fewer than
    /// its share. The share is every partition when it has not been counted for a lease time.
    pub fn try_reserve(&self, index: u16) -> bool {
        let mut shares = self.shares();
        if shares.counted.is_none_or(|at| at.elapsed() > self.ttl) {
            shares.share = self.count;
        }
        if shares.held.contains(&index) {
            return true;
        }
        if shares.held.len() >= shares.share {
            return false;
        }
        shares.held.insert(index)
    }

    /// Partition `index`'s lease is held by a session of this process.
    pub fn leased(&self, index: u16) {
        self.shares().leased.insert(index);
    }

    /// Partition `index` is no longer held (its session ended, or its lease was not free).
    pub fn release(&self, index: u16) {
        let mut shares = self.shares();
        shares.held.remove(&index);
        shares.leased.remove(&index);
        if shares.yielding == Some(index) {
            shares.yielding = None;
        }
    }

    /// Renews this process's record, counts the ready members, and asks one partition to stop when
    /// this process holds more leases than its share.
    pub async fn refresh(&self, store: &kv::Store) -> Result<()> {
        let record = MemberRecord {
            holder: self.holder.clone(),
            expires_at_ms: now_ms() + u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
            ready: self.shares().ready,
        };
        let value = serde_json::to_vec(&record).map_err(|e| lease_error(&self.key, e))?;
        store
            .put(&self.key, value.into())
            .await
            .map_err(|e| lease_error(&self.key, e))?;
        let mut keys = store.keys().await.map_err(|e| lease_error(MEMBER_PREFIX, e))?;
        let mut names = Vec::new();
        while let Some(key) = futures::StreamExt::next(&mut keys).await {
            names.push(key.map_err(|e| lease_error(MEMBER_PREFIX, e))?);
        }
        let mut live = 0usize;
        let forgotten = now_ms().saturating_sub(10 * u64::try_from(self.ttl.as_millis()).unwrap_or(0));
        for name in names.iter().filter(|name| name.starts_with(MEMBER_PREFIX)) {
            let Some(entry) = store.entry(name).await.map_err(|e| lease_error(name, e))? else {
                continue;
            };
            match serde_json::from_slice::<MemberRecord>(&entry.value) {
                Ok(record) if record.expires_at_ms > now_ms() => live += usize::from(record.ready),
                // A member gone for ten lease times is forgotten, unless it renewed meanwhile.
                Ok(record) if record.expires_at_ms < forgotten => {
                    let _ = store.purge_expect_revision(name, Some(entry.revision)).await;
                }
                _ => {}
            }
        }
        let mut shares = self.shares();
        shares.share = self.count.div_ceil(live.max(1));
        shares.counted = Some(std::time::Instant::now());
        if shares.leased.len() > shares.share
            && shares.yielding.is_none()
            && let Some(&index) = shares.leased.iter().next_back()
            && let Some(stop) = shares.stops.get(&index)
        {
            tracing::info!(
                partition = index,
                members = live,
                share = shares.share,
                "holding more partitions than this process's share; handing one on"
            );
            let _ = stop.send(true);
            shares.yielding = Some(index);
        }
        Ok(())
    }

    /// Removes this process's record (it stops).
    pub async fn leave(&self, store: &kv::Store) {
        let _ = store.delete(&self.key).await;
    }
}
