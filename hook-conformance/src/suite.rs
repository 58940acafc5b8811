//! The list of rules ([`all_rules`], [`RULE_NAMES`]) and how they are run
//! ([`run_rule`], [`run_all`]).

use crate::env::HookedStorage;
use crate::rules;
use crate::{ConformanceReport, Rule, RuleResult, SUITE};

macro_rules! rule_list {
    ($($family:ident :: $name:ident => $description:literal,)*) => {
        /// Every rule of the suite, in run order.
        pub fn all_rules<S: HookedStorage + ?Sized>() -> Vec<Rule<S>> {
            vec![$(Rule {
                name: stringify!($name),
                family: stringify!($family),
                description: $description,
                run: |storage| Box::pin(async move {
                    rules::$name(storage).await;
                    Ok(())
                }),
            }),*]
        }

        /// Names of every rule, in run order.
        pub const RULE_NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

rule_list! {
    s1::creations_ask_the_active_client => "every data- and cursor-ledger creation asks S1 and creates on the client it returned",
    i1::stamp_recorded_with_the_id => "a new ledger's stamp is in the very metadata write that records its id (I1)",
    i1::failed_stamp_records_nothing => "a failed S4 provider records nothing and leaves no ledger behind",
    i4::one_resolve_per_handle_open => "S2 is consulted once per handle open, not per read (I4)",
    i15::opens_and_recovery_route_by_stamp => "a new owner's recovery and every read route by stamp (I15)",
    i15::trim_deletes_route_by_stamp => "trimming deletes each ledger on the cluster its stamp names (I15)",
    i15::cursor_ledgers_route_by_stamp => "cursor ledgers are recovered and deleted by stamp, created by S1 (I15)",
    s3::schema_ledgers_follow_the_provider => "schema ledgers are created by S3, stamped in the locator write, read by stamp",
    s3::schema_deletes_route_by_stamp => "deleting a schema deletes each version's ledger by stamp",
}

/// Runs one rule, turning a panic inside it into a failure that names the
/// rule.
pub async fn run_rule<S: HookedStorage + ?Sized>(rule: &Rule<S>, storage: &S) -> RuleResult {
    bkswitch_conformance::run_rule(SUITE, rule, storage).await
}

/// Runs every rule against `storage` (one after the other) and reports all
/// failures.
///
/// # Errors
///
/// A [`ConformanceReport`] naming every failing rule and what it observed.
pub async fn run_all<S: HookedStorage + ?Sized>(storage: &S) -> Result<(), ConformanceReport> {
    bkswitch_conformance::run_all(SUITE, &all_rules::<S>(), storage).await
}
