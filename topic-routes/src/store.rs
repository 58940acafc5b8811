//! The routing table in the metadata store, and the proxies'
//! acknowledgements.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MetadataStore};
use serde::{Deserialize, Serialize};

use crate::error::{Result, RoutesError};
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
/// The whole table is one node, `<root>/table`, written only with
/// compare-and-set: a change is validated against the table it replaces,
/// so a route can never point to an unregistered cluster and a cluster a
/// route uses can never be unregistered, whatever runs concurrently. A
/// refused change writes nothing. The table's size is bounded by the
/// store's largest value
/// ([`MAX_VALUE_LEN`](bkswitch_metadata_store::MAX_VALUE_LEN), about
/// 10,000 routes).
#[derive(Debug, Clone)]
pub struct TopicRoutes {
    store: Arc<dyn MetadataStore>,
    root: String,
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
        }
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
        })
    }

    /// The root.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The path of the table node.
    pub fn table_path(&self) -> String {
        format!("{}/table", self.root)
    }

    fn acks_path(&self) -> String {
        format!("{}/acks", self.root)
    }

    /// The table and its node version (`None`: not written yet, the table
    /// is empty at version 0).
    ///
    /// # Errors
    /// [`RoutesError::Corrupt`] for an unreadable table, [`RoutesError::Metadata`].
    pub async fn read(&self) -> Result<(RoutingTable, Option<i64>)> {
        let path = self.table_path();
        let Some(r) = self.store.get(&path).await? else {
            return Ok((RoutingTable::default(), None));
        };
        let table: RoutingTable =
            serde_json::from_slice(&r.value).map_err(|e| RoutesError::Corrupt {
                path: path.clone(),
                reason: format!("not the expected JSON: {e}"),
            })?;
        table.check().map_err(|e| RoutesError::Corrupt {
            path,
            reason: e.to_string(),
        })?;
        Ok((table, Some(r.stat.version)))
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
            let (table, version) = self.read().await?;
            let next = table.apply(changes)?;
            let bytes = serde_json::to_vec(&next).map_err(|e| RoutesError::Corrupt {
                path: path.clone(),
                reason: format!("cannot encode: {e}"),
            })?;
            let expected = version.map_or(ExpectedVersion::NotExists, ExpectedVersion::Exactly);
            match self.store.put_version(&path, &bytes, expected).await {
                Ok(_) => return Ok(next),
                Err(e) if e.is_conflict() => continue,
                Err(e) => {
                    if self.settle_lost_write(&path, &bytes, version).await {
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
