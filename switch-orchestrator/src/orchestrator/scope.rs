//! Canaries: the coordinator of one managed-ledger prefix, the coordinators
//! of a registry, taking over unfinished canaries, and what a canary's scope
//! holds.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::records::Records;
use super::{new_instance_id, schema_prefix, Inner, Orchestrator};
use crate::error::{OrchestratorError, Result};
use crate::model::{LedgerKind, Phase, SwitchStatus};

impl Orchestrator {
    /// The coordinator of the canary of `prefix`: the same switch, scoped to
    /// the managed ledgers (and schema ids) that start with `prefix`. Its
    /// switch writes the registry's per-prefix override instead of the
    /// cluster-wide directive, its rollback removes it, its cleanup never
    /// flips the clusters' statuses, and its records live under
    /// `<registry root>/canaries/<hex of the prefix>`.
    pub fn for_prefix(&self, prefix: &str) -> Orchestrator {
        self.view(Some(prefix))
    }

    /// A coordinator on the same store, registry, clients and settings for
    /// `scope` (a canary's prefix, or `None`: the cluster-wide switches),
    /// with an identity of its own.
    pub(crate) fn view(&self, scope: Option<&str>) -> Orchestrator {
        let shared = &self.inner;
        let records = Records::new(
            shared.store.clone(),
            shared.registry.root(),
            scope,
            new_instance_id(),
            shared.records.clock().clone(),
        );
        Orchestrator {
            inner: Arc::new(Inner {
                store: shared.store.clone(),
                registry: shared.registry.clone(),
                clients: shared.clients.clone(),
                owners: shared.owners.clone(),
                config: shared.config.clone(),
                idgen: shared.idgen.clone(),
                records: Arc::new(records),
                copied: AtomicU64::new(0),
                already_present: AtomicU64::new(0),
                progress: shared.progress.clone(),
                scope: scope.map(str::to_owned),
            }),
        }
    }

    /// Every coordinator of this registry: the cluster-wide one, then one
    /// per recorded canary.
    pub(crate) async fn coordinators(&self) -> Result<Vec<Orchestrator>> {
        let mut out = vec![self.view(None)];
        for prefix in self.canary_prefixes().await? {
            out.push(self.view(Some(&prefix)));
        }
        Ok(out)
    }

    /// Takes over every canary left in BUILD, PROMOTE or ROLLING_BACK (its
    /// coordinator died, or this node restarted): resumes it to SWITCHED or
    /// ROLLED_BACK. A canary whose coordinator still works on it (its lease
    /// is held) is left to it. The elected leader calls this regularly (as
    /// it resumes a cluster-wide switch whose origin died);
    /// [`resume_all`](Self::resume_all) calls it too.
    ///
    /// # Errors
    ///
    /// The first error of a resumed canary other than
    /// [`OrchestratorError::Locked`].
    pub async fn resume_canaries(&self) -> Result<Vec<SwitchStatus>> {
        let mut out = Vec::new();
        let mut first_error = None;
        for prefix in self.canary_prefixes().await? {
            let canary = self.for_prefix(&prefix);
            let Some(id) = canary.switch_ids().await?.pop() else {
                continue;
            };
            let (rec, _) = canary.records().load(&id).await?;
            if !matches!(
                rec.phase,
                Phase::Build | Phase::Promote | Phase::RollingBack
            ) {
                continue;
            }
            tracing::info!(prefix, switch_id = %id, phase = %rec.phase,
                "taking over an unfinished canary");
            match canary.resume(&id).await {
                Ok(st) => out.push(st),
                Err(OrchestratorError::Locked { .. }) => {}
                Err(e) => {
                    tracing::warn!(prefix, switch_id = %id, error = %e,
                        "resuming the canary failed; retried later");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The prefixes of every canary recorded under the registry (running,
    /// finished, rolled back or absorbed by a cluster-wide switch).
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::Metadata`].
    pub async fn canary_prefixes(&self) -> Result<Vec<String>> {
        let root = format!("{}/canaries", self.inner.registry.root());
        let names = self
            .inner
            .store
            .children(&root)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("listing `{root}`"), e))?;
        Ok(names
            .iter()
            .filter_map(|hex| {
                let bytes: Option<Vec<u8>> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                    .collect();
                String::from_utf8(bytes?).ok()
            })
            .collect())
    }

    /// The canary prefix of this coordinator, if it is one.
    pub fn scope(&self) -> Option<&str> {
        self.inner.scope.as_deref()
    }

    /// Whether `f` is within this coordinator's scope.
    pub(crate) fn in_scope(&self, f: &crate::scan::Found) -> bool {
        let Some(prefix) = self.inner.scope.as_deref() else {
            return true;
        };
        match f.kind {
            LedgerKind::Cursor => f
                .managed_ledger
                .as_deref()
                .is_some_and(|ml| ml.starts_with(prefix)),
            LedgerKind::Schema => f
                .owner_path
                .strip_prefix(bkswitch_proto::paths::SCHEMAS_ROOT)
                .and_then(|p| p.strip_prefix('/'))
                .is_some_and(|id| id.starts_with(&schema_prefix(prefix))),
        }
    }
}
