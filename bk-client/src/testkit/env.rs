//! The environment a conformance run drives ([`BookKeeperTestEnv`]) and the
//! ready one over an in-memory cluster ([`MemoryBookKeeperTestEnv`]).

use async_trait::async_trait;

use crate::api::BookKeeper;
use crate::memory::{MemoryBookKeeper, MemoryCluster};
use crate::types::{DeleteMissing, LedgerConfig};

/// The environment a conformance run drives: how to get clients of the cluster
/// under test and what the implementation promises.
///
/// ```
/// use std::sync::Arc;
/// use bkswitch_bk_client::testkit::{async_trait, BookKeeperTestEnv};
/// use bkswitch_bk_client::{BookKeeper, DeleteMissing, LedgerConfig, MemoryCluster};
///
/// struct DynEnv(MemoryCluster);
///
/// #[async_trait]
/// impl BookKeeperTestEnv for DynEnv {
///     type Client = Arc<dyn BookKeeper>;
///     async fn client(&self) -> Arc<dyn BookKeeper> { Arc::new(self.0.client()) }
///     fn delete_missing(&self) -> DeleteMissing { self.0.delete_missing() }
///     fn ledger_config(&self) -> LedgerConfig { LedgerConfig::default() }
/// }
/// ```
#[async_trait]
pub trait BookKeeperTestEnv: Send + Sync {
    /// The client type under test (`Arc<dyn BookKeeper>` works too).
    type Client: BookKeeper + 'static;

    /// A **new** client of the same cluster on every call (rules use two clients to
    /// check that a recovery open by one fences the other's writer).
    async fn client(&self) -> Self::Client;

    /// What deleting a missing ledger does on this implementation.
    fn delete_missing(&self) -> DeleteMissing;

    /// A configuration valid on the cluster (quorums within its bookie count); rules
    /// derive their ledgers (and the invalid variants) from it.
    fn ledger_config(&self) -> LedgerConfig;
}

/// A [`BookKeeperTestEnv`] over an in-memory cluster: each call to `client` returns a
/// new [`MemoryBookKeeper`] of the same [`MemoryCluster`].
#[derive(Debug, Clone)]
pub struct MemoryBookKeeperTestEnv {
    cluster: MemoryCluster,
}

impl MemoryBookKeeperTestEnv {
    /// An environment over a new cluster with default settings.
    pub fn new() -> MemoryBookKeeperTestEnv {
        MemoryBookKeeperTestEnv::with_cluster(MemoryCluster::new("conformance"))
    }

    /// An environment over `cluster` (its delete behaviour is what it declares).
    pub fn with_cluster(cluster: MemoryCluster) -> MemoryBookKeeperTestEnv {
        MemoryBookKeeperTestEnv { cluster }
    }

    /// The cluster under test.
    pub fn cluster(&self) -> &MemoryCluster {
        &self.cluster
    }
}

impl Default for MemoryBookKeeperTestEnv {
    fn default() -> Self {
        MemoryBookKeeperTestEnv::new()
    }
}

#[async_trait]
impl BookKeeperTestEnv for MemoryBookKeeperTestEnv {
    type Client = MemoryBookKeeper;

    async fn client(&self) -> MemoryBookKeeper {
        self.cluster.client()
    }

    fn delete_missing(&self) -> DeleteMissing {
        self.cluster.delete_missing()
    }

    fn ledger_config(&self) -> LedgerConfig {
        LedgerConfig::default()
    }
}
