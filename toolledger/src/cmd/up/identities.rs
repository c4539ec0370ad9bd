//! The NATS identities of `up`'s local nats-server: the shipped accounts and permissions
//! (`deploy/nats/single.conf`, DESIGN §2) with passwords generated on first run.
//!
//! ```text
//! <data_dir>/nats-auth/          (0700)
//!   passwords                    one `user=password` line per identity, and `js_key=…`; made once.
//!                                The only copy of the store's encryption key: back it up with the
//!                                store; without it the store cannot be read
//!   server.conf                  the variables single.conf reads, then single.conf itself with its
//!                                producer template repeated per tenant; rewritten at every start
//!   <user>.url                   nats://<user>:<password>@host:port, for `--nats-url "$(cat …)"`
//! ```
//!
//! Each service `up` runs connects as its own identity (ingest as `ingest`, the projector as
//! `projector`, the API as `query`, …), so the local server enforces what a deployment's does: only
//! ingest writes the ledger, a producer publishes only its tenant's events. A data directory made by
//! a release whose `up` ran without accounts keeps its streams: they move from the global account to
//! `LEDGER` before the server starts, and the server encrypts them at rest as it loads them.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use toolledger_wire::Tenant;

/// `deploy/nats/single.conf` as shipped with this build.
const SHIPPED: &str = include_str!("../../../../deploy/nats/single.conf");

/// The tenant name of the shipped producer template.
const TEMPLATE_TENANT: &str = "acme";

/// The service identities of the shipped configuration, each with its password variable.
pub const SERVICES: [&str; 7] = [
    "admin",
    "ingest",
    "projector",
    "exporter",
    "query",
    "retention",
    "reader",
];

/// The key of the JetStream encryption key in the passwords file.
const JS_KEY: &str = "js_key";

/// The identities of one data directory.
pub struct Identities {
    dir: PathBuf,
    /// `user` (or [`JS_KEY`]) ─▶ secret.
    secrets: BTreeMap<String, String>,
    tenants: Vec<Tenant>,
}

impl Identities {
    /// Loads `<data_dir>/nats-auth/passwords`, adding a fresh secret for every identity it lacks:
    /// the services, the JetStream key, and one producer per tenant in `tenants`.
    pub fn load_or_create(data_dir: &Path, tenants: Vec<Tenant>) -> anyhow::Result<Self> {
        let dir = data_dir.join("nats-auth");
        create_private_dir(&dir)?;
        let path = dir.join("passwords");
        let mut secrets = BTreeMap::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    let (user, secret) = line
                        .split_once('=')
                        .with_context(|| format!("{}: a line without `=`", path.display()))?;
                    // Secrets go into the server configuration and URLs as they are: only what
                    // `random_secret` makes is taken.
                    anyhow::ensure!(
                        !secret.is_empty() && secret.bytes().all(|b| b.is_ascii_alphanumeric()),
                        "{}: the secret of `{user}` is not letters and digits",
                        path.display()
                    );
                    secrets.insert(user.to_owned(), secret.to_owned());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
        let wanted = users_of(&tenants).into_iter().chain([JS_KEY.to_owned()]);
        let mut added = false;
        for user in wanted {
            if let std::collections::btree_map::Entry::Vacant(slot) = secrets.entry(user) {
                slot.insert(random_secret()?);
                added = true;
            }
        }
        if added {
            let text: String = secrets.iter().map(|(u, s)| format!("{u}={s}\n")).collect();
            write_private(&path, &text)?;
        }
        Ok(Self {
            dir,
            secrets,
            tenants,
        })
    }

    /// The server configuration: the shipped file, its variables defined first, its producer
    /// template once per tenant (none without tenants).
    pub fn server_config(&self) -> anyhow::Result<String> {
        let mut text = format!("TOOLLEDGER_JS_KEY: \"{}\"\n", self.secret(JS_KEY));
        for service in SERVICES {
            text.push_str(&format!(
                "TOOLLEDGER_NATS_{}_PASSWORD: \"{}\"\n",
                service.to_ascii_uppercase(),
                self.secret(service)
            ));
        }
        let (before, template, after) = split_producer_template(SHIPPED)?;
        text.push_str(before);
        for tenant in &self.tenants {
            let block = template
                .replace(
                    "$TOOLLEDGER_NATS_PRODUCER_ACME_PASSWORD",
                    &format!("\"{}\"", self.secret(&producer(tenant))),
                )
                .replace(TEMPLATE_TENANT, tenant.as_str());
            text.push_str(&block);
        }
        text.push_str(after);
        Ok(text)
    }

    /// Writes `server.conf` and returns its path.
    pub fn write_server_config(&self) -> anyhow::Result<PathBuf> {
        let path = self.dir.join("server.conf");
        write_private(&path, &self.server_config()?)?;
        Ok(path)
    }

    /// Writes one `<user>.url` per identity for the server at `host_port`; returns the directory.
    pub fn write_urls(&self, host_port: &str) -> anyhow::Result<&Path> {
        for user in self.users() {
            write_private(
                &self.dir.join(format!("{user}.url")),
                &format!("{}\n", self.url(&user, host_port)),
            )?;
        }
        Ok(&self.dir)
    }

    /// `nats://user:password@host_port`.
    pub fn url(&self, user: &str, host_port: &str) -> String {
        format!("nats://{user}:{}@{host_port}", self.secret(user))
    }

    /// The producer identity of `tenant`.
    pub fn producer_url(&self, tenant: &Tenant, host_port: &str) -> String {
        self.url(&producer(tenant), host_port)
    }

    /// Every identity's user name: the services, then the producers.
    pub fn users(&self) -> Vec<String> {
        users_of(&self.tenants)
    }

    /// The tenants with a producer identity.
    pub fn tenants(&self) -> &[Tenant] {
        &self.tenants
    }

    fn secret(&self, user: &str) -> &str {
        // Every identity's secret was added by `load_or_create`.
        self.secrets.get(user).map_or("", String::as_str)
    }
}

/// The services' user names, then the producers' of `tenants`.
fn users_of(tenants: &[Tenant]) -> Vec<String> {
    SERVICES
        .iter()
        .map(|s| (*s).to_owned())
        .chain(tenants.iter().map(producer))
        .collect()
}

/// The producer user of `tenant`, as in the shipped template.
fn producer(tenant: &Tenant) -> String {
    format!("producer_{}", tenant.as_str())
}

/// The shipped file around its producer template: the text before the template block, the block
/// (from its `{` line to its `}` line, inclusive), and the text after.
fn split_producer_template(shipped: &str) -> anyhow::Result<(&str, &str, &str)> {
    let user_line = format!("user: producer_{TEMPLATE_TENANT}");
    let at = shipped
        .find(&user_line)
        .context("deploy/nats/single.conf has no producer template")?;
    let start = shipped[..at]
        .rfind("\n      {\n")
        .map(|i| i + 1)
        .context("the producer template does not open with `{` on its own line")?;
    let end = shipped[at..]
        .find("\n      }\n")
        .map(|i| at + i + "\n      }\n".len())
        .context("the producer template does not close with `}` on its own line")?;
    Ok((&shipped[..start], &shipped[start..end], &shipped[end..]))
}

/// A secret for a password or key: 32 random bytes as hex after a letter (nats-server reads a
/// value starting with a digit as a number).
fn random_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("drawing a NATS password: {e}"))?;
    Ok(format!("p{}", toolledger_wire::entry::hex(&bytes)))
}

/// Moves streams an earlier `up` made in the global account (`$G`, no accounts configured) to the
/// `LEDGER` account of the shipped configuration, before the server starts; true when it did. Never
/// while the process the pid file names still runs (it may be that server, whatever its name).
pub fn adopt_global_account(store_dir: &Path, pid_file: &Path) -> anyhow::Result<bool> {
    let jetstream = store_dir.join("jetstream");
    let (global, ledger) = (jetstream.join("$G"), jetstream.join("LEDGER"));
    if !global.is_dir() {
        return Ok(false);
    }
    if ledger.exists() {
        tracing::warn!(
            global = %global.display(),
            "streams of an earlier `up` without accounts are left in the global account: the LEDGER account already has its own"
        );
        return Ok(false);
    }
    let running = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists());
    if let Some(pid) = running {
        anyhow::bail!(
            "process {pid} (named by {}) still runs and may be the nats-server of this store: stop it \
             before `up` moves the store's streams into the LEDGER account",
            pid_file.display()
        );
    }
    std::fs::rename(&global, &ledger)
        .with_context(|| format!("moving {} to {}", global.display(), ledger.display()))?;
    Ok(true)
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", dir.display()))
}

/// Replaces `path` with `text`, readable by its owner only (written beside it, then renamed).
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let partial = path.with_extension("partial");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))?;
    // The rename is durable only once the directory is: `passwords` holds the only copy of the
    // JetStream encryption key.
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenants(names: &[&str]) -> Vec<Tenant> {
        names.iter().map(|n| Tenant::parse(n).unwrap()).collect()
    }

    #[test]
    fn the_producer_template_repeats_per_tenant_and_nothing_else_changes() {
        let data = tempfile::tempdir().unwrap();
        let ids = Identities::load_or_create(data.path(), tenants(&["globex", "ini-tech"])).unwrap();
        let conf = ids.server_config().unwrap();
        assert!(conf.contains("user: producer_globex"), "{conf}");
        assert!(conf.contains("\"atl.in.ini-tech.tool.>\""), "{conf}");
        assert!(conf.contains("\"_INBOX.producer_ini-tech.>\""), "{conf}");
        assert!(!conf.contains("acme\""), "the template itself is gone");
        assert!(!conf.contains("$TOOLLEDGER_NATS_PRODUCER"), "{conf}");
        // Everything outside the template is the shipped text.
        let (before, _, after) = split_producer_template(SHIPPED).unwrap();
        assert!(conf.contains(before) && conf.ends_with(after));
        assert!(before.ends_with('\n') && before.contains("user: reader"));
        assert!(after.trim_start().starts_with(']'), "{after}");
        // No tenants: no producers, and still the shipped structure.
        let none = Identities::load_or_create(data.path(), Vec::new()).unwrap();
        assert!(!none.server_config().unwrap().contains("producer_"));
    }

    #[test]
    fn a_hand_edited_secret_that_could_break_the_config_is_refused() {
        let data = tempfile::tempdir().unwrap();
        Identities::load_or_create(data.path(), Vec::new()).unwrap();
        let path = data.path().join("nats-auth/passwords");
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = text.replacen("admin=p", "admin=\"x\"\n}\np", 1);
        std::fs::write(&path, edited).unwrap();
        let error = Identities::load_or_create(data.path(), Vec::new()).err().unwrap();
        assert!(error.to_string().contains("not letters and digits"), "{error}");
    }

    #[test]
    fn the_global_account_moves_only_when_no_server_may_hold_it() {
        let data = tempfile::tempdir().unwrap();
        let store = data.path().join("nats");
        let global = store.join("jetstream/$G/streams");
        std::fs::create_dir_all(&global).unwrap();
        let pid_file = data.path().join("nats-server.pid");
        // A live process (this one) named by the pid file: refused, nothing moved.
        std::fs::write(&pid_file, std::process::id().to_string()).unwrap();
        assert!(adopt_global_account(&store, &pid_file).is_err());
        assert!(global.is_dir());
        // No such process: moved.
        std::fs::write(&pid_file, "999999999").unwrap();
        assert!(adopt_global_account(&store, &pid_file).unwrap());
        assert!(store.join("jetstream/LEDGER/streams").is_dir());
        // Both accounts: left as they are.
        std::fs::create_dir_all(&global).unwrap();
        assert!(!adopt_global_account(&store, &pid_file).unwrap());
        assert!(global.is_dir());
    }

    #[test]
    fn passwords_are_made_once_and_kept_private() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().unwrap();
        let first = Identities::load_or_create(data.path(), tenants(&["acme"])).unwrap();
        let again = Identities::load_or_create(data.path(), tenants(&["acme", "globex"])).unwrap();
        assert_eq!(first.url("ingest", "h:1"), again.url("ingest", "h:1"));
        assert_eq!(
            first.producer_url(&tenants(&["acme"])[0], "h:1"),
            again.producer_url(&tenants(&["acme"])[0], "h:1")
        );
        assert_ne!(
            first.url("ingest", "h:1"),
            first.url("admin", "h:1").replace("admin", "ingest")
        );
        let dir = data.path().join("nats-auth");
        again.write_urls("127.0.0.1:4222").unwrap();
        for file in ["passwords", "admin.url", "producer_globex.url"] {
            let mode = std::fs::metadata(dir.join(file)).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{file} is private");
        }
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o077, 0);
    }
}
