//! [`open_store`]: a store from a URL (`memory`, `zk://…`, `etcd://…`), and
//! [`check_store_url`], the same check without connecting.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{MetadataError, Operation, Result};
use crate::memory::MemoryStore;
use crate::store::MetadataStore;

/// The forms [`open_store`] accepts, as error messages name them.
pub const STORE_URL_FORMS: &str =
    "`memory`, `zk://host:port[,host:port…][/chroot]` or `etcd://host:port[,host:port…][/prefix]`";

/// Timeouts of a store opened by [`open_store`] (the in-memory store ignores
/// them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreTimeouts {
    /// Session timeout (ZooKeeper session, etcd lease TTL). At least 2 s.
    pub session: Duration,
    /// Bound of every operation.
    pub operation: Duration,
    /// Bound of connecting.
    pub connect: Duration,
}

impl Default for StoreTimeouts {
    fn default() -> Self {
        StoreTimeouts {
            session: Duration::from_secs(30),
            operation: Duration::from_secs(10),
            connect: Duration::from_secs(30),
        }
    }
}

/// Credentials and TLS of the stores [`open_store_with`] opens, for each
/// backend built in (the URL says which one applies). `Debug` shows no secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreSecurity {
    /// ZooKeeper digest credentials ([`ZkStoreOptions::auth`](crate::ZkStoreOptions::auth)).
    #[cfg(feature = "zk")]
    pub zk_auth: Option<crate::zk::ZkAuth>,
    /// ZooKeeper TLS ([`ZkStoreOptions::tls`](crate::ZkStoreOptions::tls)).
    #[cfg(feature = "zk")]
    pub zk_tls: Option<crate::zk::ZkTls>,
    /// etcd user ([`EtcdStoreOptions::user`](crate::EtcdStoreOptions::user)).
    #[cfg(feature = "etcd")]
    pub etcd_user: Option<crate::etcd::EtcdUser>,
    /// etcd TLS ([`EtcdStoreOptions::tls`](crate::EtcdStoreOptions::tls)).
    #[cfg(feature = "etcd")]
    pub etcd_tls: Option<crate::etcd::EtcdTls>,
}

fn bad(url: &str, reason: String) -> MetadataError {
    MetadataError::InvalidArgument {
        op: Operation::Connect,
        path: url.to_owned(),
        reason,
    }
}

#[cfg_attr(all(feature = "zk", feature = "etcd"), allow(dead_code))]
fn not_built(url: &str, feature: &str) -> MetadataError {
    bad(
        url,
        format!(
            "this build has no `{feature}` backend (bkswitch-metadata-store's `{feature}` \
             feature); use {STORE_URL_FORMS} with a build that has it"
        ),
    )
}

/// Checks a store URL without connecting: what a settings validator calls.
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming the
/// URL and the accepted forms (also when the backend is not built in).
pub fn check_store_url(url: &str) -> Result<()> {
    if url == "memory" {
        return Ok(());
    }
    if url.starts_with("zk://") {
        #[cfg(feature = "zk")]
        {
            return crate::zk::url::parse(url).map(|_| ());
        }
        #[cfg(not(feature = "zk"))]
        return Err(not_built(url, "zk"));
    }
    if url.starts_with("etcd://") {
        #[cfg(feature = "etcd")]
        return crate::etcd::check_etcd_url(url);
        #[cfg(not(feature = "etcd"))]
        return Err(not_built(url, "etcd"));
    }
    Err(bad(
        url,
        format!("unknown metadata store URL; expected {STORE_URL_FORMS}"),
    ))
}

/// Opens the store a URL names: `memory` (a new, empty
/// [`MemoryStore`]), `zk://…` ([`ZkStore`](crate::ZkStore), the `zk` feature)
/// or `etcd://…` ([`EtcdStore`](crate::EtcdStore), the `etcd` feature).
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a URL
/// [`check_store_url`] refuses; every error of the backend's `connect`.
pub async fn open_store(url: &str, timeouts: StoreTimeouts) -> Result<Arc<dyn MetadataStore>> {
    open_store_with(url, timeouts, &StoreSecurity::default()).await
}

/// [`open_store`] with credentials and TLS: those of `security` for the
/// backend the URL names.
///
/// # Errors
///
/// Those of [`open_store`];
/// [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied) when
/// the backend refuses the credentials.
pub async fn open_store_with(
    url: &str,
    timeouts: StoreTimeouts,
    security: &StoreSecurity,
) -> Result<Arc<dyn MetadataStore>> {
    check_store_url(url)?;
    let _ = (timeouts, security);
    if url == "memory" {
        return Ok(Arc::new(MemoryStore::new()));
    }
    #[cfg(feature = "zk")]
    if url.starts_with("zk://") {
        let options = crate::zk::ZkStoreOptions {
            session_timeout: timeouts.session,
            operation_timeout: timeouts.operation,
            connect_timeout: timeouts.connect,
            auth: security.zk_auth.clone(),
            tls: security.zk_tls.clone(),
            ..crate::zk::ZkStoreOptions::default()
        };
        return Ok(Arc::new(crate::zk::ZkStore::connect(url, options).await?));
    }
    #[cfg(feature = "etcd")]
    if url.starts_with("etcd://") {
        let options = crate::etcd::EtcdStoreOptions {
            session_timeout: timeouts.session,
            operation_timeout: timeouts.operation,
            connect_timeout: timeouts.connect,
            user: security.etcd_user.clone(),
            tls: security.etcd_tls.clone(),
            ..crate::etcd::EtcdStoreOptions::default()
        };
        return Ok(Arc::new(
            crate::etcd::EtcdStore::connect(url, options).await?,
        ));
    }
    Err(bad(url, format!("expected {STORE_URL_FORMS}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_without_connecting() {
        assert!(check_store_url("memory").is_ok());
        for url in ["", "mem", "http://x:1", "etcd:/x:1"] {
            let e = check_store_url(url).expect_err(url);
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
            assert!(e.to_string().contains("etcd://host:port"), "{e}");
        }
        #[cfg(feature = "etcd")]
        {
            assert!(check_store_url("etcd://a:1,b:2/pulsar").is_ok());
            assert!(check_store_url("etcd://a").is_err());
        }
        #[cfg(feature = "zk")]
        {
            assert!(check_store_url("zk://a:1,b:2/pulsar").is_ok());
            assert!(check_store_url("zk://a").is_err());
        }
    }

    #[tokio::test]
    async fn memory_opens() {
        let store = open_store("memory", StoreTimeouts::default())
            .await
            .expect("memory");
        assert!(store.get("/").await.expect("get").is_some());
    }
}
