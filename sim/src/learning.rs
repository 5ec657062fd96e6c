//! What RLPTO's accuracy-aware parts need in the simulator: learning curves per task type (what
//! a task's model reaches as its work gets done), the `[shrink]` section (the plateau detector's
//! settings, and whether converging tasks shrink), and the cluster reward's weights (`[reward]`).
//!
//! A curve is saturating in the task's progress `p` ∈ [0, 1]:
//! `accuracy(p) = top · (1 − e^(−rate·p)) / (1 − e^(−rate))`, so it reaches `top` when the task's
//! work is done; a large `rate` is a model that converges early in its run (most of its work then
//! buys little). Every slot a running task reports its accuracy plus Gaussian noise of standard
//! deviation `noise`, drawn from the episode's workload seed, the task and the slot (the same
//! draws whatever the policy), and the reports feed [`tapfinger::plateau::Plateau`] as an agent's
//! progress lines do. The final accuracy is the curve's at the end, without noise: a task always
//! runs its whole work (shrinking slows it, never stops it), so shrinking changes when it reaches
//! its final accuracy, not what it reaches.
//!
//! The cluster reward (RLPTO's, per task, averaged over the episode's tasks):
//! `accuracy·w_acc − JCT·w_time − resource_time·w_res`, with JCT in slots and resource time in
//! node-slots (each kind's units held over a node's mean capacity of the kind, averaged over the
//! kinds, summed over the slots it ran). Types without a curve add no accuracy term.

use serde::Deserialize;
use tapfinger::plateau::Plateau;

/// A task type's learning curve as written (`curve = { top = 0.9, rate = 8, noise = 0.003 }`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurveSpec {
    /// Accuracy at the end of the task's work, in (0, 1].
    pub top: f64,
    /// How early it saturates (> 0; 1 is nearly linear, 10 is converged at a third of the work).
    pub rate: f64,
    /// Standard deviation of a report's noise (≥ 0).
    #[serde(default)]
    pub noise: f64,
}

/// A validated learning curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Curve {
    /// Accuracy at the end.
    pub top: f64,
    /// Saturation rate.
    pub rate: f64,
    /// Report noise.
    pub noise: f64,
}

impl CurveSpec {
    /// Validated, or the field and why not.
    pub fn check(&self) -> Result<Curve, (String, String)> {
        if !(self.top > 0.0 && self.top <= 1.0) {
            return Err((
                "curve.top".into(),
                format!("must be in (0, 1], got {}", self.top),
            ));
        }
        if !(self.rate > 0.0 && self.rate <= 100.0) {
            return Err((
                "curve.rate".into(),
                format!("must be in (0, 100], got {}", self.rate),
            ));
        }
        if !(self.noise >= 0.0 && self.noise < 1.0) {
            return Err((
                "curve.noise".into(),
                format!("must be in [0, 1), got {}", self.noise),
            ));
        }
        Ok(Curve {
            top: self.top,
            rate: self.rate,
            noise: self.noise,
        })
    }
}

impl Curve {
    /// Accuracy at progress `p` (clamped to [0, 1]), without noise.
    pub fn accuracy(&self, p: f64) -> f64 {
        let p = p.clamp(0.0, 1.0);
        self.top * (1.0 - (-self.rate * p).exp()) / (1.0 - (-self.rate).exp())
    }

    /// The report of task `task` in `slot` at progress `p`: the curve plus noise drawn from
    /// `seed`, the task and the slot only.
    pub fn report(&self, p: f64, seed: u64, task: u64, slot: u64) -> f64 {
        use rand_distr::{Distribution, StandardNormal};
        let mut rng = tapfinger::seeded_rng(
            seed ^ task.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ slot.wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
        );
        let z: f64 = StandardNormal.sample(&mut rng);
        self.accuracy(p) + self.noise * z
    }
}

/// The `[shrink]` section as written.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShrinkFile {
    /// Shrink converging tasks (`false`: detect, report, but leave their units).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Reports the detector judges.
    #[serde(default = "window")]
    pub window: i64,
    /// Least relative improvement over the window that is still progress.
    #[serde(default = "epsilon")]
    pub epsilon: f64,
}

fn yes() -> bool {
    true
}
fn window() -> i64 {
    Plateau::default().window as i64
}
fn epsilon() -> f64 {
    Plateau::default().epsilon
}

/// The validated `[shrink]` section.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shrink {
    /// Whether converging tasks shrink.
    pub enabled: bool,
    /// The detector.
    pub plateau: Plateau,
}

impl ShrinkFile {
    /// Validated, or the field and why not.
    pub fn check(&self) -> Result<Shrink, (String, String)> {
        if !(1..=1000).contains(&self.window) {
            return Err((
                "shrink.window".into(),
                format!("must be 1 to 1000 reports, got {}", self.window),
            ));
        }
        if !(self.epsilon >= 0.0 && self.epsilon < 1.0) {
            return Err((
                "shrink.epsilon".into(),
                format!("must be in [0, 1), got {}", self.epsilon),
            ));
        }
        Ok(Shrink {
            enabled: self.enabled,
            plateau: Plateau {
                window: self.window as usize,
                epsilon: self.epsilon,
            },
        })
    }
}

/// The cluster reward's weights as written (`[reward]`); the ledger pays it slot by slot to a
/// policy trained on it ([`tapfinger::ledger::Ledger::with_cluster_reward`]).
pub use tapfinger::ledger::RewardWeights;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_rises_to_its_top_and_a_fast_one_is_nearly_there_early() {
        let c = CurveSpec {
            top: 0.9,
            rate: 10.0,
            noise: 0.0,
        }
        .check()
        .unwrap();
        assert!((c.accuracy(1.0) - 0.9).abs() < 1e-12);
        assert_eq!(c.accuracy(0.0), 0.0);
        assert!(c.accuracy(0.4) > 0.98 * 0.9);
        let mut last = 0.0;
        for i in 0..=20 {
            let a = c.accuracy(f64::from(i) / 20.0);
            assert!(a >= last);
            last = a;
        }
    }

    #[test]
    fn reports_depend_on_seed_task_and_slot_only() {
        let c = Curve {
            top: 0.8,
            rate: 3.0,
            noise: 0.01,
        };
        assert_eq!(c.report(0.5, 7, 3, 9), c.report(0.5, 7, 3, 9));
        assert_ne!(c.report(0.5, 7, 3, 9), c.report(0.5, 7, 3, 10));
        assert_ne!(c.report(0.5, 7, 3, 9), c.report(0.5, 7, 4, 9));
        let quiet = Curve { noise: 0.0, ..c };
        assert_eq!(quiet.report(0.5, 7, 3, 9), quiet.accuracy(0.5));
    }

    #[test]
    fn bad_sections_name_their_field() {
        let bad = CurveSpec {
            top: 1.5,
            rate: 1.0,
            noise: 0.0,
        };
        assert_eq!(bad.check().unwrap_err().0, "curve.top");
        let bad = ShrinkFile {
            enabled: true,
            window: 0,
            epsilon: 0.01,
        };
        assert_eq!(bad.check().unwrap_err().0, "shrink.window");
        let bad = RewardWeights {
            time: -1.0,
            ..RewardWeights::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "reward.time");
    }
}
