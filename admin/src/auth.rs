//! Authentication settings of the REST API: [`Secret`] (a value that never
//! prints), and Pulsar-compatible JWTs ([`JwtSettings`]) as Pulsar's
//! `AuthenticationProviderToken` accepts them.
//!
//! A token is signed with HS256/384/512 (a secret key: Pulsar's
//! `tokenSecretKey`), RS256/384/512 or ES256/384 (a public key: Pulsar's
//! `tokenPublicKey`). Its role is the `sub` claim, or the claim
//! [`JwtSettings::role_claim`] names (Pulsar's `tokenAuthClaim`). `exp` is
//! honoured when present, and a token without `exp` is accepted, as in Pulsar.

use std::fmt;

use base64::Engine;
use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};

/// A value that must never be printed: `Debug` and `Display` show `***`;
/// [`expose`](Secret::expose) is the one way to read it (the metadata
/// store's, shared by every bkswitch crate).
pub use bkswitch_metadata_store::Secret;

/// The key JWTs are verified with.
#[derive(Clone)]
pub enum JwtKey {
    /// A shared secret (HS256, HS384, HS512): the key's bytes.
    Secret(Vec<u8>),
    /// An RSA public key (RS256, RS384, RS512), PEM.
    Rsa(Vec<u8>),
    /// An EC public key (ES256, ES384), PEM.
    Ec(Vec<u8>),
}

impl fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JwtKey::Secret(_) => "Secret(***)",
            JwtKey::Rsa(_) => "Rsa(public key)",
            JwtKey::Ec(_) => "Ec(public key)",
        })
    }
}

/// Reads a key setting as Pulsar gives it: `data:;base64,<base64>`,
/// `file:///path` or a plain path.
fn pulsar_key_bytes(setting: &str) -> Result<Vec<u8>, String> {
    if let Some(b64) = setting.strip_prefix("data:") {
        let b64 = b64.split_once(',').map(|(_, b)| b).unwrap_or(b64);
        return base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("the key's base64 does not decode: {e}"));
    }
    let path = setting.strip_prefix("file://").unwrap_or(setting);
    std::fs::read(path).map_err(|e| format!("cannot read the key file '{path}': {e}"))
}

impl JwtKey {
    /// A secret key as Pulsar's `tokenSecretKey`: `data:;base64,<base64 of
    /// the key's bytes>` or `file:///path` (the file holds the raw bytes, as
    /// `pulsar tokens create-secret-key --output` writes them).
    ///
    /// # Errors
    ///
    /// What is wrong with the setting, never the key.
    pub fn pulsar_secret(setting: &str) -> Result<JwtKey, String> {
        let key = pulsar_key_bytes(setting)?;
        if key.is_empty() {
            return Err("the secret key is empty".into());
        }
        Ok(JwtKey::Secret(key))
    }

    /// A public key as Pulsar's `tokenPublicKey`: `data:;base64,<DER>` or
    /// `file:///path` holding DER (as `pulsar tokens create-key-pair`
    /// writes it) or PEM; RSA or EC.
    ///
    /// # Errors
    ///
    /// What is wrong with the setting.
    pub fn pulsar_public(setting: &str) -> Result<JwtKey, String> {
        let bytes = pulsar_key_bytes(setting)?;
        let pem = if bytes.starts_with(b"-----BEGIN") {
            bytes
        } else {
            // DER SubjectPublicKeyInfo: the PEM the decoder reads.
            let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
            for line in b64.as_bytes().chunks(64) {
                pem.push_str(&String::from_utf8_lossy(line));
                pem.push('\n');
            }
            pem.push_str("-----END PUBLIC KEY-----\n");
            pem.into_bytes()
        };
        if DecodingKey::from_rsa_pem(&pem).is_ok() {
            Ok(JwtKey::Rsa(pem))
        } else if DecodingKey::from_ec_pem(&pem).is_ok() {
            Ok(JwtKey::Ec(pem))
        } else {
            Err("the public key is neither an RSA nor an EC public key".into())
        }
    }
}

/// JWT authentication of the REST API.
#[derive(Clone, Debug)]
pub struct JwtSettings {
    /// The verification key.
    pub key: JwtKey,
    /// The claim holding the role (Pulsar's `tokenAuthClaim`; `sub` by
    /// default).
    pub role_claim: String,
    /// The roles that may call the admin endpoints (Pulsar's
    /// `superUserRoles`).
    pub superuser_roles: Vec<String>,
    /// The roles that may call `/internal/*` (node to node).
    pub internal_roles: Vec<String>,
}

impl JwtSettings {
    /// Settings with `key`, the role in `sub`, and no role allowed yet.
    pub fn new(key: JwtKey) -> JwtSettings {
        JwtSettings {
            key,
            role_claim: "sub".into(),
            superuser_roles: Vec::new(),
            internal_roles: Vec::new(),
        }
    }
}

/// Why a JWT was not accepted (the 401 message; never the token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JwtRefusal(pub(crate) String);

/// A [`JwtSettings`] ready to verify tokens.
pub(crate) struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
    role_claim: String,
}

impl JwtVerifier {
    pub(crate) fn new(settings: &JwtSettings) -> Result<JwtVerifier, String> {
        let (key, algorithms) = match &settings.key {
            JwtKey::Secret(k) => (
                DecodingKey::from_secret(k),
                vec![Algorithm::HS256, Algorithm::HS384, Algorithm::HS512],
            ),
            JwtKey::Rsa(pem) => (
                DecodingKey::from_rsa_pem(pem).map_err(|e| e.to_string())?,
                vec![Algorithm::RS256, Algorithm::RS384, Algorithm::RS512],
            ),
            JwtKey::Ec(pem) => (
                DecodingKey::from_ec_pem(pem).map_err(|e| e.to_string())?,
                vec![Algorithm::ES256, Algorithm::ES384],
            ),
        };
        let mut validation = Validation::new(algorithms[0]);
        validation.algorithms = algorithms;
        // As Pulsar: no claim required, `exp` checked when present, no
        // clock skew allowed, no audience unless configured.
        validation.required_spec_claims.clear();
        validation.leeway = 0;
        validation.validate_aud = false;
        Ok(JwtVerifier {
            key,
            validation,
            role_claim: settings.role_claim.clone(),
        })
    }

    /// The role of a valid token.
    pub(crate) fn role(&self, token: &str) -> Result<String, JwtRefusal> {
        use jsonwebtoken::errors::ErrorKind as K;
        let data = decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &self.key,
            &self.validation,
        )
        .map_err(|e| {
            JwtRefusal(
                match e.kind() {
                    K::ExpiredSignature => "the token has expired",
                    K::ImmatureSignature => "the token is not valid yet (nbf)",
                    K::InvalidSignature => "the token's signature does not verify",
                    K::InvalidAlgorithm => "the token's algorithm is not the configured key's",
                    _ => "the token is not a valid JWT",
                }
                .into(),
            )
        })?;
        match data.claims.get(&self.role_claim) {
            Some(serde_json::Value::String(role)) if !role.is_empty() => Ok(role.clone()),
            _ => Err(JwtRefusal(format!(
                "the token has no role in its '{}' claim",
                self.role_claim
            ))),
        }
    }
}
