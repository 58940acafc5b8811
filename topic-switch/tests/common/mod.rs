//! Two Pulsar clusters modelled in memory, behind the admin trait: clients
//! that look their topic up again through the routing table when it is
//! unloaded (what real clients do through a lookup proxy), replication
//! backlogs, subscriptions.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_metadata_store::MemoryStore;
use bkswitch_topic_routes::{PulsarCluster, TopicRoutes};
use bkswitch_topic_switch::{
    AdminError, AdminFactory, LedgerEntries, ManagedLedgerIds, Plan, PulsarAdmin, ReplicationStats,
    SubscriptionStats, SwitchOptions, TopicStats,
};
use parking_lot::Mutex;

/// One topic's clients: where they are attached.
#[derive(Debug, Clone)]
pub struct Clients {
    pub cluster: String,
    pub producers: usize,
    /// Subscription → consumers.
    pub consumers: BTreeMap<String, usize>,
    /// Reattaches to this cluster whatever the routes say (a client that
    /// bypasses the proxy).
    pub sticky: Option<String>,
}

#[derive(Debug, Default)]
pub struct Model {
    pub clusters: Vec<String>,
    /// namespace → replication clusters, per cluster.
    pub replication: HashMap<(String, String), Vec<String>>,
    /// (cluster, topic) → partitions.
    pub partitions: HashMap<(String, String), u32>,
    /// (cluster, topic) → subscriptions (name → replicated).
    pub subscriptions: HashMap<(String, String), BTreeMap<String, bool>>,
    /// (cluster, topic) → replication backlog to the other cluster.
    pub backlog: HashMap<(String, String), u64>,
    /// (cluster, topic) whose stats show no replicator once it was unloaded
    /// there (the topic loaded again, its replicators not started yet).
    pub no_replicator: std::collections::HashSet<(String, String)>,
    pub clients: HashMap<String, Clients>,
    /// Unloads that disconnected clients.
    pub unloads: Vec<(String, String)>,
    /// Unloads of a topic nobody was attached to there (rolls of its
    /// ledger), with where its clients were at the time.
    pub rolls: Vec<(String, String, String)>,
    /// (cluster, topic) → the ids of its ledgers, oldest first (every
    /// unload opens a new one, numbered by the cluster's next id).
    pub ledgers: HashMap<(String, String), Vec<u64>>,
    /// cluster → the next ledger id its BookKeeper gives out.
    pub next_ledger: HashMap<String, u64>,
    /// (cluster, topic) whose subscription has not moved past its first
    /// ledger (the replicated state not applied yet).
    pub cursor_behind: std::collections::HashSet<(String, String)>,
    pub down: Vec<String>,
    /// Unloads that would disconnect clients never return (a coordinator
    /// stuck mid-eviction).
    pub hang_unloads: bool,
}

#[derive(Debug, Clone)]
pub struct World {
    pub store: MemoryStore,
    pub routes: TopicRoutes,
    pub model: Arc<Mutex<Model>>,
}

pub fn cluster(name: &str) -> PulsarCluster {
    PulsarCluster {
        name: name.to_owned(),
        service_url: format!("pulsar://{name}.example:6650"),
        service_url_tls: None,
        web_service_url: format!("http://{name}.example:8080"),
        admin_url: format!("http://{name}.example:8080"),
    }
}

pub const NS: &str = "geo/ns";

/// Options with short timeouts, for the in-memory clusters.
pub fn quick() -> SwitchOptions {
    SwitchOptions {
        barrier_timeout_ms: 500,
        evict_timeout_ms: 1_500,
        settle_timeout_ms: 1_000,
        soak_ms: 0,
        max_replication_backlog: 100,
        auto_rollback: true,
    }
}

/// A plan of one batch, `route`, to cluster `b`.
pub fn one(route: &str) -> Plan {
    Plan {
        to: "b".into(),
        batches: vec![vec![route.to_owned()]],
    }
}

pub fn topic(local: &str) -> String {
    format!("persistent://{NS}/{local}")
}

impl World {
    /// Clusters `a` and `b`, namespace `geo/ns` routed to `a` and
    /// replicated both ways; `topics` exist on both with a replicated
    /// subscription `sub`, their producer and consumer on `a`.
    pub async fn new(topics: &[&str]) -> World {
        let store = MemoryStore::new();
        let routes = TopicRoutes::new(Arc::new(store.clone()));
        routes.register_cluster(cluster("a")).await.unwrap();
        routes.register_cluster(cluster("b")).await.unwrap();
        routes
            .set_route(&format!("namespace:{NS}"), "a")
            .await
            .unwrap();
        let mut m = Model {
            clusters: vec!["a".into(), "b".into()],
            ..Model::default()
        };
        for c in ["a", "b"] {
            m.replication
                .insert((c.into(), NS.into()), vec!["a".into(), "b".into()]);
        }
        // Two fresh clusters number their ledgers alike: each topic's
        // ledger has the same id on both.
        for c in ["a", "b"] {
            m.next_ledger.insert(c.into(), 10 + topics.len() as u64);
        }
        for (i, t) in topics.iter().enumerate() {
            let t = topic(t);
            for c in ["a", "b"] {
                m.ledgers.insert((c.into(), t.clone()), vec![10 + i as u64]);
                m.partitions.insert((c.into(), t.clone()), 0);
                m.subscriptions.insert(
                    (c.into(), t.clone()),
                    BTreeMap::from([("sub".into(), true)]),
                );
            }
            m.clients.insert(
                t,
                Clients {
                    cluster: "a".into(),
                    producers: 1,
                    consumers: BTreeMap::from([("sub".into(), 1)]),
                    sticky: None,
                },
            );
        }
        World {
            store,
            routes,
            model: Arc::new(Mutex::new(m)),
        }
    }

    pub fn admins(&self) -> Arc<dyn AdminFactory> {
        Arc::new(self.clone())
    }

    pub fn where_is(&self, t: &str) -> String {
        self.model.lock().clients[&topic(t)].cluster.clone()
    }
}

impl AdminFactory for World {
    fn admin(&self, cluster: &PulsarCluster) -> Arc<dyn PulsarAdmin> {
        Arc::new(Admin {
            name: cluster.name.clone(),
            world: self.clone(),
        })
    }
}

#[derive(Debug)]
pub struct Admin {
    name: String,
    world: World,
}

impl Admin {
    fn check(&self, what: &str) -> Result<(), AdminError> {
        if self.world.model.lock().down.contains(&self.name) {
            return Err(AdminError {
                cluster: self.name.clone(),
                what: what.to_owned(),
                reason: "connection refused".to_owned(),
                status: None,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl PulsarAdmin for Admin {
    async fn ping(&self) -> Result<(), AdminError> {
        self.check("ping")
    }

    async fn replication_clusters(&self, namespace: &str) -> Result<Vec<String>, AdminError> {
        self.check("replication")?;
        Ok(self
            .world
            .model
            .lock()
            .replication
            .get(&(self.name.clone(), namespace.to_owned()))
            .cloned()
            .unwrap_or_default())
    }

    async fn partitions(&self, topic: &str) -> Result<u32, AdminError> {
        self.check("partitions")?;
        Ok(self
            .world
            .model
            .lock()
            .partitions
            .get(&(self.name.clone(), topic.to_owned()))
            .copied()
            .unwrap_or(0))
    }

    async fn stats(&self, topic: &str, _partitions: u32) -> Result<Option<TopicStats>, AdminError> {
        self.check("stats")?;
        let m = self.world.model.lock();
        let key = (self.name.clone(), topic.to_owned());
        let Some(subs) = m.subscriptions.get(&key) else {
            return Ok(None);
        };
        let here = m.clients.get(topic).filter(|c| c.cluster == self.name);
        let other = m
            .clusters
            .iter()
            .find(|c| **c != self.name)
            .cloned()
            .unwrap();
        Ok(Some(TopicStats {
            producers: here.map_or(0, |c| c.producers),
            subscriptions: subs
                .iter()
                .map(|(s, replicated)| {
                    (
                        s.clone(),
                        SubscriptionStats {
                            consumers: here.and_then(|c| c.consumers.get(s)).copied().unwrap_or(0),
                            replicated: *replicated,
                            durable: true,
                            backlog: 0,
                        },
                    )
                })
                .collect(),
            replication: if m.no_replicator.contains(&key) && m.unloads.contains(&key) {
                BTreeMap::new()
            } else {
                BTreeMap::from([(
                    other,
                    ReplicationStats {
                        backlog: m.backlog.get(&key).copied().unwrap_or(0),
                        connected: true,
                    },
                )])
            },
        }))
    }

    async fn unload(&self, topic: &str) -> Result<(), AdminError> {
        self.check("unload")?;
        let hang = {
            let m = self.world.model.lock();
            m.hang_unloads && m.clients.get(topic).is_some_and(|c| c.cluster == self.name)
        };
        if hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        // The clients look the topic up again through the routing table.
        let routed = self
            .world
            .routes
            .table()
            .await
            .unwrap()
            .resolve(topic)
            .unwrap()
            .map(|r| r.cluster.name.clone());
        let mut m = self.world.model.lock();
        let attached = m.clients.get(topic).map(|c| c.cluster.clone());
        if attached.as_deref() == Some(self.name.as_str()) {
            m.unloads.push((self.name.clone(), topic.to_owned()));
        } else {
            m.rolls.push((
                self.name.clone(),
                topic.to_owned(),
                attached.unwrap_or_default(),
            ));
        }
        // The topic loads again on a new ledger.
        let next = m.next_ledger.entry(self.name.clone()).or_insert(10);
        let id = *next;
        *next += 1;
        m.ledgers
            .entry((self.name.clone(), topic.to_owned()))
            .or_default()
            .push(id);
        if let Some(c) = m.clients.get_mut(topic) {
            if c.cluster == self.name {
                c.cluster = c
                    .sticky
                    .clone()
                    .or(routed)
                    .unwrap_or_else(|| self.name.clone());
            }
        }
        // Replication drains once the producers left.
        m.backlog.insert((self.name.clone(), topic.to_owned()), 0);
        Ok(())
    }

    async fn topics(&self, namespace: &str) -> Result<Vec<String>, AdminError> {
        self.check("topics")?;
        let m = self.world.model.lock();
        Ok(m.subscriptions
            .keys()
            .filter(|(c, t)| {
                *c == self.name && t.starts_with(&format!("persistent://{namespace}/"))
            })
            .map(|(_, t)| t.clone())
            .collect())
    }

    async fn schema(&self, _topic: &str) -> Result<Option<(String, u64)>, AdminError> {
        self.check("schema")?;
        Ok(None)
    }

    async fn ledgers(
        &self,
        topic: &str,
        partitions: u32,
    ) -> Result<Vec<ManagedLedgerIds>, AdminError> {
        self.check("ledgers")?;
        let m = self.world.model.lock();
        let key = (self.name.clone(), topic.to_owned());
        let ids = m.ledgers.get(&key).cloned().unwrap_or_default();
        let ledgers: Vec<LedgerEntries> = ids
            .iter()
            .map(|&id| LedgerEntries { id, entries: 50 })
            .collect();
        // Every subscription consumed all, or is left at the start of its
        // first ledger.
        let at = if m.cursor_behind.contains(&key) {
            ledgers.first().map(|l| (l.id, -1))
        } else {
            ledgers.last().map(|l| (l.id, l.entries as i64 - 1))
        };
        let cursors = m
            .subscriptions
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|(s, _)| Some((s.clone(), at?)))
            .collect();
        let one = ManagedLedgerIds { ledgers, cursors };
        Ok(vec![one; partitions.max(1) as usize])
    }
}
