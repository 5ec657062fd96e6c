//! The plateau detector of RLPTO: a task whose reported loss (or accuracy) has stopped improving
//! is converging, and its units are better spent elsewhere. Judged on the task's last reports:
//! it has plateaued when the best of its last `window` reports improves on the report before
//! them by less than `epsilon`, relative. Pure, so every agent and the simulator judge alike.

/// The detector's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plateau {
    /// Reports judged (the improvement is over this many).
    pub window: usize,
    /// Least relative improvement that is still progress.
    pub epsilon: f64,
}

impl Default for Plateau {
    /// 5 reports, 1 %.
    fn default() -> Self {
        Self {
            window: 5,
            epsilon: 0.01,
        }
    }
}

impl Plateau {
    /// Whether `reports` (oldest first) have plateaued; `lower_is_better` for a loss, not for
    /// an accuracy. Fewer than `window + 1` reports, or a non-finite one among those judged:
    /// not plateaued (too early to tell).
    pub fn reached(&self, reports: &[f64], lower_is_better: bool) -> bool {
        let w = self.window.max(1);
        if reports.len() < w + 1 {
            return false;
        }
        let judged = &reports[reports.len() - w - 1..];
        if judged.iter().any(|r| !r.is_finite()) {
            return false;
        }
        let base = judged[0];
        let recent = judged[1..].iter().copied();
        let gain = if lower_is_better {
            base - recent.fold(f64::INFINITY, f64::min)
        } else {
            recent.fold(f64::NEG_INFINITY, f64::max) - base
        };
        gain < self.epsilon * base.abs().max(1e-12)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_falling_loss_is_progress_and_a_flat_one_is_a_plateau() {
        let p = Plateau::default();
        let falling: Vec<f64> = (0..10).map(|i| 2.0 * 0.9f64.powi(i)).collect();
        assert!(!p.reached(&falling, true));
        let flat = [2.0, 1.0, 0.8, 0.7, 0.7, 0.7, 0.7, 0.7, 0.6999];
        assert!(p.reached(&flat, true));
        // Too early to tell, and a NaN among the judged reports: not a plateau.
        assert!(!p.reached(&[1.0, 1.0, 1.0], true));
        assert!(!p.reached(&[0.7, 0.7, f64::NAN, 0.7, 0.7, 0.7], true));
        // An accuracy that still climbs, then one that stopped.
        assert!(!p.reached(&[0.5, 0.55, 0.6, 0.65, 0.7, 0.75], false));
        assert!(p.reached(&[0.8, 0.801, 0.8, 0.802, 0.801, 0.8], false));
    }

    proptest! {
        /// A loss that falls by more than ε relative every report never plateaus, and one that
        /// never improves always does, whatever the level.
        #[test]
        fn steady_progress_never_plateaus_and_none_always_does(
            start in 0.01f64..1e6,
            step in 0.02f64..0.5,
            n in 6usize..40,
        ) {
            let p = Plateau::default();
            let falling: Vec<f64> = (0..n).map(|i| start * (1.0 - step).powi(i as i32)).collect();
            prop_assert!(!p.reached(&falling, true));
            let stuck: Vec<f64> = (0..n).map(|i| start * (1.0 + 0.001 * i as f64)).collect();
            prop_assert!(p.reached(&stuck, true));
        }
    }
}
