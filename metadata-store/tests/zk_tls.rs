//! TLS to a real ZooKeeper's secure client port (Netty, PEM key stores,
//! certificates made here with rcgen), the server requiring client
//! certificates: the store works over it (writes, reads, children,
//! ephemerals, watches, digest ACLs); a wrong CA, a wrong host name, a
//! missing client certificate and plaintext to the secure port are each
//! refused with an error naming the server, quickly, and nothing is written.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataStore, Secret, ZkAuth, ZkStore, ZkStoreOptions,
    ZkTls,
};
use bkswitch_zk_harness::{ZkServer, ZkServerTls};
use futures::StreamExt;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// A CA, a certificate it signed for `names` (server and client use), and
/// a second client certificate of another name (another application).
struct Pki {
    ca: String,
    cert: String,
    key: String,
    other_cert: String,
    other_key: String,
}

fn pki(name: &str, names: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name} CA"));
    let ca = ca.self_signed(&ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &ca, &ca_key).expect("cert");
    let other_key = KeyPair::generate().expect("key");
    let mut other = CertificateParams::new(Vec::<String>::new()).expect("params");
    other
        .distinguished_name
        .push(DnType::CommonName, "another application");
    other.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let other = other.signed_by(&other_key, &ca, &ca_key).expect("cert");
    Pki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
        other_cert: other.pem(),
        other_key: other_key.serialize_pem(),
    }
}

struct Secured {
    server: ZkServer,
    pki: Pki,
    _dir: tempfile::TempDir,
}

/// One ZooKeeper for the binary, TLS with client certificates required.
fn secured() -> &'static Secured {
    static SECURED: OnceLock<Secured> = OnceLock::new();
    SECURED.get_or_init(|| {
        bkswitch_zk_harness::require_zk();
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki("zk", &["127.0.0.1", "localhost"]);
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        let tls = ZkServerTls {
            key_store: write("server.pem", &format!("{}{}", pki.key, pki.cert)),
            trust_store: write("ca.pem", &pki.ca),
            client_auth: true,
        };
        let server = std::thread::spawn(move || ZkServer::start_tls(tls))
            .join()
            .expect("start");
        Secured {
            server,
            pki,
            _dir: dir,
        }
    })
}

fn tls(pki: &Pki, client: bool) -> ZkTls {
    ZkTls {
        ca_pem: pki.ca.clone(),
        client: client.then(|| (pki.cert.clone(), Secret::new(pki.key.clone()))),
        domain: None,
    }
}

fn options(tls: Option<ZkTls>) -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(4),
        connect_timeout: Duration::from_secs(5),
        tls,
        ..ZkStoreOptions::default()
    }
}

fn url(chroot: &str) -> String {
    format!(
        "zk://{}{chroot}",
        secured()
            .server
            .secure_connect_string()
            .expect("secure port")
    )
}

fn chroot() -> String {
    bkswitch_zk_harness::unique_chroot()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_works_over_tls_with_a_client_certificate() {
    let s = secured();
    let root = chroot();
    let store = ZkStore::connect(&url(&root), options(Some(tls(&s.pki, true))))
        .await
        .expect("connect over TLS");
    let mut watch = store.watch("/a").await.expect("watch");
    store
        .create("/a/b", b"v1", CreateMode::PERSISTENT)
        .await
        .expect("create");
    let r = store.get("/a/b").await.unwrap().unwrap();
    assert_eq!(r.value, b"v1");
    store
        .put("/a/b", b"v2", ExpectedVersion::Exactly(r.stat.version))
        .await
        .expect("put");
    store
        .create("/a/e", b"", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    let mut children = store.children("/a").await.unwrap();
    children.sort();
    assert_eq!(children, ["b", "e"]);
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("a watch event over TLS");
    assert!(event.is_some());
    store.close().await.unwrap();

    // The plain port of the same server sees what was written over TLS.
    let plain = ZkStore::connect(
        &format!("zk://{}{root}", s.server.connect_string()),
        options(None),
    )
    .await
    .unwrap();
    assert_eq!(plain.get("/a/b").await.unwrap().unwrap().value, b"v2");
    assert!(plain.get("/a/e").await.unwrap().is_none(), "ephemeral gone");
    plain.close().await.unwrap();

    // Digest ACLs over TLS: another application (its own certificate from
    // the same CA, no digest) cannot read. (ZooKeeper also authenticates a
    // session by its certificate — the `x509` scheme — so a session with
    // the store's own certificate is the same identity and may.)
    let mut with_auth = options(Some(tls(&s.pki, true)));
    with_auth.auth = Some(ZkAuth::digest("tls-user", Secret::new("pw-1")));
    let owner = ZkStore::connect(&url(&root), with_auth).await.unwrap();
    owner
        .create("/acl", b"x", CreateMode::PERSISTENT)
        .await
        .unwrap();
    owner.close().await.unwrap();
    let mut strangers_tls = tls(&s.pki, false);
    strangers_tls.client = Some((
        s.pki.other_cert.clone(),
        Secret::new(s.pki.other_key.clone()),
    ));
    let stranger = ZkStore::connect(&url(&root), options(Some(strangers_tls)))
        .await
        .unwrap();
    let e = stranger.get("/acl").await.expect_err("ACL");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    stranger.close().await.unwrap();
}

/// `options` refused at connect, within a few seconds, with an error that
/// contains every piece of `expect` (each piece: one of its `|`-separated
/// alternatives); nothing is written under `root`.
async fn refused(u: &str, options: ZkStoreOptions, expect: &[&str], root: &str) {
    let started = Instant::now();
    let e = match ZkStore::connect(u, options).await {
        Err(e) => e,
        Ok(store) => panic!(
            "connected: {:?}",
            store.children("/").await.map(|_| "a session")
        ),
    };
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "refused only after {:?}: {e}",
        started.elapsed()
    );
    let text = e.to_string();
    for piece in expect {
        assert!(
            piece.split('|').any(|alt| text.contains(alt)),
            "`{piece}` not in: {text}"
        );
    }
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    let plain = ZkStore::connect(
        &format!("zk://{}", secured().server.connect_string()),
        self::options(None),
    )
    .await
    .unwrap();
    assert!(
        plain.get(root).await.unwrap().is_none(),
        "a refused store wrote {root}"
    );
    plain.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused() {
    let s = secured();
    let other = pki("other", &["127.0.0.1"]);
    let mut t = tls(&s.pki, true);
    t.ca_pem = other.ca;
    let root = chroot();
    let secure = s.server.secure_connect_string().unwrap();
    refused(
        &url(&root),
        options(Some(t)),
        &[&secure, "UnknownIssuer"],
        &root,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_host_name_is_refused() {
    let s = secured();
    let mut t = tls(&s.pki, true);
    t.domain = Some("zk.example.org".to_owned());
    let root = chroot();
    refused(
        &url(&root),
        options(Some(t)),
        &["not valid for name"],
        &root,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_is_refused() {
    let s = secured();
    let root = chroot();
    let secure = s.server.secure_connect_string().unwrap();
    refused(
        &url(&root),
        options(Some(tls(&s.pki, false))),
        &[&secure, "BadCertificate|after the TLS handshake"],
        &root,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_plain_port_and_plaintext_to_the_secure_port_are_refused() {
    let s = secured();
    let root = chroot();
    // TLS settings towards the plain port: the handshake fails.
    let plain_port = format!("zk://{}{root}", s.server.connect_string());
    refused(
        &plain_port,
        options(Some(tls(&s.pki, true))),
        &["TLS handshake failed"],
        &root,
    )
    .await;
    // No TLS towards the secure port: no session.
    let secure = s.server.secure_connect_string().unwrap();
    refused(
        &url(&root),
        options(None),
        &[&secure, "no ZooKeeper|ConnectionLoss"],
        &root,
    )
    .await;
}

#[test]
fn files_are_named_and_the_key_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let e = ZkTls::from_files(dir.path().join("missing-ca.pem"), None).unwrap_err();
    assert!(e.to_string().contains("missing-ca.pem"), "{e}");
    let p = pki("x", &["127.0.0.1"]);
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let t = ZkTls::from_files(
        write("ca.pem", &p.ca),
        Some((
            write("c.pem", &p.cert).as_path(),
            write("k.pem", &p.key).as_path(),
        )),
    )
    .unwrap();
    let shown = format!("{t:?} {:?}", options(Some(t.clone())));
    for line in p.key.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!shown.contains(line), "{shown}");
    }
}
