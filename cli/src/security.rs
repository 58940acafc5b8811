//! The security settings of `bookie-switch serve` and `coordinator`: HTTPS of
//! the REST API, JWT authentication and where the tokens come from. Flags
//! ([`SecurityArgs`]) override the `--config` file's keys
//! ([`SecuritySettings::apply_key`]). Secret values are held as
//! [`Secret`]s: no error, log line or dump shows them.

use std::path::PathBuf;

use bkswitch_admin::auth::{JwtKey, JwtSettings, Secret};
use bkswitch_admin::tls::{client_config, TlsServerSettings};
use bkswitch_admin::NodeConfig;
use clap::Args;

/// The security keys of the `--config` file, and the flags on top of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecuritySettings {
    /// `tlsCertificateFilePath`: the REST server's certificate (PEM).
    pub tls_cert: Option<PathBuf>,
    /// `tlsKeyFilePath`: the REST server's private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// `bkswitchTlsClientCaFilePath`: client certificates required, from this CA.
    pub tls_client_ca: Option<PathBuf>,
    /// `bkswitchTlsTrustCertsFilePath`: the CA trusted on calls to other nodes.
    pub tls_trust: Option<PathBuf>,
    /// `tokenSecretKey`: `data:;base64,…` or `file:///path`.
    pub token_secret_key: Option<Secret>,
    /// `tokenPublicKey`: `data:;base64,…` or `file:///path`.
    pub token_public_key: Option<String>,
    /// `tokenAuthClaim` (default `sub`).
    pub token_auth_claim: Option<String>,
    /// `superUserRoles` (comma separated).
    pub superuser_roles: Vec<String>,
    /// `bkswitchInternalRoles` (comma separated).
    pub internal_roles: Vec<String>,
    /// `bkswitchAdminTokenFile`.
    pub admin_token_file: Option<PathBuf>,
    /// `bkswitchInternalTokenFile`.
    pub internal_token_file: Option<PathBuf>,
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn path(value: &str) -> Option<PathBuf> {
    (!value.is_empty()).then(|| PathBuf::from(value))
}

impl SecuritySettings {
    /// Takes one key of the file; `false` when the key is not a security key.
    pub fn apply_key(&mut self, key: &str, value: &str) -> bool {
        match key {
            "tlsCertificateFilePath" => self.tls_cert = path(value),
            "tlsKeyFilePath" => self.tls_key = path(value),
            "bkswitchTlsClientCaFilePath" => self.tls_client_ca = path(value),
            "bkswitchTlsTrustCertsFilePath" => self.tls_trust = path(value),
            "tokenSecretKey" => {
                self.token_secret_key = (!value.is_empty()).then(|| Secret::new(value))
            }
            "tokenPublicKey" => self.token_public_key = (!value.is_empty()).then(|| value.into()),
            "tokenAuthClaim" => self.token_auth_claim = (!value.is_empty()).then(|| value.into()),
            "superUserRoles" => self.superuser_roles = list(value),
            "bkswitchInternalRoles" => self.internal_roles = list(value),
            "bkswitchAdminTokenFile" => self.admin_token_file = path(value),
            "bkswitchInternalTokenFile" => self.internal_token_file = path(value),
            _ => return false,
        }
        true
    }

    /// Sets the node's TLS and JWT settings.
    ///
    /// # Errors
    ///
    /// What is missing or unreadable (file paths, never their contents).
    pub fn apply(&self, cfg: &mut NodeConfig) -> Result<(), String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                let mut tls = TlsServerSettings::new(cert, key);
                tls.client_ca.clone_from(&self.tls_client_ca);
                cfg.tls = Some(tls);
            }
            (None, None) if self.tls_client_ca.is_some() => {
                return Err("--tls-client-ca needs --tls-cert and --tls-key".into())
            }
            (None, None) => {}
            _ => return Err("--tls-cert and --tls-key go together".into()),
        }
        // Where other nodes require client certificates, this node presents
        // its own certificate on its calls to them.
        let identity = match (&self.tls_client_ca, &self.tls_cert, &self.tls_key) {
            (Some(_), Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            _ => None,
        };
        if self.tls_trust.is_some() || identity.is_some() {
            cfg.tls_client = Some(
                client_config(self.tls_trust.as_deref(), identity)
                    .map_err(|e| format!("--tls-trust: {e}"))?,
            );
        }
        let key = match (&self.token_secret_key, &self.token_public_key) {
            (Some(_), Some(_)) => {
                return Err("give --token-secret-key or --token-public-key, not both".into())
            }
            (Some(secret), None) => Some(
                JwtKey::pulsar_secret(secret.expose())
                    .map_err(|e| format!("--token-secret-key: {e}"))?,
            ),
            (None, Some(public)) => Some(
                JwtKey::pulsar_public(public).map_err(|e| format!("--token-public-key: {e}"))?,
            ),
            (None, None) => None,
        };
        if let Some(key) = key {
            let mut jwt = JwtSettings::new(key);
            if let Some(claim) = &self.token_auth_claim {
                jwt.role_claim.clone_from(claim);
            }
            jwt.superuser_roles.clone_from(&self.superuser_roles);
            jwt.internal_roles.clone_from(&self.internal_roles);
            cfg.jwt = Some(jwt);
        }
        Ok(())
    }
}

/// The security flags of `serve` and `coordinator`.
#[derive(Debug, Args)]
pub struct SecurityArgs {
    /// Serve the REST API over HTTPS with this certificate chain (PEM); it is
    /// re-read when the file changes (file key `tlsCertificateFilePath`).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM) (file key `tlsKeyFilePath`).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM); the node then
    /// presents its own `--tls-cert` on calls to other nodes
    /// (file key `bkswitchTlsClientCaFilePath`).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// The CA (PEM) trusted on calls to other nodes' `https://` APIs; the
    /// system's roots without it (file key `bkswitchTlsTrustCertsFilePath`).
    #[arg(long, value_name = "FILE")]
    pub tls_trust: Option<PathBuf>,
    /// Accept JWTs signed with this secret key, as Pulsar's `tokenSecretKey`:
    /// `file:///path` or `data:;base64,<key>` (file key `tokenSecretKey`).
    #[arg(long, env = "BKSWITCH_TOKEN_SECRET_KEY", hide_env_values = true)]
    pub token_secret_key: Option<Secret>,
    /// Accept JWTs signed for this public key (RSA or EC, DER or PEM), as
    /// Pulsar's `tokenPublicKey` (file key `tokenPublicKey`).
    #[arg(long)]
    pub token_public_key: Option<String>,
    /// The JWT claim holding the role (file key `tokenAuthClaim`, default `sub`).
    #[arg(long)]
    pub token_auth_claim: Option<String>,
    /// JWT roles that may call the admin endpoints (file key `superUserRoles`).
    #[arg(long, value_delimiter = ',')]
    pub superuser_roles: Vec<String>,
    /// JWT roles that may call `/internal/*` (file key `bkswitchInternalRoles`).
    #[arg(long, value_delimiter = ',')]
    pub internal_roles: Vec<String>,
    /// Read the admin token from this file (file key `bkswitchAdminTokenFile`).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Read the node-to-node token from this file (file key
    /// `bkswitchInternalTokenFile`).
    #[arg(long, value_name = "FILE")]
    pub internal_token_file: Option<PathBuf>,
}

impl SecurityArgs {
    /// `s` with the flags given on top.
    pub fn override_settings(&self, s: &mut SecuritySettings) {
        fn set<T: Clone>(dst: &mut Option<T>, src: &Option<T>) {
            if src.is_some() {
                dst.clone_from(src);
            }
        }
        set(&mut s.tls_cert, &self.tls_cert);
        set(&mut s.tls_key, &self.tls_key);
        set(&mut s.tls_client_ca, &self.tls_client_ca);
        set(&mut s.tls_trust, &self.tls_trust);
        set(&mut s.token_secret_key, &self.token_secret_key);
        set(&mut s.token_public_key, &self.token_public_key);
        set(&mut s.token_auth_claim, &self.token_auth_claim);
        set(&mut s.admin_token_file, &self.admin_token_file);
        set(&mut s.internal_token_file, &self.internal_token_file);
        if !self.superuser_roles.is_empty() {
            s.superuser_roles.clone_from(&self.superuser_roles);
        }
        if !self.internal_roles.is_empty() {
            s.internal_roles.clone_from(&self.internal_roles);
        }
    }
}

/// A token: the flag's (or environment's) value, else the file's, else empty.
///
/// # Errors
///
/// The file cannot be read (its path named, not its contents).
pub fn token(given: Option<&Secret>, file: Option<&PathBuf>) -> Result<Secret, String> {
    match (given, file) {
        (Some(t), _) if !t.is_empty() => Ok(t.clone()),
        (_, Some(path)) => Secret::from_file(path).map_err(|e| e.to_string()),
        _ => Ok(Secret::default()),
    }
}
