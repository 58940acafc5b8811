//! [`SchemeClientFactory`]: one [`ClientFactory`] per URI scheme.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::api::{BookKeeper, ClientFactory};
use crate::error::{BkError, BkErrorKind, Result};

/// A [`ClientFactory`] that hands each metadata-service URI to the factory
/// registered for its scheme, so that one node can hold clusters of several
/// kinds: `memory://` clusters living in the process beside real BookKeeper
/// clusters (`zk://`, `zk+hierarchical://`, `zk+longhierarchical://`, …).
///
/// The scheme is the text before `://` (or, for `metadata-store:zk:…`, before
/// the second `:`), compared without regard to case. A URI whose scheme has no
/// factory is refused with [`InvalidArgument`](BkErrorKind::InvalidArgument)
/// (-14) naming the URI and every supported scheme.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use bkswitch_bk_client::{ClientFactory, MemoryClientFactory, SchemeClientFactory};
///
/// let factory = SchemeClientFactory::new()
///     .with_scheme("memory", Arc::new(MemoryClientFactory::new()));
/// assert_eq!(factory.create("memory://old").await.unwrap().cluster_name(), "old");
/// let err = factory.create("zk+hierarchical://127.0.0.1:2181/ledgers").await.unwrap_err();
/// assert_eq!(err.code(), -14);
/// assert!(err.to_string().contains("memory"));
/// # });
/// ```
#[derive(Clone, Default)]
pub struct SchemeClientFactory {
    factories: Vec<(String, Arc<dyn ClientFactory>)>,
}

impl fmt::Debug for SchemeClientFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemeClientFactory")
            .field("schemes", &self.schemes())
            .finish()
    }
}

impl SchemeClientFactory {
    /// A factory with no scheme (every URI is refused).
    pub fn new() -> SchemeClientFactory {
        SchemeClientFactory::default()
    }

    /// URIs of `scheme` (e.g. `memory`, `zk+hierarchical`; without `://`) go to
    /// `factory`. A scheme given twice keeps the last factory.
    pub fn with_scheme(
        mut self,
        scheme: impl Into<String>,
        factory: Arc<dyn ClientFactory>,
    ) -> SchemeClientFactory {
        let scheme = scheme.into().to_ascii_lowercase();
        self.factories.retain(|(s, _)| *s != scheme);
        self.factories.push((scheme, factory));
        self
    }

    /// The same factory for several schemes.
    pub fn with_schemes<'a>(
        self,
        schemes: impl IntoIterator<Item = &'a str>,
        factory: &Arc<dyn ClientFactory>,
    ) -> SchemeClientFactory {
        schemes
            .into_iter()
            .fold(self, |f, s| f.with_scheme(s, factory.clone()))
    }

    /// The schemes this factory handles, in the order they were added.
    pub fn schemes(&self) -> Vec<&str> {
        self.factories.iter().map(|(s, _)| s.as_str()).collect()
    }

    /// The scheme of `uri` (lower case), if it has one.
    pub fn scheme_of(uri: &str) -> Option<String> {
        if let Some((scheme, _)) = uri.split_once("://") {
            return (!scheme.is_empty()).then(|| scheme.to_ascii_lowercase());
        }
        // `metadata-store:zk:host:port/root`, as Pulsar also accepts.
        let mut parts = uri.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), Some(_)) if !a.is_empty() && !b.is_empty() => {
                Some(format!("{a}:{b}").to_ascii_lowercase())
            }
            _ => None,
        }
    }

    fn factory_for(&self, uri: &str) -> Result<&Arc<dyn ClientFactory>> {
        let scheme = SchemeClientFactory::scheme_of(uri);
        scheme
            .as_deref()
            .and_then(|scheme| {
                self.factories
                    .iter()
                    .find(|(s, _)| s == scheme)
                    .map(|(_, f)| f)
            })
            .ok_or_else(|| {
                BkError::new(
                    BkErrorKind::InvalidArgument,
                    format!(
                        "cannot create a client for metadata service URI '{uri}': {}; supported \
                         schemes: {}",
                        match &scheme {
                            Some(s) => format!("no client for scheme '{s}'"),
                            None => "it has no scheme (expected '<scheme>://…')".to_owned(),
                        },
                        self.schemes()
                            .iter()
                            .map(|s| format!("'{s}://'"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
    }
}

#[async_trait]
impl ClientFactory for SchemeClientFactory {
    async fn create(&self, metadata_service_uri: &str) -> Result<Arc<dyn BookKeeper>> {
        self.factory_for(metadata_service_uri)?
            .create(metadata_service_uri)
            .await
    }

    async fn create_named(
        &self,
        cluster_name: &str,
        metadata_service_uri: &str,
    ) -> Result<Arc<dyn BookKeeper>> {
        self.factory_for(metadata_service_uri)?
            .create_named(cluster_name, metadata_service_uri)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryClientFactory;

    #[test]
    fn schemes_are_read_from_both_uri_forms() {
        assert_eq!(
            SchemeClientFactory::scheme_of("zk+hierarchical://h:1/ledgers").as_deref(),
            Some("zk+hierarchical")
        );
        assert_eq!(
            SchemeClientFactory::scheme_of("MEMORY://old").as_deref(),
            Some("memory")
        );
        assert_eq!(
            SchemeClientFactory::scheme_of("metadata-store:zk:h:1/ledgers").as_deref(),
            Some("metadata-store:zk")
        );
        assert_eq!(SchemeClientFactory::scheme_of("no-scheme"), None);
        assert_eq!(SchemeClientFactory::scheme_of("://x"), None);
    }

    #[tokio::test]
    async fn unknown_and_missing_schemes_are_refused_naming_the_supported_ones() {
        let f =
            SchemeClientFactory::new().with_scheme("memory", Arc::new(MemoryClientFactory::new()));
        for uri in ["zk://h:1/ledgers", "old"] {
            let err = f.create_named("old", uri).await.unwrap_err();
            assert_eq!(err.kind(), BkErrorKind::InvalidArgument, "{uri}");
            let msg = err.to_string();
            assert!(msg.contains(uri) && msg.contains("'memory://'"), "{msg}");
        }
        let c = f.create_named("old", "memory://old").await.unwrap();
        assert_eq!(c.cluster_name(), "old");
    }
}
