//! The bootstrap marker (written once, [I17](bkswitch_docs::invariants::I17)) and
//! the switch directive.

use super::*;

impl Registry {
    /// Records the bootstrap cluster once (create-if-absent, never rewritten,
    /// [I17](bkswitch_docs::invariants::I17)) and returns the stored marker, which names another cluster when one
    /// was recorded before.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidName`], [`RegistryError::Corrupt`],
    /// [`RegistryError::Metadata`].
    pub async fn ensure_bootstrap(&self, name: &str) -> Result<BootstrapMarker> {
        validate_name(name)?;
        // Recorded already (every start after the first): nothing to write,
        // so a start goes through while writes are refused (a metadata
        // migration's pause).
        if let Some(marker) = self.bootstrap().await? {
            return Ok(marker);
        }
        let path = self.path("bootstrap");
        let marker = BootstrapMarker {
            bootstrap_cluster_name: name.to_owned(),
            recorded_at: now_ms(),
            extra: Map::new(),
        };
        let bytes = serde_json::to_vec(&marker).map_err(|e| RegistryError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if self.store.put_if_absent(&path, &bytes).await?.is_some() {
            return Ok(marker);
        }
        self.bootstrap()
            .await?
            .ok_or(RegistryError::Conflict { path, attempts: 1 })
    }

    /// The bootstrap marker, if recorded.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn bootstrap(&self) -> Result<Option<BootstrapMarker>> {
        Ok(self.read(&self.path("bootstrap")).await?.map(|(m, _)| m))
    }

    /// The current switch directive, if any.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn switch_directive(&self) -> Result<Option<SwitchDirective>> {
        Ok(self
            .read(&self.path("switch-target"))
            .await?
            .map(|(d, _)| d))
    }

    /// Writes a directive to switch to `target` with the next epoch (CAS
    /// against the version read). Idempotent: when `target` already is the
    /// directive's target, the stored directive is returned and nothing is
    /// written.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`] for an unknown cluster,
    /// [`RegistryError::Deprecated`] for a DEPRECATED one (nothing written),
    /// [`RegistryError::InvalidName`], [`RegistryError::Conflict`],
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn write_directive(
        &self,
        target: &str,
        origin: Option<&str>,
    ) -> Result<SwitchDirective> {
        let path = self.path("switch-target");
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (rec, _) = self.get_required(target).await?;
            let current = self.read::<SwitchDirective>(&path).await?;
            if let Some((d, _)) = &current {
                if d.target == target {
                    return Ok(d.clone());
                }
            }
            if rec.status == ClusterStatus::Deprecated {
                return Err(RegistryError::Deprecated {
                    name: target.to_owned(),
                });
            }
            let (epoch, expected, extra) = match &current {
                Some((d, v)) => (d.epoch + 1, ExpectedVersion::Exactly(*v), d.extra.clone()),
                None => (1, ExpectedVersion::NotExists, Map::new()),
            };
            let directive = SwitchDirective {
                target: target.to_owned(),
                origin: origin.map(str::to_owned),
                epoch,
                ts: now_ms(),
                extra,
            };
            match self.write(&path, &directive, expected).await {
                Ok(_) => return Ok(directive),
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(RegistryError::Conflict {
            path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// The current switch directive with its store version (for a caller that
    /// validates against it and then writes with
    /// [`put_directive`](Self::put_directive)).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn switch_directive_versioned(&self) -> Result<Option<(SwitchDirective, i64)>> {
        self.read(&self.path("switch-target")).await
    }

    /// Writes `directive` with one compare-and-set against `expected` (no
    /// retry, no validation: the caller validated against the version it read).
    /// Returns the new version.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Metadata`] with a conflict when the directive changed
    /// since `expected` (nothing written); other store errors.
    pub async fn put_directive(
        &self,
        directive: &SwitchDirective,
        expected: ExpectedVersion,
    ) -> Result<i64> {
        self.write(&self.path("switch-target"), directive, expected)
            .await
    }
}
