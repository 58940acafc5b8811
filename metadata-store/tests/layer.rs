//! The store [`Layer`]: every method reaches the layer, a layer that forwards
//! nothing of its own passes the conformance suite, and a layer answering
//! with the wrong reply gets a clear error instead of a wrong value.

use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::testkit::{
    run_all, MemoryTestEnv, MetadataStoreTestEnv, TestNamespace,
};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MemoryStore, MetadataStore, Operation, Result,
};
use parking_lot::Mutex;

/// Records every call it sees, forwards all of them.
#[derive(Debug)]
struct Spy {
    next: Arc<dyn MetadataStore>,
    seen: Mutex<Vec<(Operation, String, bool)>>,
}

#[async_trait]
impl Layer for Spy {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.next.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        self.seen
            .lock()
            .push((call.operation(), call.path().to_owned(), call.is_write()));
        call.run(self.next.as_ref()).await
    }
}

fn spy() -> Spy {
    Spy {
        next: Arc::new(MemoryStore::new()),
        seen: Mutex::new(Vec::new()),
    }
}

#[tokio::test]
async fn every_method_reaches_the_layer() {
    let s = spy();
    s.put("/a", b"1", ExpectedVersion::Any).await.unwrap();
    s.put_version("/a", b"2", ExpectedVersion::Exactly(0))
        .await
        .unwrap();
    s.create("/e", b"", CreateMode::EPHEMERAL).await.unwrap();
    s.get("/a").await.unwrap();
    s.exists("/a").await.unwrap();
    s.children("/").await.unwrap();
    let _w = s.watch("/a").await.unwrap();
    s.import_version("/i", b"x", 7).await.unwrap();
    s.import_sequential_counter("/a", 10).await.unwrap();
    s.delete("/e", ExpectedVersion::Any).await.unwrap();
    assert!(s.can_import_versions(), "forwarded from the memory store");
    s.close().await.unwrap();
    let seen = s.seen.lock().clone();
    let ops: Vec<(Operation, &str, bool)> =
        seen.iter().map(|(o, p, w)| (*o, p.as_str(), *w)).collect();
    assert_eq!(
        ops,
        vec![
            (Operation::Put, "/a", true),
            (Operation::Put, "/a", true),
            (Operation::Create, "/e", true),
            (Operation::Get, "/a", false),
            (Operation::Exists, "/a", false),
            (Operation::Children, "/", false),
            (Operation::Watch, "/a", false),
            (Operation::Put, "/i", true),
            (Operation::Put, "/a", true),
            (Operation::Delete, "/e", true),
            (Operation::Close, "", false),
        ]
    );
}

/// Every session of the memory environment behind a [`Spy`].
struct SpyEnv;
struct SpyNamespace(Box<dyn TestNamespace>);

#[async_trait]
impl MetadataStoreTestEnv for SpyEnv {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        Ok(Box::new(SpyNamespace(MemoryTestEnv.namespace().await?)))
    }
}

#[async_trait]
impl TestNamespace for SpyNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(Spy {
            next: self.0.session().await?,
            seen: Mutex::new(Vec::new()),
        }))
    }
}

#[tokio::test]
async fn a_forwarding_layer_passes_the_conformance_suite() {
    if let Err(report) = run_all(&SpyEnv).await {
        panic!("{report}");
    }
}

/// Answers every get with a `Done`.
#[derive(Debug)]
struct Confused(Arc<dyn MetadataStore>);

#[async_trait]
impl Layer for Confused {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.0.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        match call {
            Call::Get { .. } => Ok(Reply::Done),
            _ => call.run(self.0.as_ref()).await,
        }
    }
}

#[tokio::test]
async fn a_wrong_reply_is_an_error_naming_the_layer() {
    let c = Confused(Arc::new(MemoryStore::new()));
    c.put("/a", b"1", ExpectedVersion::Any).await.unwrap();
    let e = c.get("/a").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let text = e.to_string();
    assert!(text.contains("Confused"), "{text}");
    assert!(text.contains("Get"), "{text}");
}
