//! How `serve`, `coordinator`, `pulsar` and `lookup-proxy` reach a metadata
//! store that requires credentials or TLS: ZooKeeper digest authentication
//! (the nodes the store creates get an ACL for that user alone), ZooKeeper
//! over TLS to its `secureClientPort`, etcd users and etcd over TLS with
//! client certificates. Passwords come from a file or
//! the environment, never from the command line; no error or log line shows
//! them.
//!
//! The same settings open the targets of a metadata migration started on a
//! `serve` node: a node that moves its store from ZooKeeper to etcd needs
//! both backends' settings.

use std::path::PathBuf;

use bkswitch_metadata_store::{Secret, StoreSecurity};
use clap::Args;

/// The metadata store's credentials and TLS flags.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreSecurityArgs {
    /// ZooKeeper digest user: the store authenticates as this user and
    /// creates its nodes with an ACL that only this user may use (needs a
    /// password: `--zk-digest-password-file` or `BKSWITCH_ZK_DIGEST_PASSWORD`).
    #[arg(long, value_name = "USER")]
    pub zk_digest_user: Option<String>,
    /// A file holding the ZooKeeper digest password (one line).
    #[arg(long, value_name = "FILE")]
    pub zk_digest_password_file: Option<PathBuf>,
    /// The ZooKeeper digest password (environment only; prefer the file).
    #[arg(
        long,
        env = "BKSWITCH_ZK_DIGEST_PASSWORD",
        hide_env_values = true,
        hide = true
    )]
    pub zk_digest_password: Option<Secret>,
    /// Speak TLS to ZooKeeper's `secureClientPort`: the CA (PEM) its
    /// servers' certificates chain to (the URL then names the secure ports).
    #[arg(long, value_name = "FILE")]
    pub zk_tls_ca: Option<PathBuf>,
    /// The client certificate (PEM) presented to ZooKeeper servers that
    /// require one (`ssl.clientAuth=need`); needs `--zk-tls-key`.
    #[arg(long, value_name = "FILE", requires = "zk_tls_key")]
    pub zk_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--zk-tls-cert`.
    #[arg(long, value_name = "FILE", requires = "zk_tls_cert")]
    pub zk_tls_key: Option<PathBuf>,
    /// The name the ZooKeeper servers' certificates carry, when it is not
    /// the URL's host.
    #[arg(long, value_name = "NAME")]
    pub zk_tls_domain: Option<String>,
    /// etcd user (needs `--etcd-password-file` or `BKSWITCH_ETCD_PASSWORD`);
    /// a role with read-write on the store's key prefix is enough.
    #[cfg(feature = "etcd")]
    #[arg(long, value_name = "USER")]
    pub etcd_user: Option<String>,
    /// A file holding the etcd user's password (one line).
    #[cfg(feature = "etcd")]
    #[arg(long, value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
    /// The etcd password (environment only; prefer the file).
    #[cfg(feature = "etcd")]
    #[arg(
        long,
        env = "BKSWITCH_ETCD_PASSWORD",
        hide_env_values = true,
        hide = true
    )]
    pub etcd_password: Option<Secret>,
    /// Speak TLS to etcd: the CA (PEM) its members' certificates chain to.
    #[cfg(feature = "etcd")]
    #[arg(long, value_name = "FILE")]
    pub etcd_tls_ca: Option<PathBuf>,
    /// The client certificate (PEM) presented to etcd members that verify
    /// clients (`--client-cert-auth`); needs `--etcd-tls-key`.
    #[cfg(feature = "etcd")]
    #[arg(long, value_name = "FILE", requires = "etcd_tls_key")]
    pub etcd_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--etcd-tls-cert`.
    #[cfg(feature = "etcd")]
    #[arg(long, value_name = "FILE", requires = "etcd_tls_cert")]
    pub etcd_tls_key: Option<PathBuf>,
    /// The name the etcd members' certificates carry, when it is not the
    /// URL's host.
    #[cfg(feature = "etcd")]
    #[arg(long, value_name = "NAME")]
    pub etcd_tls_domain: Option<String>,
}

/// A password from `file`, else from `env` (the flag's environment value).
fn password(
    what: &str,
    user: &str,
    file: Option<&PathBuf>,
    env: Option<&Secret>,
) -> Result<Secret, String> {
    match (file, env) {
        (Some(path), _) => Secret::from_file(path).map_err(|e| format!("{what} password: {e}")),
        (None, Some(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(format!(
            "{what} user `{user}` needs a password: give --{}-password-file or set {}",
            if what == "ZooKeeper digest" {
                "zk-digest"
            } else {
                "etcd"
            },
            if what == "ZooKeeper digest" {
                "BKSWITCH_ZK_DIGEST_PASSWORD"
            } else {
                "BKSWITCH_ETCD_PASSWORD"
            }
        )),
    }
}

impl StoreSecurityArgs {
    /// Whether any flag was given.
    pub fn is_set(&self) -> bool {
        let zk = self.zk_digest_user.is_some()
            || self.zk_digest_password_file.is_some()
            || self.zk_tls_ca.is_some()
            || self.zk_tls_cert.is_some();
        #[cfg(feature = "etcd")]
        let etcd = self.etcd_user.is_some()
            || self.etcd_password_file.is_some()
            || self.etcd_tls_ca.is_some()
            || self.etcd_tls_cert.is_some();
        #[cfg(not(feature = "etcd"))]
        let etcd = false;
        zk || etcd
    }

    /// The store settings the flags describe, files read.
    ///
    /// # Errors
    ///
    /// A password or TLS file that cannot be read (its path named, never
    /// its content), a user without a password, a password without a user.
    pub fn store_security(&self) -> Result<StoreSecurity, String> {
        let mut s = StoreSecurity::default();
        match &self.zk_digest_user {
            Some(user) if user.is_empty() || user.contains(':') => {
                return Err(format!(
                    "--zk-digest-user `{user}`: a digest user name is not empty and has no `:`"
                ))
            }
            Some(user) => {
                let pw = password(
                    "ZooKeeper digest",
                    user,
                    self.zk_digest_password_file.as_ref(),
                    self.zk_digest_password.as_ref(),
                )?;
                s.zk_auth = Some(bkswitch_metadata_store::ZkAuth::digest(user.clone(), pw));
            }
            None if self.zk_digest_password_file.is_some() => {
                return Err("--zk-digest-password-file needs --zk-digest-user".into())
            }
            None => {}
        }
        match &self.zk_tls_ca {
            Some(ca) => {
                let client = self.zk_tls_cert.as_deref().zip(self.zk_tls_key.as_deref());
                let mut tls = bkswitch_metadata_store::ZkTls::from_files(ca, client)
                    .map_err(|e| format!("ZooKeeper TLS: {e}"))?;
                tls.domain.clone_from(&self.zk_tls_domain);
                s.zk_tls = Some(tls);
            }
            None if self.zk_tls_cert.is_some() || self.zk_tls_domain.is_some() => {
                return Err(
                    "--zk-tls-cert, --zk-tls-key and --zk-tls-domain need --zk-tls-ca".into(),
                )
            }
            None => {}
        }
        #[cfg(feature = "etcd")]
        {
            match &self.etcd_user {
                Some(user) => {
                    let pw = password(
                        "etcd",
                        user,
                        self.etcd_password_file.as_ref(),
                        self.etcd_password.as_ref(),
                    )?;
                    s.etcd_user = Some(bkswitch_metadata_store::EtcdUser {
                        name: user.clone(),
                        password: pw,
                    });
                }
                None if self.etcd_password_file.is_some() => {
                    return Err("--etcd-password-file needs --etcd-user".into())
                }
                None => {}
            }
            match &self.etcd_tls_ca {
                Some(ca) => {
                    let client = self
                        .etcd_tls_cert
                        .as_deref()
                        .zip(self.etcd_tls_key.as_deref());
                    let mut tls = bkswitch_metadata_store::EtcdTls::from_files(ca, client)
                        .map_err(|e| format!("etcd TLS: {e}"))?;
                    tls.domain.clone_from(&self.etcd_tls_domain);
                    s.etcd_tls = Some(tls);
                }
                None if self.etcd_tls_cert.is_some() || self.etcd_tls_domain.is_some() => {
                    return Err(
                        "--etcd-tls-cert, --etcd-tls-key and --etcd-tls-domain need --etcd-tls-ca"
                            .into(),
                    )
                }
                None => {}
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_without_a_password_is_refused_by_name() {
        let a = StoreSecurityArgs {
            zk_digest_user: Some("bk".into()),
            ..Default::default()
        };
        let e = a.store_security().unwrap_err();
        assert!(
            e.contains("`bk`") && e.contains("--zk-digest-password-file"),
            "{e}"
        );
    }

    #[test]
    fn a_password_file_is_read_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret-value\n").unwrap();
        let a = StoreSecurityArgs {
            zk_digest_user: Some("bk".into()),
            zk_digest_password_file: Some(file),
            ..Default::default()
        };
        let s = a.store_security().unwrap();
        let auth = s.zk_auth.clone().unwrap();
        assert_eq!(auth.password.expose(), "s3cret-value");
        assert!(!format!("{s:?} {a:?}").contains("s3cret-value"));
    }

    #[test]
    fn a_missing_file_is_named() {
        let a = StoreSecurityArgs {
            zk_digest_user: Some("bk".into()),
            zk_digest_password_file: Some("/nonexistent/pw".into()),
            ..Default::default()
        };
        let e = a.store_security().unwrap_err();
        assert!(e.contains("/nonexistent/pw"), "{e}");
        let bad = StoreSecurityArgs {
            zk_digest_user: Some("a:b".into()),
            ..Default::default()
        };
        assert!(bad.store_security().unwrap_err().contains("`a:b`"));
    }
}
