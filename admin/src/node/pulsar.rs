//! The Pulsar routing verbs of a node: the routing table the lookup proxies
//! follow, in this node's metadata store, and topic moves between Pulsar
//! clusters, driven by this node.

use std::sync::Arc;

use bkswitch_topic_routes::{Change, ProxyAck, PulsarCluster, RoutingTable, TopicRoutes};
use bkswitch_topic_switch::{Plan, SwitchError, SwitchOptions, SwitchRecord, TopicSwitcher};

use super::Node;

impl Node {
    /// The routing table the lookup proxies follow, in this node's metadata
    /// store.
    pub fn pulsar_routes(&self) -> TopicRoutes {
        TopicRoutes::new(Arc::clone(&self.inner.config.store))
    }

    /// The topic-move coordinator of this node (its lease carries the node
    /// id).
    pub fn topic_switcher(&self) -> TopicSwitcher {
        TopicSwitcher::new(
            Arc::clone(&self.inner.config.store),
            self.pulsar_routes(),
            &self.inner.config.node_id,
        )
    }

    /// The routing table.
    ///
    /// # Errors
    /// The table's errors ([`bkswitch_topic_routes::RoutesError`]).
    pub async fn pulsar_table(&self) -> bkswitch_topic_routes::Result<RoutingTable> {
        self.pulsar_routes().table().await
    }

    /// Registers a Pulsar cluster, or replaces its URLs when it exists.
    ///
    /// # Errors
    /// Bad names or URLs (nothing written), the store's errors.
    pub async fn put_pulsar_cluster(
        &self,
        cluster: PulsarCluster,
    ) -> bkswitch_topic_routes::Result<RoutingTable> {
        let routes = self.pulsar_routes();
        let exists = routes.table().await?.clusters.contains_key(&cluster.name);
        let change = if exists {
            Change::UpdateCluster(cluster)
        } else {
            Change::RegisterCluster(cluster)
        };
        routes.apply(&[change]).await
    }

    /// The live lookup proxies and the table version each serves.
    ///
    /// # Errors
    /// The store's errors.
    pub async fn pulsar_proxies(
        &self,
    ) -> bkswitch_topic_routes::Result<std::collections::BTreeMap<String, ProxyAck>> {
        self.pulsar_routes().acks().await
    }

    /// Starts a topic move (precheck first: refused with nothing written)
    /// and drives it on this node in the background.
    ///
    /// # Errors
    /// [`SwitchError`]: refused by the precheck, another move running, bad
    /// input.
    pub async fn start_topic_switch(
        &self,
        id: &str,
        plan: Plan,
        options: SwitchOptions,
    ) -> Result<SwitchRecord, SwitchError> {
        let record = self.topic_switcher().start(id, plan, options).await?;
        self.drive_topic_switch();
        Ok(record)
    }

    /// Asks for the rollback of the topic move, and drives it here unless
    /// another coordinator holds the move.
    ///
    /// # Errors
    /// As [`TopicSwitcher::rollback`].
    pub async fn rollback_topic_switch(&self) -> Result<SwitchRecord, SwitchError> {
        let record = self.topic_switcher().rollback().await?;
        self.drive_topic_switch();
        Ok(record)
    }

    /// Aborts the topic move before any client moved.
    ///
    /// # Errors
    /// As [`TopicSwitcher::abort`].
    pub async fn abort_topic_switch(&self) -> Result<SwitchRecord, SwitchError> {
        let record = self.topic_switcher().abort().await?;
        self.drive_topic_switch();
        Ok(record)
    }

    /// Drives the topic move in a background task of this node (a no-op
    /// when another coordinator holds its lease).
    fn drive_topic_switch(&self) {
        let switcher = self.topic_switcher();
        let task = tokio::spawn(async move {
            match switcher.run().await {
                Ok(rec) => tracing::info!(id = %rec.id, state = ?rec.state, "topic move finished"),
                Err(SwitchError::LeaseHeld { owner }) => {
                    tracing::info!(%owner, "topic move driven elsewhere")
                }
                Err(e) => tracing::warn!(error = %e, "topic move stopped"),
            }
        });
        self.inner.tasks.lock().push(task);
    }
}
