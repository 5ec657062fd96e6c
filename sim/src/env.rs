//! The slotted environment: drives the shared decision protocol with a virtual clock and a speed
//! model.
//!
//! Each slot: tasks arrive; elastic nodes show their running tasks at minimum demand; then decision
//! steps repeat — every agent's policy sees the same [`ClusterView`], proposes through its own
//! [`Protocol`] instance, every message is delivered to every other instance, and each instance
//! decides the round on its own (the simulator checks that they all agree) — until a step commits
//! nothing; elastic policies re-allocate; running tasks progress; rewards are paid. This module
//! owns no scheduling logic: decisions come from the policies, winners from the protocol.

use crate::scenario::{MemoryMode, Scenario};
use crate::workload;
use std::sync::Arc;
use tapfinger::protocol::{Output, ProtocolConfig};
use tapfinger::view::{ClusterView, NodeView, PendingView, RunningView};
use tapfinger::{
    NodeId, Policy, Protocol, ProtocolError, Resources, Round, RoundOutcome, Task, TaskId,
};

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

enum State {
    Pending,
    Running {
        node: usize,
        alloc: Resources,
        started: u64,
        prev: Option<Resources>,
    },
    Done,
}

struct Live {
    task: Arc<Task>,
    state: State,
    progress: f64,
    attained: f64,
    failures: u32,
    start: u64,
    record: Option<TaskRecord>,
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
        mut policies: Vec<Box<dyn Policy>>,
        seed: u64,
        observe: &mut dyn Observer,
    ) -> Result<EpisodeResult, SimError> {
        let sc = &self.sc;
        let n = sc.nodes.len();
        if policies.len() != n {
            return Err(SimError::PolicyCount {
                policies: policies.len(),
                nodes: n,
            });
        }
        let policy_name = policies
            .first()
            .map(|p| p.name().to_string())
            .unwrap_or_default();
        let ids: Vec<NodeId> = (0..n).map(|i| NodeId(i as u32)).collect();
        let mut protocols: Vec<Protocol> = ids
            .iter()
            .map(|&id| {
                Protocol::new(
                    id,
                    ids.iter().copied(),
                    Round::default(),
                    ProtocolConfig::default(),
                )
            })
            .collect();
        let mut rngs: Vec<tapfinger::Rng> = (0..n)
            .map(|i| {
                tapfinger::seeded_rng(
                    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        .wrapping_add(i as u64 + 1),
                )
            })
            .collect();
        let (_, gpu_kind) = sc.cpu_gpu_kinds();
        let mut live: Vec<Live> = workload::generate(sc, seed)
            .into_iter()
            .map(|t| Live {
                task: Arc::new(t),
                state: State::Pending,
                progress: 0.0,
                attained: 0.0,
                failures: 0,
                start: 0,
                record: None,
            })
            .collect();
        let capacity: Vec<Resources> = sc.nodes.iter().map(|nd| nd.capacity.clone()).collect();
        let total_cap: Vec<f64> = (0..sc.space.len())
            .map(|k| capacity.iter().map(|c| f64::from(c.get(k))).sum())
            .collect();
        let mut free = capacity.clone();
        let mut queues: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut running: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut next_arrival = 0;
        let mut done = 0;
        let mut slots = Vec::new();
        let mut returns = vec![0.0; n];
        let mut messages = 0u64;
        let mut scratch = vec![usize::MAX; live.len()];
        let elastic: Vec<bool> = policies.iter().map(|p| p.elastic()).collect();
        // The cluster as agents see it at (slot, step); a macro because it borrows most locals.
        macro_rules! snapshot {
            ($slot:expr, $step:expr) => {
                build_view(
                    sc,
                    $slot,
                    $step,
                    &live,
                    &queues,
                    &running,
                    &free,
                    &capacity,
                    &mut scratch,
                )
            };
        }

        let mut slot = 0u64;
        while done < live.len() {
            if slot >= sc.max_slots {
                let stalled = live
                    .iter()
                    .filter(|l| matches!(&l.state, State::Running { alloc, .. } if !sc.types[usize::from(l.task.ty.0)].need.fits_in(alloc)))
                    .count();
                return Err(SimError::DidNotFinish {
                    slots: sc.max_slots,
                    unfinished: live.len() - done,
                    stalled,
                });
            }
            // Arrivals.
            while next_arrival < live.len() && live[next_arrival].task.arrival == slot {
                for node in &live[next_arrival].task.reachable {
                    queues[node.0 as usize].push(next_arrival);
                }
                next_arrival += 1;
            }
            // Elastic nodes show running tasks at their minimum until they re-balance.
            for i in 0..n {
                if elastic[i] {
                    for &t in &running[i] {
                        let min = live[t].task.min_demand.clone();
                        if let State::Running { alloc, .. } = &mut live[t].state {
                            *alloc = min;
                        }
                    }
                    free[i] = node_free(&capacity[i], &running[i], &live);
                }
            }
            // Decision steps.
            let (mut conflicts, mut commits, mut steps) = (0u32, 0u32, 0u32);
            loop {
                let view = snapshot!(slot, steps);
                let round = protocols[0].round();
                let mut sends = Vec::with_capacity(n);
                let mut decided: Vec<Option<RoundOutcome>> = vec![None; n];
                for i in 0..n {
                    let Some(v) = view.for_agent(ids[i]) else {
                        continue;
                    };
                    let decision = policies[i].decide(&v, &mut rngs[i]);
                    let proposal =
                        tapfinger::policy::to_proposal(&decision, &v).map_err(|reason| {
                            SimError::PolicyViolation {
                                policy: policies[i].name().to_string(),
                                agent: ids[i],
                                slot,
                                reason,
                            }
                        })?;
                    let now = slot * 1_000_000 + u64::from(steps);
                    let out = protocols[i]
                        .propose(proposal, now)
                        .map_err(|source| SimError::Protocol { round, source })?;
                    collect(out, &mut sends, &mut decided[i]);
                }
                for i in 0..n {
                    for m in &sends {
                        if m.from == ids[i] {
                            continue;
                        }
                        messages += 1;
                        let now = slot * 1_000_000 + u64::from(steps);
                        let out = protocols[i]
                            .receive(m.clone(), now)
                            .map_err(|source| SimError::Protocol { round, source })?;
                        let mut ignored = Vec::new();
                        collect(out, &mut ignored, &mut decided[i]);
                    }
                }
                let Some(outcome) = decided[0].take() else {
                    return Err(SimError::Undecided(round));
                };
                for d in decided.iter().skip(1) {
                    if d.as_ref() != Some(&outcome) {
                        return Err(SimError::Divergence(round));
                    }
                }
                observe.round(&outcome);
                steps += 1;
                conflicts += outcome.contested;
                for c in &outcome.commits {
                    let t = c.task.0 as usize;
                    let node = c.agent.0 as usize;
                    commits += 1;
                    free[node] = free[node].checked_sub(&c.alloc).map_err(|e| {
                        SimError::PolicyViolation {
                            policy: policies[node].name().to_string(),
                            agent: c.agent,
                            slot,
                            reason: format!("committed allocation does not fit: {e}"),
                        }
                    })?;
                    for q in &live[t].task.reachable {
                        queues[q.0 as usize].retain(|&x| x != t);
                    }
                    running[node].push(t);
                    live[t].start = slot;
                    live[t].state = State::Running {
                        node,
                        alloc: c.alloc.clone(),
                        started: slot,
                        prev: None,
                    };
                }
                if observe.wants_views() {
                    observe.view(&snapshot!(slot, steps));
                }
                if outcome.slot_ended {
                    break;
                }
            }
            // Elastic re-allocation.
            for i in 0..n {
                if !elastic[i] || running[i].is_empty() {
                    continue;
                }
                let view = snapshot!(slot, steps);
                let Some(v) = view.for_agent(ids[i]) else {
                    continue;
                };
                let changes = policies[i].rebalance(&v, &mut rngs[i]);
                apply_rebalance(&changes, i, &running[i], &mut live, &capacity[i]).map_err(
                    |reason| SimError::PolicyViolation {
                        policy: policies[i].name().to_string(),
                        agent: ids[i],
                        slot,
                        reason,
                    },
                )?;
                free[i] = node_free(&capacity[i], &running[i], &live);
                if observe.wants_views() {
                    observe.view(&snapshot!(slot, steps));
                }
            }
            // Measurements of the slot as it will run.
            let mut used = vec![0.0; sc.space.len()];
            for l in &live {
                if let State::Running { alloc, .. } = &l.state {
                    for (k, u) in used.iter_mut().enumerate() {
                        *u += f64::from(alloc.get(k));
                    }
                }
            }
            let in_system = (next_arrival - done) as u32;
            for i in 0..n {
                returns[i] -= (running[i].len() + queues[i].len()) as f64;
            }
            let rewards: Vec<f64> = (0..n)
                .map(|i| -((running[i].len() + queues[i].len()) as f64))
                .collect();
            observe.slot_end(slot, &rewards);
            // Progress.
            let mut released = Vec::new();
            for i in 0..n {
                let mut keep = Vec::with_capacity(running[i].len());
                for &t in &running[i] {
                    let ty = &sc.types[usize::from(live[t].task.ty.0)];
                    let l = &mut live[t];
                    let State::Running { alloc, prev, .. } = &mut l.state else {
                        continue;
                    };
                    l.attained += f64::from(alloc.get(gpu_kind));
                    if !ty.need.fits_in(alloc) {
                        if sc.memory == MemoryMode::Fail {
                            // Killed for lack of memory; re-queued asking for what it really needs.
                            l.failures += 1;
                            l.progress = 0.0;
                            let mut task = (*l.task).clone();
                            task.min_demand = task.min_demand.max_each(&ty.need);
                            l.task = Arc::new(task);
                            l.state = State::Pending;
                            released.push(t);
                            continue;
                        }
                        *prev = Some(alloc.clone());
                        keep.push(t);
                        continue;
                    }
                    let penalty = if prev.as_ref().is_some_and(|p| p != alloc) {
                        sc.switch_weight
                    } else {
                        1.0
                    };
                    l.progress += ty.speed.delta(alloc, l.progress, sc.slot_seconds) * penalty;
                    *prev = Some(alloc.clone());
                    if l.progress >= 1.0 - 1e-12 {
                        let finish = slot + 1;
                        l.record = Some(TaskRecord {
                            id: l.task.id.0,
                            ty: l.task.ty.0,
                            arrival: l.task.arrival,
                            start: l.start,
                            finish,
                            node: i as u32,
                            jct: finish - l.task.arrival,
                            lower_bound: self.lower_bound(&l.task),
                            failures: l.failures,
                        });
                        l.state = State::Done;
                        done += 1;
                    } else {
                        keep.push(t);
                    }
                }
                running[i] = keep;
                free[i] = node_free(&capacity[i], &running[i], &live);
            }
            for t in released {
                for p in &mut protocols {
                    p.release(TaskId(t as u64));
                }
                for q in &live[t].task.reachable {
                    let queue = &mut queues[q.0 as usize];
                    let pos = queue.partition_point(|&x| x < t);
                    queue.insert(pos, t);
                }
            }
            slots.push(SlotRecord {
                slot,
                in_system,
                utilization: used
                    .iter()
                    .zip(&total_cap)
                    .map(|(u, c)| if *c > 0.0 { u / c } else { 0.0 })
                    .collect(),
                conflicts,
                commits,
                steps,
            });
            slot += 1;
        }
        let tasks = live.into_iter().filter_map(|l| l.record).collect();
        Ok(EpisodeResult {
            policy: policy_name,
            seed,
            tasks,
            slots,
            returns,
            messages,
        })
    }
}

fn collect(
    out: Vec<Output>,
    sends: &mut Vec<tapfinger::Message>,
    decided: &mut Option<RoundOutcome>,
) {
    for o in out {
        match o {
            Output::Send(m) => sends.push(m),
            Output::Decided(d) => *decided = Some(d),
        }
    }
}

/// Turn a policy's decision into a proposal, refusing what the rules forbid.
fn node_free(capacity: &Resources, running: &[usize], live: &[Live]) -> Resources {
    let mut free = capacity.clone();
    for &t in running {
        if let State::Running { alloc, .. } = &live[t].state {
            for (k, f) in free.0.iter_mut().enumerate() {
                *f = f.saturating_sub(alloc.get(k));
            }
        }
    }
    free
}

fn apply_rebalance(
    changes: &[(TaskId, Resources)],
    node: usize,
    running: &[usize],
    live: &mut [Live],
    cap: &Resources,
) -> Result<(), String> {
    let mut proposed: Vec<(usize, Resources)> = Vec::new();
    for (id, a) in changes {
        let t = id.0 as usize;
        if !running.contains(&t) {
            return Err(format!(
                "re-allocated {id}, which does not run on node {node}"
            ));
        }
        let task = &live[t].task;
        if !task.min_demand.fits_in(a) || !a.fits_in(&task.cap(cap)) {
            return Err(format!(
                "re-allocation {a} for {id} is outside [min {}, cap {}]",
                task.min_demand,
                task.cap(cap)
            ));
        }
        proposed.push((t, a.clone()));
    }
    let mut total = Resources::zeros(cap.len());
    for &t in running {
        let a = proposed
            .iter()
            .find(|(x, _)| *x == t)
            .map(|(_, a)| a.clone())
            .or_else(|| match &live[t].state {
                State::Running { alloc, .. } => Some(alloc.clone()),
                _ => None,
            });
        if let Some(a) = a {
            total = total.checked_add(&a).map_err(|e| e.to_string())?;
        }
    }
    if !total.fits_in(cap) {
        return Err(format!(
            "re-allocations total {total}, above the node's capacity {cap}"
        ));
    }
    for (t, a) in proposed {
        if let State::Running { alloc, .. } = &mut live[t].state {
            *alloc = a;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn build_view(
    sc: &Scenario,
    slot: u64,
    step: u32,
    live: &[Live],
    queues: &[Vec<usize>],
    running: &[Vec<usize>],
    free: &[Resources],
    capacity: &[Resources],
    scratch: &mut [usize],
) -> ClusterView {
    let mut ids: Vec<usize> = queues
        .iter()
        .flat_map(|q| q.iter().take(sc.window).copied())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    for (i, &t) in ids.iter().enumerate() {
        scratch[t] = i;
    }
    let mut run_ids: Vec<usize> = running.iter().flatten().copied().collect();
    run_ids.sort_unstable();
    let pending: Vec<PendingView> = ids
        .iter()
        .map(|&t| PendingView {
            task: live[t].task.clone(),
        })
        .collect();
    let running_views: Vec<RunningView> = run_ids
        .iter()
        .filter_map(|&t| match &live[t].state {
            State::Running {
                node,
                alloc,
                started,
                ..
            } => Some(RunningView {
                task: live[t].task.clone(),
                node: NodeId(*node as u32),
                alloc: alloc.clone(),
                started: *started,
                progress: live[t].progress,
                attained: live[t].attained,
            }),
            _ => None,
        })
        .collect();
    let nodes = (0..queues.len())
        .map(|i| {
            let window: Vec<usize> = queues[i]
                .iter()
                .take(sc.window)
                .map(|&t| scratch[t])
                .collect();
            let mut rv: Vec<usize> = running[i]
                .iter()
                .filter_map(|t| run_ids.binary_search(t).ok())
                .collect();
            rv.sort_unstable();
            NodeView {
                id: NodeId(i as u32),
                capacity: capacity[i].clone(),
                free: free[i].clone(),
                overflow: queues[i].len().saturating_sub(sc.window),
                window,
                running: rv,
            }
        })
        .collect();
    for &t in &ids {
        scratch[t] = usize::MAX;
    }
    ClusterView {
        slot,
        step,
        num_types: sc.types.len(),
        nodes,
        pending,
        running: running_views,
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
