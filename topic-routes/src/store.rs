//! The routing table in the metadata store, and the proxies'
//! acknowledgements.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MetadataStore};
use serde::{Deserialize, Serialize};

use crate::error::{Result, RoutesError};
use crate::layout::{node_name, node_version, shard_of, split, Head, Layout};
use crate::names::validate_proxy_id;
use crate::table::{Change, PulsarCluster, RoutingTable};

/// Default root of the routing metadata in the broker metadata store.
pub const DEFAULT_ROOT: &str = "/admin/pulsar-routes";

/// Compare-and-set attempts before [`RoutesError::Conflict`].
pub const MAX_CAS_ATTEMPTS: usize = 16;

const ACK_POLL: Duration = Duration::from_millis(20);

/// `<root>/acks/<proxy>` = `{"version","ackedAt"}`: the table version a proxy
/// applied. Ephemeral: it ends with the proxy's session, so that only live
/// proxies hold a barrier up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyAck {
    /// The routing-table version the proxy serves.
    pub version: u64,
    /// When it said so, milliseconds since the Unix epoch.
    pub acked_at: i64,
}

/// Pulsar clusters and topic routes on any [`MetadataStore`].
///
/// The table's head, `<root>/table`, is written only with compare-and-set:
/// a change is validated against the table it replaces, so a route can
/// never point to an unregistered cluster and a cluster a route uses can
/// never be unregistered, whatever runs concurrently. A refused change
/// writes nothing. A small table lies whole in the head; a large one is
/// sharded over immutable nodes the head names ([`Layout`]; the layout is
/// described in `docs/FORMATS.md`), so a table holds millions of routes and
/// a change rewrites only the shards it touches.
#[derive(Debug, Clone)]
pub struct TopicRoutes {
    store: Arc<dyn MetadataStore>,
    root: String,
    layout: Layout,
}

/// `value`'s JSON, for the node at `path`.
fn encode<T: Serialize>(path: &str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| RoutesError::Corrupt {
        path: path.to_owned(),
        reason: format!("cannot encode: {e}"),
    })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

impl TopicRoutes {
    /// The routes under [`DEFAULT_ROOT`].
    pub fn new(store: Arc<dyn MetadataStore>) -> TopicRoutes {
        TopicRoutes {
            store,
            root: DEFAULT_ROOT.to_owned(),
            layout: Layout::default(),
        }
    }

    /// The same routes, written with `layout` (when a table is sharded and
    /// into how many shards). Readers need no setting: the head says how
    /// its table lies.
    pub fn with_layout(mut self, layout: Layout) -> TopicRoutes {
        self.layout = layout;
        self
    }

    /// The routes under `root` (an absolute path without trailing `/`).
    ///
    /// # Errors
    /// [`RoutesError::Metadata`] with [`ErrorKind::InvalidPath`] for a bad root.
    pub fn with_root(store: Arc<dyn MetadataStore>, root: &str) -> Result<TopicRoutes> {
        bkswitch_metadata_store::validate_path(
            bkswitch_metadata_store::Operation::Put,
            root,
            bkswitch_metadata_store::PathUse::Write,
        )?;
        Ok(TopicRoutes {
            store,
            root: root.to_owned(),
            layout: Layout::default(),
        })
    }

    /// The root.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The path of the table's head (the node to watch: every change
    /// writes it).
    pub fn table_path(&self) -> String {
        format!("{}/table", self.root)
    }

    /// The folder of a sharded table's shard nodes.
    pub fn shards_path(&self) -> String {
        format!("{}/shards", self.root)
    }

    fn acks_path(&self) -> String {
        format!("{}/acks", self.root)
    }

    /// The table and its head's node version (`None`: not written yet, the
    /// table is empty at version 0).
    ///
    /// # Errors
    /// [`RoutesError::Corrupt`] for an unreadable table, [`RoutesError::Metadata`].
    pub async fn read(&self) -> Result<(RoutingTable, Option<i64>)> {
        let (table, version, _) = self.read_head_and_table().await?;
        Ok((table, version))
    }

    /// The table, its head's node version and the head as stored.
    async fn read_head_and_table(&self) -> Result<(RoutingTable, Option<i64>, Head)> {
        let path = self.table_path();
        let corrupt = |path: &str, reason: String| RoutesError::Corrupt {
            path: path.to_owned(),
            reason,
        };
        // A shard node deleted under a reader means a newer head: read
        // again (a few times; a head that names a node that is gone while
        // the head stays the same is corrupt).
        let mut attempts = 0;
        'again: loop {
            attempts += 1;
            let Some(r) = self.store.get(&path).await? else {
                return Ok((RoutingTable::default(), None, Head::default()));
            };
            let head: Head = serde_json::from_slice(&r.value)
                .map_err(|e| corrupt(&path, format!("not the expected JSON: {e}")))?;
            let routes = match (&head.routes, head.shards) {
                (Some(routes), None) => routes.clone(),
                (None, Some(shards)) if shards > 0 => {
                    let reads = head.shard_nodes.iter().map(|(&shard, name)| {
                        let node = format!("{}/{name}", self.shards_path());
                        async move { (shard, node.clone(), self.store.get(&node).await) }
                    });
                    let mut routes = BTreeMap::new();
                    for (shard, node, got) in futures::future::join_all(reads).await {
                        let Some(got) = got? else {
                            let now = self.store.exists(&path).await?;
                            if attempts < 8 && now.is_some_and(|st| st.version != r.stat.version) {
                                continue 'again;
                            }
                            return Err(corrupt(
                                &path,
                                format!(
                                    "version {} names shard node {node}, which is missing",
                                    head.version
                                ),
                            ));
                        };
                        let part: BTreeMap<String, String> = serde_json::from_slice(&got.value)
                            .map_err(|e| corrupt(&node, format!("not the expected JSON: {e}")))?;
                        if let Some(route) = part.keys().find(|k| shard_of(k, shards) != shard) {
                            return Err(corrupt(
                                &node,
                                format!(
                                    "route `{route}` does not belong to shard {shard} of {shards}"
                                ),
                            ));
                        }
                        routes.extend(part);
                    }
                    routes
                }
                _ => {
                    return Err(corrupt(
                        &path,
                        "neither a whole table (`routes`) nor a sharded one (`shards` > 0)"
                            .to_owned(),
                    ))
                }
            };
            let table = RoutingTable {
                version: head.version,
                clusters: head.clusters.clone(),
                routes,
            };
            table.check().map_err(|e| corrupt(&path, e.to_string()))?;
            return Ok((table, Some(r.stat.version), head));
        }
    }

    /// The current table.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn table(&self) -> Result<RoutingTable> {
        Ok(self.read().await?.0)
    }

    /// Applies `changes` all or nothing, with compare-and-set (retried when
    /// another writer won), and returns the new table.
    ///
    /// # Errors
    /// The first change refused (nothing written), [`RoutesError::Conflict`]
    /// after [`MAX_CAS_ATTEMPTS`], [`RoutesError::Metadata`].
    pub async fn apply(&self, changes: &[Change]) -> Result<RoutingTable> {
        let path = self.table_path();
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (table, version, head) = self.read_head_and_table().await?;
            let next = table.apply(changes)?;
            let (next_head, created) = self.stage(&table, &head, &next).await?;
            let bytes = encode(&path, &next_head)?;
            let expected = version.map_or(ExpectedVersion::NotExists, ExpectedVersion::Exactly);
            match self.store.put_version(&path, &bytes, expected).await {
                Ok(_) => {
                    self.collect(&head, &next_head).await;
                    return Ok(next);
                }
                Err(e) if e.is_conflict() => {
                    self.discard(&created).await;
                    continue;
                }
                Err(e) => {
                    if self.settle_lost_write(&path, &bytes, version).await {
                        self.collect(&head, &next_head).await;
                        return Ok(next);
                    }
                    return Err(e.into());
                }
            }
        }
        Err(RoutesError::Conflict {
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// The head of `next` (replacing `table`, stored as `head`), and the
    /// shard nodes created for it: `next` whole when it fits the layout's
    /// inline limit, else sharded, each shard whose routes did not change
    /// keeping its node.
    async fn stage(
        &self,
        table: &RoutingTable,
        head: &Head,
        next: &RoutingTable,
    ) -> Result<(Head, Vec<String>)> {
        // The routes' JSON is at least their bytes plus six per route
        // (four quotes, a colon, a comma): a table plainly past the
        // limit is not encoded whole only to be measured.
        let at_least: usize = next.routes.iter().map(|(k, c)| k.len() + c.len() + 6).sum();
        if at_least <= self.layout.inline_limit {
            let whole = Head::inline(next);
            if encode(&self.table_path(), &whole)?.len() <= self.layout.inline_limit {
                return Ok((whole, Vec::new()));
            }
        }
        let shards = head.shards.unwrap_or(self.layout.shards).max(1);
        let before = match head.shards {
            Some(_) => split(&table.routes, shards),
            None => BTreeMap::new(),
        };
        let mut shard_nodes = BTreeMap::new();
        let mut created = Vec::new();
        for (shard, routes) in split(&next.routes, shards) {
            if let (Some(old), Some(name)) = (before.get(&shard), head.shard_nodes.get(&shard)) {
                if *old == routes {
                    shard_nodes.insert(shard, name.clone());
                    continue;
                }
            }
            let name = node_name(shard, next.version);
            let node = format!("{}/{name}", self.shards_path());
            let bytes = encode(&node, &routes)?;
            if bytes.len() > bkswitch_metadata_store::MAX_VALUE_LEN {
                self.discard(&created).await;
                return Err(RoutesError::TableFull {
                    shard,
                    shards,
                    bytes: bytes.len(),
                    limit: bkswitch_metadata_store::MAX_VALUE_LEN,
                });
            }
            if let Err(e) = self
                .store
                .put(&node, &bytes, ExpectedVersion::NotExists)
                .await
            {
                self.discard(&created).await;
                return Err(e.into());
            }
            created.push(name.clone());
            shard_nodes.insert(shard, name);
        }
        Ok((
            Head {
                version: next.version,
                clusters: next.clusters.clone(),
                routes: None,
                shards: Some(shards),
                shard_nodes,
            },
            created,
        ))
    }

    /// Deletes shard nodes a failed write created (best effort: what is
    /// left is collected by a later write).
    async fn discard(&self, created: &[String]) {
        for name in created {
            let node = format!("{}/{name}", self.shards_path());
            let _ = self.store.delete(&node, ExpectedVersion::Any).await;
        }
    }

    /// After `next` replaced `prev`: deletes the shard nodes no head names
    /// any more, and those a failed or crashed writer left behind (written
    /// for a version not above `next`'s, so no write still under way can
    /// use them). Best effort: a node left is collected by a later write.
    async fn collect(&self, prev: &Head, next: &Head) {
        let named: std::collections::BTreeSet<&String> = next.shard_nodes.values().collect();
        let mut gone: Vec<String> = prev
            .shard_nodes
            .values()
            .filter(|n| !named.contains(n))
            .cloned()
            .collect();
        if let Ok(children) = self.store.children(&self.shards_path()).await {
            gone.extend(children.into_iter().filter(|c| {
                !named.contains(c) && node_version(c).is_some_and(|v| v <= next.version)
            }));
        }
        gone.sort();
        gone.dedup();
        self.discard(&gone).await;
    }

    /// After a write whose answer was lost: `true` if it landed; if it did
    /// not, it is fenced (the stored value written back at the version the
    /// lost write expects) so that it can never land after the caller was
    /// told it failed.
    async fn settle_lost_write(&self, path: &str, bytes: &[u8], version: Option<i64>) -> bool {
        match (version, self.store.get(path).await) {
            (Some(v), Ok(Some(r))) if r.stat.version == v + 1 && r.value == bytes => true,
            (Some(v), Ok(Some(r))) if r.stat.version == v => {
                let _ = self
                    .store
                    .put_version(path, &r.value, ExpectedVersion::Exactly(v))
                    .await;
                false
            }
            (None, Ok(Some(r))) if r.stat.version == 0 && r.value == bytes => true,
            _ => false,
        }
    }

    /// Registers a cluster.
    ///
    /// # Errors
    /// [`RoutesError::ClusterExists`], [`RoutesError::InvalidClusterName`],
    /// [`RoutesError::InvalidUrl`], and those of [`apply`](Self::apply).
    pub async fn register_cluster(&self, cluster: PulsarCluster) -> Result<RoutingTable> {
        self.apply(&[Change::RegisterCluster(cluster)]).await
    }

    /// Unregisters a cluster that no route uses.
    ///
    /// # Errors
    /// [`RoutesError::UnknownCluster`], [`RoutesError::ClusterInUse`], and
    /// those of [`apply`](Self::apply).
    pub async fn unregister_cluster(&self, name: &str) -> Result<RoutingTable> {
        self.apply(&[Change::UnregisterCluster(name.to_owned())])
            .await
    }

    /// Sets a route (given in its canonical form, e.g. `namespace:t/ns`) to a
    /// registered cluster.
    ///
    /// # Errors
    /// [`RoutesError::InvalidRoute`], [`RoutesError::RouteToUnknownCluster`],
    /// and those of [`apply`](Self::apply).
    pub async fn set_route(&self, route: &str, cluster: &str) -> Result<RoutingTable> {
        self.apply(&[Change::SetRoute(route.parse()?, cluster.to_owned())])
            .await
    }

    /// Removes a route.
    ///
    /// # Errors
    /// [`RoutesError::InvalidRoute`], [`RoutesError::UnknownRoute`], and those
    /// of [`apply`](Self::apply).
    pub async fn remove_route(&self, route: &str) -> Result<RoutingTable> {
        self.apply(&[Change::RemoveRoute(route.parse()?)]).await
    }

    /// Records that proxy `proxy_id` serves table `version` (an ephemeral
    /// node of this store's session).
    ///
    /// # Errors
    /// [`RoutesError::InvalidProxyId`], [`RoutesError::Metadata`].
    pub async fn ack(&self, proxy_id: &str, version: u64) -> Result<()> {
        validate_proxy_id(proxy_id)?;
        let path = format!("{}/{proxy_id}", self.acks_path());
        let ack = ProxyAck {
            version,
            acked_at: now_ms(),
        };
        let bytes = serde_json::to_vec(&ack).map_err(|e| RoutesError::Corrupt {
            path: path.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        match self
            .store
            .create(&path, &bytes, CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                self.store.put(&path, &bytes, ExpectedVersion::Any).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Withdraws proxy `proxy_id`'s acknowledgement (a proxy that stops
    /// serving holds no barrier up); absent already is fine.
    ///
    /// # Errors
    /// [`RoutesError::InvalidProxyId`], [`RoutesError::Metadata`].
    pub async fn withdraw(&self, proxy_id: &str) -> Result<()> {
        validate_proxy_id(proxy_id)?;
        let path = format!("{}/{proxy_id}", self.acks_path());
        match self.store.delete(&path, ExpectedVersion::Any).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The acknowledgement of every live proxy, by proxy id.
    ///
    /// # Errors
    /// [`RoutesError::Corrupt`], [`RoutesError::Metadata`].
    pub async fn acks(&self) -> Result<BTreeMap<String, ProxyAck>> {
        let mut out = BTreeMap::new();
        for proxy in self.store.children(&self.acks_path()).await? {
            let path = format!("{}/{proxy}", self.acks_path());
            if let Some(r) = self.store.get(&path).await? {
                let ack = serde_json::from_slice(&r.value).map_err(|e| RoutesError::Corrupt {
                    path,
                    reason: format!("not the expected JSON: {e}"),
                })?;
                out.insert(proxy, ack);
            }
        }
        Ok(out)
    }

    /// The live proxies that have not acknowledged `version` yet, with the
    /// version each serves.
    ///
    /// # Errors
    /// As [`acks`](Self::acks).
    pub async fn lagging(&self, version: u64) -> Result<Vec<(String, u64)>> {
        Ok(self
            .acks()
            .await?
            .into_iter()
            .filter(|(_, a)| a.version < version)
            .map(|(p, a)| (p, a.version))
            .collect())
    }

    /// Waits until every live proxy serves `version` or later (a barrier of a
    /// topic move).
    ///
    /// # Errors
    /// [`RoutesError::NotAcknowledged`] naming the proxies still behind at
    /// `timeout`, and those of [`acks`](Self::acks).
    pub async fn wait_acknowledged(&self, version: u64, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let lagging = self.lagging(version).await?;
            if lagging.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(RoutesError::NotAcknowledged { version, lagging });
            }
            tokio::time::sleep(ACK_POLL).await;
        }
    }
}
