//! Moving the metadata store of running processes (PIP-454): three
//! `bookie-switch serve` processes on a real ZooKeeper, each owning a topic
//! under live traffic (`--rate`), are moved to a real etcd with
//! `bookie-clusters metadata-migration start`; a dedicated `bookie-switch
//! coordinator`, the leader, runs it. The migration COMPLETES, every
//! node then uses the etcd store, the topics' metadata is in etcd, and on
//! SIGTERM every process reports 0 publish failures and 0 gaps. A node
//! restarted with the ZooKeeper URL follows the recorded target to etcd.
//!
//! The leader of the coordinator election killed (SIGKILL) while it copies:
//! once its session expired the next leader finishes the migration from the
//! record, and the survivors report 0 publish failures and 0 gaps.
//!
//! Needs the `etcd` feature (`cargo test -p bkswitch-cli --features etcd
//! --test metadata_migration_processes`).

mod common;

use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_cli::cli::{run, Cli};
use bkswitch_etcd_harness::{unique_prefix, EtcdCluster};
use bkswitch_metadata_store::{EtcdStore, EtcdStoreOptions, MetadataStore};
use clap::Parser;

use common::procs::{self, Proc, ADMIN};

fn topic(node: usize) -> String {
    format!("tenant/ns/persistent/moved-n{node}")
}

/// Starts node `node` of `bookie-switch serve` on `metadata` with traffic
/// on its topic, its stderr into `log`; returns it once its REST API
/// answers.
async fn serve(node: usize, metadata: &str, log: &std::path::Path) -> Proc {
    serve_with(node, metadata, log, &[]).await
}

/// [`serve`] with `extra` flags.
async fn serve_with(node: usize, metadata: &str, log: &std::path::Path, extra: &[&str]) -> Proc {
    procs::serve(node, &topic(node), metadata, log, extra).await
}

/// Starts `bookie-switch coordinator` (a dedicated coordinator, no topics).
async fn dedicated_coordinator(metadata: &str, log: &std::path::Path) -> Proc {
    let args: Vec<String> = [
        "--node-id",
        "coordinator-1",
        "--metadata-store",
        metadata,
        "--bookkeeper-uri",
        "memory://old",
        "--cluster-name",
        "old",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    procs::launch(
        "coordinator",
        procs::free_port(),
        &args,
        ADMIN,
        "migration-internal-token",
        log,
    )
    .await
}

/// Stops `p` with SIGTERM and returns its log.
fn stop(p: Proc) -> String {
    procs::terminate(p)
}

/// `(published, failures, gaps)` of the `traffic: …` line of `log`.
fn traffic(log: &str) -> (u64, u64, u64) {
    let line = log
        .lines()
        .find(|l| l.starts_with("traffic: "))
        .unwrap_or_else(|| panic!("no traffic summary:\n{log}"));
    let n = |word: &str| -> u64 {
        line.split(word)
            .next()
            .unwrap()
            .split_whitespace()
            .last()
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap()
    };
    (n(" published"), n(" publish failures"), n(" gaps"))
}

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
async fn three_serve_processes_move_from_zookeeper_to_etcd_under_traffic() {
    bkswitch_zk_harness::require_zk();
    let zk = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let target = etcd.url(&unique_prefix());
    let dir = tempfile::tempdir().unwrap();
    // A dedicated coordinator, started first: it leads the election, so it
    // runs the migration.
    let coordinator_log = dir.path().join("coordinator.log");
    let coordinator = dedicated_coordinator(&zk, &coordinator_log).await;
    let coordinator_url = coordinator.url.clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !leads(&coordinator_url).await {
        assert!(Instant::now() < deadline, "the coordinator does not lead");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut nodes = Vec::new();
    for node in 0..3 {
        let log = dir.path().join(format!("serve-{node}.log"));
        nodes.push(serve(node, &zk, &log).await);
    }
    let logs = |nodes: &[Proc]| -> String {
        format!(
            "{}\n----\n{}",
            procs::logs(nodes),
            std::fs::read_to_string(&coordinator_log).unwrap_or_default()
        )
    };
    // Traffic runs for a while on ZooKeeper first.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let url0 = nodes[0].url.clone();
    let out = cli(
        &url0,
        &["metadata-migration", "start", "--target-url", &target],
    )
    .await
    .unwrap_or_else(|e| panic!("start refused: {e}\n{}", logs(&nodes)));
    assert!(out.contains("started"), "{out}");

    // The leader runs it to the end.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = cli(&url0, &["--json", "metadata-migration", "status"])
            .await
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        match doc["phase"].as_str().unwrap() {
            "COMPLETED" => {
                assert!(doc["nodesCopied"].as_u64().unwrap() > 0, "{doc}");
                break;
            }
            "FAILED" | "ABORTED" => panic!("{doc}\n{}", logs(&nodes)),
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "not completed: {doc}\n{}",
            logs(&nodes)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every node follows to etcd.
    for url in nodes.iter().map(|p| &p.url) {
        let admin = AdminClient::new(url, ADMIN).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let doc = admin.migration_status().await.unwrap();
            if doc.node_store_url.as_deref() == Some(target.as_str()) {
                assert_eq!(doc.phase, "COMPLETED");
                assert!(!doc.writes_paused);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{url} still uses {:?}\n{}",
                doc.node_store_url,
                logs(&nodes)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let text = cli(&url0, &["metadata-migration", "status"]).await.unwrap();
    assert!(
        text.contains("COMPLETED") && text.contains(&target),
        "{text}"
    );
    // Traffic goes on, on etcd.
    tokio::time::sleep(Duration::from_secs(2)).await;

    for p in nodes {
        let text = stop(p);
        let (published, failures, gaps) = traffic(&text);
        assert!(published > 0, "{text}");
        assert_eq!((failures, gaps), (0, 0), "{text}");
    }
    // The dedicated coordinator ran it, and moved to etcd too.
    let doc = AdminClient::new(&coordinator_url, ADMIN)
        .unwrap()
        .migration_status()
        .await
        .unwrap();
    assert_eq!(doc.node_store_url.as_deref(), Some(target.as_str()));
    let text = stop(coordinator);
    assert!(
        text.contains("this node leads: running the metadata migration"),
        "{text}"
    );

    // A node restarted with its old configuration (the ZooKeeper URL)
    // follows the recorded target, warns, and opens its topic from etcd.
    let log = dir.path().join("serve-0-again.log");
    let again = serve(0, &zk, &log).await;
    let doc = AdminClient::new(&again.url, ADMIN)
        .unwrap()
        .migration_status()
        .await
        .unwrap();
    assert_eq!(doc.node_store_url.as_deref(), Some(target.as_str()));
    assert_eq!(doc.phase, "COMPLETED");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = stop(again);
    assert!(
        text.contains("was migrated to") && text.contains(&target),
        "{text}"
    );
    // (Its traffic numbers say nothing here: the process's in-memory bookie
    // cluster is new, the ledgers written before the restart are gone.)
    assert!(text.contains("traffic: "), "{text}");

    // The topics' metadata, the registry and the election are in etcd now.
    let store = EtcdStore::connect(&target, EtcdStoreOptions::default())
        .await
        .expect("a session on the target");
    let mut topics = store
        .children("/managed-ledgers/tenant/ns/persistent")
        .await
        .unwrap();
    topics.sort();
    assert_eq!(topics, ["moved-n0", "moved-n1", "moved-n2"]);
    assert!(store
        .exists("/admin/bookie-clusters/old")
        .await
        .unwrap()
        .is_some());
    store.close().await.unwrap();
}

/// Whether the node at `url` leads the coordinator election (its `/metrics`).
async fn leads(url: &str) -> bool {
    let (status, body) = common::raw("GET", &format!("{url}/metrics"), None, None).await;
    status == 200
        && body
            .as_str()
            .unwrap_or_default()
            .lines()
            .any(|l| l == "bkswitch_coordinator_leader 1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_leader_finishes_a_migration_whose_leader_was_killed() {
    bkswitch_zk_harness::require_zk();
    let zk = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    // Enough metadata for a copy of many small steps.
    let seed = bkswitch_metadata_store::open_store(&zk, Default::default())
        .await
        .unwrap();
    for i in 0..300 {
        seed.put(
            &format!("/seed/n{i:03}"),
            b"v",
            bkswitch_metadata_store::ExpectedVersion::Any,
        )
        .await
        .unwrap();
    }
    seed.close().await.unwrap();
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let target = etcd.url(&unique_prefix());
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--metadata-store-session-timeout-ms",
        "4000",
        "--metadata-migration-page-size",
        "10",
        "--metadata-migration-step-interval-ms",
        "100",
    ];
    let mut nodes = Vec::new();
    for node in 0..3 {
        let log = dir.path().join(format!("serve-{node}.log"));
        nodes.push(serve_with(node, &zk, &log, &flags).await);
    }
    let logs = |nodes: &[Proc]| -> String { procs::logs(nodes) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let mut found = None;
        for (i, url) in nodes.iter().map(|p| &p.url).enumerate() {
            if leads(url).await {
                found = Some(i);
            }
        }
        if let Some(i) = found {
            break i;
        }
        assert!(Instant::now() < deadline, "no leader\n{}", logs(&nodes));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let other = (leader + 1) % 3;
    let other_url = nodes[other].url.clone();
    cli(
        &other_url,
        &["metadata-migration", "start", "--target-url", &target],
    )
    .await
    .unwrap_or_else(|e| panic!("start refused: {e}\n{}", logs(&nodes)));

    // Kill the leader while it copies.
    let status = |url: String| async move {
        let out = cli(&url, &["--json", "metadata-migration", "status"])
            .await
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let doc = status(other_url.clone()).await;
        if doc["phase"] == "COPYING" && doc["nodesCopied"].as_u64().unwrap() >= 50 {
            break;
        }
        assert_ne!(doc["phase"], "COMPLETED", "copied too fast to kill: {doc}");
        assert!(Instant::now() < deadline, "{doc}\n{}", logs(&nodes));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut killed = nodes.remove(leader);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();

    // The next leader (once the dead session expired) finishes it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let doc = loop {
        let doc = status(other_url.clone()).await;
        match doc["phase"].as_str().unwrap() {
            "COMPLETED" => break doc,
            "FAILED" | "ABORTED" => panic!("{doc}\n{}", logs(&nodes)),
            _ => {}
        }
        assert!(Instant::now() < deadline, "{doc}\n{}", logs(&nodes));
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(doc["nodesCopied"].as_u64().unwrap() >= 300, "{doc}");
    let mut led = false;
    for url in nodes.iter().map(|p| &p.url) {
        led |= leads(url).await;
        let admin = AdminClient::new(url, ADMIN).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while admin
            .migration_status()
            .await
            .unwrap()
            .node_store_url
            .as_deref()
            != Some(target.as_str())
        {
            assert!(Instant::now() < deadline, "{url}\n{}", logs(&nodes));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(led, "a survivor leads");
    assert!(
        nodes.iter().any(|p| std::fs::read_to_string(&p.log)
            .unwrap_or_default()
            .contains("this node leads: running the metadata migration")),
        "a survivor took the migration over\n{}",
        logs(&nodes)
    );
    let store = EtcdStore::connect(&target, EtcdStoreOptions::default())
        .await
        .unwrap();
    assert_eq!(store.children("/seed").await.unwrap().len(), 300);
    store.close().await.unwrap();
    for p in nodes {
        let text = stop(p);
        let (published, failures, gaps) = traffic(&text);
        assert!(published > 0, "{text}");
        assert_eq!((failures, gaps), (0, 0), "{text}");
    }
}
