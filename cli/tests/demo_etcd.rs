//! `bookie-switch demo --metadata etcd://…` on a real etcd (three members):
//! the demo's nodes keep the registry, the election, topic ownership and the
//! switch's records in etcd, switch mid-traffic and clean up, and every check
//! of the demo holds; what the run left is read back from etcd afterwards. A
//! malformed etcd URL is refused before anything starts, naming the flag.
//! And `bookie-switch serve --metadata-store-url etcd://…`: a switch under
//! live traffic through its REST API, then a restart on the same etcd that
//! finds the switch there.
//!
//! Needs the `etcd` feature (`cargo test -p bkswitch-cli --features etcd
//! --test demo_etcd`).

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use common::procs::{self, Proc};

use bkswitch_etcd_harness::{unique_prefix, EtcdCluster};
use bkswitch_metadata_store::{EtcdStore, EtcdStoreOptions, MetadataStore};
use bkswitch_registry::{ClusterStatus, Registry};

const BIN: &str = env!("CARGO_BIN_EXE_bookie-switch");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_switches_with_its_metadata_on_etcd() {
    let cluster = tokio::task::block_in_place(|| EtcdCluster::start(3));
    let base = cluster.url(&unique_prefix());
    let out = tokio::task::block_in_place(|| {
        Command::new(BIN)
            .args([
                "demo",
                "--metadata",
                &base,
                "--topics",
                "4",
                "--nodes",
                "3",
                "--rate",
                "40",
                "--duration",
                "4",
                "--json",
            ])
            .output()
            .expect("run the demo")
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo exited {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status.code()
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON summary");
    assert_eq!(report["invariantsOk"], true, "{report:#}");
    assert!(
        report["invariants"]
            .as_array()
            .expect("invariants")
            .iter()
            .all(|c| c["ok"] == true),
        "{report:#}"
    );
    assert_eq!(report["outcome"], "DONE", "{report:#}");
    assert_eq!(report["publishFailures"], 0, "{report:#}");
    assert_eq!(report["consumerGaps"], 0, "{report:#}");
    assert_eq!(report["failedLedgers"], 0, "{report:#}");
    assert!(report["published"].as_u64().expect("published") > 0);
    assert_eq!(
        report["cursorsPromoted"].as_u64().expect("cursors")
            + report["rolloverFallbacks"].as_u64().expect("fallbacks"),
        4,
        "{report:#}"
    );
    // The run's metadata: a fresh key prefix below the one given.
    let url = report["metadataStore"]
        .as_str()
        .expect("metadataStore")
        .to_owned();
    assert!(
        url.starts_with(&format!("{base}/bkswitch-demo-")),
        "{url} is not below {base}"
    );

    // Read back from etcd what the run left there.
    let store: Arc<dyn MetadataStore> = Arc::new(
        EtcdStore::connect(&url, EtcdStoreOptions::default())
            .await
            .expect("a session on the demo's metadata"),
    );
    let clusters: Vec<(String, ClusterStatus)> = Registry::new(store.clone())
        .list()
        .await
        .expect("the registry in etcd")
        .into_iter()
        .map(|c| (c.name, c.status))
        .collect();
    assert!(
        clusters.contains(&("new".to_owned(), ClusterStatus::Active)),
        "{clusters:?}"
    );
    assert_eq!(
        clusters
            .iter()
            .filter(|(_, s)| *s == ClusterStatus::Active)
            .count(),
        1,
        "{clusters:?}"
    );
    let mut topics = store
        .children("/managed-ledgers/public/default/persistent")
        .await
        .expect("the topics' managed ledgers in etcd");
    topics.sort();
    assert_eq!(topics, ["demo-000", "demo-001", "demo-002", "demo-003"]);
    // The nodes stopped: their sessions, and so the ephemeral election
    // candidacies, registrations and topic ownership, are gone.
    for dir in [
        "/bkswitch/topic-owners",
        "/bkswitch/nodes",
        "/admin/bookie-clusters/leader",
    ] {
        let left = store.children(dir).await.unwrap_or_default();
        assert!(left.is_empty(), "{dir} still holds {left:?}");
    }
    store.close().await.expect("close");
}

#[test]
fn demo_refuses_a_malformed_etcd_url_before_starting() {
    let out = Command::new(BIN)
        .args(["demo", "--metadata", "etcd://no-port", "--json"])
        .output()
        .expect("run the demo");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--metadata"), "{stderr}");
    assert!(stderr.contains("etcd://no-port"), "{stderr}");
    assert!(out.stdout.is_empty());
}

const ADMIN: &str = "etcd-admin-token";

/// Starts `bookie-switch serve` on `metadata` with `extra` flags, its stderr
/// into `log`; returns it once its REST API answers.
async fn serve(metadata: &str, log: &std::path::Path, extra: &[&str]) -> Proc {
    let mut args = vec![
        "--metadata-store-url".to_owned(),
        metadata.to_owned(),
        "--cluster-name".to_owned(),
        "old".to_owned(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    procs::launch(
        "serve",
        procs::free_port(),
        &args,
        ADMIN,
        "etcd-internal-token",
        log,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_switches_on_etcd_and_finds_the_switch_after_a_restart() {
    let cluster = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let metadata = cluster.url(&unique_prefix());
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("serve-1.log");
    let node = serve(
        &metadata,
        &log,
        &[
            "--topics",
            "public/default/persistent/a,public/default/persistent/b",
            "--rate",
            "30",
        ],
    )
    .await;
    let url = node.url.clone();
    let admin = AdminClient::new(&url, ADMIN).expect("client");
    admin
        .register("new", "memory://new", None)
        .await
        .expect("register new");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let epoch = admin
        .switch("new")
        .await
        .expect("switch")
        .epoch()
        .expect("epoch");
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        let st = admin.status().await.expect("status").0;
        if st["switch"]["phase"] == "SWITCHED" {
            break st;
        }
        assert!(Instant::now() < deadline, "not SWITCHED: {st:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(st["activeCluster"], "new", "{st:#}");
    assert_eq!(st["epoch"], epoch, "{st:#}");
    assert_eq!(st["switch"]["counts"]["failed"], 0, "{st:#}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = procs::terminate(node);
    assert!(
        text.contains(" 0 publish failures, 0 gaps"),
        "the traffic summary: {text}"
    );

    // The switch is in etcd: the directive names `new`, and a node started
    // again on the same metadata creates its ledgers there.
    let store: Arc<dyn MetadataStore> = Arc::new(
        EtcdStore::connect(&metadata, EtcdStoreOptions::default())
            .await
            .expect("a session"),
    );
    let directive = Registry::new(store.clone())
        .switch_directive()
        .await
        .expect("the directive in etcd")
        .expect("a directive");
    assert_eq!(directive.epoch, epoch);
    assert_eq!(directive.target, "new");
    assert!(
        store
            .children("/managed-ledgers/public/default/persistent")
            .await
            .expect("the topics in etcd")
            .len()
            == 2
    );
    let log2 = dir.path().join("serve-2.log");
    let again = serve(&metadata, &log2, &[]).await;
    let st = AdminClient::new(&again.url, ADMIN)
        .expect("client")
        .status()
        .await
        .expect("status")
        .0;
    assert_eq!(st["activeCluster"], "new", "{st:#}");
    assert_eq!(st["epoch"], epoch, "{st:#}");
    procs::terminate(again);
    store.close().await.expect("close");
}
