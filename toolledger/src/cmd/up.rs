//! `toolledger up`: everything on one machine.
//!
//! ```text
//! start nats-server (unless nats.url is set) on the shipped accounts and permissions, an identity
//!   per service ─▶ connect as admin, check JetStream ─▶ serve /metrics, /healthz
//!   ─▶ create or verify the streams of the contract ─▶ run ingest, the projector, the /v1 API, and
//!      the OTLP receiver when `[otlp]` has write tokens
//!   ─▶ --demo: publish a generated session, wait for ingest and projection, print one reconstructed
//!      invocation and a verify of the ledger against its signed checkpoints
//!   ─▶ run until Ctrl-C / SIGTERM ─▶ stop the services, then the server
//! ```
//!
//! With no `[api] tokens` configured, `up` trusts one local admin token, generated on first run into
//! `<data_dir>/api-token` (mode 0600) and printed by path, never by value.
//!
//! The local nats-server is `nats.server_bin`: a path, or a name looked up on `PATH` and then in the
//! checkout this binary was built in (`.tools/nats/bin/`, where `scripts/setup` installs the pinned
//! server), so `target/release/toolledger up` works after `scripts/demo` with nothing configured.

use std::future::Future;
use std::net::SocketAddr;
use toolledger_core::telemetry::ErrorChain;

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_core::nats_server::{NatsServer, NatsServerSpec};
use toolledger_core::telemetry::{self, Telemetry};
use toolledger_ingest::metrics::IngestMetrics;
use toolledger_ingest::session::{self, IngestSettings};
use toolledger_wire::Tenant;
use toolledger_wire::partition::{Partition, Partitions};
use toolledger_wire::streams::{ContractSettings, Ensured, INBOUND, check_partition_count, ensure_contract};

mod identities;

/// Flags of `toolledger up`.
#[derive(clap::Args)]
pub struct Args {
    /// Say what runs and how to reach it, for a first look at the system.
    #[arg(long)]
    demo: bool,
}

/// Runs until `shutdown` completes.
pub async fn run(config: Config, args: Args, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let telemetry = Telemetry::new();
    let mut local_server = None;
    let urls = match &config.nats.url {
        Some(url) => Urls::shared(url),
        None => {
            let (server, urls) = start_local_server(&config, args.demo).await?;
            local_server = Some(server);
            urls
        }
    };
    let url = urls.admin.clone();

    let health = telemetry.health().clone();
    let events_health = health.clone();
    let shown = toolledger_wire::connect::redacted(&url);
    let (addr, options) = toolledger_wire::connect::options(&url, "toolledger-up")?;
    let client = options
        .event_callback(move |event| {
            let health = events_health.clone();
            async move {
                match event {
                    async_nats::Event::Connected => health.ok("nats", "connected"),
                    async_nats::Event::Disconnected => health.failing("nats", "disconnected"),
                    other => tracing::info!(event = %other, "nats connection event"),
                }
            }
        })
        .connect(addr)
        .await
        .with_context(|| {
            format!(
                "connecting to NATS at {}",
                toolledger_wire::connect::redacted(&url)
            )
        })?;
    let jetstream = async_nats::jetstream::new(client.clone());
    let account = jetstream
        .query_account()
        .await
        .with_context(|| format!("JetStream is not available at {shown}"))?;
    health.ok("nats", "connected");
    say(&format!(
        "connected to {shown}: JetStream ready, {} streams",
        account.streams
    ));

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (metrics_addr, metrics_task) =
        telemetry::serve(config.telemetry.metrics_listen, telemetry.clone(), async {
            let _ = stop_rx.await;
        })
        .await?;
    say(&format!(
        "metrics at {}, health at {}",
        url_of(metrics_addr, "/metrics"),
        url_of(metrics_addr, "/healthz")
    ));
    let partitions = Partitions::new(config.ledger.partitions).map_err(anyhow::Error::msg)?;
    check_partition_count(&jetstream, partitions).await?;
    let contract = ContractSettings {
        tenants: urls.tenants.clone(),
        partitions,
        ..ContractSettings::default()
    };
    for part in ensure_contract(&jetstream, &contract).await? {
        let done = match &part.outcome {
            Ensured::Created => "created".to_owned(),
            Ensured::Verified => "verified".to_owned(),
            Ensured::Upgraded(fields) => format!("verified (turned on {fields})"),
            Ensured::Lacking(why) => format!("verified (lacks {why})"),
        };
        say(&format!("{done} {} {}", part.kind, part.name));
    }

    let key_file = config.checkpoint_key_file();
    let keys = key_file.parent().unwrap_or(&config.data_dir).to_path_buf();
    let (signer, created) = super::init::ensure_signing_key(&keys, &config.ledger.origin)?;
    super::init::write_verifier_key(&keys, &signer)?;
    say(&format!(
        "{} checkpoint signing key {} (verifier {})",
        if created { "created" } else { "using" },
        key_file.display(),
        signer.verifier()
    ));

    let ingest_settings = IngestSettings::from_config(&config)?;
    let ingest_metrics = telemetry.register(IngestMetrics::register);
    let (ingest_stop, ingest_stopped) = tokio::sync::oneshot::channel::<()>();
    let ingest = tokio::spawn(session::run(
        session::Connector {
            url: urls.ingest.clone(),
            name: "toolledger-up-ingest".to_owned(),
        },
        ingest_settings,
        ingest_metrics,
        health.clone(),
        async {
            let _ = ingest_stopped.await;
        },
    ));
    say(&match partitions.count() {
        1 => "ingest running: ATL_INBOUND ─▶ ATL_LEDGER".to_owned(),
        count => format!(
            "ingest running: ATL_INBOUND ─▶ {count} partitions (ATL_LEDGER, ATL_LEDGER_P1, …) and ATL_DIRECTORY"
        ),
    });

    let (projector_stop, projector_stopped) = tokio::sync::oneshot::channel::<()>();
    let projector_options =
        toolledger_projector::Options::new(config.data_dir.clone()).with_telemetry(telemetry.clone());
    let projector_client =
        toolledger_wire::connect::connect(&urls.projector, "toolledger-up-projector").await?;
    let projector = tokio::spawn({
        let client = projector_client;
        let health = health.clone();
        async move {
            let every: Vec<_> = partitions.all().collect();
            let result = toolledger_projector::run_partitions(client, &projector_options, &every, async {
                let _ = projector_stopped.await;
            })
            .await;
            // Said at once, not only at shutdown: the board and the log show a projector that ended.
            if let Err(error) = &result {
                tracing::error!(error = %ErrorChain(error), "the projector ended; restart `toolledger up`");
                health.failing(
                    toolledger_projector::heartbeat::COMPONENT,
                    format!("ended: {}", ErrorChain(error)),
                );
            }
            result
        }
    });
    say(&match partitions.count() {
        1 => format!(
            "projector running: ATL_LEDGER ─▶ {}",
            config.data_dir.join("projections").display()
        ),
        count => format!(
            "projector running: {count} partitions, each ─▶ {}/projections[-p<K>]",
            config.data_dir.display()
        ),
    });

    let (retention_stop, retention_stopped) = tokio::sync::oneshot::channel::<()>();
    let retention_client =
        toolledger_wire::connect::connect(&urls.retention, "toolledger-up-retention").await?;
    let retention = tokio::spawn(toolledger_ledger::erasure::retention_loop(
        async_nats::jetstream::new(retention_client),
        partitions,
        toolledger_ledger::BlobStore::open_configured(&config, None)?,
        config.retention.clone(),
        async {
            let _ = retention_stopped.await;
        },
    ));
    if config.retention.interval_secs > 0 {
        say(&format!(
            "retention running every {} s ([retention] in the configuration)",
            config.retention.interval_secs
        ));
    }

    let (api_stop, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let query_client = toolledger_wire::connect::connect(&urls.query, "toolledger-up-query").await?;
    let (api_addr, api_task) = start_api(
        &config,
        telemetry.clone(),
        async_nats::jetstream::new(query_client),
        async {
            let _ = api_stopped.await;
        },
    )
    .await?;

    let (otlp_stop, otlp_stopped) = tokio::sync::oneshot::channel::<()>();
    let otlp = if config.otlp.tokens.is_empty() {
        drop(otlp_stopped);
        say("otlp receiver off: no write tokens ([[otlp.tokens]], docs/otlp.md)");
        None
    } else {
        let metrics = telemetry.register(toolledger_otlp::OtlpMetrics::register);
        let receiver = std::sync::Arc::new(toolledger_otlp::Receiver::new(
            &urls.with_producers(&config),
            &urls.shared_producer,
            metrics,
        )?);
        let running = toolledger_otlp::start(&config.otlp, receiver, async {
            let _ = otlp_stopped.await;
        })
        .await?;
        say(&format!(
            "otlp receiver at http://{}/v1/traces (http) and http://{} (grpc)",
            running.http_addr, running.grpc_addr
        ));
        Some(running.task)
    };

    if args.demo {
        say(&format!("data directory: {}", config.data_dir.display()));
        let demo_tenant = Tenant::parse(DEMO_TENANT)?;
        // The demo's events are in its tenant's partition: its stream, projection and log.
        let home = partitions.of(DEMO_TENANT);
        let producer =
            toolledger_wire::connect::connect(urls.producer(&demo_tenant), "toolledger-up-demo").await?;
        publish_demo_session(&async_nats::jetstream::new(producer)).await?;
        let ledger = wait_for_ingest(&jetstream, home).await?;
        say(&format!(
            "demo: ingest drained ATL_INBOUND; {} holds {ledger} entries",
            match partitions.count() {
                1 => "the ledger".to_owned(),
                _ => home.stream(),
            }
        ));
        let states = wait_for_projection(&config.data_dir, home, ledger).await?;
        say(&format!(
            "demo: projected through seq {ledger}; invocations by state: {states}"
        ));
        show_demo_invocation(&config, home, api_addr).await?;
        verify_demo_ledger(&config, &jetstream, home, ledger).await?;
    }
    say("running; Ctrl-C or SIGTERM stops");

    shutdown.await;
    say("stopping");
    // The receiver first: what it accepted is in ATL_INBOUND before ingest stops.
    let _ = otlp_stop.send(());
    if let Some(task) = otlp {
        match tokio::time::timeout(std::time::Duration::from_secs(30), task).await {
            Ok(_) => say("otlp receiver stopped"),
            Err(_) => tracing::error!("the otlp receiver did not stop within 30 s"),
        }
    }
    // The API first: the reads it recorded are published to ATL_INBOUND before ingest stops.
    let _ = api_stop.send(());
    match tokio::time::timeout(std::time::Duration::from_secs(30), api_task).await {
        Ok(_) => say("api stopped"),
        Err(_) => tracing::error!("api did not stop within 30 s"),
    }
    let _ = retention_stop.send(());
    let _ = retention.await;
    let _ = ingest_stop.send(());
    let _ = projector_stop.send(());
    match tokio::time::timeout(std::time::Duration::from_secs(30), ingest).await {
        Ok(Ok(Ok(()))) => say("ingest stopped"),
        Ok(Ok(Err(error))) => tracing::error!(error = %ErrorChain(&error), "ingest ended with an error"),
        Ok(Err(error)) => tracing::error!(%error, "ingest task failed"),
        Err(_) => tracing::error!("ingest did not stop within 30 s"),
    }
    match tokio::time::timeout(std::time::Duration::from_secs(30), projector).await {
        Ok(Ok(Ok(_))) => say("projector stopped"),
        Ok(Ok(Err(error))) => tracing::error!(error = %ErrorChain(&error), "projector ended with an error"),
        Ok(Err(error)) => tracing::error!(%error, "projector task failed"),
        Err(_) => tracing::error!("projector did not stop within 30 s"),
    }
    let _ = stop_tx.send(());
    let _ = metrics_task.await;
    client.drain().await.ok();
    if let Some(mut server) = local_server {
        tokio::task::spawn_blocking(move || server.stop()).await.ok();
        say("nats-server stopped");
    }
    say("stopped");
    Ok(())
}

/// Starts the /v1 API on `api.listen`: the configured tokens, else the local admin token.
async fn start_api(
    config: &Config,
    telemetry: Telemetry,
    js: async_nats::jetstream::Context,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let mut options = super::serve::options(config, None, false)?;
    let (log, reads) = toolledger_query::AccessLog::channel();
    options.access_log = Some(log);
    options.ledger = Some(super::serve::ledger_access(config, js.clone())?);
    let publisher = tokio::spawn(toolledger_query::access::publish(js, reads));
    let token_note = if options.tokens.is_empty() {
        let path = config.data_dir.join("api-token");
        let token = local_admin_token(&path)?;
        options
            .tokens
            .add(&token, toolledger_query::Principal::admin("local-admin"));
        format!("admin token in {}", path.display())
    } else {
        "tokens from [api] tokens".to_owned()
    };
    let (addr, server) = toolledger_query::serve(&config.data_dir, options, telemetry, shutdown)
        .await
        .context("starting the query api (api.listen)")?;
    // Done when the server stopped and the access reads it queued are published.
    let task = tokio::spawn(async move {
        let _ = server.await;
        let _ = publisher.await;
    });
    say(&format!(
        "api at {} ({token_note}; `Authorization: Bearer <token>`)",
        url_of(addr, "/v1")
    ));
    Ok((addr, task))
}

/// Reads `<data_dir>/api-token`, creating it (32 random bytes, hex, mode 0600) on first run.
fn local_admin_token(path: &std::path::Path) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(existing) = std::fs::read_to_string(path) {
        let token = existing.trim().to_owned();
        anyhow::ensure!(token.len() >= 32, "{} holds no usable token", path.display());
        return Ok(token);
    }
    let mut random = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .context("reading /dev/urandom for the api token")?;
    let token = toolledger_wire::entry::hex(&random);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(file, "{token}")?;
    Ok(token)
}

/// Prints the demo's most eventful invocation as `toolledger show` would.
async fn show_demo_invocation(config: &Config, home: Partition, api: SocketAddr) -> anyhow::Result<()> {
    let reader = toolledger_query::Reader::of(config.data_dir.clone(), home);
    let chosen = reader
        .read(|conn| {
            let page = toolledger_query::search(
                conn,
                &toolledger_query::SearchFilter {
                    limit: toolledger_query::params::MAX_LIMIT,
                    ..Default::default()
                },
            )?;
            Ok(page
                .items
                .into_iter()
                .max_by_key(|i| (i.event_count, std::cmp::Reverse(i.first_seq))))
        })
        .await?
        .context("the demo projected no invocation")?;
    let reconstruction = super::show::reconstruct(
        config,
        Some(chosen.tenant.clone()),
        chosen.invocation_id.clone(),
        "check",
    )
    .await?;
    say(&format!(
        "demo: reconstructed invocation {} (also: toolledger show {} / GET {}):",
        chosen.invocation_id,
        chosen.invocation_id,
        url_of(api, &format!("/v1/invocations/{}", chosen.invocation_id))
    ));
    print!("{}", super::show::render(&reconstruction));
    Ok(())
}

/// Verifies the demo's partition of the ledger once a signed checkpoint covers all `ledger` entries;
/// an error when it fails.
async fn verify_demo_ledger(
    config: &Config,
    js: &async_nats::jetstream::Context,
    home: Partition,
    ledger: u64,
) -> anyhow::Result<()> {
    let (stream, origin, tiles) = super::prove::partition_log(config, home, None)?;
    let verifiers = super::verify::load_verifiers(config, None)?;
    // Checkpoints are signed every `checkpoint_interval_ms` when the tree grew: wait for one.
    let deadline = tokio::time::Instant::now()
        + std::time::Duration::from_millis(config.ledger.checkpoint_interval_ms.saturating_mul(3))
        + std::time::Duration::from_secs(30);
    loop {
        let options = toolledger_verify::VerifyOptions {
            origin: Some(origin.clone()),
            tiles: tiles.clone(),
            // One partition's checkpoints are the whole stream, as they always were.
            checkpoint_subject: (config.ledger.partitions > 1).then(|| home.checkpoint_subject()),
            ..Default::default()
        };
        let report = toolledger_verify::verify_ledger(
            js,
            &stream,
            toolledger_wire::streams::CHECKPOINTS,
            &verifiers,
            &options,
            &mut |_| {},
        )
        .await?;
        let signed = report.signed_size >= ledger;
        if let Some(first) = report.first_bad().filter(|_| signed) {
            anyhow::bail!(
                "demo: verify FAILED ({} findings); first bad position {first}",
                report.findings.len()
            );
        }
        if report.is_ok() && signed {
            say(&format!(
                "demo: verify: ok — {} entries recomputed, root {}, signed checkpoint covers {} entries, tiles {}",
                report.entries,
                report.root,
                report.signed_size,
                if report.tiles_checked {
                    "checked"
                } else {
                    "not checked"
                }
            ));
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "demo: verify FAILED: newest checkpoint signs {} of {ledger} entries; {}",
                report.signed_size,
                report
                    .first_bad()
                    .map_or_else(|| "no findings".to_owned(), ToString::to_string)
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// Waits until the projection covers `seq`; returns its invocations counted by state.
async fn wait_for_projection(
    data_dir: &std::path::Path,
    home: Partition,
    seq: u64,
) -> anyhow::Result<String> {
    let generations = toolledger_projector::Generations::of(data_dir, home);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let current = generations.current()?;
        let summary = match current {
            Some(generation) => {
                let database = generation.database();
                tokio::task::spawn_blocking(move || -> anyhow::Result<Option<String>> {
                    let store = toolledger_projector::Store::open_readonly(&database)?;
                    if store.position()? < seq {
                        return Ok(None);
                    }
                    let mut statement = store
                        .connection()
                        .prepare("SELECT state, count(*) FROM invocations GROUP BY state ORDER BY count(*) DESC, state")?;
                    let counts = statement
                        .query_map([], |row| Ok(format!("{} {}", row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(Some(counts.join(", ")))
                })
                .await??
            }
            None => None,
        };
        if let Some(summary) = summary {
            return Ok(summary);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the projector did not reach seq {seq}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Waits until ingest has taken everything from ATL_INBOUND; returns the size of `home`'s stream.
async fn wait_for_ingest(js: &async_nats::jetstream::Context, home: Partition) -> anyhow::Result<u64> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let inbound = js.get_stream(INBOUND).await?.info().await?.state.messages;
        if inbound == 0 {
            return Ok(toolledger_ledger::last_sequence(js, &home.stream()).await?);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "ingest left {inbound} messages in ATL_INBOUND"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Publishes one generated session (every event class, binary-mode CloudEvents) as a producer would.
async fn publish_demo_session(js: &async_nats::jetstream::Context) -> anyhow::Result<()> {
    let generated =
        toolledger_schemas::generator::generate(&toolledger_schemas::generator::GeneratorConfig {
            seed: 1,
            ..Default::default()
        });
    let classes: std::collections::BTreeSet<&str> = generated
        .events
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    let outgoing = toolledger_wire::produce::prepare_all(&generated.events, toolledger_wire::Mode::Binary)
        .context("preparing the generated events")?;
    let report = toolledger_wire::produce::publish_all(js, outgoing).await;
    say(&format!(
        "demo: published a generated session to ATL_INBOUND: {} events of {} classes ({} new, {} duplicates, {} failed)",
        generated.events.len(),
        classes.len(),
        report.published,
        report.duplicates,
        report.failed.len()
    ));
    anyhow::ensure!(
        report.failed.is_empty(),
        "demo events failed: {:?}",
        report.failed
    );
    Ok(())
}

/// The tenant of the demo's generated session.
const DEMO_TENANT: &str = "acme";

/// The URL each part of `up` connects with: its own identity on the local server, or the one
/// configured `nats.url` for all.
struct Urls {
    admin: String,
    ingest: String,
    projector: String,
    query: String,
    retention: String,
    /// Producer URLs by tenant (local server only).
    producers: std::collections::BTreeMap<Tenant, String>,
    /// Where a tenant without its own producer identity publishes (`nats.url`; empty on the local
    /// server, where every tenant `up` publishes for has an identity).
    shared_producer: String,
    /// Tenants whose upload bucket the contract includes.
    tenants: Vec<Tenant>,
}

impl Urls {
    fn shared(url: &str) -> Self {
        Self {
            admin: url.to_owned(),
            ingest: url.to_owned(),
            projector: url.to_owned(),
            query: url.to_owned(),
            retention: url.to_owned(),
            producers: Default::default(),
            shared_producer: url.to_owned(),
            tenants: Vec::new(),
        }
    }

    fn producer(&self, tenant: &Tenant) -> &str {
        self.producers.get(tenant).unwrap_or(&self.shared_producer)
    }

    /// `config` with each OTLP token that names no NATS URL publishing as its tenant's producer.
    fn with_producers(&self, config: &Config) -> Config {
        let mut config = config.clone();
        for token in &mut config.otlp.tokens {
            if token.nats_url.is_none()
                && let Some(url) = Tenant::parse(&token.tenant)
                    .ok()
                    .and_then(|t| self.producers.get(&t))
            {
                token.nats_url = Some(url.clone());
            }
        }
        config
    }
}

/// Starts the local nats-server on the shipped accounts and permissions, with an identity for each
/// service and a producer for each tenant of the configuration (and the demo's with `--demo`).
async fn start_local_server(config: &Config, demo: bool) -> anyhow::Result<(NatsServer, Urls)> {
    let bin = server_bin(&config.nats.server_bin)?;
    let mut tenants = std::collections::BTreeSet::new();
    for name in &config.nats.tenants {
        tenants.insert(Tenant::parse(name).with_context(|| format!("nats.tenants: `{name}`"))?);
    }
    for token in config.otlp.tokens.iter().filter(|t| t.nats_url.is_none()) {
        tenants.insert(Tenant::parse(&token.tenant).with_context(|| format!("otlp token `{}`", token.name))?);
    }
    if demo {
        tenants.insert(Tenant::parse(DEMO_TENANT)?);
    }
    let identities = identities::Identities::load_or_create(&config.data_dir, tenants.into_iter().collect())?;
    let pid_file = config.data_dir.join("nats-server.pid");
    // A server an earlier `up` left running lets go of the store before it is touched.
    tokio::task::spawn_blocking({
        let pid_file = pid_file.clone();
        move || toolledger_core::nats_server::stop_stale_server(&pid_file)
    })
    .await?;
    if identities::adopt_global_account(&config.nats_store_dir(), &pid_file)? {
        say("moved the streams of an earlier `up` without accounts into the LEDGER account");
    }
    let spec = NatsServerSpec {
        bin: bin.clone(),
        host: config.nats.listen.ip(),
        port: Some(config.nats.listen.port()).filter(|p| *p != 0),
        store_dir: config.nats_store_dir(),
        log_file: Some(log_path(config)),
        config_file: Some(identities.write_server_config()?),
        pid_file: Some(pid_file),
    };
    let server = tokio::task::spawn_blocking(move || NatsServer::start(spec))
        .await?
        .with_context(|| {
            format!(
                "starting the local nats-server {} (nats.server_bin; or set nats.url to use a running server)",
                bin.display()
            )
        })?;
    let host_port = format!("{}:{}", config.nats.listen.ip(), server.port());
    let dir = identities.write_urls(&host_port)?;
    say(&format!(
        "started nats-server {} with JetStream at {} (the accounts and permissions of deploy/nats/single.conf, \
         encrypted at rest; store {}, log {})",
        server.version(),
        server.url(),
        server.store_dir().display(),
        log_path(config).display()
    ));
    say(&format!(
        "nats identities: {} — each one's URL in {}/<user>.url (e.g. `toolledger emit --nats-url \"$(cat {}/producer_<tenant>.url)\" …`); \
         {}/passwords holds the only copy of the store's encryption key: back it up with the store",
        identities.users().join(", "),
        dir.display(),
        dir.display(),
        dir.display()
    ));
    let url = |user: &str| identities.url(user, &host_port);
    let urls = Urls {
        admin: url("admin"),
        ingest: url("ingest"),
        projector: url("projector"),
        query: url("query"),
        retention: url("retention"),
        producers: identities
            .tenants()
            .iter()
            .map(|t| (t.clone(), identities.producer_url(t, &host_port)))
            .collect(),
        shared_producer: String::new(),
        tenants: identities.tenants().to_vec(),
    };
    Ok((server, urls))
}

/// Where the pinned nats-server sits in a checkout (`scripts/setup` installs it there).
const PINNED_SERVER: &str = ".tools/nats/bin/nats-server";

/// The nats-server to run for `nats.server_bin`: a path as given; a bare name from `PATH`, else the
/// pinned server of the checkout this binary was built in. An error names the setting.
fn server_bin(configured: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let not_found = |looked: &str| {
        anyhow::anyhow!(
            "no nats-server to start: {looked}; set nats.server_bin (TOOLLEDGER_NATS__SERVER_BIN) to the \
             server's path, set nats.url to use a running server, or run scripts/setup to install the pinned one"
        )
    };
    if configured.components().count() > 1 {
        return if configured.is_file() {
            Ok(configured.to_path_buf())
        } else {
            Err(not_found(&format!(
                "nats.server_bin {} does not exist",
                configured.display()
            )))
        };
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(configured))
        .find(|candidate| candidate.is_file());
    if let Some(found) = on_path {
        return Ok(found);
    }
    let exe = std::env::current_exe().ok();
    let pinned = exe
        .iter()
        .flat_map(|exe| exe.ancestors().skip(1))
        .map(|dir| dir.join(PINNED_SERVER))
        .find(|candidate| candidate.is_file() && candidate.file_name() == Some(configured.as_os_str()));
    match pinned {
        Some(pinned) => {
            tracing::info!(server = %pinned.display(), "nats-server not on PATH; using the checkout's pinned server");
            Ok(pinned)
        }
        None => Err(not_found(&format!(
            "`{}` is not on PATH and no {PINNED_SERVER} is beside this build",
            configured.display()
        ))),
    }
}

fn log_path(config: &Config) -> std::path::PathBuf {
    config.data_dir.join("logs/nats-server.log")
}

fn url_of(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

/// Operator-facing progress goes to stdout, logs to stderr.
fn say(line: &str) {
    println!("toolledger up: {line}");
}
