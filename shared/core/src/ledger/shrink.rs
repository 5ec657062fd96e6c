//! Shrinking converging tasks (RLPTO): a task whose loss (or accuracy) has plateaued
//! ([`crate::plateau`]) gives up one unit of the shrunk kind per slot, down to its minimum
//! demand, and the units go to the others — on an elastic node to its other running tasks at once
//! (each to the one holding fewest, up to their maximum demands), on any node to the next
//! claims (they are free).
//!
//! One rule for both drivers, called in this order once a slot ([`crate::slot::end_of_slot`]):
//! [`Ledger::shrink_step`] lowers each converging task's ceiling by one unit; the policy
//! re-shares (elastic nodes); then [`Ledger::apply_ceilings`] holds every converging task at its
//! ceiling and [`Ledger::settle_ceilings`] brings each ceiling down to what the task will run at.
//! The agent also applies the ceilings after each start (its re-share then), which does not
//! lower them.
//!
//! Only one kind shrinks, the CPU kind, and that is on purpose: a running process's memory
//! limit cannot be lowered without risking its death (the kernel kills what does not fit), nor
//! its GPUs changed (the devices are set when it starts); CPU shares can be lowered while it runs.
//! A task that stops converging (its reports improve again) keeps the units it has and is
//! re-shared as any other from then on.

use super::{Ledger, TaskState, add_each, sub_each};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};

impl<M> Ledger<M> {
    /// Shrink converging tasks in kind `kind` (the CPU kind), or (`None`, the default) never.
    pub fn with_shrink(mut self, kind: Option<usize>) -> Self {
        self.shrink_kind = kind;
        self
    }

    /// The kind converging tasks shrink in, if shrinking is on.
    pub fn shrink_kind(&self) -> Option<usize> {
        self.shrink_kind
    }

    /// A running task's reports have plateaued (`true`) or improve again (`false`). A task that
    /// is not running, or shrinking off: nothing. Marked, it keeps its allocation until the next
    /// [`Ledger::shrink_step`].
    pub fn set_converging(&mut self, id: TaskId, converging: bool) {
        let Some(k) = self.shrink_kind else { return };
        if !converging {
            self.ceilings.remove(&id);
            return;
        }
        if let Some(TaskState::Running { alloc, .. }) = self.tasks.get(&id).map(|e| &e.state) {
            let held = alloc.get(k);
            self.ceilings.entry(id).or_insert(held);
        }
    }

    /// Whether a task is marked converging (and so held at a ceiling).
    pub fn is_converging(&self, id: TaskId) -> bool {
        self.ceilings.contains_key(&id)
    }

    /// The slot's step: every converging task running on `node` may hold one unit less of the
    /// shrunk kind than it holds now (never less than its floor: its minimum demand unless its
    /// claim set a higher one, [`Ledger::set_floors`]). Marks of tasks that
    /// no longer run anywhere are dropped (a task started again is judged afresh).
    pub fn shrink_step(&mut self, node: NodeId) {
        let Some(k) = self.shrink_kind else { return };
        let tasks = &self.tasks;
        self.ceilings.retain(|id, _| {
            tasks
                .get(id)
                .is_some_and(|e| matches!(e.state, TaskState::Running { .. }))
        });
        for (id, ceiling) in self.ceilings.iter_mut() {
            let Some(e) = self.tasks.get(id) else {
                continue;
            };
            let TaskState::Running { node: n, .. } = &e.state else {
                continue;
            };
            if *n == node {
                let floor = self.floors.get(id).unwrap_or(&e.task.min_demand).get(k);
                // One below the ceiling, which the last slot's end settled at what the task
                // ran ([`Ledger::settle_ceilings`]): not its allocation now, which an agent's
                // re-share after a start may have changed since.
                *ceiling = ceiling.saturating_sub(1).max(floor);
            }
        }
    }

    /// At a slot's end, after [`Ledger::apply_ceilings`]: each converging task running on
    /// `node` gets as its ceiling at most what it will run at in the slot, so that the next
    /// [`Ledger::shrink_step`] takes it one unit below what it ran.
    pub fn settle_ceilings(&mut self, node: NodeId) {
        let Some(k) = self.shrink_kind else { return };
        for (id, ceiling) in self.ceilings.iter_mut() {
            if let Some(TaskState::Running { node: n, alloc, .. }) =
                self.tasks.get(id).map(|e| &e.state)
                && *n == node
            {
                *ceiling = (*ceiling).min(alloc.get(k));
            }
        }
    }

    /// Hold every converging task running on `node` at its ceiling; on an elastic node the
    /// units this frees go one by one to the node's other running task holding fewest, up to
    /// their maximum demands. Returns the tasks whose allocation changed, with the new one.
    pub fn apply_ceilings(&mut self, node: NodeId) -> Vec<(TaskId, Resources)> {
        let Some(k) = self.shrink_kind else {
            return Vec::new();
        };
        let running: Vec<TaskId> = self.running_on(node).collect();
        let mut allocs: Vec<(TaskId, Resources)> = running
            .iter()
            .filter_map(|id| match &self.tasks.get(id)?.state {
                TaskState::Running { alloc, .. } => Some((*id, alloc.clone())),
                _ => None,
            })
            .collect();
        let mut freed = 0u32;
        for (id, a) in &mut allocs {
            if let Some(&c) = self.ceilings.get(id)
                && a.get(k) > c
            {
                freed += a.get(k) - c;
                a.0[k] = c;
            }
        }
        if freed == 0 {
            return Vec::new();
        }
        if self.is_elastic(node) {
            // What the node's tasks may take in all: its capacity less gang members' units and
            // less what the (shrunk) allocations hold.
            let mut spare = self.capacity(node);
            sub_each(&mut spare, &self.held(node));
            let mut total = Resources::zeros(spare.len());
            for (_, a) in &allocs {
                add_each(&mut total, a);
            }
            sub_each(&mut spare, &total);
            // Each freed unit to the task holding fewest (then the lowest id): under a speed-up
            // that flattens with more units, a unit is worth most to the task with least.
            let mut left = spare.get(k);
            while left > 0 {
                let next = allocs
                    .iter_mut()
                    .filter(|(id, a)| {
                        !self.ceilings.contains_key(id)
                            && a.get(k)
                                < self.tasks[id]
                                    .task
                                    .max_demand
                                    .as_ref()
                                    .map_or(u32::MAX, |m| m.get(k))
                    })
                    .min_by_key(|(id, a)| (a.get(k), *id));
                let Some((_, a)) = next else { break };
                a.0[k] += 1;
                left -= 1;
            }
        }
        let mut changed = Vec::new();
        for (id, a) in allocs {
            let old = match &self.tasks[&id].state {
                TaskState::Running { alloc, .. } => alloc.clone(),
                _ => continue,
            };
            if a != old {
                self.set_alloc(id, a.clone());
                changed.push((id, a));
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Task;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn task(id: u64, min: u32, max: u32) -> Arc<Task> {
        Arc::new(Task::new(id, [min, 0]).at_most([max, 0]))
    }

    fn ledger(elastic: bool, cpus: u32) -> Ledger<()> {
        let mut l = Ledger::new(4, 1).with_shrink(Some(0));
        l.set_node(NodeId(0), Resources(vec![cpus, 0]));
        l.set_elastic(NodeId(0), elastic);
        l
    }

    fn run(l: &mut Ledger<()>, t: Arc<Task>, cpus: u32) {
        let id = t.id;
        l.insert(t, TaskState::Pending, ());
        l.set_state(
            id,
            TaskState::Running {
                node: NodeId(0),
                alloc: Resources(vec![cpus, 0]),
                progress: 0.0,
                started: 0,
            },
        );
    }

    fn cpus(l: &Ledger<()>, id: u64) -> u32 {
        match &l[&TaskId(id)].state {
            TaskState::Running { alloc, .. } => alloc.get(0),
            s => panic!("not running: {s:?}"),
        }
    }

    #[test]
    fn a_converging_task_gives_one_cpu_a_slot_to_its_neighbour_down_to_its_minimum() {
        let mut l = ledger(true, 8);
        run(&mut l, task(1, 2, 8), 5);
        run(&mut l, task(2, 1, 8), 3);
        l.set_converging(TaskId(1), true);
        // Marked: nothing changes before the slot's step.
        assert!(l.apply_ceilings(NodeId(0)).is_empty());
        let mut seen = Vec::new();
        for _ in 0..5 {
            l.shrink_step(NodeId(0));
            l.apply_ceilings(NodeId(0));
            seen.push((cpus(&l, 1), cpus(&l, 2)));
        }
        assert_eq!(seen, vec![(4, 4), (3, 5), (2, 6), (2, 6), (2, 6)]);
    }

    #[test]
    fn on_a_node_that_does_not_re_share_the_units_become_free() {
        let mut l = ledger(false, 8);
        run(&mut l, task(1, 1, 8), 4);
        run(&mut l, task(2, 1, 8), 2);
        l.set_converging(TaskId(1), true);
        l.shrink_step(NodeId(0));
        assert_eq!(
            l.apply_ceilings(NodeId(0)),
            vec![(TaskId(1), Resources(vec![3, 0]))]
        );
        assert_eq!(cpus(&l, 2), 2);
        assert_eq!(l.free(NodeId(0)).get(0), 3);
    }

    #[test]
    fn a_task_that_improves_again_is_no_longer_held_and_off_means_never() {
        let mut l = ledger(true, 4);
        run(&mut l, task(1, 1, 4), 3);
        l.set_converging(TaskId(1), true);
        l.shrink_step(NodeId(0));
        l.apply_ceilings(NodeId(0));
        assert_eq!(cpus(&l, 1), 2);
        l.set_converging(TaskId(1), false);
        assert!(!l.is_converging(TaskId(1)));
        l.shrink_step(NodeId(0));
        assert!(l.apply_ceilings(NodeId(0)).is_empty());

        let mut off: Ledger<()> = Ledger::new(4, 1);
        off.set_node(NodeId(0), Resources(vec![4, 0]));
        run(&mut off, task(1, 1, 4), 3);
        off.set_converging(TaskId(1), true);
        off.shrink_step(NodeId(0));
        assert!(off.apply_ceilings(NodeId(0)).is_empty());
        assert!(!off.is_converging(TaskId(1)));
    }

    proptest! {
        /// Whatever is marked and however often it steps: no task goes below its minimum demand
        /// or above its maximum, the node never holds more than it has, and a converging task's
        /// units never grow.
        #[test]
        fn shrinking_keeps_every_bound(
            tasks in proptest::collection::vec((1u32..4, 0u32..6, any::<bool>()), 1..6),
            steps in 1usize..8,
            elastic in any::<bool>(),
        ) {
            let cap = 16;
            let mut l = ledger(elastic, cap);
            let mut held = 0;
            for (i, (min, extra, _)) in tasks.iter().enumerate() {
                let a = (min + extra).min(cap - held);
                if a < *min { break; }
                run(&mut l, task(i as u64, *min, min + 6), a);
                held += a;
            }
            for (i, (_, _, conv)) in tasks.iter().enumerate() {
                l.set_converging(TaskId(i as u64), *conv);
            }
            for _ in 0..steps {
                let before: Vec<(TaskId, u32)> = l.running_on(NodeId(0)).map(|id| (id, cpus(&l, id.0))).collect();
                l.shrink_step(NodeId(0));
                l.apply_ceilings(NodeId(0));
                let mut total = 0;
                for (id, b) in before {
                    let now = cpus(&l, id.0);
                    let t = &l[&id].task;
                    prop_assert!(now >= t.min_demand.get(0));
                    prop_assert!(now <= t.max_demand.as_ref().map_or(u32::MAX, |m| m.get(0)));
                    if l.is_converging(id) { prop_assert!(now <= b); }
                    total += now;
                }
                prop_assert!(total <= cap);
            }
        }
    }
}
