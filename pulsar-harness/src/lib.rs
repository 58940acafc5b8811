#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod admin;
mod geo;
mod install;
mod logs;
mod proxy;
mod sockets;
mod standalone;
mod traffic;

pub use admin::{
    Admin, PartitionedStats, ReplicationStats, SubscriptionStats, TopicStats, REPLICATOR_PREFIX,
    REQUEST_TIMEOUT,
};
pub use geo::{GeoPair, CLUSTER_A, CLUSTER_B, GEO_NAMESPACE, GEO_TENANT};
pub use install::{
    pulsar_available, pulsar_lib_dir, pulsar_proxy_available, pulsar_proxy_lib_dir,
    python_client_available, python_env_dir, LIB_ENV, PROXY_LIB_ENV, PULSAR_PROXY_VERSION,
    PULSAR_VERSION, PYTHON_CLIENT_VERSION, PYTHON_ENV, REQUIRE_ENV,
};
pub use logs::KEEP_ENV;
pub use proxy::{PulsarProxy, PulsarProxyOptions, PROXY_START_TIMEOUT};
pub use sockets::{listening_sockets, ListeningSocket, Transport};
pub use standalone::{PulsarStandalone, StandaloneOptions, START_TIMEOUT};
pub use traffic::{
    ClientKind, Progress, SubscriptionKind, Traffic, TrafficOptions, TrafficReport, READY_TIMEOUT,
};

/// The JVM flags of the brokers and the Java client: BookKeeper's for Java 17
/// ([`bkswitch_bk_harness::JAVA_17_FLAGS`]) and the openings Pulsar's own
/// `bin/pulsar` adds (its load manager and GC metrics read JDK internals).
pub const PULSAR_JAVA_FLAGS: &[&str] = &[
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.zip=ALL-UNNAMED",
    "-Djava.net.preferIPv4Stack=true",
    "--add-opens",
    "java.base/sun.net=ALL-UNNAMED",
    "--add-opens",
    "java.management/sun.management=ALL-UNNAMED",
    "--add-opens",
    "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.platform=ALL-UNNAMED",
];

/// Why a broker, a pair, an admin call or a traffic client failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct HarnessError {
    message: String,
    status: Option<u16>,
}

impl HarnessError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            status: None,
        }
    }

    pub(crate) fn with_status(message: impl Into<String>, status: u16) -> Self {
        Self {
            message: message.into(),
            status: Some(status),
        }
    }

    /// The HTTP status of a failed admin call (`None` for other failures).
    pub fn status(&self) -> Option<u16> {
        self.status
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_flags_start_with_bookkeepers() {
        let bk = bkswitch_bk_harness::JAVA_17_FLAGS;
        assert_eq!(&super::PULSAR_JAVA_FLAGS[..bk.len()], bk);
    }
}
