//! `bookie-switch serve` nodes on metadata stores that need credentials, as
//! an operator runs them: two nodes under traffic on a real ZooKeeper
//! reached over TLS on its secure client port with a client certificate
//! (`--zk-tls-*`) and digest authentication (`--zk-digest-user`, the
//! password in a file) are
//! moved by `bookie-clusters metadata-migration start` to a real etcd that
//! only speaks TLS, verifies client certificates and has authentication on,
//! whose user's role reads and writes the target's key prefixes only
//! (`--etcd-tls-*`, `--etcd-user`, the password in a file or the
//! environment). The
//! migration completes with 0 publish failures and 0 gaps; the nodes
//! bkswitch created on ZooKeeper are closed to an anonymous client; a node
//! given a wrong etcd password, or the wrong CA, exits with an error naming
//! the store, and writes nothing; no log or output shows a password, a token
//! or a line of a private key.
//!
//! The nodes' REST API is TLS too, with Pulsar-style JWTs (HS256, the admin
//! a superuser role, node-to-node calls a role of their own): the migration
//! is started and followed over HTTPS with the CLI, so every link of the run
//! is encrypted and authenticated — REST, ZooKeeper, etcd.
//!
//! Needs the `etcd` feature.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_etcd_harness::{unique_prefix, EtcdCluster, EtcdServerTls};
use bkswitch_metadata_store::{
    etcd_key_prefixes, ErrorKind, MetadataStore, StoreSecurity, StoreTimeouts,
};
use common::procs::{self, Proc, ADMIN, BIN};
use etcd_client::{Client, ConnectOptions, GetOptions, Permission};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

const ZK_PASSWORD: &str = "zk-digest-Pa55-7781";
const ETCD_PASSWORD: &str = "etcd-user-Pa55-4412";
const ROOT_PASSWORD: &str = "etcd-root-Pa55-0093";
/// The HS256 key the nodes verify JWTs with.
const HS_KEY: &[u8] = b"secure-stores-test-hs256-key-5566778899";

/// The JWT of `role` (the same each call: it expires in 2100).
fn jwt(role: &str) -> String {
    let exp: u64 = 4_102_444_800;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({ "sub": role, "exp": exp }),
        &jsonwebtoken::EncodingKey::from_secret(HS_KEY),
    )
    .unwrap()
}

/// A CA, a certificate it signed for 127.0.0.1 (server and client use),
/// and a client certificate of another application.
struct Pki {
    ca: String,
    cert: String,
    key: String,
    other_cert: String,
    other_key: String,
}

fn make_pki(name: &str) -> Pki {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("{name} CA"));
    let ca = ca.self_signed(&ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("params");
    params.distinguished_name.push(DnType::CommonName, "bk");
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

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// An etcd member speaking only TLS with client certificates, auth on:
/// `root`, and `bk` whose role reads and writes `prefix`'s keys only.
async fn secured_etcd(dir: &Path, pki: &Pki, prefix: &str) -> EtcdCluster {
    let tls = EtcdServerTls {
        cert: write(dir, "etcd.pem", &pki.cert),
        key: write(dir, "etcd-key.pem", &pki.key),
        ca: write(dir, "ca.pem", &pki.ca),
        client_cert_auth: true,
    };
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start_tls(1, tls));
    let mut c = root_client(&etcd, pki, None).await;
    c.role_add("root").await.expect("root role");
    c.user_add("root", ROOT_PASSWORD, None).await.expect("root");
    c.user_grant_role("root", "root").await.expect("grant");
    c.role_add("bkswitch").await.expect("role");
    for key in etcd_key_prefixes(prefix) {
        let end = prefix_end(key.as_bytes());
        c.role_grant_permission(
            "bkswitch",
            Permission::read_write(key.into_bytes()).with_range_end(end),
        )
        .await
        .expect("grant");
    }
    c.user_add("bk", ETCD_PASSWORD, None).await.expect("user");
    c.user_grant_role("bk", "bkswitch").await.expect("grant");
    c.auth_enable().await.expect("auth enable");
    etcd
}

async fn root_client(etcd: &EtcdCluster, pki: &Pki, password: Option<&str>) -> Client {
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(&pki.ca))
        .identity(etcd_client::Identity::from_pem(&pki.cert, &pki.key));
    let mut options = ConnectOptions::new().with_tls(tls);
    if let Some(pw) = password {
        options = options.with_user("root", pw);
    }
    Client::connect([format!("https://{}", etcd.endpoint(0))], Some(options))
        .await
        .expect("etcd admin client")
}

/// How many keys the whole etcd holds (as root).
async fn etcd_keys(etcd: &EtcdCluster, pki: &Pki) -> usize {
    let mut c = root_client(etcd, pki, Some(ROOT_PASSWORD)).await;
    let r = c
        .get(
            vec![0u8],
            Some(GetOptions::new().with_from_key().with_keys_only()),
        )
        .await
        .expect("list keys");
    r.kvs().len()
}

/// The store flags of a node, the etcd password in its environment.
fn flags(files: &Files) -> Vec<String> {
    [
        "--zk-digest-user",
        "bk",
        "--zk-digest-password-file",
        files.zk_password.to_str().unwrap(),
        "--zk-tls-ca",
        files.ca.to_str().unwrap(),
        "--zk-tls-cert",
        files.cert.to_str().unwrap(),
        "--zk-tls-key",
        files.key.to_str().unwrap(),
        "--etcd-user",
        "bk",
        "--etcd-password-file",
        files.etcd_password.to_str().unwrap(),
        "--etcd-tls-ca",
        files.ca.to_str().unwrap(),
        "--etcd-tls-cert",
        files.cert.to_str().unwrap(),
        "--etcd-tls-key",
        files.key.to_str().unwrap(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

struct Files {
    zk_password: PathBuf,
    etcd_password: PathBuf,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

async fn node(n: usize, zk: &str, files: &Files, dir: &Path) -> Proc {
    let extra = flags(files);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    procs::serve(
        n,
        &format!("tenant/ns/persistent/secure-n{n}"),
        zk,
        &dir.join(format!("serve-{n}.log")),
        &extra,
    )
    .await
}

/// Runs `bookie-switch serve` on `store` with `extra` flags until it exits
/// (it must, within 60 s); its exit code and output.
fn refused(store: &str, extra: &[String], env_password: &str) -> (i32, String) {
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{}", procs::free_port()),
        ])
        .args(["--node-id", "refused", "--metadata-store", store])
        .args(extra)
        .env("BKSWITCH_ADMIN_TOKEN", ADMIN)
        .env("BKSWITCH_INTERNAL_TOKEN", "internal")
        .env("BKSWITCH_ETCD_PASSWORD", env_password)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a node with bad credentials kept running on {store}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn no_secret(text: &str, pki: &Pki) {
    for secret in [ZK_PASSWORD, ETCD_PASSWORD, ROOT_PASSWORD] {
        assert!(!text.contains(secret), "a password was printed:\n{text}");
    }
    let hs = String::from_utf8_lossy(HS_KEY);
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, HS_KEY);
    assert!(
        !text.contains(hs.as_ref()) && !text.contains(&b64),
        "the JWT key was printed:\n{text}"
    );
    for role in ["admin", "broker"] {
        // A token's signature is the part that must never show.
        let token = jwt(role);
        let signature = token.rsplit('.').next().unwrap();
        assert!(!text.contains(signature), "a token was printed:\n{text}");
    }
    for line in pki.key.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!text.contains(line), "a key line was printed:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_on_a_digest_zookeeper_move_to_an_etcd_with_tls_and_a_prefix_role() {
    let _serial = procs::SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki("store");
    let prefix = unique_prefix();
    let etcd = secured_etcd(dir.path(), &pki, &prefix).await;
    let target = etcd.url(&prefix);
    let files = Files {
        zk_password: write(dir.path(), "zk-password", &format!("{ZK_PASSWORD}\n")),
        etcd_password: write(dir.path(), "etcd-password", ETCD_PASSWORD),
        ca: dir.path().join("ca.pem"),
        cert: dir.path().join("etcd.pem"),
        key: dir.path().join("etcd-key.pem"),
    };
    // The nodes' REST API over TLS (their certificate for 127.0.0.1) with
    // JWTs; every helper of `procs` then speaks HTTPS.
    let b64_key = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, HS_KEY);
    let conf = write(
        dir.path(),
        "node.conf",
        &format!(
            "tokenSecretKey=data:;base64,{b64_key}\n\
             superUserRoles=admin\n\
             bkswitchInternalRoles=broker\n\
             tlsCertificateFilePath={}\n\
             tlsKeyFilePath={}\n",
            files.cert.display(),
            files.key.display()
        ),
    );
    let internal = write(
        dir.path(),
        "internal.token",
        &format!("{}\n", jwt("broker")),
    );
    procs::use_https(procs::Https {
        trust: files.ca.clone(),
        admin_token: jwt("admin"),
        serve_args: vec![
            "--config".into(),
            conf.display().to_string(),
            "--internal-token-file".into(),
            internal.display().to_string(),
        ],
    });

    // ZooKeeper speaking TLS on its secure port, client certificates required.
    let zk_server = tokio::task::block_in_place(|| {
        bkswitch_zk_harness::ZkServer::start_tls(bkswitch_zk_harness::ZkServerTls {
            key_store: write(dir.path(), "zk.pem", &format!("{}{}", pki.key, pki.cert)),
            trust_store: files.ca.clone(),
            client_auth: true,
        })
    });
    let zk = format!(
        "zk://{}{}",
        zk_server.secure_connect_string().unwrap(),
        bkswitch_zk_harness::unique_chroot()
    );

    // Bad credentials first: each refused with the store named, nothing
    // written anywhere in etcd.
    let before = etcd_keys(&etcd, &pki).await;
    // The password from the environment this time (the file flag dropped).
    let mut wrong = flags(&files);
    let at = wrong
        .iter()
        .position(|f| f == "--etcd-password-file")
        .unwrap();
    wrong.drain(at..at + 2);
    let (code, text) = refused(&target, &wrong, "not-the-password");
    assert_ne!(code, 0, "{text}");
    assert!(text.contains(&target), "{text}");
    assert!(
        text.to_lowercase().contains("auth") || text.contains("permission"),
        "{text}"
    );
    no_secret(&text, &pki);
    let other = make_pki("other");
    let other_ca = write(dir.path(), "other-ca.pem", &other.ca);
    let at = wrong.iter().position(|f| f == "--etcd-tls-ca").unwrap();
    wrong[at + 1] = other_ca.to_string_lossy().into_owned();
    let (code, text) = refused(&target, &wrong, ETCD_PASSWORD);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains(&target), "{text}");
    no_secret(&text, &pki);
    let (code, text) = refused(&target, &["--etcd-user".to_owned(), "bk".to_owned()], "");
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("BKSWITCH_ETCD_PASSWORD"), "{text}");
    assert_eq!(etcd_keys(&etcd, &pki).await, before, "a refused node wrote");

    // Two nodes under traffic on ZooKeeper with digest authentication.
    let nodes = vec![
        node(0, &zk, &files, dir.path()).await,
        node(1, &zk, &files, dir.path()).await,
    ];
    assert!(nodes.iter().all(|p| p.url.starts_with("https://")));
    // Plain HTTP to a node's TLS port is refused.
    let (code, _, err) =
        procs::clusters(&nodes[0].url.replacen("https://", "http://", 1), &["list"]);
    assert_ne!(code, 0, "{err}");
    // What they created is closed to another application (its own client
    // certificate from the same CA, no digest credentials). (ZooKeeper
    // also authenticates a session by its certificate, so one with the
    // nodes' own certificate would be the same identity.)
    let zk_tls_only = StoreSecurity {
        zk_tls: Some(bkswitch_metadata_store::ZkTls {
            ca_pem: pki.ca.clone(),
            client: Some((
                pki.other_cert.clone(),
                bkswitch_metadata_store::Secret::new(pki.other_key.clone()),
            )),
            domain: None,
        }),
        ..StoreSecurity::default()
    };
    let anonymous =
        bkswitch_metadata_store::open_store_with(&zk, StoreTimeouts::default(), &zk_tls_only)
            .await
            .expect("anonymous session");
    let e = anonymous
        .children("/managed-ledgers/tenant/ns/persistent")
        .await
        .expect_err("the ACL lets an anonymous client read");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    anonymous.close().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The move to the secured etcd, started as an operator does.
    let url0 = nodes[0].url.clone();
    procs::start(&url0, &target, false)
        .unwrap_or_else(|e| panic!("start refused: {e}\n{}", procs::logs(&nodes)));
    let doc = procs::until_ended(&url0, &nodes, 120).await;
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", procs::logs(&nodes));
    procs::all_on(&nodes, &target).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The topics' metadata is in etcd, read with the user's own role.
    let security = bkswitch_metadata_store::StoreSecurity {
        etcd_user: Some(bkswitch_metadata_store::EtcdUser {
            name: "bk".into(),
            password: bkswitch_metadata_store::Secret::new(ETCD_PASSWORD),
        }),
        etcd_tls: Some(
            bkswitch_metadata_store::EtcdTls::from_files(
                &files.ca,
                Some((files.cert.as_path(), files.key.as_path())),
            )
            .unwrap(),
        ),
        ..Default::default()
    };
    let store: Arc<dyn MetadataStore> =
        bkswitch_metadata_store::open_store_with(&target, StoreTimeouts::default(), &security)
            .await
            .expect("the target with the user's role");
    let mut topics = store
        .children("/managed-ledgers/tenant/ns/persistent")
        .await
        .unwrap();
    topics.sort();
    assert_eq!(topics, ["secure-n0", "secure-n1"]);
    store.close().await.unwrap();

    for p in nodes {
        let text = procs::terminate(p);
        let (published, failures, gaps) = procs::traffic(&text);
        assert!(published > 0, "{text}");
        assert_eq!((failures, gaps), (0, 0), "{text}");
        no_secret(&text, &pki);
    }
}
