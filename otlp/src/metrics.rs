//! The receiver's metrics on `/metrics`, under `otlp_`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use toolledger_import::otlp::SpanBatch;

/// The label of the span counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `invocation`, `merged`, `ignored` or `rejected`.
    pub outcome: &'static str,
}

/// Counters the receiver updates.
#[derive(Clone, Debug, Default)]
pub struct OtlpMetrics {
    /// Spans received, by what became of them.
    pub spans: Family<OutcomeLabel, Counter>,
    /// Events published to ATL_INBOUND (and acked).
    pub events: Counter,
    /// Requests refused because the inbox refused or could not be reached.
    pub refused: Counter,
}

impl OtlpMetrics {
    /// The metrics, registered under `otlp_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let sub = registry.sub_registry_with_prefix("otlp");
        sub.register("spans", "Spans received, by outcome", metrics.spans.clone());
        sub.register(
            "events",
            "Events published to ATL_INBOUND",
            metrics.events.clone(),
        );
        sub.register(
            "refused",
            "Requests refused because the inbox refused or was unreachable",
            metrics.refused.clone(),
        );
        metrics
    }

    pub(crate) fn count(&self, batch: &SpanBatch, rejected: usize) {
        for (outcome, n) in [
            ("invocation", batch.invocations),
            ("merged", batch.merged),
            ("ignored", batch.ignored),
            ("rejected", rejected),
        ] {
            self.spans
                .get_or_create(&OutcomeLabel { outcome })
                .inc_by(n as u64);
        }
    }
}
