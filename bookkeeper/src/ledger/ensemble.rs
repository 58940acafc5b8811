//! Ensemble change (BookKeeper's `LedgerHandle.ensembleChangeLoop`): a bookie
//! that fails or times out an add is replaced by a writable bookie outside the
//! ensemble; the new ensemble, starting at `LAC + 1`, is recorded by
//! compare-and-set on the metadata (kept local in recovery mode until recovery
//! closes the ledger), and every pending entry is re-sent to the replacement.

use std::collections::BTreeSet;
use std::sync::Arc;

use bkswitch_bk_client::{BkErrorKind, Ensemble, LedgerState};
use tracing::{info, warn};

use super::write::{sends_for, Mode, Send, Status, WriteState, WriterShared};
use crate::meta::WriteError;

impl WriterShared {
    /// Replaces failed bookies until none is left, recording each new ensemble
    /// (by compare-and-set, except in recovery mode) and re-sending what they
    /// had not stored.
    pub(super) async fn change_ensemble(self: Arc<Self>) {
        loop {
            let (failed, record, version, lac) = {
                let mut st = self.state.lock();
                if !matches!(st.status, Status::Open) {
                    st.changing = false;
                    return;
                }
                if st.failed.is_empty() {
                    st.changing = false;
                    // Send what waited for the change.
                    let sends = unsent(&mut st);
                    drop(st);
                    self.dispatch(sends);
                    return;
                }
                st.ensemble_changes += 1;
                if st.ensemble_changes > self.ctx.client.config.max_ensemble_changes {
                    drop(st);
                    self.fail(self.ctx.error(
                        BkErrorKind::Other,
                        "too many ensemble changes; the bookies keep failing",
                    ));
                    return;
                }
                (
                    std::mem::take(&mut st.failed),
                    st.record.clone(),
                    st.version,
                    st.lac,
                )
            };
            let current = record.last_ensemble().bookies.clone();
            let failed_ids: BTreeSet<&String> = failed.values().collect();
            let mut exclude: Vec<String> = current.clone();
            exclude.extend(failed.values().cloned());
            let replacements = match self.ctx.client.place(failed.len(), &exclude) {
                Ok(r) => r,
                Err(_) => {
                    self.fail(self.ctx.error(
                        BkErrorKind::NotEnoughBookies,
                        format!(
                            "bookie(s) {failed_ids:?} failed and no spare writable bookie can replace them \
                             (ensemble {current:?}); entries up to {lac} are safe — close this handle and \
                             write to a new ledger, or start more bookies"
                        ),
                    ));
                    return;
                }
            };
            let mut bookies = current.clone();
            for ((index, _), new) in failed.iter().zip(&replacements) {
                bookies[*index] = new.clone();
            }
            let mut next = record.clone();
            let start = lac + 1;
            match next.ensembles.last_mut() {
                Some(last) if last.first_entry_id == start => last.bookies = bookies.clone(),
                _ => next.ensembles.push(Ensemble {
                    first_entry_id: start,
                    bookies: bookies.clone(),
                }),
            }
            let written = if self.mode == Mode::Recovery {
                Ok(version)
            } else {
                self.ctx.client.meta.write(&next, version).await
            };
            match written {
                Ok(new_version) => {
                    info!(
                        cluster = %self.ctx.client.name,
                        ledger = self.ctx.ledger_id,
                        from_entry = start,
                        replaced = ?failed_ids,
                        by = ?replacements,
                        "ensemble changed"
                    );
                    let sends = {
                        let mut st = self.state.lock();
                        if !matches!(st.status, Status::Open) {
                            st.changing = false;
                            return;
                        }
                        st.record.ensembles = next.ensembles;
                        st.version = new_version;
                        let replaced: Vec<usize> = failed.keys().copied().collect();
                        resend_replaced(&mut st, &replaced)
                    };
                    self.dispatch(sends);
                }
                Err(WriteError::Conflict) => {
                    // Someone else changed the metadata: a recovery open (the
                    // ledger is IN_RECOVERY or CLOSED), or our own earlier write.
                    match self.ctx.client.meta.read_existing(self.ctx.ledger_id).await {
                        Ok((fresh, fresh_version)) if fresh.state == LedgerState::Open => {
                            let mut st = self.state.lock();
                            st.record = fresh;
                            st.version = fresh_version;
                            // Try again with the same failed bookies.
                            for (i, b) in failed {
                                st.failed.entry(i).or_insert(b);
                            }
                        }
                        Ok((fresh, _)) => {
                            let kind = if fresh.state == LedgerState::Closed {
                                BkErrorKind::LedgerClosed
                            } else {
                                BkErrorKind::LedgerFenced
                            };
                            self.fail(self.ctx.error(
                                kind,
                                format!(
                                    "the ledger became {:?} while its ensemble was being changed",
                                    fresh.state
                                ),
                            ));
                            return;
                        }
                        Err(e) => {
                            self.fail(e);
                            return;
                        }
                    }
                }
                Err(WriteError::Failed(e)) => {
                    warn!(error = %e, "could not record a new ensemble");
                    self.fail(e);
                    return;
                }
            }
        }
    }
}

/// After an ensemble change: the replaced bookies' acknowledgements no longer
/// count, so every pending entry whose write set includes one of them is sent
/// to its replacement.
fn resend_replaced(st: &mut WriteState, replaced: &[usize]) -> Vec<Send> {
    let mut sends = Vec::new();
    let record = st.record.clone();
    for (entry, p) in st.pending.iter_mut() {
        for i in replaced {
            p.acked &= !(1 << i);
        }
        if p.sent {
            sends.extend(sends_for(&record, *entry, p, Some(replaced)));
        }
    }
    sends.extend(unsent(st));
    sends
}

fn unsent(st: &mut WriteState) -> Vec<Send> {
    let record = st.record.clone();
    let mut sends = Vec::new();
    for (entry, p) in st
        .pending
        .iter_mut()
        .filter(|(_, p)| !p.sent && p.held.is_none())
    {
        p.sent = true;
        sends.extend(sends_for(&record, *entry, p, None));
    }
    sends
}
