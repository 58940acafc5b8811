//! The REST API over TLS, with a test CA: a good call, a wrong CA, a wrong
//! host name, an expired certificate, a required client certificate,
//! plaintext on the TLS port and the certificate's hot reload. Every refused
//! call leaves the metadata store unchanged.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::tls::{client_config, TlsServerSettings};
use bkswitch_admin::{AdminClient, ClientError, Node};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA: its certificate and key.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    Ca { cert, key }
}

/// A leaf certificate for `names` signed by `ca`, written as `<stem>.crt` and
/// `<stem>.key` in `dir`; `expired` puts its validity in the past.
fn leaf(ca: &Ca, names: &[&str], expired: bool, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().unwrap();
    let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let mut params = CertificateParams::new(names).unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2001, 1, 1);
        params.not_after = rcgen::date_time_ymd(2002, 1, 1);
    }
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    let (c, k) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

fn write_ca(ca: &Ca, dir: &Path, stem: &str) -> PathBuf {
    let p = dir.join(format!("{stem}-ca.crt"));
    std::fs::write(&p, ca.cert.pem()).unwrap();
    p
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    store: Arc<MemoryStore>,
    node: Node,
    ca: Ca,
    trust: PathBuf,
}

/// A node serving HTTPS with a certificate of `names` from a fresh CA.
async fn fixture(names: &[&str], expired: bool, client_ca: bool) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let ca = ca("test CA");
    let trust = write_ca(&ca, &dir, "server");
    let (cert, key) = leaf(&ca, names, expired, &dir, "server");
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let mut cfg =
        bkswitch_admin::testkit::node_config("node-1", Arc::new(store.new_session()), &clusters);
    let mut settings = TlsServerSettings::new(cert, key);
    settings.reload_check = Duration::from_millis(50);
    if client_ca {
        settings.client_ca = Some(trust.clone());
    }
    cfg.tls = Some(settings);
    let node = Node::start(cfg).await.unwrap();
    assert!(node.url().starts_with("https://"), "{}", node.url());
    Fixture {
        _dir: tmp,
        dir,
        store,
        node,
        ca,
        trust,
    }
}

fn client(f: &Fixture, trust: &Path, identity: Option<(&Path, &Path)>) -> AdminClient {
    let tls = client_config(Some(trust), identity).unwrap();
    AdminClient::with_tls(f.node.url(), ADMIN, Some(tls))
        .unwrap()
        .with_timeout(Duration::from_secs(5))
}

/// A register call that must fail with a transport error naming `what`, and
/// leave the metadata store unchanged.
async fn refused(f: &Fixture, c: &AdminClient, what: &str) {
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let err = c.register("new", "memory://new", None).await.unwrap_err();
    assert!(
        matches!(err, ClientError::Connect { .. }),
        "expected a connection failure, got {err}"
    );
    assert!(
        err.to_string().to_lowercase().contains(what),
        "'{what}' not in: {err}"
    );
    let after = tree(f.store.as_ref() as &dyn MetadataStore).await;
    assert_eq!(before, after, "a refused call changed the metadata store");
}

#[tokio::test]
async fn a_trusted_client_calls_over_https() {
    let f = fixture(&["localhost", "127.0.0.1"], false, false).await;
    let c = client(&f, &f.trust, None);
    assert!(c.base_url().starts_with("https://"));
    c.register("new", "memory://new", None).await.unwrap();
    assert_eq!(c.list().await.unwrap().len(), 2);
    f.node.stop().await;
}

#[tokio::test]
async fn a_server_signed_by_another_ca_is_refused() {
    let f = fixture(&["127.0.0.1"], false, false).await;
    let other = write_ca(&ca("another CA"), &f.dir, "other");
    refused(&f, &client(&f, &other, None), "unknownissuer").await;
    f.node.stop().await;
}

#[tokio::test]
async fn a_certificate_for_another_host_is_refused() {
    let f = fixture(&["elsewhere.example"], false, false).await;
    refused(&f, &client(&f, &f.trust, None), "not valid for name").await;
    f.node.stop().await;
}

#[tokio::test]
async fn an_expired_server_certificate_is_refused() {
    let f = fixture(&["127.0.0.1"], true, false).await;
    refused(&f, &client(&f, &f.trust, None), "expired").await;
    f.node.stop().await;
}

#[tokio::test]
async fn a_required_client_certificate_must_be_sent() {
    let f = fixture(&["127.0.0.1"], false, true).await;
    // Without one: the server ends the handshake.
    refused(&f, &client(&f, &f.trust, None), "certificate").await;
    // With one from the configured CA: served.
    let (cert, key) = leaf(&f.ca, &["operator"], false, &f.dir, "client");
    let c = client(&f, &f.trust, Some((&cert, &key)));
    c.register("new", "memory://new", None).await.unwrap();
    f.node.stop().await;
}

#[tokio::test]
async fn plaintext_http_on_the_tls_port_is_told_to_use_https() {
    let f = fixture(&["127.0.0.1"], false, false).await;
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let addr = f.node.url().trim_start_matches("https://").to_owned();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = r#"{"metadataServiceUri":"memory://new"}"#;
    let req = format!(
        "POST {BASE}/new HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ADMIN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("use https://"), "{answer}");
    // The typed client on an http:// URL gets the same answer.
    let c = AdminClient::new(&format!("http://{addr}"), ADMIN).unwrap();
    let err = c.list().await.unwrap_err();
    assert_eq!(err.status(), Some(400), "{err}");
    let after = tree(f.store.as_ref() as &dyn MetadataStore).await;
    assert_eq!(before, after);
    f.node.stop().await;
}

#[tokio::test]
async fn a_replaced_certificate_is_served_to_new_connections() {
    let f = fixture(&["127.0.0.1"], false, false).await;
    client(&f, &f.trust, None).list().await.unwrap();
    // A new CA's certificate written over the files.
    let next = ca("next CA");
    let next_trust = write_ca(&next, &f.dir, "next");
    std::thread::sleep(Duration::from_millis(20));
    leaf(&next, &["127.0.0.1"], false, &f.dir, "server");
    let mut served = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if client(&f, &next_trust, None).list().await.is_ok() {
            served = true;
            break;
        }
    }
    assert!(served, "the new certificate was never served");
    // And the old CA no longer verifies the server.
    refused(&f, &client(&f, &f.trust, None), "unknownissuer").await;
    f.node.stop().await;
}

/// The node-to-node call over TLS, as another node makes it: the internal
/// endpoint answers (404: no such topic here), not a transport or auth error.
#[tokio::test]
async fn the_internal_endpoint_is_reached_over_tls_with_the_internal_token() {
    let f = fixture(&["127.0.0.1"], false, false).await;
    let c = client(&f, &f.trust, None).with_token(INTERNAL);
    let req = bkswitch_admin::wire::PromoteCursorRequest {
        topic: "tenant/ns/persistent/nowhere".into(),
        cursor_name: "sub".into(),
        target_cluster_name: "new".into(),
        expected_cursors_ledger_id: 1,
        copied_last_entry_id: 0,
    };
    let err = c.promote_cursor(&req).await.unwrap_err();
    assert_eq!(err.status(), Some(404), "{err}");
    f.node.stop().await;
}
