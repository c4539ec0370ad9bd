//! Generations: a running projector follows a rebuild to the new generation.

use std::time::Duration;

use toolledger_projector::{Generations, Options, Store};
use toolledger_schemas::generator::{self, GeneratorConfig};
use toolledger_testkit::NatsFixture;

use crate::ledger;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_projector_waits_for_the_ledger_and_switches_to_the_rebuilt_generation() {
    let nats = NatsFixture::start();
    let data = tempfile::tempdir().unwrap();
    let options = Options::new(data.path().to_path_buf());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut run = tokio::spawn({
        let client = nats.client().await;
        let options = options.clone();
        async move {
            toolledger_projector::run(client, &options, async {
                let _ = stopped.await;
            })
            .await
        }
    });
    // Started before ATL_LEDGER exists, it waits for it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!run.is_finished());
    let js = ledger::create_ledger(nats.client().await).await;
    let first = generator::generate(&GeneratorConfig {
        seed: 1,
        ..GeneratorConfig::default()
    });
    let last = ledger::append(&js, &first.events).await;
    ledger::wait_for_position(data.path(), last, Duration::from_secs(60), &mut run).await;
    let generations = Generations::new(data.path());
    let gen1 = generations.current().unwrap().unwrap();

    let rebuilt = toolledger_projector::rebuild(nats.client().await, &options, std::future::pending())
        .await
        .unwrap();
    assert_eq!(generations.current().unwrap().unwrap(), rebuilt.generation);

    // New entries land in the new generation: the running projector reopened it.
    let second = generator::generate(&GeneratorConfig {
        seed: 2,
        tenants: vec!["globex".to_owned()],
        ..GeneratorConfig::default()
    });
    let new_last = ledger::append(&js, &second.events).await;
    ledger::wait_for_position(data.path(), new_last, Duration::from_secs(60), &mut run).await;
    stop.send(()).unwrap();
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.generation, rebuilt.generation);
    assert_eq!(summary.position, new_last);
    // The old generation stays readable for readers that have not reopened yet (the projector
    // may have applied some new entries to it before its once-a-second check saw the switch).
    let old = Store::open_readonly(&gen1.database())
        .unwrap()
        .position()
        .unwrap();
    assert!(old >= last);
}
