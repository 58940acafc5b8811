//! A stage: one step run on many ledgers (or locators) with at most
//! `migration_concurrency` steps in flight.

use std::future::Future;

use futures::stream::{self, StreamExt};

use super::Orchestrator;
use crate::error::Result;

impl Orchestrator {
    /// Runs `step` on every item, at most
    /// [`migration_concurrency`](super::config::OrchestratorConfig::migration_concurrency)
    /// at once. Every step runs to its end even when another fails (each
    /// records its own outcome); the first error, in completion order, is
    /// returned.
    pub(super) async fn stage<T, F, Fut>(
        &self,
        items: impl IntoIterator<Item = T>,
        step: F,
    ) -> Result<()>
    where
        F: FnMut(T) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let limit = self.inner.config.migration_concurrency.max(1);
        let results: Vec<Result<()>> = stream::iter(items)
            .map(step)
            .buffer_unordered(limit)
            .collect()
            .await;
        results.into_iter().collect()
    }
}
