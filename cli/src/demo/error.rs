//! A demo failure: a step that could not run (a broken invariant is not an
//! error, it is reported).

use std::error::Error as StdError;

/// A demo failure (a step that could not run, not a broken invariant).
#[derive(Debug, thiserror::Error)]
#[error("demo step '{step}' failed: {reason}")]
pub struct DemoError {
    /// The step.
    pub step: String,
    /// What went wrong.
    pub reason: String,
    /// The error the step failed with, if any.
    pub source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl DemoError {
    /// A failure of `step` without a lower error.
    pub(super) fn new(step: impl Into<String>, reason: impl std::fmt::Display) -> DemoError {
        DemoError {
            step: step.into(),
            reason: reason.to_string(),
            source: None,
        }
    }
}

/// Turns the error of `step` into a [`DemoError`] keeping it as the source.
pub(super) fn step_err<E>(step: &str) -> impl FnOnce(E) -> DemoError + '_
where
    E: StdError + Send + Sync + 'static,
{
    move |e| DemoError {
        step: step.to_owned(),
        reason: e.to_string(),
        source: Some(Box::new(e)),
    }
}
