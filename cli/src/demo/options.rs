//! What a demo run is asked to do.

use std::time::Duration;

use super::bookies::DemoBookKeeper;
use super::error::DemoError;

/// Settings of a demo run.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Topics (each with one producer and one acknowledging consumer).
    pub topics: usize,
    /// Publishes per second per topic.
    pub rate: u32,
    /// Total traffic time: a third before the switch, the rest during and after.
    pub duration: Duration,
    /// Nodes (each owns a share of the topics).
    pub nodes: usize,
    /// Schema versions written per topic before the switch (one more is
    /// written while the switch runs).
    pub schema_versions: usize,
    /// Roll back inside the window instead of cleaning up.
    pub rollback: bool,
    /// Roll every topic over right after the switch
    /// ([design §5.2](bkswitch_docs::design)).
    pub forced_rollover: bool,
    /// Where the nodes keep their metadata: `None` (or `memory`) in memory,
    /// `zk://host:port[,…][/chroot]` on ZooKeeper or
    /// `etcd://host:port[,…][/prefix]` on etcd (a build with the `etcd`
    /// feature); the run uses a fresh chroot or key prefix below it. The
    /// bookie clusters keep their own metadata service either way.
    pub metadata: Option<String>,
    /// The bookie clusters: in memory (default) or real BookKeeper.
    pub bookkeeper: DemoBookKeeper,
    /// Draw progress bars (on a terminal).
    pub progress: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            topics: 8,
            rate: 50,
            duration: Duration::from_secs(12),
            nodes: 3,
            schema_versions: 3,
            rollback: false,
            forced_rollover: true,
            metadata: None,
            bookkeeper: DemoBookKeeper::Memory,
            progress: false,
        }
    }
}

impl DemoOptions {
    /// Refuses a run without topics, nodes or traffic.
    pub(super) fn check(&self) -> Result<(), DemoError> {
        if self.topics == 0 || self.nodes == 0 || self.rate == 0 {
            return Err(DemoError::new(
                "options",
                "--topics, --nodes and --rate must be at least 1",
            ));
        }
        if self.bookkeeper == (DemoBookKeeper::Real { bookies: 0 }) {
            return Err(DemoError::new("options", "--bookies must be at least 1"));
        }
        if let Some(url) = &self.metadata {
            bkswitch_metadata_store::check_store_url(url)
                .map_err(|e| DemoError::new("options", format!("--metadata: {e}")))?;
        }
        Ok(())
    }
}

/// Something that prints the demo's progress lines (stderr in the binary).
pub type Say<'a> = &'a (dyn Fn(&str) + Send + Sync);
