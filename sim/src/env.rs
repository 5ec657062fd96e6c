//! The simulator's front: a scenario prepared for episodes ([`Simulator`]), what an episode
//! reports ([`EpisodeResult`]), who may watch it ([`Observer`]) and how it fails ([`SimError`]).
//! The episode itself is [`crate::episode`]; scheduling state is the shared
//! [`tapfinger::ledger::Ledger`], decisions come from the policies and winners from the protocol.

use crate::scenario::Scenario;
use tapfinger::view::ClusterView;
use tapfinger::{NodeId, Policy, ProtocolError, Resources, Round, RoundOutcome, Task, TaskId};

/// Errors that end an episode.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A policy returned something the rules forbid (a bug in the policy).
    #[error("policy {policy} on agent {agent} in slot {slot}: {reason}")]
    PolicyViolation {
        /// Policy name.
        policy: String,
        /// Agent.
        agent: NodeId,
        /// Slot.
        slot: u64,
        /// What it did wrong.
        reason: String,
    },
    /// The number of policies does not match the number of nodes.
    #[error("{policies} policies given for {nodes} nodes")]
    PolicyCount {
        /// Policies.
        policies: usize,
        /// Nodes.
        nodes: usize,
    },
    /// Two protocol instances decided a round differently (a protocol bug).
    #[error("protocol instances disagree on round {0}")]
    Divergence(Round),
    /// A protocol instance refused a message or did not decide.
    #[error("protocol error in round {round}: {source}")]
    Protocol {
        /// Round.
        round: Round,
        /// Cause.
        source: ProtocolError,
    },
    /// The round did not complete (a protocol bug).
    #[error("round {0} was not decided by every agent")]
    Undecided(Round),
    /// The episode hit its slot limit.
    #[error(
        "episode did not finish within {slots} slots: {unfinished} task(s) unfinished ({stalled} stalled below their true need)"
    )]
    DidNotFinish {
        /// Limit.
        slots: u64,
        /// Tasks not done.
        unfinished: usize,
        /// Of which running below their need.
        stalled: usize,
    },
}

/// Watches an episode as it runs (audits, training data collection). Every method has a no-op
/// default.
pub trait Observer {
    /// Whether [`Observer::view`] should be called (building a snapshot costs time).
    fn wants_views(&self) -> bool {
        false
    }
    /// The cluster after every decision step and after every elastic re-allocation.
    fn view(&mut self, _view: &ClusterView) {}
    /// The view every agent decides from at each decision step (only if
    /// [`Observer::wants_views`]).
    fn decision_view(&mut self, _view: &ClusterView) {}
    /// End of a slot's run: a running task's progress, and whether it finished.
    fn progressed(&mut self, _slot: u64, _task: TaskId, _progress: f64, _finished: bool) {}
    /// Every decided round, as all agents decided it.
    fn round(&mut self, _outcome: &RoundOutcome) {}
    /// End of a slot: each agent's reward for it (−tasks queued or running at its node).
    fn slot_end(&mut self, _slot: u64, _rewards: &[f64]) {}
}

/// An observer that watches nothing.
pub struct NoObserver;

impl Observer for NoObserver {}

/// What happened to one task.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TaskRecord {
    /// Task id.
    pub id: u64,
    /// Type name index.
    pub ty: u16,
    /// Arrival slot.
    pub arrival: u64,
    /// Slot of the (last) start.
    pub start: u64,
    /// End of the slot in which it finished.
    pub finish: u64,
    /// Node it finished on.
    pub node: u32,
    /// Completion time in slots (finish − arrival).
    pub jct: u64,
    /// Best isolated completion time in slots on any reachable node.
    pub lower_bound: u64,
    /// Failed runs (below the true need in `fail` mode).
    pub failures: u32,
}

/// Per-slot measurements.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SlotRecord {
    /// Slot.
    pub slot: u64,
    /// Tasks arrived and not finished (at the end of the slot's decisions).
    pub in_system: u32,
    /// Allocated / capacity per kind, summed over nodes.
    pub utilization: Vec<f64>,
    /// Contested tasks in the slot's rounds.
    pub conflicts: u32,
    /// Tasks started.
    pub commits: u32,
    /// Decision steps (rounds).
    pub steps: u32,
}

/// The outcome of one episode.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EpisodeResult {
    /// Policy name.
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// One record per task, by id.
    pub tasks: Vec<TaskRecord>,
    /// One record per slot.
    pub slots: Vec<SlotRecord>,
    /// Sum of per-slot rewards per agent (−tasks queued or running at that node).
    pub returns: Vec<f64>,
    /// Protocol messages delivered.
    pub messages: u64,
}

/// A scenario prepared for running episodes: per-type, per-node best isolated runtimes.
pub struct Simulator {
    sc: Scenario,
    /// `[type][node]`: best isolated slots on that node, if the type can run there.
    best: Vec<Vec<Option<u64>>>,
}

/// Largest allocation grid enumerated at once (lower bounds, the clairvoyant's table). A larger
/// grid is thinned to evenly spaced levels per kind (always including both ends), so a very fine
/// grid (memory in MiB, say) costs bounded time; the lower bound is then the best over those levels.
pub const MAX_GRID: usize = 200_000;

/// The allocations between `lo` and `hi` (inclusive) per kind: every one if there are at most
/// [`MAX_GRID`], else evenly spaced levels of each kind.
pub fn allocations(lo: &Resources, hi: &Resources) -> Vec<Resources> {
    let kinds = lo.len();
    let size: f64 = (0..kinds)
        .map(|k| f64::from(hi.get(k).saturating_sub(lo.get(k)) + 1))
        .product();
    let per_kind = if size <= MAX_GRID as f64 {
        u32::MAX
    } else {
        ((MAX_GRID as f64).powf(1.0 / kinds.max(1) as f64).floor() as u32).max(2)
    };
    let levels = |k: usize| -> Vec<u32> {
        let (a, b) = (lo.get(k), hi.get(k).max(lo.get(k)));
        let span = b - a;
        if span < per_kind {
            return (a..=b).collect();
        }
        let mut v: Vec<u32> = (0..per_kind)
            .map(|i| a + (u64::from(span) * u64::from(i) / u64::from(per_kind - 1)) as u32)
            .collect();
        v.dedup();
        v
    };
    let mut out = vec![Vec::new()];
    for k in 0..kinds {
        let lv = levels(k);
        out = out
            .into_iter()
            .flat_map(|p: Vec<u32>| lv.iter().map(move |v| [p.clone(), vec![*v]].concat()))
            .collect();
    }
    out.into_iter().map(Resources).collect()
}

impl Simulator {
    /// Prepare a scenario.
    pub fn new(sc: Scenario) -> Self {
        let best = sc
            .types
            .iter()
            .map(|t| {
                sc.nodes
                    .iter()
                    .map(|n| {
                        if !t.min_demand.fits_in(&n.capacity) {
                            return None;
                        }
                        let hi = t
                            .max_demand
                            .as_ref()
                            .map_or(n.capacity.clone(), |m| m.min_each(&n.capacity));
                        let lo = t.min_demand.max_each(&t.need).min_each(&hi);
                        allocations(&lo, &hi)
                            .iter()
                            .filter_map(|a| t.speed.isolated(a, sc.slot_seconds).map(|x| x.0))
                            .min()
                    })
                    .collect()
            })
            .collect();
        Self { sc, best }
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    /// Best isolated slots for a task: min over its reachable nodes.
    pub fn lower_bound(&self, task: &Task) -> u64 {
        task.reachable
            .iter()
            .filter_map(|n| self.best[usize::from(task.ty.0)][n.0 as usize])
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Run one episode with one policy instance per node (node i is agent i).
    pub fn run(
        &self,
        policies: Vec<Box<dyn Policy>>,
        seed: u64,
    ) -> Result<EpisodeResult, SimError> {
        self.run_observed(policies, seed, &mut NoObserver)
    }

    /// [`Simulator::run`], reporting views, rounds and rewards to `observe` (audits, training).
    pub fn run_observed(
        &self,
        policies: Vec<Box<dyn Policy>>,
        seed: u64,
        observe: &mut dyn Observer,
    ) -> Result<EpisodeResult, SimError> {
        crate::episode::Episode::new(self, policies, seed)?.run(seed, observe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_grid_is_complete_when_small_and_thinned_when_huge() {
        let all = allocations(&Resources(vec![1, 2]), &Resources(vec![3, 3]));
        assert_eq!(all.len(), 6);
        assert!(all.contains(&Resources(vec![2, 3])));
        let lo = Resources(vec![1, 1, 1]);
        let hi = Resources(vec![100_000, 64, 1 << 20]);
        let thin = allocations(&lo, &hi);
        assert!(thin.len() <= MAX_GRID, "{}", thin.len());
        assert!(thin.contains(&lo) && thin.contains(&hi));
    }
}
