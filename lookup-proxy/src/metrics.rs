//! The proxy's metrics, per cluster, in the Prometheus text (OpenMetrics)
//! format through `prometheus-client`; served on `GET /metrics`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Which listener a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The binary protocol (`pulsar://` or `pulsar+ssl://`).
    Binary,
    /// The HTTP lookup endpoints.
    Http,
}

impl Listener {
    fn as_str(self) -> &'static str {
        match self {
            Listener::Binary => "binary",
            Listener::Http => "http",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LookupLabels {
    cluster: String,
    listener: String,
    result: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ForwardLabels {
    cluster: String,
    command: String,
    result: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CommandLabels {
    command: String,
}

#[derive(Debug)]
struct Instruments {
    registry: Registry,
    lookups: Family<LookupLabels, Counter>,
    forwarded: Family<ForwardLabels, Counter>,
    forward_seconds: Family<ForwardLabels, Histogram>,
    refused: Family<CommandLabels, Counter>,
    table_version: Gauge,
    serving: Gauge,
    connections: Gauge,
}

/// The proxy's instruments (cheap to clone: shared).
#[derive(Debug, Clone)]
pub struct ProxyMetrics {
    inner: Arc<Instruments>,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        ProxyMetrics::new()
    }
}

/// What a lookup answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupResult {
    /// Redirected to the route's cluster.
    Redirect,
    /// Refused: the proxy is closed (no metadata session) or no route
    /// matches.
    Unavailable,
    /// Refused: a malformed topic name.
    Invalid,
}

impl LookupResult {
    fn as_str(self) -> &'static str {
        match self {
            LookupResult::Redirect => "redirect",
            LookupResult::Unavailable => "unavailable",
            LookupResult::Invalid => "invalid",
        }
    }
}

impl ProxyMetrics {
    /// New instruments, registered under the `bkswitch_proxy` prefix.
    pub fn new() -> ProxyMetrics {
        let mut registry = Registry::with_prefix("bkswitch_proxy");
        let lookups = Family::<LookupLabels, Counter>::default();
        let forwarded = Family::<ForwardLabels, Counter>::default();
        let forward_seconds = Family::<ForwardLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 18))
        });
        let refused = Family::<CommandLabels, Counter>::default();
        let table_version = Gauge::default();
        let serving = Gauge::default();
        let connections = Gauge::default();
        registry.register(
            "lookups",
            "Topic lookups answered, by cluster, listener and result",
            lookups.clone(),
        );
        registry.register(
            "forwarded",
            "Requests forwarded to a cluster's brokers (partitioned metadata, schema, namespace listings), by result",
            forwarded.clone(),
        );
        registry.register(
            "forward_seconds",
            "Time to forward a request to a cluster and get its answer",
            forward_seconds.clone(),
        );
        registry.register(
            "refused_commands",
            "Commands a lookup proxy does not serve (producers, consumers, relaying), answered with an error",
            refused.clone(),
        );
        registry.register(
            "route_table_version",
            "The routing-table version this proxy serves and acknowledged",
            table_version.clone(),
        );
        registry.register(
            "serving",
            "1 while the proxy answers lookups; 0 while it is closed (metadata session lost or table unreadable)",
            serving.clone(),
        );
        registry.register(
            "binary_connections",
            "Open client connections on the binary listeners",
            connections.clone(),
        );
        ProxyMetrics {
            inner: Arc::new(Instruments {
                registry,
                lookups,
                forwarded,
                forward_seconds,
                refused,
                table_version,
                serving,
                connections,
            }),
        }
    }

    /// Counts one lookup answer (`cluster` empty when none was chosen).
    pub fn lookup(&self, cluster: &str, listener: Listener, result: LookupResult) {
        self.inner
            .lookups
            .get_or_create(&LookupLabels {
                cluster: cluster.to_owned(),
                listener: listener.as_str().to_owned(),
                result: result.as_str().to_owned(),
            })
            .inc();
    }

    /// How many lookups were answered with `result` for `cluster` through
    /// `listener`.
    pub fn lookups(&self, cluster: &str, listener: Listener, result: LookupResult) -> u64 {
        self.inner
            .lookups
            .get_or_create(&LookupLabels {
                cluster: cluster.to_owned(),
                listener: listener.as_str().to_owned(),
                result: result.as_str().to_owned(),
            })
            .get()
    }

    /// Records one forwarded request and how long it took.
    pub fn forwarded(&self, cluster: &str, command: &str, ok: bool, seconds: f64) {
        let labels = ForwardLabels {
            cluster: cluster.to_owned(),
            command: command.to_owned(),
            result: if ok { "ok" } else { "error" }.to_owned(),
        };
        self.inner.forwarded.get_or_create(&labels).inc();
        self.inner
            .forward_seconds
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// Counts a command refused because a lookup proxy does not serve it.
    pub fn refused(&self, command: &str) {
        self.inner
            .refused
            .get_or_create(&CommandLabels {
                command: command.to_owned(),
            })
            .inc();
    }

    pub(crate) fn set_table_version(&self, version: u64) {
        self.inner
            .table_version
            .set(i64::try_from(version).unwrap_or(i64::MAX));
    }

    pub(crate) fn set_serving(&self, serving: bool) {
        self.inner.serving.set(i64::from(serving));
    }

    pub(crate) fn connection_opened(&self) {
        self.inner.connections.inc();
    }

    pub(crate) fn connection_closed(&self) {
        self.inner.connections.dec();
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}
