//! The guard: which policy a cluster runs next, judged on the twin of the window it just ran.
//!
//! The recent window's twin ([`crate::twin`]: what the agents observed, never a speed model) is
//! replayed under the policy in use and every deployable baseline; the cluster keeps the policy
//! in use unless another is better there by more than the margin, and then switches to the
//! best. The margin is the hysteresis: a learned policy replaced by a baseline comes back only
//! once the twin says it is better than that baseline by the margin, so a tie never flips the
//! cluster back and forth. The rule is the same wherever it runs ([`on_workload`]): the
//! coordinator runs it on the workload its agents push, the deployment replay
//! ([`crate::deployment`]) on the workload its windows' agents would have observed.

use crate::metrics::summarize;
use crate::report::{self, CompareError};
use crate::{Scenario, Simulator, policies, twin};
use serde::Serialize;
use tapfinger::Policy;
use tapfinger::baselines::Baseline;
use tapfinger::twin::Workload;

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
    /// The average JCT the cluster measured under the policy in use (0: nothing measured).
    pub measured: f64,
}

/// The policies the guard chooses among: the learned policy and every deployable baseline an
/// agent can run (Optimus's two fit a speed model to profiling runs agents do not make).
pub fn candidates() -> Vec<&'static str> {
    std::iter::once(policies::TAPFINGER)
        .chain(
            Baseline::JUDGED
                .iter()
                .filter(|b| !b.needs_profile())
                .map(|b| b.name()),
        )
        .collect()
}

/// The learned policy the guard judges: the one the cluster runs.
#[derive(Debug, Clone, Copy)]
pub enum Learned<'a> {
    /// The model the simulator loads for the twin's scenario (the general model).
    Shipped,
    /// A checkpoint's bytes (`model.bpk`, `train.json`): a published version.
    Checkpoint {
        /// `model.bpk`.
        model: &'a [u8],
        /// `train.json`.
        train_json: &'a str,
    },
}

/// Why the guard could not judge a workload.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The workload does not make a scenario.
    #[error("the twin: {0}")]
    Twin(String),
    /// The learned policy does not load for the twin's input sizes.
    #[error("the learned policy on the twin: {0}")]
    Learned(String),
    /// A baseline could not be built.
    #[error(transparent)]
    Policy(#[from] CompareError),
}

/// The learned policy of `learned` for every box of `sim`.
fn learned_for(sim: &Simulator, learned: Learned) -> Result<Vec<Box<dyn Policy>>, GuardError> {
    match learned {
        Learned::Shipped => Ok(policies::learned(sim, None).map_err(CompareError::from)?),
        Learned::Checkpoint { model, train_json } => {
            policies::from_bytes(sim, model.to_vec(), train_json)
                .map_err(|e| GuardError::Learned(e.to_string()))
        }
    }
}

/// Judge the workload `w` the cluster ran under `current`: its twin replayed under every
/// candidate ([`candidates`], the learned policy as `learned`; a candidate whose episode fails
/// is left out), the agents' own average JCT of its finished tasks as what was measured of
/// `current`, then [`judge`]. `seed` draws what the policies draw at random.
pub fn on_workload(
    w: &Workload,
    current: &str,
    learned: Learned,
    margin: f64,
    seed: u64,
) -> Result<Decision, GuardError> {
    let toml = twin::scenario_toml(w, "twin").map_err(GuardError::Twin)?;
    let sc =
        Scenario::from_toml(&toml, "twin", None).map_err(|e| GuardError::Twin(e.to_string()))?;
    let sim = Simulator::new(sc);
    let kinds = sim.scenario().kind_names();
    let mut twin_jcts = Vec::new();
    for name in candidates() {
        let ps = if name == policies::TAPFINGER {
            learned_for(&sim, learned)?
        } else {
            report::instances_for_seed(&sim, name, None, seed)?
        };
        if let Ok(r) = sim.run(ps, seed) {
            twin_jcts.push((name.to_string(), summarize(&r, &kinds).avg_jct));
        }
    }
    let seen = w.jcts();
    let measured = seen.iter().sum::<u64>() as f64 / seen.len().max(1) as f64;
    Ok(judge(current, measured, twin_jcts, margin))
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
        measured,
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
