//! Answers of the bookies to adds, failing the writer, and closing it.

use super::*;

impl WriterShared {
    pub(super) fn on_answer(
        self: &Arc<Self>,
        entry: EntryId,
        index: usize,
        bookie: String,
        result: Result<Response, ConnError>,
    ) {
        let mut fail = None;
        let mut start_change = false;
        let completed = {
            let mut st = self.state.lock();
            let aq = st.record.ack_quorum_size;
            let member = st
                .record
                .last_ensemble()
                .bookies
                .get(index)
                .is_some_and(|b| *b == bookie);
            let Some(p) = st.pending.get_mut(&entry) else {
                return;
            };
            match result {
                Ok(r) if r.rc == rc::EOK => {
                    if member {
                        p.acked |= 1 << index;
                        if p.acked.count_ones() >= aq {
                            // Acknowledged: its share of the budget goes back now,
                            // not when the entries before it are acknowledged too
                            // (a held earlier entry may be waiting for it).
                            p.permit = None;
                        }
                    }
                }
                Ok(r) if r.rc == rc::EFENCED || r.rc == rc::EUA => {
                    fail = Some(self.ctx.status_error(Op::Add, entry, &bookie, r.rc));
                }
                other => {
                    let error = match &other {
                        Ok(r) => self.ctx.status_error(Op::Add, entry, &bookie, r.rc),
                        Err(e) => self.ctx.conn_error(Op::Add, entry, e),
                    };
                    if member && matches!(st.status, Status::Open) {
                        debug!(error = %error, "bookie failed an add; changing the ensemble");
                        if self.ctx.client.is_closed() {
                            fail = Some(error);
                        } else {
                            st.failed.insert(index, bookie);
                            if !st.changing {
                                st.changing = true;
                                start_change = true;
                            }
                        }
                    }
                }
            }
            drain(&mut st, self.mode, aq)
        };
        for (waiter, id) in completed {
            if let Some(w) = waiter {
                let _ = w.send(Ok(id));
            }
        }
        if let Some(e) = fail {
            self.fail(e);
        } else if start_change {
            let this = self.clone();
            self.ctx
                .client
                .runtime
                .spawn(async move { this.change_ensemble().await });
        }
    }

    /// Fails the handle: pending adds get `error`, later adds too.
    pub(crate) fn fail(&self, error: BkError) {
        let waiters: Vec<_> = {
            let mut st = self.state.lock();
            if matches!(st.status, Status::Open) {
                st.status = Status::Failed(error.clone());
            }
            st.changing = false;
            st.held_queue.clear();
            std::mem::take(&mut st.pending)
                .into_values()
                .filter_map(|p| p.waiter)
                .collect()
        };
        if !waiters.is_empty() {
            info!(error = %error, pending = waiters.len(), "write handle failed");
        }
        for w in waiters {
            let _ = w.send(Err(error.clone()));
        }
    }

    /// Seals the ledger at the last add confirmed (BookKeeper's writer close).
    pub(crate) async fn close(&self) -> Result<(), BkError> {
        let (waiters, lac, length) = {
            let mut st = self.state.lock();
            if st.sealed {
                return Ok(());
            }
            if matches!(st.status, Status::Open) {
                st.status = Status::Closed;
            }
            st.changing = false;
            st.held_queue.clear();
            let waiters: Vec<_> = std::mem::take(&mut st.pending)
                .into_values()
                .filter_map(|p| p.waiter)
                .collect();
            (waiters, st.lac, st.length)
        };
        for w in waiters {
            let _ = w.send(Err(self.ctx.error(
                BkErrorKind::LedgerClosed,
                "the handle was closed before this add was acknowledged",
            )));
        }
        self.ctx.check_open()?;
        let (mut record, mut version) = {
            let st = self.state.lock();
            (st.record.clone(), st.version)
        };
        loop {
            match record.state {
                LedgerState::Closed => {
                    if record.last_entry_id == lac && record.length == length {
                        let mut st = self.state.lock();
                        st.record = record;
                        st.version = version;
                        st.sealed = true;
                        return Ok(());
                    }
                    return Err(self.ctx.error(
                        BkErrorKind::LedgerFenced,
                        format!(
                            "the ledger was sealed by another client at entry {} ({} bytes), \
                             not at this writer's last add confirmed {lac} ({length} bytes)",
                            record.last_entry_id, record.length
                        ),
                    ));
                }
                LedgerState::InRecovery => {
                    return Err(self.ctx.error(
                        BkErrorKind::LedgerFenced,
                        "another client is recovering the ledger; it decides where the ledger ends",
                    ))
                }
                LedgerState::Open => {
                    let mut sealed = record.clone();
                    sealed.state = LedgerState::Closed;
                    sealed.last_entry_id = lac;
                    sealed.length = length;
                    match self.ctx.client.meta.write(&sealed, version).await {
                        Ok(v) => {
                            let mut st = self.state.lock();
                            st.record = sealed;
                            st.version = v;
                            st.sealed = true;
                            return Ok(());
                        }
                        Err(WriteError::Conflict) => {
                            (record, version) = self
                                .ctx
                                .client
                                .meta
                                .read_existing(self.ctx.ledger_id)
                                .await?;
                        }
                        Err(WriteError::Failed(e)) => return Err(e),
                    }
                }
            }
        }
    }

    pub(super) fn metadata(&self) -> LedgerMetadata {
        self.state
            .lock()
            .record
            .to_metadata(self.ctx.digest.digest_type())
    }
}
