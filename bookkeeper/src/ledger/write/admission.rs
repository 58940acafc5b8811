//! Letting adds through: the client's and the connections' budgets of add
//! bytes in flight, Java's `throttle`, and the task that releases held adds.

use super::*;

impl WriterShared {
    /// The bytes entry `entry` of `len` payload bytes takes from the budgets,
    /// and the bookies of its write set in the current ensemble (sorted, the
    /// order their budgets are taken in).
    pub(super) fn admission_needs(
        &self,
        st: &WriteState,
        entry: EntryId,
        len: usize,
    ) -> (u32, Vec<String>) {
        let ensemble = &st.record.last_ensemble().bookies;
        let mut bookies: Vec<String> =
            write_set(entry, st.record.ensemble_size, st.record.write_quorum_size)
                .into_iter()
                .map(|i| ensemble[i].clone())
                .collect();
        bookies.sort();
        bookies.dedup();
        (self.ctx.client.add_budget.cost(len), bookies)
    }

    /// Takes the budgets at once, or nothing.
    pub(super) fn try_admit(&self, cost: u32, bookies: &[String]) -> Option<Admission> {
        let client = self
            .ctx
            .client
            .add_budget
            .semaphore
            .clone()
            .try_acquire_many_owned(cost)
            .ok()?;
        let mut conns = Vec::with_capacity(bookies.len());
        for b in bookies {
            let budget = self.ctx.client.conn_budget(b);
            let permit = budget
                .semaphore
                .clone()
                .try_acquire_many_owned(budget.clamp(cost))
                .ok()?;
            conns.push((b.clone(), permit));
        }
        Some(Admission { client, conns })
    }

    pub(super) fn add(
        self: &Arc<Self>,
        entry: Option<EntryId>,
        data: Bytes,
    ) -> BoxFuture<'static, Result<EntryId, BkError>> {
        let ready = |r| futures::future::ready(r).boxed();
        if let Err(e) = self.ctx.check_open() {
            return ready(Err(e));
        }
        match (self.mode, entry) {
            (Mode::Adv, None) => {
                return ready(Err(self.ctx.error(
                    BkErrorKind::IllegalOp,
                    "add_entry on a handle from create_ledger_adv; use add_entry_at",
                )))
            }
            (Mode::Normal, Some(_)) => {
                return ready(Err(self.ctx.error(
                    BkErrorKind::IllegalOp,
                    "add_entry_at on a handle from create_ledger; use add_entry",
                )))
            }
            _ => {}
        }
        if let Some(e) = self.too_large(data.len()) {
            return ready(Err(e));
        }
        let (tx, rx) = oneshot::channel();
        let (sends, start_release) = {
            let mut st = self.state.lock();
            let entry = match entry {
                Some(id) => {
                    // A negative id is at or below any LAC: -22, as LedgerHandleAdv.
                    if id <= st.lac || st.pending.contains_key(&id) {
                        return ready(Err(self.ctx.error(
                            BkErrorKind::DuplicateEntryId,
                            format!(
                                "entry {id} is at or below the last add confirmed {} or already pending",
                                st.lac
                            ),
                        )));
                    }
                    if let Some(e) = Self::status_error(&st, &self.ctx) {
                        return ready(Err(e));
                    }
                    id
                }
                None => {
                    if let Some(e) = Self::status_error(&st, &self.ctx) {
                        return ready(Err(e));
                    }
                    let id = st.next_entry;
                    st.next_entry += 1;
                    id
                }
            };
            // Admission: the throttle's next slot and the budgets of bytes in
            // flight (the client's and its write set's connections'), taken
            // now when they are free and nothing waits before this entry; else
            // the entry waits in `held_queue` (its id taken, in order) for the
            // writer's release task.
            let admission = if st.held_queue.is_empty() && self.throttle_ready() {
                let (cost, bookies) = self.admission_needs(&st, entry, data.len());
                let admission = self.try_admit(cost, &bookies);
                if admission.is_some() {
                    self.throttle_take();
                }
                admission
            } else {
                None
            };
            st.pushed_length += data.len() as u64;
            let header_length = st.pushed_length;
            let sends = self.enqueue(&mut st, entry, data, header_length, Some(tx), admission);
            let start_release = !st.held_queue.is_empty() && !st.releasing;
            if start_release {
                st.releasing = true;
            }
            (sends, start_release)
        };
        self.dispatch(sends);
        if start_release {
            let this = self.clone();
            self.ctx
                .client
                .runtime
                .spawn(async move { this.release_task().await });
        }
        let ctx = self.ctx.clone();
        async move {
            rx.await.unwrap_or_else(|_| {
                Err(ctx.error(BkErrorKind::Other, "the add was dropped without an answer"))
            })
        }
        .boxed()
    }

    pub(super) fn throttle_ready(&self) -> bool {
        self.throttle
            .as_ref()
            .is_none_or(|t| t.lock().wait(Instant::now()).is_zero())
    }

    pub(super) fn throttle_take(&self) {
        if let Some(t) = &self.throttle {
            t.lock().take(Instant::now());
        }
    }

    /// Lets the held entries through, in call order, as the throttle and the
    /// budgets allow; ends when none is left (or the handle failed or closed).
    pub(super) async fn release_task(self: Arc<Self>) {
        loop {
            let next = {
                let mut st = self.state.lock();
                loop {
                    match st.held_queue.front().copied() {
                        None => {
                            st.releasing = false;
                            break None;
                        }
                        Some(entry) => match st.pending.get(&entry).and_then(|p| p.held.as_ref()) {
                            Some(payload) => {
                                let len = payload.len();
                                break Some((entry, self.admission_needs(&st, entry, len)));
                            }
                            // Failed or closed meanwhile.
                            None => {
                                st.held_queue.pop_front();
                            }
                        },
                    }
                }
            };
            let Some((entry, (cost, bookies))) = next else {
                return;
            };
            if let Some(t) = &self.throttle {
                let wait = t.lock().take(Instant::now());
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
            let client = match self
                .ctx
                .client
                .add_budget
                .semaphore
                .clone()
                .acquire_many_owned(cost)
                .await
            {
                Ok(p) => p,
                Err(_) => {
                    // Closed with the client.
                    self.state.lock().releasing = false;
                    self.fail(
                        self.ctx
                            .error(BkErrorKind::ClientClosed, "the client was closed"),
                    );
                    return;
                }
            };
            let mut conns = Vec::with_capacity(bookies.len());
            for b in &bookies {
                let budget = self.ctx.client.conn_budget(b);
                let Ok(p) = budget
                    .semaphore
                    .clone()
                    .acquire_many_owned(budget.clamp(cost))
                    .await
                else {
                    self.state.lock().releasing = false;
                    return;
                };
                conns.push((b.clone(), p));
            }
            self.release_held(entry, Admission { client, conns });
        }
    }

    /// Re-writes a recovered entry (recovery mode), keeping its length.
    pub(crate) fn add_recovered(
        self: &Arc<Self>,
        entry: EntryId,
        payload: Bytes,
        header_length: u64,
    ) -> BoxFuture<'static, Result<EntryId, BkError>> {
        debug_assert_eq!(self.mode, Mode::Recovery);
        let (tx, rx) = oneshot::channel();
        let sends = {
            let mut st = self.state.lock();
            if let Some(e) = Self::status_error(&st, &self.ctx) {
                return futures::future::ready(Err(e)).boxed();
            }
            self.enqueue(&mut st, entry, payload, header_length, Some(tx), None)
        };
        self.dispatch(sends);
        let ctx = self.ctx.clone();
        async move {
            rx.await.unwrap_or_else(|_| {
                Err(ctx.error(BkErrorKind::Other, "the recovery add was dropped"))
            })
        }
        .boxed()
    }

    /// Sends the first held entry, now admitted (unless it was failed, closed
    /// or an ensemble change will send it).
    pub(super) fn release_held(self: &Arc<Self>, entry: EntryId, admission: Admission) {
        let sends = {
            let mut st = self.state.lock();
            if st.held_queue.front() == Some(&entry) {
                st.held_queue.pop_front();
            }
            let (lac, changing) = (st.lac, st.changing);
            let Some(p) = st.pending.get(&entry) else {
                return;
            };
            let frame = match &p.held {
                Some(payload) => self.frame(lac, entry, payload, p.header_length),
                None => return,
            };
            let st = &mut *st;
            let p = st.pending.get_mut(&entry).expect("just seen");
            p.permit = Some(admission.client);
            p.conn_permits = admission.conns;
            p.held = None;
            p.frame = frame;
            if changing || p.sent {
                return;
            }
            p.sent = true;
            sends_for(&st.record, entry, p, None)
        };
        self.dispatch(sends);
    }
}

/// Java's `throttle` (Guava's `RateLimiter` in `LedgerHandle`): adds per second
/// of one handle, with up to one second of unused slots saved for a burst.
pub(super) struct RateLimiter {
    interval: Duration,
    /// When the next slot is free.
    next_free: Instant,
    /// Slots saved while idle, at most `max_stored`.
    stored: f64,
    max_stored: f64,
}

impl RateLimiter {
    pub(super) fn new(per_second: u32) -> RateLimiter {
        RateLimiter {
            interval: Duration::from_secs(1) / per_second.max(1),
            next_free: Instant::now(),
            stored: 0.0,
            max_stored: f64::from(per_second.max(1)),
        }
    }

    fn resync(&mut self, now: Instant) {
        if now > self.next_free {
            let idle = (now - self.next_free).as_secs_f64() / self.interval.as_secs_f64();
            self.stored = (self.stored + idle).min(self.max_stored);
            self.next_free = now;
        }
    }

    /// How long an add asked for `now` would wait.
    pub(super) fn wait(&mut self, now: Instant) -> Duration {
        self.resync(now);
        if self.stored >= 1.0 {
            Duration::ZERO
        } else {
            self.next_free.saturating_duration_since(now)
        }
    }

    /// Takes the next slot: how long to wait for it.
    pub(super) fn take(&mut self, now: Instant) -> Duration {
        self.resync(now);
        let wait = self.next_free.saturating_duration_since(now);
        if self.stored >= 1.0 {
            self.stored -= 1.0;
        } else {
            self.next_free += self.interval;
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limiter_spaces_slots_and_saves_at_most_a_second() {
        let mut r = RateLimiter::new(10);
        let t0 = r.next_free;
        // Fresh: the first slot is free, the next ones 100 ms apart.
        assert_eq!(r.take(t0), Duration::ZERO);
        assert_eq!(r.take(t0), Duration::from_millis(100));
        assert_eq!(r.take(t0), Duration::from_millis(200));
        assert!(!r.wait(t0).is_zero());
        // Ten idle seconds save one second (10 slots), not ten.
        let later = t0 + Duration::from_secs(10);
        for _ in 0..10 {
            assert_eq!(r.take(later), Duration::ZERO);
        }
        assert_eq!(r.take(later), Duration::ZERO);
        assert_eq!(r.take(later), Duration::from_millis(100));
    }
}
