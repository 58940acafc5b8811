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
///
/// // Only clusters that exist: a mistyped name is refused, not created.
/// let strict = MemoryClientFactory::with_clusters(factory.clusters().clone()).existing_only();
/// assert!(strict.create("memory://bk-a").await.is_ok());
/// let err = strict.create("memory://bk-x").await.unwrap_err();
/// assert_eq!(err.code(), -14);
/// assert!(err.to_string().contains("it has: bk-a"));
/// assert!(factory.clusters().get("bk-x").is_none());
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct MemoryClientFactory {
    clusters: MemoryClusters,
    create_missing: bool,
}

impl Default for MemoryClientFactory {
    fn default() -> Self {
        MemoryClientFactory {
            clusters: MemoryClusters::default(),
            create_missing: true,
        }
    }
}

impl MemoryClientFactory {
    /// A factory over a new, empty set of clusters.
    pub fn new() -> MemoryClientFactory {
        MemoryClientFactory::default()
    }

    /// A factory over an existing set of clusters (shared, e.g. with tests that
    /// inject faults).
    pub fn with_clusters(clusters: MemoryClusters) -> MemoryClientFactory {
        MemoryClientFactory {
            clusters,
            create_missing: true,
        }
    }

    /// Resolve only clusters that already exist in [`clusters`](Self::clusters):
    /// a `memory://<name>` URI naming no such cluster is refused with
    /// [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14) listing the
    /// clusters there are, instead of creating an empty cluster that exists
    /// nowhere else. What a node serving real traffic wants: a typo in a
    /// registration must not record a cluster that holds nothing.
    pub fn existing_only(mut self) -> MemoryClientFactory {
        self.create_missing = false;
        self
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
    /// The in-memory cluster is named by its URI; `cluster_name` is not used.
    async fn create_named(
        &self,
        cluster_name: &str,
        metadata_service_uri: &str,
    ) -> Result<Arc<dyn BookKeeper>> {
        let _ = cluster_name;
        self.create(metadata_service_uri).await
    }

    async fn create(&self, metadata_service_uri: &str) -> Result<Arc<dyn BookKeeper>> {
        let name = MemoryClientFactory::cluster_name_of(metadata_service_uri)?;
        if self.create_missing {
            return Ok(Arc::new(self.clusters.get_or_create(name).client()));
        }
        match self.clusters.get(name) {
            Some(cluster) => Ok(Arc::new(cluster.client())),
            None => Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!(
                    "no in-memory bookie cluster '{name}' in this process (it has: {}); \
                     in-memory clusters are created at start (`--memory-clusters`), check the name",
                    {
                        let mut names = self.clusters.names();
                        names.sort();
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    }
                ),
            )),
        }
    }
}
