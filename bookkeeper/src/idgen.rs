//! Reading and advancing a cluster's ledger-id generator from outside a client.

use std::time::Duration;

use bkswitch_bk_client::{BkError, LedgerId};
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};

use crate::config::ClientConfig;
use crate::meta::{zk_error, ClusterMeta};
use crate::uri::MetadataServiceUri;

pub use crate::meta::idgen::IdgenAdvance;

async fn with_cluster<T>(
    metadata_service_uri: &str,
    config: &ClientConfig,
    f: impl AsyncFnOnce(&ClusterMeta) -> Result<T, BkError>,
) -> Result<T, BkError> {
    let parsed = MetadataServiceUri::parse(metadata_service_uri)?;
    let name = config
        .cluster_name
        .clone()
        .unwrap_or_else(|| metadata_service_uri.to_owned());
    let options = ZkStoreOptions {
        session_timeout: config.zk_session_timeout,
        operation_timeout: config.zk_operation_timeout,
        connect_timeout: config.zk_operation_timeout.max(Duration::from_secs(5)),
        ..ZkStoreOptions::default()
    };
    let store = ZkStore::connect(&parsed.zk_url(), options)
        .await
        .map_err(|e| {
            zk_error(
                &name,
                &format!("connecting to ZooKeeper for `{metadata_service_uri}`"),
                e,
            )
        })?;
    let store: std::sync::Arc<dyn MetadataStore> = std::sync::Arc::new(store);
    let result = match ClusterMeta::open(store.clone(), &name, &parsed).await {
        Ok(meta) => f(&meta).await,
        Err(e) => Err(e),
    };
    let _ = store.close().await;
    result
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
/// without taking one.
///
/// # Errors
/// As [`advance_ledger_id_generator`].
pub async fn next_ledger_id(
    metadata_service_uri: &str,
    config: &ClientConfig,
) -> Result<LedgerId, BkError> {
    with_cluster(metadata_service_uri, config, async |meta| {
        meta.peek_next_id().await
    })
    .await
}
