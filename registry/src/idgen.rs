//! The idgen precheck ([I11](bkswitch_docs::invariants::I11)).
//!
//! A switch copies ledgers to the new cluster keeping their ids
//! (`createLedgerAdv(same id)`); the new cluster's own id generator must already
//! be beyond every copied id, or a later `createLedger` there collides with a
//! copy. This module reads the next id from BookKeeper's ZooKeeper layout
//! (`idgen`, `idgen-long/HOB-*`) or from an in-memory cluster.
//!
//! `ready` is stricter than the proposal: a managed ledger needs ledger ids to
//! increase within it (positions are ordered by ledger id), so after a switch the
//! new cluster must hand out ids above every id the *source* has handed out, not
//! only above the copied ones: `ready` requires `targetNextLedgerId >
//! sourceMaxLedgerId` and `targetNextLedgerId > sourceNextLedgerId` (strictly:
//! with equal next ids both clusters' next ledgers would share an id). When the
//! source's generator cannot be read, `ready` is false and `sourceIdgenError`
//! says why.

use async_trait::async_trait;
use bkswitch_bk_client::MemoryClusters;
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use serde::{Deserialize, Serialize};

use crate::error::{RegistryError, Result};
use crate::registry::Registry;
use crate::uri::ClusterUri;

/// At most this many at-risk ids are listed (all are counted).
pub const MAX_AT_RISK_LISTED: usize = 100;

/// Where the next ledger id of a cluster comes from.
#[async_trait]
pub trait IdgenSource: Send + Sync {
    /// The id the cluster's next `createLedger` will get.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidUri`] for a URI this source does not serve,
    /// [`RegistryError::Corrupt`] for an unreadable layout,
    /// [`RegistryError::Metadata`] when the cluster's metadata is unreachable.
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<i64>;
}

/// Next ledger id from BookKeeper's layout under `ledgers_root` in `store`
/// ([formats §5](bkswitch_docs::formats), using [`Stat::next_sequential_suffix`](bkswitch_metadata_store::Stat::next_sequential_suffix)).
///
/// # Errors
///
/// [`RegistryError::Corrupt`] for a malformed `HOB-` name,
/// [`RegistryError::Metadata`].
pub async fn next_ledger_id_from_layout(
    store: &dyn MetadataStore,
    ledgers_root: &str,
) -> Result<i64> {
    let long = format!("{ledgers_root}/idgen-long");
    if store.exists(&long).await?.is_some() {
        let mut max_hob: Option<i64> = None;
        for child in store.children(&long).await? {
            let hob = child
                .strip_prefix("HOB-")
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| RegistryError::Corrupt {
                    path: format!("{long}/{child}"),
                    reason: "expected HOB-%010d".to_owned(),
                })?;
            max_hob = max_hob.max(Some(hob));
        }
        return Ok(match max_hob {
            None => 1 << 32,
            Some(hob) => {
                let low = store
                    .exists(&format!("{long}/HOB-{hob:010}"))
                    .await?
                    .map_or(0, |s| s.next_sequential_suffix());
                (hob << 32) | low
            }
        });
    }
    Ok(store
        .exists(&format!("{ledgers_root}/idgen"))
        .await?
        .map_or(0, |s| s.next_sequential_suffix()))
}

/// Reads ZooKeeper-layout clusters by connecting a [`ZkStore`] to the URI's
/// hosts for each call.
#[derive(Debug, Clone, Default)]
pub struct ZkIdgenSource {
    /// Options of the short-lived connections.
    pub options: ZkStoreOptions,
}

#[async_trait]
impl IdgenSource for ZkIdgenSource {
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<i64> {
        let (Some(url), ClusterUri::ZooKeeper { ledgers_root, .. }) = (uri.zk_connect_url(), uri)
        else {
            return Err(RegistryError::InvalidUri {
                uri: uri.to_string(),
                reason: "not a ZooKeeper cluster; use MemoryIdgenSource for memory://".to_owned(),
            });
        };
        let store = ZkStore::connect(&url, self.options.clone()).await?;
        let result = next_ledger_id_from_layout(&store, ledgers_root).await;
        let _ = store.close().await;
        result
    }
}

/// Reads `memory://` clusters from a [`MemoryClusters`] set (a missing cluster
/// has next id 0 and is not created).
#[derive(Debug, Clone, Default)]
pub struct MemoryIdgenSource {
    /// The in-memory clusters.
    pub clusters: MemoryClusters,
}

#[async_trait]
impl IdgenSource for MemoryIdgenSource {
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<i64> {
        match uri {
            ClusterUri::Memory { name } => {
                Ok(self.clusters.get(name).map_or(0, |c| c.next_ledger_id()))
            }
            other => Err(RegistryError::InvalidUri {
                uri: other.to_string(),
                reason: "not a memory:// cluster; use ZkIdgenSource".to_owned(),
            }),
        }
    }
}

/// Reads the id generator of any cluster the registry can record: in-memory
/// clusters through [`MemoryIdgenSource`], BookKeeper clusters (`zk…://`,
/// `metadata-store:zk:`) through [`ZkIdgenSource`] from their own ZooKeeper.
///
/// What a node uses when its clusters may be of either kind, as `bookie-switch
/// serve` does.
#[derive(Debug, Clone, Default)]
pub struct ClusterIdgenSource {
    /// In-memory clusters.
    pub memory: MemoryIdgenSource,
    /// BookKeeper clusters.
    pub zk: ZkIdgenSource,
}

#[async_trait]
impl IdgenSource for ClusterIdgenSource {
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<i64> {
        match uri {
            ClusterUri::Memory { .. } => self.memory.next_ledger_id(uri).await,
            _ => self.zk.next_ledger_id(uri).await,
        }
    }
}

/// The structured result of [`Registry::precheck`]
/// ([I11](bkswitch_docs::invariants::I11)).
///
/// A switch copies ledgers to the new cluster keeping their ids
/// (`createLedgerAdv(same id)`); the new cluster's own id generator must already
/// be beyond every copied id, or a later `createLedger` there collides with a
/// copy. The next id is read from BookKeeper's ZooKeeper layout (`idgen`,
/// `idgen-long/HOB-*`) or from an in-memory cluster.
///
/// `ready` is stricter than the proposal: a managed ledger needs ledger ids to
/// increase within it (positions are ordered by ledger id), so after a switch the
/// new cluster must hand out ids above every id the *source* has handed out, not
/// only above the copied ones: `ready` requires `targetNextLedgerId >
/// sourceMaxLedgerId` and `targetNextLedgerId > sourceNextLedgerId` (strictly:
/// with equal next ids both clusters' next ledgers would share an id). When the
/// source's generator cannot be read, `ready` is false and
/// `sourceIdgenError` says why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrecheckResult {
    /// Whether the switch may proceed (see [`PrecheckResult`]).
    pub ready: bool,
    /// Whether the target's next id is beyond every copied id (the proposal's check).
    pub idgen_advanced_beyond_source: bool,
    /// The cluster ledgers are copied from.
    pub source_cluster_name: String,
    /// The cluster ledgers are copied to.
    pub target_cluster_name: String,
    /// The highest copied ledger id (`None`: nothing to copy).
    pub source_max_ledger_id: Option<i64>,
    /// The source's own next id, when it could be read.
    pub source_next_ledger_id: Option<i64>,
    /// The target's next id.
    pub target_next_ledger_id: i64,
    /// Copied ids `>= targetNextLedgerId` (at most [`MAX_AT_RISK_LISTED`], ascending).
    pub at_risk_ledger_ids: Vec<i64>,
    /// How many copied ids are at risk.
    pub at_risk_ledger_count: usize,
    /// Why the source's next id could not be read (then `ready` is false:
    /// the check cannot be made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_idgen_error: Option<String>,
    /// Whether this is the precheck of a rollback: going back from a
    /// switch's target (the source here) to its source (the target here).
    #[serde(default)]
    pub rollback: bool,
    /// When not `ready` and the source's generator could be read: the id the
    /// target's generator must be advanced beyond for the check to pass (the
    /// coordinator's safety margin included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advance_beyond: Option<i64>,
    /// The exact command that advances it (`bookie-switch idgen
    /// --metadata-service-uri <target's URI> --advance-beyond N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advance_command: Option<String>,
}

impl Registry {
    /// Runs the idgen precheck for a switch from `source` to `target` copying
    /// `copied_ledger_ids` (ids stamped to the source).
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`] for an unregistered cluster,
    /// [`RegistryError::InvalidUri`] for a stored URI that does not parse,
    /// the target's [`IdgenSource`] errors (the source's are reported as an
    /// unknown `sourceNextLedgerId`), [`RegistryError::Metadata`].
    pub async fn precheck(
        &self,
        source: &str,
        target: &str,
        copied_ledger_ids: &[i64],
        idgen: &dyn IdgenSource,
    ) -> Result<PrecheckResult> {
        let src = self
            .get(source)
            .await?
            .ok_or_else(|| RegistryError::NotFound {
                name: source.to_owned(),
            })?;
        let dst = self
            .get(target)
            .await?
            .ok_or_else(|| RegistryError::NotFound {
                name: target.to_owned(),
            })?;
        let dst_uri = ClusterUri::parse(&dst.metadata_service_uri)?;
        let target_next = idgen.next_ledger_id(&dst_uri).await?;
        // The source's own generator bounds the ids its topics already use:
        // when it cannot be read the check cannot be made, which is "not
        // ready", never a silent pass.
        let (source_next, source_idgen_error) = match ClusterUri::parse(&src.metadata_service_uri) {
            Ok(u) => match idgen.next_ledger_id(&u).await {
                Ok(n) => (Some(n), None),
                Err(e) => (None, Some(e.to_string())),
            },
            Err(e) => (None, Some(e.to_string())),
        };
        let source_max = copied_ledger_ids.iter().copied().max();
        let mut at_risk: Vec<i64> = copied_ledger_ids
            .iter()
            .copied()
            .filter(|id| *id >= target_next)
            .collect();
        at_risk.sort_unstable();
        at_risk.dedup();
        let count = at_risk.len();
        at_risk.truncate(MAX_AT_RISK_LISTED);
        let advanced = source_max.is_none_or(|m| target_next > m);
        // Strictly above the source's next id: with equal next ids the next
        // ledger each cluster creates would share its id.
        let ordered = source_next.is_some_and(|n| target_next > n);
        Ok(PrecheckResult {
            ready: advanced && ordered,
            idgen_advanced_beyond_source: advanced,
            source_cluster_name: source.to_owned(),
            target_cluster_name: target.to_owned(),
            source_max_ledger_id: source_max,
            source_next_ledger_id: source_next,
            target_next_ledger_id: target_next,
            at_risk_ledger_ids: at_risk,
            at_risk_ledger_count: count,
            source_idgen_error,
            rollback: false,
            advance_beyond: None,
            advance_command: None,
        })
    }
}
