//! The stamp flip: one routine for PROMOTE (source → target) and ROLLBACK
//! (target → source), for schema locators and for cursors. It changes the
//! stamp and nothing else ([I9](bkswitch_docs::invariants::I9),
//! [I10](bkswitch_docs::invariants::I10)), always with a compare-and-set, and
//! reports what it found; `promote.rs` and `rollback.rs` record it.
//!
//! A cursor is flipped by the node that owns its topic, under the cursor lock
//! ([I13](bkswitch_docs::invariants::I13)), through the owner's
//! [`CursorPromoter`](crate::CursorPromoter) (the same call both ways, with the
//! destination as its target). A cursor nobody owns is flipped by the
//! coordinator.

use std::collections::BTreeSet;

use bkswitch_metadata_store::ExpectedVersion;
use bkswitch_proto::codec::encode_managed_cursor_info;
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, StampError, Stamped};

use super::build::CopyCheck;
use super::{Ctx, Orchestrator};
use crate::error::{OrchestratorError, Result};
use crate::model::SwitchLedgerRecord;
use crate::owners::{CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, PromoteError};
use crate::scan::{cursor_compression, decode_cursor};

/// Which way a flip goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    /// PROMOTE: from the switch's source to its target.
    Promote,
    /// ROLLBACK: from the switch's target back to its source.
    Rollback,
}

impl Direction {
    /// The cluster the stamps name before the flip and the one they name after.
    fn ends(self, ctx: &Ctx) -> (&str, &str) {
        match self {
            Direction::Promote => (&ctx.source, &ctx.target),
            Direction::Rollback => (&ctx.target, &ctx.source),
        }
    }

    /// The failpoint before each cursor flip (an owner call or a CAS).
    fn cursor_failpoint(self) -> &'static str {
        match self {
            Direction::Promote => "orchestrator::cursor_promote",
            Direction::Rollback => "orchestrator::rollback_cursor",
        }
    }
}

/// Where a stamp puts a ledger, seen from a flip `from` → `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StampIs {
    /// On `to`: nothing to flip.
    OnTo,
    /// On `from`: to be flipped.
    OnFrom,
    /// On neither.
    Elsewhere,
}

/// An unstamped ledger is on the bootstrap cluster
/// ([I17](bkswitch_docs::invariants::I17)).
fn classify(stamp: Option<&str>, bootstrap: Option<&str>, from: &str, to: &str) -> StampIs {
    match stamp.or(bootstrap) {
        Some(c) if c == to => StampIs::OnTo,
        Some(c) if c == from => StampIs::OnFrom,
        _ => StampIs::Elsewhere,
    }
}

/// The stamp rule: a ledger that had no stamp before the switch loses its
/// stamp again when it goes back to the bootstrap cluster (so the metadata is
/// as it was, byte for byte); every other flip stamps `to`.
fn restamp<S: Stamped>(
    msg: &mut S,
    was_unstamped: bool,
    bootstrap: Option<&str>,
    to: &str,
) -> std::result::Result<(), StampError> {
    if was_unstamped && bootstrap == Some(to) {
        msg.remove_cluster_stamp().map(|_| ())
    } else {
        msg.set_cluster_stamp(to)
    }
}

/// What flipping one cursor found; the caller records it.
#[derive(Debug)]
pub(super) enum CursorFlip {
    /// The stamp names the destination (flipped now, or already).
    Done,
    /// The owner rolled the cursor over onto this new ledger on the
    /// destination instead: the cursor had moved past the copy.
    RolledOverByOwner(i64),
    /// The cursor records this other ledger than the one copied.
    MovedOn(i64),
    /// The cursor node is gone.
    Gone,
    /// The stamp names neither end of the flip (this stamp).
    Elsewhere(Option<String>),
    /// The owner refused.
    Refused(PromoteError),
    /// The flip is impossible (why); the stamp stays.
    Failed(String),
    /// Not now (owner busy or moving, CAS lost): a later pass retries.
    Waiting,
}

impl Orchestrator {
    /// Flips the stamps of the ledgers `recs` in the schema locator at `path`
    /// (changing nothing else, [I10](bkswitch_docs::invariants::I10)); returns
    /// the ids of those that now name the destination (none when the locator
    /// is gone). `None` when the CAS kept losing (a later pass retries).
    pub(super) async fn flip_locator(
        &self,
        ctx: &Ctx,
        dir: Direction,
        path: &str,
        recs: &[SwitchLedgerRecord],
    ) -> Result<Option<BTreeSet<i64>>> {
        let (from, to) = dir.ends(ctx);
        let bootstrap = ctx.bootstrap.as_deref();
        let ids: BTreeSet<i64> = recs.iter().map(|r| r.ledger_id).collect();
        let unstamped: BTreeSet<i64> = recs
            .iter()
            .filter(|r| r.was_unstamped)
            .map(|r| r.ledger_id)
            .collect();
        for _ in 0..self.inner.config.max_schema_cas_attempts.max(1) {
            let Some(r) = self.records().read_node(path).await? else {
                return Ok(Some(BTreeSet::new()));
            };
            let mut locator = SchemaLocator::decode(r.value.as_slice()).map_err(|e| {
                OrchestratorError::corrupt_metadata(path, format!("not a SchemaLocator: {e}"))
            })?;
            let mut changed = false;
            let mut on_to = BTreeSet::new();
            for entry in std::iter::once(&mut locator.info).chain(locator.index.iter_mut()) {
                let pos = &mut entry.position;
                if !ids.contains(&pos.ledger_id) {
                    continue;
                }
                let stamp = pos
                    .cluster_stamp()
                    .map_err(|e| OrchestratorError::corrupt_metadata(path, e))?;
                match classify(stamp, bootstrap, from, to) {
                    StampIs::OnTo => {}
                    StampIs::OnFrom => {
                        let was_unstamped = unstamped.contains(&pos.ledger_id);
                        restamp(pos, was_unstamped, bootstrap, to)
                            .map_err(|e| OrchestratorError::corrupt_metadata(path, e))?;
                        changed = true;
                    }
                    StampIs::Elsewhere => continue,
                }
                on_to.insert(pos.ledger_id);
            }
            if !changed {
                return Ok(Some(on_to));
            }
            fail_point!("orchestrator::schema_cas");
            let expected = ExpectedVersion::Exactly(r.stat.version);
            if self
                .records()
                .try_put(path, &locator.encode_to_vec(), expected)
                .await?
            {
                return Ok(Some(on_to));
            }
        }
        tracing::warn!(
            path,
            "schema locator kept changing; retried in the next pass"
        );
        Ok(None)
    }

    /// Flips one cursor's stamp: through the node that owns its topic, or,
    /// when no node owns it, by the coordinator.
    pub(super) async fn flip_cursor(
        &self,
        ctx: &Ctx,
        dir: Direction,
        rec: &mut SwitchLedgerRecord,
    ) -> Result<CursorFlip> {
        let (_, to) = dir.ends(ctx);
        let ml = rec.managed_ledger.clone().unwrap_or_default();
        if let Some(owner) = self.inner.owners.owner(&ml).await? {
            let req = CursorPromoteRequest {
                managed_ledger: ml.clone(),
                cursor_name: rec.cursor.clone().unwrap_or_default(),
                target_cluster_name: to.to_owned(),
                expected_cursors_ledger_id: rec.ledger_id,
                copied_last_entry_id: rec.copied_last_entry_id,
            };
            if let Some(found) = self.ask_owner(owner.as_ref(), &req, dir).await? {
                return Ok(found);
            }
            if self.inner.owners.owner(&ml).await?.is_some() {
                // Ownership moved meanwhile (or the owner stayed busy): a
                // later pass asks the owner again.
                return Ok(CursorFlip::Waiting);
            }
        }
        self.flip_unowned_cursor(ctx, dir, rec).await
    }

    /// Asks the owner to flip, retrying while it is busy; `None` when it does
    /// not own the topic (any more) or stayed busy.
    async fn ask_owner(
        &self,
        owner: &dyn CursorPromoter,
        req: &CursorPromoteRequest,
        dir: Direction,
    ) -> Result<Option<CursorFlip>> {
        let cfg = &self.inner.config;
        for attempt in 0..cfg.promote_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(cfg.promote_retry_delay).await;
            }
            fail_point!(dir.cursor_failpoint());
            let found = match owner.promote_cursor(req).await {
                Ok(CursorPromoteOutcome::Promoted | CursorPromoteOutcome::AlreadyOnTarget) => {
                    CursorFlip::Done
                }
                Ok(CursorPromoteOutcome::RolledOver { new_ledger_id }) => {
                    CursorFlip::RolledOverByOwner(new_ledger_id)
                }
                Err(PromoteError::RolledOver { actual, .. }) => CursorFlip::MovedOn(actual),
                Err(PromoteError::NotOwner { .. }) => return Ok(None),
                Err(e @ PromoteError::Unavailable { .. }) => {
                    tracing::info!(managed_ledger = %req.managed_ledger, error = %e,
                        "cursor owner busy; retrying");
                    continue;
                }
                Err(e) => CursorFlip::Refused(e),
            };
            return Ok(Some(found));
        }
        Ok(None)
    }

    /// The coordinator flips a cursor no node owns: the cursor node must still
    /// name the copied ledger, stamped to the flip's origin. Going forward, the
    /// source ledger is sealed first (recovery-open fences a dead writer, there
    /// is no live one) and a stale copy replaced
    /// ([`refresh_copy`](Self::refresh_copy)); then one stamp-only
    /// compare-and-set.
    async fn flip_unowned_cursor(
        &self,
        ctx: &Ctx,
        dir: Direction,
        rec: &mut SwitchLedgerRecord,
    ) -> Result<CursorFlip> {
        let (from, to) = dir.ends(ctx);
        let bootstrap = ctx.bootstrap.as_deref();
        let path = rec.owner_path.clone();
        for _ in 0..self.inner.config.max_schema_cas_attempts.max(1) {
            let Some(r) = self.records().read_node(&path).await? else {
                return Ok(CursorFlip::Gone);
            };
            let Some(mut info) = decode_cursor(&r.value) else {
                return Err(OrchestratorError::corrupt_metadata(
                    &path,
                    "not a ManagedCursorInfo",
                ));
            };
            if info.cursors_ledger_id != rec.ledger_id {
                return Ok(CursorFlip::MovedOn(info.cursors_ledger_id));
            }
            let stamp = info
                .cluster_stamp()
                .map_err(|e| OrchestratorError::corrupt_metadata(&path, e))?;
            match classify(stamp, bootstrap, from, to) {
                StampIs::OnTo => return Ok(CursorFlip::Done),
                StampIs::Elsewhere => return Ok(CursorFlip::Elsewhere(stamp.map(str::to_owned))),
                StampIs::OnFrom => {}
            }
            if dir == Direction::Promote {
                match self.refresh_copy(ctx, rec).await? {
                    CopyCheck::Current => {}
                    CopyCheck::Replaced => continue,
                    CopyCheck::Failed(reason) => {
                        // A node may have loaded the topic meanwhile and
                        // rolled the cursor over, deleting this ledger: not a
                        // failure. Look again when the cursor node changed.
                        match self.records().read_node(&path).await? {
                            Some(now) if now.stat.version != r.stat.version => continue,
                            None => return Ok(CursorFlip::Gone),
                            Some(_) => return Ok(CursorFlip::Failed(reason)),
                        }
                    }
                }
            }
            restamp(&mut info, rec.was_unstamped, bootstrap, to)
                .map_err(|e| OrchestratorError::corrupt_metadata(&path, e))?;
            let bytes = encode_managed_cursor_info(&info, cursor_compression(&r.value))
                .map_err(|e| OrchestratorError::corrupt_metadata(&path, e))?;
            fail_point!(dir.cursor_failpoint());
            if self
                .records()
                .try_put(&path, &bytes, ExpectedVersion::Exactly(r.stat.version))
                .await?
            {
                return Ok(CursorFlip::Done);
            }
        }
        Ok(CursorFlip::Waiting)
    }
}

#[cfg(test)]
mod tests {
    use bkswitch_proto::ml::ManagedCursorInfo;

    use super::*;

    #[test]
    fn an_unstamped_ledger_is_on_the_bootstrap_cluster() {
        assert_eq!(classify(None, Some("old"), "old", "new"), StampIs::OnFrom);
        assert_eq!(classify(None, Some("old"), "new", "old"), StampIs::OnTo);
        assert_eq!(
            classify(Some("new"), Some("old"), "old", "new"),
            StampIs::OnTo
        );
        assert_eq!(
            classify(Some("new"), Some("old"), "new", "old"),
            StampIs::OnFrom
        );
        assert_eq!(
            classify(Some("z"), Some("old"), "old", "new"),
            StampIs::Elsewhere
        );
        assert_eq!(classify(None, None, "old", "new"), StampIs::Elsewhere);
    }

    #[test]
    fn a_ledger_unstamped_before_the_switch_goes_back_unstamped() {
        let legacy = ManagedCursorInfo {
            cursors_ledger_id: 7,
            ..Default::default()
        };
        let mut info = legacy.clone();
        // Forward (the bootstrap cluster is the source): stamped to the target.
        restamp(&mut info, true, Some("old"), "new").unwrap();
        assert_eq!(info.cluster_stamp().unwrap(), Some("new"));
        // Back to the bootstrap cluster: unstamped, as it was.
        restamp(&mut info, true, Some("old"), "old").unwrap();
        assert_eq!(info, legacy);
        // A ledger that had a stamp keeps one.
        restamp(&mut info, false, Some("old"), "old").unwrap();
        assert_eq!(info.cluster_stamp().unwrap(), Some("old"));
    }
}
