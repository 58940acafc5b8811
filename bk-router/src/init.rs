//! Start-up resolution of the active and bootstrap clusters
//! ([design §3](bkswitch_docs::design)), through the cluster registry or
//! without it: what
//! [`initialize`](bkswitch_mledger_spi::ManagedLedgerStorage::initialize) of
//! [`MultiClusterManagedLedgerStorage`](crate::MultiClusterManagedLedgerStorage)
//! runs, as functions over the storage's [`State`].

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{BookKeeper, ClientFactory};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::StorageSettings;
use bkswitch_registry::{ClusterStatus, Registry, RegistryError};

use crate::config::{
    property, BOOTSTRAP_CLUSTER_NAME, CONFIG_PATH, CURRENT_CLUSTER_NAME, DEFAULT_CONFIG_PATH,
    OLD_LEDGER_READ_TIMEOUT_MS,
};
use crate::state::State;
use crate::RouterError;

/// How the active cluster was found.
enum Plan {
    /// (a) The registry's ACTIVE cluster.
    RegistryActive,
    /// (b) The `currentClusterName` hint, already registered: promote it.
    PromoteHint,
    /// (b) The hint, unregistered, or (c) the name the client reports:
    /// register it ACTIVE.
    Register,
}

fn registry_error(operation: impl Into<String>) -> impl FnOnce(RegistryError) -> RouterError {
    let operation = operation.into();
    move |source| RouterError::Registry { operation, source }
}

fn client_start(name: &str, uri: &str) -> impl FnOnce(bkswitch_bk_client::BkError) -> RouterError {
    let (name, uri) = (name.to_owned(), uri.to_owned());
    move |source| RouterError::ClientStart {
        name,
        uri,
        source: Box::new(source),
    }
}

/// Closes a client started by a failed initialization (best effort).
async fn discard(client: Arc<dyn BookKeeper>) {
    if let Err(e) = client.close().await {
        tracing::debug!(error = %e, "closing the client of a failed initialization");
    }
}

/// `initialize`: applies `oldLedgerReadTimeoutMs`, then resolves the clusters
/// through the registry or without it, as [`RouterConfig::use_registry`]
/// says.
///
/// [`RouterConfig::use_registry`]: crate::RouterConfig::use_registry
pub(crate) async fn initialize(
    state: &State,
    settings: &StorageSettings,
    store: Arc<dyn MetadataStore>,
    factory: Arc<dyn ClientFactory>,
) -> Result<(), RouterError> {
    if let Some(ms) = settings.properties.get(OLD_LEDGER_READ_TIMEOUT_MS) {
        let ms: u64 = ms.parse().map_err(|_| {
            RouterError::InvalidSettings(format!(
                "{OLD_LEDGER_READ_TIMEOUT_MS} must be a number of milliseconds, got '{ms}'"
            ))
        })?;
        state.config.lock().old_ledger_read_timeout = Duration::from_millis(ms);
    }
    let use_registry = state.config.lock().use_registry;
    if !use_registry {
        return without_registry(state, settings, factory).await;
    }
    // Nodes of a fresh deployment start together: several may find no ACTIVE
    // cluster and race to register theirs. The losers' write fails (the name
    // or the ACTIVE slot is taken, or the CAS lost) having changed nothing;
    // they read the registry again and follow what the winner recorded.
    let mut attempt = 1;
    loop {
        match with_registry(state, settings, store.clone(), factory.clone()).await {
            Err(RouterError::Registry {
                operation,
                source:
                    source @ (RegistryError::AlreadyExists { .. }
                    | RegistryError::AnotherActive { .. }
                    | RegistryError::Conflict { .. }),
            }) if attempt < INIT_ATTEMPTS => {
                tracing::info!(
                    attempt,
                    %operation,
                    error = %source,
                    "another node changed the registry while this one initialized; reading it again"
                );
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// How many times `initialize` reads the registry again after losing a race
/// with another node's initialization.
const INIT_ATTEMPTS: u32 = 5;

/// `initialize` through the registry: see
/// [`initialize`](bkswitch_mledger_spi::ManagedLedgerStorage::initialize).
async fn with_registry(
    state: &State,
    settings: &StorageSettings,
    store: Arc<dyn MetadataStore>,
    factory: Arc<dyn ClientFactory>,
) -> Result<(), RouterError> {
    let root = property(settings, CONFIG_PATH).unwrap_or(DEFAULT_CONFIG_PATH);
    let registry = Registry::with_root(store, root)
        .map_err(registry_error(format!("opening the registry at '{root}'")))?;
    let _admin = state.admin.lock().await;
    let hint = property(settings, CURRENT_CLUSTER_NAME);
    let bootstrap_property = property(settings, BOOTSTRAP_CLUSTER_NAME);

    // Read-only checks first: bad input writes nothing.
    let recorded = registry
        .bootstrap()
        .await
        .map_err(registry_error("reading the bootstrap marker"))?;
    if let (Some(marker), Some(p)) = (&recorded, bootstrap_property) {
        if marker.bootstrap_cluster_name != p {
            return Err(RouterError::BootstrapMismatch {
                property: p.to_owned(),
                recorded: marker.bootstrap_cluster_name.clone(),
            });
        }
    }
    if recorded.is_none() {
        if let Some(p) = bootstrap_property {
            bkswitch_registry::validate_name(p)
                .map_err(registry_error(format!("checking {BOOTSTRAP_CLUSTER_NAME}")))?;
        }
    }
    let records = registry
        .list()
        .await
        .map_err(registry_error("listing the registered clusters"))?;
    let find = |name: &str| records.iter().find(|r| r.name == name);
    let active = registry
        .active()
        .await
        .map_err(registry_error("reading the ACTIVE cluster"))?;

    let (name, uri, plan, client) = match (active, hint) {
        (Some(active), _) => {
            let Some(rec) = find(&active) else {
                return Err(RouterError::Registry {
                    operation: format!("reading the record of the ACTIVE cluster '{active}'"),
                    source: RegistryError::NotFound { name: active },
                });
            };
            if hint.is_some_and(|h| h != active) {
                tracing::warn!(
                    hint = hint.unwrap_or_default(),
                    active = %active,
                    "{CURRENT_CLUSTER_NAME} ignored: the registry names another ACTIVE cluster"
                );
            }
            let uri = rec.metadata_service_uri.clone();
            let client = factory
                .create_named(&active, &uri)
                .await
                .map_err(client_start(&active, &uri))?;
            (active, uri, Plan::RegistryActive, client)
        }
        (None, Some(hint)) => {
            let (uri, plan) = match find(hint) {
                Some(rec) if rec.status == ClusterStatus::Deprecated => {
                    return Err(RouterError::Registry {
                        operation: format!(
                            "activating the {CURRENT_CLUSTER_NAME} cluster '{hint}'"
                        ),
                        source: RegistryError::Deprecated {
                            name: hint.to_owned(),
                        },
                    })
                }
                Some(rec) => (rec.metadata_service_uri.clone(), Plan::PromoteHint),
                None => {
                    bkswitch_registry::validate_name(hint)
                        .map_err(registry_error(format!("checking {CURRENT_CLUSTER_NAME}")))?;
                    (settings.metadata_service_uri.clone(), Plan::Register)
                }
            };
            let client = factory
                .create_named(hint, &uri)
                .await
                .map_err(client_start(hint, &uri))?;
            (hint.to_owned(), uri, plan, client)
        }
        (None, None) => {
            let uri = settings.metadata_service_uri.clone();
            let client = factory
                .create(&uri)
                .await
                .map_err(client_start("<unnamed>", &uri))?;
            let name = client.cluster_name().to_owned();
            if let Err(source) = bkswitch_registry::validate_name(&name) {
                discard(client).await;
                return Err(RouterError::Registry {
                    operation: format!(
                        "registering the cluster reported by the client at '{uri}'; set \
                             {CURRENT_CLUSTER_NAME}"
                    ),
                    source,
                });
            }
            (name, uri, Plan::Register, client)
        }
    };

    // Registry writes, then the bootstrap marker (create-if-absent).
    let written = async {
        match plan {
            Plan::RegistryActive => Ok(()),
            Plan::PromoteHint => registry
                .promote_active(&name)
                .await
                .map_err(registry_error(format!("promoting '{name}' to ACTIVE"))),
            Plan::Register => registry
                .register(&name, &uri, ClusterStatus::Active)
                .await
                .map(drop)
                .map_err(registry_error(format!(
                    "registering '{name}' at '{uri}' as ACTIVE"
                ))),
        }?;
        let marker = registry
            .ensure_bootstrap(bootstrap_property.unwrap_or(&name))
            .await
            .map_err(registry_error("recording the bootstrap marker"))?;
        if let Some(p) = bootstrap_property {
            if marker.bootstrap_cluster_name != p {
                return Err(RouterError::BootstrapMismatch {
                    property: p.to_owned(),
                    recorded: marker.bootstrap_cluster_name,
                });
            }
        }
        let records = registry
            .list()
            .await
            .map_err(registry_error("listing the registered clusters"))?;
        Ok::<_, RouterError>((marker.bootstrap_cluster_name, records))
    }
    .await;
    let (bootstrap, records) = match written {
        Ok(v) => v,
        Err(e) => {
            discard(client).await;
            return Err(e);
        }
    };

    // The router: every registered cluster, DEPRECATED ones included (a
    // restarted node must read an idle topic whose last ledger is on one at
    // once, not after its registry watcher caught up; their clients start
    // lazily, at the first resolve), the bootstrap, the active client.
    state.set_factory(factory);
    for rec in &records {
        state.add_cluster(&rec.name, &rec.metadata_service_uri)?;
    }
    state.add_cluster(&name, &uri)?;
    state.set_bootstrap(&bootstrap)?;
    state.install(&name, client)?;
    state.activate(&name)?;
    tracing::info!(
        active = %name,
        bootstrap = %bootstrap,
        root,
        "multi-cluster storage initialized from the registry"
    );
    Ok(())
}

/// `initialize` without the registry (`RouterConfig::use_registry` false).
async fn without_registry(
    state: &State,
    settings: &StorageSettings,
    factory: Arc<dyn ClientFactory>,
) -> Result<(), RouterError> {
    let _admin = state.admin.lock().await;
    let uri = settings.metadata_service_uri.as_str();
    let bootstrap_property = property(settings, BOOTSTRAP_CLUSTER_NAME);
    if let (Some(current), Some(p)) = (state.bootstrap_cluster(), bootstrap_property) {
        if current != p {
            return Err(RouterError::BootstrapAlreadySet {
                current,
                requested: p.to_owned(),
            });
        }
    }
    let hint = property(settings, CURRENT_CLUSTER_NAME);
    let client = match hint {
        Some(name) => factory.create_named(name, uri).await,
        None => factory.create(uri).await,
    }
    .map_err(client_start(hint.unwrap_or("<unnamed>"), uri))?;
    let name = hint.unwrap_or(client.cluster_name()).to_owned();
    if let Err(e) = state.add_cluster(&name, uri) {
        discard(client).await;
        return Err(e);
    }
    state.set_factory(factory);
    let bootstrap = bootstrap_property
        .map(str::to_owned)
        .or_else(|| state.bootstrap_cluster())
        .unwrap_or_else(|| name.clone());
    state.set_bootstrap(&bootstrap)?;
    state.install(&name, client)?;
    state.activate(&name)?;
    Ok(())
}
