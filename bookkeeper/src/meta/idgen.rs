//! Reading and advancing a cluster's ledger-id generator without taking an id.

use bkswitch_bk_client::{BkError, BkErrorKind, LedgerId};
use bkswitch_metadata_store::{ErrorKind, ExpectedVersion, MetadataStore};

use super::ClusterMeta;
use crate::errors::zk_error;

/// The id the generator of the cluster at `root` hands out next, read
/// without taking one and without writing: the short generator's next
/// sequential suffix of `idgen`, or, once `idgen-long` exists (and the layout
/// has `long_ids`), `(hob << 32) | low` of its largest `HOB-` directory
/// (`1 << 32` while it has none).
///
/// A `HOB-` child whose number does not parse is refused (the generator
/// cannot be read safely), naming its path.
pub(crate) async fn read_next_id(
    store: &dyn MetadataStore,
    cluster: &str,
    root: &str,
    long_ids: bool,
) -> Result<LedgerId, BkError> {
    let long = format!("{root}/idgen-long");
    let long_present = long_ids
        && store
            .exists(&long)
            .await
            .map_err(|e| zk_error(cluster, "reading idgen-long", e))?
            .is_some();
    if long_present {
        let mut max_hob: Option<i64> = None;
        for child in store
            .children(&long)
            .await
            .map_err(|e| zk_error(cluster, "listing idgen-long", e))?
        {
            let hob = child
                .strip_prefix("HOB-")
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| {
                    BkError::new(
                        BkErrorKind::Other,
                        format!(
                            "cannot read the ledger id generator: `{long}/{child}` is not a                              HOB-%010d directory; repair or delete it by hand"
                        ),
                    )
                    .with_cluster(cluster)
                })?;
            max_hob = max_hob.max(Some(hob));
        }
        let Some(hob) = max_hob else {
            return Ok(1 << 32);
        };
        let low = store
            .exists(&format!("{long}/HOB-{hob:010}"))
            .await
            .map_err(|e| zk_error(cluster, "reading a HOB directory", e))?
            .map_or(0, |s| s.next_sequential_suffix());
        return Ok((hob << 32) | low);
    }
    Ok(store
        .exists(&format!("{root}/idgen"))
        .await
        .map_err(|e| zk_error(cluster, "reading idgen", e))?
        .map_or(0, |s| s.next_sequential_suffix()))
}

/// What [`advance_ledger_id_generator`](crate::advance_ledger_id_generator)
/// found and left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdgenAdvance {
    /// The id the generator would have handed out next, before.
    pub next_before: LedgerId,
    /// The id it hands out next now (`> above`).
    pub next_after: LedgerId,
    /// Whether anything was written (`false`: it was already beyond).
    pub advanced: bool,
}

impl ClusterMeta {
    /// The id the generator hands out next, read without taking one (see
    /// [`read_next_id`]).
    pub(crate) async fn peek_next_id(&self) -> Result<LedgerId, BkError> {
        read_next_id(
            self.store.as_ref(),
            &self.cluster,
            &self.root,
            self.kind.supports_long_ids(),
        )
        .await
    }

    /// Makes every id handed out from now on greater than `above`, by
    /// starting the 63-bit generator at the `HOB-` directory
    /// `(above >> 32) + 1`: its ids are at least `hob << 32 > above`.
    pub(crate) async fn advance_beyond(&self, above: LedgerId) -> Result<IdgenAdvance, BkError> {
        if above < 0 {
            return Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!("cannot advance the ledger id generator beyond {above}: ids are >= 0"),
            )
            .with_cluster(&self.cluster));
        }
        let next_before = self.peek_next_id().await?;
        if next_before > above {
            return Ok(IdgenAdvance {
                next_before,
                next_after: next_before,
                advanced: false,
            });
        }
        if !self.kind.supports_long_ids() {
            return Err(BkError::new(
                BkErrorKind::IllegalOp,
                format!(
                    "cannot advance the ledger id generator of `{}` beyond {above}: its \
                     {:?} layout only has 31-bit ids, which can only be advanced by taking \
                     them; use a cluster with the hierarchical or long-hierarchical layout",
                    self.root, self.kind
                ),
            )
            .with_cluster(&self.cluster));
        }
        let long = format!("{}/idgen-long", self.root);
        for path in [
            long.clone(),
            format!("{long}/HOB-{:010}", (above >> 32) + 1),
        ] {
            match self.store.put(&path, b"", ExpectedVersion::NotExists).await {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(self.err(&format!("creating `{path}`"), e)),
            }
        }
        self.long_idgen
            .store(true, std::sync::atomic::Ordering::Release);
        let next_after = self.peek_next_id().await?;
        Ok(IdgenAdvance {
            next_before,
            next_after,
            advanced: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bkswitch_metadata_store::{MemoryStore, MetadataStore};

    use super::*;
    use crate::uri::MetadataServiceUri;

    async fn meta(store: &Arc<dyn MetadataStore>, uri: &str) -> ClusterMeta {
        let uri = MetadataServiceUri::parse(uri).unwrap();
        ClusterMeta::open(store.clone(), "c", &uri).await.unwrap()
    }

    #[tokio::test]
    async fn peek_does_not_take_an_id_and_advance_moves_running_clients_at_once() {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        store.put("/l", b"", ExpectedVersion::Any).await.unwrap();
        let running = meta(&store, "zk+hierarchical://h:1/l").await;
        for _ in 0..3 {
            running.generate_id().await.unwrap();
        }
        assert_eq!(running.peek_next_id().await.unwrap(), 3);
        assert_eq!(running.peek_next_id().await.unwrap(), 3, "peek takes no id");

        // Already beyond: nothing written.
        let same = running.advance_beyond(1).await.unwrap();
        assert_eq!((same.next_before, same.advanced), (3, false));
        assert!(store.exists("/l/idgen-long").await.unwrap().is_none());

        // Beyond a long id of the source (HOB 2): the generator starts at HOB 3.
        let above = (2 << 32) | 17;
        let operator = meta(&store, "zk+hierarchical://h:1/l").await;
        let moved = operator.advance_beyond(above).await.unwrap();
        assert_eq!(moved.next_before, 3);
        assert_eq!(moved.next_after, 3 << 32);
        assert!(moved.advanced);
        // A client that started before the advance sees it on its next id.
        let id = running.generate_id().await.unwrap();
        assert!(id > above, "{id} must be above {above}");
        assert_eq!(id >> 32, 3);
        // And a second advance to a lower bound changes nothing.
        let again = operator.advance_beyond(above).await.unwrap();
        assert!(!again.advanced);
        assert_eq!(again.next_after, id + 1);
    }

    #[tokio::test]
    async fn a_malformed_hob_directory_is_refused_by_name() {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        store.put("/l", b"", ExpectedVersion::Any).await.unwrap();
        let m = meta(&store, "zk+hierarchical://h:1/l").await;
        m.advance_beyond(5 << 32).await.unwrap();
        assert_eq!(m.peek_next_id().await.unwrap(), 6 << 32);
        store
            .put("/l/idgen-long/HOB-zz", b"", ExpectedVersion::Any)
            .await
            .unwrap();
        let e = m.peek_next_id().await.unwrap_err();
        assert!(e.to_string().contains("/l/idgen-long/HOB-zz"), "{e}");
        assert!(!e.is_retryable());
    }

    #[tokio::test]
    async fn bad_bounds_and_short_only_layouts_are_refused_without_writing() {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        store.put("/l", b"", ExpectedVersion::Any).await.unwrap();
        let m = meta(&store, "zk+hierarchical://h:1/l").await;
        let e = m.advance_beyond(-1).await.unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::InvalidArgument);
        assert!(e.to_string().contains("-1"), "{e}");

        store.put("/flat", b"", ExpectedVersion::Any).await.unwrap();
        let layout = crate::LedgerManagerKind::LegacyHierarchical.layout_bytes();
        store
            .put("/flat/LAYOUT", &layout, ExpectedVersion::Any)
            .await
            .unwrap();
        let legacy = meta(&store, "zk://h:1/flat").await;
        assert!(!legacy.kind().supports_long_ids());
        let e = legacy.advance_beyond(1 << 40).await.unwrap_err();
        assert!(e.to_string().contains("31-bit"), "{e}");
        assert!(store.exists("/flat/idgen-long").await.unwrap().is_none());
    }
}
