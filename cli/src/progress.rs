//! A switch's progress as bars, BUILD and PROMOTE (and COPY, the entries and
//! bytes copied, when the status carries the copy progress), drawn by
//! `bookie-clusters status --watch` and by the demo on a terminal, and the
//! counting both they and the CLI's text use.
//!
//! The status has a single `failed` counter: ledgers not built count as BUILD
//! failures first (`toBuild - built`), the rest failed in PROMOTE.
//!
//! Copy rates and times left are indicatif's estimates ([`CopyMeter`]): the
//! same bar state, drawn on a terminal or hidden behind plain lines.

use std::time::Duration;

use indicatif::{HumanBytes, HumanCount, HumanDuration, MultiProgress, ProgressBar};
use indicatif::{ProgressDrawTarget, ProgressStyle};

use bkswitch_admin::wire::{CopyProgressDoc, SwitchStatusDoc};

/// The entries copied, as an indicatif bar (position: entries copied, length:
/// entries known): it estimates the rate and the time left from the
/// successive statuses.
pub(crate) struct CopyMeter {
    bar: ProgressBar,
    seen: bool,
}

impl CopyMeter {
    /// A meter behind plain lines (drawn nowhere).
    pub(crate) fn hidden() -> CopyMeter {
        CopyMeter::on(ProgressBar::hidden())
    }

    fn on(bar: ProgressBar) -> CopyMeter {
        CopyMeter { bar, seen: false }
    }

    /// Takes the copy progress of one status.
    pub(crate) fn observe(&mut self, p: &CopyProgressDoc) {
        let (copied, total) = p.entries();
        let (ledgers_done, ledgers_total) = p.ledgers();
        self.bar.set_length(total.max(copied));
        self.bar.set_position(copied);
        if !self.seen {
            // What was copied before the first status is no rate.
            self.bar.tick();
            self.bar.reset_eta();
            self.seen = true;
        }
        let (bytes, bytes_total) = p.bytes();
        self.bar.set_message(format!(
            "{}/{}, ledgers {ledgers_done}/{ledgers_total}",
            HumanBytes(bytes),
            HumanBytes(bytes_total)
        ));
    }

    /// Entries per second, as estimated (0 before any progress).
    pub(crate) fn per_sec(&self) -> f64 {
        self.bar.per_sec()
    }

    /// The time left at the estimated rate, if there is a rate.
    pub(crate) fn eta(&self) -> Option<Duration> {
        (self.per_sec() > 0.0).then(|| self.bar.eta())
    }

    /// One plain line of `p` with the rate and the time left.
    pub(crate) fn line(&self, p: &CopyProgressDoc) -> String {
        let (copied, total) = p.entries();
        let (bytes, bytes_total) = p.bytes();
        let (done, ledgers) = p.ledgers();
        let percent = if total == 0 {
            100.0
        } else {
            copied as f64 * 100.0 / total as f64
        };
        let eta = match self.eta() {
            _ if total > 0 && copied >= total && done >= ledgers => "done".to_owned(),
            Some(eta) => format!("ETA {}", HumanDuration(eta)),
            None => "ETA -".to_owned(),
        };
        format!(
            "copy{}: {}/{} entries ({percent:.1}%), {}/{}, ledgers {done}/{ledgers} (failed {}), \
             {} entries/s, {eta}",
            if p.live() { "" } else { " (recorded)" },
            HumanCount(copied),
            HumanCount(total),
            HumanBytes(bytes),
            HumanBytes(bytes_total),
            p.ledgers_failed(),
            HumanCount(self.per_sec().round() as u64),
        )
    }

    fn finish(&self) {
        self.bar.finish();
    }

    fn abandon(&self) {
        self.bar.abandon();
    }
}

/// `(BUILD failures, PROMOTE failures)`.
fn split_failures(s: &SwitchStatusDoc) -> (u64, u64) {
    let c = s.counts();
    let build_failed = c.failed.min(c.to_build.saturating_sub(c.built));
    (build_failed, c.failed - build_failed)
}

/// BUILD progress: `(done, total)` = (built + build failures, toBuild).
pub(crate) fn build_progress(s: &SwitchStatusDoc) -> (u64, u64) {
    let c = s.counts();
    let (build_failed, _) = split_failures(s);
    ((c.built + build_failed).min(c.to_build), c.to_build)
}

/// PROMOTE progress: `(done, total)` = (promoted + rolloverFallback +
/// promote failures, built).
pub(crate) fn promote_progress(s: &SwitchStatusDoc) -> (u64, u64) {
    let c = s.counts();
    let (_, promote_failed) = split_failures(s);
    (
        (c.promoted + c.rollover_fallback + promote_failed).min(c.built),
        c.built,
    )
}

/// The BUILD, PROMOTE and COPY bars (COPY added with the first copy
/// progress).
pub(crate) struct SwitchBars {
    multi: MultiProgress,
    build: ProgressBar,
    promote: ProgressBar,
    copy: Option<CopyMeter>,
}

impl SwitchBars {
    /// Bars drawn on stderr.
    pub(crate) fn stderr() -> SwitchBars {
        SwitchBars::with_target(ProgressDrawTarget::stderr())
    }

    fn with_target(target: ProgressDrawTarget) -> SwitchBars {
        let style = ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let multi = MultiProgress::with_draw_target(target);
        let build = multi.add(
            ProgressBar::new(0)
                .with_style(style.clone())
                .with_prefix("BUILD"),
        );
        let promote = multi.add(ProgressBar::new(0).with_style(style).with_prefix("PROMOTE"));
        SwitchBars {
            multi,
            build,
            promote,
            copy: None,
        }
    }

    /// Shows the copy progress: entries with indicatif's rate and time
    /// left, bytes and ledgers.
    pub(crate) fn update_copy(&mut self, p: &CopyProgressDoc) {
        let multi = &self.multi;
        let copy = self.copy.get_or_insert_with(|| {
            let style = ProgressStyle::with_template(
                "{prefix:>8} [{bar:40}] {human_pos}/{human_len} entries, {msg}, \
                 {per_sec}, ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            CopyMeter::on(multi.add(ProgressBar::new(0).with_style(style).with_prefix("COPY")))
        });
        copy.observe(p);
    }

    /// Shows the counters of `s`.
    pub(crate) fn update(&self, s: &SwitchStatusDoc) {
        let phase = s.phase_name().unwrap_or("?").to_owned();
        let c = s.counts();
        let (b, bt) = build_progress(s);
        self.build.set_length(bt);
        self.build.set_position(b);
        self.build
            .set_message(format!("{phase} (failed {})", c.failed));
        let (p, pt) = promote_progress(s);
        self.promote.set_length(pt);
        self.promote.set_position(p);
        self.promote
            .set_message(format!("rollover fallback {}", c.rollover_fallback));
    }

    /// Completes the bars and clears them from the terminal.
    pub(crate) fn finish(self) {
        self.build.finish();
        self.promote.finish();
        if let Some(c) = &self.copy {
            c.finish();
        }
        let _ = self.multi.clear();
    }

    /// Leaves the bars where they stopped.
    pub(crate) fn abandon(self) {
        self.build.abandon();
        self.promote.abandon();
        if let Some(c) = &self.copy {
            c.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn failures_count_against_build_first_then_promote() {
        let s = |counts: Value| SwitchStatusDoc(json!({ "counts": counts }));
        // Build still running: the failure is a build failure.
        let during = s(json!({"toBuild": 4, "built": 2, "failed": 1}));
        assert_eq!(build_progress(&during), (3, 4));
        assert_eq!(promote_progress(&during), (0, 2));
        // Everything built, then one promote failed.
        let after =
            s(json!({"toBuild": 4, "built": 4, "failed": 1, "promoted": 2, "rolloverFallback": 1}));
        assert_eq!(build_progress(&after), (4, 4));
        assert_eq!(promote_progress(&after), (4, 4));
        // Missing counters read as 0.
        assert_eq!(build_progress(&s(Value::Null)), (0, 0));
    }

    #[test]
    fn progress_bars_follow_the_counters() {
        let bars = SwitchBars::with_target(ProgressDrawTarget::hidden());
        bars.update(&SwitchStatusDoc(json!({
            "phase": "PROMOTE",
            "counts": {"toBuild": 10, "built": 8, "failed": 2, "promoted": 3, "rolloverFallback": 1},
        })));
        assert_eq!((bars.build.position(), bars.build.length()), (10, Some(10)));
        assert_eq!(
            (bars.promote.position(), bars.promote.length()),
            (4, Some(8))
        );
        assert_eq!(bars.build.message(), "PROMOTE (failed 2)");
        bars.finish();
    }

    fn copy(copied: u64, total: u64) -> CopyProgressDoc {
        CopyProgressDoc(json!({
            "live": true, "ledgersDone": 1, "ledgersTotal": 4,
            "entriesCopied": copied, "entriesTotal": total,
            "bytesCopied": copied * 10, "bytesTotal": total * 10,
        }))
    }

    #[test]
    fn the_copy_meter_estimates_a_rate_and_the_time_left() {
        let mut m = CopyMeter::hidden();
        m.observe(&copy(1_000, 160_000));
        // What was copied before the first status is no rate.
        assert_eq!(m.per_sec(), 0.0);
        let line = m.line(&copy(1_000, 160_000));
        assert!(line.ends_with("0 entries/s, ETA -"), "{line}");
        for i in 1..=5 {
            std::thread::sleep(Duration::from_millis(20));
            m.observe(&copy(1_000 + i * 200, 160_000));
        }
        assert!(m.per_sec() > 0.0);
        let eta = m.eta().expect("a rate, so a time left");
        assert!(eta > Duration::from_secs(1), "{eta:?}");
        let line = m.line(&copy(2_000, 160_000));
        assert!(
            line.starts_with(
                "copy: 2,000/160,000 entries (1.2%), 19.53 KiB/1.53 MiB, ledgers 1/4 (failed 0), "
            ),
            "{line}"
        );
        assert!(line.contains(" entries/s, ETA "), "{line}");
        let done = m.line(&CopyProgressDoc(json!({
            "entriesCopied": 5, "entriesTotal": 5, "ledgersDone": 2, "ledgersTotal": 2,
        })));
        assert!(
            done.starts_with("copy (recorded): 5/5 entries (100.0%)"),
            "{done}"
        );
        assert!(done.ends_with(", done"), "{done}");
    }

    #[test]
    fn the_copy_bar_follows_the_entries() {
        let mut bars = SwitchBars::with_target(ProgressDrawTarget::hidden());
        bars.update_copy(&copy(70, 160));
        let c = bars.copy.as_ref().unwrap();
        assert_eq!((c.bar.position(), c.bar.length()), (70, Some(160)));
        assert_eq!(c.bar.message(), "700 B/1.56 KiB, ledgers 1/4");
        bars.finish();
    }
}
