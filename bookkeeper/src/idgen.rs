//! Reading and advancing a cluster's ledger-id generator from outside a client.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::{BkError, BkErrorKind, ClusterUri, IdgenSource, LedgerId, MemoryClusters};
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};

use crate::config::ClientConfig;
use crate::errors::zk_error;
use crate::meta::idgen::read_next_id;
use crate::meta::layout::LedgerManagerKind;
use crate::meta::ClusterMeta;
use crate::uri::{LayoutChoice, MetadataServiceUri};

pub use crate::meta::idgen::IdgenAdvance;

fn cluster_name(metadata_service_uri: &str, config: &ClientConfig) -> String {
    config
        .cluster_name
        .clone()
        .unwrap_or_else(|| metadata_service_uri.to_owned())
}

async fn connect(
    parsed: &MetadataServiceUri,
    name: &str,
    config: &ClientConfig,
) -> Result<Arc<dyn MetadataStore>, BkError> {
    let options = ZkStoreOptions {
        session_timeout: config.zk_session_timeout,
        operation_timeout: config.zk_operation_timeout,
        connect_timeout: config.zk_operation_timeout.max(Duration::from_secs(5)),
        ..ZkStoreOptions::default()
    };
    let store = ZkStore::connect(&parsed.zk_url(), options)
        .await
        .map_err(|e| zk_error(name, &format!("connecting to ZooKeeper for `{parsed}`"), e))?;
    Ok(Arc::new(store))
}

async fn with_cluster<T>(
    metadata_service_uri: &str,
    config: &ClientConfig,
    f: impl AsyncFnOnce(&ClusterMeta) -> Result<T, BkError>,
) -> Result<T, BkError> {
    let parsed = MetadataServiceUri::parse(metadata_service_uri)?;
    let name = cluster_name(metadata_service_uri, config);
    let store = connect(&parsed, &name, config).await?;
    let result = match ClusterMeta::open(store.clone(), &name, &parsed).await {
        Ok(meta) => f(&meta).await,
        Err(e) => Err(e),
    };
    let _ = store.close().await;
    result
}

/// Reads the next id of the cluster at `parsed` in `store` without writing
/// anything (not even a missing `LAYOUT`, which a client creates).
async fn read_only_next_id(
    store: &dyn MetadataStore,
    name: &str,
    parsed: &MetadataServiceUri,
) -> Result<LedgerId, BkError> {
    let root = parsed.ledgers_root();
    if store
        .exists(root)
        .await
        .map_err(|e| zk_error(name, "reading the ledgers root", e))?
        .is_none()
    {
        return Err(BkError::new(
            BkErrorKind::Other,
            format!(
                "no BookKeeper cluster at `{parsed}`: the ledgers root `{root}` does not exist \
                 in ZooKeeper; check the URI"
            ),
        )
        .with_cluster(name));
    }
    let kind = match store
        .get(&format!("{root}/LAYOUT"))
        .await
        .map_err(|e| zk_error(name, "reading LAYOUT", e))?
    {
        Some(found) => {
            LedgerManagerKind::parse_layout(&found.value).map_err(|e| e.with_cluster(name))?
        }
        // What a client would record.
        None => match parsed.layout() {
            LayoutChoice::LongHierarchical => LedgerManagerKind::LongHierarchical,
            _ => LedgerManagerKind::Hierarchical,
        },
    };
    read_next_id(store, name, root, kind.supports_long_ids()).await
}

/// Makes every ledger id the cluster behind `metadata_service_uri` hands out
/// from now on greater than `above`. Writes nothing when the generator is
/// already beyond; idempotent.
///
/// generator beyond every id the old cluster has handed out.
///
/// A switch copies cursor and schema ledgers to the new cluster keeping their
/// ids, and topics go on creating ledgers there whose ids must be above every
/// id they used before (positions are ordered by ledger id). Both hold only if
/// the new cluster's generator is beyond the old cluster's next id; the idgen
/// precheck checks it and this is how an operator gets there.
///
/// BookKeeper has no command for it. The generator's 63-bit form gives one
/// without taking ids one by one: every id from the `HOB-<h>` directory of
/// `<root>/idgen-long` is at least `h << 32`, so creating `idgen-long` and the
/// directory `HOB-<(above >> 32) + 1>` makes every later id greater than
/// `above`, for Rust and Java clients alike.
///
/// **A running Java client does not see it.** BookKeeper's
/// `LongZkLedgerIdGenerator` remembers that `idgen-long` is absent, and which
/// `HOB-` directories exist, for the life of the client; a Java client of the
/// new cluster started before the step keeps handing out ids below `above`.
/// Advance the generator before any broker or tool opens a client of the new
/// cluster that creates ledgers, or restart them afterwards. The Rust client
/// checks on every id and sees the step at once.
///
/// # Errors
/// A malformed URI or negative `above` → `InvalidArgument` (-14); a cluster
/// whose layout only has 31-bit ids (legacy hierarchical) → `IllegalOp`
/// (-100); ZooKeeper unreachable → a retryable error naming the cluster.
pub async fn advance_ledger_id_generator(
    metadata_service_uri: &str,
    above: LedgerId,
    config: &ClientConfig,
) -> Result<IdgenAdvance, BkError> {
    with_cluster(metadata_service_uri, config, async |meta| {
        meta.advance_beyond(above).await
    })
    .await
}

/// The id the cluster behind `metadata_service_uri` hands out next, read
/// without taking one and without writing (what [`ZkIdgenSource`] reads).
///
/// # Errors
/// A malformed URI → `InvalidArgument` (-14); no ledgers root at the URI, or
/// a malformed `LAYOUT` or `HOB-` node → an error naming it; ZooKeeper
/// unreachable → a retryable error naming the cluster.
pub async fn next_ledger_id(
    metadata_service_uri: &str,
    config: &ClientConfig,
) -> Result<LedgerId, BkError> {
    let parsed = MetadataServiceUri::parse(metadata_service_uri)?;
    let name = cluster_name(metadata_service_uri, config);
    let store = connect(&parsed, &name, config).await?;
    let result = read_only_next_id(store.as_ref(), &name, &parsed).await;
    let _ = store.close().await;
    result
}

/// The [`IdgenSource`] of BookKeeper clusters in ZooKeeper: reads the layout
/// (`idgen`, `idgen-long/HOB-*`, as the cluster's `LAYOUT` allows) over a
/// short-lived ZooKeeper session per call, as [`next_ledger_id`] does.
/// `memory://` URIs are refused with `InvalidArgument`.
#[derive(Debug, Clone, Default)]
pub struct ZkIdgenSource {
    /// Session and operation timeouts of the connections (`cluster_name`
    /// names the cluster in errors; the URI otherwise).
    pub config: ClientConfig,
}

#[async_trait]
impl IdgenSource for ZkIdgenSource {
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<LedgerId, BkError> {
        match uri {
            ClusterUri::ZooKeeper(zk) => next_ledger_id(zk.as_str(), &self.config).await,
            other => Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!(
                    "cannot read the ledger id generator of `{other}` from ZooKeeper: it is                      not a BookKeeper cluster in ZooKeeper; read memory:// clusters from                      their MemoryClusters"
                ),
            )),
        }
    }
}

/// The [`IdgenSource`] of a node whose clusters may be of either kind:
/// `memory://` clusters from [`MemoryClusters`], BookKeeper clusters through
/// [`ZkIdgenSource`].
#[derive(Debug, Clone, Default)]
pub struct ClusterIdgenSource {
    /// In-memory clusters.
    pub memory: MemoryClusters,
    /// BookKeeper clusters.
    pub zk: ZkIdgenSource,
}

#[async_trait]
impl IdgenSource for ClusterIdgenSource {
    async fn next_ledger_id(&self, uri: &ClusterUri) -> Result<LedgerId, BkError> {
        match uri {
            ClusterUri::Memory { .. } => self.memory.next_ledger_id(uri).await,
            _ => self.zk.next_ledger_id(uri).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use bkswitch_metadata_store::{CreateMode, ExpectedVersion, MemoryStore};

    use super::*;

    /// The layout a BookKeeper cluster leaves: `short` ids taken from
    /// `idgen`, and `hobs` as (HOB, ids taken) of `idgen-long`.
    async fn layout(store: &dyn MetadataStore, root: &str, short: usize, hobs: &[(i64, usize)]) {
        for _ in 0..short {
            let (p, _) = store
                .create(
                    &format!("{root}/idgen/ID-"),
                    b"",
                    CreateMode::EPHEMERAL_SEQUENTIAL,
                )
                .await
                .unwrap();
            store.delete(&p, ExpectedVersion::Any).await.unwrap();
        }
        for (hob, n) in hobs {
            let dir = format!("{root}/idgen-long/HOB-{hob:010}");
            store.put(&dir, b"", ExpectedVersion::Any).await.unwrap();
            for _ in 0..*n {
                let (p, _) = store
                    .create(&format!("{dir}/ID-"), b"", CreateMode::EPHEMERAL_SEQUENTIAL)
                    .await
                    .unwrap();
                store.delete(&p, ExpectedVersion::Any).await.unwrap();
            }
        }
    }

    async fn tree(store: &dyn MetadataStore, path: &str, out: &mut Vec<String>) {
        for c in store.children(path).await.unwrap_or_default() {
            let p = format!("{}/{c}", path.trim_end_matches('/'));
            out.push(p.clone());
            Box::pin(tree(store, &p, out)).await;
        }
    }

    #[tokio::test]
    async fn the_layout_is_read_without_writing() {
        let store = MemoryStore::new();
        let parse = |u: &str| MetadataServiceUri::parse(u).unwrap();
        let e = read_only_next_id(&store, "c", &parse("zk://h:1/src"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("`/src` does not exist"), "{e}");
        store.put("/src", b"", ExpectedVersion::Any).await.unwrap();
        let src = parse("zk+hierarchical://h:1/src");
        assert_eq!(read_only_next_id(&store, "c", &src).await.unwrap(), 0);
        layout(&store, "/src", 7, &[]).await;
        assert_eq!(read_only_next_id(&store, "c", &src).await.unwrap(), 7);

        store
            .put("/dst/idgen-long", b"", ExpectedVersion::Any)
            .await
            .unwrap();
        let dst = parse("zk://h:1/dst");
        assert_eq!(read_only_next_id(&store, "c", &dst).await.unwrap(), 1 << 32);
        layout(&store, "/dst", 3, &[(1, 2), (3, 5), (2, 9)]).await;
        assert_eq!(
            read_only_next_id(&store, "c", &dst).await.unwrap(),
            (3 << 32) | 5
        );
        let mut before = Vec::new();
        tree(&store, "/", &mut before).await;
        assert!(!before.iter().any(|p| p.ends_with("LAYOUT")), "{before:?}");

        // A legacy layout has no long generator: idgen-long is not read.
        let legacy = crate::LedgerManagerKind::LegacyHierarchical.layout_bytes();
        store
            .put("/dst/LAYOUT", &legacy, ExpectedVersion::Any)
            .await
            .unwrap();
        assert_eq!(read_only_next_id(&store, "c", &dst).await.unwrap(), 3);
        store
            .put("/dst/LAYOUT", b"junk", ExpectedVersion::Any)
            .await
            .unwrap();
        assert!(read_only_next_id(&store, "c", &dst).await.is_err());
    }

    #[tokio::test]
    async fn sources_route_by_kind_and_refuse_the_other_kind() {
        let memory = MemoryClusters::new();
        memory.get_or_create("old").advance_ledger_id_to(9).unwrap();
        let both = ClusterIdgenSource {
            memory,
            zk: ZkIdgenSource::default(),
        };
        let old = ClusterUri::parse("memory://old").unwrap();
        assert_eq!(both.next_ledger_id(&old).await.unwrap(), 9);
        let e = ZkIdgenSource::default()
            .next_ledger_id(&old)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::InvalidArgument);
        assert!(e.to_string().contains("memory://old"), "{e}");
    }
}
