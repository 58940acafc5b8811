//! Real Apache Pulsar brokers, geo-replicated, with real Java and Python
//! clients. One pair of brokers for the whole binary (a start takes 10–20 s
//! on two cores); each test uses topics of its own.

use std::time::{Duration, Instant};

use bkswitch_pulsar_harness::{
    listening_sockets, pulsar_available, pulsar_proxy_available, python_client_available, Admin,
    ClientKind, GeoPair, PulsarProxy, PulsarProxyOptions, Traffic, TrafficOptions, TrafficReport,
    Transport, CLUSTER_A, CLUSTER_B, GEO_NAMESPACE,
};
use tokio::sync::OnceCell;

/// The binary's pair, started by the first test that needs it (a failed
/// start is reported by every test, not tried again).
async fn pair() -> &'static GeoPair {
    static PAIR: OnceCell<Result<GeoPair, String>> = OnceCell::const_new();
    let pair = PAIR
        .get_or_init(|| async {
            let started = Instant::now();
            let pair = GeoPair::start().await.map_err(|e| e.to_string());
            eprintln!(
                "GeoPair started in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            pair
        })
        .await;
    match pair {
        Ok(pair) => pair,
        Err(e) => panic!("the GeoPair did not start: {e}"),
    }
}

/// A topic of the replicated namespace no other test uses.
fn fresh_topic(name: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("persistent://{GEO_NAMESPACE}/{name}-{}", &id[..8])
}

/// The checks every clean run must pass.
fn assert_clean(report: &TrafficReport, what: &str) {
    assert_eq!(report.send_errors, 0, "{what}: send errors: {report:?}");
    assert_eq!(
        report.missing, 0,
        "{what}: acknowledged but never received: {report:?}"
    );
    assert!(
        report.acked > 0,
        "{what}: nothing was acknowledged: {report:?}"
    );
    assert_eq!(report.acked, report.sent, "{what}: {report:?}");
    assert_eq!(report.unique_received, report.acked, "{what}: {report:?}");
    assert_eq!(report.foreign, 0, "{what}: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_listen_on_loopback_only() {
    if !pulsar_available() {
        return;
    }
    let pair = pair().await;
    for broker in pair.brokers() {
        let sockets = broker.listening_sockets();
        let tcp_ports: Vec<u16> = sockets
            .iter()
            .filter(|s| s.transport == Transport::Tcp)
            .map(|s| s.addr.port())
            .collect();
        for port in [
            broker.broker_port(),
            broker.web_port(),
            broker.bookie_port(),
        ] {
            assert!(
                tcp_ports.contains(&port),
                "{}: nothing listens on {port}: {sockets:?}",
                broker.name()
            );
        }
        let everywhere: Vec<String> = sockets
            .iter()
            .filter(|s| !s.is_loopback())
            .map(ToString::to_string)
            .collect();
        assert!(
            everywhere.is_empty(),
            "{} listens beyond the loopback interface: {everywhere:?} (all: {sockets:?})",
            broker.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_produced_on_a_are_replicated_to_b() {
    if !pulsar_available() || !python_client_available() {
        return;
    }
    let pair = pair().await;
    let (a, b) = (pair.a().admin(), pair.b().admin());
    assert_eq!(
        a.replication(GEO_NAMESPACE).await.unwrap(),
        [CLUSTER_A, CLUSTER_B]
    );
    let topic = fresh_topic("replicated");
    // A subscription on B, from the start, before anything is produced on A.
    b.create_topic(&topic).await.unwrap();
    b.create_subscription(&topic, "check", false).await.unwrap();
    a.create_topic(&topic).await.unwrap();

    let options = TrafficOptions::new(&pair.a().broker_url(), &topic, "traffic")
        .rate(25.0)
        .duration(Duration::from_secs(2));
    let report = Traffic::start(ClientKind::Python, &options)
        .await
        .unwrap()
        .finish()
        .await
        .unwrap();
    assert_clean(&report, "python on A");
    pair.wait_replicated(CLUSTER_A, &topic, Duration::from_secs(30))
        .await
        .unwrap();

    let stats = b.topic_stats(&topic).await.unwrap();
    let from_a = stats
        .replication
        .get(CLUSTER_A)
        .cloned()
        .unwrap_or_default();
    assert!(
        from_a.msg_in_count >= report.acked,
        "B received {} messages from A's replicator, A acknowledged {}: {}",
        from_a.msg_in_count,
        report.acked,
        stats.raw["replication"]
    );
    assert!(
        stats.msg_in_counter >= report.acked,
        "B has {} messages in, A acknowledged {}",
        stats.msg_in_counter,
        report.acked
    );
    // The first message of the run, read on B (markers of replicated
    // subscriptions may come first).
    let first = format!("{}-0", report.run_id);
    let mut seen = Vec::new();
    for position in 1..=20 {
        let payload = b.peek(&topic, "check", position).await.unwrap();
        let payload = String::from_utf8_lossy(&payload).into_owned();
        if payload == first {
            return;
        }
        seen.push(payload);
    }
    panic!("B's first messages are not A's: {seen:?}");
}

async fn clean_traffic_on_a(kind: ClientKind) {
    let pair = pair().await;
    let topic = fresh_topic(&format!("{kind:?}-steady").to_lowercase());
    let options = TrafficOptions::new(&pair.a().broker_url(), &topic, "steady").rate(50.0);
    let traffic = Traffic::start(kind, &options).await.unwrap();
    traffic
        .wait_for(Duration::from_secs(30), |p| p.received >= 150)
        .await
        .unwrap();
    let stats = pair.a().admin().topic_stats(&topic).await.unwrap();
    assert_eq!(stats.publishers, [traffic.producer_name()]);
    assert_eq!(stats.consumers("steady"), 1, "{:?}", stats.raw);
    assert!(stats.subscriptions["steady"].replicated, "{:?}", stats.raw);
    let report = traffic.stop().await.unwrap();
    assert_clean(&report, &format!("{kind:?} on A"));
    assert!(report.acked >= 150, "{report:?}");
    assert_eq!(report.duplicates, 0, "{report:?}");
    assert_eq!(report.reordered, 0, "{report:?}");
    assert_eq!(report.producer_disconnects, 0, "{report:?}");
    if kind == ClientKind::Java {
        let to = report.connected_to.as_deref().unwrap_or_default();
        assert_eq!(pair.cluster_of(to), Some(CLUSTER_A), "{report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_traffic_on_a_loses_nothing() {
    if !pulsar_available() {
        return;
    }
    clean_traffic_on_a(ClientKind::Java).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_traffic_on_a_loses_nothing() {
    if !pulsar_available() || !python_client_available() {
        return;
    }
    clean_traffic_on_a(ClientKind::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unload_during_traffic_reconnects_both_clients() {
    if !pulsar_available() || !python_client_available() {
        return;
    }
    let pair = pair().await;
    let admin = pair.a().admin();
    let mut runs = Vec::new();
    for kind in [ClientKind::Java, ClientKind::Python] {
        let topic = fresh_topic(&format!("{kind:?}-unload").to_lowercase());
        let options = TrafficOptions::new(&pair.a().broker_url(), &topic, "moving").rate(40.0);
        runs.push((kind, topic, Traffic::start(kind, &options).await.unwrap()));
    }
    for (_, _, traffic) in &runs {
        traffic
            .wait_for(Duration::from_secs(30), |p| p.received >= 20)
            .await
            .unwrap();
    }
    let mut before = Vec::new();
    for (_, topic, traffic) in &runs {
        admin.unload(topic).await.unwrap();
        before.push(traffic.progress());
    }
    for ((_, _, traffic), before) in runs.iter().zip(&before) {
        traffic
            .wait_for(Duration::from_secs(30), |p| {
                p.acked >= before.acked + 40 && p.received >= before.received + 40
            })
            .await
            .unwrap();
    }
    for (kind, topic, traffic) in runs {
        let stats = admin.topic_stats(&topic).await.unwrap();
        assert_eq!(
            stats.publishers,
            [traffic.producer_name()],
            "{:?}",
            stats.raw
        );
        assert_eq!(stats.consumers("moving"), 1, "{:?}", stats.raw);
        let report = traffic.stop().await.unwrap();
        let what = format!("{kind:?} across an unload");
        assert_clean(&report, &what);
        assert!(report.producer_disconnects >= 1, "{what}: {report:?}");
        assert!(report.consumer_disconnects >= 1, "{what}: {report:?}");
        eprintln!(
            "{what}: worst send {:.0} ms, {} duplicates, {} reordered",
            report.worst_blocked_send_ms, report.duplicates, report.reordered
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_traffic_on_a_partitioned_topic_through_http_lookups() {
    if !pulsar_available() {
        return;
    }
    let pair = pair().await;
    let admin = pair.a().admin();
    let topic = fresh_topic("partitioned");
    admin.create_partitioned_topic(&topic, 3).await.unwrap();
    admin
        .create_subscription(&topic, "parts", true)
        .await
        .unwrap();
    let options = TrafficOptions::new(&pair.a().http_url(), &topic, "parts")
        .rate(60.0)
        .partitioned(true);
    let traffic = Traffic::start(ClientKind::Java, &options).await.unwrap();
    traffic
        .wait_for(Duration::from_secs(30), |p| p.received >= 90)
        .await
        .unwrap();
    let stats = admin.partitioned_stats(&topic).await.unwrap();
    assert_eq!(stats.partitions.len(), 3, "{:?}", stats.total.raw);
    for (name, partition) in &stats.partitions {
        assert_eq!(partition.publishers.len(), 1, "{name}: {:?}", partition.raw);
        assert_eq!(
            partition.consumers("parts"),
            1,
            "{name}: {:?}",
            partition.raw
        );
        assert!(
            partition.subscriptions["parts"].replicated,
            "{name}: {:?}",
            partition.raw
        );
        assert!(
            partition.msg_in_counter > 0,
            "{name}: nothing was routed here"
        );
    }
    let report = traffic.stop().await.unwrap();
    assert_clean(&report, "Java on a partitioned topic");
    assert_eq!(report.reordered, 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_traffic_through_pulsars_proxy_loses_nothing() {
    if !pulsar_available() || !pulsar_proxy_available() {
        return;
    }
    let pair = pair().await;
    let proxy = PulsarProxy::start(PulsarProxyOptions::new(pair.a()))
        .await
        .unwrap();
    // Its TCP listeners are on loopback only. (It also holds one UDP socket
    // on 0.0.0.0: the DNS resolver its `ProxyService` builds to check broker
    // addresses, whose bind address no setting reaches.)
    let sockets = listening_sockets(proxy.pid().unwrap());
    let tcp: Vec<_> = sockets
        .iter()
        .filter(|s| s.transport == Transport::Tcp)
        .collect();
    assert_eq!(tcp.len(), 2, "{sockets:?}");
    assert!(tcp.iter().all(|s| s.addr.ip().is_loopback()), "{sockets:?}");
    let topic = fresh_topic("through-pulsar-proxy");
    // An HTTP lookup through it names A's broker.
    let broker = Admin::new(&proxy.http_url()).lookup(&topic).await.unwrap();
    assert_eq!(pair.cluster_of(&broker), Some(CLUSTER_A), "{broker}");
    let options = TrafficOptions::new(&proxy.service_url(), &topic, "proxied").rate(50.0);
    let traffic = Traffic::start(ClientKind::Java, &options).await.unwrap();
    traffic
        .wait_for(Duration::from_secs(30), |p| p.received >= 100)
        .await
        .unwrap();
    let report = traffic.stop().await.unwrap();
    assert_clean(&report, "Java through Pulsar's proxy");
    assert_eq!(report.duplicates, 0, "{report:?}");
    proxy.stop();
    assert!(!proxy.is_running());
}
