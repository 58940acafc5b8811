//! The lookup proxy against stand-in brokers: what it answers, where it
//! forwards, its barrier, and how it refuses.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_lookup_proxy::{Home, Listener, LookupProxy, LookupResult, ProxyConfig, TlsListener};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_pulsar_wire::proto::{
    command_lookup_topic_response::LookupType, command_partitioned_topic_metadata_response,
    BaseCommand, CommandGetSchema, CommandGetTopicsOfNamespace, CommandProducer, ServerError,
};
use bkswitch_pulsar_wire::{commands, CommandType};
use bkswitch_topic_routes::{PulsarCluster, TopicRoutes};
use common::{http_get, Client, FakeBroker};

fn cluster(name: &str, broker: &FakeBroker) -> PulsarCluster {
    PulsarCluster {
        name: name.to_owned(),
        service_url: broker.url.clone(),
        service_url_tls: Some(broker.url.replace("pulsar://", "pulsar+ssl://")),
        web_service_url: format!("http://{name}.example:8080"),
        admin_url: format!("http://{name}.example:8080"),
    }
}

struct World {
    root: MemoryStore,
    session: MemoryStore,
    routes: TopicRoutes,
    a: FakeBroker,
    b: FakeBroker,
    proxy: LookupProxy,
}

/// Clusters `a` and `b` (stand-in brokers), namespace `t/ns` on `a`, topic
/// `t/ns/moved` on `b`, and a proxy on its own metadata session.
async fn world(config: ProxyConfig) -> World {
    let root = MemoryStore::new();
    let routes = TopicRoutes::new(Arc::new(root.clone()));
    let (a, b) = (FakeBroker::start().await, FakeBroker::start().await);
    routes.register_cluster(cluster("a", &a)).await.unwrap();
    routes.register_cluster(cluster("b", &b)).await.unwrap();
    routes.set_route("namespace:t/ns", "a").await.unwrap();
    routes
        .set_route("topic:persistent://t/ns/moved", "b")
        .await
        .unwrap();
    let session = root.new_session();
    let proxy = LookupProxy::start(config, Arc::new(session.clone()))
        .await
        .unwrap();
    World {
        root,
        session,
        routes,
        a,
        b,
        proxy,
    }
}

async fn lookup<S>(c: &mut Client<S>, topic: &str, id: u64) -> BaseCommand
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let answer = c.call(commands::lookup(topic, id, false)).await;
    assert_eq!(answer.r#type, CommandType::LookupResponse as i32);
    assert_eq!(
        answer.lookup_topic_response.as_ref().unwrap().request_id,
        id
    );
    answer
}

fn redirect_of(answer: &BaseCommand) -> (String, Option<String>, bool) {
    let r = answer.lookup_topic_response.as_ref().unwrap();
    assert_eq!(
        r.response,
        Some(LookupType::Redirect as i32),
        "not a redirect: {r:?}"
    );
    (
        r.broker_service_url.clone().unwrap(),
        r.broker_service_url_tls.clone(),
        r.authoritative.unwrap_or(false),
    )
}

fn failure_of(answer: &BaseCommand) -> (i32, String) {
    let r = answer.lookup_topic_response.as_ref().unwrap();
    assert_eq!(r.response, Some(LookupType::Failed as i32), "{r:?}");
    (r.error.unwrap(), r.message.clone().unwrap())
}

#[tokio::test]
async fn the_handshake_takes_the_lower_version_and_announces_only_what_is_implemented() {
    let w = world(ProxyConfig::new("p1")).await;
    let addr = w.proxy.binary_addr().unwrap();
    let mut c = Client::connect(addr).await;
    let connected = c.handshake(25).await.connected.unwrap();
    assert_eq!(connected.protocol_version, Some(21));
    let flags = connected.feature_flags.unwrap();
    assert_eq!(
        flags.supports_get_partitioned_metadata_without_auto_creation,
        Some(true)
    );
    assert_eq!(flags.supports_topic_watchers, None);
    assert_eq!(flags.supports_auth_refresh, None);
    // An older client gets its own version back; ping is answered.
    let mut old = Client::connect(addr).await;
    let connected = old.handshake(15).await.connected.unwrap();
    assert_eq!(connected.protocol_version, Some(15));
    assert_eq!(
        old.call(commands::ping()).await.r#type,
        CommandType::Pong as i32
    );
    w.proxy.stop().await;
}

#[tokio::test]
async fn lookups_redirect_to_the_routed_cluster_and_partitions_follow_their_topic() {
    let w = world(ProxyConfig::new("p1")).await;
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    let (url, tls, authoritative) = redirect_of(&lookup(&mut c, "persistent://t/ns/x", 1).await);
    assert_eq!(url, w.a.url);
    assert_eq!(tls.unwrap(), w.a.url.replace("pulsar://", "pulsar+ssl://"));
    assert!(!authoritative, "the cluster's brokers choose the owner");
    for topic in [
        "persistent://t/ns/moved",
        "persistent://t/ns/moved-partition-2",
    ] {
        assert_eq!(redirect_of(&lookup(&mut c, topic, 2).await).0, w.b.url);
    }
    // A route change is served once acknowledged.
    let table = w.routes.set_route("namespace:t/ns", "b").await.unwrap();
    w.routes
        .wait_acknowledged(table.version, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        redirect_of(&lookup(&mut c, "persistent://t/ns/x", 3).await).0,
        w.b.url
    );
    assert_eq!(
        w.proxy
            .metrics()
            .lookups("b", Listener::Binary, LookupResult::Redirect),
        3
    );
    w.proxy.stop().await;
}

#[tokio::test]
async fn pipelined_lookups_are_all_answered_in_order() {
    use futures::SinkExt;

    let w = world(ProxyConfig::new("p1")).await;
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    // 300 lookups and a ping written at once: the proxy answers them in
    // batches, each written out in one go.
    for id in 1..=300u64 {
        let topic = if id % 3 == 0 {
            "persistent://t/ns/moved"
        } else {
            "persistent://t/ns/x"
        };
        c.framed
            .feed(bkswitch_pulsar_wire::Frame::new(commands::lookup(
                topic, id, false,
            )))
            .await
            .unwrap();
        if id == 150 {
            c.framed
                .feed(bkswitch_pulsar_wire::Frame::new(commands::ping()))
                .await
                .unwrap();
        }
    }
    SinkExt::<bkswitch_pulsar_wire::Frame>::flush(&mut c.framed)
        .await
        .unwrap();
    let mut next_id = 1;
    let mut pongs = 0;
    while next_id <= 300 {
        let answer = c.recv().await.expect("an answer");
        if answer.r#type == CommandType::Pong as i32 {
            pongs += 1;
            continue;
        }
        assert_eq!(
            answer.lookup_topic_response.as_ref().unwrap().request_id,
            next_id
        );
        let want = if next_id % 3 == 0 { &w.b.url } else { &w.a.url };
        assert_eq!(&redirect_of(&answer).0, want, "request {next_id}");
        next_id += 1;
    }
    assert_eq!(pongs, 1);
    assert_eq!(
        w.proxy
            .metrics()
            .lookups("a", Listener::Binary, LookupResult::Redirect),
        200
    );
    w.proxy.stop().await;
}

/// Lookups `ids` written at once (odd ids for `t/ns/x`, even ones for a
/// partition of `t/ns/moved`).
async fn feed_lookups(c: &mut Client<tokio::net::TcpStream>, ids: std::ops::RangeInclusive<u64>) {
    use futures::SinkExt;
    for id in ids {
        let topic = if id % 2 == 0 {
            "persistent://t/ns/moved-partition-1"
        } else {
            "persistent://t/ns/x"
        };
        c.framed
            .feed(bkswitch_pulsar_wire::Frame::new(commands::lookup(
                topic, id, false,
            )))
            .await
            .unwrap();
    }
    SinkExt::<bkswitch_pulsar_wire::Frame>::flush(&mut c.framed)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_batch_with_an_unreadable_frame_and_a_closing_client_is_answered_whole() {
    use tokio::io::AsyncWriteExt;

    let w = world(ProxyConfig::new("p1")).await;
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    feed_lookups(&mut c, 1..=20).await;
    // A whole frame whose command is not protobuf: skipped, the batch goes on.
    let garbage = [0, 0, 0, 7, 0, 0, 0, 3, 0xff, 0xff, 0xff];
    c.framed.get_mut().write_all(&garbage).await.unwrap();
    feed_lookups(&mut c, 21..=40).await;
    // The client closes its side: everything before is still answered.
    c.framed.get_mut().shutdown().await.unwrap();
    for id in 1..=40u64 {
        let answer = c
            .recv()
            .await
            .unwrap_or_else(|| panic!("no answer to {id}"));
        assert_eq!(
            answer.lookup_topic_response.as_ref().unwrap().request_id,
            id
        );
        let want = if id % 2 == 0 { &w.b.url } else { &w.a.url };
        assert_eq!(&redirect_of(&answer).0, want, "request {id}");
    }
    assert!(c.recv().await.is_none(), "the proxy ends the connection");
    w.proxy.stop().await;
}

#[tokio::test]
async fn bad_names_missing_routes_and_system_topics() {
    let mut config = ProxyConfig::new("p1");
    config.home = Home::new(Some("b".to_owned()));
    let w = world(config).await;
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    let (code, message) = failure_of(&lookup(&mut c, "persistent://t/ns", 1).await);
    assert_eq!(code, ServerError::InvalidTopicName as i32);
    assert!(message.contains("persistent://t/ns"), "{message}");
    let (code, message) = failure_of(&lookup(&mut c, "persistent://other/ns/x", 2).await);
    assert_eq!(code, ServerError::ServiceNotReady as i32);
    assert!(
        message.contains("persistent://other/ns/x") && message.contains("default route"),
        "{message}"
    );
    // The transaction coordinator's topics go home, whatever the routes.
    let tc = "persistent://pulsar/system/transaction_coordinator_assign-partition-0";
    assert_eq!(redirect_of(&lookup(&mut c, tc, 3).await).0, w.b.url);
    w.proxy.stop().await;
}

#[tokio::test]
async fn an_unreadable_frame_from_a_broker_does_not_end_its_connection() {
    let w = world(ProxyConfig::new("p1")).await;
    w.a.partitions
        .lock()
        .insert("persistent://t/ns/garbled".into(), 4);
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    for id in [10, 11] {
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            c.call(commands::partitioned_metadata(
                "persistent://t/ns/garbled",
                id,
            )),
        )
        .await
        .expect("the broker's answer after its unreadable frame");
        let r = answer.partition_metadata_response.unwrap();
        assert_eq!((r.request_id, r.partitions), (id, Some(4)));
    }
    // The broker was asked twice, and answered both.
    let asked = w.a.asked.lock().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked.iter().all(|(what, _)| what == "partitioned"));
    w.proxy.stop().await;
}

#[tokio::test]
async fn forwarded_requests_reach_the_routed_cluster_with_the_clients_request_id() {
    let w = world(ProxyConfig::new("p1")).await;
    w.a.partitions
        .lock()
        .insert("persistent://t/ns/x".into(), 3);
    w.b.partitions
        .lock()
        .insert("persistent://t/ns/x".into(), 5);
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    let answer = c
        .call(commands::partitioned_metadata("persistent://t/ns/x", 77))
        .await;
    let r = answer.partition_metadata_response.unwrap();
    assert_eq!((r.request_id, r.partitions), (77, Some(3)));
    assert!(w.b.asked.lock().is_empty());

    let mut get_schema = commands::base(CommandType::GetSchema);
    get_schema.get_schema = Some(CommandGetSchema {
        request_id: 78,
        topic: "persistent://t/ns/moved".into(),
        schema_version: None,
    });
    let r = c.call(get_schema).await.get_schema_response.unwrap();
    assert_eq!(r.request_id, 78);
    assert_eq!(r.error_code, Some(ServerError::TopicNotFound as i32));
    assert!(r.error_message.unwrap().contains(&w.b.url));

    // The namespace is split (topic `moved` on b): both lists, merged.
    w.a.topics.lock().extend(["persistent://t/ns/x".to_owned()]);
    w.b.topics.lock().extend([
        "persistent://t/ns/moved".to_owned(),
        "persistent://t/ns/x".to_owned(),
    ]);
    let mut list = commands::base(CommandType::GetTopicsOfNamespace);
    list.get_topics_of_namespace = Some(CommandGetTopicsOfNamespace {
        request_id: 79,
        namespace: "t/ns".into(),
        ..Default::default()
    });
    let r = c.call(list).await.get_topics_of_namespace_response.unwrap();
    assert_eq!(r.request_id, 79);
    assert_eq!(
        r.topics,
        vec!["persistent://t/ns/moved", "persistent://t/ns/x"]
    );
    assert_eq!(
        r.topics_hash, None,
        "a merged list has no one cluster's hash"
    );

    // A cluster that does not answer: a retryable failure naming it.
    w.a.stop();
    let dead = PulsarCluster {
        service_url: "pulsar://127.0.0.1:1".into(),
        ..cluster("a", &w.a)
    };
    w.routes
        .apply(&[bkswitch_topic_routes::Change::UpdateCluster(dead)])
        .await
        .unwrap();
    let v = w.routes.table().await.unwrap().version;
    w.routes
        .wait_acknowledged(v, Duration::from_secs(5))
        .await
        .unwrap();
    let r = c
        .call(commands::partitioned_metadata("persistent://t/ns/y", 80))
        .await
        .partition_metadata_response
        .unwrap();
    assert_eq!(
        r.response,
        Some(command_partitioned_topic_metadata_response::LookupType::Failed as i32)
    );
    assert_eq!(r.error, Some(ServerError::ServiceNotReady as i32));
    assert!(r.message.unwrap().contains("cluster `a`"));
    w.proxy.stop().await;
}

#[tokio::test]
async fn what_a_lookup_proxy_does_not_serve_is_refused_by_name() {
    let w = world(ProxyConfig::new("p1")).await;
    let addr = w.proxy.binary_addr().unwrap();
    // Not CONNECT first: an error, then the connection ends.
    let mut c = Client::connect(addr).await;
    let e = c.call(commands::ping()).await.error.unwrap();
    assert!(e.message.contains("CONNECT"));
    assert!(c.recv().await.is_none());
    // Relaying is not offered.
    let mut c = Client::connect(addr).await;
    let mut connect = commands::connect("test", 21, None, None);
    connect.connect.as_mut().unwrap().proxy_to_broker_url = Some("127.0.0.1:6650".into());
    let e = c.call(connect).await.error.unwrap();
    assert_eq!(e.error, ServerError::NotAllowedError as i32);
    assert!(e.message.contains("does not relay"));
    // A producer: refused with its request id.
    let mut c = Client::connect(addr).await;
    c.handshake(21).await;
    let mut producer = commands::base(CommandType::Producer);
    producer.producer = Some(CommandProducer {
        topic: "persistent://t/ns/x".into(),
        producer_id: 1,
        request_id: 9,
        ..Default::default()
    });
    let e = c.call(producer).await.error.unwrap();
    assert_eq!(e.request_id, 9);
    assert!(e.message.contains("PRODUCER"), "{}", e.message);
    w.proxy.stop().await;
}

#[tokio::test]
async fn a_proxy_that_lost_its_session_fails_closed_until_it_read_the_table_again() {
    let w = world(ProxyConfig::new("p1")).await;
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    let mut acked = w.proxy.view().acknowledged_watch();
    w.session.expire_session().unwrap();
    // Back in a new session: the table is read again and acknowledged
    // again (the ephemeral acknowledgement died with the old session).
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            acked.changed().await.unwrap();
            if w.routes.acks().await.unwrap().contains_key("p1") {
                break;
            }
        }
    })
    .await
    .expect("acknowledged again in the new session");
    assert_eq!(
        redirect_of(&lookup(&mut c, "persistent://t/ns/x", 1).await).0,
        w.a.url
    );
    w.proxy.stop().await;
}

#[tokio::test]
async fn lookups_are_refused_while_the_table_cannot_be_read() {
    let w = world(ProxyConfig::new("p1")).await;
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    // A table nobody can decode: the proxy closes rather than guess.
    w.root
        .put(
            &w.routes.table_path(),
            b"not json",
            bkswitch_metadata_store::ExpectedVersion::Any,
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let (code, message) = loop {
        let answer = lookup(&mut c, "persistent://t/ns/x", 1).await;
        let r = answer.lookup_topic_response.as_ref().unwrap();
        if r.response == Some(LookupType::Failed as i32) {
            break failure_of(&answer);
        }
        assert!(tokio::time::Instant::now() < deadline, "still answering");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(code, ServerError::ServiceNotReady as i32);
    assert!(message.contains("cannot be read"), "{message}");
    let (status, headers, body) = http_get(
        w.proxy.http_addr().unwrap(),
        "/lookup/v2/topic/persistent/t/ns/x",
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers.get("retry-after").map(String::as_str), Some("1"));
    w.proxy.stop().await;
}

#[tokio::test]
async fn a_stopped_proxy_withdraws_its_acknowledgement() {
    let w = world(ProxyConfig::new("p1")).await;
    assert!(w.routes.acks().await.unwrap().contains_key("p1"));
    w.proxy.stop().await;
    assert!(!w.routes.acks().await.unwrap().contains_key("p1"));
    // The barrier no longer waits for it.
    let table = w.routes.set_route("namespace:t/ns", "b").await.unwrap();
    w.routes
        .wait_acknowledged(table.version, Duration::from_millis(200))
        .await
        .unwrap();
}

#[tokio::test]
async fn http_lookups_redirect_to_the_clusters_web_service() {
    let w = world(ProxyConfig::new("p1")).await;
    let http = w.proxy.http_addr().unwrap();
    let (status, headers, _) = http_get(
        http,
        "/lookup/v2/topic/persistent/t/ns/moved?authoritative=false",
    )
    .await;
    assert_eq!(status, 307);
    assert_eq!(
        headers["location"],
        "http://b.example:8080/lookup/v2/topic/persistent/t/ns/moved?authoritative=false"
    );
    let (status, headers, _) = http_get(
        http,
        "/admin/v2/persistent/t/ns/x/partitions?checkAllowAutoCreation=true",
    )
    .await;
    assert_eq!(status, 307);
    assert_eq!(
        headers["location"],
        "http://a.example:8080/admin/v2/persistent/t/ns/x/partitions?checkAllowAutoCreation=true"
    );
    let (status, _, body) = http_get(http, "/lookup/v2/topic/persistent/nobody/ns/x").await;
    assert_eq!(status, 503);
    assert!(body.contains("no route"), "{body}");
    // Split namespace: the HTTP listing is refused with what to do.
    let (status, _, body) = http_get(http, "/admin/v2/namespaces/t/ns/topics").await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("split"), "{body}");
    let (status, _, body) = http_get(http, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        body.contains(
            r#"bkswitch_proxy_lookups_total{cluster="b",listener="http",result="redirect"} 1"#
        ),
        "{body}"
    );
    assert!(body.contains("bkswitch_proxy_serving 1"), "{body}");
    let (status, _, body) = http_get(http, "/status").await;
    assert_eq!(status, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["serving"], true);
    assert_eq!(status["acknowledged"], status["tableVersion"]);
    w.proxy.stop().await;
}

#[tokio::test]
async fn the_tls_listener_answers_with_the_clusters_tls_url() {
    use rcgen::{CertificateParams, KeyPair};
    let dir = std::env::temp_dir().join(format!("bkswitch-proxy-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let mut config = ProxyConfig::new("p1");
    config.tls = Some(TlsListener {
        addr: "127.0.0.1:0".into(),
        cert_file: dir.join("cert.pem"),
        key_file: dir.join("key.pem"),
    });
    let w = world(config).await;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let client_config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
    let tcp = tokio::net::TcpStream::connect(w.proxy.tls_addr().unwrap())
        .await
        .unwrap();
    let tls = connector
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let mut c = Client::over(tls);
    c.handshake(21).await;
    let (_, tls_url, _) = redirect_of(&lookup(&mut c, "persistent://t/ns/moved", 4).await);
    assert_eq!(
        tls_url.unwrap(),
        w.b.url.replace("pulsar://", "pulsar+ssl://")
    );

    // A key that does not fit the certificate is refused at start, naming it.
    let other = KeyPair::generate().unwrap();
    std::fs::write(dir.join("other.pem"), other.serialize_pem()).unwrap();
    let mut bad = ProxyConfig::new("p2");
    bad.tls = Some(TlsListener {
        addr: "127.0.0.1:0".into(),
        cert_file: dir.join("cert.pem"),
        key_file: dir.join("missing.pem"),
    });
    let err = LookupProxy::start(bad, Arc::new(w.root.clone()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("missing.pem"), "{err}");
    w.proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Prometheus's own checker reads the proxy's exposition without a
/// complaint (`promtool`, installed by `scripts/test.sh`).
#[tokio::test]
async fn promtool_accepts_the_metrics() {
    use std::io::Write;
    let w = world(ProxyConfig::new("p1")).await;
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    lookup(&mut c, "persistent://t/ns/x", 1).await;
    lookup(&mut c, "persistent://nobody/ns/x", 2).await;
    c.call(commands::partitioned_metadata("persistent://t/ns/x", 3))
        .await;
    let (_, _, body) = http_get(w.proxy.http_addr().unwrap(), "/metrics").await;
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (scripts/test.sh installs Debian's `prometheus`)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "bkswitch_proxy_lookups_total",
        "bkswitch_proxy_forwarded_total",
        "bkswitch_proxy_forward_seconds_bucket",
        "bkswitch_proxy_route_table_version",
        "bkswitch_proxy_serving",
        "bkswitch_proxy_binary_connections",
    ] {
        assert!(body.contains(name), "{name} missing:\n{body}");
    }
    w.proxy.stop().await;
}

#[tokio::test]
async fn schema_lookups_over_http_redirect_with_and_without_a_version() {
    let w = world(ProxyConfig::new("p1")).await;
    let http = w.proxy.http_addr().unwrap();
    for (path, to) in [
        ("/admin/v2/schemas/t/ns/moved/schema", "b"),
        ("/admin/v2/schemas/t/ns/x/schema/3", "a"),
    ] {
        let (status, headers, _) = http_get(http, path).await;
        assert_eq!(status, 307, "{path}");
        assert_eq!(
            headers["location"],
            format!("http://{to}.example:8080{path}")
        );
    }
    w.proxy.stop().await;
}

/// A table large enough to be sharded in the store: the proxy reads it whole,
/// answers from its index (topic, prefix and namespace routes), and follows
/// a change that rewrites one shard.
#[tokio::test]
async fn a_sharded_table_is_served_and_followed() {
    use bkswitch_topic_routes::{Change, Layout, RouteKey};
    let w = world(ProxyConfig::new("p1")).await;
    let routes = w.routes.clone().with_layout(Layout {
        inline_limit: 2_000,
        shards: 8,
    });
    let mut changes: Vec<Change> = (0..300)
        .map(|i| {
            Change::SetRoute(
                RouteKey::Topic(format!("persistent://t/ns/big-{i:04}")),
                "b".into(),
            )
        })
        .collect();
    changes.push(Change::SetRoute(
        RouteKey::Prefix("persistent://t/ns/pre-".into()),
        "b".into(),
    ));
    let table = routes.apply(&changes).await.unwrap();
    w.routes
        .wait_acknowledged(table.version, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        !w.root
            .children(&routes.shards_path())
            .await
            .unwrap()
            .is_empty(),
        "the table is not sharded"
    );
    let mut c = Client::connect(w.proxy.binary_addr().unwrap()).await;
    c.handshake(21).await;
    for (topic, to) in [
        ("persistent://t/ns/big-0123", &w.b.url),
        ("persistent://t/ns/big-0299-partition-1", &w.b.url),
        ("persistent://t/ns/pre-anything", &w.b.url),
        ("persistent://t/ns/other", &w.a.url),
    ] {
        assert_eq!(
            &redirect_of(&lookup(&mut c, topic, 1).await).0,
            to,
            "{topic}"
        );
    }
    // One route back to `a`: one shard rewritten, followed.
    let table = routes
        .set_route("topic:persistent://t/ns/big-0123", "a")
        .await
        .unwrap();
    w.routes
        .wait_acknowledged(table.version, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        redirect_of(&lookup(&mut c, "persistent://t/ns/big-0123", 2).await).0,
        w.a.url
    );
    w.proxy.stop().await;
}
