//! One way to decorate a [`MetadataStore`]: a [`Layer`].
//!
//! A decorator (metrics, fault injection, a migration's write gate) sees each
//! call as one [`Call`] value and answers it with a [`Reply`]; the blanket
//! `impl<L: Layer> MetadataStore for L` turns every method of the trait into a
//! call, so a layer can never forget one: a method added to the trait is added
//! to [`Call`] and reaches every layer. A layer that does nothing overrides
//! nothing and forwards everything to [`Layer::next`].
//!
//! The trait itself has no defaulted methods either, so a store written by
//! hand (a backend, a test double) names every method or does not compile;
//! the shared refusals of a store that cannot import versions are the
//! functions of [`fallback`](crate::fallback). A hand-written wrapper that
//! forwards only some methods is refused by the compiler:
//!
//! ```compile_fail,E0046
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use bkswitch_metadata_store::{
//!     CreateMode, ExpectedVersion, GetResult, MetadataStore, Result, Stat, WatchStream,
//! };
//!
//! #[derive(Debug)]
//! struct Forgetful(Arc<dyn MetadataStore>);
//!
//! #[async_trait]
//! impl MetadataStore for Forgetful {
//!     async fn get(&self, p: &str) -> Result<Option<GetResult>> { self.0.get(p).await }
//!     async fn put(&self, p: &str, v: &[u8], e: ExpectedVersion) -> Result<Stat> {
//!         self.0.put(p, v, e).await
//!     }
//!     async fn create(&self, p: &str, v: &[u8], m: CreateMode) -> Result<(String, Stat)> {
//!         self.0.create(p, v, m).await
//!     }
//!     async fn delete(&self, p: &str, e: ExpectedVersion) -> Result<()> {
//!         self.0.delete(p, e).await
//!     }
//!     async fn exists(&self, p: &str) -> Result<Option<Stat>> { self.0.exists(p).await }
//!     async fn children(&self, p: &str) -> Result<Vec<String>> { self.0.children(p).await }
//!     async fn watch(&self, p: &str) -> Result<WatchStream> { self.0.watch(p).await }
//!     async fn close(&self) -> Result<()> { self.0.close().await }
//!     // put_version, import_version, import_sequential_counter,
//!     // can_import_versions and session_generation forgotten: E0046.
//! }
//! ```
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use bkswitch_metadata_store::layer::{Call, Layer, Reply};
//! use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore, Result};
//!
//! /// Counts the writes that reach the store.
//! #[derive(Debug)]
//! struct CountWrites {
//!     next: Arc<dyn MetadataStore>,
//!     writes: AtomicUsize,
//! }
//!
//! #[async_trait]
//! impl Layer for CountWrites {
//!     fn next(&self) -> Arc<dyn MetadataStore> {
//!         self.next.clone()
//!     }
//!
//!     async fn call(&self, call: Call<'_>) -> Result<Reply> {
//!         if call.is_write() {
//!             self.writes.fetch_add(1, Ordering::Relaxed);
//!         }
//!         call.run(self.next.as_ref()).await
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = CountWrites { next: Arc::new(MemoryStore::new()), writes: AtomicUsize::new(0) };
//! store.put("/a", b"1", ExpectedVersion::Any).await?;
//! store.put_version("/a", b"2", ExpectedVersion::Any).await?;
//! assert_eq!(store.get("/a").await?.unwrap().value, b"2");
//! assert_eq!(store.writes.load(Ordering::Relaxed), 2);
//! # Ok::<(), bkswitch_metadata_store::MetadataError>(())
//! # }).unwrap();
//! ```

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{MetadataError, Operation, Result};
use crate::store::MetadataStore;
use crate::types::{CreateMode, ExpectedVersion, GetResult, Stat, WatchStream};

/// One call of a [`MetadataStore`] method, with its arguments borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call<'a> {
    /// [`MetadataStore::get`].
    Get {
        /// The node.
        path: &'a str,
    },
    /// [`MetadataStore::put`].
    Put {
        /// The node.
        path: &'a str,
        /// Its new value.
        value: &'a [u8],
        /// The condition.
        expected: ExpectedVersion,
    },
    /// [`MetadataStore::put_version`].
    PutVersion {
        /// The node.
        path: &'a str,
        /// Its new value.
        value: &'a [u8],
        /// The condition.
        expected: ExpectedVersion,
    },
    /// [`MetadataStore::create`].
    Create {
        /// The node (the prefix of a sequential one).
        path: &'a str,
        /// Its value.
        value: &'a [u8],
        /// Ephemeral and/or sequential.
        mode: CreateMode,
    },
    /// [`MetadataStore::delete`].
    Delete {
        /// The node.
        path: &'a str,
        /// The condition.
        expected: ExpectedVersion,
    },
    /// [`MetadataStore::exists`].
    Exists {
        /// The node.
        path: &'a str,
    },
    /// [`MetadataStore::children`].
    Children {
        /// The parent.
        path: &'a str,
    },
    /// [`MetadataStore::watch`].
    Watch {
        /// The node.
        path: &'a str,
    },
    /// [`MetadataStore::close`].
    Close,
    /// [`MetadataStore::import_version`].
    ImportVersion {
        /// The node.
        path: &'a str,
        /// Its value.
        value: &'a [u8],
        /// The version it must have.
        version: i64,
    },
    /// [`MetadataStore::import_sequential_counter`].
    ImportSequentialCounter {
        /// The parent.
        path: &'a str,
        /// The lowest next sequential suffix.
        next: i64,
    },
}

impl<'a> Call<'a> {
    /// The operation, as errors name it (imports and `put_version` are puts).
    pub fn operation(&self) -> Operation {
        match self {
            Call::Get { .. } => Operation::Get,
            Call::Put { .. }
            | Call::PutVersion { .. }
            | Call::ImportVersion { .. }
            | Call::ImportSequentialCounter { .. } => Operation::Put,
            Call::Create { .. } => Operation::Create,
            Call::Delete { .. } => Operation::Delete,
            Call::Exists { .. } => Operation::Exists,
            Call::Children { .. } => Operation::Children,
            Call::Watch { .. } => Operation::Watch,
            Call::Close => Operation::Close,
        }
    }

    /// The path the call names (`""` for [`Call::Close`]).
    pub fn path(&self) -> &'a str {
        match *self {
            Call::Get { path }
            | Call::Put { path, .. }
            | Call::PutVersion { path, .. }
            | Call::Create { path, .. }
            | Call::Delete { path, .. }
            | Call::Exists { path }
            | Call::Children { path }
            | Call::Watch { path }
            | Call::ImportVersion { path, .. }
            | Call::ImportSequentialCounter { path, .. } => path,
            Call::Close => "",
        }
    }

    /// Whether the call may change the store's content (every call but
    /// reads, watches and close).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Call::Put { .. }
                | Call::PutVersion { .. }
                | Call::Create { .. }
                | Call::Delete { .. }
                | Call::ImportVersion { .. }
                | Call::ImportSequentialCounter { .. }
        )
    }

    /// Makes the call on `store`.
    ///
    /// # Errors
    ///
    /// Those of the method called.
    pub async fn run(self, store: &(dyn MetadataStore + '_)) -> Result<Reply> {
        Ok(match self {
            Call::Get { path } => Reply::Get(store.get(path).await?),
            Call::Put {
                path,
                value,
                expected,
            } => Reply::Stat(store.put(path, value, expected).await?),
            Call::PutVersion {
                path,
                value,
                expected,
            } => Reply::Version(store.put_version(path, value, expected).await?),
            Call::Create { path, value, mode } => {
                let (created, stat) = store.create(path, value, mode).await?;
                Reply::Created(created, stat)
            }
            Call::Delete { path, expected } => {
                store.delete(path, expected).await?;
                Reply::Done
            }
            Call::Exists { path } => Reply::Exists(store.exists(path).await?),
            Call::Children { path } => Reply::Children(store.children(path).await?),
            Call::Watch { path } => Reply::Watch(store.watch(path).await?),
            Call::Close => {
                store.close().await?;
                Reply::Done
            }
            Call::ImportVersion {
                path,
                value,
                version,
            } => Reply::Stat(store.import_version(path, value, version).await?),
            Call::ImportSequentialCounter { path, next } => {
                Reply::Stat(store.import_sequential_counter(path, next).await?)
            }
        })
    }

    /// The call with its arguments copied, to make it later (a delayed
    /// write in a fault injector).
    pub fn to_owned_call(&self) -> OwnedCall {
        OwnedCall {
            path: self.path().to_owned(),
            value: match *self {
                Call::Put { value, .. }
                | Call::PutVersion { value, .. }
                | Call::Create { value, .. }
                | Call::ImportVersion { value, .. } => value.to_vec(),
                _ => Vec::new(),
            },
            shape: self.shape(),
        }
    }
}

/// A [`Call`] that owns its arguments ([`Call::to_owned_call`]).
#[derive(Debug, Clone)]
pub struct OwnedCall {
    path: String,
    value: Vec<u8>,
    shape: Call<'static>,
}

impl OwnedCall {
    /// The call, borrowing from `self`.
    pub fn as_call(&self) -> Call<'_> {
        let (path, value) = (self.path.as_str(), self.value.as_slice());
        match self.shape {
            Call::Get { .. } => Call::Get { path },
            Call::Put { expected, .. } => Call::Put {
                path,
                value,
                expected,
            },
            Call::PutVersion { expected, .. } => Call::PutVersion {
                path,
                value,
                expected,
            },
            Call::Create { mode, .. } => Call::Create { path, value, mode },
            Call::Delete { expected, .. } => Call::Delete { path, expected },
            Call::Exists { .. } => Call::Exists { path },
            Call::Children { .. } => Call::Children { path },
            Call::Watch { .. } => Call::Watch { path },
            Call::Close => Call::Close,
            Call::ImportVersion { version, .. } => Call::ImportVersion {
                path,
                value,
                version,
            },
            Call::ImportSequentialCounter { next, .. } => {
                Call::ImportSequentialCounter { path, next }
            }
        }
    }
}

// `shape` keeps only the variant and its `Copy` arguments; its borrowed
// fields are empty statics, replaced by `as_call`.
impl Call<'_> {
    fn shape(&self) -> Call<'static> {
        match *self {
            Call::Get { .. } => Call::Get { path: "" },
            Call::Put { expected, .. } => Call::Put {
                path: "",
                value: &[],
                expected,
            },
            Call::PutVersion { expected, .. } => Call::PutVersion {
                path: "",
                value: &[],
                expected,
            },
            Call::Create { mode, .. } => Call::Create {
                path: "",
                value: &[],
                mode,
            },
            Call::Delete { expected, .. } => Call::Delete { path: "", expected },
            Call::Exists { .. } => Call::Exists { path: "" },
            Call::Children { .. } => Call::Children { path: "" },
            Call::Watch { .. } => Call::Watch { path: "" },
            Call::Close => Call::Close,
            Call::ImportVersion { version, .. } => Call::ImportVersion {
                path: "",
                value: &[],
                version,
            },
            Call::ImportSequentialCounter { next, .. } => {
                Call::ImportSequentialCounter { path: "", next }
            }
        }
    }
}

/// The answer to a [`Call`]: one variant per result type.
#[derive(Debug)]
pub enum Reply {
    /// Of [`Call::Get`].
    Get(Option<GetResult>),
    /// Of [`Call::Put`] and the imports.
    Stat(Stat),
    /// Of [`Call::PutVersion`].
    Version(i64),
    /// Of [`Call::Create`]: the created path and its metadata.
    Created(String, Stat),
    /// Of [`Call::Delete`] and [`Call::Close`].
    Done,
    /// Of [`Call::Exists`].
    Exists(Option<Stat>),
    /// Of [`Call::Children`].
    Children(Vec<String>),
    /// Of [`Call::Watch`].
    Watch(WatchStream),
}

/// A decorator of a [`MetadataStore`]: every type that implements it is a
/// `MetadataStore` (blanket impl), each method made through
/// [`call`](Self::call); `can_import_versions` and `session_generation` are
/// those of [`next`](Self::next). See the [module documentation](self).
#[async_trait]
pub trait Layer: Debug + Send + Sync {
    /// The store the layer decorates: where calls go by default. It may change
    /// between calls (a migration's flip).
    fn next(&self) -> Arc<dyn MetadataStore>;

    /// Makes one call. The default forwards it to [`next`](Self::next); a
    /// layer answers with the [`Reply`] variant of the call's method (another
    /// variant is turned into an [`InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// error naming the layer).
    ///
    /// # Errors
    ///
    /// Those of the call, and those the layer adds.
    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        call.run(self.next().as_ref()).await
    }
}

fn wrong_reply<L: Layer + ?Sized>(layer: &L, call: Call<'_>, reply: &Reply) -> MetadataError {
    MetadataError::InvalidArgument {
        op: call.operation(),
        path: call.path().to_owned(),
        reason: format!(
            "the store layer {layer:?} answered a {:?} call with {reply:?} (a defect of that \
             layer: it must answer with the reply of the method called)",
            call.shape()
        ),
    }
}

macro_rules! expect_reply {
    ($layer:expr, $call:expr, $pattern:pat => $value:expr) => {{
        let call = $call;
        match $layer.call(call).await? {
            $pattern => Ok($value),
            other => Err(wrong_reply($layer, call, &other)),
        }
    }};
}

#[async_trait]
impl<L: Layer> MetadataStore for L {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        expect_reply!(self, Call::Get { path }, Reply::Get(r) => r)
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        let call = Call::Put {
            path,
            value,
            expected,
        };
        expect_reply!(self, call, Reply::Stat(s) => s)
    }

    async fn put_version(
        &self,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
    ) -> Result<i64> {
        let call = Call::PutVersion {
            path,
            value,
            expected,
        };
        expect_reply!(self, call, Reply::Version(v) => v)
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        let call = Call::Create { path, value, mode };
        expect_reply!(self, call, Reply::Created(p, s) => (p, s))
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        expect_reply!(self, Call::Delete { path, expected }, Reply::Done => ())
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        expect_reply!(self, Call::Exists { path }, Reply::Exists(s) => s)
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        expect_reply!(self, Call::Children { path }, Reply::Children(c) => c)
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        expect_reply!(self, Call::Watch { path }, Reply::Watch(w) => w)
    }

    async fn close(&self) -> Result<()> {
        expect_reply!(self, Call::Close, Reply::Done => ())
    }

    /// The capability of [`Layer::next`]: a layer changes calls, not what
    /// the store it decorates can do.
    fn can_import_versions(&self) -> bool {
        self.next().can_import_versions()
    }

    /// The session of [`Layer::next`].
    fn session_generation(&self) -> Option<u64> {
        self.next().session_generation()
    }

    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat> {
        let call = Call::ImportVersion {
            path,
            value,
            version,
        };
        expect_reply!(self, call, Reply::Stat(s) => s)
    }

    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat> {
        let call = Call::ImportSequentialCounter { path, next };
        expect_reply!(self, call, Reply::Stat(s) => s)
    }
}
