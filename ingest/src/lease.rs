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
