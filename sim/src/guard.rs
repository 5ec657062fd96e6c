//! The guard: which policy a cluster runs next, judged on the twin of the window it just ran.
//!
//! The recent window's twin ([`crate::twin`]: what the agents observed, never a speed model) is
//! replayed under the policy in use and every deployable baseline; the cluster keeps the policy
//! in use unless another is better there by more than the margin, and then switches to the
//! best. The margin is the hysteresis: a learned policy replaced by a baseline comes back only
//! once the twin says it is better than that baseline by the margin, so a tie never flips the
//! cluster back and forth. The rule is the same wherever it runs; the deployment replay
//! ([`crate::deployment`]) runs it as a deployment would.

use serde::Serialize;

/// The default margin: another policy must be 5 % better on the twin to replace the one in use.
pub const MARGIN: f64 = 0.05;

/// What the guard decided after a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The policy the cluster runs next.
    pub policy: String,
    /// Whether that is a change.
    pub switched: bool,
    /// Each candidate's average JCT on the twin, as judged.
    pub twin_jcts: Vec<(String, f64)>,
}

/// Keep `current` unless a candidate's average JCT on the twin is below `current`'s by more
/// than `margin` (a fraction) plus the twin's error on `current` (`measured`: the average JCT the
/// cluster saw under it); then the best candidate. `twin_jcts` holds every candidate, `current`
/// among them; a candidate whose replay failed is left out by the caller. Ties go to the
/// earlier candidate.
pub fn judge(current: &str, measured: f64, twin_jcts: Vec<(String, f64)>, margin: f64) -> Decision {
    let of = |name: &str| twin_jcts.iter().find(|(n, _)| n == name).map(|(_, j)| *j);
    let best = twin_jcts
        .iter()
        .filter(|(_, j)| j.is_finite())
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .cloned();
    let policy = match (of(current), best) {
        (Some(now), Some((name, j))) if j < now * (1.0 - margin - error(now, measured)) => name,
        // The policy in use could not be judged (its replay failed): the best that could.
        (None, Some((name, _))) => name,
        _ => current.to_string(),
    };
    Decision {
        switched: policy != current,
        policy,
        twin_jcts,
    }
}

/// How far the twin's `replayed` average JCT is from the `measured` one, as a fraction (0 where
/// nothing was measured).
fn error(replayed: f64, measured: f64) -> f64 {
    if measured > 0.0 && replayed.is_finite() {
        (replayed / measured - 1.0).abs()
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(v: &[(&str, f64)]) -> Vec<(String, f64)> {
        v.iter().map(|(n, x)| (n.to_string(), *x)).collect()
    }

    /// A better candidate replaces the policy in use only beyond the margin, and the way back
    /// needs the same margin: a tie never flips the cluster.
    #[test]
    fn the_guard_switches_beyond_the_margin_only_and_back_with_hysteresis() {
        let d = judge(
            "tapfinger",
            10.0,
            j(&[("tapfinger", 10.0), ("tiresias", 9.7)]),
            MARGIN,
        );
        assert_eq!((d.policy.as_str(), d.switched), ("tapfinger", false));
        let d = judge(
            "tapfinger",
            10.0,
            j(&[("tapfinger", 10.0), ("tiresias", 9.0), ("drf", 9.4)]),
            MARGIN,
        );
        assert_eq!((d.policy.as_str(), d.switched), ("tiresias", true));
        // Back only when the learned policy is better by the margin.
        let d = judge(
            "tiresias",
            9.0,
            j(&[("tapfinger", 8.8), ("tiresias", 9.0)]),
            MARGIN,
        );
        assert_eq!(d.policy, "tiresias");
        let d = judge(
            "tiresias",
            9.0,
            j(&[("tapfinger", 8.0), ("tiresias", 9.0)]),
            MARGIN,
        );
        assert_eq!((d.policy.as_str(), d.switched), ("tapfinger", true));
        // The policy in use unjudged: the best judged.
        let d = judge(
            "tapfinger",
            10.0,
            j(&[("tiresias", 9.0), ("drf", 8.0)]),
            MARGIN,
        );
        assert_eq!(d.policy, "drf");
    }

    /// A twin 20 % off on the policy it watched needs a candidate 25 % better to switch.
    #[test]
    fn a_twin_that_misjudged_the_policy_in_use_needs_a_larger_gain() {
        let twin = j(&[("tapfinger", 12.0), ("tiresias", 9.5)]);
        assert_eq!(
            judge("tapfinger", 12.0, twin.clone(), MARGIN).policy,
            "tiresias"
        );
        assert_eq!(
            judge("tapfinger", 10.0, twin.clone(), MARGIN).policy,
            "tapfinger"
        );
        let twin = j(&[("tapfinger", 12.0), ("tiresias", 8.9)]);
        assert_eq!(judge("tapfinger", 10.0, twin, MARGIN).policy, "tiresias");
    }
}
