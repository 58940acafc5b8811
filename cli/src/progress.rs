//! A switch's progress as two bars, BUILD and PROMOTE, drawn by
//! `bookie-clusters status --watch` and by the demo on a terminal, and the
//! counting both they and the CLI's text use.
//!
//! The status has a single `failed` counter: ledgers not built count as BUILD
//! failures first (`toBuild - built`), the rest failed in PROMOTE.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use bkswitch_admin::wire::SwitchStatusDoc;

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

/// The BUILD and PROMOTE bars.
pub(crate) struct SwitchBars {
    multi: MultiProgress,
    build: ProgressBar,
    promote: ProgressBar,
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
        }
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
        let _ = self.multi.clear();
    }

    /// Leaves the bars where they stopped.
    pub(crate) fn abandon(self) {
        self.build.abandon();
        self.promote.abandon();
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
}
