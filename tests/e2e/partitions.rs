//! A partitioned ledger through the binary (`docs/scaling.md`): `init --partitions 4`, producers of
//! several tenants, `ingest` writing every partition, `verify` checking each partition against its
//! own checkpoints, `project` and `rebuild` projecting each into its own projections, `serve`
//! reading each tenant in its partition; and `up --demo` over four partitions.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use toolledger_projector::{Generations, Store};
use toolledger_testkit::{ChildProcess, NatsFixture};
use toolledger_wire::partition::{Partition, Partitions};

use crate::toolledger;

struct Env {
    config: PathBuf,
    data: tempfile::TempDir,
}

impl Env {
    fn new(partitions: u16) -> Self {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("toolledger.toml");
        std::fs::write(
            &config,
            // Inputs offloaded (erasable), so erasure has a tenant's payloads to find.
            format!(
                "[ledger]\npartitions = {partitions}\ncheckpoint_interval_ms = 100\n\n[payloads]\n\
                 erasable_paths = [\"/data/model_input\", \"/data/call_input\"]\n"
            ),
        )
        .unwrap();
        Self { config, data }
    }

    fn spawn(&self, args: &[&str]) -> ChildProcess {
        let config = self.config.display().to_string();
        let data = self.data.path().display().to_string();
        ChildProcess::spawn(
            toolledger(),
            args,
            &[
                ("TOOLLEDGER_CONFIG", config.as_str()),
                ("TOOLLEDGER_DATA_DIR", data.as_str()),
                ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "warn"),
                ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ],
        )
    }

    fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut child = self.spawn(args);
        let status = child
            .wait_timeout(Duration::from_secs(120))
            .expect("the tool finishes");
        (status.success(), child.stdout(), child.stderr())
    }
}

/// Messages in each partition's ledger stream, and in ATL_CHECKPOINTS on each partition's subject.
fn counts(nats: &NatsFixture, partitions: Partitions) -> (Vec<u64>, Vec<u64>) {
    let runtime = crate::init::runtime();
    runtime.block_on(async {
        let js = jetstream::new(nats.client().await);
        let mut entries = Vec::new();
        let mut checkpoints = Vec::new();
        let stream = js.get_stream("ATL_CHECKPOINTS").await.unwrap();
        for partition in partitions.all() {
            let mut ledger = js.get_stream(partition.stream()).await.unwrap();
            entries.push(ledger.info().await.unwrap().state.messages);
            let subject = partition.checkpoint_subject();
            let mut subjects = stream.info_with_subjects(subject.clone()).await.unwrap();
            let mut signed = 0;
            while let Some(Ok((name, count))) = futures::StreamExt::next(&mut subjects).await {
                if name == subject {
                    signed = count as u64;
                }
            }
            checkpoints.push(signed);
        }
        (entries, checkpoints)
    })
}

#[test]
fn a_ledger_of_four_partitions_is_written_verified_projected_served_and_bundled_partition_by_partition() {
    let nats = NatsFixture::start();
    let url = nats.url();
    let env = Env::new(4);
    let partitions = Partitions::new(4).unwrap();
    let (ok, out, err) = env.run(&["init", "--nats-url", &url]);
    assert!(ok, "init failed\n{out}\n{err}");
    let events = env.data.path().join("events.ndjson");
    let tenants = "acme,globex,initech,umbrella,hooli,stark";
    let (ok, _, err) = env.run(&[
        "demo-data",
        "--sessions",
        "6",
        "--tenants",
        tenants,
        "--out",
        events.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let count = std::fs::read_to_string(&events).unwrap().lines().count() as u64;

    let mut ingest = env.spawn(&["ingest", "--nats-url", &url]);
    let (ok, out, err) = env.run(&["emit", events.to_str().unwrap(), "--nats-url", &url]);
    assert!(ok, "emit failed\n{out}\n{err}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        // Every event, and p0's record of the partition rule.
        let (entries, _) = counts(&nats, partitions);
        if entries.iter().sum::<u64>() == count + 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{entries:?} of {count}\n{}",
            ingest.stderr()
        );
        assert!(
            ingest.try_status().is_none(),
            "ingest exited\n{}",
            ingest.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = ingest.terminate(Duration::from_secs(30)).expect("ingest stops");
    assert!(status.success(), "{}", ingest.stderr());
    let (entries, checkpoints) = counts(&nats, partitions);
    assert!(
        entries.iter().filter(|n| **n > 0).count() >= 2,
        "six tenants over four partitions: {entries:?}"
    );
    for (entries, checkpoints) in entries.iter().zip(&checkpoints) {
        assert_eq!(
            *entries > 0,
            *checkpoints > 0,
            "{entries} entries, {checkpoints} checkpoints"
        );
    }

    let (ok, out, err) = env.run(&["verify", "--nats-url", &url]);
    assert!(ok, "verify failed\n{out}\n{err}");
    for (partition, entries) in partitions.all().zip(&entries) {
        assert!(
            out.contains(&format!("partition {partition} ({})", partition.stream())),
            "{out}"
        );
        assert!(
            out.contains(&format!("{entries} entries of {}", partition.stream())),
            "{out}"
        );
    }
    // And the directory over them: its tree, its checkpoints, each entry against the checkpoints it
    // names.
    assert!(
        out.contains("toolledger verify: directory (ATL_DIRECTORY)"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("toolledger verify: ok"), "{out}");
    let (ok, out, err) = env.run(&["verify", "--nats-url", &url, "--json"]);
    assert!(ok, "verify --json failed\n{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["partitions"].as_array().unwrap().len(), 4);
    assert_eq!(report["directory"]["ledger_stream"], "ATL_DIRECTORY");
    assert!(report["directory"]["entries"].as_u64().unwrap() >= 1, "{out}");
    assert!(
        report["directory"]["trusted_checkpoints"].as_u64().unwrap() >= 1,
        "{out}"
    );
    // Proofs in a tenant's partition and in the directory check offline with the verifier key.
    let verifiers = toolledger_merkle::Verifiers::parse(
        &std::fs::read_to_string(env.data.path().join("keys/checkpoint.pub")).unwrap(),
    )
    .unwrap();
    let tenant = partitions
        .all()
        .zip(&entries)
        .filter(|(partition, entries)| partition.index() > 0 && **entries > 0)
        .find_map(|(partition, _)| {
            tenants
                .split(',')
                .find(|tenant| partitions.of(tenant) == partition)
        })
        .expect("a tenant outside p0");
    let home = format!("/{}", partitions.of(tenant));
    for (what, args, origin) in [
        (tenant, &["--tenant", tenant][..], home.as_str()),
        ("the directory", &["--directory"][..], "/directory"),
    ] {
        let mut command = vec!["prove", "--nats-url", &url, "--seq", "1"];
        command.extend_from_slice(args);
        let (ok, out, err) = env.run(&command);
        assert!(ok, "prove in {what} failed\n{out}\n{err}");
        let proof: toolledger_verify::InclusionOutput = serde_json::from_str(&out).unwrap();
        proof.check(&verifiers).unwrap();
        let signed_origin = proof.checkpoint.lines().next().unwrap_or_default();
        assert!(signed_origin.ends_with(origin), "{what}: {signed_origin}");
    }
    let (ok, out, err) = env.run(&["verify", "--nats-url", &url, "--partition", "2", "--json"]);
    assert!(ok, "verify --partition 2 failed\n{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["ledger_stream"], "ATL_LEDGER_P2");
    assert_eq!(report["entries"], entries[2]);
    assert_eq!(report["findings"].as_array().unwrap().len(), 0, "{out}");
    let (ok, _, err) = env.run(&["verify", "--nats-url", &url, "--partition", "4"]);
    assert!(!ok && err.contains("4 partition(s)"), "{err}");

    project_and_rebuild_every_partition(
        env.data.path(),
        partitions,
        &entries,
        |args| env.spawn(args),
        |args| env.run(args),
        &url,
    );

    // One archive for every partition: each partition's manifests its own, its tenants' files in
    // their folders; verify --parquet checks each partition's log out of it.
    let archive = env.data.path().join("parquet");
    let export = || {
        env.run(&[
            "export",
            "--nats-url",
            &url,
            "--prefix",
            archive.to_str().unwrap(),
            "--until-caught-up",
        ])
    };
    let (ok, out, err) = export();
    assert!(ok, "export failed\n{out}\n{err}");
    for partition in partitions.all() {
        assert!(
            out.contains(&format!("{} exported through seq", partition.stream())),
            "{out}"
        );
    }
    assert!(archive.join("events/_manifest").is_dir());
    for (partition, entries) in partitions.all().zip(&entries).skip(1) {
        let manifests = archive.join(format!("events/_manifest_p{}", partition.index()));
        assert_eq!(manifests.is_dir(), *entries > 0, "{partition}");
    }
    let (ok, out, err) = env.run(&["verify", "--parquet", archive.to_str().unwrap(), "--json"]);
    assert!(ok, "verify --parquet failed\n{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let exported: Vec<u64> = report["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["report"]["entries"].as_u64().unwrap())
        .collect();
    assert_eq!(
        exported, entries,
        "every partition's entries, each in its own log"
    );
    for (partition, entries) in report["partitions"].as_array().unwrap().iter().zip(&entries) {
        let report = &partition["report"];
        assert_eq!(
            report["signed_size"].as_u64().unwrap() > 0,
            *entries > 0,
            "each partition's own checkpoints match its tree: {report}"
        );
        assert_eq!(report["findings"].as_array().unwrap().len(), 0, "{report}");
    }
    // A second run recovers each partition from its own newest manifests and writes nothing new.
    let (ok, out, err) = export();
    assert!(ok, "export again failed\n{out}\n{err}");
    let (ok, out, err) = env.run(&["verify", "--parquet", archive.to_str().unwrap()]);
    assert!(ok, "verify --parquet after a second export failed\n{out}\n{err}");

    // A bundle of a session of that tenant comes from its partition's projection and log, and
    // verifies offline; its checkpoint names the partition's origin.
    let home = partitions.of(tenant);
    let session: String = {
        let generation = Generations::of(env.data.path(), home).current().unwrap().unwrap();
        Store::open_readonly(&generation.database())
            .unwrap()
            .connection()
            .query_row(
                "SELECT session_id FROM events WHERE tenant = ?1 AND session_id IS NOT NULL LIMIT 1",
                [tenant],
                |row| row.get(0),
            )
            .unwrap()
    };
    // With --with-directory it also carries the proof that the newest signed directory checkpoint
    // commits to its checkpoint: one signed value vouches for it.
    let bundle = env.data.path().join("session.bundle");
    let (ok, out, err) = env.run(&[
        "bundle",
        "--nats-url",
        &url,
        "--tenant",
        tenant,
        "--session",
        &session,
        "--with-directory",
        "--out",
        bundle.to_str().unwrap(),
    ]);
    assert!(ok, "bundle failed\n{out}\n{err}");
    assert!(out.contains(&format!("/{home}")), "the partition's origin\n{out}");
    let key = env.data.path().join("keys/checkpoint.pub");
    let (ok, out, err) = env.run(&[
        "verify-bundle",
        bundle.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    assert!(ok, "verify-bundle failed\n{out}\n{err}");
    assert!(
        out.contains("in the directory: entry") && out.contains(&format!("names partition {home} at size")),
        "{out}"
    );
    // A directory entry that names another root for the partition does not verify.
    let mut forged: serde_json::Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    forged["directory"]["consistency"] = serde_json::json!(["00".repeat(32)]);
    let forged_path = env.data.path().join("forged.bundle");
    let mut bytes = toolledger_wire::jcs::to_vec(&forged).unwrap();
    bytes.push(b'\n');
    std::fs::write(&forged_path, bytes).unwrap();
    let (ok, out, err) = env.run(&[
        "verify-bundle",
        forged_path.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("directory proof does not hold"),
        "{out}\n{err}"
    );
    // The independent verifier, written from docs/evidence-bundles.md alone, agrees on both.
    let verdicts = crate::bundle::python_verdicts(&key, &[&bundle, &forged_path]);
    assert!(verdicts[0].starts_with("ok "), "{verdicts:?}");
    assert!(verdicts[1].starts_with("rejected: "), "{verdicts:?}");

    serve_reads_each_tenant_in_its_partition(&env, &url, partitions, tenant, &session, &verifiers);

    // The CLI's readers of the projections find a tenant in its partition's; without a tenant
    // they say what to add.
    let (ok, out, err) = env.run(&["session", &session, "--tenant", tenant, "--json"]);
    assert!(ok, "session failed\n{out}\n{err}");
    assert!(out.contains(&session), "{out}");
    let (ok, out, err) = env.run(&["search", "--tenant", tenant, "--json"]);
    assert!(ok && out.contains(tenant), "search failed\n{out}\n{err}");
    let (ok, _, err) = env.run(&["search", "--json"]);
    assert!(!ok && err.contains("name the tenant with --tenant"), "{err}");
    let (ok, out, err) = env.run(&[
        "query",
        "--tenant",
        tenant,
        "--json",
        "SELECT count(*) AS n FROM events",
    ]);
    assert!(ok, "query failed\n{out}\n{err}");
    let (ok, out, err) = env.run(&[
        "replay",
        "--tenant",
        tenant,
        "--session",
        &session,
        "--speed",
        "0",
        "--nats-url",
        &url,
    ]);
    assert!(ok, "replay failed\n{out}\n{err}");
    assert!(!out.trim().is_empty(), "replay printed nothing\n{err}");

    // Backed up whole (every partition, the directory as far as it is signed) and restored into a
    // fresh server made for four partitions, the ledger verifies there as here.
    let backup = env.data.path().join("backup");
    let (ok, out, err) = env.run(&["backup", "--nats-url", &url, "--out", backup.to_str().unwrap()]);
    assert!(ok, "backup failed\n{out}\n{err}");
    assert!(out.contains("entries of ATL_LEDGER_P2"), "{out}");
    let fresh = NatsFixture::start();
    let fresh_url = fresh.url();
    let (ok, out, err) = env.run(&["init", "--nats-url", &fresh_url]);
    assert!(ok, "init of the fresh server failed\n{out}\n{err}");
    let (ok, out, err) = env.run(&["restore", backup.to_str().unwrap(), "--nats-url", &fresh_url]);
    assert!(ok, "restore failed\n{out}\n{err}");
    let (ok, out, err) = env.run(&["verify", "--nats-url", &fresh_url]);
    assert!(ok, "verify of the restored ledger failed\n{out}\n{err}");
    assert!(
        out.contains("toolledger verify: directory (ATL_DIRECTORY)"),
        "{out}"
    );
    // The same roots, partition by partition.
    let roots = |url: &str| -> Vec<String> {
        let (ok, out, err) = env.run(&["verify", "--nats-url", url, "--json", "--no-payloads"]);
        assert!(ok, "{out}\n{err}");
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        report["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["report"]["root"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(roots(&fresh_url), roots(&url));
    drop(fresh);
    // Into a server made for one partition it is refused before anything is written.
    let single = NatsFixture::start();
    let single_url = single.url();
    let one = Env::new(1);
    let (ok, out, err) = one.run(&["init", "--nats-url", &single_url]);
    assert!(ok, "{out}\n{err}");
    let (ok, _, err) = one.run(&["restore", backup.to_str().unwrap(), "--nats-url", &single_url]);
    assert!(!ok && err.contains("ATL_LEDGER_P1"), "{err}");
    let written = crate::init::runtime().block_on(async {
        let js = jetstream::new(single.client().await);
        toolledger_ledger::last_sequence(&js, "ATL_LEDGER").await.unwrap()
    });
    assert_eq!(written, 0, "a refused restore writes nothing");

    // doctor checks each partition's checkpoints, projection and projector, and the partitioned
    // contract (the directory's stream included).
    let (_, out, err) = env.run(&["doctor", "--nats-url", &url, "--json"]);
    let checks: Vec<serde_json::Value> =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}\n{err}"));
    let status = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("no check {name}\n{out}"))
    };
    assert_eq!(status("streams"), "ok", "{out}");
    for partition in partitions.all() {
        assert_eq!(status(&format!("checkpoints {partition}")), "ok", "{out}");
        assert_eq!(status(&format!("projection {partition}")), "ok", "{out}");
        // No projector runs now: its heartbeat says stopped.
        assert_eq!(status(&format!("projector {partition}")), "fail", "{out}");
    }

    // Erasure finds the tenant's payloads in its partition.
    let (ok, out, err) = env.run(&[
        "erase",
        "--nats-url",
        &url,
        "--tenant",
        tenant,
        "--all",
        "--reason",
        "a data-subject request",
        "--dry-run",
    ]);
    assert!(ok, "erase --dry-run failed\n{out}\n{err}");
    let would: u64 = out
        .split("would erase ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(would > 0, "the tenant's offloaded inputs\n{out}");

    // Directory entries that do not hold, each a finding: a size its checkpoint did not sign, a
    // checkpoint of another partition, no checkpoint but a tree, and a partition going back.
    crate::init::runtime().block_on(async {
        use toolledger_wire::directory::{self, DirectoryEntry};
        let js = jetstream::new(nats.client().await);
        let last = toolledger_ledger::last_sequence(&js, directory::STREAM)
            .await
            .unwrap();
        let bytes = toolledger_ledger::message(&js, directory::STREAM, last)
            .await
            .unwrap();
        let entry = DirectoryEntry::parse(&bytes).unwrap();
        let mut wrong_size = entry.clone();
        wrong_size.partitions[0].size += 1;
        let mut wrong_subject = entry.clone();
        wrong_subject.partitions[1].checkpoint_seq = entry.partitions[0].checkpoint_seq;
        let mut no_checkpoint = entry.clone();
        no_checkpoint.partitions[2].checkpoint_seq = 0;
        no_checkpoint.partitions[2].size = 3;
        let mut back = entry.clone();
        back.partitions[0].checkpoint_seq = 0;
        back.partitions[0].size = 0;
        back.partitions[0].root = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=".to_owned();
        for forged in [wrong_size, wrong_subject, no_checkpoint, back] {
            js.publish(directory::SUBJECT, forged.to_bytes().unwrap().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    let (ok, out, err) = env.run(&["verify", "--nats-url", &url]);
    assert!(!ok, "verify passed forged directory entries\n{out}");
    for reason in [
        "p0: names size",
        "p1: checkpoint seq",
        "p2: names no checkpoint but a tree that is not empty",
        "p0 goes back from size",
    ] {
        assert!(out.contains(reason), "{reason}\n{out}\n{err}");
    }
    let (ok, out, err) = env.run(&["verify", "--nats-url", &url, "--partition", "0"]);
    assert!(ok, "p0 alone still verifies\n{out}\n{err}");

    // An entry of another partition's tenant appended to p2 (copied from the first partition after
    // p0 that has entries) is a finding: the partition rule says where every tenant's events are.
    let (from, _) = partitions
        .all()
        .zip(&entries)
        .find(|(partition, entries)| partition.index() != 2 && partition.index() > 0 && **entries > 0)
        .or_else(|| partitions.all().zip(&entries).find(|(p, _)| p.index() == 0))
        .unwrap();
    crate::init::runtime().block_on(async {
        let js = jetstream::new(nats.client().await);
        let (_, bytes) = toolledger_ledger::read_range(&js, &from.stream(), 1, 1)
            .await
            .unwrap()
            .remove(0);
        let entry = toolledger_wire::LedgerEntry::parse(&bytes).unwrap();
        let tenant = entry.event.extension_str("tenant").unwrap().to_owned();
        js.publish(format!("atl.p2.ledger.{tenant}.{}", entry.event.ty()), bytes)
            .await
            .unwrap()
            .await
            .unwrap();
    });
    let (ok, out, err) = env.run(&["verify", "--nats-url", &url, "--partition", "2"]);
    assert!(!ok, "verify passed a misplaced entry\n{out}");
    assert!(out.contains("misplaced: an entry of tenant"), "{out}\n{err}");

    // A configuration with another count is refused before anything is written.
    let one = Env::new(1);
    let (ok, _, err) = one.run(&["init", "--nats-url", &url]);
    assert!(!ok && err.contains("ATL_LEDGER_P1 exists"), "{err}");
}

#[test]
fn up_demo_runs_over_four_partitions_and_verifies_the_demo_tenants() {
    // And the web view over it, in headless Chromium: the admin names the tenant to list, and an
    // invocation verifies in its partition (tests/browser/partitions.mjs).
    let stdout = crate::query::up_demo(4, |data, api, token| {
        let Some(script_dir) = crate::web::browser_or_skip() else {
            return;
        };
        let key = std::fs::read_to_string(data.join("keys/checkpoint.pub")).unwrap();
        crate::web::run_browser_script(
            &script_dir,
            "partitions.mjs",
            "the web view over four partitions",
            &[
                ("TOOLLEDGER_UI_BASE", format!("http://{api}")),
                ("TOOLLEDGER_UI_ADMIN_TOKEN", token.to_owned()),
                ("TOOLLEDGER_UI_TENANT", "acme".to_owned()),
                ("TOOLLEDGER_UI_KEY", key.trim().to_owned()),
            ],
            &[
                "partitions-tenant-required",
                "partitions-sessions",
                "partitions-verification",
            ],
            String::new,
        );
    });
    // The demo tenant's events are in its partition, projected and verified there.
    let home = Partitions::new(4).unwrap().of("acme");
    assert!(stdout.contains(&format!("{} holds", home.stream())), "{stdout}");
    assert!(stdout.contains("projector running: 4 partitions"), "{stdout}");
}

/// `toolledger serve` over the partitioned ledger: a tenant's reads, bundles and replays come from
/// its partition; checkpoints and proofs from the partition (or directory) named; an admin's
/// listing without a tenant is a 400 saying what to add; `/healthz` names each partition.
fn serve_reads_each_tenant_in_its_partition(
    env: &Env,
    url: &str,
    partitions: Partitions,
    tenant: &str,
    session: &str,
    verifiers: &toolledger_merkle::Verifiers,
) {
    use crate::query::{post_sql, request};
    // An admin's token and the tenant's.
    let (admin, own) = ("partitions-admin-token", "partitions-tenant-token");
    let mut config = std::fs::read_to_string(&env.config).unwrap();
    config.push_str(&format!(
        "\n[[api.tokens]]\nname = \"auditor\"\nsha256 = \"{}\"\nadmin = true\n\n\
         [[api.tokens]]\nname = \"{tenant}-app\"\nsha256 = \"{}\"\ntenants = [\"{tenant}\"]\n",
        toolledger_query::token_digest(admin),
        toolledger_query::token_digest(own),
    ));
    std::fs::write(&env.config, config).unwrap();
    let mut serve = env.spawn(&["serve", "--listen", "127.0.0.1:0", "--nats-url", url]);
    let addr = crate::health::printed_addr(&mut serve, "api at http://");
    let home = partitions.of(tenant);
    let get = |path: &str| request(addr, "GET", path, Some(admin));
    let get_own = |path: &str| request(addr, "GET", path, Some(own));

    let sessions = get(&format!("/v1/sessions?tenant={tenant}"));
    assert_eq!(sessions.status, 200, "{}", sessions.body);
    assert!(sessions.body.contains(session), "{}", sessions.body);
    let found = get(&format!("/v1/invocations?tenant={tenant}&session_id={session}"));
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(
        !found.json()["items"].as_array().unwrap().is_empty(),
        "{}",
        found.body
    );
    let unscoped = get("/v1/sessions");
    assert_eq!(unscoped.status, 400, "{}", unscoped.body);
    assert_eq!(unscoped.json()["error"]["field"], "tenant", "{}", unscoped.body);
    assert!(unscoped.body.contains("4 partitions"), "{}", unscoped.body);

    // An admin's bundle without a tenant finds the session's owner in whichever partition holds it;
    // it is proved in that partition's log and verifies offline.
    let bundle = get(&format!("/v1/sessions/{session}/bundle?with_directory=true"));
    assert_eq!(bundle.status, 200, "{}", bundle.body);
    let path = env.data.path().join("served.bundle");
    std::fs::write(&path, &bundle.body).unwrap();
    let key = env.data.path().join("keys/checkpoint.pub");
    let (ok, out, err) = env.run(&[
        "verify-bundle",
        path.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    assert!(ok, "verify-bundle of the served bundle failed\n{out}\n{err}");
    assert!(out.contains("in the directory: entry"), "{out}");
    assert!(
        bundle.body.contains(&format!("/{home}")),
        "the partition's origin"
    );

    let replayed = get(&format!("/v1/sessions/{session}/replay?tenant={tenant}&speed=0"));
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    let lines: Vec<serde_json::Value> = replayed
        .body
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(
        !lines.is_empty() && lines.iter().all(|line| line["seq"].is_u64()),
        "every line an entry of the session, none an error: {}",
        replayed.body
    );

    // Checkpoints and proofs of the log named: a partition by index, or the directory.
    for (log, origin) in [
        (home.index().to_string(), format!("/{home}")),
        ("directory".to_owned(), "/directory".to_owned()),
    ] {
        let checkpoint = get(&format!("/v1/checkpoints/latest?partition={log}"));
        assert_eq!(checkpoint.status, 200, "{}", checkpoint.body);
        let note = checkpoint.json()["note"].as_str().unwrap().to_owned();
        assert!(note.lines().next().unwrap().ends_with(&origin), "{note}");
        let proof = get(&format!("/v1/proofs/inclusion?seq=1&partition={log}"));
        assert_eq!(proof.status, 200, "{}", proof.body);
        let proof: toolledger_verify::InclusionOutput = serde_json::from_str(&proof.body).unwrap();
        proof.check(verifiers).unwrap();
        assert!(proof.checkpoint.lines().next().unwrap().ends_with(&origin));
    }
    let beyond = get("/v1/checkpoints/latest?partition=4");
    assert_eq!(beyond.status, 400, "{}", beyond.body);
    assert_eq!(beyond.json()["error"]["field"], "partition");

    // Analysts' SQL: a tenant's in its partition; an admin's names the partition it reads.
    let sql = |body: &str| post_sql(addr, Some(admin), body);
    let scoped = sql(&format!(
        r#"{{"sql": "SELECT count(*) AS n FROM events", "tenant": "{tenant}"}}"#
    ));
    assert_eq!(scoped.status, 200, "{}", scoped.body);
    assert!(
        scoped.json()["rows"][0][0].as_u64().unwrap() > 0,
        "{}",
        scoped.body
    );
    let admin = sql(&format!(
        r#"{{"sql": "SELECT DISTINCT tenant FROM events", "partition": {}}}"#,
        home.index()
    ));
    assert_eq!(admin.status, 200, "{}", admin.body);
    assert!(admin.body.contains(tenant), "{}", admin.body);
    let unnamed = sql(r#"{"sql": "SELECT 1"}"#);
    assert_eq!(unnamed.status, 400, "{}", unnamed.body);
    assert_eq!(unnamed.json()["error"]["field"], "partition", "{}", unnamed.body);

    // The tenant's token: its sessions without naming it; its entries' proofs in its partition
    // (`tenant` routes there); nothing of another partition's tenants; SQL over its partition or
    // p0 (the ledger's records about it), no other.
    let listed = get_own("/v1/sessions");
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.body.contains(session), "{}", listed.body);
    let first_seq: u64 = {
        let generation = Generations::of(env.data.path(), home).current().unwrap().unwrap();
        Store::open_readonly(&generation.database())
            .unwrap()
            .connection()
            .query_row("SELECT min(seq) FROM events WHERE tenant = ?1", [tenant], |row| {
                row.get(0)
            })
            .unwrap()
    };
    let proof = get_own(&format!("/v1/proofs/inclusion?seq={first_seq}&tenant={tenant}"));
    assert_eq!(proof.status, 200, "{}", proof.body);
    let proof: toolledger_verify::InclusionOutput = serde_json::from_str(&proof.body).unwrap();
    proof.check(verifiers).unwrap();
    assert!(
        proof
            .checkpoint
            .lines()
            .next()
            .unwrap()
            .ends_with(&format!("/{home}"))
    );
    let elsewhere = partitions.all().find(|p| *p != home).unwrap();
    let theirs = get_own(&format!(
        "/v1/proofs/inclusion?seq=1&partition={}",
        elsewhere.index()
    ));
    assert_eq!(theirs.status, 404, "another partition's entry: {}", theirs.body);
    let crossed = get_own(&format!(
        "/v1/proofs/inclusion?seq=1&tenant={tenant}&partition={}",
        elsewhere.index()
    ));
    assert_eq!(crossed.status, 400, "{}", crossed.body);
    let own_sql = |body: &str| post_sql(addr, Some(own), body);
    let counted = own_sql(r#"{"sql": "SELECT count(*) FROM events"}"#);
    assert_eq!(counted.status, 200, "{}", counted.body);
    assert!(
        counted.json()["rows"][0][0].as_u64().unwrap() > 0,
        "{}",
        counted.body
    );
    let ledger_records = own_sql(r#"{"sql": "SELECT count(*) FROM access_reads", "partition": 0}"#);
    assert_eq!(ledger_records.status, 200, "{}", ledger_records.body);
    if let Some(other) = partitions.all().find(|p| *p != home && *p != Partition::ZERO) {
        let refused = own_sql(&format!(
            r#"{{"sql": "SELECT count(*) FROM events", "partition": {}}}"#,
            other.index()
        ));
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.json()["error"]["field"], "partition");
    }

    // Health names each partition's projection and projector (none runs now: they say stopped).
    let health = request(addr, "GET", "/healthz", None).json();
    for partition in partitions.all() {
        let projection = &health["components"][partition.file_name("projection")];
        assert_eq!(projection["ok"], true, "{partition}: {health}");
        let projector = &health["components"][partition.file_name("projector")];
        assert_eq!(projector["ok"], false, "{partition}: {health}");
    }
    let status = serve.terminate(Duration::from_secs(30)).expect("serve stops");
    assert!(status.success(), "{}", serve.stderr());
}

/// Two ingest processes' data directories, each with the ledger's one signing key (from `data`) and
/// one scrubber key: every ingest of a ledger needs both, or an event carrying a secret that one
/// appended and the other is redelivered compares unequal (`duplicate_conflict`, docs/ingest.md).
pub(crate) fn ingest_data_dirs(data: &Path) -> [tempfile::TempDir; 2] {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let scrub_key = data.join(toolledger_ingest::scrub::KEY_FILE_NAME);
    toolledger_ingest::scrub::ScrubKey::load_or_create(&scrub_key).unwrap();
    for dir in &dirs {
        std::fs::create_dir_all(dir.path().join("keys")).unwrap();
        std::fs::copy(
            data.join("keys/checkpoint.key"),
            dir.path().join("keys/checkpoint.key"),
        )
        .unwrap();
        std::fs::copy(
            &scrub_key,
            dir.path().join(toolledger_ingest::scrub::KEY_FILE_NAME),
        )
        .unwrap();
    }
    dirs
}

/// `project` (every partition, one process) until each partition's projection holds its stream's
/// `last` entries, then `rebuild`: each partition's projection holds its own tenants only, every
/// entry once, and its rebuild equals its incremental projection.
pub(crate) fn project_and_rebuild_every_partition(
    data: &Path,
    partitions: Partitions,
    last: &[u64],
    spawn: impl Fn(&[&str]) -> ChildProcess,
    run: impl Fn(&[&str]) -> (bool, String, String),
    url: &str,
) {
    let projected = |partition: Partition| {
        let generation = Generations::of(data, partition).current().ok().flatten()?;
        let store = Store::open_readonly(&generation.database()).ok()?;
        Some((generation, store.position().ok()?))
    };
    let mut project = spawn(&["project", "--nats-url", url]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !partitions
        .all()
        .zip(last)
        .all(|(partition, last)| projected(partition).is_some_and(|(_, at)| at == *last))
    {
        assert!(
            Instant::now() < deadline && project.try_status().is_none(),
            "projections not at {last:?}\n{}",
            project.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = project.terminate(Duration::from_secs(30)).expect("project stops");
    assert!(status.success(), "{}", project.stderr());
    for partition in partitions.all() {
        assert!(
            project
                .stdout()
                .contains(&format!("{}: stopped at seq", partition.stream())),
            "{}",
            project.stdout()
        );
    }

    let mut incremental = Vec::new();
    for (partition, last) in partitions.all().zip(last) {
        let (generation, _) = projected(partition).unwrap();
        let store = Store::open_readonly(&generation.database()).unwrap();
        let (count, max): (u64, Option<u64>) = store
            .connection()
            .query_row("SELECT count(*), max(seq) FROM events", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((count, max.unwrap_or(0)), (*last, *last), "{partition}");
        let mut tenants = store
            .connection()
            .prepare("SELECT DISTINCT tenant FROM events")
            .unwrap();
        let tenants: Vec<String> = tenants
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for tenant in tenants {
            assert_eq!(partitions.of(&tenant), partition, "tenant {tenant}");
        }
        incremental.push((generation, store.table_contents().unwrap()));
    }

    let (ok, out, err) = run(&["rebuild", "--nats-url", url]);
    assert!(ok, "rebuild failed\n{out}\n{err}");
    for (partition, (before, tables)) in partitions.all().zip(&incremental) {
        let rebuilt = Generations::of(data, partition).current().unwrap().unwrap();
        assert!(rebuilt.number > before.number, "{partition}: {out}");
        let rebuilt = Store::open_readonly(&rebuilt.database())
            .unwrap()
            .table_contents()
            .unwrap();
        assert_eq!(
            rebuilt.keys().collect::<Vec<_>>(),
            tables.keys().collect::<Vec<_>>()
        );
        for (table, rows) in tables {
            assert!(
                rows == &rebuilt[table],
                "{partition}: table {table} differs between the rebuild and the incremental projection"
            );
        }
    }
}

/// Every partition's entries as each tenant's event ids in ledger order, every entry checked to be
/// in its tenant's partition, and the partition rule's record (tenant `_system`, in p0) checked to
/// be there once and left out.
pub(crate) async fn ids_by_tenant_in_their_partitions(
    js: &jetstream::Context,
    partitions: Partitions,
    seed: u64,
) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut landed: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for partition in partitions.all() {
        let stream = partition.stream();
        let tail = toolledger_ledger::last_sequence(js, &stream).await.unwrap();
        for (_, bytes) in toolledger_ledger::read_range(js, &stream, 1, tail).await.unwrap() {
            let entry = toolledger_wire::LedgerEntry::parse(&bytes).unwrap();
            let tenant = entry
                .event
                .extension("tenant")
                .map(|t| t.to_string())
                .unwrap_or_default();
            assert_eq!(
                partitions.of(&tenant),
                partition,
                "seed {seed}: {tenant} in {partition}"
            );
            landed
                .entry(tenant)
                .or_default()
                .push(entry.event.id().to_owned());
        }
    }
    // p0's writer recorded the partition rule, once however often p0 changed hands.
    if partitions.count() > 1 {
        assert_eq!(
            landed.remove("_system"),
            Some(vec![format!("partitions-{}", partitions.count())]),
            "seed {seed}: the partition rule's record, once"
        );
    }
    landed
}

/// The events' ids tenant by tenant, in the order produced.
pub(crate) fn ids_by_tenant(events: &[serde_json::Value]) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut produced: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for event in events {
        produced
            .entry(event["tenant"].as_str().unwrap().to_owned())
            .or_default()
            .push(event["id"].as_str().unwrap().to_owned());
    }
    produced
}

/// Waits (30 s at most) until every partition's lease is held and not lapsed.
pub(crate) async fn wait_until_every_partition_is_leased(js: &jetstream::Context, partitions: Partitions) {
    let store = js.get_key_value("ATL_LEASES").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut leased = 0;
        for partition in partitions.all() {
            let record = store
                .get(partition.lease_key())
                .await
                .ok()
                .flatten()
                .and_then(|value| {
                    serde_json::from_slice::<toolledger_ingest::lease::LeaseRecord>(&value).ok()
                });
            leased += usize::from(record.is_some_and(|r| r.expires_at_ms > now));
        }
        if leased == usize::from(partitions.count()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{leased} of {} partitions leased",
            partitions.count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGKILL cycles of the partitioned fault test (at least ten).
const KILL_CYCLES: usize = 12;
const FAULT_TENANTS: [&str; 8] = [
    "acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell",
];

/// A `toolledger ingest` of the four-partition ledger with short leases, in its own data directory.
fn spawn_writer(env: &Env, url: &str, data: &std::path::Path) -> ChildProcess {
    let config = env.config.display().to_string();
    ChildProcess::spawn(
        toolledger(),
        [
            "ingest",
            "--nats-url",
            url,
            "--ack-wait-ms",
            "800",
            "--lease-ttl-ms",
            "900",
            "--batch-size",
            "64",
        ],
        &[
            ("TOOLLEDGER_CONFIG", config.as_str()),
            ("TOOLLEDGER_DATA_DIR", data.to_str().unwrap()),
            ("TOOLLEDGER_TELEMETRY__METRICS_LISTEN", "127.0.0.1:0"),
            ("TOOLLEDGER_TELEMETRY__LOG_FILTER", "info"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_of_four_partitions_killed_at_random_moments_lose_and_repeat_nothing() {
    let seed = crate::fixture::fault_seed();
    println!("fault seed {seed} (TOOLLEDGER_FAULT_SEED={seed} replays it)");
    let mut rng = crate::fixture::Rng(seed);
    let nats = NatsFixture::start();
    let url = nats.url();
    let js = jetstream::new(nats.client().await);
    let env = Env::new(4);
    let partitions = Partitions::new(4).unwrap();
    let (ok, out, err) = tokio::task::block_in_place(|| env.run(&["init", "--nats-url", &url]));
    assert!(ok, "init failed\n{out}\n{err}");
    // Two ingest processes, each with a data directory of its own and the ledger's one signing
    // key and scrubber key.
    let dirs = ingest_data_dirs(env.data.path());

    let events = toolledger_schemas::generator::generate(&toolledger_schemas::generator::GeneratorConfig {
        seed,
        sessions: 16,
        tenants: FAULT_TENANTS.iter().map(|t| (*t).to_owned()).collect(),
        ..Default::default()
    })
    .events;
    let producer = {
        let js = js.clone();
        let events = events.clone();
        tokio::spawn(async move {
            let mut acked = 0;
            for chunk in events.chunks(24) {
                let outgoing =
                    toolledger_wire::produce::prepare_all(chunk, toolledger_wire::Mode::Binary).unwrap();
                let report = toolledger_wire::produce::publish_all(&js, outgoing).await;
                assert!(report.failed.is_empty(), "{:?}", report.failed);
                acked += report.published;
                // Spread over the kill cycles, so writers die under load.
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            acked
        })
    };

    let started = Instant::now();
    let mut writers = [
        spawn_writer(&env, &url, dirs[0].path()),
        spawn_writer(&env, &url, dirs[1].path()),
    ];
    let mut logs = Vec::new();
    for cycle in 0..KILL_CYCLES {
        tokio::time::sleep(rng.between(300, 1500)).await;
        let victim = (rng.next_u64() % 2) as usize;
        writers[victim].kill9();
        for line in writers[victim].stderr().lines().filter(|l| !l.trim().is_empty()) {
            logs.push(format!("cycle {cycle}, writer {victim}: {line}"));
        }
        writers[victim] = spawn_writer(&env, &url, dirs[victim].path());
    }
    let acked = producer.await.unwrap();
    assert_eq!(acked, events.len(), "every event acked by ATL_INBOUND");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut inbound = js.get_stream("ATL_INBOUND").await.unwrap();
        if inbound.info().await.unwrap().state.messages == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the inbox did not drain\n{}",
            logs.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every partition has a live writer again, so stopping them signs every partition's tail.
    wait_until_every_partition_is_leased(&js, partitions).await;
    for writer in &mut writers {
        let status = writer
            .terminate(Duration::from_secs(30))
            .expect("ingest stops on SIGTERM");
        assert!(status.success(), "{}", writer.stderr());
    }
    println!(
        "{KILL_CYCLES} kill cycles over two writers of four partitions in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // Every acked event exactly once, in its tenant's partition, in its tenant's order.
    let landed = ids_by_tenant_in_their_partitions(&js, partitions, seed).await;
    let produced = ids_by_tenant(&events);
    for (tenant, expected) in &produced {
        let ids = landed.get(tenant).cloned().unwrap_or_default();
        assert_eq!(
            ids,
            *expected,
            "seed {seed}: {tenant}'s events exactly once, in order\n{}",
            logs.join("\n")
        );
    }
    assert_eq!(
        landed.len(),
        produced.len(),
        "seed {seed}: no tenant of its own making"
    );

    // Every partition and its checkpoints verify, and the directory over them (its writer was
    // killed with the rest and taken over by lease).
    let (ok, out, err) =
        tokio::task::block_in_place(|| env.run(&["verify", "--nats-url", &url, "--no-payloads"]));
    assert!(ok, "seed {seed}: verify failed\n{out}\n{err}");
    for partition in partitions.all() {
        assert!(out.contains(&format!("partition {partition}")), "{out}");
    }
    assert!(
        out.contains("toolledger verify: directory (ATL_DIRECTORY)"),
        "{out}"
    );
}
