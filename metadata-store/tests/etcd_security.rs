//! TLS and authentication on a real etcd: a member that only speaks TLS and
//! verifies client certificates (certificates made here with rcgen), with
//! authentication on (a root user, and a user whose role reads and writes
//! only the store's key prefixes). The conformance suite passes over
//! TLS + auth; a wrong CA, a missing client certificate, a wrong password and
//! keys outside the role's prefixes are refused, and no error or `Debug`
//! shows a secret.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use bkswitch_etcd_harness::{unique_prefix, EtcdCluster, EtcdServerTls};
use bkswitch_metadata_store::testkit::EtcdTestEnv;
use bkswitch_metadata_store::{
    etcd_key_prefixes, ErrorKind, EtcdStore, EtcdStoreOptions, EtcdTls, EtcdUser, ExpectedVersion,
    MetadataStore, Secret,
};
use etcd_client::{Client, ConnectOptions, Permission};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tempfile::TempDir;

const ROOT_PASSWORD: &str = "root-Pa55word";
const PASSWORD: &str = "bk-Pa55word";
const USER: &str = "bk";
/// The prefix the conformance environment uses, and the store tests' one.
const PREFIXES: [&str; 2] = ["/conformance/", "/sec/"];

/// A CA and a certificate it signed (server and client use), all PEM.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki(name: &str) -> Pki {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} test CA"));
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("params");
    params.distinguished_name.push(DnType::CommonName, USER);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &ca, &ca_key).expect("cert");
    Pki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

struct Secured {
    cluster: EtcdCluster,
    pki: Pki,
    _dir: TempDir,
}

fn tls(pki: &Pki) -> EtcdTls {
    EtcdTls {
        ca_pem: pki.ca.clone(),
        client: Some((pki.cert.clone(), Secret::new(pki.key.clone()))),
        domain: None,
    }
}

fn client_options(pki: &Pki, user: &str, password: &str) -> ConnectOptions {
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(&pki.ca))
        .identity(etcd_client::Identity::from_pem(&pki.cert, &pki.key));
    ConnectOptions::new()
        .with_tls(tls)
        .with_user(user, password)
        .with_connect_timeout(Duration::from_secs(10))
}

/// One TLS member for the binary, with auth enabled: `root`, and `bk` whose
/// role has readwrite on [`PREFIXES`] (and their side keys) only.
fn secured() -> &'static Secured {
    static SECURED: OnceLock<Secured> = OnceLock::new();
    // Set up on a thread of its own: callers may be inside a runtime.
    SECURED.get_or_init(|| std::thread::spawn(set_up).join().expect("set up"))
}

fn set_up() -> Secured {
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = pki("server");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write pem");
            path
        };
        let cluster = EtcdCluster::start_tls(
            1,
            EtcdServerTls {
                cert: write("server.pem", &pki.cert),
                key: write("server-key.pem", &pki.key),
                ca: write("ca.pem", &pki.ca),
                client_cert_auth: true,
            },
        );
        let endpoint = format!("https://{}", cluster.endpoint(0));
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let tls = etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(&pki.ca))
                .identity(etcd_client::Identity::from_pem(&pki.cert, &pki.key));
            let mut c = Client::connect([&endpoint], Some(ConnectOptions::new().with_tls(tls)))
                .await
                .expect("admin client");
            c.role_add("root").await.expect("root role");
            c.user_add("root", ROOT_PASSWORD, None).await.expect("root");
            c.user_grant_role("root", "root").await.expect("root grant");
            c.role_add("bkswitch").await.expect("role");
            for prefix in PREFIXES {
                for key in etcd_key_prefixes(prefix) {
                    let end = prefix_end(key.as_bytes());
                    c.role_grant_permission(
                        "bkswitch",
                        Permission::read_write(key.into_bytes()).with_range_end(end),
                    )
                    .await
                    .expect("grant");
                }
            }
            c.user_add(USER, PASSWORD, None).await.expect("user");
            c.user_grant_role(USER, "bkswitch")
                .await
                .expect("user grant");
            c.auth_enable().await.expect("auth enable");
        });
        Secured {
            cluster,
            pki,
            _dir: dir,
        }
    }
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn options(password: &str) -> EtcdStoreOptions {
    let s = secured();
    EtcdStoreOptions {
        session_timeout: Duration::from_secs(5),
        operation_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        user: Some(EtcdUser {
            name: USER.to_owned(),
            password: Secret::new(password),
        }),
        tls: Some(tls(&s.pki)),
        ..EtcdStoreOptions::default()
    }
}

fn url(prefix: &str) -> String {
    secured().cluster.url(prefix)
}

fn env() -> EtcdTestEnv {
    EtcdTestEnv::with_options(secured().cluster.endpoints(), options(PASSWORD))
}

mod etcd_tls_auth {
    bkswitch_metadata_store::metadata_store_conformance_tests!(super::env());
}

fn assert_no_secret(text: &str) {
    for secret in [
        PASSWORD,
        ROOT_PASSWORD,
        "wrong-Pa55",
        secured().pki.key.as_str(),
    ] {
        assert!(!text.contains(secret), "a secret leaked: {text}");
    }
    assert!(!text.contains("PRIVATE KEY"), "a key leaked: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_credentials_work_over_tls() {
    let prefix = format!("/sec{}", unique_prefix());
    let store = EtcdStore::connect(&url(&prefix), options(PASSWORD))
        .await
        .expect("connect over TLS with a user");
    store
        .put("/a/b", b"v", ExpectedVersion::Any)
        .await
        .expect("put");
    let got = store.get("/a/b").await.expect("get").expect("present");
    assert_eq!(got.value, b"v");
    assert_eq!(store.children("/a").await.expect("children"), ["b"]);
    store.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_role_cannot_reach_outside_its_prefixes() {
    // The store on a prefix its role does not cover: connected (a lease
    // needs no key), every key refused with PermissionDenied.
    let store = EtcdStore::connect(&url("/elsewhere"), options(PASSWORD))
        .await
        .expect("connect");
    let e = store.get("/a").await.expect_err("read outside");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("`bk`"), "{e}");
    let e = store
        .put("/a", b"x", ExpectedVersion::Any)
        .await
        .expect_err("write outside");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert_no_secret(&format!("{e} {e:?}"));
    let _ = store.close().await;

    // The raw user client: inside yes, outside no.
    let s = secured();
    let endpoint = format!("https://{}", s.cluster.endpoint(0));
    let mut c = Client::connect([&endpoint], Some(client_options(&s.pki, USER, PASSWORD)))
        .await
        .expect("user client");
    c.put("/sec/raw", "1", None).await.expect("inside");
    assert!(c.put("/other", "1", None).await.is_err());
    assert!(c.get("/other", None).await.is_err());
    assert!(c
        .get("/", Some(etcd_client::GetOptions::new().with_all_keys()))
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_refused_without_showing_it() {
    let e = EtcdStore::connect(&url("/sec/x"), options("wrong-Pa55"))
        .await
        .expect_err("wrong password");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    let text = format!("{e} {e:?}");
    assert!(text.contains("`bk`"), "{text}");
    assert_no_secret(&text);
    // No password: with `--client-cert-auth`, etcd takes the common name of
    // the client certificate (`bk` here) as the user, so the role applies:
    // inside its prefixes yes, outside no.
    let mut o = options(PASSWORD);
    o.user = None;
    let store = EtcdStore::connect(&url("/sec/y"), o.clone())
        .await
        .expect("certificate user");
    store.get("/a").await.expect("inside the role's prefix");
    store.close().await.expect("close");
    let store = EtcdStore::connect(&url("/elsewhere"), o)
        .await
        .expect("connect");
    let e = store
        .get("/a")
        .await
        .expect_err("outside the role's prefix");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("no user"), "{e}");
    let _ = store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_ca_and_missing_client_certificate_are_refused() {
    let other = pki("other");
    let mut o = options(PASSWORD);
    o.connect_timeout = Duration::from_secs(3);
    o.tls = Some(EtcdTls {
        ca_pem: other.ca.clone(),
        ..tls(&secured().pki)
    });
    let e = EtcdStore::connect(&url("/sec/z"), o.clone())
        .await
        .expect_err("server certificate from an unknown CA");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("TLS"), "{e}");
    assert_no_secret(&format!("{e} {e:?}"));

    o.tls = Some(EtcdTls {
        client: None,
        ..tls(&secured().pki)
    });
    let e = EtcdStore::connect(&url("/sec/z"), o.clone())
        .await
        .expect_err("no client certificate");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");

    // A client certificate from another CA.
    o.tls = Some(EtcdTls {
        client: Some((other.cert.clone(), Secret::new(other.key.clone()))),
        ..tls(&secured().pki)
    });
    EtcdStore::connect(&url("/sec/z"), o.clone())
        .await
        .expect_err("client certificate from an unknown CA");

    // Plain HTTP to a TLS-only member.
    o.tls = None;
    EtcdStore::connect(&url("/sec/z"), o)
        .await
        .expect_err("plain");
}

#[test]
fn options_never_print_secrets() {
    let o = options(PASSWORD);
    let text = format!("{o:?}");
    assert!(text.contains("***") && text.contains("bk"), "{text}");
    assert_no_secret(&text);
}

#[test]
fn tls_files_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| dir.path().join(n);
    let s = pki("files");
    std::fs::write(p("ca"), &s.ca).expect("ca");
    std::fs::write(p("cert"), &s.cert).expect("cert");
    std::fs::write(p("key"), &s.key).expect("key");
    let t = EtcdTls::from_files(p("ca"), Some((&p("cert"), &p("key")))).expect("read");
    assert_eq!(t.ca_pem, s.ca);
    let e = EtcdTls::from_files(Path::new("/nonexistent/ca.pem"), None).expect_err("missing");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}
