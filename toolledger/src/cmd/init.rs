//! `toolledger init`: create the NATS contract of DESIGN §2 and the checkpoint signing key, or check
//! what exists and refuse to go on when it is weaker than required. Live streams are never changed and
//! an existing key is never overwritten, so running it again is safe.
//!
//! ```text
//! connect (--nats-url, else nats.url)
//!   ─▶ streams::ensure_contract: ATL_INBOUND, ATL_LEDGER, ATL_CHECKPOINTS, ATL_COSIGNATURES, ATL_QUARANTINE,
//!      KV ATL_LEASES, OBJ ATL_PAYLOADS_<tenant> for each --tenant: create, or check
//!   ─▶ <data_dir>/keys/checkpoint.key: generate (0600), or load ─▶ print the verifier key
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use toolledger_core::config::Config;
use toolledger_merkle::NoteSigner;
use toolledger_wire::Tenant;
use toolledger_wire::partition::Partitions;
use toolledger_wire::streams::{self, ContractSettings, Ensured, InboundSettings};

/// The checkpoint signing key's file under `<data_dir>/keys/` (the private key; owner-only).
pub const SIGNING_KEY_FILE: &str = "checkpoint.key";
/// The verifier key's file beside it (public; hand it to whoever verifies checkpoints and bundles).
pub const VERIFIER_KEY_FILE: &str = "checkpoint.pub";

/// Flags of `toolledger init`.
#[derive(clap::Args)]
pub struct Args {
    /// NATS server URL (`nats://host:4222`, with `user:password@` under the shipped server
    /// configurations, where only `admin` may create streams); overrides `nats.url`
    /// (`TOOLLEDGER_NATS__URL`). One of the two is required: `init` does not start a server
    /// (`toolledger up` does, and prints its URL).
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// ATL_INBOUND's size limit in bytes; a full inbox refuses new messages (discard new), never drops.
    #[arg(long, value_name = "BYTES", default_value_t = InboundSettings::default().max_bytes)]
    pub inbound_max_bytes: i64,
    /// Replicas of the streams and buckets (3 in a cluster).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: usize,
    /// How many ledger partitions to make (1 to 64; overrides `ledger.partitions`,
    /// `TOOLLEDGER_LEDGER__PARTITIONS`). Ingest and every reader need the same count in their
    /// configuration; a count other than the one an existing ledger was made with is refused.
    #[arg(long, value_name = "N")]
    pub partitions: Option<u16>,
    /// Days ATL_QUARANTINE keeps a rejected message.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    pub quarantine_max_age_days: u64,
    /// A tenant whose `ATL_PAYLOADS_<tenant>` upload bucket to create (repeat for several).
    #[arg(long = "tenant", value_name = "TENANT", value_parser = parse_tenant)]
    pub tenants: Vec<Tenant>,
    /// Name of a new checkpoint signing key (the C2SP key name verifiers see); an existing key keeps its name.
    #[arg(long, value_name = "NAME", default_value = "toolledger/ATL_LEDGER")]
    pub key_name: String,
}

fn parse_tenant(name: &str) -> Result<Tenant, toolledger_wire::Error> {
    Tenant::parse(name)
}

/// Creates or checks the contract and the signing key.
pub async fn run(config: Config, args: Args) -> anyhow::Result<()> {
    let given = nats_url(&config, args.nats_url.as_deref())?;
    let js = async_nats::jetstream::new(connect(&given, "toolledger-init").await?);
    let url = redacted(&given);
    let partitions = Partitions::new(args.partitions.unwrap_or(config.ledger.partitions))
        .map_err(|reason| anyhow::anyhow!("--partitions: {reason}"))?;
    streams::check_partition_count(&js, partitions).await?;
    let settings = ContractSettings {
        inbound: InboundSettings {
            max_bytes: args.inbound_max_bytes,
            replicas: args.replicas,
        },
        replicas: args.replicas,
        quarantine_max_age: Duration::from_secs(args.quarantine_max_age_days.saturating_mul(86_400)),
        tenants: args.tenants,
        partitions,
    };
    for part in streams::ensure_contract(&js, &settings).await? {
        match part.outcome {
            Ensured::Created => say(&format!(
                "created {} {} at {url}: {}",
                part.kind,
                part.name,
                describe(&part.name, &settings)
            )),
            Ensured::Verified => say(&format!(
                "{} {} at {url} exists and meets the contract; left unchanged",
                part.kind, part.name
            )),
            Ensured::Upgraded(fields) => say(&format!(
                "{} {} at {url} exists and meets the contract; turned on {fields}",
                part.kind, part.name
            )),
            Ensured::Lacking(why) => say(&format!(
                "{} {} at {url} exists and meets the contract, but lacks {why}; ingest appends \
                 with chained publishes, slower",
                part.kind, part.name
            )),
        }
    }

    let keys = config.data_dir.join("keys");
    let (signer, created) = ensure_signing_key(&keys, &args.key_name)?;
    let key_file = keys.join(SIGNING_KEY_FILE);
    if created {
        say(&format!("created checkpoint signing key {}", key_file.display()));
    } else {
        say(&format!(
            "kept existing checkpoint signing key {}",
            key_file.display()
        ));
    }
    let verifier = write_verifier_key(&keys, &signer)?;
    say(&format!(
        "checkpoint verifier key ({}): {}",
        verifier.display(),
        signer.verifier()
    ));
    Ok(())
}

/// What a created part looks like, for the operator.
fn describe(name: &str, settings: &ContractSettings) -> String {
    let replicas = settings.replicas;
    match name {
        streams::INBOUND => {
            let config = streams::inbound_config(&settings.inbound);
            format!(
                "subjects {}, file storage, work-queue retention, discard new at {} bytes, no Nats-Msg-Id \
                 dedupe (ingest drops repeats by identity), {} replica(s)",
                streams::INBOUND_SUBJECTS,
                config.max_bytes,
                config.num_replicas
            )
        }
        streams::INBOUND_SOURCE => {
            "empty; ATL_INBOUND sources it so that nats-server lets ATL_INBOUND dedupe nothing".to_owned()
        }
        _ if name == streams::LEDGER || name == streams::CHECKPOINTS || name.starts_with("ATL_LEDGER_P") => {
            format!(
                "file storage, no limits, deny delete and purge, duplicate window {}s, {replicas} replica(s)",
                streams::WRITER_DUPLICATE_WINDOW.as_secs()
            )
        }
        streams::QUARANTINE => format!(
            "file storage, messages kept {} days, {replicas} replica(s)",
            settings.quarantine_max_age.as_secs() / 86_400
        ),
        _ => format!("file storage, {replicas} replica(s)"),
    }
}

/// Loads the signing key in `keys`, or generates and saves one (owner-only, never overwriting).
/// Returns the key and whether it was created.
pub fn ensure_signing_key(keys: &Path, name: &str) -> anyhow::Result<(NoteSigner, bool)> {
    create_private_dir(keys)?;
    let path = keys.join(SIGNING_KEY_FILE);
    if path.exists() {
        let signer =
            NoteSigner::load(&path).with_context(|| format!("reading signing key {}", path.display()))?;
        return Ok((signer, false));
    }
    let signer = NoteSigner::generate(name).context("generating the checkpoint signing key")?;
    signer
        .save(&path)
        .with_context(|| format!("saving signing key {}", path.display()))?;
    Ok((signer, true))
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating key directory {}", dir.display()))
}

/// Writes the verifier key file beside the signing key when it is missing or stale.
pub fn write_verifier_key(keys: &Path, signer: &NoteSigner) -> anyhow::Result<PathBuf> {
    let path = keys.join(VERIFIER_KEY_FILE);
    let text = format!("{}\n", signer.verifier());
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        std::fs::write(&path, text).with_context(|| format!("writing verifier key {}", path.display()))?;
    }
    Ok(path)
}

/// The NATS URL from `--nats-url`, else from the configuration.
pub fn nats_url(config: &Config, flag: Option<&str>) -> anyhow::Result<String> {
    flag.map(str::to_owned).or_else(|| config.nats.url.clone()).context(
        "no NATS URL: pass --nats-url or set nats.url (TOOLLEDGER_NATS__URL); `toolledger up` prints the local server's",
    )
}

/// Connects to NATS as every toolledger command does: credentials and inbox prefix from the URL.
pub async fn connect(url: &str, name: &str) -> anyhow::Result<async_nats::Client> {
    Ok(toolledger_wire::connect::connect(url, name).await?)
}

/// `url` with its password replaced by `***`.
pub fn redacted(url: &str) -> String {
    toolledger_wire::connect::redacted(url)
}

fn say(line: &str) {
    println!("toolledger init: {line}");
}
