//! The participant's dirty set: the paths it wrote, recorded as it writes
//! and published as pages when the coordinator asks; a failed publication
//! puts what it did not publish back.

use bkswitch_metadata_store::{ExpectedVersion, MetadataStore, Result};
use serde::{Deserialize, Serialize};

use crate::participant::MigratingStore;
use crate::record::{dirty_path, is_control_path};
use crate::sync::parent_of;

/// One published page of dirty paths (JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct DirtyPage {
    pub(crate) paths: Vec<String>,
    pub(crate) overflow: bool,
}

impl MigratingStore {
    /// Publishes the dirty set as pages under [`dirty_path`] and empties it.
    pub(crate) async fn publish(&self, store: &dyn MetadataStore, id: &str) -> Result<()> {
        let (paths, overflow, seq) = {
            let mut st = self.inner.state.lock();
            let paths = std::mem::take(&mut st.dirty);
            let overflow = std::mem::take(&mut st.overflow);
            st.page_seq += 1;
            (paths, overflow, st.page_seq)
        };
        if paths.is_empty() && !overflow {
            return Ok(());
        }
        let mut page = DirtyPage {
            paths: Vec::new(),
            overflow,
        };
        let mut bytes = 0;
        let mut n = 0;
        let base = dirty_path(id);
        let name = &self.inner.options.name;
        let mut pages = Vec::new();
        for p in paths {
            bytes += p.len() + 4;
            page.paths.push(p);
            if bytes >= self.inner.options.page_bytes {
                pages.push(std::mem::take(&mut page));
                bytes = 0;
            }
        }
        if !page.paths.is_empty() || page.overflow {
            pages.push(page);
        }
        for (i, page) in pages.iter().enumerate() {
            let value = serde_json::to_vec(page).expect("serializes");
            if let Err(e) = store
                .put(
                    &format!("{base}/{seq:012}-{name}-{n:06}"),
                    &value,
                    ExpectedVersion::NotExists,
                )
                .await
            {
                // What was not published goes back to the dirty set (and
                // the overflow with it): the next answer publishes it again.
                // A page that failed but was applied is published twice,
                // which only copies its paths twice.
                self.restore_dirty(&pages[i..]);
                return Err(e);
            }
            n += 1;
        }
        Ok(())
    }

    /// Puts `pages` back into the dirty set after a failed publication.
    fn restore_dirty(&self, pages: &[DirtyPage]) {
        let mut st = self.inner.state.lock();
        for page in pages {
            st.overflow |= page.overflow;
            if !st.overflow {
                st.dirty.extend(page.paths.iter().cloned());
            }
        }
        if st.overflow || st.dirty.len() > self.inner.options.dirty_limit {
            st.dirty.clear();
            st.overflow = true;
        }
    }

    pub(crate) fn track(&self, path: &str) {
        if is_control_path(path) {
            return;
        }
        let mut st = self.inner.state.lock();
        if st.tracking.is_none() || st.overflow {
            return;
        }
        st.dirty.insert(path.to_owned());
        if let Some(parent) = parent_of(path) {
            if parent != "/" {
                st.dirty.insert(parent.to_owned());
            }
        }
        if st.dirty.len() > self.inner.options.dirty_limit {
            st.dirty.clear();
            st.overflow = true;
        }
    }
}
