//! `toolledger init`: create the NATS contract's streams, or check live ones and refuse to go on when
//! their configuration is weaker than DESIGN §2 requires. Live streams are never changed.
//!
//! ```text
//! connect (--nats-url, else nats.url) ─▶ ATL_INBOUND: create, or check ─▶ say what was done
//! ```
//!
//! ATL_INBOUND only for now; the ledger, checkpoint and quarantine streams join when ingest does.

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_wire::streams::{self, Ensured, InboundSettings};

/// Flags of `toolledger init`.
#[derive(clap::Args)]
pub struct Args {
    /// NATS server URL (`nats://host:4222`); overrides `nats.url` (`TOOLLEDGER_NATS__URL`). One of the
    /// two is required: `init` does not start a server (`toolledger up` does, and prints its URL).
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// ATL_INBOUND's size limit in bytes; a full inbox refuses new messages (discard new), never drops.
    #[arg(long, value_name = "BYTES", default_value_t = InboundSettings::default().max_bytes)]
    pub inbound_max_bytes: i64,
    /// Replicas of the streams (3 in a cluster).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: usize,
}

/// Creates or checks the streams.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let url = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&url, "toolledger-init").await?);
    let settings = InboundSettings {
        max_bytes: args.inbound_max_bytes,
        replicas: args.replicas,
        ..InboundSettings::default()
    };
    let config = streams::inbound_config(&settings);
    match streams::ensure_inbound_with(&js, &settings).await? {
        Ensured::Created => say(&format!(
            "created stream {} at {url}: subjects {}, file storage, work-queue retention, discard new at {} bytes, \
             duplicate window {}s on Nats-Msg-Id, {} replica(s)",
            streams::INBOUND,
            streams::INBOUND_SUBJECTS,
            config.max_bytes,
            config.duplicate_window.as_secs(),
            config.num_replicas
        )),
        Ensured::Verified => say(&format!(
            "stream {} at {url} exists and meets the contract; left unchanged",
            streams::INBOUND
        )),
    }
    Ok(())
}

/// The NATS URL from `--nats-url`, else from the configuration.
pub fn nats_url(config: &Config, flag: Option<&str>) -> anyhow::Result<String> {
    flag.map(str::to_owned).or_else(|| config.nats.url.clone()).context(
        "no NATS URL: pass --nats-url or set nats.url (TOOLLEDGER_NATS__URL); `toolledger up` prints the local server's",
    )
}

/// Connects to NATS and checks that JetStream answers.
pub async fn connect(url: &str, name: &str) -> anyhow::Result<async_nats::Client> {
    async_nats::ConnectOptions::new()
        .name(name)
        .connect(url)
        .await
        .with_context(|| format!("connecting to NATS at {url}"))
}

fn say(line: &str) {
    println!("toolledger init: {line}");
}
