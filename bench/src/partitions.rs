//! The `partitions` suite: ingest writing 1, 2 and 4 ledger partitions (`docs/scaling.md`) from the
//! same inbox, beside the single-writer relay, on one nats-server.

use toolledger_wire::partition::Partitions;
use toolledger_wire::streams::{ContractSettings, ensure_contract};

use crate::Options;
use crate::pipeline::{
    CpuClock, ingest_in_process, mean_json_bytes, prepare, publish_now, relay, stream_messages,
};
use crate::report::{Better, Figure, Section};
use crate::workload::{self, Server};

const SEED_PARTITIONS: u64 = 400_000_000;
/// The partition counts measured.
const COUNTS: [u16; 3] = [1, 2, 4];
/// Tenants enough that FNV-1a gives every one of four partitions a few.
const TENANTS: [&str; 12] = [
    "acme",
    "globex",
    "initech",
    "umbrella",
    "hooli",
    "stark",
    "wayne",
    "tyrell",
    "cyberdyne",
    "soylent",
    "wonka",
    "aperture",
];

/// Runs the suite.
pub async fn partitions(options: &Options) -> anyhow::Result<Section> {
    let count = options.scale.events;
    let events = workload::events_of(&TENANTS, count, SEED_PARTITIONS);
    let mean_bytes = mean_json_bytes(&events);
    let mut relayed = Vec::new();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); COUNTS.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); COUNTS.len()];
    let mut server_busy: Vec<Vec<f64>> = vec![Vec::new(); COUNTS.len()];
    let mut slowest: Vec<Vec<f64>> = vec![Vec::new(); COUNTS.len()];
    for run in 0..options.runs {
        for (i, partitions) in COUNTS.into_iter().map(Partitions::new).enumerate() {
            let partitions = partitions.map_err(anyhow::Error::msg)?;
            let server = Server::start(&options.nats_server, &options.work_dir)?;
            let js = server.jetstream().await?;
            ensure_contract(
                &js,
                &ContractSettings {
                    partitions,
                    ..Default::default()
                },
            )
            .await?;
            let outgoing = prepare(&events)?;
            if partitions.count() == 1 {
                // The relay's floor, on the same server and events as one partition.
                let sent = publish_now(&js, outgoing.iter().map(|(_, m)| m.clone()).collect()).await?;
                anyhow::ensure!(sent.failed == 0, "{} publishes failed", sent.failed);
                relayed.push(count as f64 / relay(&js, count).await?.as_secs_f64());
            }
            let again = outgoing.into_iter().map(|(_, m)| m.without_msg_id()).collect();
            let sent = publish_now(&js, again).await?;
            anyhow::ensure!(sent.failed == 0, "{} publishes failed", sent.failed);
            let clock = CpuClock::start(server.server.pid());
            let (elapsed, _) = ingest_in_process(&server, &js, &options.work_dir, partitions).await?;
            let secs = elapsed.as_secs_f64();
            rates[i].push(count as f64 / secs);
            cpu[i].push(clock.own_seconds() * 1e6 / count as f64);
            server_busy[i].push(100.0 * clock.server_seconds() / secs);
            let mut least = f64::INFINITY;
            for partition in partitions.all() {
                let entries = stream_messages(&js, &partition.stream()).await?;
                least = least.min(entries as f64 / secs);
            }
            slowest[i].push(least);
            eprintln!(
                "bench: partitions run {}/{}: {} partition(s): {:.0} events/s",
                run + 1,
                options.runs,
                partitions.count(),
                rates[i][run]
            );
        }
    }
    let mut section = Section::new(
        "partitions",
        "Ingest over 1, 2 and 4 ledger partitions",
        format!(
            "{count} generated events per run of twelve tenants (mean {mean_bytes:.0} bytes of JSON per \
             event), binary-mode CloudEvents, spread over the partitions by the ledger's rule (FNV-1a of \
             the tenant, `docs/scaling.md`). For each partition count a fresh nats-server gets the \
             contract of `toolledger init --partitions N` and the events in ATL_INBOUND (untimed); then \
             the real ingest service (`session::run` in this process, default settings, one writer per \
             partition: its own lease, lanes, tree, checkpoints and identity index) is timed from a \
             full ATL_INBOUND to an empty one. With one partition the pass-through relay of the `ingest` \
             suite (one single writer, no processing) runs first on the same server and events, as the \
             floor one writer could reach. CPU figures are this process's and the nats-server's user + \
             system time over the timed phase. A partition's rate is its entries over the whole \
             phase, so `slowest` is the partition with the fewest tenants' events, not a slower writer. \
             The machine has {cores} logical CPUs: beyond that, partitions share cores instead of \
             adding them.",
            cores = std::thread::available_parallelism().map_or(0, usize::from),
        ),
    );
    let relay = section.figure(Figure::new(
        "relay.rate",
        "pass-through relay, one writer",
        "events/s",
        Better::Higher,
        relayed,
    ));
    let mut figures = Vec::new();
    for (i, n) in COUNTS.iter().enumerate() {
        figures.push(section.figure(Figure::new(
            &format!("p{n}.rate"),
            &format!("ingest, {n} partition(s), all together"),
            "events/s",
            Better::Higher,
            std::mem::take(&mut rates[i]),
        )));
        section.figure(Figure::new(
            &format!("p{n}.slowest_partition_rate"),
            &format!("ingest, {n} partition(s), the partition with the least"),
            "events/s",
            Better::Higher,
            std::mem::take(&mut slowest[i]),
        ));
        section.figure(Figure::new(
            &format!("p{n}.cpu_per_event"),
            &format!("ingest CPU per event, {n} partition(s)"),
            "µs/event",
            Better::Lower,
            std::mem::take(&mut cpu[i]),
        ));
        section.figure(Figure::new(
            &format!("p{n}.server_cpu_busy"),
            &format!("nats-server CPU, {n} partition(s) (100 % = one core)"),
            "%",
            Better::Lower,
            std::mem::take(&mut server_busy[i]),
        ));
    }
    for (figure, n) in figures.iter().zip(COUNTS).skip(1) {
        section.compare(&format!("p{n}_vs_p1"), figure, &figures[0]);
    }
    for (figure, n) in figures.iter().zip(COUNTS) {
        section.compare(&format!("p{n}_vs_relay"), figure, &relay);
    }
    Ok(section)
}
