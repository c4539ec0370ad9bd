//! `toolledger init` against a real nats-server: the whole NATS contract of DESIGN §2, the checkpoint
//! signing key, weakened live streams, and the shipped server configuration `deploy/nats/single.conf`
//! (permissions and encryption at rest).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use toolledger_merkle::{NoteSigner, NoteVerifier};
use toolledger_testkit::{ChildProcess, NatsFixture, workspace_root};
use toolledger_wire::Tenant;
use toolledger_wire::streams::{self, ContractSettings, Finding};

use crate::fixture::{files, files_with};
use crate::toolledger;

/// Runs `toolledger ARGS…` with `data_dir`; returns (success, stdout, stderr).
pub(crate) fn run(data_dir: &Path, args: &[&str]) -> (bool, String, String) {
    let mut child = ChildProcess::spawn(
        toolledger(),
        args,
        &[
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
            ("TOOLLEDGER_DATA_DIR", data_dir.to_str().unwrap()),
        ],
    );
    let status = child
        .wait_timeout(Duration::from_secs(60))
        .expect("toolledger finishes within a minute");
    (status.success(), child.stdout(), child.stderr())
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn settings_with(tenants: &[&str]) -> ContractSettings {
    ContractSettings {
        tenants: tenants.iter().map(|t| Tenant::parse(t).unwrap()).collect(),
        ..ContractSettings::default()
    }
}

/// The verifier key from init's `checkpoint verifier key (…): <key>` line.
fn printed_verifier(out: &str) -> NoteVerifier {
    let line = out
        .lines()
        .find(|l| l.contains("checkpoint verifier key"))
        .unwrap_or_else(|| panic!("no verifier key printed\n{out}"));
    NoteVerifier::parse(line.rsplit(' ').next().unwrap()).unwrap()
}

#[test]
fn init_creates_the_whole_contract_then_verifies_it_and_keeps_the_key() {
    let nats = NatsFixture::start();
    let url = nats.url();
    let data = tempfile::tempdir().unwrap();

    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url, "--tenant", "acme"]);
    assert!(ok, "init failed\n{out}\n{err}");
    for part in [
        "created stream ATL_INBOUND",
        "created stream ATL_LEDGER",
        "created stream ATL_CHECKPOINTS",
        "created stream ATL_QUARANTINE",
        "created key-value bucket ATL_LEASES",
        "created object store ATL_PAYLOADS_acme",
        "created checkpoint signing key",
    ] {
        assert!(out.contains(part), "{part}\n{out}");
    }
    let key_file = data.path().join("keys/checkpoint.key");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "signing key must be owner-only");
    let key_text = std::fs::read_to_string(&key_file).unwrap();
    let signer = NoteSigner::load(&key_file).unwrap();
    assert_eq!(printed_verifier(&out), signer.verifier());
    let public = std::fs::read_to_string(data.path().join("keys/checkpoint.pub")).unwrap();
    assert_eq!(NoteVerifier::parse(&public).unwrap(), signer.verifier());

    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url, "--tenant", "acme"]);
    assert!(ok, "second init failed\n{out}\n{err}");
    assert!(!out.contains("created"), "nothing is created twice\n{out}");
    for name in [
        "ATL_INBOUND",
        "ATL_LEDGER",
        "ATL_CHECKPOINTS",
        "ATL_QUARANTINE",
        "ATL_LEASES",
        "ATL_PAYLOADS_acme",
    ] {
        assert!(
            out.contains(&format!("{name} at {url} exists and meets the contract")),
            "{name}\n{out}"
        );
    }
    assert!(out.contains("kept existing checkpoint signing key"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&key_file).unwrap(),
        key_text,
        "key overwritten"
    );
    assert_eq!(printed_verifier(&out), signer.verifier());

    runtime().block_on(async {
        let js = jetstream::new(nats.client().await);
        assert_eq!(
            streams::check_contract_with(&js, &settings_with(&["acme"])).await,
            []
        );
        // A tenant init was not told about has no bucket: reported, not created.
        let found = streams::check_contract_with(&js, &settings_with(&["acme", "globex"])).await;
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].stream.as_str(), found[0].field.as_str()),
            ("OBJ_ATL_PAYLOADS_globex", "stream")
        );
        let ledger = js
            .get_stream(streams::LEDGER)
            .await
            .unwrap()
            .cached_info()
            .config
            .clone();
        assert!(ledger.deny_delete && ledger.deny_purge);
        assert!(ledger.max_age.is_zero() && ledger.max_bytes <= 0 && ledger.max_messages <= 0);
        assert_eq!(ledger.duplicate_window, Duration::from_secs(120));
        assert!(ledger.allow_atomic_publish, "ingest appends atomic batches");
        let leases = js.get_key_value(streams::LEASES_BUCKET).await.unwrap();
        assert_eq!(leases.status().await.unwrap().history(), 1);
        js.get_object_store("ATL_PAYLOADS_acme").await.unwrap();
    });
}

#[test]
fn init_makes_one_ledger_stream_per_partition_and_refuses_another_count() {
    let nats = NatsFixture::start();
    let url = nats.url();
    let data = tempfile::tempdir().unwrap();
    // A contract made for one partition, its ledger still empty, takes more: the checkpoint stream
    // gains the partitions' subject before their ledger streams are made.
    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url]);
    assert!(ok, "init failed\n{out}\n{err}");
    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url, "--partitions", "3"]);
    assert!(ok, "init --partitions 3 failed\n{out}\n{err}");
    for part in ["ATL_LEDGER_P1", "ATL_LEDGER_P2", "ATL_DIRECTORY"] {
        assert!(
            out.contains(&format!("created stream {part} at")),
            "{part}\n{out}"
        );
    }
    assert!(
        out.contains("ATL_CHECKPOINTS at") && out.contains("turned on subject atl.checkpoints.*"),
        "{out}"
    );
    assert!(!out.contains("ATL_LEDGER_P3"), "{out}");
    runtime().block_on(async {
        let js = jetstream::new(nats.client().await);
        let p2 = js.get_stream("ATL_LEDGER_P2").await.unwrap();
        let config = &p2.cached_info().config;
        assert_eq!(config.subjects, ["atl.p2.ledger.>"]);
        assert!(config.deny_delete && config.deny_purge && config.allow_atomic_publish);
        let directory = js.get_stream("ATL_DIRECTORY").await.unwrap();
        let config = &directory.cached_info().config;
        assert_eq!(config.subjects, ["atl.directory"]);
        assert!(config.deny_delete && config.deny_purge);
        let checkpoints = js.get_stream(streams::CHECKPOINTS).await.unwrap();
        assert_eq!(
            checkpoints.cached_info().config.subjects,
            ["atl.checkpoints", "atl.checkpoints.*"]
        );
    });
    // The same count again verifies; another count would move tenants and is refused.
    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url, "--partitions", "3"]);
    assert!(ok, "second init failed\n{out}\n{err}");
    assert!(!out.contains("created"), "{out}");
    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url]);
    assert!(!ok, "init with one partition over three\n{out}");
    assert!(err.contains("ATL_LEDGER_P1 exists"), "{err}");
    let (ok, _, err) = run(data.path(), &["init", "--nats-url", &url, "--partitions", "0"]);
    assert!(!ok && err.contains("1 to 64"), "{err}");
}

/// A fresh server with the contract `init` made, then the stream `name` changed by `change`; the
/// server, init's data directory and the server's URL.
fn initialized_then_changed(
    name: &str,
    change: fn(&mut stream::Config),
) -> (NatsFixture, tempfile::TempDir, String) {
    let nats = NatsFixture::start();
    let url = nats.url();
    let data = tempfile::tempdir().unwrap();
    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url]);
    assert!(ok, "init failed\n{out}\n{err}");
    runtime().block_on(async {
        let js = jetstream::new(nats.client().await);
        let mut config = js.get_stream(name).await.unwrap().cached_info().config.clone();
        change(&mut config);
        if config.deny_purge {
            // An update is how a limit gets added to a live stream.
            js.update_stream(config).await.unwrap();
        } else {
            // A stream made without deny_purge (the server keeps the flag once set).
            js.delete_stream(name).await.unwrap();
            js.create_stream(config).await.unwrap();
        }
    });
    (nats, data, url)
}

/// Init on a fresh server, then `weaken` the stream `name`; init must refuse naming `name` and `field`,
/// and `check_contract` must report each of `fields`.
fn assert_weakened_stream_refused(name: &str, field: &str, fields: &[&str], weaken: fn(&mut stream::Config)) {
    let (nats, data, url) = initialized_then_changed(name, weaken);
    let rt = runtime();

    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url]);
    assert!(!ok, "init must refuse a weakened {name}\n{out}\n{err}");
    assert!(
        err.contains(&format!("stream {name} is weaker than required: {field} is")),
        "{name} {field}\n{err}"
    );

    let found: Vec<Finding> = rt.block_on(async {
        let js = jetstream::new(nats.client().await);
        streams::check_contract(&js).await
    });
    let named: Vec<_> = found
        .iter()
        .map(|f| (f.stream.as_str(), f.field.as_str()))
        .collect();
    let expected: Vec<_> = fields.iter().map(|f| (name, *f)).collect();
    assert_eq!(named, expected, "{found:?}");
}

#[test]
fn init_and_check_contract_name_a_ledger_that_gained_limits() {
    assert_weakened_stream_refused(
        streams::LEDGER,
        "max_age",
        &["max_age", "max_msgs", "max_bytes"],
        |c| {
            c.max_age = Duration::from_secs(86_400);
            c.max_messages = 1_000;
            // Small: JetStream reserves max_bytes against the server's free disk, and a
            // gibibyte failed with "insufficient storage resources" on a CI machine.
            c.max_bytes = 1 << 20;
        },
    );
}

#[test]
fn init_and_check_contract_name_checkpoints_that_gained_an_age_limit() {
    assert_weakened_stream_refused(streams::CHECKPOINTS, "max_age", &["max_age"], |c| {
        c.max_age = Duration::from_secs(3_600);
    });
}

#[test]
fn init_and_check_contract_name_a_ledger_without_deny_purge() {
    assert_weakened_stream_refused(streams::LEDGER, "deny_purge", &["deny_purge"], |c| {
        c.deny_purge = false
    });
}

#[test]
fn init_and_check_contract_name_checkpoints_without_deny_purge() {
    assert_weakened_stream_refused(streams::CHECKPOINTS, "deny_purge", &["deny_purge"], |c| {
        c.deny_purge = false;
    });
}

#[test]
fn init_turns_on_atomic_batches_for_a_ledger_made_without_them() {
    let (nats, data, url) = initialized_then_changed(streams::LEDGER, |c| c.allow_atomic_publish = false);
    let rt = runtime();
    rt.block_on(async {
        let js = jetstream::new(nats.client().await);
        // Slower, not weaker: the contract check passes, the shortfall is what doctor warns about.
        assert_eq!(streams::check_contract(&js).await, []);
        let lacking = streams::check_shortfalls(&js, &Default::default()).await;
        assert_eq!(lacking.len(), 1, "{lacking:?}");
        assert_eq!(
            (lacking[0].stream.as_str(), lacking[0].field.as_str()),
            (streams::LEDGER, "allow_atomic")
        );
    });

    let (ok, out, err) = run(data.path(), &["init", "--nats-url", &url]);
    assert!(ok, "init failed\n{out}\n{err}");
    assert!(
        out.contains(&format!(
            "stream ATL_LEDGER at {url} exists and meets the contract; turned on allow_atomic"
        )),
        "{out}"
    );
    rt.block_on(async {
        let js = jetstream::new(nats.client().await);
        assert_eq!(streams::check_shortfalls(&js, &Default::default()).await, []);
        let ledger = js
            .get_stream(streams::LEDGER)
            .await
            .unwrap()
            .cached_info()
            .config
            .clone();
        assert!(ledger.allow_atomic_publish && ledger.deny_delete && ledger.deny_purge);
    });
}

/// Passwords and the encryption key the test defines for the shipped configuration's variables.
pub(crate) const SECRETS: &[(&str, &str)] = &[
    (
        "TOOLLEDGER_JS_KEY",
        "test-only-key-5b2f9c0e1d7a4e3b8c6d2f1a0e9b8c7d",
    ),
    ("TOOLLEDGER_NATS_ADMIN_PASSWORD", "admin-pw"),
    ("TOOLLEDGER_NATS_INGEST_PASSWORD", "ingest-pw"),
    ("TOOLLEDGER_NATS_PROJECTOR_PASSWORD", "projector-pw"),
    ("TOOLLEDGER_NATS_EXPORTER_PASSWORD", "exporter-pw"),
    ("TOOLLEDGER_NATS_QUERY_PASSWORD", "query-pw"),
    ("TOOLLEDGER_NATS_RETENTION_PASSWORD", "retention-pw"),
    ("TOOLLEDGER_NATS_READER_PASSWORD", "reader-pw"),
    ("TOOLLEDGER_NATS_PRODUCER_ACME_PASSWORD", "acme-pw"),
];

/// `deploy/nats/single.conf` exactly as shipped, preceded by definitions of the variables it otherwise
/// takes from the server's environment (nats-server resolves a variable from the file first).
fn shipped_single_config(dir: &Path) -> PathBuf {
    let shipped = std::fs::read_to_string(workspace_root().join("deploy/nats/single.conf")).unwrap();
    let mut text: String = SECRETS.iter().map(|(k, v)| format!("{k}: \"{v}\"\n")).collect();
    text.push_str(&shipped);
    let path = dir.join("single.conf");
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn secret(name: &str) -> &'static str {
    SECRETS.iter().find(|(k, _)| *k == name).unwrap().1
}

/// A client logged in as `user`, with its inbox prefix and requests that give up quickly (a request the
/// permissions drop is never answered).
async fn login(nats: &NatsFixture, user: &str, password: &str) -> async_nats::Client {
    login_at(&nats.url(), user, password).await
}

/// [`login`] at `url` (one server, or a cluster's list).
pub(crate) async fn login_at(url: &str, user: &str, password: &str) -> async_nats::Client {
    let servers: Vec<&str> = url.split(',').collect();
    async_nats::ConnectOptions::new()
        .user_and_password(user.to_owned(), password.to_owned())
        .custom_inbox_prefix(format!("_INBOX.{user}"))
        .request_timeout(Some(Duration::from_millis(500)))
        .connect(servers)
        .await
        .unwrap_or_else(|e| panic!("login as {user}: {e}"))
}

/// A JetStream context that gives up as quickly as [`login`]'s client.
pub(crate) fn quick(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(500))
        .build(client)
}

/// Whether a JetStream publish is stored (acknowledged).
pub(crate) async fn stored(js: &jetstream::Context, subject: &str, payload: &'static [u8]) -> bool {
    match js.publish(subject.to_owned(), payload.into()).await {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    }
}

/// Whether a JetStream API request gets any answer.
pub(crate) async fn answered(client: &async_nats::Client, subject: &str, body: &'static [u8]) -> bool {
    client.request(subject.to_owned(), body.into()).await.is_ok()
}

/// [`files_with`] in a directory that must hold files: an absence in an empty one proves nothing.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    assert!(!files(dir).is_empty(), "no files under {}", dir.display());
    files_with(dir, needle)
}

/// The URL that logs in as `user` of the shipped configuration.
fn url_as(nats: &NatsFixture, user: &str) -> String {
    let password = secret(&format!("TOOLLEDGER_NATS_{}_PASSWORD", user.to_ascii_uppercase()));
    format!("nats://{user}:{password}@127.0.0.1:{}", nats.port())
}

/// A server on the shipped `single.conf` with the contract made by `init` as admin for `tenants`:
/// the config's directory, the server, the data directory (with the signing key) and init's output.
fn secured_and_initialized(tenants: &[&str]) -> (tempfile::TempDir, NatsFixture, tempfile::TempDir, String) {
    let conf_dir = tempfile::tempdir().unwrap();
    let nats = NatsFixture::start_with_config(Some(shipped_single_config(conf_dir.path())));
    let data = tempfile::tempdir().unwrap();
    let admin_url = url_as(&nats, "admin");
    let mut args = vec!["init", "--nats-url", admin_url.as_str()];
    for tenant in tenants {
        args.extend(["--tenant", tenant]);
    }
    let (ok, out, err) = run(data.path(), &args);
    assert!(ok, "admin init failed\n{out}\n{err}");
    (conf_dir, nats, data, out)
}

const CANARY: &[u8] = b"toolledger-canary-3f9a1c: sk_live_not_a_real_secret";

#[test]
fn shipped_single_node_config_enforces_permissions_and_encrypts_at_rest() {
    // Only admin may create streams; init connects as the user in the URL and never prints its password.
    let (_conf, nats, _data, out) = secured_and_initialized(&["acme", "globex"]);
    assert!(out.contains("created stream ATL_LEDGER"), "{out}");
    assert!(!out.contains("admin-pw"), "password printed\n{out}");

    runtime().block_on(async {
        let admin = quick(login(&nats, "admin", secret("TOOLLEDGER_NATS_ADMIN_PASSWORD")).await);
        let count = |name: &'static str| {
            let admin = admin.clone();
            async move {
                admin
                    .get_stream(name)
                    .await
                    .unwrap()
                    .info()
                    .await
                    .unwrap()
                    .state
                    .messages
            }
        };

        // Producers: their own tenant's tool events and payload bucket, nothing else.
        let producer = login(
            &nats,
            "producer_acme",
            secret("TOOLLEDGER_NATS_PRODUCER_ACME_PASSWORD"),
        )
        .await;
        let js = quick(producer.clone());
        assert!(stored(&js, "atl.in.acme.tool.declared", CANARY).await);
        assert!(
            !stored(&js, "atl.in.globex.tool.declared", b"{}").await,
            "another tenant's subject"
        );
        assert!(
            !stored(&js, "atl.in.acme.toolledger.access.read", b"{}").await,
            "the ledger's own classes"
        );
        assert!(
            !stored(&js, "atl.ledger.acme.tool.declared", b"{}").await,
            "the ledger"
        );
        assert_eq!(count(streams::INBOUND).await, 1);
        assert!(stored(&js, "atl.in.acme.tool.declared", b"{\"poison\":true}").await);
        let own = js.get_object_store("ATL_PAYLOADS_acme").await.unwrap();
        own.put("big-payload", &mut &CANARY[..]).await.unwrap();
        assert!(
            js.get_object_store("ATL_PAYLOADS_globex").await.is_err(),
            "another tenant's bucket"
        );
        assert!(
            !answered(&producer, "$JS.API.STREAM.PURGE.ATL_INBOUND", b"").await,
            "purging the inbox"
        );

        // Ingest writes the ledger but can neither create streams nor update, purge or delete the ledger.
        let ingest = login(&nats, "ingest", secret("TOOLLEDGER_NATS_INGEST_PASSWORD")).await;
        let config = serde_json::to_vec(&streams::quarantine_config(&ContractSettings::default())).unwrap();
        assert!(
            ingest
                .request("$JS.API.STREAM.CREATE.ATL_QUARANTINE", config.into())
                .await
                .is_err(),
            "ingest created a stream"
        );
        let js = quick(ingest.clone());
        assert!(stored(&js, "atl.ledger.acme.tool.declared", b"{\"entry\":1}").await);
        assert!(stored(&js, "atl.checkpoints", b"checkpoint").await);
        let mut weaker = streams::ledger_config(&ContractSettings::default());
        weaker.max_age = Duration::from_secs(60);
        let update = serde_json::to_vec(&weaker).unwrap();
        assert!(
            ingest
                .request("$JS.API.STREAM.UPDATE.ATL_LEDGER", update.clone().into())
                .await
                .is_err(),
            "ingest updated the ledger"
        );
        for subject in [
            "$JS.API.STREAM.PURGE.ATL_LEDGER",
            "$JS.API.STREAM.DELETE.ATL_LEDGER",
            "$JS.API.STREAM.DELETE.ATL_CHECKPOINTS",
        ] {
            assert!(!answered(&ingest, subject, b"").await, "{subject}");
        }
        assert!(
            !answered(&ingest, "$JS.API.STREAM.MSG.DELETE.ATL_LEDGER", b"{\"seq\":1}").await,
            "deleting a ledger message"
        );
        let log = std::fs::read_to_string(nats.log_file()).unwrap();
        for subject in [
            "CREATE.ATL_QUARANTINE",
            "UPDATE.ATL_LEDGER",
            "PURGE.ATL_LEDGER",
            "DELETE.ATL_LEDGER",
            "MSG.DELETE.ATL_LEDGER",
        ] {
            let line =
                format!("\"LEDGER/user:ingest\" - Publish Violation - Subject \"$JS.API.STREAM.{subject}\"");
            assert!(
                log.contains(&line),
                "the server names the refused request: {line}\n{log}"
            );
        }
        assert_eq!(count(streams::LEDGER).await, 1);
        // Ingest makes its own advisory stream (poison messages) and deletes a poison message from the inbox.
        js.get_or_create_stream(stream::Config {
            name: "ATL_INBOUND_ADVISORIES".to_owned(),
            subjects: vec!["$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ATL_INBOUND.ingest".to_owned()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .unwrap();
        let inbound = js.get_stream(streams::INBOUND).await.unwrap();
        assert!(inbound.delete_message(2).await.unwrap());
        assert_eq!(count(streams::INBOUND).await, 1);
        assert_eq!(count(streams::CHECKPOINTS).await, 1);

        // The reader reads the ledger and writes nothing.
        let reader = quick(login(&nats, "reader", secret("TOOLLEDGER_NATS_READER_PASSWORD")).await);
        let ledger = reader.get_stream(streams::LEDGER).await.unwrap();
        assert_eq!(
            ledger.get_raw_message(1).await.unwrap().payload.as_ref(),
            b"{\"entry\":1}"
        );
        assert!(!stored(&reader, "atl.ledger.acme.tool.declared", b"{}").await);
        assert!(
            reader.get_stream(streams::INBOUND).await.is_err(),
            "the reader sees the inbox"
        );

        // The admin alone may update the ledger (here to something harmless).
        let mut config = admin
            .get_stream(streams::LEDGER)
            .await
            .unwrap()
            .cached_info()
            .config
            .clone();
        assert!(config.max_age.is_zero(), "ingest's update got through");
        config.description = Some("updated by the offline admin".to_owned());
        admin.update_stream(config).await.unwrap();
        assert_eq!(
            streams::check_contract_with(&admin, &settings_with(&["acme", "globex"])).await,
            []
        );
    });

    // Encryption at rest: the canary went into ATL_INBOUND and the payload bucket, yet no stored byte shows it.
    assert_eq!(files_containing(nats.store_dir(), CANARY), Vec::<PathBuf>::new());
}

#[test]
fn without_encryption_the_canary_is_on_disk() {
    // The control for the test above: the search finds the canary when the store is not encrypted.
    let nats = NatsFixture::start();
    runtime().block_on(async {
        let js = jetstream::new(nats.client().await);
        streams::ensure_inbound(&js).await.unwrap();
        assert!(stored(&js, "atl.in.acme.tool.declared", CANARY).await);
    });
    assert!(!files_containing(nats.store_dir(), CANARY).is_empty());
}

/// Ingest does everything it needs — lease, consumer, advisory stream, ledger appends,
/// checkpoints, quarantine, payload offload — as the shipped config's `ingest` user, with credentials
/// in the URL; and the secrets the generator planted (bearer tokens, OTC authorization and secrets,
/// declared sensitive fields), one of them in an event that is quarantined, are then nowhere at rest:
/// not in the encrypted NATS store, the ledger's entries, the quarantine, the blobs, the data directory
/// or ingest's debug logs.
#[test]
fn ingest_as_the_shipped_user_leaves_no_secret_at_rest() {
    let (_conf, mut nats, data, _) = secured_and_initialized(&["acme"]);
    let ingest_url = url_as(&nats, "ingest");
    let mut ingest = ChildProcess::spawn(
        toolledger(),
        ["ingest", "--nats-url", ingest_url.as_str()],
        &[
            ("TOOLLEDGER_DATA_DIR", data.path().to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "debug"),
            // Most fields move to the blob store, so blobs are searched too.
            ("TOOLLEDGER_PAYLOADS__OFFLOAD_THRESHOLD_BYTES", "64"),
        ],
    );
    let producer_url = url_as(&nats, "producer_acme");
    let generated =
        toolledger_schemas::generator::generate(&toolledger_schemas::generator::GeneratorConfig {
            seed: 12,
            tenants: vec!["acme".to_owned()],
            ..Default::default()
        });
    let secrets: Vec<String> = generated.truth.secrets.iter().map(|s| s.value.clone()).collect();
    assert!(secrets.len() >= 4, "the generator plants every kind of secret");
    let mut events = generated.events.clone();
    // A copy of an event carrying a secret, made invalid: quarantined, with its original scrubbed.
    let carrier = &generated.truth.secrets[0].locations[0].event_id;
    let mut invalid = events
        .iter()
        .find(|e| e["id"] == carrier.as_str())
        .unwrap()
        .clone();
    invalid["id"] = "invalid-copy-1".into();
    invalid["data"]["schema_version"] = serde_json::json!(["not", "a", "version"]);
    events.push(invalid);

    let admin_js = runtime().block_on(async {
        let producer = jetstream::new(
            toolledger_wire::connect::connect(&producer_url, "producer")
                .await
                .unwrap(),
        );
        let outgoing = toolledger_wire::produce::prepare_all(&events, toolledger_wire::Mode::Binary).unwrap();
        let report = toolledger_wire::produce::publish_all(&producer, outgoing).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);

        // Every valid event, plus the quarantine receipt for the invalid one.
        let admin = quick(login(&nats, "admin", secret("TOOLLEDGER_NATS_ADMIN_PASSWORD")).await);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let count = |name: &'static str| {
                let admin = admin.clone();
                async move {
                    admin
                        .get_stream(name)
                        .await
                        .unwrap()
                        .info()
                        .await
                        .unwrap()
                        .state
                        .messages
                }
            };
            let (ledger, quarantine) = (count("ATL_LEDGER").await, count("ATL_QUARANTINE").await);
            if ledger == events.len() as u64 && quarantine == 1 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ledger holds {ledger}, quarantine {quarantine}\n{}",
                ingest.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        admin
    });
    let status = ingest.terminate(Duration::from_secs(30)).expect("ingest stops");
    assert!(status.success(), "{}", ingest.stderr());

    let (checkpoints, stored) = runtime().block_on(async {
        let admin = quick(login(&nats, "admin", secret("TOOLLEDGER_NATS_ADMIN_PASSWORD")).await);
        let checkpoints = admin
            .get_stream("ATL_CHECKPOINTS")
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages;
        let mut stored = Vec::new();
        for stream in ["ATL_LEDGER", "ATL_QUARANTINE"] {
            for (_, bytes) in toolledger_ledger::read_all(&admin, stream).await.unwrap() {
                stored.push((stream, bytes));
            }
        }
        drop(admin_js);
        (checkpoints, stored)
    });
    assert!(checkpoints >= 1, "ingest signs a checkpoint before it stops");
    let blobs = data.path().join("blobs");
    assert!(blobs.is_dir(), "payloads were offloaded");
    let scrubbed = stored
        .iter()
        .filter(|(_, b)| b.windows(20).any(|w| w == b"\"scrubbed_paths\":[\"/"))
        .count();
    assert!(
        scrubbed >= secrets.len() / 2,
        "entries list their scrubbed paths ({scrubbed})"
    );
    let quarantined = &stored.iter().find(|(s, _)| *s == "ATL_QUARANTINE").unwrap().1;
    assert!(
        quarantined.windows(10).any(|w| w == b"$scrubbed\""),
        "the quarantined original is scrubbed: {}",
        String::from_utf8_lossy(quarantined)
    );

    // Flush the server's store to disk before searching it.
    nats.restart();
    let logs = format!("{}{}", ingest.stdout(), ingest.stderr());
    assert!(logs.len() > 10_000, "debug logs were written");
    for secret in &secrets {
        let needle = secret.as_bytes();
        for (stream, bytes) in &stored {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{secret} in a {stream} message"
            );
        }
        assert!(!logs.contains(secret.as_str()), "{secret} in ingest's logs");
        assert_eq!(
            files_containing(data.path(), needle),
            Vec::<PathBuf>::new(),
            "{secret} in the data directory"
        );
        assert_eq!(
            files_containing(nats.store_dir(), needle),
            Vec::<PathBuf>::new(),
            "{secret} in the NATS store"
        );
    }
}

/// The service identities of the shipped `single.conf`: each does its job — the projector projects
/// the ledger as `projector`; the retention job erases as `retention` (ingest, as `ingest`, appends its
/// record) — and nothing more: only `query` may publish access records and only `retention` erasure
/// records, and none of them (nor the people's `reader`) writes the ledger or purges, deletes or
/// updates a stream.
#[test]
fn shipped_service_identities_do_their_job_and_nothing_more() {
    let (_conf, nats, data, _) = secured_and_initialized(&["acme"]);
    let data_dir = data.path().to_str().unwrap();
    let mut ingest = ChildProcess::spawn(
        toolledger(),
        ["ingest", "--nats-url", url_as(&nats, "ingest").as_str()],
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            // Payloads go to the blob store, so retention has content to erase.
            ("TOOLLEDGER_PAYLOADS__OFFLOAD_THRESHOLD_BYTES", "64"),
        ],
    );
    let events = toolledger_schemas::generator::generate(&toolledger_schemas::generator::GeneratorConfig {
        seed: 5,
        sessions: 1,
        tenants: vec!["acme".to_owned()],
        ..Default::default()
    })
    .events;
    let producer_url = url_as(&nats, "producer_acme");
    let admin = runtime().block_on(async {
        let producer = jetstream::new(
            toolledger_wire::connect::connect(&producer_url, "producer")
                .await
                .unwrap(),
        );
        let outgoing = toolledger_wire::produce::prepare_all(&events, toolledger_wire::Mode::Binary).unwrap();
        let report = toolledger_wire::produce::publish_all(&producer, outgoing).await;
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        quick(login(&nats, "admin", secret("TOOLLEDGER_NATS_ADMIN_PASSWORD")).await)
    });
    let ledger_size = || {
        runtime().block_on(async {
            let admin = quick(login(&nats, "admin", secret("TOOLLEDGER_NATS_ADMIN_PASSWORD")).await);
            toolledger_ledger::last_sequence(&admin, streams::LEDGER)
                .await
                .unwrap()
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while ledger_size() < events.len() as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "ingest: {}",
            ingest.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(admin);

    // The projector projects the whole ledger as `projector`.
    let mut project = ChildProcess::spawn(
        toolledger(),
        ["project", "--nats-url", url_as(&nats, "projector").as_str()],
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
        ],
    );
    let position = || {
        toolledger_projector::Generations::new(data.path())
            .current()
            .ok()
            .flatten()
            .and_then(|g| toolledger_projector::Store::open_readonly(&g.database()).ok())
            .and_then(|s| s.position().ok())
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while position() < events.len() as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the projector as `projector`: {}",
            project.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(project.terminate(Duration::from_secs(30)).unwrap().success());

    // Retention erases as `retention`, and ingest appends its record.
    let in_40_days = (chrono::Utc::now() + chrono::Duration::days(40)).to_rfc3339();
    let mut erase = ChildProcess::spawn(
        toolledger(),
        [
            "erase",
            "--retention",
            "--now",
            in_40_days.as_str(),
            "--nats-url",
            url_as(&nats, "retention").as_str(),
        ],
        &[
            ("TOOLLEDGER_DATA_DIR", data_dir),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
            ("TOOLLEDGER_RETENTION__DEFAULT__MAX_DAYS", "30"),
        ],
    );
    let status = erase
        .wait_timeout(Duration::from_secs(60))
        .expect("erase finishes");
    let out = format!("{}{}", erase.stdout(), erase.stderr());
    assert!(status.success(), "{out}");
    assert!(out.contains("tenant acme: erased"), "{out}");
    assert!(out.contains("recorded at ledger seq"), "{out}");
    assert!(ingest.terminate(Duration::from_secs(30)).unwrap().success());

    runtime().block_on(async {
        let services = ["projector", "exporter", "query", "retention", "reader"];
        for user in services {
            let password = secret(&format!("TOOLLEDGER_NATS_{}_PASSWORD", user.to_ascii_uppercase()));
            let client = login(&nats, user, password).await;
            let js = quick(client.clone());
            // Each reads the ledger.
            let ledger = js.get_stream(streams::LEDGER).await.unwrap();
            assert!(ledger.get_raw_message(1).await.is_ok(), "{user} reads the ledger");
            // None writes it, nor purges, deletes or updates a stream.
            assert!(
                !stored(&js, "atl.ledger.acme.tool.declared", b"{}").await,
                "{user} wrote the ledger"
            );
            for subject in [
                "$JS.API.STREAM.PURGE.ATL_LEDGER",
                "$JS.API.STREAM.DELETE.ATL_LEDGER",
                "$JS.API.STREAM.UPDATE.ATL_LEDGER",
                "$JS.API.STREAM.PURGE.ATL_INBOUND",
                "$JS.API.STREAM.PURGE.ATL_QUARANTINE",
                "$JS.API.STREAM.DELETE.ATL_CHECKPOINTS",
            ] {
                assert!(!answered(&client, subject, b"").await, "{user}: {subject}");
            }
            assert!(
                !answered(&client, "$JS.API.STREAM.MSG.DELETE.ATL_LEDGER", b"{\"seq\":1}").await,
                "{user} deleted a ledger message"
            );
            // Only the query service records reads; only the retention job records erasures.
            assert_eq!(
                stored(&js, "atl.in._system.toolledger.access.read", b"{}").await,
                user == "query",
                "{user} and access records"
            );
            assert_eq!(
                stored(&js, "atl.in._system.toolledger.erasure.completed", b"{}").await,
                user == "retention",
                "{user} and erasure records"
            );
            // No producer's subjects either.
            assert!(
                !stored(&js, "atl.in.acme.tool.declared", b"{}").await,
                "{user} published as a producer"
            );
        }
        // The server names each refusal.
        let log = std::fs::read_to_string(nats.log_file()).unwrap();
        for (user, subject) in [
            ("retention", "atl.ledger.acme.tool.declared"),
            ("retention", "$JS.API.STREAM.PURGE.ATL_LEDGER"),
            ("retention", "atl.in._system.toolledger.access.read"),
            ("projector", "atl.in._system.toolledger.access.read"),
            ("exporter", "atl.in._system.toolledger.access.read"),
            ("query", "atl.in._system.toolledger.erasure.completed"),
        ] {
            let line = format!("\"LEDGER/user:{user}\" - Publish Violation - Subject \"{subject}\"");
            assert!(log.contains(&line), "the server names the refusal: {line}");
        }
    });
}
