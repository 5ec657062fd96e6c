//! The size-aware baselines: policies an agent can run that order tasks by what the cluster
//! knows of their size ([`tapfinger_core::view::expected_remaining`]: declared work, a running
//! task's own progress, the size book's distribution learned from the tasks that finished where
//! a view carries it, else its class's mean; never a speed model or a true size). Every view
//! the ledger builds carries the learned distribution and the work done, alike in the simulator
//! and on agents (`tapfinger_core::ledger`, sizes).
//!
//! - `shortest-predicted`: admits the window task of the least aged expected size
//!   `expected² / (expected + waited)` (shortest predicted first, aged: a task that waited as
//!   long as it is expected to take counts as half its size, and less the longer it waits, so a
//!   long task, or one whose estimate is wrong, is never passed over for good), at its minimum
//!   demand; re-shares as
//!   `tiresias-share` does (the estimator's gain-greedy share), so that against it the only
//!   difference is the order sizes give.
//! - `srpt-predicted`: admits the same way; each slot, each of the node's spare CPU and GPU
//!   units goes to the running task whose job time it cuts by the largest fraction, weighted by
//!   one over the task's expected remaining work (preemptive shortest predicted remaining
//!   first, as far as a unit still speeds the shortest up: a shorter arrival takes the units at
//!   the next re-share). A running task keeps its minimum demand whatever its rank, so a wrong
//!   estimate slows a task but never stops it.
//! - `gittins`: admits by, and weights the re-share with, Gittins' index on the size book's
//!   distribution given the work done ([`tapfinger_core::sizes::Prediction::gittins`]; where the
//!   view carries none, or the task outlived its history, one over its expected remaining
//!   work), the admission aged as above.
//!
//! Where a class pays for a re-allocation (a measured switch cost of at least
//! [`COSTLY_SWITCH`]), a task of it that has run a slot keeps what it holds, as in the
//! gain-greedy share: a re-order every slot would cost it more than its rank gains.

use tapfinger_core::Rng;
use tapfinger_core::estimate::COSTLY_SWITCH;
use tapfinger_core::policy::{Decision, Policy};
use tapfinger_core::resources::Resources;
use tapfinger_core::share::{MIN_GAIN, estimated_slots};
use tapfinger_core::task::TaskId;
use tapfinger_core::view::{PendingView, RunningView, View};

/// How a size-aware baseline ranks tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Shortest predicted first, aged; the gain-greedy share.
    Shortest,
    /// Shortest predicted first, aged; spare units by least expected remaining work.
    Remaining,
    /// Gittins' index, admission aged; spare units by the index.
    Gittins,
}

/// A size-aware baseline (module doc).
#[derive(Debug, Clone)]
pub struct Sized(pub Rule);

/// The names the size-aware baselines go by.
pub const SHORTEST: &str = "shortest-predicted";
/// [`Rule::Remaining`]'s name.
pub const REMAINING: &str = "srpt-predicted";
/// [`Rule::Gittins`]'s name.
pub const GITTINS: &str = "gittins";

impl Policy for Sized {
    fn name(&self) -> &str {
        match self.0 {
            Rule::Shortest => SHORTEST,
            Rule::Remaining => REMAINING,
            Rule::Gittins => GITTINS,
        }
    }

    fn elastic(&self) -> bool {
        true
    }

    fn decide(&mut self, view: &View<'_>, _rng: &mut Rng) -> Decision {
        let slot = view.cluster.slot;
        let best = view.feasible_pending().max_by(|a, b| {
            admission(self.0, a, slot)
                .total_cmp(&admission(self.0, b, slot))
                // Ties: the older, then the lower id, first (max_by keeps the last maximum).
                .then(b.task.arrival.cmp(&a.task.arrival))
                .then(b.task.id.cmp(&a.task.id))
        });
        match best {
            Some(p) => Decision::Claim {
                task: p.task.id,
                alloc: p.task.min_demand.clone(),
                prob: 1.0,
            },
            None => Decision::Pass,
        }
    }

    fn rebalance(&mut self, view: &View<'_>, _rng: &mut Rng) -> Vec<(TaskId, Resources)> {
        match self.0 {
            Rule::Shortest => tapfinger_core::share::gain_greedy_shares(view, false, true),
            Rule::Remaining => fill_in_order(view, |r| 1.0 / r.expected_remaining()),
            Rule::Gittins => fill_in_order(view, running_index),
        }
    }
}

/// A pending task's admission score (higher first): one over its aged expected size, or its
/// Gittins index aged alike under [`Rule::Gittins`].
fn admission(rule: Rule, p: &PendingView, slot: u64) -> f64 {
    let expected = p.expected_remaining();
    let waited = slot.saturating_sub(p.task.arrival) as f64;
    // Aging: the size counted is `expected · expected / (expected + waited)`, half of it once
    // the task waited as long as it is expected to take, and on towards nothing.
    let aged = (waited + expected) / expected;
    match rule {
        Rule::Shortest | Rule::Remaining => aged / expected,
        Rule::Gittins => aged * index(p.size.as_deref(), p.done, expected),
    }
}

/// Gittins' index of a task that did `done` of work, or one over `expected` where the book has
/// no size above it.
fn index(size: Option<&tapfinger_core::sizes::Prediction>, done: f64, expected: f64) -> f64 {
    match size.map(|s| s.gittins(done)) {
        Some(g) if g > 0.0 => g,
        _ => 1.0 / expected,
    }
}

fn running_index(r: &RunningView) -> f64 {
    index(r.size.as_deref(), r.done, r.expected_remaining())
}

/// The node's running tasks from the allocations the view shows them at (their floors), the
/// settled costly ones given back what they hold; then each spare CPU and GPU unit, one at a
/// time, to the task whose estimated job time it cuts by the largest fraction weighted by the
/// task's `weight` (the shortest remaining, or the highest index, weigh most), while some cut is
/// at least [`MIN_GAIN`] (up to each task's maximum demand). A weighted form of the gain-greedy
/// share: all of a node's spare units to the shortest task alone wastes them where its speed-up
/// flattens (tried: on `synthetic3` its average JCT went from 4.4 to 7.5 slots, ± 5.1 over
/// five workloads), where a unit's cut of its job time says what it is worth there.
fn fill_in_order(
    view: &View<'_>,
    weight: impl Fn(&RunningView) -> f64,
) -> Vec<(TaskId, Resources)> {
    let mut tasks: Vec<&RunningView> = view.running().collect();
    tasks.sort_by_key(|r| r.task.id);
    let mut allocs: Vec<Resources> = tasks.iter().map(|r| r.alloc.clone()).collect();
    let mut free = view.node().free.clone();
    let settled: Vec<bool> = tasks
        .iter()
        .map(|r| r.est.switch_cost >= COSTLY_SWITCH && r.started < view.cluster.slot)
        .collect();
    for ((r, a), _) in tasks
        .iter()
        .zip(allocs.iter_mut())
        .zip(&settled)
        .filter(|(_, s)| **s)
    {
        for k in 0..free.len() {
            let back = r.in_force.get(k).saturating_sub(a.get(k)).min(free.get(k));
            a.0[k] += back;
            free.0[k] -= back;
        }
    }
    let weights: Vec<f64> = tasks.iter().map(|r| weight(r).max(0.0)).collect();
    let kinds: Vec<usize> = view.cluster.kinds.0[..2]
        .iter()
        .flatten()
        .copied()
        .filter(|&k| k < free.len())
        .collect();
    loop {
        let mut best: Option<(f64, usize, usize)> = None;
        for &k in kinds.iter().filter(|&&k| free.get(k) > 0) {
            for (i, r) in tasks.iter().enumerate().filter(|(i, _)| !settled[*i]) {
                let cap = r.task.max_demand.as_ref().map_or(u32::MAX, |m| m.get(k));
                if allocs[i].get(k) >= cap {
                    continue;
                }
                let now = estimated_slots(view, r, &allocs[i]);
                let mut more = allocs[i].clone();
                more.0[k] += 1;
                let cut = (now - estimated_slots(view, r, &more)) / now.max(1e-9);
                let score = cut * weights[i];
                if cut >= MIN_GAIN && best.is_none_or(|(s, _, _)| score > s) {
                    best = Some((score, i, k));
                }
            }
        }
        let Some((_, i, k)) = best else { break };
        allocs[i].0[k] += 1;
        free.0[k] -= 1;
    }
    tasks.iter().map(|r| r.task.id).zip(allocs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tapfinger_core::estimate::KindMap;
    use tapfinger_core::sizes::{Level, Prediction};
    use tapfinger_core::view::{ClusterView, NodeView, TaskEstimate};
    use tapfinger_core::{NodeId, Task, TaskTypeId};

    fn task(id: u64, arrival: u64) -> Arc<Task> {
        Arc::new(Task {
            id: TaskId(id),
            ty: TaskTypeId(0),
            min_demand: Resources(vec![1, 0, 1]),
            max_demand: None,
            priority: 0,
            reachable: vec![NodeId(0)],
            arrival,
            gang: None,
        })
    }

    /// A history of sizes all `s` (what the book says of a task it has seen three of).
    fn sized(s: f64) -> Option<Arc<Prediction>> {
        Some(Arc::new(Prediction {
            level: Level::Class,
            samples: 3,
            quantiles: [s; 3],
            mean: s,
            sorted: vec![s; 3],
        }))
    }

    fn est() -> TaskEstimate {
        TaskEstimate {
            at_min: 20.0,
            gain: [0.1, 0.0, 0.0],
            ..Default::default()
        }
    }

    fn pending(id: u64, arrival: u64, size: f64) -> PendingView {
        PendingView {
            task: task(id, arrival),
            est: est(),
            on: Vec::new(),
            class: 0,
            size: sized(size),
            done: 0.0,
        }
    }

    fn running(id: u64, size: f64, done: f64) -> RunningView {
        RunningView {
            task: task(id, 0),
            node: NodeId(0),
            alloc: Resources(vec![1, 0, 1]),
            in_force: Resources(vec![1, 0, 1]),
            started: 0,
            progress: 0.0,
            attained: 0.0,
            est: est(),
            est_alloc: 0.0,
            converging: false,
            size: sized(size),
            done,
        }
    }

    fn cluster(slot: u64, pending: Vec<PendingView>, running: Vec<RunningView>) -> ClusterView {
        ClusterView {
            slot,
            kinds: KindMap([Some(0), None, Some(2)]),
            nodes: vec![NodeView {
                gpu: Default::default(),
                id: NodeId(0),
                capacity: Resources(vec![8, 0, 8]),
                free: Resources(vec![4, 0, 4]),
                window: (0..pending.len()).collect(),
                overflow: 0,
                running: (0..running.len()).collect(),
            }],
            pending,
            running,
            ..Default::default()
        }
    }

    fn claimed(rule: Rule, c: &ClusterView) -> u64 {
        let view = c.for_agent(NodeId(0)).unwrap();
        match Sized(rule).decide(&view, &mut <Rng as rand::SeedableRng>::seed_from_u64(0)) {
            Decision::Claim { task, alloc, .. } => {
                assert_eq!(alloc, Resources(vec![1, 0, 1]), "at its minimum demand");
                task.0
            }
            d => panic!("{d:?}"),
        }
    }

    /// The predicted-short task goes first, whatever its place in the window; a long one that
    /// waited three times as long as it is expected to take counts a quarter of its size and
    /// goes before a fresh one a third of it (aging: nothing waits for good behind a stream of
    /// short tasks).
    #[test]
    fn the_shortest_predicted_goes_first_and_a_long_wait_ages_a_long_task() {
        for rule in [Rule::Shortest, Rule::Remaining, Rule::Gittins] {
            let c = cluster(
                0,
                vec![pending(1, 0, 30.0), pending(2, 0, 3.0), pending(3, 0, 9.0)],
                vec![],
            );
            assert_eq!(claimed(rule, &c), 2, "{rule:?}");
            // Task 1 (30) waited 90 slots: counted as 7.5; task 4 (10) arrived now.
            let c = cluster(90, vec![pending(1, 0, 30.0), pending(4, 90, 10.0)], vec![]);
            assert_eq!(claimed(rule, &c), 1, "{rule:?}");
            // Unaged it would have gone to the short one: fresh, both.
            let c = cluster(0, vec![pending(1, 0, 30.0), pending(4, 0, 10.0)], vec![]);
            assert_eq!(claimed(rule, &c), 4, "{rule:?}");
        }
    }

    /// Shortest predicted remaining: the spare CPUs go first to the running task with the
    /// least expected remaining work (the nearly done long one before a fresh short-ish one),
    /// none to a kind the estimator says does not speed a task up, and every task keeps its
    /// minimum.
    #[test]
    fn spare_units_go_to_the_least_expected_remaining_first() {
        let c = cluster(
            5,
            vec![],
            vec![
                running(1, 8.0, 0.0),
                running(2, 30.0, 28.0),
                running(3, 50.0, 0.0),
            ],
        );
        let view = c.for_agent(NodeId(0)).unwrap();
        let shares: std::collections::BTreeMap<TaskId, Resources> = Sized(Rule::Remaining)
            .rebalance(&view, &mut <Rng as rand::SeedableRng>::seed_from_u64(0))
            .into_iter()
            .collect();
        // The nearly done task takes units while they still cut its time by more, weighted,
        // than they would the next shortest's; the longest gets none; memory stays as it is.
        assert_eq!(shares[&TaskId(2)], Resources(vec![4, 0, 1]));
        assert_eq!(shares[&TaskId(1)], Resources(vec![2, 0, 1]));
        assert_eq!(shares[&TaskId(3)], Resources(vec![1, 0, 1]));
        // Weighted alike (no history at all), the same tasks share the units evenly.
        let even = cluster(
            5,
            vec![],
            (1..=3)
                .map(|i| RunningView {
                    size: None,
                    ..running(i, 1.0, 0.0)
                })
                .collect(),
        );
        let view = even.for_agent(NodeId(0)).unwrap();
        let cores: Vec<u32> = Sized(Rule::Remaining)
            .rebalance(&view, &mut <Rng as rand::SeedableRng>::seed_from_u64(0))
            .into_iter()
            .map(|(_, r)| r.get(0))
            .collect();
        assert_eq!(cores.iter().sum::<u32>(), 7);
        assert!(cores.iter().all(|c| (2..=3).contains(c)), "{cores:?}");
    }
}
