//! Ingest's metrics on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use toolledger_wire::QuarantineReason;
use toolledger_wire::partition::Partition;

/// The label of the quarantine counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The quarantine reason.
    pub reason: String,
}

/// The label of the per-partition metrics: `p0`, `p1`, … (`docs/scaling.md`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabel {
    /// The partition.
    pub partition: String,
}

/// The labels of the witness metrics: the witness's name and the log it cosigns.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WitnessLabel {
    /// The witness name (its verifier key's name).
    pub witness: String,
    /// The log's origin (p0's, a partition's `<origin>/p<K>`, the directory's `<origin>/directory`).
    pub log: String,
}

/// Counters and gauges the ingest loop updates.
#[derive(Clone)]
pub struct IngestMetrics {
    /// Entries appended to the ledger (events and receipts), by partition.
    pub appended: Family<PartitionLabel, Counter>,
    /// Inbound messages acked as duplicates of ledger entries.
    pub duplicates: Counter,
    /// Inbound messages quarantined, by reason.
    pub quarantined: Family<ReasonLabel, Counter>,
    /// Messages waiting in ATL_INBOUND for ingest.
    pub inbound_lag: Gauge,
    /// Each partition's last sequence as its writer knows it.
    pub last_seq: Family<PartitionLabel, Gauge>,
    /// Seconds from the first publish of a batch to its last ack.
    pub append_latency: Histogram,
    /// The size of the latest checkpoint each witness cosigned.
    pub witness_cosigned_size: Family<WitnessLabel, Gauge>,
    /// Requests to each witness that failed (unreachable, refused, or a bad cosignature).
    pub witness_failures: Family<WitnessLabel, Counter>,
}

impl IngestMetrics {
    /// The metrics, registered under `ingest_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            appended: Family::default(),
            duplicates: Counter::default(),
            quarantined: Family::default(),
            inbound_lag: Gauge::default(),
            last_seq: Family::default(),
            // 100 µs to ~3 s.
            append_latency: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            witness_cosigned_size: Family::default(),
            witness_failures: Family::default(),
        };
        let sub = registry.sub_registry_with_prefix("ingest");
        sub.register(
            "appended",
            "Entries appended to the ledger, by partition",
            metrics.appended.clone(),
        );
        sub.register(
            "duplicates",
            "Inbound messages acked as duplicates",
            metrics.duplicates.clone(),
        );
        sub.register(
            "quarantined",
            "Inbound messages quarantined, by reason",
            metrics.quarantined.clone(),
        );
        sub.register(
            "inbound_lag",
            "Messages waiting in ATL_INBOUND",
            metrics.inbound_lag.clone(),
        );
        sub.register(
            "ledger_last_seq",
            "Each partition's last ledger sequence, as this process's writer last knew it",
            metrics.last_seq.clone(),
        );
        sub.register(
            "append_latency_seconds",
            "Ledger append latency per batch",
            metrics.append_latency.clone(),
        );
        sub.register(
            "witness_cosigned_size",
            "Size of the latest checkpoint each witness cosigned",
            metrics.witness_cosigned_size.clone(),
        );
        sub.register(
            "witness_failures",
            "Failed requests to each witness",
            metrics.witness_failures.clone(),
        );
        metrics
    }

    /// `partition`'s appended-entries counter.
    pub fn appended(&self, partition: Partition) -> Counter {
        self.appended.get_or_create(&label(partition)).clone()
    }

    /// `partition`'s last-sequence gauge.
    pub fn last_seq(&self, partition: Partition) -> Gauge {
        self.last_seq.get_or_create(&label(partition)).clone()
    }

    /// Counts one quarantined message.
    pub fn quarantined(&self, reason: QuarantineReason) {
        self.quarantined
            .get_or_create(&ReasonLabel {
                reason: reason.as_str().to_owned(),
            })
            .inc();
    }
}

fn label(partition: Partition) -> PartitionLabel {
    PartitionLabel {
        partition: partition.to_string(),
    }
}
