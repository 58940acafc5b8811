//! Fail-stop (N20): a node that finds its id held by another live node —
//! which took it while this node's metadata session was lost — stops
//! claiming anything, and leaves that node's registration and the topics'
//! ownership alone.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::DEFAULT_NODES_ROOT;
use bkswitch_metadata_store::{CreateMode, ExpectedVersion, MemoryStore, MetadataStore};
use common::*;

/// A registration of `node-1` by another live node: its URL answers (a
/// listener bound here), its instance is not the running node's.
fn impostor(url: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "nodeId": "node-1",
        "url": url,
        "instance": "another-process",
        "host": "another-host",
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_id_is_taken_by_a_live_node_stops_claiming() {
    let root = MemoryStore::new();
    let clusters = clusters();
    let node = start("node-1", Arc::new(root.new_session()), &clusters).await;
    let topic = "tenant/ns/persistent/t";
    node.open_topic(topic).await.unwrap();
    assert_eq!(node.fail_stopped(), None);
    let mut stopped = node.fail_stopped_watch();

    // Another node took the id while this one's session was lost: its
    // registration replaced this one's (deleted with the session).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_url = format!("http://{}", listener.local_addr().unwrap());
    let other = root.new_session();
    let path = format!("{DEFAULT_NODES_ROOT}/node-1");
    // The node, seeing its registration gone, may register again before the
    // other node's create lands (as it should while it still holds the id):
    // take the id again until the other node holds it.
    let mut attempts = 0;
    loop {
        let _ = root.delete(&path, ExpectedVersion::Any).await;
        match other
            .create(&path, &impostor(&other_url), CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => break,
            Err(e) => {
                attempts += 1;
                assert!(attempts < 50, "the other node never got the id: {e}");
            }
        }
    }
    let owners_before = tree(&root).await;

    tokio::time::timeout(Duration::from_secs(20), stopped.wait_for(|r| r.is_some()))
        .await
        .expect("the node fail-stops")
        .unwrap();
    let reason = node.fail_stopped().unwrap();
    assert!(reason.contains("node-1"), "{reason}");

    // Nothing claimed any more: a topic cannot be opened (refused from the
    // moment the node decided to stop), the REST server is gone once the
    // stop has run (it runs after the reason is published).
    assert!(node.open_topic(topic).await.is_err());
    let addr = node.url().trim_start_matches("http://").to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(&addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the REST server of a fail-stopped node still accepts after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The other node's registration and the topic's ownership are left as
    // they were: they belong to the node holding the id now.
    let held = root.get(&path).await.unwrap().unwrap();
    assert_eq!(held.value, impostor(&other_url));
    let owners_after = tree(&root).await;
    let owners = |t: &std::collections::BTreeMap<String, (Vec<u8>, i64)>| {
        t.iter()
            .filter(|(p, _)| p.contains("%2F"))
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    assert!(
        !owners(&owners_before).is_empty(),
        "the topic had an owner node"
    );
    assert_eq!(owners(&owners_after), owners(&owners_before));
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_keeps_its_id_does_not_stop() {
    let root = MemoryStore::new();
    let clusters = clusters();
    let session = root.new_session();
    let node = start("node-1", Arc::new(session.clone()), &clusters).await;
    // Its session expires (the registration goes with it); nobody took the
    // id, so it registers again and runs on.
    session.expire_session().unwrap();
    let path = format!("{DEFAULT_NODES_ROOT}/node-1");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while root.get(&path).await.unwrap().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not registered again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(node.fail_stopped(), None);
    node.stop().await;
}
