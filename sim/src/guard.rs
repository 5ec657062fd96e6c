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
use std::collections::BTreeMap;
use tapfinger::Policy;
use tapfinger::baselines::Baseline;
use tapfinger::twin::Workload;

/// The default margin: another policy must be 5 % better on the twin to replace the one in use.
pub const MARGIN: f64 = 0.05;

/// Most of a candidate's slots on a window's twin that may lie where the twin's speeds are the
/// estimator's extrapolation ([`Judged::unsupported`]) for the window to judge it: past it the
/// twin's figure for that candidate is a guess (a rigid class placed on a GPU model it never
/// ran on takes whatever the estimator's prior says there), and the guard does not act on a
/// guess.
pub const MAX_UNSUPPORTED: f64 = 0.25;

/// One window's twin judged: every candidate's average JCT there and how much of it rests on
/// extrapolation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    /// The window's tasks.
    pub tasks: usize,
    /// The average JCT the cluster measured of its finished tasks (0: none finished).
    pub measured: f64,
    /// Each candidate's average JCT on the twin (a candidate whose replay failed is left out).
    pub twin_jcts: Vec<(String, f64)>,
    /// Each candidate's share of its slots on the twin on a GPU model its class never ran on in
    /// the window, or at an allocation outside what it ran at there: where the twin's speeds
    /// are the estimator's extrapolation, not what it measured.
    pub unsupported: Vec<(String, f64)>,
    /// Each candidate's JCT of every task on the twin, in task order (all finished), for the
    /// gain's spread ([`GAIN_Z`]); a candidate missing here counts no spread.
    #[serde(skip)]
    pub per_task: Vec<(String, Vec<f64>)>,
}

impl Judged {
    fn jct(&self, name: &str) -> Option<f64> {
        self.twin_jcts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, j)| *j)
            .filter(|j| j.is_finite())
    }

    fn per_task(&self, name: &str) -> Option<&[f64]> {
        self.per_task
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Whether this window's twin knows `name`'s speeds well enough to judge it.
    fn judges(&self, name: &str) -> bool {
        self.jct(name).is_some()
            && self
                .unsupported
                .iter()
                .find(|(n, _)| n == name)
                .is_none_or(|(_, u)| *u <= MAX_UNSUPPORTED)
    }
}

/// What the guard decided after a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The policy the cluster runs next.
    pub policy: String,
    /// Whether that is a change.
    pub switched: bool,
    /// Each candidate's average JCT on the latest window's twin.
    pub twin_jcts: Vec<(String, f64)>,
    /// The average JCT the cluster measured of the latest window under the policy in use (0:
    /// nothing measured).
    pub measured: f64,
    /// Each candidate's share of extrapolated slots on the latest window's twin
    /// ([`Judged::unsupported`]).
    pub unsupported: Vec<(String, f64)>,
    /// Each candidate's gain over the policy in use (the mean over the recent windows that
    /// judge it of 1 − its average JCT over the policy in use's, [`judge`]).
    pub gains: Vec<(String, f64)>,
    /// What each candidate's gain had to clear: the margin, the twins' error on the policy in
    /// use that the correction leaves ([`judge`]), and the gain's standard error over the tasks
    /// judged ([`GAIN_Z`]).
    pub needed: Vec<(String, f64)>,
    /// The most windows any candidate was judged on (at most [`RECENT`], since the policy in
    /// use was adopted).
    pub windows: usize,
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
    /// A checkpoint's bytes (`model.safetensors`, `train.json`): a published version.
    Checkpoint {
        /// `model.safetensors`.
        model: &'a [u8],
        /// `train.json`.
        train_json: &'a str,
    },
    /// A training network in memory: a version fine-tuned here (feature `train`).
    #[cfg(feature = "train")]
    Net {
        /// The network.
        net: &'a tapfinger::model::net::Net,
        /// Its settings.
        cfg: &'a tapfinger::model::net::NetConfig,
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
        Learned::Checkpoint { model, train_json } => policies::from_bytes(sim, model, train_json)
            .map_err(|e| GuardError::Learned(e.to_string())),
        #[cfg(feature = "train")]
        Learned::Net { net, cfg } => Ok(policies::from_net(sim, net, cfg)),
    }
}

/// Judge the workload `w` the cluster ran under `current` ([`table`], then [`judge`] on it
/// alone).
pub fn on_workload(
    w: &Workload,
    current: &str,
    learned: Learned,
    margin: f64,
    seed: u64,
) -> Result<Decision, GuardError> {
    Ok(judge(current, &[table(w, learned, seed)?], margin))
}

/// The twin of workload `w` replayed under every candidate ([`candidates`], the learned policy
/// as `learned`; a candidate whose episode fails is left out), its agents' speed estimator
/// starting from what the cluster's had learned ([`twin::warm_estimator`]) and their size book
/// from the one the cluster exported ([`twin::warm_sizes`]), as a deployment's next window
/// starts; the agents' own average JCT of its finished tasks as what was measured.
/// `seed` draws what the policies draw at random.
pub fn table(w: &Workload, learned: Learned, seed: u64) -> Result<Judged, GuardError> {
    let toml = twin::scenario_toml(w, "twin").map_err(GuardError::Twin)?;
    let sc =
        Scenario::from_toml(&toml, "twin", None).map_err(|e| GuardError::Twin(e.to_string()))?;
    let mut sim = Simulator::new(sc);
    if let Some(book) = twin::warm_sizes(w) {
        sim = sim.with_sizes(book);
    }
    let kinds = sim.scenario().kind_names();
    let seen = support(w);
    let warm = twin::warm_estimator(w, &sim);
    let mut twin_jcts = Vec::new();
    let mut off = Vec::new();
    let mut per_task = Vec::new();
    for name in candidates() {
        let ps = if name == policies::TAPFINGER {
            learned_for(&sim, learned)?
        } else {
            report::instances_for_seed(&sim, name, None, seed)?
        };
        if let Ok((r, ran, _)) = twin::observe_warm(&sim, ps, seed, Some(&warm)) {
            twin_jcts.push((name.to_string(), summarize(&r, &kinds).avg_jct));
            // By id, so that every candidate's list pairs the same tasks; only where all
            // finished (a list short of some would pair the wrong ones).
            let mut by_id: Vec<(u64, f64)> = r.tasks.iter().map(|t| (t.id, t.jct as f64)).collect();
            by_id.sort_by_key(|x| x.0);
            if by_id.len() == sim.scenario().tasks as usize {
                per_task.push((name.to_string(), by_id.into_iter().map(|x| x.1).collect()));
            }
            off.push((name.to_string(), unsupported(&seen, w, &ran)));
        }
    }
    let jcts = w.jcts();
    Ok(Judged {
        tasks: w.tasks.len(),
        measured: jcts.iter().sum::<u64>() as f64 / jcts.len().max(1) as f64,
        twin_jcts,
        unsupported: off,
        per_task,
    })
}

/// Where the twin's figures rest on what the cluster measured: per class (by its index in the
/// workload's classes, as the twin numbers its task types) and GPU model it ran on, the least
/// and the most of each kind it ran at.
type Support = BTreeMap<(u16, Option<String>), (Vec<u32>, Vec<u32>)>;

/// The [`Support`] of workload `w`.
fn support(w: &Workload) -> Support {
    let mut out = Support::new();
    for t in &w.tasks {
        let Some(i) = w.classes.iter().position(|c| c.id == t.class) else {
            continue;
        };
        for r in t.runs.iter().filter(|r| r.to > r.from) {
            let model = w
                .nodes
                .iter()
                .find(|n| n.id == r.node)
                .and_then(|n| n.gpu_model.clone());
            let (lo, hi) = out
                .entry((i as u16, model))
                .or_insert_with(|| (r.alloc.0.clone(), r.alloc.0.clone()));
            for (k, v) in r.alloc.0.iter().enumerate() {
                if let (Some(l), Some(h)) = (lo.get_mut(k), hi.get_mut(k)) {
                    *l = (*l).min(*v);
                    *h = (*h).max(*v);
                }
            }
        }
    }
    out
}

/// The share of `ran`'s run slots (a candidate's episode on the twin, whose boxes are the
/// workload's in order) on a GPU model its class never ran on, or at an allocation outside
/// what it ran at there ([`support`]); 0 where it ran nothing.
fn unsupported(support: &Support, w: &Workload, ran: &Workload) -> f64 {
    let (mut out, mut all) = (0u64, 0u64);
    for t in &ran.tasks {
        for r in &t.runs {
            let slots = r.to.saturating_sub(r.from);
            all += slots;
            let model = w
                .nodes
                .get(r.node.0 as usize)
                .and_then(|n| n.gpu_model.clone());
            let inside = support.get(&(t.class, model)).is_some_and(|(lo, hi)| {
                r.alloc.0.iter().enumerate().all(|(k, v)| {
                    lo.get(k).is_some_and(|l| l <= v) && hi.get(k).is_some_and(|h| v <= h)
                })
            });
            if !inside {
                out += slots;
            }
        }
    }
    if all == 0 {
        0.0
    } else {
        out as f64 / all as f64
    }
}

/// Standard errors of a candidate's gain (over the tasks judged, paired: each task's JCT under
/// the policy in use less its JCT under the candidate, on the same twin; each window's, then
/// their mean's) that the gain must clear beside the margin. A window's tasks are one draw of the cluster's work and the next
/// window another: on Gavel replays of 50 heavy-tailed jobs a window's 18 % gain came from a
/// few long jobs and reversed on the next window, while a plainly bad policy loses on most
/// tasks and its gain's error is small. One standard error: two kept `gen:30000` on `random`
/// for all six windows (docs/TWIN.md).
pub const GAIN_Z: f64 = 1.0;

/// The windows since adoption that judge: at most the latest three. A window is one draw of
/// the cluster's work; older ones describe a cluster that no longer is (a first, backlogged
/// window can hold most of the JCT of all windows, and while it counted in a total, a
/// baseline that won each later window by a fifth never replaced the policy that ran it:
/// `tests::a_backlogged_window_cannot_outvote_the_windows_after_it`).
pub const RECENT: usize = 3;

/// The most the twin's flattery of the policy in use is corrected by (a fraction of its
/// JCT): what the cluster measured stands for the twin's figure up to 1 / (1 − this) of it.
/// The twin replays the policy that ran on the estimator's figures of the very runs it made,
/// so it tends to flatter that policy, while a candidate's runs rest on figures measured at
/// other allocations; a larger correction would rest on a measured JCT that counts only the
/// tasks that finished.
pub const MAX_BIAS: f64 = 0.25;

/// Keep `current` unless a candidate's gain over it is above `margin` (a fraction) plus the
/// twins' uncorrected error on `current` plus [`GAIN_Z`] standard errors of the gain; then the
/// candidate of the largest gain. `windows` are those since `current` was adopted, oldest
/// first; the latest [`RECENT`] that judge a candidate judge it (the latest always does: its
/// twin's tables credit no allocation beyond what ran ([`twin::scenario_toml`]), so its
/// guesses err against a candidate, and a guard that waited for the latest window to know a
/// candidate could never leave a policy that runs every task at one allocation; an earlier
/// window whose twin only guessed at a candidate, more than [`MAX_UNSUPPORTED`] of its slots
/// extrapolated, counts neither for nor against it).
///
/// Each window is judged on its own and counts the same: the candidate's gain there is
/// 1 − its average JCT on the twin over `current`'s, and the gain judged is the mean over the
/// windows, so one backlogged window cannot outvote later ones. Where the twin put `current`
/// below what the cluster measured of it (the twin flatters the policy that ran), the measured
/// figure stands for `current`'s there, up to [`MAX_BIAS`]; where above, the overstatement,
/// and where further below, what the bound leaves (the windows' mean), is added to what the
/// gain must clear. A candidate that won the latest
/// window but lost the ones before by more does not replace `current` (a policy that did
/// better on one window's work is a bet on the next window being like the last). Where the
/// latest window does not judge `current` (its replay failed), the best candidate there.
/// Ties go to the earlier candidate.
pub fn judge(current: &str, windows: &[Judged], margin: f64) -> Decision {
    let Some(latest) = windows.last() else {
        return Decision {
            policy: current.to_string(),
            switched: false,
            twin_jcts: Vec::new(),
            measured: 0.0,
            unsupported: Vec::new(),
            gains: Vec::new(),
            needed: Vec::new(),
            windows: 0,
        };
    };
    let mut gains = Vec::new();
    let mut needs = Vec::new();
    let mut best: Option<(String, f64)> = None;
    let last = windows.len() - 1;
    let mut judged = 0;
    for (name, _) in latest.twin_jcts.iter().filter(|(n, _)| n != current) {
        let recent: Vec<&Judged> = windows
            .iter()
            .enumerate()
            .filter(|(i, w)| {
                (*i == last || w.judges(name)) && w.jct(current).is_some() && w.jct(name).is_some()
            })
            .map(|(_, w)| w)
            .collect();
        let recent = &recent[recent.len().saturating_sub(RECENT)..];
        let Some(g) = gain(current, name, recent) else {
            continue;
        };
        judged = judged.max(recent.len());
        gains.push((name.clone(), g.gain));
        let needed = margin + g.uncorrected + GAIN_Z * g.error;
        needs.push((name.clone(), needed));
        if g.gain > needed && best.as_ref().is_none_or(|b| g.gain > b.1) {
            best = Some((name.clone(), g.gain));
        }
    }
    let policy = if latest.jct(current).is_none() {
        // The policy in use could not be judged (its replay failed): the best that could.
        latest
            .twin_jcts
            .iter()
            .filter(|(_, j)| j.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or_else(|| current.to_string(), |(n, _)| n.clone())
    } else {
        best.map_or_else(|| current.to_string(), |(n, _)| n)
    };
    Decision {
        switched: policy != current,
        policy,
        twin_jcts: latest.twin_jcts.clone(),
        measured: latest.measured,
        unsupported: latest.unsupported.clone(),
        gains,
        needed: needs,
        windows: judged,
    }
}

/// A candidate's gain over the policy in use on the windows that judge it ([`judge`]).
struct Gain {
    /// The mean over the windows of 1 − the candidate's JCT over the policy in use's (that
    /// one's corrected for the twin's flattery).
    gain: f64,
    /// The mean over the windows of the twin's error on the policy in use that the correction
    /// leaves: how far it put it above what was measured, or below by more than [`MAX_BIAS`]
    /// corrects (0 where neither).
    uncorrected: f64,
    /// The standard error of `gain` over the tasks judged.
    error: f64,
}

fn gain(current: &str, name: &str, windows: &[&Judged]) -> Option<Gain> {
    let (mut gain, mut over, mut var, mut k) = (0.0, 0.0, 0.0, 0.0);
    for w in windows {
        let (Some(a), Some(b)) = (w.jct(current), w.jct(name)) else {
            continue;
        };
        if a <= 0.0 {
            continue;
        }
        // The twin against what the cluster measured of the policy that ran.
        let ratio = if w.measured > 0.0 {
            a / w.measured
        } else {
            1.0
        };
        let corrected = ratio.clamp(1.0 - MAX_BIAS, 1.0);
        // What the correction leaves of the twin's error on the policy in use, either way: an
        // overstatement, or flattery past the bound. Both go on the bar: a twin that put the
        // policy that ran at half what the cluster measured (a Gavel window, two thirds of every
        // candidate's slots extrapolated) is no better a judge of the candidates than one that
        // doubled it, and correcting the policy in use alone would credit every candidate with
        // the twin's optimism.
        over += (ratio - 1.0).max(0.0) + (1.0 - ratio / corrected).max(0.0);
        let a_fair = a / corrected;
        gain += 1.0 - b / a_fair;
        if let (Some(x), Some(y)) = (w.per_task(current), w.per_task(name)) {
            let paired: Vec<f64> = x.iter().zip(y).map(|(x, y)| x - y).collect();
            var += spread(&paired, a * w.tasks as f64).powi(2);
        }
        k += 1.0;
    }
    (k > 0.0).then(|| Gain {
        gain: gain / k,
        uncorrected: over / k,
        error: var.sqrt() / k,
    })
}

/// The standard error of a gain `Σd / total` over paired per-task differences `d` (0 where
/// fewer than two are known): the tasks' spread, as a share of the policy in use's total.
fn spread(d: &[f64], total: f64) -> f64 {
    let n = d.len() as f64;
    if d.len() < 2 || total <= 0.0 {
        return 0.0;
    }
    let mean = d.iter().sum::<f64>() / n;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    // Σd's standard error is √(n·var); `total` is Σ of the policy in use's JCTs over the same
    // windows (weighted by their tasks, as the gain is).
    (n * var).sqrt() / total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(tasks: usize, measured: f64, v: &[(&str, f64)]) -> Judged {
        Judged {
            tasks,
            measured,
            twin_jcts: v.iter().map(|(n, x)| (n.to_string(), *x)).collect(),
            unsupported: v.iter().map(|(n, _)| (n.to_string(), 0.0)).collect(),
            per_task: Vec::new(),
        }
    }

    fn one(measured: f64, v: &[(&str, f64)]) -> Vec<Judged> {
        vec![win(10, measured, v)]
    }

    /// A better candidate replaces the policy in use only beyond the margin, and the way back
    /// needs the same margin: a tie never flips the cluster.
    #[test]
    fn the_guard_switches_beyond_the_margin_only_and_back_with_hysteresis() {
        let d = judge(
            "tapfinger",
            &one(10.0, &[("tapfinger", 10.0), ("tiresias", 9.7)]),
            MARGIN,
        );
        assert_eq!((d.policy.as_str(), d.switched), ("tapfinger", false));
        let d = judge(
            "tapfinger",
            &one(
                10.0,
                &[("tapfinger", 10.0), ("tiresias", 9.0), ("drf", 9.4)],
            ),
            MARGIN,
        );
        assert_eq!((d.policy.as_str(), d.switched), ("tiresias", true));
        // Back only when the learned policy is better by the margin.
        let d = judge(
            "tiresias",
            &one(9.0, &[("tapfinger", 8.8), ("tiresias", 9.0)]),
            MARGIN,
        );
        assert_eq!(d.policy, "tiresias");
        let d = judge(
            "tiresias",
            &one(9.0, &[("tapfinger", 8.0), ("tiresias", 9.0)]),
            MARGIN,
        );
        assert_eq!((d.policy.as_str(), d.switched), ("tapfinger", true));
        // The policy in use unjudged: the best judged.
        let d = judge(
            "tapfinger",
            &one(10.0, &[("tiresias", 9.0), ("drf", 8.0)]),
            MARGIN,
        );
        assert_eq!(d.policy, "drf");
        assert_eq!(judge("tapfinger", &[], MARGIN).policy, "tapfinger");
    }

    /// A twin 20 % off on the policy it watched needs a candidate 25 % better to switch.
    #[test]
    fn a_twin_that_misjudged_the_policy_in_use_needs_a_larger_gain() {
        let twin = [("tapfinger", 12.0), ("tiresias", 9.5)];
        assert_eq!(
            judge("tapfinger", &one(12.0, &twin), MARGIN).policy,
            "tiresias"
        );
        assert_eq!(
            judge("tapfinger", &one(10.0, &twin), MARGIN).policy,
            "tapfinger"
        );
        let twin = [("tapfinger", 12.0), ("tiresias", 8.9)];
        assert_eq!(
            judge("tapfinger", &one(10.0, &twin), MARGIN).policy,
            "tiresias"
        );
    }

    /// Where the twin flatters the policy that ran, what the cluster measured of it stands
    /// for the twin's figure, up to [`MAX_BIAS`]: a 10 % gain on the measured JCT clears the
    /// margin, and the flattery no longer raises the bar.
    #[test]
    fn a_twin_that_flattered_the_policy_in_use_is_corrected_within_a_bound() {
        let twin = [("tapfinger", 10.0), ("tiresias", 10.8)];
        let d = judge("tapfinger", &one(12.0, &twin), MARGIN);
        assert_eq!(d.policy, "tiresias");
        assert!((d.gains[0].1 - 0.1).abs() < 1e-9);
        assert!((d.needed[0].1 - MARGIN).abs() < 1e-9);
        // Measured at three times the twin's figure: corrected by a quarter only.
        let twin = [("tapfinger", 10.0), ("tiresias", 12.9)];
        let d = judge("tapfinger", &one(30.0, &twin), MARGIN);
        assert_eq!(d.policy, "tapfinger");
        assert!((d.gains[0].1 - (1.0 - 12.9 * 0.75 / 10.0)).abs() < 1e-9);
        // What the quarter leaves uncorrected (the twin still at 10 / 30 / 0.75 of the
        // measured figure) goes on the bar: were every candidate flattered as much, a gain
        // below it would be the twin's optimism alone. A candidate at half the policy in use
        // on that twin (a gain of 1 − 5 / 13.3 on the corrected figure) still clears it; one
        // at 0.6 of it no longer does, though its gain is more than ten times the margin.
        let left = 1.0 - (10.0 / 30.0) / 0.75;
        assert!(
            (d.needed[0].1 - MARGIN - left).abs() < 1e-9,
            "{:?}",
            d.needed
        );
        let far = |cand: f64| {
            judge(
                "tapfinger",
                &one(30.0, &[("tapfinger", 10.0), ("tiresias", cand)]),
                MARGIN,
            )
        };
        assert_eq!(far(5.0).policy, "tiresias");
        let d = far(6.0);
        assert_eq!(d.policy, "tapfinger");
        assert!(d.gains[0].1 > 10.0 * MARGIN, "{:?}", d.gains);
    }

    /// The shape of a Gavel replay the guard once never left: a first, backlogged window the
    /// learned policy wins (more than half the JCT of all windows), then windows a baseline
    /// wins by 21–30 % each, the twin flattering the learned policy by 5.5 %. Judged window
    /// by window, the baseline replaces it after the third; on the total since adoption (the
    /// rule before) it never would.
    #[test]
    fn a_backlogged_window_cannot_outvote_the_windows_after_it() {
        let first = win(50, 106.0, &[("tapfinger", 100.0), ("lookahead", 130.0)]);
        let later = |k: usize| {
            let lose = [0.21, 0.30, 0.25, 0.22, 0.28][k];
            win(
                50,
                21.0,
                &[
                    ("tapfinger", 21.0 * 0.945),
                    ("lookahead", 21.0 * (1.0 - lose)),
                ],
            )
        };
        let mut windows = vec![first];
        let mut chosen = Vec::new();
        for k in 0..5 {
            windows.push(later(k));
            chosen.push(judge("tapfinger", &windows, MARGIN).policy);
        }
        assert_eq!(chosen[0], "tapfinger", "one later window is not enough");
        assert_eq!(chosen[1], "lookahead");
        let total = |n: &str| windows.iter().map(|w| w.jct(n).unwrap()).sum::<f64>();
        assert!(
            total("lookahead") > total("tapfinger"),
            "the total says stay"
        );
        // Once the first window is older than the recent ones, it no longer counts at all.
        let d = judge("tapfinger", &windows, MARGIN);
        assert_eq!(d.windows, RECENT);
        assert!(d.gains[0].1 > 0.2, "{:?}", d.gains);
    }

    /// A twin far off in one window (the policy in use replayed at 3.6 times what was measured)
    /// raises the bar while that window is recent, and no longer once it is not: the bar comes
    /// down when the evidence does.
    #[test]
    fn a_bad_twin_raises_the_bar_only_while_its_window_is_recent() {
        let bad = win(20, 10.0, &[("tapfinger", 36.1), ("tiresias", 30.0)]);
        let good = || win(20, 10.0, &[("tapfinger", 10.0), ("tiresias", 8.0)]);
        let mut windows = vec![bad];
        for _ in 0..RECENT - 1 {
            windows.push(good());
            assert_eq!(judge("tapfinger", &windows, MARGIN).policy, "tapfinger");
        }
        windows.push(good());
        let d = judge("tapfinger", &windows, MARGIN);
        assert_eq!(d.policy, "tiresias");
        assert!((d.needed[0].1 - MARGIN).abs() < 1e-9, "{:?}", d.needed);
    }

    /// The windows since the policy in use was adopted judge together: a candidate that wins
    /// the latest by 8 % but lost the one before by more stays out; where the earlier window's
    /// twin only guessed at the candidate, the latest alone judges it, guess or not.
    #[test]
    fn a_candidate_must_win_over_the_windows_that_know_it() {
        let earlier = win(10, 26.0, &[("tapfinger", 26.0), ("lookahead", 28.5)]);
        let latest = win(10, 47.0, &[("tapfinger", 47.0), ("lookahead", 43.3)]);
        assert_eq!(
            judge("tapfinger", std::slice::from_ref(&latest), MARGIN).policy,
            "lookahead"
        );
        let d = judge("tapfinger", &[earlier.clone(), latest.clone()], MARGIN);
        assert_eq!((d.policy.as_str(), d.windows), ("tapfinger", 2));
        let (_, gain) = d.gains[0].clone();
        let each = ((1.0 - 28.5 / 26.0) + (1.0 - 43.3 / 47.0)) / 2.0;
        assert!((gain - each).abs() < 1e-9, "{gain}");
        let mut guessed = earlier;
        guessed.unsupported[1].1 = 0.72;
        let d = judge("tapfinger", &[guessed.clone(), latest.clone()], MARGIN);
        assert_eq!(d.policy, "lookahead");
        let mut latest_guessed = latest;
        latest_guessed.unsupported[1].1 = 0.9;
        let d = judge("tapfinger", &[guessed, latest_guessed], MARGIN);
        assert_eq!(d.policy, "lookahead");
    }

    /// A gain carried by a few tasks is noise: 10 % from one long task in ten does not move
    /// the cluster; 10 % from every task a little does.
    #[test]
    fn a_gain_a_few_tasks_carry_must_clear_its_spread() {
        let with = |current: Vec<f64>, cand: Vec<f64>| {
            let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            let mut w = win(
                current.len(),
                avg(&current),
                &[("tapfinger", avg(&current)), ("tiresias", avg(&cand))],
            );
            w.per_task = vec![("tapfinger".into(), current), ("tiresias".into(), cand)];
            judge("tapfinger", &[w], MARGIN).policy
        };
        // One task of ten saves 10 slots of 100: a 10 % gain, all of it one task's.
        let current: Vec<f64> = (0..10).map(|i| if i == 0 { 20.0 } else { 8.889 }).collect();
        let mut cand = current.clone();
        cand[0] = 10.0;
        assert_eq!(with(current.clone(), cand), "tapfinger");
        // Every task 10 % sooner: the same gain, no spread.
        let cand: Vec<f64> = current.iter().map(|x| x * 0.9).collect();
        assert_eq!(with(current, cand), "tiresias");
    }
}
