//! The command line's progress bar.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

/// A progress bar that only appears once the work has taken more than a second.
pub(crate) struct Progress {
    /// The bar (hidden when stderr is not a terminal).
    bar: ProgressBar,
    /// When the work began, for the rate and the estimate.
    started: Instant,
    /// Whether the bar has drawn anything (to clear it at the end).
    shown: bool,
}

impl Progress {
    pub(crate) fn new(total: u64) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        let mut p = Self {
            bar,
            started: Instant::now(),
            shown: false,
        };
        p = p.unit("episodes");
        p
    }
    pub(crate) fn unit(self, unit: &str) -> Self {
        if let Ok(style) = ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit} {{elapsed}} (eta {{eta}})"
        )) {
            self.bar.set_style(style);
        }
        self
    }
    pub(crate) fn tick(&mut self) {
        if !self.shown && self.started.elapsed() > Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.inc(1);
    }
    /// A line on stderr, above the bar where it is drawn (always printed, bar or not).
    // Its one caller, `deploy-replay`, needs the feature `train`.
    #[cfg_attr(not(feature = "train"), allow(dead_code))]
    pub(crate) fn note(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
