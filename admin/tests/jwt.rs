//! Pulsar-compatible JWT authentication of the REST API: HS256 with a secret
//! key given as Pulsar's `data:;base64,…`, RS256 with a DER public key file
//! as `pulsar tokens create-key-pair` writes it (`tests/data`, a key made for
//! these tests only), ES256; expired, tampered and wrong-algorithm tokens are
//! 401, a valid token of the wrong role 403, and no refusal changes the
//! metadata store.

mod common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use bkswitch_admin::auth::{JwtKey, JwtSettings};
use bkswitch_admin::Node;
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use common::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;

const HS_KEY: &[u8] = b"a-test-secret-key-of-32-bytes!!!";
const RSA_KEY: &str = include_str!("data/jwt-test-rsa.key");

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hs256(claims: serde_json::Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(HS_KEY),
    )
    .unwrap()
}

fn rs256(claims: serde_json::Value) -> String {
    encode(
        &Header::new(Algorithm::RS256),
        &claims,
        &EncodingKey::from_rsa_pem(RSA_KEY.as_bytes()).unwrap(),
    )
    .unwrap()
}

struct Fixture {
    store: Arc<MemoryStore>,
    node: Node,
    url: String,
}

/// A node accepting JWTs verified with `key` (no static tokens), the role in
/// `claim`: superuser `admin`, internal role `broker`.
async fn fixture(key: JwtKey, claim: &str) -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let mut cfg =
        bkswitch_admin::testkit::node_config("node-1", Arc::new(store.new_session()), &clusters);
    cfg.admin_token = String::new();
    let mut jwt = JwtSettings::new(key);
    jwt.role_claim = claim.into();
    jwt.superuser_roles = vec!["admin".into()];
    jwt.internal_roles = vec!["broker".into()];
    cfg.jwt = Some(jwt);
    let node = Node::start(cfg).await.unwrap();
    let url = format!("{}{BASE}", node.url());
    Fixture { store, node, url }
}

async fn hs_fixture() -> Fixture {
    let b64 = base64::engine::general_purpose::STANDARD.encode(HS_KEY);
    fixture(
        JwtKey::pulsar_secret(&format!("data:;base64,{b64}")).unwrap(),
        "sub",
    )
    .await
}

/// A register call with `token`: its status and error message; refusals
/// leave the metadata store unchanged.
async fn register(f: &Fixture, token: &str) -> (u16, String) {
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let body = br#"{"metadataServiceUri":"memory://new"}"#;
    let (status, answer) = raw("POST", &format!("{}/new", f.url), Some(token), Some(body)).await;
    if status >= 400 {
        let after = tree(f.store.as_ref() as &dyn MetadataStore).await;
        assert_eq!(before, after, "a refused call changed the metadata store");
    }
    let message = answer["error"].as_str().unwrap_or_default().to_owned();
    (status, message)
}

#[tokio::test]
async fn hs256_superuser_token_is_accepted_without_exp() {
    let f = hs_fixture().await;
    let (status, message) = register(&f, &hs256(json!({"sub": "admin"}))).await;
    assert_eq!(status, 200, "{message}");
    let (status, _) = raw(
        "GET",
        &f.url,
        Some(&hs256(json!({"sub": "admin", "exp": now() + 60}))),
        None,
    )
    .await;
    assert_eq!(status, 200);
    f.node.stop().await;
}

#[tokio::test]
async fn expired_tampered_and_wrong_algorithm_tokens_are_401() {
    let f = hs_fixture().await;
    let (status, message) = register(&f, &hs256(json!({"sub": "admin", "exp": now() - 10}))).await;
    assert_eq!(status, 401);
    assert!(message.contains("expired"), "{message}");

    let good = hs256(json!({"sub": "admin"}));
    let (head, _) = good.rsplit_once('.').unwrap();
    let forged = hs256(json!({"sub": "admin", "x": 1}));
    let tampered = format!("{head}.{}", forged.rsplit_once('.').unwrap().1);
    let (status, message) = register(&f, &tampered).await;
    assert_eq!(status, 401);
    assert!(message.contains("signature"), "{message}");

    // An RS256 token on an HS256 node.
    let (status, message) = register(&f, &rs256(json!({"sub": "admin"}))).await;
    assert_eq!(status, 401);
    assert!(message.contains("algorithm"), "{message}");

    // An unsigned token ("alg": "none").
    let none = format!(
        "{}.{}.",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"admin"}"#)
    );
    assert_eq!(register(&f, &none).await.0, 401);
    assert_eq!(register(&f, "not-a-jwt").await.0, 401);
    f.node.stop().await;
}

#[tokio::test]
async fn a_valid_token_of_another_role_is_403() {
    let f = hs_fixture().await;
    let (status, message) = register(&f, &hs256(json!({"sub": "reader"}))).await;
    assert_eq!(status, 403);
    assert!(message.contains("role 'reader'"), "{message}");
    f.node.stop().await;
}

#[tokio::test]
async fn the_internal_role_calls_internal_endpoints_only() {
    let f = hs_fixture().await;
    let broker = hs256(json!({"sub": "broker"}));
    let admin = hs256(json!({"sub": "admin"}));
    // The internal role on an admin endpoint: 403.
    assert_eq!(register(&f, &broker).await.0, 403);
    // On the internal endpoint it passes authentication (the body is then
    // checked: 400 for an empty one), the superuser role does not.
    let internal = format!("{}/internal/promote-cursor", f.url);
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let (status, answer) = raw("POST", &internal, Some(&broker), Some(b"{}")).await;
    assert_ne!(status, 401, "{answer}");
    assert_ne!(status, 403, "{answer}");
    let (status, answer) = raw("POST", &internal, Some(&admin), Some(b"{}")).await;
    assert_eq!(status, 403, "{answer}");
    let after = tree(f.store.as_ref() as &dyn MetadataStore).await;
    assert_eq!(before, after);
    f.node.stop().await;
}

#[tokio::test]
async fn rs256_with_a_pulsar_der_public_key_and_a_custom_role_claim() {
    let der = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/jwt-test-rsa.pub.der"
    );
    let f = fixture(
        JwtKey::pulsar_public(&format!("file://{der}")).unwrap(),
        "role",
    )
    .await;
    let (status, message) = register(&f, &rs256(json!({"role": "admin", "sub": "x"}))).await;
    assert_eq!(status, 200, "{message}");
    // The role is read from the configured claim only.
    assert_eq!(register(&f, &rs256(json!({"sub": "admin"}))).await.0, 401);
    // An HS256 token signed with the public key's bytes (the classic
    // algorithm confusion) is refused.
    let confused = encode(
        &Header::new(Algorithm::HS256),
        &json!({"role": "admin"}),
        &EncodingKey::from_secret(&std::fs::read(der).unwrap()),
    )
    .unwrap();
    assert_eq!(register(&f, &confused).await.0, 401);
    f.node.stop().await;
}

#[tokio::test]
async fn es256_tokens_verify_with_an_ec_public_key() {
    let pair = rcgen::KeyPair::generate().unwrap();
    let public = base64::engine::general_purpose::STANDARD.encode(pair.public_key_der());
    let f = fixture(
        JwtKey::pulsar_public(&format!("data:;base64,{public}")).unwrap(),
        "sub",
    )
    .await;
    let token = encode(
        &Header::new(Algorithm::ES256),
        &json!({"sub": "admin"}),
        &EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    assert_eq!(register(&f, &token).await.0, 200);
    f.node.stop().await;
}

#[tokio::test]
async fn static_tokens_still_work_beside_jwts() {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let mut cfg =
        bkswitch_admin::testkit::node_config("node-1", Arc::new(store.new_session()), &clusters);
    cfg.jwt = Some(JwtSettings::new(JwtKey::Secret(HS_KEY.to_vec())));
    let node = Node::start(cfg).await.unwrap();
    let url = format!("{}{BASE}", node.url());
    assert_eq!(raw("GET", &url, Some(ADMIN), None).await.0, 200);
    assert_eq!(raw("GET", &url, None, None).await.0, 401);
    node.stop().await;
}

#[test]
fn secrets_and_keys_never_print() {
    let s = bkswitch_admin::auth::Secret::new("top-secret-value");
    assert_eq!(format!("{s} {s:?}"), "*** ***");
    let key = JwtKey::Secret(HS_KEY.to_vec());
    let shown = format!("{:?}", JwtSettings::new(key));
    assert!(!shown.contains("a-test-secret"), "{shown}");
    assert!(shown.contains("***"), "{shown}");
}
