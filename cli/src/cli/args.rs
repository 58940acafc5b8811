//! The command line as clap parses it: global options and one verb per
//! endpoint.

use bkswitch_bk_router::ReadMode;
use bkswitch_registry::ClusterStatus;
use clap::{ArgAction, Parser, Subcommand, ValueEnum};

/// Manage the BookKeeper clusters of a broker and switch between them.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bookie-clusters",
    version,
    about = "Manage the BookKeeper clusters of a broker and switch between them",
    after_help = "Exit status: 0 success, 1 request failed (message on stderr), 2 usage error, \
                  3 the broker has no bookie-clusters API."
)]
pub struct Cli {
    /// Base URL of the broker's admin API (`http://` or `https://`).
    #[arg(
        long,
        global = true,
        env = "BOOKIE_CLUSTERS_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// The admin bearer token.
    #[arg(
        long,
        global = true,
        env = "BOOKIE_CLUSTERS_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<bkswitch_admin::auth::Secret>,
    /// Read the admin bearer token from this file (when `--token` is not given).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "BOOKIE_CLUSTERS_TOKEN_FILE"
    )]
    pub token_file: Option<std::path::PathBuf>,
    /// Verify an `https://` broker against this CA certificate (PEM) instead
    /// of the system's roots; the URL's host must match its certificate.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "BOOKIE_CLUSTERS_TLS_TRUST"
    )]
    pub tls_trust: Option<std::path::PathBuf>,
    /// Print the server's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Request timeout in milliseconds.
    #[arg(long, global = true, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// A cluster status, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// `ACTIVE`.
    #[value(name = "ACTIVE")]
    Active,
    /// `STANDBY`.
    #[value(name = "STANDBY")]
    Standby,
    /// `DEPRECATED`.
    #[value(name = "DEPRECATED")]
    Deprecated,
}

impl From<StatusArg> for ClusterStatus {
    fn from(s: StatusArg) -> ClusterStatus {
        match s {
            StatusArg::Active => ClusterStatus::Active,
            StatusArg::Standby => ClusterStatus::Standby,
            StatusArg::Deprecated => ClusterStatus::Deprecated,
        }
    }
}

/// A read mode, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReadModeArg {
    /// Route every ledger by its stamp (the default).
    #[value(name = "DUAL_READ")]
    DualRead,
    /// Never read the new (active) cluster; for rollback.
    #[value(name = "OLD_CLUSTER_ONLY")]
    OldClusterOnly,
    /// Only read the new (active) cluster; for a failed old cluster.
    #[value(name = "NEW_CLUSTER_ONLY")]
    NewClusterOnly,
}

impl From<ReadModeArg> for ReadMode {
    fn from(m: ReadModeArg) -> ReadMode {
        match m {
            ReadModeArg::DualRead => ReadMode::DualRead,
            ReadModeArg::OldClusterOnly => ReadMode::OldClusterOnly,
            ReadModeArg::NewClusterOnly => ReadMode::NewClusterOnly,
        }
    }
}

/// The verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// List the registered clusters.
    List,
    /// Show one cluster.
    Get {
        /// The cluster name.
        #[arg(long)]
        name: String,
    },
    /// Register a cluster.
    Register {
        /// The cluster name.
        #[arg(long)]
        name: String,
        /// The cluster's BookKeeper metadata-service URI (e.g. `zk://host:2181/ledgers`).
        #[arg(long)]
        metadata_service_uri: String,
        /// The status to register with (the server defaults to STANDBY).
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
    },
    /// Unregister a cluster (never the ACTIVE one).
    Unregister {
        /// The cluster name.
        #[arg(long)]
        name: String,
    },
    /// Run the id-generator precheck of a switch to a cluster.
    Precheck {
        /// The prospective target cluster.
        #[arg(long)]
        name: String,
    },
    /// Canary: move one namespace (or topic prefix) to another cluster first
    /// (its new ledgers, schema and cursor ledgers), everything else stays.
    SetOverride {
        /// The prefix, `tenant/namespace/` or a longer topic prefix.
        #[arg(long)]
        prefix: String,
        /// The cluster.
        #[arg(long)]
        cluster: String,
    },
    /// End a canary: roll the prefix back to the active cluster.
    RemoveOverride {
        /// The prefix.
        #[arg(long)]
        prefix: String,
    },
    /// List the per-prefix overrides and their canaries.
    ListOverrides,
    /// Switch new ledgers to another cluster and migrate metadata ledgers.
    Switch {
        /// The cluster to switch to.
        #[arg(long)]
        target: String,
    },
    /// Show the active cluster, the read mode and the switch progress.
    Status {
        /// Poll until the switch is SWITCHED, DONE, DONE_WITH_FAILURES or ROLLED_BACK.
        #[arg(long)]
        watch: bool,
        /// Poll interval of --watch, in milliseconds.
        #[arg(long, default_value_t = 1000, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
        interval_ms: u64,
    },
    /// Override which clusters reads and deletes are routed to.
    SetReadMode {
        /// The read mode.
        #[arg(long, value_enum)]
        mode: ReadModeArg,
    },
    /// List the old-cluster ledgers cleanup may delete.
    ListCleanupTargets,
    /// Delete the old copies left behind by the last switch.
    Cleanup {
        /// Only report what would be deleted.
        #[arg(long, action = ArgAction::Set, default_value_t = true, num_args = 0..=1, default_missing_value = "true")]
        dry_run: bool,
        /// Only clean up this cluster.
        #[arg(long)]
        src_cluster: Option<String>,
        /// Delete at most this many ledgers (0 = no limit).
        #[arg(long, default_value_t = 0)]
        max_deletions: u64,
        /// Clean up inside the rollback window (ends the window).
        #[arg(long)]
        force: bool,
    },
    /// Close this broker's client of an old cluster (refused while reads are open).
    CloseClient {
        /// The cluster whose client to close.
        #[arg(long)]
        name: String,
    },
    /// Roll the current switch back (inside the rollback window).
    Rollback,
    /// Move the metadata store to another backend under live traffic
    /// (PIP-454), as `pulsar-admin metadata-migration`.
    #[command(subcommand)]
    MetadataMigration(MigrationCommand),
}

/// The `metadata-migration` verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum MigrationCommand {
    /// Start moving the metadata store to another one (it must be empty);
    /// the leader of the coordinator election runs the migration.
    Start {
        /// The store to move to, `zk://host:port[/chroot]` or
        /// `etcd://host:port[/prefix]`.
        #[arg(long)]
        target_url: String,
        /// Confirm the wipe of a non-empty target by naming its root
        /// exactly (`/`, `/pulsar`: the root `--dry-run` prints). A wipe
        /// never deletes what a migration does not own: the source, a
        /// BookKeeper metadata root, a bookie cluster's root, a tree other
        /// nodes use, `/zookeeper`.
        #[arg(long, value_name = "ROOT")]
        wipe_target: Option<String>,
        /// Check everything and list what the target holds (what a wipe
        /// would delete) without writing anything.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show the current (or, after it ended, the last) metadata migration.
    Status,
    /// Abort the current metadata migration: writes resume on the source.
    Abort,
}
