//! The single-ACTIVE protocol ([I12](bkswitch_docs::invariants::I12)): the
//! `active` marker first, then the two status flips, rolled forward by whoever
//! finds a transition half done.

use super::*;

impl Registry {
    /// The ACTIVE cluster according to `<root>/active`: the committed one, or
    /// the target of a promotion in progress. `None` when none was ever
    /// activated through the registry.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn active(&self) -> Result<Option<String>> {
        let (m, _) = self.marker().await?;
        Ok(m.pending.map(|p| p.to).or(m.active))
    }

    /// Makes `name` the ACTIVE cluster: the CLEANUP flip, old → DEPRECATED then
    /// new → ACTIVE, as two CAS (see the [type docs](Self) for the order and
    /// why at most one record is ACTIVE at every instant; between the two CAS
    /// none is). Idempotent when `name` is already ACTIVE. A pending promotion
    /// left by another node is finished first.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`], [`RegistryError::Deprecated`],
    /// [`RegistryError::Conflict`], [`RegistryError::Corrupt`],
    /// [`RegistryError::Metadata`].
    pub async fn promote_active(&self, name: &str) -> Result<()> {
        self.promote(name, false).await
    }

    pub(super) async fn promote(&self, name: &str, only_if_none: bool) -> Result<()> {
        let marker_path = self.path("active");
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (marker, mver) = self.marker().await?;
            if let (Some(p), Some(v)) = (&marker.pending, mver) {
                self.roll_forward(p, v).await?;
                continue;
            }
            let (rec, rver) = self.get_required(name).await?;
            let mut from = marker.active.clone();
            if from.is_none() && mver.is_none() {
                // No marker yet: adopt an ACTIVE record written without it.
                from = self
                    .list()
                    .await?
                    .into_iter()
                    .find(|r| r.status == ClusterStatus::Active && r.name != name)
                    .map(|r| r.name);
            }
            if from.as_deref() == Some(name) && rec.status == ClusterStatus::Active {
                return Ok(());
            }
            if only_if_none {
                if let Some(active) = from.clone().filter(|a| a != name) {
                    return Err(RegistryError::AnotherActive {
                        name: name.to_owned(),
                        active,
                    });
                }
            }
            if rec.status == ClusterStatus::Deprecated {
                return Err(RegistryError::Deprecated {
                    name: name.to_owned(),
                });
            }
            // 1. touch
            match self
                .write(&self.path(name), &rec, ExpectedVersion::Exactly(rver))
                .await
            {
                Ok(_) => {}
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
            // 2. claim
            let claim = ActiveMarker {
                active: marker.active.clone(),
                pending: Some(Transition {
                    from: from.filter(|f| f != name),
                    to: name.to_owned(),
                }),
            };
            let expected = mver.map_or(ExpectedVersion::NotExists, ExpectedVersion::Exactly);
            let v = match self.write(&marker_path, &claim, expected).await {
                Ok(v) => v,
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            };
            // 3.–5.
            if let Some(p) = &claim.pending {
                self.roll_forward(p, v).await?;
            }
            return Ok(());
        }
        Err(RegistryError::Conflict {
            path: marker_path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// Steps 3–5 of a claimed transition whose marker version is `mver`.
    async fn roll_forward(&self, p: &Transition, mver: i64) -> Result<()> {
        if let Some(from) = &p.from {
            if !self
                .flip_under_claim(from, ClusterStatus::Deprecated, mver)
                .await?
            {
                return Ok(());
            }
        }
        if !self
            .flip_under_claim(&p.to, ClusterStatus::Active, mver)
            .await?
        {
            return Ok(());
        }
        let commit = ActiveMarker {
            active: Some(p.to.clone()),
            pending: None,
        };
        match self
            .write(
                &self.path("active"),
                &commit,
                ExpectedVersion::Exactly(mver),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(RegistryError::Metadata(e)) if e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sets `name`'s status to `status` if the marker still holds the claim of
    /// version `mver`. Returns `false` when the claim is gone (finished by
    /// someone else).
    async fn flip_under_claim(&self, name: &str, status: ClusterStatus, mver: i64) -> Result<bool> {
        let path = self.path(name);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let Some((mut rec, v)) = self.read::<ClusterRecord>(&path).await? else {
                if status == ClusterStatus::Active {
                    return Err(RegistryError::Corrupt {
                        path,
                        reason: "the cluster being promoted was deleted".to_owned(),
                    });
                }
                return Ok(true);
            };
            let (_, current) = self.marker().await?;
            if current != Some(mver) {
                return Ok(false);
            }
            if rec.status == status
                || (status == ClusterStatus::Deprecated && rec.status != ClusterStatus::Active)
            {
                return Ok(true);
            }
            rec.status = status;
            match self.write(&path, &rec, ExpectedVersion::Exactly(v)).await {
                Ok(_) => return Ok(true),
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(RegistryError::Conflict {
            path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }
}
