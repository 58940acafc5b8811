//! `bookie-switch serve` over HTTPS with JWT authentication, called by
//! `bookie-clusters` as an operator would: a good call, refused calls (wrong
//! role, expired token, no trust, plaintext), a switch under the node's
//! traffic driven over HTTPS (0 publish failures, 0 gaps), then the whole log of the node
//! and every output of the CLI are scanned for each secret used (the tokens,
//! the HS256 key, the lines of the TLS private key): none may appear.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use serde_json::json;

const SERVE: &str = env!("CARGO_BIN_EXE_bookie-switch");
const CLI: &str = env!("CARGO_BIN_EXE_bookie-clusters");
const HS_KEY: &[u8] = b"secure-serve-test-hs256-key-0123456789";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn jwt(role: &str, exp: Option<u64>) -> String {
    let mut claims = json!({ "sub": role });
    if let Some(exp) = exp {
        claims["exp"] = json!(exp);
    }
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(HS_KEY),
    )
    .unwrap()
}

/// `bookie-clusters list` against `url` with `token` (given in the
/// environment, as an operator keeps it out of the process list).
fn cli(url: &str, token: &str, trust: Option<&Path>) -> Output {
    cli_verb(url, token, trust, &["list"])
}

/// `bookie-clusters <verb…>` against `url` with `token`.
fn cli_verb(url: &str, token: &str, trust: Option<&Path>, verb: &[&str]) -> Output {
    let mut c = Command::new(CLI);
    c.args(["--url", url, "--timeout-ms", "5000"]);
    if let Some(t) = trust {
        c.arg("--tls-trust").arg(t);
    }
    c.args(verb)
        .env("BOOKIE_CLUSTERS_TOKEN", token)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_tls_and_jwt_node_serves_refuses_and_never_prints_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A test CA and the node's certificate for 127.0.0.1.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(vec![]).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let key_pem = key.serialize_pem();
    std::fs::write(d.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(d.join("node.crt"), cert.pem()).unwrap();
    std::fs::write(d.join("node.key"), &key_pem).unwrap();
    let b64_key = base64::engine::general_purpose::STANDARD.encode(HS_KEY);
    let internal = jwt("broker", None);
    std::fs::write(d.join("internal.token"), format!("{internal}\n")).unwrap();
    let port = free_port();
    std::fs::write(
        d.join("node.conf"),
        format!(
            "bkswitchListenAddress=127.0.0.1:{port}\n\
             tokenSecretKey=data:;base64,{b64_key}\n\
             superUserRoles=admin\n\
             bkswitchInternalRoles=broker\n\
             tlsCertificateFilePath={}\n\
             tlsKeyFilePath={}\n",
            d.join("node.crt").display(),
            d.join("node.key").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(d.join("serve.log")).unwrap();
    let mut serve = Command::new(SERVE)
        .arg("serve")
        .arg("--config")
        .arg(d.join("node.conf"))
        .arg("--internal-token-file")
        .arg(d.join("internal.token"))
        .args(["--topics", "tenant/ns/persistent/over-tls", "--rate", "40"])
        .env_remove("BKSWITCH_ADMIN_TOKEN")
        .env_remove("BKSWITCH_INTERNAL_TOKEN")
        .env("RUST_LOG", "info,bkswitch=debug")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();

    let url = format!("https://127.0.0.1:{port}");
    let trust = d.join("ca.crt");
    let admin = jwt("admin", Some(now() + 600));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut outputs = Vec::new();
    // A good call, once the node is up.
    loop {
        let o = cli(&url, &admin, Some(&trust));
        if o.status.success() {
            outputs.push(text(&o));
            break;
        }
        assert!(
            serve.try_wait().unwrap().is_none(),
            "serve exited: {}",
            text(&o)
        );
        assert!(Instant::now() < deadline, "no good call: {}", text(&o));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Refusals: a valid token of another role, an expired token, a tampered
    // one, an unknown CA (the system's roots), plaintext.
    let reader = jwt("reader", None);
    let expired = jwt("admin", Some(now() - 60));
    let tampered = format!("{}x", &admin[..admin.len() - 1]);
    let refusals = [
        (cli(&url, &reader, Some(&trust)), "role 'reader'"),
        (cli(&url, &expired, Some(&trust)), "expired"),
        (cli(&url, &tampered, Some(&trust)), "rejected the token"),
        (cli(&url, &admin, None), "cannot reach"),
        (
            cli(&format!("http://127.0.0.1:{port}"), &admin, None),
            "https",
        ),
    ];
    for (o, why) in &refusals {
        let t = text(o);
        assert!(!o.status.success(), "{t}");
        assert!(t.contains(why), "'{why}' not in: {t}");
        outputs.push(t);
    }
    // A switch under traffic, every call over HTTPS with the admin's JWT:
    // register the new cluster, switch, follow it to SWITCHED.
    for verb in [
        &[
            "register",
            "--name",
            "new",
            "--metadata-service-uri",
            "memory://new",
        ][..],
        &["switch", "--target", "new"][..],
    ] {
        let o = cli_verb(&url, &admin, Some(&trust), verb);
        assert!(o.status.success(), "{verb:?}: {}", text(&o));
        outputs.push(text(&o));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = cli_verb(&url, &admin, Some(&trust), &["--json", "status"]);
        let t = text(&o);
        assert!(o.status.success(), "status: {t}");
        if t.contains("\"SWITCHED\"") {
            outputs.push(t);
            break;
        }
        assert!(Instant::now() < deadline, "never SWITCHED: {t}");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    outputs.push(text(
        &Command::new(SERVE)
            .args(["serve", "--help"])
            .output()
            .unwrap(),
    ));
    outputs.push(text(&Command::new(CLI).arg("--help").output().unwrap()));
    // Stopped as a service manager does: its traffic summary counts every
    // publish made across the switch.
    assert!(Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }

    let log = std::fs::read_to_string(d.join("serve.log")).unwrap();
    let summary = log
        .lines()
        .find(|l| l.starts_with("traffic: "))
        .unwrap_or_else(|| panic!("no traffic summary: {log}"));
    assert!(
        summary.contains(" 0 publish failures") && summary.contains(" 0 gaps"),
        "{summary}"
    );
    assert!(log.contains("request refused"), "no audit line in: {log}");
    let mut secrets = vec![
        admin.clone(),
        reader,
        expired,
        tampered,
        internal,
        b64_key,
        String::from_utf8_lossy(HS_KEY).into_owned(),
    ];
    // Each signature alone too: a token cut at a dot is still a leak.
    for t in secrets.clone().iter().take(5) {
        secrets.push(t.rsplit('.').next().unwrap().to_owned());
    }
    secrets.extend(
        key_pem
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() > 16)
            .map(str::to_owned),
    );
    for (what, haystack) in std::iter::once(("the node's log", &log))
        .chain(outputs.iter().map(|o| ("the CLI's output", o)))
    {
        for s in &secrets {
            assert!(!haystack.contains(s.as_str()), "a secret in {what}");
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
