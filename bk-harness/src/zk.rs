//! Blocking ZooKeeper access for the harness, on a small private Tokio runtime.

use std::future::Future;
use std::sync::{mpsc, OnceLock};

use bkswitch_metadata_store::{
    CreateMode, ErrorKind, MetadataError, MetadataStore, ZkStore, ZkStoreOptions,
};
use tokio::runtime::Runtime;

use crate::StartError;

/// One runtime for every cluster of the process, never shut down (its worker
/// thread dies with the process).
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bk-harness-zk")
            .enable_all()
            .build()
            .expect("cannot build the bk-harness runtime")
    })
}

/// Runs `future` on the private runtime and waits for it. Works from plain
/// threads and from inside another runtime (the caller's thread just blocks).
fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().expect("the bk-harness runtime dropped a task")
}

/// A ZooKeeper session used to lay out clusters and watch registrations.
#[derive(Debug, Clone)]
pub(crate) struct Zk {
    store: ZkStore,
}

pub(crate) type ZkResult<T> = Result<T, MetadataError>;

impl Zk {
    /// Connects to `host:port[,host:port…]`.
    pub(crate) fn connect(hosts: &str) -> Result<Zk, StartError> {
        let url = format!("zk://{hosts}");
        let options = ZkStoreOptions {
            session_timeout: std::time::Duration::from_secs(10),
            ..ZkStoreOptions::default()
        };
        let store = block_on({
            let url = url.clone();
            async move { ZkStore::connect(&url, options).await }
        })
        .map_err(|e| StartError::new(format!("cannot connect to ZooKeeper at {url}: {e}")))?;
        Ok(Zk { store })
    }

    pub(crate) fn exists(&self, path: &str) -> ZkResult<bool> {
        let store = self.store.clone();
        let path = path.to_owned();
        block_on(async move { store.exists(&path).await.map(|s| s.is_some()) })
    }

    pub(crate) fn get(&self, path: &str) -> ZkResult<Option<Vec<u8>>> {
        let store = self.store.clone();
        let path = path.to_owned();
        block_on(async move { store.get(&path).await.map(|r| r.map(|r| r.value)) })
    }

    pub(crate) fn children(&self, path: &str) -> ZkResult<Vec<String>> {
        let store = self.store.clone();
        let path = path.to_owned();
        block_on(async move { store.children(&path).await })
    }

    /// Creates a persistent node (and its missing parents); `Ok(false)` when it
    /// already exists.
    pub(crate) fn create(&self, path: &str, value: &[u8]) -> ZkResult<bool> {
        let store = self.store.clone();
        let path = path.to_owned();
        let value = value.to_vec();
        block_on(async move {
            match store.create(&path, &value, CreateMode::PERSISTENT).await {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Ends the session in the background.
    pub(crate) fn close(&self) {
        let store = self.store.clone();
        runtime().spawn(async move {
            let _ = store.close().await;
        });
    }
}
