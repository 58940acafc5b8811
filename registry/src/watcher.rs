//! The config watcher ([design §3](bkswitch_docs::design)): every node follows the registry and the switch
//! directive.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bkswitch_metadata_store::{ErrorKind, Notification, SessionEvent};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

use crate::error::{RegistryError, Result};
use crate::model::{ClusterRecord, SwitchDirective};
use crate::registry::Registry;

/// Pause before reading the registry again after a failed read.
pub const WATCH_RETRY_DELAY: Duration = Duration::from_millis(200);

/// A change of the registry seen by a [`RegistryWatcher`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RegistryEvent {
    /// A cluster record appeared (also reported for every record present when
    /// the watcher starts).
    ClusterAdded(ClusterRecord),
    /// A cluster record changed (its status, URI or extra fields).
    ClusterChanged(ClusterRecord),
    /// A cluster record was deleted; carries the cluster name.
    ClusterRemoved(String),
    /// A switch directive with an epoch newer than every one reported before
    /// (also reported for the directive present when the watcher starts).
    Directive(SwitchDirective),
    /// The per-prefix overrides changed (also reported, when there are any,
    /// when the watcher starts): the whole set, prefix → override.
    Overrides(crate::PrefixOverrides),
    /// The store reconnected or opened a new session and the registry was read
    /// again; the events reported before this one reflect the state read.
    Resynced,
}

/// The stream of [`RegistryEvent`]s of one registry (see [`Registry::watch`]).
///
/// A background task watches the root (cluster records appearing and
/// disappearing), every record, `switch-target` and the `active` marker. On
/// every notification, and after every reconnection or new session of the
/// store, it reads the records and the directive again and reports what differs
/// from what it reported last; notifications of `switch-target` alone (a new
/// directive, the common case) read only the directive, one round trip, so
/// that a switch is seen as soon as the store reports it. A directive is
/// reported only when its epoch is newer than the last reported one: never
/// twice, never an older one.
///
/// The stream ends when the store is closed. Dropping the watcher stops the
/// background task.
#[derive(Debug)]
pub struct RegistryWatcher {
    rx: mpsc::UnboundedReceiver<RegistryEvent>,
    task: JoinHandle<()>,
}

impl RegistryWatcher {
    /// The next event; `None` once the store is closed.
    pub async fn next_event(&mut self) -> Option<RegistryEvent> {
        self.rx.recv().await
    }

    /// An event that is already queued, without waiting.
    pub fn try_next_event(&mut self) -> Option<RegistryEvent> {
        self.rx.try_recv().ok()
    }
}

impl Drop for RegistryWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream for RegistryWatcher {
    type Item = RegistryEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RegistryEvent>> {
        self.rx.poll_recv(cx)
    }
}

impl Registry {
    /// Starts watching the registry. The first events describe the current
    /// state: a [`RegistryEvent::ClusterAdded`] per record, then the current
    /// directive, if any.
    ///
    /// Must be called inside a Tokio runtime (the watcher runs as a task).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Metadata`] when the root, `switch-target` or `active`
    /// cannot be watched, or the first read fails; [`RegistryError::Corrupt`]
    /// for an unreadable record or directive.
    pub async fn watch(&self) -> Result<RegistryWatcher> {
        let (itx, irx) = mpsc::unbounded_channel();
        let mut forwarders = JoinSet::new();
        for path in [
            self.root.clone(),
            self.path("switch-target"),
            self.path("active"),
            self.path("overrides"),
        ] {
            let stream = self.store.watch(&path).await?;
            forwarders.spawn(forward(stream, itx.clone()));
        }
        let mut state = WatchState {
            directive_path: self.path("switch-target"),
            registry: self.clone(),
            itx,
            forwarders,
            record_watches: HashMap::new(),
            records: BTreeMap::new(),
            epoch: None,
            overrides: crate::PrefixOverrides::new(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let first = state.refresh().await?;
        for e in first {
            let _ = tx.send(e);
        }
        let task = tokio::spawn(state.run(irx, tx));
        Ok(RegistryWatcher { rx, task })
    }
}

async fn forward(
    mut stream: bkswitch_metadata_store::WatchStream,
    tx: mpsc::UnboundedSender<Option<Notification>>,
) {
    while let Some(n) = stream.next().await {
        if tx.send(Some(n)).is_err() {
            return;
        }
    }
    // The store was closed: wake the watcher so that it notices.
    let _ = tx.send(None);
}

struct WatchState {
    registry: Registry,
    /// `<root>/switch-target`.
    directive_path: String,
    itx: mpsc::UnboundedSender<Option<Notification>>,
    forwarders: JoinSet<()>,
    record_watches: HashMap<String, AbortHandle>,
    records: BTreeMap<String, ClusterRecord>,
    epoch: Option<i64>,
    /// The overrides last reported (none before the first report).
    overrides: crate::PrefixOverrides,
}

impl WatchState {
    async fn run(
        mut self,
        mut irx: mpsc::UnboundedReceiver<Option<Notification>>,
        tx: mpsc::UnboundedSender<RegistryEvent>,
    ) {
        let mut dirty = false;
        let mut resync = false;
        loop {
            let first = if dirty {
                match tokio::time::timeout(WATCH_RETRY_DELAY, irx.recv()).await {
                    Ok(None) => return,
                    Ok(Some(n)) => n,
                    Err(_) => None,
                }
            } else {
                match irx.recv().await {
                    None => return,
                    Some(n) => n,
                }
            };
            let mut pending = first.into_iter().collect::<Vec<_>>();
            while let Ok(n) = irx.try_recv() {
                pending.extend(n);
            }
            for n in &pending {
                if matches!(
                    n,
                    Notification::Session(
                        SessionEvent::Reconnected | SessionEvent::SessionReestablished
                    )
                ) {
                    resync = true;
                }
            }
            let only_loss = !pending.is_empty()
                && pending.iter().all(|n| {
                    matches!(
                        n,
                        Notification::Session(
                            SessionEvent::ConnectionLost | SessionEvent::SessionExpired
                        )
                    )
                });
            if only_loss && !dirty {
                continue;
            }
            // A change of the directive alone: read the directive only. Every
            // other change (records, the root's children, the `active`
            // marker, sessions) and every retry reads everything.
            let directive_only = !dirty
                && !resync
                && !pending.is_empty()
                && pending.iter().all(|n| self.is_directive_change(n));
            let read = if directive_only {
                self.refresh_directive().await
            } else {
                self.refresh().await
            };
            match read {
                Ok(events) => {
                    dirty = false;
                    for e in events {
                        if tx.send(e).is_err() {
                            return;
                        }
                    }
                    if resync {
                        resync = false;
                        if tx.send(RegistryEvent::Resynced).is_err() {
                            return;
                        }
                    }
                }
                Err(RegistryError::Metadata(e)) if e.kind() == ErrorKind::Closed => return,
                Err(e) => {
                    tracing::debug!(error = %e, "registry watcher: read failed, retrying");
                    dirty = true;
                }
            }
        }
    }

    /// Whether `n` reports a write (or the creation) of the directive.
    fn is_directive_change(&self, n: &Notification) -> bool {
        matches!(
            n,
            Notification::Created { path } | Notification::Modified { path }
                if *path == self.directive_path
        )
    }

    /// Reads the directive alone and returns it if it is newer than the last
    /// one reported. Cluster records are not read: their changes come with
    /// notifications of their own (record watches, the root's children),
    /// which [`refresh`](Self::refresh) handles.
    async fn refresh_directive(&mut self) -> Result<Vec<RegistryEvent>> {
        let directive = self.registry.switch_directive().await?;
        Ok(self.newer(directive).into_iter().collect())
    }

    /// The event of `directive` when its epoch is newer than the last one
    /// reported (and records it as reported).
    fn newer(&mut self, directive: Option<SwitchDirective>) -> Option<RegistryEvent> {
        let d = directive?;
        if self.epoch.is_some_and(|e| d.epoch <= e) {
            return None;
        }
        self.epoch = Some(d.epoch);
        Some(RegistryEvent::Directive(d))
    }

    /// Reads the records and the directive, re-arms the record watches and
    /// returns the differences from the last reported state.
    async fn refresh(&mut self) -> Result<Vec<RegistryEvent>> {
        // Both reads at once. As with one read after the other, a directive
        // naming a cluster registered meanwhile may be reported before that
        // cluster, whose own notification follows (RegistrySync reads such a
        // target's record itself).
        let (list, directive) =
            futures::future::try_join(self.registry.list(), self.registry.switch_directive())
                .await?;
        let mut now = BTreeMap::new();
        for rec in list {
            now.insert(rec.name.clone(), rec);
        }
        // Watch every record (a watch may be armed after the read above; the
        // notification it then misses is covered by the next refresh, which
        // every later change triggers, and by the re-read below).
        let mut armed = false;
        for name in now.keys() {
            if !self.record_watches.contains_key(name) {
                let stream = self.registry.store.watch(&self.registry.path(name)).await?;
                let handle = self.forwarders.spawn(forward(stream, self.itx.clone()));
                self.record_watches.insert(name.clone(), handle);
                armed = true;
            }
        }
        self.record_watches.retain(|name, handle| {
            let keep = now.contains_key(name);
            if !keep {
                handle.abort();
            }
            keep
        });
        if armed {
            // Re-read so that a change between the first read and the arming
            // of a new watch is not lost.
            now = self
                .registry
                .list()
                .await?
                .into_iter()
                .map(|r| (r.name.clone(), r))
                .collect();
        }
        let mut events = Vec::new();
        for (name, rec) in &now {
            match self.records.get(name) {
                None => events.push(RegistryEvent::ClusterAdded(rec.clone())),
                Some(old) if old != rec => events.push(RegistryEvent::ClusterChanged(rec.clone())),
                Some(_) => {}
            }
        }
        for name in self.records.keys() {
            if !now.contains_key(name) {
                events.push(RegistryEvent::ClusterRemoved(name.clone()));
            }
        }
        self.records = now;
        // Overrides after the records: the clusters they name are known.
        let (overrides, _) = self.registry.prefix_overrides().await?;
        if overrides != self.overrides {
            self.overrides = overrides.clone();
            events.push(RegistryEvent::Overrides(overrides));
        }
        events.extend(self.newer(directive));
        Ok(events)
    }
}
