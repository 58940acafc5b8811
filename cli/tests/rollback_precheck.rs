//! The rollback precheck as an operator runs it (issue #22, item 1): while a
//! switch is SWITCHED, `bookie-clusters precheck --name old` and
//! `GET /precheck/old` compare the cluster in use (`new`) with `old` and
//! give the same exact `bookie-switch idgen … --advance-beyond N`; the
//! rollback's 409 names the same N; after that step both pass and the
//! rollback goes through. On a real node (REST and CLI), memory stores.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_cli::cli::{run, Cli};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use clap::Parser;
use common::*;

async fn cli(url: &str, args: &[&str]) -> (bool, String) {
    let mut argv = vec!["bookie-clusters", "--url", url, "--token", ADMIN];
    argv.extend_from_slice(args);
    let mut out = Vec::new();
    let r = run(Cli::try_parse_from(argv).unwrap(), &mut out).await;
    (r.is_ok(), String::from_utf8(out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_cli_give_the_rollback_the_same_number() {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let node = start("node-1", store.clone(), &clusters).await;
    let api = format!("{}{BASE}", node.url());
    let t = Some(ADMIN);

    // Before any switch, the ACTIVE cluster's precheck is a clear 409.
    let (s, e) = raw("GET", &format!("{api}/precheck/old"), t, None).await;
    assert_eq!(s, 409, "{e}");
    assert!(e["error"].as_str().unwrap().contains("old"), "{e}");

    let (s, _) = raw(
        "POST",
        &format!("{api}/new"),
        t,
        Some(br#"{"metadataServiceUri":"memory://new"}"#),
    )
    .await;
    assert_eq!(s, 200);
    let (s, sw) = raw(
        "POST",
        &format!("{api}/switch"),
        t,
        Some(br#"{"target":"new"}"#),
    )
    .await;
    assert_eq!(s, 200, "{sw}");
    loop {
        let (_, st) = raw("GET", &format!("{api}/status"), t, None).await;
        if st["switch"]["phase"] == "SWITCHED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // REST: the rollback's own precheck, with the number and the command.
    let (s, pre) = raw("GET", &format!("{api}/precheck/old"), t, None).await;
    assert_eq!(s, 200, "{pre}");
    assert_eq!(pre["rollback"], true, "{pre}");
    assert_eq!(pre["ready"], false, "{pre}");
    assert_eq!(pre["sourceClusterName"], "new");
    assert_eq!(pre["targetClusterName"], "old");
    let n = pre["advanceBeyond"].as_i64().expect("advanceBeyond");
    let new_next = clusters.get_or_create("new").next_ledger_id();
    assert_eq!(
        n,
        new_next + 1000 - 1,
        "the default safety margin counts: {pre}"
    );
    let cmd = pre["advanceCommand"].as_str().unwrap().to_owned();
    assert_eq!(
        cmd,
        format!("bookie-switch idgen --metadata-service-uri memory://old --advance-beyond {n}")
    );

    // CLI: the same check and the same command.
    let (ok, out) = cli(node.url(), &["precheck", "--name", "old"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("rollback"), "{out}");
    assert!(out.contains(&cmd), "{out}");
    let (ok, out) = cli(node.url(), &["precheck", "--name", "old", "--json"]).await;
    assert!(ok, "{out}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json, pre, "REST and CLI agree");

    // The rollback's refusal names the same step; nothing is written.
    let before = tree(store.as_ref() as &dyn MetadataStore).await;
    let (s, e) = raw("POST", &format!("{api}/rollback"), t, Some(b"{}")).await;
    assert_eq!(s, 409, "{e}");
    assert!(e["error"].as_str().unwrap().contains(&cmd), "{e}");
    assert_eq!(e["details"]["advanceBeyond"], n, "{e}");
    assert_eq!(tree(store.as_ref() as &dyn MetadataStore).await, before);

    // What `--advance-beyond N` does: every id from now on is above N.
    clusters
        .get_or_create("old")
        .advance_ledger_id_to(n + 1)
        .unwrap();
    let (_, pre) = raw("GET", &format!("{api}/precheck/old"), t, None).await;
    assert_eq!(pre["ready"], true, "{pre}");
    let (s, rb) = raw("POST", &format!("{api}/rollback"), t, Some(b"{}")).await;
    assert_eq!(s, 200, "{rb}");
    node.stop().await;
}
