//! Copy progress over the REST API and the metrics: `GET /status` on the
//! coordinating node shows entries and bytes per ledger and in total while a
//! slow copy runs, a node that does not copy answers from the ledger
//! records, and `/metrics` carries the counters and the live gauges.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::wire::NodeStatus;
use bkswitch_admin::Node;
use bkswitch_bk_client::{MemoryClusters, OpKind};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use common::*;

/// A node copying two entries at a time.
async fn slow_node(id: &str, store: Arc<dyn MetadataStore>, clusters: &MemoryClusters) -> Node {
    let mut cfg = bkswitch_admin::testkit::node_config(id, store, clusters);
    cfg.orchestrator.copy_window = 2;
    Node::start(cfg).await.unwrap()
}

/// The value of the sample `series` (name and labels as exposed), if any.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

async fn metrics(url: &str) -> String {
    let (code, text) = raw("GET", &format!("{url}/metrics"), None, None).await;
    assert_eq!(code, 200, "{text}");
    text.as_str().unwrap().to_owned()
}

async fn status(url: &str) -> NodeStatus {
    let (code, st) = raw("GET", &format!("{url}{BASE}/status"), Some(ADMIN), None).await;
    assert_eq!(code, 200, "{st}");
    NodeStatus(st)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_the_copy_while_it_runs() {
    let store = MemoryStore::new();
    let clusters = clusters();
    let node = slow_node("node-1", Arc::new(store.new_session()), &clusters).await;
    let other = slow_node("node-2", Arc::new(store.new_session()), &clusters).await;
    let (url, other_url) = (node.url().to_owned(), other.url().to_owned());
    for i in 0..3 {
        let ml = node
            .open_topic(&format!("public/default/persistent/t{i}"))
            .await
            .unwrap();
        for n in 0..60 {
            ml.append(format!("m{n}").into_bytes()).await.unwrap();
        }
        let c = ml
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        for e in c.read_entries(60).await.unwrap() {
            c.mark_delete(e.position).await.unwrap();
        }
    }
    assert!(
        status(&url).await.copy_progress().is_none(),
        "no switch yet"
    );
    let (s, _) = raw(
        "POST",
        &format!("{url}{BASE}/new"),
        Some(ADMIN),
        Some(br#"{"metadataServiceUri":"memory://new"}"#),
    )
    .await;
    assert_eq!(s, 200);
    // Every read of the source takes 20 ms.
    clusters
        .get("old")
        .unwrap()
        .set_latency(OpKind::Read, Duration::from_millis(20));
    let (s, sw) = raw(
        "POST",
        &format!("{url}{BASE}/switch"),
        Some(ADMIN),
        Some(br#"{"target":"new"}"#),
    )
    .await;
    assert_eq!(s, 200, "{sw}");

    // Mid-copy: a ledger partly copied, on the coordinator (node-1).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mid, mid_metrics) = loop {
        assert!(Instant::now() < deadline, "no mid-copy status seen");
        let st = status(&url).await;
        if let Some(p) = st.copy_progress() {
            let (copied, total) = p.entries();
            if p.live()
                && p.copying()
                    .iter()
                    .any(|l| l.entries_copied > 0 && l.entries_copied < l.entries_total)
                && copied < total
            {
                break (p, metrics(&url).await);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let (copied, total) = mid.entries();
    assert!(copied > 0 && copied < total, "{:?}", mid.raw());
    assert!(mid.bytes().0 < mid.bytes().1, "{:?}", mid.raw());
    assert_eq!(mid.ledgers().1, 3, "three cursor ledgers: {:?}", mid.raw());
    assert!(mid.started_at().is_some());
    let l = &mid.copying()[0];
    assert_eq!(
        (l.kind.as_deref(), l.source.as_deref(), l.target.as_deref()),
        (Some("cursor"), Some("old"), Some("new"))
    );
    assert!(l.ledger_id.is_some() && l.bytes_total > 0, "{l:?}");
    let gauge = sample(&mid_metrics, "bkswitch_switch_copied_entries").unwrap();
    let expected = sample(&mid_metrics, "bkswitch_switch_expected_entries").unwrap();
    assert!(gauge < expected, "{mid_metrics}");
    assert!(sample(&mid_metrics, "bkswitch_copied_entries_total").unwrap() > 0.0);
    assert_eq!(
        sample(
            &mid_metrics,
            "bkswitch_switch_copy_ledgers{state=\"total\"}"
        ),
        Some(3.0)
    );

    // The node that does not copy answers from the records; no live gauges.
    let st = status(&other_url).await;
    assert_eq!(st.switch().unwrap().phase_name(), Some("BUILD"));
    let p = st.copy_progress().expect("from the records");
    assert!(!p.live() && p.copying().is_empty(), "{:?}", p.raw());
    assert_eq!(p.entries().0, p.entries().1);
    assert!(p.ledgers().0 < 3, "{:?}", p.raw());
    let other_metrics = metrics(&other_url).await;
    assert_eq!(
        sample(&other_metrics, "bkswitch_switch_copied_entries"),
        None
    );
    assert_eq!(
        sample(&other_metrics, "bkswitch_copied_entries_total"),
        Some(0.0)
    );

    // The end: the totals are the copies'.
    let end = loop {
        assert!(Instant::now() < deadline, "the switch did not finish");
        let st = status(&url).await;
        if st.switch().and_then(|s| s.phase_name().map(str::to_owned)) == Some("SWITCHED".into()) {
            break st.copy_progress().expect("kept after the copy");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let new = clusters.get("new").unwrap();
    let records = node
        .orchestrator()
        .ledger_records(sw["switchId"].as_str().unwrap())
        .await
        .unwrap();
    let entries: u64 = records
        .iter()
        .map(|r| (new.ledger_metadata(r.ledger_id).unwrap().last_entry_id + 1) as u64)
        .sum();
    let bytes: u64 = records
        .iter()
        .map(|r| new.ledger_metadata(r.ledger_id).unwrap().length)
        .sum();
    assert!(entries >= 3 * 60, "{entries}");
    assert_eq!(end.entries(), (entries, entries), "{:?}", end.raw());
    assert_eq!(end.bytes(), (bytes, bytes));
    assert_eq!(end.ledgers(), (3, 3));
    let text = metrics(&url).await;
    assert_eq!(
        sample(&text, "bkswitch_copied_entries_total"),
        Some(entries as f64)
    );
    assert_eq!(
        sample(&text, "bkswitch_copied_bytes_total"),
        Some(bytes as f64)
    );
    assert_eq!(
        sample(&text, "bkswitch_switch_copied_entries"),
        sample(&text, "bkswitch_switch_expected_entries")
    );
    other.stop().await;
    node.stop().await;
}
