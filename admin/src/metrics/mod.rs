//! The node's metrics instruments, recorded where things happen: every ledger
//! open, create, read and add per cluster (a metered client factory wraps the
//! node's), and the switches this node started, finished or rolled back
//! ([`NodeMetrics`]).
//!
//! They are exposed on `GET /metrics`, in the Prometheus text (OpenMetrics)
//! format through `prometheus-client`, by the `exposition` module,
//! next to the handler: it adds at scrape time everything else, read from what
//! already counts it (the registry sync, the storage, the coordinator, the
//! ledger copy and the leader election). This module imports nothing of the
//! node or of the HTTP layer.

mod metered;

use std::sync::Arc;

use bkswitch_switch_orchestrator::SwitchStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

pub(crate) use metered::MeteredClientFactory;

/// A ledger operation, as a label value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LedgerOp {
    Open,
    Create,
    Read,
    Add,
}

impl LedgerOp {
    fn as_str(self) -> &'static str {
        match self {
            LedgerOp::Open => "open",
            LedgerOp::Create => "create",
            LedgerOp::Read => "read",
            LedgerOp::Add => "add",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct OpLabels {
    cluster: String,
    op: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct EventLabels {
    event: String,
}

/// What a switch did, as counted by [`NodeMetrics::switch_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchEvent {
    /// A switch request was accepted on this node (`POST /switch`; asking
    /// again for the switch that is starting counts again).
    Started,
    /// This node's coordinator brought a switch to SWITCHED (or later).
    Succeeded,
    /// This node's coordinator stopped a switch on an error that needs an
    /// operator.
    Failed,
    /// A rollback finished on this node.
    RolledBack,
}

impl SwitchEvent {
    fn as_str(self) -> &'static str {
        match self {
            SwitchEvent::Started => "started",
            SwitchEvent::Succeeded => "succeeded",
            SwitchEvent::Failed => "failed",
            SwitchEvent::RolledBack => "rolled_back",
        }
    }
}

/// The node's long-lived instruments.
#[derive(Debug)]
pub struct NodeMetrics {
    pub(crate) op_seconds: Family<OpLabels, Histogram>,
    pub(crate) op_errors: Family<OpLabels, Counter>,
    pub(crate) switches: Family<EventLabels, Counter>,
    /// The latest switch's status and when it was read, reused by scrapes
    /// for a while.
    pub(crate) status: parking_lot::Mutex<Option<(std::time::Instant, SwitchStatus)>>,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        NodeMetrics {
            // 100 µs to ~13 s.
            op_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 18))
            }),
            op_errors: Family::default(),
            switches: Family::default(),
            status: parking_lot::Mutex::new(None),
        }
    }
}

impl NodeMetrics {
    /// Counts one switch event.
    pub fn switch_event(&self, event: SwitchEvent) {
        self.switches
            .get_or_create(&EventLabels {
                event: event.as_str().to_owned(),
            })
            .inc();
    }

    /// How many `event`s were counted.
    pub fn switch_events(&self, event: SwitchEvent) -> u64 {
        self.switches
            .get_or_create(&EventLabels {
                event: event.as_str().to_owned(),
            })
            .get()
    }

    fn labels(cluster: &str, op: LedgerOp) -> OpLabels {
        OpLabels {
            cluster: cluster.to_owned(),
            op: op.as_str().to_owned(),
        }
    }

    pub(crate) fn op_duration(&self, cluster: &str, op: LedgerOp) -> Histogram {
        self.op_seconds
            .get_or_create(&Self::labels(cluster, op))
            .clone()
    }

    pub(crate) fn op_errors(&self, cluster: &str, op: LedgerOp) -> Counter {
        self.op_errors
            .get_or_create(&Self::labels(cluster, op))
            .clone()
    }
}

/// Wraps `factory` so that its clients record into `metrics`.
pub(crate) fn metered(
    factory: Arc<dyn bkswitch_bk_client::ClientFactory>,
    metrics: Arc<NodeMetrics>,
) -> Arc<dyn bkswitch_bk_client::ClientFactory> {
    Arc::new(MeteredClientFactory::new(factory, metrics))
}
