//! Checking a reconstruction's offloaded payloads against their commitments. A missing, erased or
//! altered blob is reported on the payload, never an error of the whole request.

use serde_json::Value;
use toolledger_ledger::BlobStore;
use toolledger_wire::{PayloadRef, Tenant};

use crate::reconstruct::Reconstruction;

/// Fetches every payload of `reconstruction`, sets its status, and its content when `with_content`.
pub async fn check(blobs: &BlobStore, reconstruction: &mut Reconstruction, with_content: bool) {
    let tenant = match Tenant::parse(&reconstruction.tenant) {
        Ok(tenant) => tenant,
        Err(error) => {
            for payload in &mut reconstruction.payloads {
                payload.status = "unavailable".to_owned();
                payload.detail = Some(error.to_string());
            }
            return;
        }
    };
    for payload in &mut reconstruction.payloads {
        let reference = PayloadRef {
            path: payload.path.clone(),
            blob_id: payload.blob_id.clone(),
            commitment: payload.commitment.clone(),
            size: payload.size,
            content_type: payload.content_type.clone(),
        };
        match blobs.fetch_verified(&tenant, &reference).await {
            Ok(bytes) => {
                payload.status = "ok".to_owned();
                if with_content {
                    payload.content = Some(
                        serde_json::from_slice(&bytes)
                            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
                    );
                }
            }
            Err(toolledger_ledger::Error::PayloadMissing { .. }) => {
                payload.status = if payload.erasure_id.is_some() {
                    "erased"
                } else {
                    "missing"
                }
                .to_owned();
            }
            Err(error @ toolledger_ledger::Error::PayloadDigestMismatch { .. }) => {
                payload.status = "commitment_mismatch".to_owned();
                payload.detail = Some(error.to_string());
            }
            Err(error) => {
                payload.status = "unavailable".to_owned();
                payload.detail = Some(toolledger_ledger::with_causes(&error));
            }
        }
    }
}
