//! `bookie-switch pulsar …` and `bookie-switch lookup-proxy`: Pulsar
//! clusters, topic routes and topic moves, in the style of `pulsar-admin`,
//! read and written in the metadata store the lookup proxies follow.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_lookup_proxy::{Home, LookupProxy, ProxyConfig, TlsListener};
use bkswitch_metadata_store::{open_store_with, MetadataStore, StoreTimeouts};

use crate::store_security::StoreSecurityArgs;
use bkswitch_topic_routes::{Change, PulsarCluster, TopicRoutes};
use bkswitch_topic_switch::{Plan, State, SwitchError, SwitchOptions, SwitchRecord, TopicSwitcher};
use clap::{Args, Subcommand};

/// Where the routing table lives.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The metadata store the proxies follow (`zk://host:port[/chroot]`,
    /// `etcd://host:port[/prefix]`).
    #[arg(long, env = "BKSWITCH_METADATA_URL")]
    pub metadata_url: String,
    /// The root of the routing metadata.
    #[arg(long, default_value = bkswitch_topic_routes::DEFAULT_ROOT)]
    pub routes_root: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// The metadata session timeout (a coordinator's lease ends with it).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub session_timeout: Duration,
    /// Credentials and TLS of the metadata store.
    #[command(flatten)]
    pub security: StoreSecurityArgs,
}

/// `bookie-switch pulsar`.
#[derive(Debug, Args)]
pub struct PulsarArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: PulsarCommand,
}

#[derive(Debug, Subcommand)]
enum PulsarCommand {
    /// Pulsar clusters the proxies route to.
    #[command(subcommand)]
    Clusters(ClustersCommand),
    /// Routes: topic, prefix, namespace, tenant, default.
    #[command(subcommand)]
    Routes(RoutesCommand),
    /// The live lookup proxies and the table version each serves.
    Proxies,
    /// Move topics to another cluster.
    #[command(subcommand)]
    TopicSwitch(SwitchCommand),
}

#[derive(Debug, Args)]
struct ClusterArgs {
    /// The cluster's name.
    name: String,
    /// `pulsar://host:port[,host:port…]`.
    #[arg(long)]
    service_url: String,
    /// `pulsar+ssl://host:port[,…]`.
    #[arg(long)]
    service_url_tls: Option<String>,
    /// `http[s]://host:port` (HTTP lookups).
    #[arg(long)]
    web_service_url: String,
    /// The admin REST API (defaults to the web service URL).
    #[arg(long)]
    admin_url: Option<String>,
}

impl ClusterArgs {
    fn cluster(self) -> PulsarCluster {
        PulsarCluster {
            admin_url: self
                .admin_url
                .unwrap_or_else(|| self.web_service_url.clone()),
            name: self.name,
            service_url: self.service_url,
            service_url_tls: self.service_url_tls,
            web_service_url: self.web_service_url,
        }
    }
}

#[derive(Debug, Subcommand)]
enum ClustersCommand {
    /// List the clusters.
    List,
    /// Register a cluster.
    Create(ClusterArgs),
    /// Replace a cluster's URLs.
    Update(ClusterArgs),
    /// Unregister a cluster no route uses.
    Delete {
        /// The cluster.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum RoutesCommand {
    /// List the routes.
    List,
    /// Set a route: `topic:persistent://t/ns/x`, `prefix:persistent://t/ns/x-`,
    /// `namespace:t/ns`, `tenant:t` or `default`, to a registered cluster.
    Set {
        /// The route.
        route: String,
        /// The cluster.
        cluster: String,
    },
    /// Remove a route.
    Remove {
        /// The route.
        route: String,
    },
    /// Which cluster a topic goes to, and by which route.
    Explain {
        /// A topic, `persistent://tenant/ns/topic`.
        topic: String,
    },
}

#[derive(Debug, Subcommand)]
enum SwitchCommand {
    /// Check, then start and drive a move (until it is final, unless
    /// `--detach`).
    Start(StartArgs),
    /// Check a move without starting it.
    Precheck(StartArgs),
    /// Show the move.
    Status {
        /// Print again every second until the move is final.
        #[arg(long)]
        watch: bool,
    },
    /// Move every batch that moved back, and drive it.
    Rollback {
        /// Only ask; the running coordinator does it.
        #[arg(long)]
        detach: bool,
    },
    /// Stop a move before any client moved.
    Abort,
    /// Take over a move whose coordinator is gone, and drive it.
    Resume,
}

#[derive(Debug, Args)]
struct StartArgs {
    /// The cluster to move to.
    #[arg(long)]
    to: String,
    /// A batch: comma-separated routes (`topic:…`, `prefix:…`,
    /// `namespace:…`); repeat for several batches, run in order.
    #[arg(long = "batch", required = true)]
    batches: Vec<String>,
    /// The move's id.
    #[arg(long, default_value = "topic-move")]
    id: String,
    /// How long each batch runs watched before the next starts.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    soak: Duration,
    /// How long every proxy has to acknowledge a route change.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    barrier_timeout: Duration,
    /// How long the old cluster has to lose its clients.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    evict_timeout: Duration,
    /// How long replication has to drain.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    settle_timeout: Duration,
    /// The replication backlog above which the precheck refuses.
    #[arg(long, default_value_t = 10_000)]
    max_replication_backlog: u64,
    /// Leave a failed batch where it is instead of rolling it back.
    #[arg(long)]
    no_auto_rollback: bool,
    /// Start only; `resume` (here or elsewhere) drives it.
    #[arg(long)]
    detach: bool,
    /// This coordinator's name (its lease).
    #[arg(long, default_value = "cli")]
    owner: String,
}

impl StartArgs {
    fn plan(&self) -> Plan {
        Plan {
            to: self.to.clone(),
            batches: self
                .batches
                .iter()
                .map(|b| {
                    b.split(',')
                        .map(|r| r.trim().to_owned())
                        .filter(|r| !r.is_empty())
                        .collect()
                })
                .collect(),
        }
    }

    fn options(&self) -> SwitchOptions {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        SwitchOptions {
            barrier_timeout_ms: ms(self.barrier_timeout),
            evict_timeout_ms: ms(self.evict_timeout),
            settle_timeout_ms: ms(self.settle_timeout),
            soak_ms: ms(self.soak),
            max_replication_backlog: self.max_replication_backlog,
            auto_rollback: !self.no_auto_rollback,
        }
    }
}

/// `bookie-switch lookup-proxy`.
#[derive(Debug, Args)]
pub struct LookupProxyArgs {
    /// The metadata store holding the routing table.
    #[arg(long, env = "BKSWITCH_METADATA_URL")]
    metadata_url: String,
    /// The root of the routing metadata.
    #[arg(long, default_value = bkswitch_topic_routes::DEFAULT_ROOT)]
    routes_root: String,
    /// This proxy's id (unique among the proxies).
    #[arg(long)]
    id: String,
    /// The binary protocol listener.
    #[arg(long, default_value = "127.0.0.1:6650")]
    listen: String,
    /// The HTTP lookup listener (and `/metrics`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http_listen: String,
    /// The binary protocol over TLS (with `--tls-cert` and `--tls-key`).
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls_listen: Option<String>,
    /// The TLS certificate chain (PEM).
    #[arg(long)]
    tls_cert: Option<std::path::PathBuf>,
    /// The TLS private key (PEM).
    #[arg(long)]
    tls_key: Option<std::path::PathBuf>,
    /// Where `pulsar/system` (transactions) goes.
    #[arg(long)]
    home_cluster: Option<String>,
    /// The metadata session timeout: the proxy's acknowledgement (which a
    /// topic move's barrier waits for) ends with its session.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    session_timeout: Duration,
    /// Credentials and TLS of the metadata store.
    #[command(flatten)]
    security: StoreSecurityArgs,
}

async fn open(
    url: &str,
    session: Duration,
    security: &StoreSecurityArgs,
) -> Result<Arc<dyn MetadataStore>, String> {
    let timeouts = StoreTimeouts {
        session,
        ..StoreTimeouts::default()
    };
    let security = security.store_security()?;
    open_store_with(url, timeouts, &security)
        .await
        .map_err(|e| format!("cannot open the metadata store {url}: {e}"))
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("bookie-switch: {message}");
    ExitCode::FAILURE
}

fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Runs `bookie-switch pulsar …`.
pub async fn run(args: PulsarArgs) -> ExitCode {
    let store = match open(
        &args.store.metadata_url,
        args.store.session_timeout,
        &args.store.security,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let routes = match TopicRoutes::with_root(Arc::clone(&store), &args.store.routes_root) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let json = args.store.json;
    let code = match args.command {
        PulsarCommand::Clusters(c) => clusters(&routes, c, json).await,
        PulsarCommand::Routes(c) => routes_cmd(&routes, c, json).await,
        PulsarCommand::Proxies => match routes.acks().await {
            Ok(acks) if json => {
                print_json(&acks);
                ExitCode::SUCCESS
            }
            Ok(acks) => {
                for (id, a) in acks {
                    println!("{id}\tversion {}", a.version);
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        },
        PulsarCommand::TopicSwitch(c) => switch_cmd(Arc::clone(&store), routes, c, json).await,
    };
    let _ = store.close().await;
    code
}

async fn clusters(routes: &TopicRoutes, c: ClustersCommand, json: bool) -> ExitCode {
    let result = match c {
        ClustersCommand::List => routes.table().await,
        ClustersCommand::Create(a) => routes.register_cluster(a.cluster()).await,
        ClustersCommand::Update(a) => routes.apply(&[Change::UpdateCluster(a.cluster())]).await,
        ClustersCommand::Delete { name } => routes.unregister_cluster(&name).await,
    };
    match result {
        Ok(table) if json => {
            print_json(&table.clusters);
            ExitCode::SUCCESS
        }
        Ok(table) => {
            for c in table.clusters.values() {
                println!(
                    "{}\t{}\t{}\t{}",
                    c.name, c.service_url, c.web_service_url, c.admin_url
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

async fn routes_cmd(routes: &TopicRoutes, c: RoutesCommand, json: bool) -> ExitCode {
    let result = match c {
        RoutesCommand::List => routes.table().await,
        RoutesCommand::Set { route, cluster } => routes.set_route(&route, &cluster).await,
        RoutesCommand::Remove { route } => routes.remove_route(&route).await,
        RoutesCommand::Explain { topic } => {
            return match routes.table().await {
                Err(e) => fail(e),
                Ok(table) => match table.resolve(&topic) {
                    Err(e) => fail(e),
                    Ok(None) => fail(format!(
                        "no route matches `{topic}`: set one for it, its namespace or tenant, or a default route"
                    )),
                    Ok(Some(r)) if json => {
                        print_json(&serde_json::json!({
                            "topic": topic, "cluster": r.cluster.name, "route": r.route.to_string(),
                            "serviceUrl": r.cluster.service_url, "tableVersion": table.version,
                        }));
                        ExitCode::SUCCESS
                    }
                    Ok(Some(r)) => {
                        println!(
                            "{topic} → {} ({}) by route `{}` (table version {})",
                            r.cluster.name, r.cluster.service_url, r.route, table.version
                        );
                        ExitCode::SUCCESS
                    }
                },
            }
        }
    };
    match result {
        Ok(table) if json => {
            print_json(&serde_json::json!({ "version": table.version, "routes": table.routes }));
            ExitCode::SUCCESS
        }
        Ok(table) => {
            for (route, cluster) in &table.routes {
                println!("{route}\t{cluster}");
            }
            println!("(table version {})", table.version);
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn show(rec: &SwitchRecord, json: bool) {
    if json {
        print_json(rec);
        return;
    }
    println!("topic move `{}` to `{}`: {:?}", rec.id, rec.to, rec.state);
    for (i, b) in rec.batches.iter().enumerate() {
        println!(
            "  batch {i}: {:?} [{}] {} topics{}",
            b.phase,
            b.routes.join(", "),
            b.topics.len(),
            b.error
                .as_ref()
                .map(|e| format!(" — {e}"))
                .unwrap_or_default()
        );
        if let Some(e) = b.evidence.last() {
            println!("    last: {}", e.note);
        }
    }
}

fn outcome(result: Result<SwitchRecord, SwitchError>, json: bool) -> ExitCode {
    match result {
        Ok(rec) => {
            show(&rec, json);
            if matches!(rec.state, State::Failed) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(SwitchError::Refused { reports }) if json => {
            print_json(&reports);
            fail("the precheck refused the move (nothing was written)")
        }
        Err(e) => fail(e),
    }
}

async fn switch_cmd(
    store: Arc<dyn MetadataStore>,
    routes: TopicRoutes,
    c: SwitchCommand,
    json: bool,
) -> ExitCode {
    let owner = match &c {
        SwitchCommand::Start(a) | SwitchCommand::Precheck(a) => a.owner.clone(),
        _ => "cli".to_owned(),
    };
    let s = TopicSwitcher::new(store, routes, &owner);
    match c {
        SwitchCommand::Precheck(a) => match s.precheck(&a.plan(), &a.options()).await {
            Ok(reports) => {
                let passed = reports.iter().all(|r| r.passed());
                if json {
                    print_json(&reports);
                } else {
                    for (i, r) in reports.iter().enumerate() {
                        println!("batch {i}: {} topics move", r.topics.len());
                        for p in &r.problems {
                            println!("  refused: {p}");
                        }
                    }
                }
                if passed {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => fail(e),
        },
        SwitchCommand::Start(a) => {
            if let Err(e) = s.start(&a.id, a.plan(), a.options()).await {
                return outcome(Err(e), json);
            }
            if a.detach {
                return outcome(
                    s.status()
                        .await
                        .and_then(|r| r.ok_or(SwitchError::NoSwitch)),
                    json,
                );
            }
            outcome(s.run().await, json)
        }
        SwitchCommand::Status { watch } => loop {
            match s.status().await {
                Ok(Some(rec)) => {
                    show(&rec, json);
                    if !watch || rec.state.is_final() {
                        return ExitCode::SUCCESS;
                    }
                }
                Ok(None) => return fail("no topic move was started"),
                Err(e) => return fail(e),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        },
        SwitchCommand::Rollback { detach } => {
            if let Err(e) = s.rollback().await {
                return fail(e);
            }
            if detach {
                return outcome(
                    s.status()
                        .await
                        .and_then(|r| r.ok_or(SwitchError::NoSwitch)),
                    json,
                );
            }
            match s.run().await {
                // A running coordinator does it.
                Err(SwitchError::LeaseHeld { owner }) => {
                    println!("rollback requested; `{owner}` drives it");
                    ExitCode::SUCCESS
                }
                r => outcome(r, json),
            }
        }
        SwitchCommand::Abort => outcome(s.abort().await, json),
        SwitchCommand::Resume => outcome(s.run().await, json),
    }
}

/// Runs `bookie-switch lookup-proxy` until SIGINT or SIGTERM.
pub async fn lookup_proxy(a: LookupProxyArgs) -> ExitCode {
    let store = match open(&a.metadata_url, a.session_timeout, &a.security).await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let config = ProxyConfig {
        proxy_id: a.id,
        binary_addr: Some(a.listen),
        tls: match (a.tls_listen, a.tls_cert, a.tls_key) {
            (Some(addr), Some(cert_file), Some(key_file)) => Some(TlsListener {
                addr,
                cert_file,
                key_file,
            }),
            _ => None,
        },
        http_addr: Some(a.http_listen),
        home: Home::new(a.home_cluster),
        routes_root: Some(a.routes_root),
        upstream_timeout: Duration::from_secs(10),
    };
    let proxy = match LookupProxy::start(config, Arc::clone(&store)).await {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    println!(
        "lookup proxy serving: pulsar://{} http://{}{}",
        proxy
            .binary_addr()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        proxy.http_addr().map(|a| a.to_string()).unwrap_or_default(),
        proxy
            .tls_addr()
            .map(|a| format!(" pulsar+ssl://{a}"))
            .unwrap_or_default()
    );
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot watch SIGTERM: {e}")),
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    proxy.stop().await;
    let _ = store.close().await;
    ExitCode::SUCCESS
}
