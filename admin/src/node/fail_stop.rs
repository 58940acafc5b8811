//! Fail-stop: a node that finds its id taken by another live node stops
//! claiming anything.
//!
//! Topic ownership and coordinator duties trust the node id (a claim by the
//! same id replaces the previous one). A node whose metadata session ended —
//! an expiry, a process frozen past its session — loses its id registration
//! with the session; a node started meanwhile with the same id takes the id,
//! legitimately: the store's ephemeral node is the only liveness there is.
//! When the first node comes back and finds its id held by a live node, two
//! nodes would claim the same topics and duties; the one that lost its
//! session is the one that gives way. It stops as [`Node::stop`] does, except
//! that it gives up neither its topics' ownership nor the registration: both
//! belong to the node that now holds the id. Its data writes were already
//! fenced by the new owner's recovery opens and its metadata writes by their
//! compare-and-sets; this ends its claims. As ZooKeeper-based brokers do on a
//! session expiry, it does not try to come back by itself: an operator (or
//! the service manager) restarts it, with a unique id.

use bkswitch_mledger_spi::ManagedLedgerStorage;

use super::Node;

impl Node {
    /// Why this node stopped by itself, if it did: its id was taken by
    /// another live node while its metadata session was lost. `None` while
    /// it runs (and after an ordinary [`stop`](Self::stop)). A process that
    /// embeds a node watches it, or [`fail_stopped_watch`](Self::fail_stopped_watch),
    /// and exits.
    pub fn fail_stopped(&self) -> Option<String> {
        self.inner.fail_stopped.borrow().clone()
    }

    /// A watch of [`fail_stopped`](Self::fail_stopped): it changes once, to
    /// the reason, when the node stops by itself.
    pub fn fail_stopped_watch(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.fail_stopped.subscribe()
    }

    /// Stops claiming anything: records `reason`, ends the REST server and
    /// every background duty (the election and the coordinator with them),
    /// closes the open topics without giving their ownership up, stops the
    /// registry sync and closes the clients.
    pub(crate) async fn fail_stop(&self, reason: String) {
        let first = self.inner.fail_stopped.send_if_modified(|r| {
            if r.is_some() {
                return false;
            }
            *r = Some(reason.clone());
            true
        });
        if !first {
            return;
        }
        tracing::error!(
            node = %self.inner.config.node_id,
            reason,
            "this node stops (fail-stop): another live node holds its id; restart it with a \
             unique node id"
        );
        let _ = self.inner.stop.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.inner.tasks.lock());
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        for name in self.inner.topics.list() {
            if let Some(ml) = self.inner.topics.remove(&name) {
                let _ = ml.close().await;
            }
        }
        self.inner.sync.stop().await;
        let _ = self.inner.storage.close().await;
    }
}
