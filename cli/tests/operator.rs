//! The operator's tools against a real node: the `bookie-clusters` CLI (in
//! process) through a whole switch, the `bookie-switch serve` binary, and the
//! demo (cleanup and rollback runs, JSON summary).

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_cli::cli::{run, Cli};
use bkswitch_cli::demo::{run_demo, DemoOptions};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::MemoryStore;
use clap::Parser;
use common::procs;
use common::*;

async fn cli(url: &str, args: &[&str]) -> Result<String, String> {
    let mut argv = vec!["bookie-clusters", "--url", url, "--token", ADMIN];
    argv.extend_from_slice(args);
    let parsed = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    match run(parsed, &mut out).await {
        Ok(()) => Ok(String::from_utf8(out).unwrap()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_drives_a_whole_switch_against_a_real_node() {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let node = start("node-1", Arc::new(store.new_session()), &clusters).await;
    let ml = node
        .open_topic("public/default/persistent/cli-topic")
        .await
        .unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let p = ml.append(b"m".to_vec()).await.unwrap();
    c.mark_delete(p).await.unwrap();
    let url = node.url().to_owned();

    let out = cli(&url, &["list"]).await.unwrap();
    assert!(out.contains("old") && out.contains("ACTIVE"), "{out}");
    cli(
        &url,
        &[
            "register",
            "--name",
            "new",
            "--metadata-service-uri",
            "memory://new",
        ],
    )
    .await
    .unwrap();
    let err = cli(
        &url,
        &[
            "register",
            "--name",
            "dup",
            "--metadata-service-uri",
            "memory://new",
        ],
    )
    .await
    .unwrap_err();
    assert!(err.contains("collides"), "{err}");
    let out = cli(&url, &["--json", "precheck", "--name", "new"])
        .await
        .unwrap();
    let pre: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(pre["ready"], true);
    cli(&url, &["switch", "--target", "new"]).await.unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        cli(&url, &["status", "--watch", "--interval-ms", "50"]),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(out.contains("SWITCHED"), "{out}");
    let out = cli(&url, &["--json", "status"]).await.unwrap();
    let st: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(st["activeCluster"], "new", "{st}");
    let out = cli(&url, &["list-cleanup-targets"]).await.unwrap();
    assert!(out.contains("old"), "{out}");
    let err = cli(&url, &["cleanup", "--dry-run", "false"])
        .await
        .unwrap_err();
    assert!(err.contains("rollback window"), "{err}");
    let out = cli(
        &url,
        &["--json", "cleanup", "--dry-run", "false", "--force"],
    )
    .await
    .unwrap();
    let rep: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rep["outcome"], "DONE", "{rep}");
    let err = cli(&url, &["rollback"]).await.unwrap_err();
    assert!(!err.is_empty());
    let out = cli(&url, &["--json", "list"]).await.unwrap();
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["status"], "ACTIVE");
    assert_eq!(list[1]["status"], "DEPRECATED");
    // The old cluster's client has no open read: it can be closed.
    cli(&url, &["close-client", "--name", "old"]).await.unwrap();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_binary_answers_the_api_and_refuses_bad_flags() {
    let bin = env!("CARGO_BIN_EXE_bookie-switch");
    let dir = tempfile::tempdir().unwrap();
    let port = procs::free_port();
    let args = ["--cluster-name".to_owned(), "old".to_owned()];
    let serve = procs::launch(
        "serve",
        port,
        &args,
        ADMIN,
        INTERNAL,
        &dir.path().join("serve.log"),
    )
    .await;
    let url = format!("{}{BASE}/status", serve.url);
    let (code, st) = raw("GET", &url, Some(ADMIN), None).await;
    assert_eq!(code, 200, "{st}");
    procs::kill(serve);
    assert_eq!(st["activeCluster"], "old", "{st}");
    assert_eq!(st["bootstrapCluster"], "old");

    let out = std::process::Command::new(bin)
        .args(["serve", "--metadata-store", "etcd://x"])
        .env("BKSWITCH_ADMIN_TOKEN", ADMIN)
        .env("BKSWITCH_INTERNAL_TOKEN", INTERNAL)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metadata-store"));
    // Tokens are required.
    let out = std::process::Command::new(bin)
        .args(["serve"])
        .env_remove("BKSWITCH_ADMIN_TOKEN")
        .env_remove("BKSWITCH_INTERNAL_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let help = std::process::Command::new(bin)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--metadata-store",
        "--listen",
        "--bookkeeper-uri",
        "--cluster-name",
        "--admin-token",
        "--internal-token",
        "--topics",
        "--rate",
    ] {
        assert!(help.contains(flag), "serve --help lacks {flag}");
    }
}

fn small() -> DemoOptions {
    DemoOptions {
        topics: 4,
        rate: 40,
        duration: Duration::from_secs(3),
        nodes: 2,
        ..DemoOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_cleanup_run_holds_every_invariant() {
    let report = run_demo(&small(), &|_| {}).await.unwrap();
    assert!(report.invariants_ok, "{:#?}", report.invariants);
    assert_eq!(report.outcome, "DONE");
    assert_eq!(report.publish_failures, 0);
    assert_eq!(report.consumer_gaps, 0);
    // 3 versions per topic, plus the version the demo writes during the
    // switch when it was created before its node applied the directive.
    assert!(
        (4 * 3..=4 * 3 + 1).contains(&report.schemas_promoted),
        "{}",
        report.schemas_promoted
    );
    assert_eq!(report.cursors_promoted + report.rollover_fallbacks, 4);
    assert_eq!(report.failed_ledgers, 0);
    assert!(report.switch_visible_ms < 10_000);
    // Measured by the nodes from the directive's write: within the figure
    // polled from the switch call's start.
    assert!(
        report.directive_visible_ms <= report.switch_visible_ms,
        "{} > {}",
        report.directive_visible_ms,
        report.switch_visible_ms
    );
    assert!(report.all_writes_moved_ms < 10_000);
    let json = serde_json::to_value(&report).unwrap();
    for key in [
        "published",
        "consumed",
        "publishFailures",
        "consumerGaps",
        "schemasPromoted",
        "cursorsPromoted",
        "failedLedgers",
        "rolloverFallbacks",
        "switchVisibleMs",
        "directiveVisibleMs",
        "allWritesMovedMs",
        "invariantsOk",
    ] {
        assert!(json.get(key).is_some(), "JSON summary lacks {key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_rollback_run_holds_every_invariant() {
    let opts = DemoOptions {
        rollback: true,
        ..small()
    };
    let report = run_demo(&opts, &|_| {}).await.unwrap();
    assert!(report.invariants_ok, "{:#?}", report.invariants);
    assert_eq!(report.outcome, "ROLLED_BACK");
    assert!(report
        .invariants
        .iter()
        .any(|c| c.name.contains("rollback restored")));
}

/// Runs the real `bookie-clusters` binary; (exit code, stdout, stderr).
fn bin(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bookie-clusters"))
        .args(["--url", url, "--token", ADMIN])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cli_verb_against_a_node_with_exit_codes_and_no_change_on_refusal() {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let node = start("node-1", Arc::new(store.new_session()), &clusters).await;
    let url = node.url().to_owned();
    let snapshot = || {
        let store = store.clone();
        async move { tree(store.as_ref() as &dyn bkswitch_metadata_store::MetadataStore).await }
    };
    // Refused calls: exit 1 with the server's message, nothing written.
    let refusals: &[(&[&str], &str)] = &[
        (&["get", "--name", "nope"], "not registered"),
        (
            &[
                "register",
                "--name",
                "bad name",
                "--metadata-service-uri",
                "memory://x",
            ],
            "invalid",
        ),
        (
            &[
                "register",
                "--name",
                "../etc",
                "--metadata-service-uri",
                "memory://x",
            ],
            "invalid",
        ),
        (
            &[
                "register",
                "--name",
                "x",
                "--metadata-service-uri",
                "http://x",
            ],
            "URI",
        ),
        (
            &[
                "register",
                "--name",
                "dup",
                "--metadata-service-uri",
                "memory://old",
            ],
            "collides",
        ),
        (&["unregister", "--name", "old"], "ACTIVE"),
        (&["unregister", "--name", "nope"], "not registered"),
        (&["precheck", "--name", "nope"], "not registered"),
        (&["switch", "--target", "nope"], "not registered"),
        (&["switch", "--target", "old"], "active"),
        (&["list-cleanup-targets"], "no switch"),
        (&["cleanup", "--dry-run", "false", "--force"], "no switch"),
        (&["close-client", "--name", "old"], "active"),
        (&["rollback"], "no switch"),
    ];
    for (args, needle) in refusals {
        let before = snapshot().await;
        let (code, _, err) = bin(&url, args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.to_lowercase().contains(&needle.to_lowercase()),
            "{args:?}: {err}"
        );
        assert_eq!(
            before,
            snapshot().await,
            "{args:?} changed the metadata store"
        );
    }
    // Usage errors never reach the server.
    let before = snapshot().await;
    for args in [
        &["set-read-mode", "--mode", "SOMETIMES"][..],
        &[
            "register",
            "--name",
            "x",
            "--metadata-service-uri",
            "memory://x",
            "--status",
            "SUPREME",
        ][..],
        &["cleanup", "--max-deletions", "-3"][..],
        &["frobnicate"][..],
    ] {
        assert_eq!(bin(&url, args).0, 2, "{args:?}");
    }
    assert_eq!(before, snapshot().await);
    // Wrong token: exit 1, unauthorized, nothing written.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bookie-clusters"))
        .args([
            "--url", &url, "--token", "wrong", "register", "--name", "new",
        ])
        .args(["--metadata-service-uri", "memory://new"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .to_lowercase()
        .contains("token"));
    assert_eq!(before, snapshot().await);
    // A broker without the feature: exit 3.
    let (code, _, err) = bin(&format!("{url}/no-such-prefix"), &["list"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not installed"), "{err}");

    // Every verb that succeeds: exit 0.
    for args in [
        &["list"][..],
        &["get", "--name", "old"][..],
        &[
            "register",
            "--name",
            "new",
            "--metadata-service-uri",
            "memory://new",
        ][..],
        &["precheck", "--name", "new"][..],
        &["set-read-mode", "--mode", "DUAL_READ"][..],
        &["switch", "--target", "new"][..],
        &["status", "--watch", "--interval-ms", "50"][..],
        &["status"][..],
        &["list-cleanup-targets"][..],
        &["cleanup"][..],
        &["cleanup", "--dry-run", "false", "--force"][..],
        &["close-client", "--name", "old"][..],
        &["--json", "list"][..],
    ] {
        let (code, out, err) = bin(&url, args);
        assert_eq!(code, 0, "{args:?}: {out} {err}");
    }
    let (code, _, err) = bin(&url, &["rollback"]);
    assert_eq!(code, 1, "rollback after cleanup: {err}");
    let (code, _, _) = bin(&url, &["unregister", "--name", "old"]);
    assert_eq!(code, 0, "a DEPRECATED cluster can be unregistered");
    node.stop().await;
}

/// `status --watch` of the real binary, its output not a terminal: while a
/// slow copy runs it prints `copy:` lines with the entries and bytes copied,
/// the rate and the time left (plain lines, no bars), ending at the copies'
/// totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_shows_copy_progress_with_rate_and_eta() {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let mut cfg =
        bkswitch_admin::testkit::node_config("node-1", Arc::new(store.new_session()), &clusters);
    cfg.orchestrator.copy_window = 1;
    let node = bkswitch_admin::Node::start(cfg).await.unwrap();
    let url = node.url().to_owned();
    for i in 0..2 {
        let ml = node
            .open_topic(&format!("public/default/persistent/watched-{i}"))
            .await
            .unwrap();
        for n in 0..80 {
            ml.append(format!("m{n}").into_bytes()).await.unwrap();
        }
        let c = ml
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        for e in c.read_entries(80).await.unwrap() {
            c.mark_delete(e.position).await.unwrap();
        }
    }
    cli(
        &url,
        &[
            "register",
            "--name",
            "new",
            "--metadata-service-uri",
            "memory://new",
        ],
    )
    .await
    .unwrap();
    // One entry per read, 25 ms per read: about two seconds per ledger.
    clusters
        .get("old")
        .unwrap()
        .set_latency(bkswitch_bk_client::OpKind::Read, Duration::from_millis(25));
    cli(&url, &["switch", "--target", "new"]).await.unwrap();
    let watch_url = url.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        bin(&watch_url, &["status", "--watch", "--interval-ms", "100"])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !out.contains('\u{1b}') && !err.contains('\u{1b}'),
        "no bars: {err}"
    );
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("copy: ")).collect();
    assert!(lines.len() >= 5, "copy lines while it runs:\n{out}");
    for l in &lines {
        assert!(
            l.contains(" entries (") && l.contains(" entries/s, "),
            "{l}"
        );
    }
    // Mid-copy lines: entries copied below the total, a rate and a time left.
    let mid = lines
        .iter()
        .filter(|l| !l.contains("(100.0%)"))
        .filter(|l| {
            let eta = l.rsplit("ETA ").next().unwrap();
            l.contains("ETA ") && eta.starts_with(|c: char| c.is_ascii_digit())
        })
        .count();
    assert!(mid >= 2, "mid-copy lines with an ETA:\n{out}");
    assert!(
        lines
            .iter()
            .any(|l| !l.contains(" 0 entries/s") && !l.contains("(100.0%)")),
        "a non-zero rate mid-copy:\n{out}"
    );
    // The last one: everything copied.
    let last = lines.last().unwrap();
    assert!(
        last.contains("(100.0%)") && last.contains("ledgers 2/2") && last.ends_with(", done"),
        "{last}"
    );
    let entries: u64 = {
        let new = clusters.get("new").unwrap();
        let id = node.orchestrator().current_status().await.unwrap().unwrap();
        node.orchestrator()
            .ledger_records(&id.switch_id)
            .await
            .unwrap()
            .iter()
            .map(|r| (new.ledger_metadata(r.ledger_id).unwrap().last_entry_id + 1) as u64)
            .sum()
    };
    assert!(
        last.starts_with(&format!("copy: {entries}/{entries} entries")),
        "{last} ({entries} entries copied)"
    );
    assert!(out.contains("SWITCHED"), "{out}");
    // The final view, and `status`, show the totals.
    let field = format!("copy               {entries}/{entries} entries, ");
    assert!(out.contains(&field), "{out}");
    let st = cli(&url, &["status"]).await.unwrap();
    assert!(
        st.contains(&field) && st.contains("ledgers 2/2 (failed 0)"),
        "{st}"
    );
    node.stop().await;
}
