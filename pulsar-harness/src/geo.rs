//! Two standalone brokers, each its own cluster with its own configuration
//! store, geo-replicating to each other.

use std::time::{Duration, Instant};

use crate::admin::Admin;
use crate::standalone::{PulsarStandalone, StandaloneOptions};
use crate::HarnessError;

/// The first cluster's name.
pub const CLUSTER_A: &str = "cluster-a";

/// The second cluster's name.
pub const CLUSTER_B: &str = "cluster-b";

/// The tenant [`GeoPair::start`] creates on both clusters, allowed on both.
pub const GEO_TENANT: &str = "geo";

/// The namespace [`GeoPair::start`] creates on both clusters, replicated both
/// ways.
pub const GEO_NAMESPACE: &str = "geo/ns";

/// Two real standalone brokers, clusters [`CLUSTER_A`] and [`CLUSTER_B`],
/// each with its own metadata and configuration store, registered with each
/// other, with tenant [`GEO_TENANT`] and namespace [`GEO_NAMESPACE`]
/// replicated both ways (A's topics to B, B's to A).
///
/// Since the configuration stores are separate, everything is created on
/// both: each broker knows the other cluster (`PUT /admin/v2/clusters/…`
/// with its URLs), the tenant allows both clusters on both, and the namespace
/// replicates to both on both. All methods take `&self`: a pair can be kept
/// in a `static` and shared by the tests of a binary.
#[derive(Debug)]
pub struct GeoPair {
    a: PulsarStandalone,
    b: PulsarStandalone,
}

impl GeoPair {
    /// Starts both brokers at once with the default options and sets the
    /// replication up (see the type's doc).
    ///
    /// # Errors
    ///
    /// When a broker cannot start or an admin call fails.
    pub async fn start() -> Result<GeoPair, HarnessError> {
        GeoPair::start_with(
            StandaloneOptions::new(CLUSTER_A),
            StandaloneOptions::new(CLUSTER_B),
        )
        .await
    }

    /// Starts both brokers at once with these options (whose cluster names
    /// must be [`CLUSTER_A`] and [`CLUSTER_B`]) and sets the replication up.
    ///
    /// # Errors
    ///
    /// When the names are not these, a broker cannot start or an admin call
    /// fails.
    pub async fn start_with(
        a: StandaloneOptions,
        b: StandaloneOptions,
    ) -> Result<GeoPair, HarnessError> {
        if a.cluster() != CLUSTER_A || b.cluster() != CLUSTER_B {
            return Err(HarnessError::new(format!(
                "a GeoPair's clusters are {CLUSTER_A} and {CLUSTER_B}, not {} and {}",
                a.cluster(),
                b.cluster()
            )));
        }
        let (a, b) = tokio::join!(PulsarStandalone::start(a), PulsarStandalone::start(b));
        let pair = GeoPair { a: a?, b: b? };
        for (local, remote) in [(&pair.a, &pair.b), (&pair.b, &pair.a)] {
            local
                .admin()
                .register_cluster(remote.name(), &remote.http_url(), &remote.broker_url())
                .await?;
        }
        pair.create_namespace(GEO_NAMESPACE).await?;
        Ok(pair)
    }

    /// The broker of [`CLUSTER_A`].
    pub fn a(&self) -> &PulsarStandalone {
        &self.a
    }

    /// The broker of [`CLUSTER_B`].
    pub fn b(&self) -> &PulsarStandalone {
        &self.b
    }

    /// Both brokers, A first.
    pub fn brokers(&self) -> [&PulsarStandalone; 2] {
        [&self.a, &self.b]
    }

    /// The broker of cluster `name`.
    pub fn broker(&self, name: &str) -> Option<&PulsarStandalone> {
        self.brokers().into_iter().find(|b| b.name() == name)
    }

    /// The cluster whose broker listens on `address` (`127.0.0.1:<port>`,
    /// `pulsar://127.0.0.1:<port>` or `http://127.0.0.1:<port>`): such as the
    /// address a traffic client reports it was connected to.
    pub fn cluster_of(&self, address: &str) -> Option<&str> {
        let port: u16 = address
            .rsplit(':')
            .next()?
            .trim_end_matches('/')
            .parse()
            .ok()?;
        self.brokers()
            .into_iter()
            .find(|b| b.broker_port() == port || b.web_port() == port)
            .map(PulsarStandalone::name)
    }

    /// Creates `namespace` (`tenant/ns`) on both clusters, its tenant first
    /// when missing (allowed on both), and makes it replicate to both on both.
    ///
    /// # Errors
    ///
    /// When an admin call fails.
    pub async fn create_namespace(&self, namespace: &str) -> Result<(), HarnessError> {
        let tenant = namespace.split('/').next().unwrap_or(namespace);
        let clusters = [CLUSTER_A, CLUSTER_B];
        for broker in self.brokers() {
            let admin = broker.admin();
            admin.create_tenant(tenant, &clusters).await?;
            admin.create_namespace(namespace).await?;
            admin.set_replication(namespace, &clusters).await?;
        }
        Ok(())
    }

    /// Waits until `topic` on cluster `from` has nothing left to replicate to
    /// the other cluster and its replicator is connected.
    ///
    /// # Errors
    ///
    /// When that is not so within `timeout` (the error has the last stats).
    pub async fn wait_replicated(
        &self,
        from: &str,
        topic: &str,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let local = self
            .broker(from)
            .ok_or_else(|| HarnessError::new(format!("no cluster {from} in the pair")))?;
        let remote = self
            .brokers()
            .into_iter()
            .find(|b| b.name() != from)
            .map(PulsarStandalone::name)
            .unwrap_or_default();
        let admin: Admin = local.admin();
        let deadline = Instant::now() + timeout;
        loop {
            let last = admin.topic_stats(topic).await;
            if let Ok(stats) = &last {
                if stats
                    .replication
                    .get(remote)
                    .is_some_and(|r| r.connected && r.backlog == 0)
                {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::new(format!(
                    "{topic} on {from} has not replicated to {remote} within {timeout:?}: {}",
                    match last {
                        Ok(stats) => stats.raw["replication"].to_string(),
                        Err(e) => e.to_string(),
                    }
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
