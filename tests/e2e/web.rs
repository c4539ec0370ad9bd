//! The web view in headless Chromium: `toolledger up` with generated sessions of two tenants (the
//! query test's fixture), then `tests/browser/ui.mjs` (playwright-core driving Debian's chromium)
//! clicks sessions → timeline → invocation → verification → tools, checks each page against the
//! API, saves screenshots, and shows a tampered entry as not verified. The tampering happens at the
//! browser's boundary (the inclusion proof rewritten in flight): ATL_LEDGER denies edits, and the
//! server checks every proof it serves, so an altered stored entry never reaches the page.
//!
//! Skipped, with a message, when chromium, node or the npm packages are missing — unless
//! `TOOLLEDGER_REQUIRE_BROWSER` is set (`scripts/test` sets it), then that is a failure.
//!
//! The second test runs the view under a witness policy: `toolledger up` whose ingest asks three
//! real `toolledger witness` processes to cosign each checkpoint and whose query service proves
//! bundles under a 2-of-3 `[witness_policy]`; `tests/browser/witness.mjs` pins witness policies in
//! Settings and checks the verification badge: verified and naming the cosigning witnesses under 2
//! of 3, the finding "not witnessed" (never "verified") when fewer than the quorum of the pinned
//! witnesses cosigned (lines removed in flight, or a stranger's key in the policy), a failure when a
//! listed witness's line is altered, and no witness text once the policy is forgotten.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use toolledger_merkle::{CosignatureSigner, CosignatureVerifier, NoteSigner};
use toolledger_schemas::generator::{GeneratorConfig, generate};
use toolledger_testkit::workspace_root;

use crate::fixture::Up;
use crate::query::{ACME_TOKEN, ADMIN_TOKEN, load, request};
use crate::witness::{ORIGIN, WitnessProcess, cosigned_by};

const CHROMIUM: &str = "/usr/bin/chromium";

/// What the browser test needs, or why it cannot run.
fn browser() -> Result<PathBuf, String> {
    let script_dir = workspace_root().join("tests/browser");
    if !Path::new(CHROMIUM).exists() {
        return Err(format!(
            "{CHROMIUM} is missing (scripts/setup installs Debian's chromium)"
        ));
    }
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("node is missing".to_owned());
    }
    if !script_dir
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        return Err("tests/browser/node_modules is missing (scripts/setup runs npm ci there)".to_owned());
    }
    Ok(script_dir)
}

/// `tests/browser`, ready to run a script; `None` (after saying why) when the browser test cannot
/// run here. Panics instead when `TOOLLEDGER_REQUIRE_BROWSER` is set.
pub(crate) fn browser_or_skip() -> Option<PathBuf> {
    match browser() {
        Ok(dir) => Some(dir),
        Err(why) if std::env::var_os("TOOLLEDGER_REQUIRE_BROWSER").is_some() => {
            panic!("TOOLLEDGER_REQUIRE_BROWSER is set but the browser test cannot run: {why}")
        }
        Err(why) => {
            eprintln!("skipped: the web view's browser test cannot run: {why}");
            None
        }
    }
}

#[test]
fn the_web_view_shows_sessions_invocations_and_verification_and_a_tampered_entry_fails() {
    let Some(script_dir) = browser_or_skip() else {
        return;
    };
    let mut loaded = load();
    let api = loaded.api;

    // The assets answer without a token, under the policy; the data does not.
    let page = request(api, "GET", "/", None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/ui/app.js"), "{}", page.body);
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("default-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    let script = request(api, "GET", "/ui/verify.js", None);
    assert_eq!(script.status, 200);
    assert_eq!(
        script.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(request(api, "GET", "/ui/nothing.js", None).status, 404);
    assert_eq!(request(api, "GET", "/v1/sessions", None).status, 401);

    // Every entry must be under a signed checkpoint before the browser can prove it.
    let ledger_size = {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let client = toolledger_wire::connect::connect(&loaded.nats_url, "e2e")
                .await
                .unwrap();
            let js = async_nats::jetstream::new(client);
            let mut stream = js.get_stream("ATL_LEDGER").await.unwrap();
            stream.info().await.unwrap().state.last_sequence
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let latest = request(api, "GET", "/v1/checkpoints/latest", Some(ADMIN_TOKEN));
        if latest.status == 200 && latest.json()["size"].as_u64().unwrap_or(0) >= ledger_size {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint covers the ledger: {}",
            latest.body
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    let key = std::fs::read_to_string(loaded.dir.path().join("data/keys/checkpoint.pub")).unwrap();
    run_browser_script(
        &script_dir,
        "ui.mjs",
        "the browser walk-through",
        &[
            ("TOOLLEDGER_UI_BASE", format!("http://{api}")),
            ("TOOLLEDGER_UI_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("TOOLLEDGER_UI_TENANT_TOKEN", ACME_TOKEN.to_owned()),
            ("TOOLLEDGER_UI_TENANT", "acme".to_owned()),
            ("TOOLLEDGER_UI_KEY", key.trim().to_owned()),
        ],
        &[
            "sessions",
            "session-timeline",
            "invocation",
            "verification",
            "verification-tampered",
            "tools",
        ],
        || loaded.up.stderr(),
    );
    let _ = loaded.up.terminate(Duration::from_secs(30));
}

#[test]
fn the_web_view_names_the_witnesses_and_flags_a_checkpoint_under_the_pinned_quorum() {
    let Some(script_dir) = browser_or_skip() else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // The ledger's signing key is made before `up` (which keeps an existing key), so the witnesses
    // know the log's verifier key before ingest first asks them.
    let keys = dir.path().join("data/keys");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&keys)
        .unwrap();
    let signer = NoteSigner::generate(ORIGIN).unwrap();
    signer.save(&keys.join("checkpoint.key")).unwrap();
    let log_key = signer.verifier().to_string();
    let mut witnesses: Vec<WitnessProcess> = (1..=3)
        .map(|i| WitnessProcess::start(&format!("witness.test/web{i}"), &log_key))
        .collect();
    let vkeys: Vec<String> = witnesses.iter().map(|w| w.key.to_string()).collect();

    let mut extra = "\n[ledger]\ncheckpoint_interval_ms = 100\nwitness_quorum = 2\n".to_owned();
    for witness in &witnesses {
        extra.push_str(&format!(
            "\n[[ledger.witnesses]]\nurl = \"{}\"\nkey = \"{}\"\n",
            witness.url(),
            witness.key
        ));
    }
    let listed: Vec<String> = vkeys.iter().map(|k| format!("\"{k}\"")).collect();
    extra.push_str(&format!(
        "\n[witness_policy]\nquorum = 2\nwitnesses = [{}]\n",
        listed.join(", ")
    ));
    let up = Up::start(dir.path(), &extra, &[]);
    let generated = generate(&GeneratorConfig {
        seed: 7,
        ..GeneratorConfig::default()
    });
    let ledger_size = up.publish(&generated.events, toolledger_wire::Mode::Binary);

    // A checkpoint covering every entry, cosigned by all three: the query service has one that meets
    // its policy to prove the bundles in.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let js = runtime.block_on(async {
        jetstream::new(
            toolledger_wire::connect::connect(&up.nats_url, "e2e")
                .await
                .unwrap(),
        )
    });
    let all: Vec<&CosignatureVerifier> = witnesses.iter().map(|w| &w.key).collect();
    let (size, _, _) = cosigned_by(&runtime, &js, &all, ledger_size);
    println!(
        "ledger of {ledger_size} entries, checkpoint {size} cosigned by 3 witnesses, in {:?}",
        started.elapsed()
    );

    let stranger = CosignatureSigner::generate("witness.test/stranger").unwrap();
    run_browser_script(
        &script_dir,
        "witness.mjs",
        "the browser's witness checks",
        &[
            ("TOOLLEDGER_UI_BASE", format!("http://{}", up.api)),
            ("TOOLLEDGER_UI_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("TOOLLEDGER_UI_TENANT", "acme".to_owned()),
            ("TOOLLEDGER_UI_KEY", log_key.clone()),
            ("TOOLLEDGER_UI_WITNESS_KEYS", vkeys.join("\n")),
            ("TOOLLEDGER_UI_STRANGER_KEY", stranger.verifier().to_string()),
        ],
        &["verification-witnessed", "verification-not-witnessed"],
        || up.child.stderr(),
    );

    up.stop();
    for witness in &mut witnesses {
        let _ = witness.child.terminate(Duration::from_secs(10));
    }
    println!("web witness test done in {:?}", started.elapsed());
}

/// Runs a browser script of `tests/browser` with `env` and screenshots going to
/// `TOOLLEDGER_SCREENSHOTS` (else a temporary directory): it must exit 0 reporting ` passed, 0
/// failed`, and leave each of `screenshots` as a PNG. `server_stderr` is shown when it fails.
pub(crate) fn run_browser_script(
    script_dir: &Path,
    script: &str,
    what: &str,
    env: &[(&str, String)],
    screenshots: &[&str],
    server_stderr: impl FnOnce() -> String,
) {
    let shots_temp = tempfile::tempdir().unwrap();
    let shots = std::env::var_os("TOOLLEDGER_SCREENSHOTS")
        .map_or_else(|| shots_temp.path().to_path_buf(), PathBuf::from);
    let out = std::process::Command::new("node")
        .arg(script)
        .current_dir(script_dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("TOOLLEDGER_SCREENSHOTS", &shots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{what} failed (screenshots in {})\n{}",
        shots.display(),
        server_stderr()
    );
    assert!(
        stdout.contains("ui: ") && stdout.contains(" passed, 0 failed"),
        "{stdout}"
    );
    for name in screenshots {
        let file = shots.join(format!("{name}.png"));
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            bytes.starts_with(b"\x89PNG"),
            "{} is not a screenshot",
            file.display()
        );
    }
}
