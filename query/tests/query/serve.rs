//! The server's start-up rules: no tokens means no server, unless `insecure_local` on loopback.

use toolledger_core::telemetry::Telemetry;
use toolledger_query::{ApiOptions, Error, Tokens};

fn options(listen: &str, insecure_local: bool) -> ApiOptions {
    ApiOptions {
        listen: listen.parse().unwrap(),
        tokens: Tokens::default(),
        insecure_local,
        blob_store_url: None,
        access_log: None,
        ledger: None,
        partitions: Default::default(),
    }
}

#[tokio::test]
async fn no_tokens_refuses_to_serve_unless_insecure_local_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let refused = toolledger_query::serve(
        dir.path(),
        options("127.0.0.1:0", false),
        Telemetry::new(),
        async {},
    )
    .await;
    assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
    let public =
        toolledger_query::serve(dir.path(), options("0.0.0.0:0", true), Telemetry::new(), async {}).await;
    assert!(matches!(public, Err(Error::Config(_))), "{public:?}");
    let (addr, task) = toolledger_query::serve(
        dir.path(),
        options("127.0.0.1:0", true),
        Telemetry::new(),
        async {},
    )
    .await
    .unwrap();
    assert!(addr.ip().is_loopback());
    task.await.unwrap();
}

#[tokio::test]
async fn without_a_projection_the_api_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, task) = toolledger_query::serve(
        dir.path(),
        options("127.0.0.1:0", true),
        Telemetry::new(),
        async {
            let _ = stopped.await;
        },
    )
    .await
    .unwrap();
    let reply = tokio::task::spawn_blocking(move || toolledger_testkit::http_get(addr, "/v1/sessions"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.status, 503, "{}", reply.body);
    let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(body["error"]["code"], "no_projection");
    let _ = stop.send(());
    task.await.unwrap();
}

#[tokio::test]
async fn without_the_ledger_the_evidence_routes_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, task) = toolledger_query::serve(
        dir.path(),
        options("127.0.0.1:0", true),
        Telemetry::new(),
        async {
            let _ = stopped.await;
        },
    )
    .await
    .unwrap();
    for path in [
        "/v1/checkpoints/latest",
        "/v1/checkpoints/7",
        "/v1/proofs/consistency?from=1&to=2",
    ] {
        let reply = tokio::task::spawn_blocking(move || toolledger_testkit::http_get(addr, path))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(reply.status, 503, "{path}: {}", reply.body);
        let body: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(body["error"]["code"], "no_ledger", "{path}");
    }
    let _ = stop.send(());
    task.await.unwrap();
}
