//! Helpers shared by the registry tests.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, ClientFactory, MemoryClientFactory, MemoryClusters,
};
use parking_lot::Mutex;

/// Generous bound for waits on background tasks.
pub const WAIT: Duration = Duration::from_secs(30);

/// A [`MemoryClientFactory`] whose `create` fails for chosen URIs.
#[derive(Debug, Clone)]
pub struct FlakyFactory {
    inner: MemoryClientFactory,
    failing: Arc<Mutex<HashSet<String>>>,
    pub created: Arc<Mutex<Vec<String>>>,
}

impl FlakyFactory {
    pub fn new(clusters: MemoryClusters) -> FlakyFactory {
        FlakyFactory {
            inner: MemoryClientFactory::with_clusters(clusters),
            failing: Arc::default(),
            created: Arc::default(),
        }
    }

    pub fn fail(&self, uri: &str) {
        self.failing.lock().insert(uri.to_owned());
    }

    pub fn heal(&self, uri: &str) {
        self.failing.lock().remove(uri);
    }
}

#[async_trait]
impl ClientFactory for FlakyFactory {
    async fn create_named(
        &self,
        _cluster_name: &str,
        metadata_service_uri: &str,
    ) -> bkswitch_bk_client::Result<Arc<dyn BookKeeper>> {
        self.create(metadata_service_uri).await
    }

    async fn create(&self, uri: &str) -> bkswitch_bk_client::Result<Arc<dyn BookKeeper>> {
        if self.failing.lock().contains(uri) {
            return Err(BkError::new(
                BkErrorKind::Unavailable,
                format!("test: cluster at '{uri}' is down"),
            ));
        }
        self.created.lock().push(uri.to_owned());
        self.inner.create(uri).await
    }
}

/// Polls `f` until it holds, failing the test after [`WAIT`].
pub async fn settle<F: FnMut() -> bool>(what: &str, mut f: F) {
    let ok = tokio::time::timeout(WAIT, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out waiting for: {what}");
}

/// Waits until the applied epoch reaches `epoch`.
pub async fn applied(rx: &mut tokio::sync::watch::Receiver<i64>, epoch: i64) {
    let ok = tokio::time::timeout(WAIT, rx.wait_for(|e| *e >= epoch)).await;
    assert!(matches!(ok, Ok(Ok(_))), "epoch {epoch} not applied in time");
}
