//! [`MemoryClientFactory`]: `memory://<name>` URIs to in-memory clusters.

use std::sync::Arc;

use async_trait::async_trait;

use super::cluster::MemoryClusters;
use crate::api::{BookKeeper, ClientFactory};
use crate::error::{BkError, BkErrorKind, Result};

/// The URI scheme [`MemoryClientFactory`] understands.
pub const MEMORY_SCHEME: &str = "memory://";

/// A [`ClientFactory`] resolving `memory://<name>` to the in-process cluster
/// `<name>` of its [`MemoryClusters`] (created on first use, shared by later calls
/// with the same name). Each call returns a new client.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use bkswitch_bk_client::{BookKeeper, ClientFactory, MemoryClientFactory};
///
/// let factory = MemoryClientFactory::new();
/// let a = factory.create("memory://bk-a").await.unwrap();
/// assert_eq!(a.cluster_name(), "bk-a");
/// assert!(factory.clusters().get("bk-a").is_some());
/// let err = factory.create("zk+hierarchical://zk:2181/ledgers").await.unwrap_err();
/// assert_eq!(err.code(), -14);
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryClientFactory {
    clusters: MemoryClusters,
}

impl MemoryClientFactory {
    /// A factory over a new, empty set of clusters.
    pub fn new() -> MemoryClientFactory {
        MemoryClientFactory::default()
    }

    /// A factory over an existing set of clusters (shared, e.g. with tests that
    /// inject faults).
    pub fn with_clusters(clusters: MemoryClusters) -> MemoryClientFactory {
        MemoryClientFactory { clusters }
    }

    /// The clusters this factory resolves names in.
    pub fn clusters(&self) -> &MemoryClusters {
        &self.clusters
    }

    /// The cluster name in a `memory://<name>` URI (trailing `/` ignored).
    ///
    /// # Errors
    /// Another scheme, an empty name or whitespace →
    /// [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14) naming the URI.
    pub fn cluster_name_of(metadata_service_uri: &str) -> Result<&str> {
        let uri = metadata_service_uri;
        let scheme_ok = uri.len() >= MEMORY_SCHEME.len()
            && uri.is_char_boundary(MEMORY_SCHEME.len())
            && uri[..MEMORY_SCHEME.len()].eq_ignore_ascii_case(MEMORY_SCHEME);
        if !scheme_ok {
            return Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!(
                    "cannot create a client for metadata service URI '{uri}': unsupported scheme; \
                     this factory only supports '{MEMORY_SCHEME}<cluster-name>'"
                ),
            ));
        }
        let name = uri[MEMORY_SCHEME.len()..].trim_end_matches('/');
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!(
                    "cannot create a client for metadata service URI '{uri}': the cluster name must be \
                     non-empty and without whitespace, as in '{MEMORY_SCHEME}<cluster-name>'"
                ),
            ));
        }
        Ok(name)
    }
}

#[async_trait]
impl ClientFactory for MemoryClientFactory {
    async fn create(&self, metadata_service_uri: &str) -> Result<Arc<dyn BookKeeper>> {
        let name = MemoryClientFactory::cluster_name_of(metadata_service_uri)?;
        Ok(Arc::new(self.clusters.get_or_create(name).client()))
    }
}
