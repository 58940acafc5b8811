//! The environment a conformance run drives ([`MetadataStoreTestEnv`], with its
//! [`TestNamespace`]s) and the ready ones: [`MemoryTestEnv`] and [`ViaArc`]
//! (the ZooKeeper one, `ZkTestEnv`, is in `zk_env.rs` behind the `zk` feature).

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::memory::MemoryStore;
use crate::store::MetadataStore;

/// The environment a conformance run drives: opens isolated namespaces of the
/// store under test, each with as many sessions as a rule needs.
///
/// ```
/// use std::sync::Arc;
/// use bkswitch_metadata_store::testkit::{async_trait, MetadataStoreTestEnv, TestNamespace};
/// use bkswitch_metadata_store::{MemoryStore, MetadataStore, Result};
///
/// struct MyEnv;
/// struct MyNamespace(MemoryStore);
///
/// #[async_trait]
/// impl MetadataStoreTestEnv for MyEnv {
///     async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
///         Ok(Box::new(MyNamespace(MemoryStore::new())))
///     }
/// }
///
/// #[async_trait]
/// impl TestNamespace for MyNamespace {
///     async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
///         Ok(Arc::new(self.0.new_session()))
///     }
/// }
/// ```
#[async_trait]
pub trait MetadataStoreTestEnv: Send + Sync {
    /// A fresh, empty namespace that no other namespace can see.
    ///
    /// # Errors
    ///
    /// Any error opening it; the rule fails with it.
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>>;
}

/// One isolated namespace (a tree) of the store under test.
#[async_trait]
pub trait TestNamespace: Send + Sync {
    /// A new session on the namespace (another client of the same data), with
    /// its own ephemeral nodes and watches.
    ///
    /// # Errors
    ///
    /// Any error opening it; the rule fails with it.
    async fn session(&self) -> Result<Arc<dyn MetadataStore>>;
}

/// [`MetadataStoreTestEnv`] of [`MemoryStore`]: one tree per namespace, sessions
/// from [`MemoryStore::new_session`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryTestEnv;

struct MemoryNamespace {
    root: MemoryStore,
}

#[async_trait]
impl MetadataStoreTestEnv for MemoryTestEnv {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        Ok(Box::new(MemoryNamespace {
            root: MemoryStore::new(),
        }))
    }
}

#[async_trait]
impl TestNamespace for MemoryNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(self.root.new_session()))
    }
}

/// Wraps another environment so that every session is an `Arc<Arc<dyn
/// MetadataStore>>`: runs the suite through the forwarding impl of `Arc`.
#[derive(Debug, Clone)]
pub struct ViaArc<E>(pub E);

struct ViaArcNamespace(Box<dyn TestNamespace>);

#[async_trait]
impl<E: MetadataStoreTestEnv> MetadataStoreTestEnv for ViaArc<E> {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        Ok(Box::new(ViaArcNamespace(self.0.namespace().await?)))
    }
}

#[async_trait]
impl TestNamespace for ViaArcNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        let inner: Arc<dyn MetadataStore> = self.0.session().await?;
        Ok(Arc::new(inner))
    }
}
