//! The demo's two bookie clusters, `old` and `new`: in memory (the embedded
//! default), or real BookKeeper clusters started on this machine (bookie JVMs
//! through `bkswitch-bk-harness`, metadata on a real ZooKeeper).

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, ClientFactory, DigestType, MemoryClusters};
use bkswitch_bk_harness::BkCluster;
use bkswitch_bookkeeper::ClientConfig;
use bkswitch_registry::IdgenSource;
use bkswitch_zk_harness::ZkServer;

use super::error::{step_err, DemoError};
use bkswitch_admin::{standard_client_factory, standard_idgen_source};

/// Which bookie clusters the demo runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoBookKeeper {
    /// Two in-memory clusters in this process (the embedded default).
    Memory,
    /// Two real BookKeeper clusters of `bookies` bookies each, started on this
    /// machine (needs Java and the BookKeeper jars that
    /// `scripts/fetch-java-deps.sh` fetches).
    Real {
        /// Bookies per cluster.
        bookies: usize,
    },
}

/// The clusters of one run.
pub(super) enum Bookies {
    Memory(MemoryClusters),
    Real(Box<RealClusters>),
}

/// Two real clusters and the ZooKeeper they register in.
pub(super) struct RealClusters {
    /// The ZooKeeper the demo started (none when `--metadata` named one).
    _zk: Option<ZkServer>,
    zk_connect: String,
    old: BkCluster,
    new: BkCluster,
}

impl Bookies {
    /// Starts the clusters; `zk` is the `--metadata` ZooKeeper URL, if any (real clusters
    /// register their bookies there too).
    pub(super) async fn start(
        kind: DemoBookKeeper,
        zk: Option<&str>,
        run_id: &str,
        memory_new_first_id: i64,
    ) -> Result<Bookies, DemoError> {
        match kind {
            DemoBookKeeper::Memory => {
                let clusters = MemoryClusters::new();
                clusters.get_or_create("old");
                clusters
                    .get_or_create("new")
                    .advance_ledger_id_to(memory_new_first_id)
                    .map_err(step_err("preparing the new cluster"))?;
                Ok(Bookies::Memory(clusters))
            }
            DemoBookKeeper::Real { bookies } => {
                let zk_host = zk.map(|url| {
                    let rest = url.trim_start_matches("zk://");
                    rest.split('/').next().unwrap_or(rest).to_owned()
                });
                let run_id = run_id.to_owned();
                tokio::task::spawn_blocking(move || {
                    let (server, zk_connect) = match zk_host {
                        Some(host) => (None, host),
                        None => {
                            let server = ZkServer::try_start().map_err(|e| {
                                DemoError::new("starting ZooKeeper for the real clusters", e)
                            })?;
                            let connect = server.connect_string();
                            (Some(server), connect)
                        }
                    };
                    let start = |name: &str| {
                        BkCluster::builder(&zk_connect, &format!("/{run_id}-{name}"))
                            .bookies(bookies)
                            .try_start()
                            .map_err(|e| {
                                DemoError::new(
                                    format!("starting the real bookie cluster '{name}'"),
                                    format!(
                                        "{e}; run scripts/fetch-java-deps.sh (or the test \
                                         command) once to fetch the BookKeeper jars"
                                    ),
                                )
                            })
                    };
                    let old = start("old")?;
                    let new = start("new")?;
                    Ok(Bookies::Real(Box::new(RealClusters {
                        _zk: server,
                        zk_connect,
                        old,
                        new,
                    })))
                })
                .await
                .map_err(|e| DemoError::new("starting the real bookie clusters", e))?
            }
        }
    }

    /// What the report calls the clusters.
    pub(super) fn describe(&self) -> String {
        match self {
            Bookies::Memory(_) => "memory".to_owned(),
            Bookies::Real(real) => {
                format!("real ({} bookies per cluster)", real.old.bookie_count())
            }
        }
    }

    /// The ZooKeeper the real clusters use (`host:port`).
    pub(super) fn zk_connect(&self) -> Option<&str> {
        match self {
            Bookies::Memory(_) => None,
            Bookies::Real(real) => Some(&real.zk_connect),
        }
    }

    /// Quorum size of every ledger the demo's nodes create.
    pub(super) fn quorum(&self) -> u32 {
        match self {
            Bookies::Memory(_) => 1,
            Bookies::Real(real) => real.old.bookie_count().clamp(1, 2) as u32,
        }
    }

    /// The metadata-service URI of `name` (`old` or `new`).
    pub(super) fn uri(&self, name: &str) -> String {
        match self {
            Bookies::Memory(_) => format!("memory://{name}"),
            Bookies::Real(real) => {
                if name == "old" {
                    real.old.metadata_service_uri()
                } else {
                    real.new.metadata_service_uri()
                }
            }
        }
    }

    /// The nodes' client factory.
    pub(super) fn factory(&self) -> Arc<dyn ClientFactory> {
        match self {
            Bookies::Memory(clusters) => {
                standard_client_factory(clusters.clone(), ClientConfig::default())
            }
            Bookies::Real(_) => {
                standard_client_factory(MemoryClusters::new(), ClientConfig::default())
            }
        }
    }

    /// Where the precheck reads next ledger ids.
    pub(super) fn idgen(&self) -> Arc<dyn IdgenSource> {
        match self {
            Bookies::Memory(clusters) => standard_idgen_source(clusters.clone()),
            Bookies::Real(_) => standard_idgen_source(MemoryClusters::new()),
        }
    }

    /// The id `name`'s generator hands out next.
    pub(super) async fn next_ledger_id(&self, name: &str) -> Result<i64, DemoError> {
        match self {
            Bookies::Memory(clusters) => Ok(clusters.get_or_create(name).next_ledger_id()),
            Bookies::Real(_) => {
                bkswitch_bookkeeper::next_ledger_id(&self.uri(name), &ClientConfig::default())
                    .await
                    .map_err(step_err("reading a ledger id generator"))
            }
        }
    }

    /// The operator's step before a switch (or a rollback): every id `name`
    /// hands out from now on is greater than `above`. Returns the next id.
    pub(super) async fn advance_ledger_ids(
        &self,
        name: &str,
        above: i64,
    ) -> Result<i64, DemoError> {
        match self {
            Bookies::Memory(clusters) => {
                let c = clusters.get_or_create(name);
                if c.next_ledger_id() <= above {
                    c.advance_ledger_id_to(above + 1)
                        .map_err(step_err("advancing a ledger id generator"))?;
                }
                Ok(c.next_ledger_id())
            }
            Bookies::Real(_) => bkswitch_bookkeeper::advance_ledger_id_generator(
                &self.uri(name),
                above,
                &ClientConfig::default(),
            )
            .await
            .map(|r| r.next_after)
            .map_err(step_err("advancing a ledger id generator")),
        }
    }

    /// Of `ledgers` (`(what, id, cluster)`), the ones `cluster` does not hold.
    pub(super) async fn missing(&self, ledgers: Vec<(String, i64, String)>) -> Vec<String> {
        let mut problems = Vec::new();
        match self {
            Bookies::Memory(clusters) => {
                for (what, id, name) in ledgers {
                    if !clusters.get(&name).is_some_and(|c| c.contains_ledger(id)) {
                        problems.push(format!("{what} ledger {id} stamped '{name}' is not on it"));
                    }
                }
            }
            Bookies::Real(_) => {
                let factory = self.factory();
                let mut clients: Vec<(String, Arc<dyn BookKeeper>)> = Vec::new();
                for (what, id, name) in ledgers {
                    let client = match clients.iter().find(|(n, _)| *n == name) {
                        Some((_, c)) => c.clone(),
                        None => match factory.create_named(&name, &self.uri(&name)).await {
                            Ok(c) => {
                                clients.push((name.clone(), c.clone()));
                                c
                            }
                            Err(e) => {
                                problems.push(format!("cluster '{name}' cannot be read: {e}"));
                                continue;
                            }
                        },
                    };
                    // Digest autodetection reads any digest; the demo's
                    // ledgers have the empty password.
                    if let Err(e) = client
                        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
                        .await
                    {
                        problems.push(format!(
                            "{what} ledger {id} stamped '{name}' is not on it ({e})"
                        ));
                    }
                }
                for (_, c) in clients {
                    let _ = c.close().await;
                }
            }
        }
        problems
    }
}
