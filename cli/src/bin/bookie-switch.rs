//! `bookie-switch`: the end-to-end switch demo and a node (`serve`).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::auth::Secret;
use bkswitch_admin::wire::BASE_PATH;
use bkswitch_admin::{
    standard_client_factory, standard_idgen_source, MigrationHandle, Node, NodeConfig, NodeError,
};
use bkswitch_bk_client::{BkErrorKind, MemoryClusters};
use bkswitch_bookkeeper::ClientConfig;
use bkswitch_cli::demo::{render, run_demo, DemoBookKeeper, DemoOptions};
use bkswitch_cli::security::{token, SecurityArgs};
use bkswitch_cli::settings::ServeSettings;
use bkswitch_cli::store_security::StoreSecurityArgs;
use bkswitch_cli::{AckLog, TopicHandle, Traffic, TrafficOptions};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_migration::{MigratingStore, ParticipantOptions, SecureUrlOpener};
use bkswitch_metadata_store::{open_store, ErrorKind, MetadataStore, StoreTimeouts};
use clap::{Args, Parser, Subcommand};

/// Switch a broker's BookKeeper cluster at runtime (PIP-477).
#[derive(Debug, Parser)]
#[command(name = "bookie-switch", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the end-to-end switch demo: nodes, live traffic, schemas, a switch
    /// mid-traffic through the REST API, cleanup or rollback, invariant checks.
    Demo(DemoArgs),
    /// Run a node: multi-cluster storage, registry watcher, coordinator and the
    /// bookie-clusters REST API.
    Serve(Box<ServeArgs>),
    /// Run a dedicated coordinator: the node of `serve` without topics. It
    /// joins the election, coordinates the switches it is handed (it is their
    /// origin when asked through its own REST API, or the leader) and serves
    /// the REST API and `/metrics`; brokers keep serving the topics. Its
    /// memory does not grow with the number of topics (the coordinator reads
    /// the metadata and the switch's records a page at a time).
    Coordinator(Box<ServeArgs>),
    /// Read or advance a BookKeeper cluster's ledger-id generator (the step
    /// before a switch that the precheck checks).
    Idgen(IdgenArgs),
    /// Pulsar clusters, topic routes and topic moves between clusters (the
    /// routing table the lookup proxies follow).
    Pulsar(bkswitch_cli::pulsar::PulsarArgs),
    /// Run a lookup proxy: Pulsar clients use it as their service URL; it
    /// redirects each topic's lookups to the cluster its route names.
    LookupProxy(bkswitch_cli::pulsar::LookupProxyArgs),
}

#[derive(Debug, Args)]
struct IdgenArgs {
    /// The cluster's metadata-service URI, e.g.
    /// `zk+hierarchical://127.0.0.1:2181/ledgers`.
    #[arg(long)]
    metadata_service_uri: String,
    /// Make every id the cluster hands out from now on greater than this
    /// (the source cluster's `sourceNextLedgerId` from the precheck, or its
    /// highest ledger id). Without it, print the next id only.
    #[arg(long, value_name = "LEDGER_ID")]
    advance_beyond: Option<i64>,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Topics, each with one producer and one acknowledging consumer.
    #[arg(long, default_value_t = 8)]
    topics: usize,
    /// Publishes per second per topic.
    #[arg(long, default_value_t = 50)]
    rate: u32,
    /// Seconds of traffic (a third before the switch).
    #[arg(long, default_value_t = 12)]
    duration: u64,
    /// Nodes sharing the topics.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Schema versions per topic before the switch.
    #[arg(long, default_value_t = 3)]
    schema_versions: usize,
    /// Roll back inside the window instead of cleaning up.
    #[arg(long)]
    rollback: bool,
    /// Do not roll topics over after the switch (writes then move at the
    /// natural rollover).
    #[arg(long)]
    no_forced_rollover: bool,
    /// Where the nodes keep their metadata (registry, election, topic
    /// ownership, the switch's records): `memory` (the default),
    /// `zk://host:port[,…][/chroot]` or `etcd://host:port[,…][/prefix]` (a
    /// build with the `etcd` feature); the demo uses a fresh chroot or key
    /// prefix below it. The bookie clusters keep their own metadata service
    /// (ZooKeeper) either way. `--zk` is an alias.
    #[arg(long, visible_alias = "zk", value_name = "URL")]
    metadata: Option<String>,
    /// `memory` (embedded, the default) or `real`: two real BookKeeper
    /// clusters started on this machine (needs Java and the jars that
    /// `scripts/fetch-java-deps.sh` fetches), metadata on a real ZooKeeper
    /// (the one `--metadata zk://…` names, else one the demo starts).
    #[arg(long, value_enum, default_value_t = BookKeeperKind::Memory)]
    bookkeeper: BookKeeperKind,
    /// Bookies per real cluster (with `--bookkeeper real`).
    #[arg(long, default_value_t = 3)]
    bookies: usize,
    /// Print one JSON summary object instead of the human report.
    #[arg(long)]
    json: bool,
}

/// Which bookie clusters the demo runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BookKeeperKind {
    /// In-memory clusters in this process.
    Memory,
    /// Real BookKeeper clusters (bookie JVMs) started on this machine.
    Real,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// A broker-style `key=value` file with the proposal's keys
    /// (`bookkeeperMetadataServiceUri`, `migrationConcurrency`, …; the table
    /// is in the README and in `bkswitch_cli::settings`). Flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// This node's id, unique among live nodes (file key `bkswitchNodeId`, default node-1).
    #[arg(long)]
    node_id: Option<String>,
    /// `memory` (embedded, single process), `zk://host:port[,…][/chroot]` or
    /// `etcd://host:port[,…][/prefix]` (etcd: a build with the `etcd`
    /// feature) (file key `metadataStoreUrl`, default memory; also
    /// `--metadata-store-url`).
    #[arg(long, visible_alias = "metadata-store-url")]
    metadata_store: Option<String>,
    /// Session timeout of the metadata store (the ZooKeeper session; on etcd
    /// the lease TTL, whole seconds, at least 2 s): how long after this
    /// process dies its ephemeral nodes (topic ownership, election candidacy)
    /// stay, and so how soon the leader takes over a switch it was
    /// coordinating (file key `metadataStoreSessionTimeoutMillis`, default 30000).
    #[arg(long)]
    metadata_store_session_timeout_ms: Option<u64>,
    /// REST API and `/metrics` address (file key `bkswitchListenAddress`, default 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The initial cluster's metadata-service URI: a real BookKeeper cluster
    /// (`zk+hierarchical://host:port/ledgers`, also `zk://`,
    /// `zk+longhierarchical://`), or `memory://<name>` for a cluster living in
    /// this process. Later clusters are registered by their URI through the
    /// REST API (file key `bookkeeperMetadataServiceUri`, default memory://old).
    #[arg(long)]
    bookkeeper_uri: Option<String>,
    /// Name hint of the initial cluster
    /// (file key `bookieClusterSwitch.currentClusterName`).
    #[arg(long)]
    cluster_name: Option<String>,
    /// In-memory bookie clusters to create in this process (comma separated),
    /// e.g. `old,new`; register them with `memory://<name>`. The i-th one
    /// starts its ledger ids at i × 10^9 (as if its id generator had been
    /// advanced for a switch).
    #[arg(long, value_delimiter = ',', default_value = "old,new")]
    memory_clusters: Vec<String>,
    /// Registry root in the metadata store (file key `bookieClusterConfigPath`, default /admin/bookie-clusters).
    #[arg(long)]
    registry_root: Option<String>,
    /// Bearer token of the admin endpoints (or `--admin-token-file`; optional
    /// with JWTs).
    #[arg(long, env = "BKSWITCH_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<Secret>,
    /// Bearer token of the node-to-node endpoints, also sent to other nodes
    /// (or `--internal-token-file`; with JWTs, a token of an internal role).
    #[arg(long, env = "BKSWITCH_INTERNAL_TOKEN", hide_env_values = true)]
    internal_token: Option<Secret>,
    /// Bearer token `GET /metrics` requires (none by default, as in Pulsar).
    #[arg(long, env = "BKSWITCH_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<Secret>,
    #[command(flatten)]
    security: SecurityArgs,
    /// Credentials and TLS of the metadata store (also used for the target
    /// of a metadata migration this node takes part in).
    #[command(flatten)]
    store_security: StoreSecurityArgs,
    /// Topics this node owns (comma separated); each gets a producer and a
    /// consumer when `--rate` is set.
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// Publishes per second per owned topic (0: no traffic generator).
    #[arg(long, default_value_t = 0)]
    rate: u32,
    /// Append one line per publish of the traffic generator that the managed
    /// ledger acknowledged to this file, before it is counted:
    /// `ack <topic> <ledger id> <entry id> <incarnation> <sequence> <bytes>`
    /// (the payload is the sequence and the incarnation, big-endian, then
    /// zeros up to the size). One write per line, `O_APPEND`: what a process
    /// killed with SIGKILL was told stays known, for a checker to read every
    /// acknowledged message back. Needs `--rate`.
    #[arg(long, value_name = "FILE")]
    ack_log: Option<std::path::PathBuf>,
    /// Roll a topic's data ledger over after this many entries (Pulsar's
    /// `managedLedgerMaxEntriesPerLedger`, default 50000). Small values make
    /// rollovers and trims, and so metadata writes, frequent.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_entries_per_ledger: Option<u64>,
    /// Roll a cursor's ledger over after this many mark-delete entries
    /// (Pulsar's `managedLedgerCursorMaxEntriesPerLedger`, default 50000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    cursor_max_entries_per_ledger: Option<u64>,
    /// The traffic's consumers trim the ledgers their cursors consumed each
    /// time a mark-delete reaches a later ledger (as a broker trims after a
    /// rollover): consumed ledgers leave the managed ledger and are deleted.
    /// Off by default (the traffic keeps every ledger).
    #[arg(long)]
    trim_consumed_ledgers: bool,
    /// Topics rolled over per second after a switch, 0: natural rollover only
    /// (file key `bkswitchForcedRolloverRate`, default 100).
    #[arg(long)]
    forced_rollover_rate: Option<u32>,
    /// Bound on operations on non-active clusters, ms
    /// (file key `oldLedgerReadTimeoutMs`, default 5000).
    #[arg(long)]
    old_ledger_read_timeout_ms: Option<u64>,
    /// Ledgers copied or promoted at once (file key `migrationConcurrency`, default 16).
    #[arg(long)]
    migration_concurrency: Option<usize>,
    /// How long a switch can be rolled back, hours (file key `rollbackWindowHours`, default 24).
    #[arg(long)]
    rollback_window_hours: Option<u64>,
    /// Days after SWITCHED when the coordinator runs CLEANUP by itself, 0:
    /// never (file key `bookieClusterDualReadTimeoutDays`, default 15).
    #[arg(long)]
    dual_read_timeout_days: Option<u64>,
    /// Lab only: do not refuse a switch or rollback whose idgen precheck
    /// fails. In-memory clusters live inside this process, where an operator
    /// cannot advance their id generators between hops (a rollback after a
    /// switch to the next `--memory-clusters` entry is refused without it)
    /// (file key `bookieClusterSwitchSkipIdgenPrecheck`, default false).
    #[arg(long)]
    skip_idgen_precheck: bool,
    /// Metadata nodes a metadata migration copies per step while this node
    /// runs it (as the leader of the coordinator election; default 1000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    metadata_migration_page_size: Option<u64>,
    /// Wait between two steps of a metadata migration this node runs, ms
    /// (default 0): bounds the load the copy puts on both stores.
    #[arg(long)]
    metadata_migration_step_interval_ms: Option<u64>,
    /// How long every participant has to acknowledge a request of a metadata
    /// migration this node runs (tracking, a catch-up round, the pause), ms
    /// (default 10,000): one that does not fails the migration and writes
    /// resume on the source.
    #[arg(long)]
    metadata_migration_ack_timeout_ms: Option<u64>,
}

impl ServeArgs {
    /// The defaults, then `--config`, then the flags given.
    fn settings(&self) -> Result<ServeSettings, String> {
        let mut s = ServeSettings::default();
        if let Some(path) = &self.config {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the configuration file `{shown}`: {e}"))?;
            for w in s.apply_file(&shown, &text).map_err(|e| e.to_string())? {
                eprintln!("bookie-switch serve: warning: {w}");
            }
        }
        if let Some(v) = &self.node_id {
            s.node_id.clone_from(v);
        }
        if let Some(v) = &self.metadata_store {
            s.metadata_store.clone_from(v);
        }
        if let Some(v) = self.metadata_store_session_timeout_ms {
            s.session_timeout = Duration::from_millis(v);
        }
        if let Some(v) = self.listen {
            s.listen = v;
        }
        if let Some(v) = &self.bookkeeper_uri {
            s.bookkeeper_uri.clone_from(v);
        }
        if let Some(v) = &self.cluster_name {
            s.cluster_name = Some(v.clone());
        }
        if let Some(v) = &self.registry_root {
            s.registry_root.clone_from(v);
        }
        if let Some(v) = self.forced_rollover_rate {
            s.forced_rollover_rate = v;
        }
        if let Some(v) = self.old_ledger_read_timeout_ms {
            s.old_ledger_read_timeout = Duration::from_millis(v);
        }
        if let Some(v) = self.migration_concurrency {
            if v == 0 {
                return Err("--migration-concurrency must be at least 1".to_owned());
            }
            s.migration_concurrency = v;
        }
        if let Some(v) = self.rollback_window_hours {
            s.rollback_window = Duration::from_secs(v.saturating_mul(3600));
        }
        if let Some(v) = self.dual_read_timeout_days {
            s.dual_read_timeout = (v > 0).then(|| Duration::from_secs(v.saturating_mul(86_400)));
        }
        if self.skip_idgen_precheck {
            s.skip_idgen_precheck = true;
        }
        self.security.override_settings(&mut s.security);
        Ok(s)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bookie-switch: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        match cli.command {
            Command::Demo(a) => demo(a).await,
            Command::Serve(a) => serve(*a, false).await,
            Command::Coordinator(a) => serve(*a, true).await,
            Command::Idgen(a) => idgen(a).await,
            Command::Pulsar(a) => bkswitch_cli::pulsar::run(a).await,
            Command::LookupProxy(a) => {
                init_logging();
                bkswitch_cli::pulsar::lookup_proxy(a).await
            }
        }
    })
}

async fn demo(a: DemoArgs) -> ExitCode {
    use std::io::IsTerminal;
    let opts = DemoOptions {
        topics: a.topics,
        rate: a.rate,
        duration: Duration::from_secs(a.duration.max(3)),
        nodes: a.nodes,
        schema_versions: a.schema_versions,
        rollback: a.rollback,
        forced_rollover: !a.no_forced_rollover,
        metadata: a.metadata,
        bookkeeper: match a.bookkeeper {
            BookKeeperKind::Memory => DemoBookKeeper::Memory,
            BookKeeperKind::Real => DemoBookKeeper::Real { bookies: a.bookies },
        },
        progress: !a.json && std::io::stderr().is_terminal(),
    };
    let json = a.json;
    let say = move |line: &str| {
        if !json {
            eprintln!("• {line}");
        }
    };
    match run_demo(&opts, &say).await {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => eprintln!("bookie-switch: {e}"),
                }
            } else {
                println!("{}", render(&report));
            }
            if report.invariants_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("bookie-switch demo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn idgen(a: IdgenArgs) -> ExitCode {
    let config = ClientConfig::default();
    let uri = &a.metadata_service_uri;
    let result = match a.advance_beyond {
        None => bkswitch_bookkeeper::next_ledger_id(uri, &config)
            .await
            .map(|next| println!("{{\"nextLedgerId\":{next}}}")),
        Some(above) => bkswitch_bookkeeper::advance_ledger_id_generator(uri, above, &config)
            .await
            .map(|r| {
                println!(
                    "{{\"nextLedgerIdBefore\":{},\"nextLedgerId\":{},\"advanced\":{}}}",
                    r.next_before, r.next_after, r.advanced
                );
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bookie-switch idgen: {uri}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A future that completes on Ctrl-C (SIGINT) or SIGTERM (what service
/// managers send), so that the node stops cleanly either way: traffic
/// summary, sessions closed. Both signals are watched from this call on
/// (not from the first poll), so one that arrives while the node starts or
/// opens its topics is not lost and does not kill the process.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            (term, int) => {
                eprintln!(
                    "bookie-switch serve: cannot watch SIGTERM or SIGINT ({:?}, {:?}); \
                     stopping on the other only",
                    term.as_ref().err(),
                    int.as_ref().err()
                );
                if let Ok(mut s) = term.or(int) {
                    s.recv().await;
                }
            }
        }
    }
}

/// Logs to stderr: `RUST_LOG` when set (e.g. `RUST_LOG=debug`), else
/// warnings, and the switch's progress (info) from the bkswitch crates.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,bkswitch=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

async fn serve(a: ServeArgs, dedicated: bool) -> ExitCode {
    init_logging();
    let command = if dedicated { "coordinator" } else { "serve" };
    if dedicated && (a.topics.iter().any(|t| !t.is_empty()) || a.rate > 0) {
        eprintln!(
            "bookie-switch coordinator: a dedicated coordinator serves no topics; drop \
             --topics and --rate (run them on `bookie-switch serve` nodes)"
        );
        return ExitCode::from(2);
    }
    let s = match a.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bookie-switch {command}: {e}");
            return ExitCode::from(2);
        }
    };
    let ack_log = match &a.ack_log {
        None => None,
        Some(_) if a.rate == 0 => {
            eprintln!("bookie-switch {command}: --ack-log logs the traffic of --rate; set both");
            return ExitCode::from(2);
        }
        Some(path) => match AckLog::open(path) {
            Ok(log) => Some(Arc::new(log)),
            Err(e) => {
                eprintln!("bookie-switch {command}: --ack-log {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let timeouts = StoreTimeouts {
        session: s.session_timeout,
        ..StoreTimeouts::default()
    };
    // Every metadata user of the node goes through the migration
    // participant, so that the store can be moved under live traffic
    // (`bookie-clusters metadata-migration start`).
    let store_security = match a.store_security.store_security() {
        Ok(sec) => sec,
        Err(e) => {
            eprintln!("bookie-switch {command}: {e}");
            return ExitCode::from(2);
        }
    };
    let participant =
        match open_participant(&s.metadata_store, &s.node_id, timeouts, store_security).await {
            Ok(p) => p,
            Err(e) if e.kind() == ErrorKind::InvalidArgument => {
                eprintln!("bookie-switch {command}: --metadata-store (metadataStoreUrl): {e}");
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!(
                    "bookie-switch {command}: cannot connect to {}: {e}",
                    s.metadata_store
                );
                return ExitCode::FAILURE;
            }
        };
    let store: Arc<dyn MetadataStore> = Arc::new(participant.clone());
    // The i-th in-memory cluster hands out ledger ids from i × 10^9: a real
    // new cluster's id generator is advanced by the operator before a switch
    // (the idgen precheck checks it); here it is done once at start.
    let clusters = MemoryClusters::new();
    for (i, name) in a
        .memory_clusters
        .iter()
        .filter(|n| !n.is_empty())
        .enumerate()
    {
        let c = clusters.get_or_create(name);
        if i > 0 {
            if let Err(e) = c.advance_ledger_id_to(i as i64 * 1_000_000_000) {
                eprintln!("bookie-switch {command}: cannot prepare cluster '{name}': {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let tokens =
        token(a.admin_token.as_ref(), s.security.admin_token_file.as_ref()).and_then(|admin| {
            let internal = token(
                a.internal_token.as_ref(),
                s.security.internal_token_file.as_ref(),
            )?;
            Ok((admin, internal))
        });
    let (admin_token, internal_token) = match tokens {
        Ok(t) => t,
        Err(e) => {
            eprintln!("bookie-switch {command}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut cfg = NodeConfig::new(
        &s.node_id,
        store,
        standard_client_factory(clusters.clone(), ClientConfig::default()),
        &s.bookkeeper_uri,
        admin_token.expose(),
        internal_token.expose(),
    );
    if let Err(e) = s.security.apply(&mut cfg) {
        eprintln!("bookie-switch {command}: {e}");
        return ExitCode::from(2);
    }
    if cfg.jwt.is_none() && (cfg.admin_token.is_empty() || cfg.internal_token.is_empty()) {
        eprintln!(
            "bookie-switch {command}: every endpoint needs credentials: give --admin-token and \
             --internal-token (or their -file flags, or BKSWITCH_ADMIN_TOKEN and \
             BKSWITCH_INTERNAL_TOKEN), or JWT settings (--token-secret-key or --token-public-key)"
        );
        return ExitCode::from(2);
    }
    cfg.listen = s.listen;
    cfg.cluster_name = s.cluster_name.clone();
    cfg.registry_root = s.registry_root.clone();
    cfg.idgen = Some(standard_idgen_source(clusters));
    cfg.forced_rollover_rate = (s.forced_rollover_rate > 0).then_some(s.forced_rollover_rate);
    cfg.old_ledger_read_timeout = s.old_ledger_read_timeout;
    if let Some(n) = a.max_entries_per_ledger {
        cfg.ledger_config.max_entries_per_ledger = n;
    }
    if let Some(n) = a.cursor_max_entries_per_ledger {
        cfg.ledger_config.cursor_max_entries_per_ledger = n;
    }
    cfg.metrics_token = a
        .metrics_token
        .as_ref()
        .filter(|t| !t.is_empty())
        .map(|t| t.expose().to_owned());
    cfg.dedicated_coordinator = dedicated;
    cfg.orchestrator = cfg
        .orchestrator
        .clone()
        .with_skip_idgen_precheck(s.skip_idgen_precheck)
        .with_idgen_safety_margin(s.idgen_safety_margin)
        .with_migration_concurrency(s.migration_concurrency)
        .with_rollback_window(s.rollback_window)
        .with_dual_read_timeout(s.dual_read_timeout);
    let mut migration = MigrationHandle::new(participant.clone());
    if let Some(n) = a.metadata_migration_page_size {
        migration.coordinator.page_size = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(ms) = a.metadata_migration_step_interval_ms {
        migration.step_interval = Duration::from_millis(ms);
    }
    if let Some(ms) = a.metadata_migration_ack_timeout_ms {
        if ms == 0 {
            eprintln!(
                "bookie-switch {command}: --metadata-migration-ack-timeout-ms must be at least 1"
            );
            return ExitCode::from(2);
        }
        migration.coordinator.ack_timeout = Duration::from_millis(ms);
    }
    let cfg = cfg.with_migration(migration);
    // Watched from here on: a stop while the node starts or opens its
    // topics stops it cleanly too.
    let stop = stop_signal();
    tokio::pin!(stop);
    let node = match Node::start(cfg).await {
        Ok(n) => n,
        Err(e) => {
            eprintln!("bookie-switch {command}: {e}");
            let _ = participant.close().await;
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "{} {} serving {}{BASE_PATH} (active cluster: {})",
        if dedicated { "coordinator" } else { "node" },
        node.node_id(),
        node.url(),
        node.storage().active_cluster().unwrap_or_default()
    );
    let mut handles = Vec::new();
    for t in a.topics.iter().filter(|t| !t.is_empty()) {
        let opened = tokio::select! {
            r = open_topic_retrying(&node, t, command) => r,
            () = &mut stop => {
                eprintln!("bookie-switch {command}: stopped while opening topic '{t}'");
                node.stop().await;
                let _ = participant.close().await;
                return ExitCode::SUCCESS;
            }
        };
        match opened {
            Ok(h) => handles.push(h),
            Err(e) => {
                eprintln!("bookie-switch {command}: cannot open topic '{t}': {e}");
                node.stop().await;
                let _ = participant.close().await;
                return ExitCode::FAILURE;
            }
        }
    }
    let options = TrafficOptions {
        ack_log,
        trim_consumed_ledgers: a.trim_consumed_ledgers,
    };
    let traffic = (a.rate > 0 && !handles.is_empty())
        .then(|| Traffic::start_with(&handles, a.rate, 256, options));
    // Until stopped, or until the node stops by itself (another live node
    // holds its id): then the process exits with a failure, for its service
    // manager to see.
    let mut fail_stopped = node.fail_stopped_watch();
    let failed = tokio::select! {
        () = &mut stop => None,
        r = fail_stopped.wait_for(|r| r.is_some()) => r.ok().and_then(|r| r.clone()),
    };
    if let Some(t) = traffic {
        let r = t.stop(Duration::from_secs(5)).await;
        eprintln!(
            "traffic: {} published, {} consumed, {} resumed backlog (published before \
             a restart), {} duplicates, {} publish failures, {} gaps (incarnation {})",
            r.published,
            r.consumed,
            r.resumed_backlog,
            r.consumer_duplicates,
            r.publish_failures,
            r.consumer_gaps,
            r.incarnation
        );
    }
    if !handles.is_empty() {
        eprintln!(
            "topics: {} loaded, {} fenced",
            node.topic_loads(),
            node.fenced_topics()
        );
    }
    if let Some(reason) = failed {
        eprintln!(
            "bookie-switch {command}: node `{}` stopped by itself: {reason}; restart it with a \
             unique node id",
            node.node_id()
        );
        return ExitCode::FAILURE;
    }
    node.stop().await;
    // Leaves the migration cleanly (publishes what it wrote, unregisters).
    let _ = participant.close().await;
    ExitCode::SUCCESS
}

/// How long `serve` keeps retrying to open a topic whose metadata store or
/// bookies are unreachable at start.
const TOPIC_OPEN_RETRY: Duration = Duration::from_secs(300);

/// Opens topic `t` and its consumer's cursor on `node`, retrying retryable
/// failures (a metadata store or bookies unreachable for a while, as in a
/// partition right after a start; too few bookies) every second for up to
/// [`TOPIC_OPEN_RETRY`]; a failure that cannot go away by itself is returned
/// at once.
async fn open_topic_retrying(
    node: &Node,
    t: &str,
    command: &str,
) -> Result<TopicHandle, NodeError> {
    let deadline = std::time::Instant::now() + TOPIC_OPEN_RETRY;
    loop {
        let opened = async {
            let ml = node.open_topic(t).await?;
            let cursor = ml.open_cursor_at("sub", InitialPosition::Earliest).await?;
            Ok::<_, NodeError>(TopicHandle { ledger: ml, cursor })
        };
        match opened.await {
            Ok(h) => return Ok(h),
            Err(e) => {
                // Too few bookies now (one restarting, or its registration
                // briefly gone) may change by itself too.
                let retryable = match &e {
                    NodeError::ManagedLedger(e) => {
                        e.is_retryable()
                            || e.bk_error()
                                .is_some_and(|b| b.kind() == BkErrorKind::NotEnoughBookies)
                    }
                    other => other.is_retryable(),
                };
                if !retryable || std::time::Instant::now() > deadline {
                    return Err(e);
                }
                eprintln!("bookie-switch {command}: opening topic '{t}' failed, retrying: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The node's metadata store behind its migration participant: `zk://…` and
/// `etcd://…` (per the build's features) through the URL opener, which also
/// opens the targets of migrations; `memory` (a store of this process only)
/// wrapped as it is. The participant is named after the node and this
/// process (`<node id>-<pid>-<start ms>`): a node restarted before its
/// previous session expired starts (the node-id registration decides whether
/// the id is taken), and the previous participant node goes with its session.
async fn open_participant(
    url: &str,
    node_id: &str,
    timeouts: StoreTimeouts,
    security: bkswitch_metadata_store::StoreSecurity,
) -> bkswitch_metadata_store::Result<MigratingStore> {
    let opener = Arc::new(SecureUrlOpener { timeouts, security });
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let options = ParticipantOptions {
        name: format!("{node_id}-{}-{started_ms}", std::process::id()),
        node: Some(node_id.to_owned()),
        ..ParticipantOptions::default()
    };
    if url == "memory" {
        let store = open_store(url, timeouts).await?;
        MigratingStore::wrap(store, url, opener, options).await
    } else {
        MigratingStore::open(url, opener, options).await
    }
}
