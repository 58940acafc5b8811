//! [`IdgenSource`]: where a cluster's next ledger id is read.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{BkError, BkErrorKind, Result};
use crate::memory::MemoryClusters;
use crate::types::LedgerId;
use crate::uri::ClusterUri;

/// Where the id a cluster's next `createLedger` gets is read, without taking
/// one: the one place that knows a cluster's ledger-id generator.
///
/// [`MemoryClusters`] reads `memory://` clusters; the real client crate
/// (`bkswitch-bookkeeper`) reads BookKeeper's ZooKeeper layout (`idgen`,
/// `idgen-long/HOB-*`). The registry's idgen precheck and the switch
/// orchestrator take any implementation.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use bkswitch_bk_client::{ClusterUri, IdgenSource, MemoryClusters};
///
/// let clusters = MemoryClusters::new();
/// clusters.get_or_create("old").advance_ledger_id_to(42).unwrap();
/// let uri = ClusterUri::parse("memory://old").unwrap();
/// assert_eq!(clusters.next_ledger_id(&uri).await.unwrap(), 42);
/// # });
/// ```
#[async_trait]
pub trait IdgenSource: Send + Sync {
    /// The id the cluster's next `createLedger` will get.
    ///
    /// # Errors
    /// [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14) for a URI this
    /// source does not serve or a cluster that does not exist; a retryable
    /// kind ([`BkError::is_retryable`]) when the cluster's metadata is
    /// unreachable.
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<LedgerId>;
}

#[async_trait]
impl<T: IdgenSource + ?Sized> IdgenSource for Arc<T> {
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<LedgerId> {
        (**self).next_ledger_id(uri).await
    }
}

/// Reads `memory://` clusters of this set: a missing cluster has next id 0
/// and is not created. Any other URI is refused with `InvalidArgument`.
#[async_trait]
impl IdgenSource for MemoryClusters {
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<LedgerId> {
        match uri {
            ClusterUri::Memory { name } => Ok(self.get(name).map_or(0, |c| c.next_ledger_id())),
            other => Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!(
                    "cannot read the ledger id generator of `{other}` from the in-memory \
                     clusters: it is not a memory:// cluster; read it with the BookKeeper \
                     client's ZooKeeper id reader"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_clusters_read_without_creating_and_refuse_zookeeper() {
        let clusters = MemoryClusters::new();
        let ghost = ClusterUri::parse("memory://ghost").unwrap();
        assert_eq!(clusters.next_ledger_id(&ghost).await.unwrap(), 0);
        assert!(clusters.get("ghost").is_none(), "reading created it");
        let c = clusters.get_or_create("old");
        c.advance_ledger_id_to(7).unwrap();
        let old = ClusterUri::parse("memory://old").unwrap();
        let shared: Arc<dyn IdgenSource> = Arc::new(clusters.clone());
        assert_eq!(shared.next_ledger_id(&old).await.unwrap(), 7);
        assert_eq!(c.next_ledger_id(), 7, "reading takes no id");

        let zk = ClusterUri::parse("zk://h:1/ledgers").unwrap();
        let e = clusters.next_ledger_id(&zk).await.unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::InvalidArgument);
        assert!(e.to_string().contains("zk://h:1/ledgers"), "{e}");
        assert!(!e.is_retryable());
    }
}
