//! The list of rules ([`all_rules`], [`RULE_NAMES`]) and how they are run
//! ([`run_rule`], [`run_all`]).

use super::env::BookKeeperTestEnv;
use super::rules;
use super::{ConformanceReport, Rule, RuleResult, SUITE};

macro_rules! rule_list {
    ($($family:ident::$name:ident => $description:literal,)*) => {
        /// Every rule of the suite, in run order.
        pub fn all_rules<E: BookKeeperTestEnv + ?Sized>() -> Vec<Rule<E>> {
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
    create::create_rejects_invalid_quorums => "ack > write, write > ensemble or ack <= 0 -> IncorrectParameter (-14), nothing created",
    create::create_allocates_distinct_increasing_ids => "create_ledger takes fresh ids from the id generator",
    create::new_ledger_is_open_and_empty => "a new handle is OPEN with LAC -1 and length 0; metadata holds the config",
    create::create_skips_ids_taken_by_adv => "create_ledger never returns an id created earlier by create_ledger_adv",
    adv::adv_does_not_touch_id_generator => "create_ledger_adv uses the given id and leaves the id generator alone",
    adv::adv_existing_id_is_ledger_exists => "create_ledger_adv of an existing id -> LedgerExists (-20), final",
    adv::adv_negative_id_is_invalid => "create_ledger_adv with id < 0 -> IncorrectParameter (-14)",
    adv::adv_stores_custom_metadata_as_given => "custom metadata is stored exactly as given (empty if none)",
    adv::adv_duplicate_entry_checked_before_closed => "entry_id <= LAC or pending -> DuplicateEntryId (-22), even when closed",
    add::add_on_closed_handle_is_ledger_closed => "adds on a closed handle -> LedgerClosed (-11)",
    add::adv_out_of_order_lac_advances_contiguously => "out-of-order adds; LAC is the largest k with 0..=k acknowledged",
    add::completions_in_entry_id_order => "add completions are delivered in entry-id order",
    add::length_counts_confirmed_payload_bytes => "length grows by the payload bytes of confirmed entries",
    close::close_seals_at_lac => "close: CLOSED, lastEntryId = LAC, length = bytes of 0..=LAC",
    close::close_fails_pending_adds_and_second_close_succeeds => "close fails pending adds with -11; a second close succeeds",
    open::recovery_open_fences_writer => "a recovery open fences an OPEN ledger: the writer's next add -> LedgerFenced (-101)",
    open::recovery_closes_at_last_recoverable_entry => "recovery closes at the last recoverable entry; pending adds fail with -101",
    open::recovery_of_empty_ledger => "recovering an empty ledger closes it with lastEntryId -1 and length 0",
    open::no_recovery_open_does_not_fence => "a no-recovery open never fences: the writer continues; LAC snapshot; not closed",
    open::no_recovery_lac_refresh => "read_last_add_confirmed refreshes a no-recovery handle's LAC",
    open::open_closed_ledger_reports_sealed_state => "opening a CLOSED ledger: LAC = lastEntryId, length = metadata length",
    open::open_missing_ledger_is_no_such_ledger_on_metadata_server => "opening a missing ledger -> NoSuchLedgerExistsOnMetadataServer (-25)",
    read::read_rejects_bad_ranges => "first < 0 or first > last -> IncorrectParameter (-14)",
    read::read_beyond_lac_is_read_exception => "last > LAC -> ReadException (-1), so any read of an empty ledger",
    read::read_unconfirmed_skips_lac_check => "read_unconfirmed skips the LAC check; a missing entry -> NoSuchEntry (-13)",
    delete::delete_missing_ledger_as_declared => "deleting a missing ledger: Ok, -7 or -25 as the implementation declares",
    delete::delete_removes_ledger => "a deleted ledger cannot be opened (-25) and its id is not reused",
    add::illegal_op_mixing_add_styles => "add_entry on an Adv handle or add_entry_at on a normal handle -> IllegalOp (-100)",
    open::password_mismatch_is_unauthorized => "opening with the wrong password -> UnauthorizedAccess (-102)",
    clients::clients_share_the_cluster => "two clients of one cluster see the same ledgers",
    clients::client_close_rejects_operations => "a closed client fails with ClientClosed (-19); other clients are unaffected",
}

/// Run one rule, turning a panic inside it into a failure that names the rule.
pub async fn run_rule<E: BookKeeperTestEnv + ?Sized>(rule: &Rule<E>, env: &E) -> RuleResult {
    bkswitch_conformance::run_rule(SUITE, rule, env).await
}

/// Run every rule against `env` (one after the other) and report all failures.
///
/// # Errors
/// A [`ConformanceReport`] naming every failing rule and what it observed.
pub async fn run_all<E: BookKeeperTestEnv + ?Sized>(env: &E) -> Result<(), ConformanceReport> {
    bkswitch_conformance::run_all(SUITE, &all_rules::<E>(), env).await
}
