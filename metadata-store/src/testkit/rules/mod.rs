//! One public async function per rule of the [`MetadataStore`](crate::MetadataStore)
//! contract, one module per rule family.
//!
//! Each rule takes the [`MetadataStoreTestEnv`](crate::testkit::MetadataStoreTestEnv),
//! opens a fresh namespace and checks with assertions; it returns `Ok(())` when
//! every check held (a failed check panics, and
//! [`run_rule`](crate::testkit::run_rule) reports the panic under the rule's name).
//! Every rule is also re-exported here, so `testkit::rules::<rule>` names it
//! whatever its family.

pub mod children;
pub mod delete;
pub mod extension;
pub mod sessions;
mod support;
pub mod validation;
pub mod versions;
pub mod watches;

pub use children::{
    children_sorted_and_missing_is_empty, cversion_counts_child_creations_and_deletions, root_node,
    sequential_names_follow_cversion,
};
pub use delete::delete_versions_and_errors;
pub use extension::extension_helpers;
pub use sessions::{closed_store_fails_and_ends_streams, ephemeral_nodes_end_with_their_session};
pub use support::EVENT_TIMEOUT;
pub use validation::{invalid_paths_change_nothing, oversized_values_are_rejected};
pub use versions::{
    cas_race_exactly_one_writer_wins, create_if_absent_race_exactly_one_wins, get_put_versions,
    put_creates_parents, put_exactly_on_missing_is_not_found, put_not_exists_on_existing_fails,
    put_version_writes_as_put_does, put_wrong_version_is_bad_version, sequential_counter_import,
    version_import_when_offered,
};
pub use watches::{
    notify_children_changed, notify_created_modified_deleted, notify_latest_value_is_never_lost,
    watch_streams_are_independent,
};
