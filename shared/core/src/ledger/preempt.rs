//! Preemption of lower priority classes: which running tasks stop so that a waiting task of a
//! higher class can start, decided by one rule that every node (and the simulator) computes
//! from its ledger, each acting on its own node only.
//!
//! Once a slot, after its rounds, the pending tasks are taken in queue order (effective class,
//! then arrival, then id). A task that fits some node it may run on is left to the rounds. For
//! one that fits nowhere, the node to make room is chosen from what every node knows — the
//! claimable units and the allocations and classes of the tasks running there: among the nodes
//! it may run on where stopping tasks of a lower class than its effective one would let it fit
//! at its minimum demand (the task's own class: aging orders the queue, it preempts no one of
//! the task's class), the one whose shortfall (units missing, each kind over the node's
//! capacity of it, summed) is least, then the lowest id; each node makes room for at most one
//! task a slot. On that node the victims are chosen by **least work lost** (progress since the
//! last checkpoint, as the driver knows it: its own tasks' reports), then the lowest class
//! (largest number), then the latest start; victims are added in that order until the task fits,
//! and any not needed after all are left running. So nobody is preempted unless the waiting task
//! fits once the victims are gone; the node then proposes that task in the next rounds
//! ([`Preemption`]). Gangs are never victims, nor preempt.

use super::{Ledger, TaskState, add_each};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// One node making room for one waiting task.
#[derive(Debug, Clone, PartialEq)]
pub struct Preemption {
    /// The node that stops its tasks.
    pub node: NodeId,
    /// The waiting task it makes room for (and proposes next).
    pub task: TaskId,
    /// The tasks it stops, in the order chosen.
    pub victims: Vec<TaskId>,
    /// The work the victims lose (the driver's measure, summed).
    pub lost: f64,
}

impl<M> Ledger<M> {
    /// The slot's preemptions (module doc); `work_lost` gives a running task's progress since
    /// its last checkpoint as the caller knows it. Empty where classes are not honoured.
    pub fn preemption_plan(&self, slot: u64, work_lost: impl Fn(TaskId) -> f64) -> Vec<Preemption> {
        let p = self.priorities;
        if !p.honour {
            return Vec::new();
        }
        let mut waiting: Vec<(u8, u64, TaskId)> = self
            .tasks
            .values()
            .filter(|e| matches!(e.state, TaskState::Pending) && e.task.gang.is_none())
            .map(|e| (p.class(&e.task, slot), e.task.arrival, e.task.id))
            .collect();
        waiting.sort();
        let mut claimable: BTreeMap<NodeId, Resources> = BTreeMap::new();
        let mut busy: BTreeSet<NodeId> = BTreeSet::new();
        let mut gone: BTreeSet<TaskId> = BTreeSet::new();
        let mut plan = Vec::new();
        for (_, _, id) in waiting {
            let task = &self.tasks[&id].task;
            // Victims are of a lower class than the task's own: aging orders the queue, it
            // does not let a task preempt its own class.
            let own = p.queued(task);
            let hosts: Vec<NodeId> = task
                .reachable
                .iter()
                .copied()
                .filter(|n| self.is_live(*n))
                .collect();
            for n in &hosts {
                claimable.entry(*n).or_insert_with(|| self.claimable(*n));
            }
            if hosts.iter().any(|n| task.min_demand.fits_in(&claimable[n])) {
                continue;
            }
            // The node with the least shortfall among those where lower classes could make room.
            let mut best: Option<(f64, NodeId)> = None;
            for n in hosts.iter().filter(|n| !busy.contains(n)) {
                let mut room = claimable[n].clone();
                for (_, units) in self.lower(*n, own, &gone) {
                    add_each(&mut room, &units);
                }
                if !task.min_demand.fits_in(&room) {
                    continue;
                }
                let cap = self.capacity(*n);
                let short: f64 = (0..task.min_demand.len())
                    .map(|k| {
                        let miss = task.min_demand.get(k).saturating_sub(claimable[n].get(k));
                        f64::from(miss) / f64::from(cap.get(k).max(1))
                    })
                    .sum();
                if best.is_none_or(|(s, _)| short < s) {
                    best = Some((short, *n));
                }
            }
            let Some((_, node)) = best else { continue };
            // Victims on that node by least work lost, then lowest class, then latest start.
            let mut candidates: Vec<(f64, u8, u64, TaskId, Resources)> = self
                .lower(node, own, &gone)
                .into_iter()
                .map(|(v, units)| {
                    let e = &self.tasks[&v];
                    let started = match e.state {
                        TaskState::Running { started, .. } => started,
                        _ => 0,
                    };
                    (work_lost(v), e.task.priority, started, v, units)
                })
                .collect();
            candidates.sort_by(|a, b| {
                a.0.total_cmp(&b.0)
                    .then(b.1.cmp(&a.1))
                    .then(b.2.cmp(&a.2))
                    .then(a.3.cmp(&b.3))
            });
            let mut room = claimable[&node].clone();
            let mut chosen = Vec::new();
            for c in candidates {
                if task.min_demand.fits_in(&room) {
                    break;
                }
                add_each(&mut room, &c.4);
                chosen.push(c);
            }
            // Leave running any victim the task fits without (the last added are kept first).
            let mut i = chosen.len();
            while i > 0 {
                i -= 1;
                let mut without = room.clone();
                super::sub_each(&mut without, &chosen[i].4);
                if task.min_demand.fits_in(&without) {
                    room = without;
                    chosen.remove(i);
                }
            }
            let mut left = room;
            super::sub_each(&mut left, &task.min_demand);
            claimable.insert(node, left);
            busy.insert(node);
            gone.extend(chosen.iter().map(|c| c.3));
            plan.push(Preemption {
                node,
                task: id,
                lost: chosen.iter().map(|c| c.0).sum(),
                victims: chosen.into_iter().map(|c| c.3).collect(),
            });
        }
        plan
    }

    /// What `node`, which made room for `task`, claims it with once it fits: its minimum demand
    /// on an elastic node (the re-share gives it its share), else all the node can give it up to
    /// its maximum (as a policy's claim could); `None` while it does not fit, or if it no longer
    /// waits. Both drivers propose this ahead of their policy.
    pub fn room_alloc(&self, node: NodeId, task: TaskId) -> Option<Resources> {
        let e = self.tasks.get(&task)?;
        let free = self.claimable(node);
        if e.state != TaskState::Pending || !e.task.min_demand.fits_in(&free) {
            return None;
        }
        Some(if self.is_elastic(node) {
            e.task.min_demand.clone()
        } else {
            e.task.cap(&free)
        })
    }

    /// The single-node tasks running on `node` in a lower class than `class` (a larger number),
    /// not in `gone`, with the units stopping each frees for claims there.
    fn lower(&self, node: NodeId, class: u8, gone: &BTreeSet<TaskId>) -> Vec<(TaskId, Resources)> {
        self.running_on(node)
            .filter(|id| !gone.contains(id))
            .filter_map(|id| {
                let e = self.tasks.get(&id)?;
                let TaskState::Running {
                    alloc, progress, ..
                } = &e.state
                else {
                    return None;
                };
                // Done is done: a task that reported completion (its process is ending) is no
                // victim; preempted, it would run again from its last checkpoint.
                (e.task.priority > class && *progress < 1.0)
                    .then(|| (id, self.shown_alloc(node, &e.task, alloc).clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Task;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn task(id: u64, class: u8, cpus: u32, nodes: &[u32]) -> Arc<Task> {
        Arc::new(Task::new(id, [cpus, 0]).class(class).on(nodes))
    }

    fn run(l: &mut Ledger<()>, t: Arc<Task>, node: u32, started: u64) {
        let id = t.id;
        let alloc = t.min_demand.clone();
        l.insert(t, TaskState::Pending, ());
        l.set_state(
            id,
            TaskState::Running {
                node: NodeId(node),
                alloc,
                progress: 0.5,
                started,
            },
        );
    }

    fn ledger(nodes: &[u32]) -> Ledger<()> {
        let mut l = Ledger::new(4, 1).with_priorities(super::super::Priorities {
            honour: true,
            aging_slots: None,
        });
        for (i, c) in nodes.iter().enumerate() {
            l.set_node(NodeId(i as u32), Resources(vec![*c, 0]));
        }
        l
    }

    #[test]
    fn the_batch_task_that_loses_least_work_makes_room_for_the_urgent_one() {
        let mut l = ledger(&[4]);
        run(&mut l, task(1, 2, 2, &[0]), 0, 0);
        run(&mut l, task(2, 2, 2, &[0]), 0, 1);
        l.insert(task(3, 0, 2, &[0]), TaskState::Pending, ());
        let lost = |id: TaskId| if id == TaskId(1) { 0.3 } else { 0.1 };
        let plan = l.preemption_plan(5, lost);
        assert_eq!(
            plan,
            vec![Preemption {
                node: NodeId(0),
                task: TaskId(3),
                victims: vec![TaskId(2)],
                lost: 0.1
            }]
        );
    }

    /// Done is done: a task that reported completion (its process is ending) is no victim,
    /// though it would lose least; the other one makes the room.
    #[test]
    fn a_task_that_reported_completion_is_no_victim() {
        let mut l = ledger(&[4]);
        run(&mut l, task(1, 2, 2, &[0]), 0, 0);
        run(&mut l, task(2, 2, 2, &[0]), 0, 1);
        l.set_progress(TaskId(2), 1.0, 3.0);
        l.insert(task(3, 0, 2, &[0]), TaskState::Pending, ());
        let lost = |id: TaskId| if id == TaskId(1) { 0.3 } else { 0.0 };
        let plan = l.preemption_plan(5, lost);
        assert_eq!(plan.len(), 1, "{plan:?}");
        assert_eq!(plan[0].victims, vec![TaskId(1)]);
        // With the finishing one alone there, no room is made at all.
        let mut l = ledger(&[2]);
        run(&mut l, task(2, 2, 2, &[0]), 0, 1);
        l.set_progress(TaskId(2), 1.0, 3.0);
        l.insert(task(3, 0, 2, &[0]), TaskState::Pending, ());
        assert!(l.preemption_plan(5, |_| 0.0).is_empty());
    }

    #[test]
    fn nobody_is_preempted_for_a_task_that_fits_or_could_not_fit_anyway_or_of_its_own_class() {
        // Fits on node 1 as it is: the rounds start it.
        let mut l = ledger(&[2, 2]);
        run(&mut l, task(1, 2, 2, &[0]), 0, 0);
        l.insert(task(3, 0, 2, &[0, 1]), TaskState::Pending, ());
        assert!(l.preemption_plan(1, |_| 0.0).is_empty());
        // Needs more than the node has even with every lower task gone.
        let mut l = ledger(&[4]);
        run(&mut l, task(1, 2, 2, &[0]), 0, 0);
        run(&mut l, task(2, 0, 2, &[0]), 0, 0);
        l.insert(task(3, 0, 3, &[0]), TaskState::Pending, ());
        assert!(l.preemption_plan(1, |_| 0.0).is_empty());
        // Only the same class runs: no victim.
        let mut l = ledger(&[2]);
        run(&mut l, task(1, 1, 2, &[0]), 0, 0);
        l.insert(task(3, 1, 2, &[0]), TaskState::Pending, ());
        assert!(l.preemption_plan(1, |_| 0.0).is_empty());
        // Priority-blind: never.
        let mut l = ledger(&[2]).with_priorities(super::super::Priorities::BLIND);
        l.set_node(NodeId(0), Resources(vec![2, 0]));
        run(&mut l, task(1, 5, 2, &[0]), 0, 0);
        l.insert(task(3, 0, 2, &[0]), TaskState::Pending, ());
        assert!(l.preemption_plan(1, |_| 0.0).is_empty());
    }

    #[test]
    fn the_node_short_of_least_makes_room_and_only_once_a_slot() {
        let mut l = ledger(&[8, 8]);
        run(&mut l, task(1, 3, 7, &[0]), 0, 0);
        run(&mut l, task(2, 3, 6, &[1]), 1, 0);
        l.insert(task(3, 0, 4, &[0, 1]), TaskState::Pending, ());
        l.insert(task(4, 0, 5, &[1]), TaskState::Pending, ());
        l.insert(task(5, 0, 4, &[0]), TaskState::Pending, ());
        let plan = l.preemption_plan(1, |_| 0.0);
        // Node 1 has 2 free (short 2 of 8), node 0 has 1 (short 3): node 1 for task 3, which
        // leaves 4 there; task 4 needs 5 of node 1, which made room once already: it waits;
        // node 0 makes room for task 5.
        assert_eq!(plan.len(), 2, "{plan:?}");
        assert_eq!((plan[0].node, plan[0].task), (NodeId(1), TaskId(3)));
        assert_eq!((plan[1].node, plan[1].task), (NodeId(0), TaskId(5)));
    }

    proptest! {
        /// Whatever runs where: every preemption stops only tasks of a lower class than the
        /// waiting task's, on its own node, each at most once, the waiting task fits there once
        /// they are gone, and a node makes room at most once.
        #[test]
        fn a_plan_frees_exactly_enough_room_from_lower_classes(
            running in proptest::collection::vec((0u32..3, 0u8..4, 1u32..4), 0..10),
            waiting in proptest::collection::vec((0u8..4, 1u32..5), 1..4),
        ) {
            let mut l = ledger(&[6, 6, 6]);
            let mut id = 0;
            for (node, class, cpus) in &running {
                if !Resources(vec![*cpus, 0]).fits_in(&l.claimable(NodeId(*node))) { continue; }
                run(&mut l, task(id, *class, *cpus, &[*node]), *node, id);
                id += 1;
            }
            for (class, cpus) in &waiting {
                l.insert(task(id, *class, *cpus, &[0, 1, 2]), TaskState::Pending, ());
                id += 1;
            }
            let plan = l.preemption_plan(0, |t| (t.0 % 3) as f64);
            let mut nodes = BTreeSet::new();
            let mut stopped = BTreeSet::new();
            for pre in &plan {
                prop_assert!(nodes.insert(pre.node));
                let t = &l[&pre.task].task;
                let mut room = l.claimable(pre.node);
                for v in &pre.victims {
                    prop_assert!(stopped.insert(*v));
                    let e = &l[v];
                    prop_assert!(e.task.priority > t.priority);
                    prop_assert_eq!(e.state.running_on(), Some(pre.node));
                    add_each(&mut room, &e.task.min_demand);
                }
                prop_assert!(t.min_demand.fits_in(&room));
                prop_assert!(!pre.victims.is_empty());
            }
        }
    }
}
