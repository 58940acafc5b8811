//! A listing is one instant's records, even while a promotion runs between
//! its reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{MemoryStore, MetadataStore, Result};
use bkswitch_registry::{ClusterStatus, Registry, DEFAULT_ROOT};

/// Promotes `to` (through a registry of its own on the same store) the
/// first time a read of `trigger` passes by, before that read is answered.
#[derive(Debug)]
struct PromoteMidList {
    next: Arc<dyn MetadataStore>,
    trigger: String,
    to: &'static str,
    fired: AtomicBool,
}

#[async_trait]
impl Layer for PromoteMidList {
    fn next(&self) -> Arc<dyn MetadataStore> {
        Arc::clone(&self.next)
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        if call
            == (Call::Get {
                path: &self.trigger,
            })
            && !self.fired.swap(true, Ordering::SeqCst)
        {
            Registry::new(Arc::clone(&self.next))
                .promote_active(self.to)
                .await
                .expect("the promotion between the listing's reads");
        }
        call.run(self.next.as_ref()).await
    }
}

#[tokio::test]
async fn a_promotion_between_the_reads_of_a_listing_is_seen_whole_or_not_at_all() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let plain = Registry::new(Arc::clone(&store));
    plain
        .register("c1", "memory://c1", ClusterStatus::Active)
        .await
        .unwrap();
    plain
        .register("c2", "memory://c2", ClusterStatus::Standby)
        .await
        .unwrap();
    // `c1` is read ACTIVE, then `c2` is promoted (c1 → DEPRECATED, c2 →
    // ACTIVE) before `c2` is read: one pass alone shows both ACTIVE.
    let layered = Registry::new(Arc::new(PromoteMidList {
        next: Arc::clone(&store),
        trigger: format!("{DEFAULT_ROOT}/c2"),
        to: "c2",
        fired: AtomicBool::new(false),
    }));
    let listed = layered.list().await.unwrap();
    let status: Vec<(&str, ClusterStatus)> =
        listed.iter().map(|r| (r.name.as_str(), r.status)).collect();
    assert_eq!(
        status,
        [
            ("c1", ClusterStatus::Deprecated),
            ("c2", ClusterStatus::Active)
        ],
        "the listing after the promotion, never a mix"
    );
    assert_eq!(plain.active().await.unwrap().as_deref(), Some("c2"));
}
