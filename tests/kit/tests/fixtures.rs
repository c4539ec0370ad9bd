//! The fixtures themselves against a real nats-server.

#![allow(clippy::unwrap_used)] // a panic is how a test reports failure

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use toolledger_testkit::NatsFixture;

async fn publish_and_confirm(js: &jetstream::Context, subject: &str, body: &'static str) {
    js.publish(subject.to_owned(), body.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn read_all(js: &jetstream::Context, stream_name: &str) -> Vec<String> {
    let stream = js.get_stream(stream_name).await.unwrap();
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await
        .unwrap();
    let count = stream.get_info().await.unwrap().state.messages as usize;
    let mut messages = consumer.messages().await.unwrap().take(count);
    let mut bodies = Vec::new();
    while let Some(message) = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .unwrap()
    {
        bodies.push(String::from_utf8(message.unwrap().payload.to_vec()).unwrap());
    }
    bodies
}

async fn file_stream(js: &jetstream::Context) {
    js.create_stream(stream::Config {
        name: "FIXTURE".to_owned(),
        subjects: vec!["fixture.>".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn jetstream_publish_and_read_back() {
    let nats = NatsFixture::start();
    let js = jetstream::new(nats.client().await);
    file_stream(&js).await;
    publish_and_confirm(&js, "fixture.a", "one").await;
    publish_and_confirm(&js, "fixture.b", "two").await;
    assert_eq!(read_all(&js, "FIXTURE").await, ["one", "two"]);
}

#[tokio::test]
async fn restart_keeps_port_store_and_messages() {
    let mut nats = NatsFixture::start();
    let port = nats.port();
    {
        let js = jetstream::new(nats.client().await);
        file_stream(&js).await;
        publish_and_confirm(&js, "fixture.kept", "survives a restart").await;
    }
    nats.restart();
    assert_eq!(nats.port(), port);
    let js = jetstream::new(nats.client().await);
    assert_eq!(read_all(&js, "FIXTURE").await, ["survives a restart"]);

    // A crash too: the acked message was synced to the store before the ack.
    nats.kill_and_restart();
    assert_eq!(nats.port(), port);
    let js = jetstream::new(nats.client().await);
    assert_eq!(read_all(&js, "FIXTURE").await, ["survives a restart"]);
}

#[test]
fn dropping_the_fixture_stops_the_server() {
    let nats = NatsFixture::start();
    let pid = nats.pid().unwrap();
    let store = nats.store_dir().to_path_buf();
    drop(nats);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "server {pid} still running"
    );
    assert!(!store.exists(), "store directory {} left behind", store.display());
}
