//! The list of rules ([`all_rules`], [`RULE_NAMES`]) and how they are run
//! ([`run_rule`], [`run_all`]).

use super::env::MetadataStoreTestEnv;
use super::rules;
use super::{ConformanceReport, Rule, RuleResult, SUITE};

macro_rules! rule_list {
    ($($family:ident::$name:ident => $description:literal,)*) => {
        /// Every rule of the suite, in run order.
        pub fn all_rules<E: MetadataStoreTestEnv + ?Sized>() -> Vec<Rule<E>> {
            vec![$(Rule {
                name: stringify!($name),
                family: stringify!($family),
                description: $description,
                run: |env| Box::pin(rules::$family::$name(env)),
            }),*]
        }

        /// Names of every rule, in run order.
        pub const RULE_NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

rule_list! {
    versions::get_put_versions => "versions start at 0 and grow by one per write; get and exists agree",
    versions::put_creates_parents => "put and create create missing parents: empty, persistent, version 0",
    versions::put_not_exists_on_existing_fails => "put NotExists or create of an existing node -> AlreadyExists, nothing written",
    versions::put_exactly_on_missing_is_not_found => "put Exactly(v) of a missing node -> NotFound, nothing created",
    versions::put_wrong_version_is_bad_version => "put with a stale version -> BadVersion; a negative version -> InvalidArgument",
    versions::cas_race_exactly_one_writer_wins => "two sessions compare-and-set the same version: exactly one wins",
    versions::create_if_absent_race_exactly_one_wins => "two sessions create the same node at once: exactly one wins",
    delete::delete_versions_and_errors => "delete: stale version -> BadVersion, missing -> NotFound, with children -> NotEmpty",
    children::children_sorted_and_missing_is_empty => "children are names, sorted; a missing node has none",
    children::sequential_names_follow_cversion => "sequential suffixes count the parent's child creations, as %010d",
    children::cversion_counts_child_creations_and_deletions => "cversion counts creations and deletions of direct children only",
    sessions::ephemeral_nodes_end_with_their_session => "ephemeral nodes belong to their session, have no children, end with it",
    validation::invalid_paths_change_nothing => "every operation rejects invalid paths with InvalidPath and changes nothing",
    validation::oversized_values_are_rejected => "values up to MAX_VALUE_LEN are stored; longer ones -> InvalidArgument",
    watches::notify_created_modified_deleted => "a watch reports creation, writes and deletion of its node, by any session",
    watches::notify_children_changed => "a watch reports creations and deletions of direct children only",
    watches::notify_latest_value_is_never_lost => "notifications may coalesce, but the last change is never lost",
    watches::watch_streams_are_independent => "several streams on one path each get every change; dropping one is harmless",
    sessions::closed_store_fails_and_ends_streams => "closing a store ends its watch streams; later calls -> Closed",
    extension::extension_helpers => "delete_recursive, put_if_absent and the compare-and-set update loop",
    children::root_node => "/ always exists, lists the top-level nodes, and cannot be created or deleted",
    versions::version_import_when_offered => "import_version keeps the given version where offered, and is refused (nothing written) elsewhere",
    versions::sequential_counter_import => "import_sequential_counter raises a counter (never lowers it), leaves no child, refuses bad input",
    versions::put_version_writes_as_put_does => "put_version writes as put does and answers the new version; refused writes change nothing",
}

/// Run one rule, turning a panic inside it into a failure that names the rule.
pub async fn run_rule<E: MetadataStoreTestEnv + ?Sized>(rule: &Rule<E>, env: &E) -> RuleResult {
    bkswitch_conformance::run_rule(SUITE, rule, env).await
}

/// Run every rule against `env` (one after the other) and report all failures.
///
/// # Errors
/// A [`ConformanceReport`] naming every failing rule and what it observed.
pub async fn run_all<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> Result<(), ConformanceReport> {
    bkswitch_conformance::run_all(SUITE, &all_rules::<E>(), env).await
}
