#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod cluster;
mod install;
mod interop;
mod java_compile;
mod logs;
mod pulsar;
mod pulsar_metadata;
pub mod pulsar_wire;
mod zk;

pub use cluster::{
    shared, unique_ledgers_root, BkCluster, BkClusterBuilder, ProcessUsage, LAYOUT, START_TIMEOUT,
    ZK_TIMEOUT_MS,
};
pub use install::{
    bk_available, java_binary, java_cache_dir, javac_binary, lib_dir, require_bk, BK_VERSION,
    CACHE_ENV, LIB_ENV, REQUIRE_ENV,
};
pub use interop::{
    codes, deterministic_payload, BenchAddOptions, BenchAddResult, BenchReadResult, CreateOptions,
    DigestType, Entry, JavaClient, JavaClientBuilder, JavaCopyResult, JavaError,
    JavaLedgerMetadata, OpenedLedger, Segment, CALL_TIMEOUT, SESSION_START_TIMEOUT,
};
pub use java_compile::compile_java_helper;
pub use pulsar::{
    encoded, judged, pulsar_lib_dir, Judged, PulsarJudge, PulsarKind, PULSAR_VERSION,
};
pub use pulsar_metadata::{
    pulsar_metadata_available, pulsar_metadata_lib_dir, PulsarBenchOp, PulsarMetadataStore,
    PulsarNode, PulsarStoreError, PULSAR_STORE_START_TIMEOUT,
};

/// The JVM flags BookKeeper's own scripts use on Java 17 (`bin/common.sh`).
pub const JAVA_17_FLAGS: &[&str] = &[
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
];

/// Why a cluster, a bookie or a Java client session could not be started.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct StartError {
    message: String,
}

impl StartError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
