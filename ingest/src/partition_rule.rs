//! The partition rule, recorded in the ledger itself (DESIGN §8): the writer of p0 of a ledger of
//! more than one partition appends a `toolledger.partitions.recorded` entry (tenant `_system`) unless
//! its identity index already holds it, so a verifier reads from the ledger where each tenant's
//! events are ([`toolledger_wire::partition`] is the rule; `docs/scaling.md`).
//!
//! ```text
//! p0's writer starts ─▶ partitions > 1? ─▶ `partitions-<count>` in the identity index? ─▶ done
//!                                              └─ no ─▶ append the record (checkpointed, indexed)
//! ```
//!
//! The count is fixed when the ledger is made (`init` refuses another), so one record stands for the
//! ledger's life. Ingest refuses the class from the inbox, whatever the tenant, so only its own
//! writer appends it.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use toolledger_schemas::EventClass;
use toolledger_schemas::model::PartitionsRecorded;
use toolledger_wire::Tenant;
use toolledger_wire::partition::Partitions;

use crate::quarantine::LEDGER_SOURCE;

/// The partition rule as the ledger records it (`toolledger.partitions.recorded`, tenant `_system`,
/// in p0): the count, the rule's name and every partition's names under `origin` (p0's, the ledger's
/// own). Its id is `partitions-<count>`, so the identity index keeps it to one entry per count.
pub fn record_event(partitions: Partitions, origin: &str, at: DateTime<Utc>) -> Value {
    let record_id = format!("partitions-{}", partitions.count());
    let time = at.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    let data = PartitionsRecorded {
        record_id: record_id.clone(),
        partitions: partitions.count(),
        rule: Partitions::RULE.to_owned(),
        layout: partitions.layout(origin),
        recorded_at: time.clone(),
        extra: Default::default(),
    };
    json!({
        "specversion": "1.0",
        "id": record_id,
        "source": LEDGER_SOURCE,
        "type": EventClass::PartitionsRecorded.as_str(),
        "subject": record_id,
        "time": time,
        "datacontenttype": "application/json",
        "tenant": Tenant::SYSTEM,
        "data": data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_names_every_partition_and_validates_as_its_class() {
        let partitions = Partitions::new(3).unwrap();
        let at = "2026-11-27T09:00:00Z".parse().unwrap();
        let event = record_event(partitions, "ledger.example", at);
        assert_eq!(event["id"], "partitions-3");
        assert_eq!(event["tenant"], "_system");
        let layout = event["data"]["layout"].as_array().unwrap();
        assert_eq!(layout.len(), 3);
        assert_eq!(layout[0]["stream"], "ATL_LEDGER");
        assert_eq!(layout[2]["origin"], "ledger.example/p2");
        assert_eq!(layout[2]["checkpoint_subject"], "atl.checkpoints.2");
        assert_eq!(event["data"]["rule"], Partitions::RULE);
        let report = toolledger_schemas::validate::validate_event(&event);
        assert!(report.is_ok(), "{report:?}");
    }
}
