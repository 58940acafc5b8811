//! The idgen precheck ([I11](bkswitch_docs::invariants::I11)).
//!
//! A switch copies ledgers to the new cluster keeping their ids
//! (`createLedgerAdv(same id)`); the new cluster's own id generator must already
//! be beyond every copied id, or a later `createLedger` there collides with a
//! copy. This module holds the arithmetic; the next ids come from an
//! [`IdgenSource`] (the client side's one reader of ledger-id generators:
//! `MemoryClusters` for `memory://`, `bkswitch-bookkeeper`'s `ZkIdgenSource`
//! for BookKeeper's ZooKeeper layout).
//!
//! `ready` is stricter than the proposal: a managed ledger needs ledger ids to
//! increase within it (positions are ordered by ledger id), so after a switch the
//! new cluster must hand out ids above every id the *source* has handed out, not
//! only above the copied ones: `ready` requires `targetNextLedgerId >
//! sourceMaxLedgerId` and `targetNextLedgerId > sourceNextLedgerId` (strictly:
//! with equal next ids both clusters' next ledgers would share an id). When the
//! source's generator cannot be read, `ready` is false and `sourceIdgenError`
//! says why.

use bkswitch_bk_client::{ClusterUri, IdgenSource};
use serde::{Deserialize, Serialize};

use crate::error::{RegistryError, Result};
use crate::registry::Registry;

/// At most this many at-risk ids are listed (all are counted).
pub const MAX_AT_RISK_LISTED: usize = 100;

/// The structured result of [`Registry::precheck`]
/// ([I11](bkswitch_docs::invariants::I11)).
///
/// A switch copies ledgers to the new cluster keeping their ids
/// (`createLedgerAdv(same id)`); the new cluster's own id generator must already
/// be beyond every copied id, or a later `createLedger` there collides with a
/// copy. The next ids are read through an [`IdgenSource`].
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
    /// [`RegistryError::Idgen`] when the target's generator cannot be read
    /// (the source's errors are reported as an unknown `sourceNextLedgerId`),
    /// [`RegistryError::Metadata`].
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
        let target_next =
            idgen
                .next_ledger_id(&dst_uri)
                .await
                .map_err(|source| RegistryError::Idgen {
                    cluster: target.to_owned(),
                    source: Box::new(source),
                })?;
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
