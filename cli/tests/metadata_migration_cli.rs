//! `bookie-clusters metadata-migration start|status|abort` against a real
//! node (in process) whose metadata goes through a migration participant on
//! named in-memory stores: the node, leading the election, runs the
//! migration it was asked for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::testkit::{clusters, node_config, tree, ADMIN};
use bkswitch_admin::{MigrationHandle, Node};
use bkswitch_cli::cli::{run, write_error, Cli, CliError, EXIT_FAILURE};
use bkswitch_metadata_migration::{MigratingStore, NamedMemoryStores, ParticipantOptions};
use bkswitch_metadata_store::{CreateMode, MetadataStore};
use clap::Parser;
use serde_json::Value;

async fn start_node(stores: &NamedMemoryStores) -> Node {
    let participant = MigratingStore::open(
        "memory://old",
        Arc::new(stores.clone()),
        ParticipantOptions {
            name: "node-1".into(),
            poll_interval: Duration::from_millis(50),
            ..ParticipantOptions::default()
        },
    )
    .await
    .unwrap();
    let mut handle = MigrationHandle::new(participant.clone());
    handle.poll_interval = Duration::from_millis(50);
    let cfg = node_config("node-1", Arc::new(participant), &clusters());
    Node::start(cfg.with_migration(handle)).await.unwrap()
}

async fn cli(node: &Node, args: &[&str]) -> (Result<(), CliError>, String) {
    let mut argv = vec!["bookie-clusters", "--url", node.url(), "--token", ADMIN];
    argv.extend_from_slice(args);
    let parsed = Cli::try_parse_from(argv).unwrap();
    let mut out = Vec::new();
    let result = run(parsed, &mut out).await;
    (result, String::from_utf8(out).unwrap())
}

fn rendered(e: &CliError) -> String {
    let mut w = Vec::new();
    write_error(e, &mut w).unwrap();
    String::from_utf8(w).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn start_status_and_abort_through_the_cli() {
    let stores = NamedMemoryStores::new();
    let node = start_node(&stores).await;

    // Nothing yet: a clear error, exit status 1.
    let (r, _) = cli(&node, &["metadata-migration", "status"]).await;
    let e = r.unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAILURE);
    let msg = rendered(&e);
    assert!(msg.contains("no metadata migration"), "{msg}");

    // A target that is not empty is refused, naming what to do; nothing is
    // written.
    let target = stores.session("new");
    target
        .create("/leftover", b"x", CreateMode::PERSISTENT)
        .await
        .unwrap();
    let before = tree(&stores.session("old")).await;
    let (r, _) = cli(
        &node,
        &[
            "metadata-migration",
            "start",
            "--target-url",
            "memory://new",
        ],
    )
    .await;
    let msg = rendered(&r.unwrap_err());
    assert!(
        msg.contains("not empty") && msg.contains("wipe") && msg.contains("400"),
        "{msg}"
    );
    assert_eq!(tree(&stores.session("old")).await, before);

    // A dry run lists what a wipe deletes and how to confirm it; a wipe
    // naming another root is refused; neither writes.
    let (r, out) = cli(
        &node,
        &[
            "metadata-migration",
            "start",
            "--target-url",
            "memory://new",
            "--dry-run",
        ],
    )
    .await;
    r.unwrap();
    assert!(out.contains("dry run: nothing was written"), "{out}");
    assert!(out.contains("/leftover  (1 nodes)"), "{out}");
    assert!(out.contains("--wipe-target /"), "{out}");
    let (r, _) = cli(
        &node,
        &[
            "metadata-migration",
            "start",
            "--target-url",
            "memory://new",
            "--wipe-target",
            "/pulsar",
        ],
    )
    .await;
    let msg = rendered(&r.unwrap_err());
    assert!(msg.contains("does not name the target's root"), "{msg}");
    assert_eq!(tree(&stores.session("old")).await, before);
    assert!(target.exists("/leftover").await.unwrap().is_some());

    // Started with --wipe-target: the node (the leader) runs it to the end.
    let (r, out) = cli(
        &node,
        &[
            "metadata-migration",
            "start",
            "--target-url",
            "memory://new",
            "--wipe-target",
            "/",
        ],
    )
    .await;
    r.unwrap();
    assert!(
        out.contains("metadata migration to 'memory://new' started"),
        "{out}"
    );
    assert!(out.contains("PREPARATION"), "{out}");
    assert!(out.contains("memory://old"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let doc: Value = loop {
        let (r, out) = cli(&node, &["--json", "metadata-migration", "status"]).await;
        r.unwrap();
        let doc: Value = serde_json::from_str(&out).unwrap();
        if doc["phase"] == "COMPLETED" {
            break doc;
        }
        assert!(Instant::now() < deadline, "not completed: {doc}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(doc["targetUrl"], "memory://new");
    assert!(doc["nodesCopied"].as_u64().unwrap() > 0, "{doc}");
    let (r, out) = cli(&node, &["metadata-migration", "status"]).await;
    r.unwrap();
    for field in [
        "phase",
        "COMPLETED",
        "nodes copied",
        "changes caught up",
        "pause",
        "this node uses",
        "memory://new",
    ] {
        assert!(out.contains(field), "{field} in {out}");
    }
    assert!(target.exists("/leftover").await.unwrap().is_none());

    // Nothing left to abort.
    let (r, _) = cli(&node, &["metadata-migration", "abort"]).await;
    let e = r.unwrap_err();
    assert_eq!(e.exit_code(), EXIT_FAILURE);
    let msg = rendered(&e);
    assert!(
        msg.contains("already ended") && msg.contains("COMPLETED") && msg.contains("409"),
        "{msg}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abort_stops_a_running_migration() {
    let stores = NamedMemoryStores::new();
    // A node that does not run migrations (no leader runs this one): it
    // stays in PREPARATION until aborted.
    let participant = MigratingStore::open(
        "memory://old",
        Arc::new(stores.clone()),
        ParticipantOptions {
            name: "node-1".into(),
            ..ParticipantOptions::default()
        },
    )
    .await
    .unwrap();
    let mut handle = MigrationHandle::new(participant.clone());
    handle.coordinate = false;
    let cfg = node_config("node-1", Arc::new(participant), &clusters());
    let node = Node::start(cfg.with_migration(handle)).await.unwrap();
    let (r, _) = cli(
        &node,
        &[
            "metadata-migration",
            "start",
            "--target-url",
            "memory://new",
        ],
    )
    .await;
    r.unwrap();
    let (r, out) = cli(&node, &["metadata-migration", "abort"]).await;
    r.unwrap();
    assert!(out.contains("aborted") && out.contains("ABORTED"), "{out}");
    let (r, out) = cli(&node, &["--json", "metadata-migration", "status"]).await;
    r.unwrap();
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["phase"], "ABORTED");
    assert_eq!(doc["writesPaused"], false);
    node.stop().await;
}
