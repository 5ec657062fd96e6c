//! The [`ClusterView`] built from the ledger: what every policy decides from, in the simulator and
//! in the agent alike. Reads the ledger; changes nothing.

use super::{Entry, Ledger, TaskState};
use crate::resources::Resources;
use crate::task::Task;
use crate::task::{NodeId, TaskId};
use crate::view::{ClusterView, NodeView, PendingView, RunningView, TaskEstimate};

/// Which pending tasks a node may start now (the agent's lease rule); see [`Ledger::view`].
pub type MayStart<'a, M> = dyn Fn(&Entry<M>) -> bool + 'a;

impl<M> Ledger<M> {
    /// The cluster for a decision at (`slot`, `step`): every live node with its capacity, free
    /// units, window (the first `window` tasks of its queue that `may_start` allows, all of them
    /// when `None`, less those a reservation holds back: `reserve`) and overflow (the allowed tasks behind the window), the tasks in at least one
    /// window, and the tasks running on live nodes, each list by id. An elastic node shows its
    /// running tasks at their minimum demands ([`Ledger::set_elastic`]).
    pub fn view(
        &self,
        slot: u64,
        step: u32,
        num_types: usize,
        may_start: Option<&MayStart<'_, M>>,
    ) -> ClusterView {
        let live: Vec<(NodeId, &super::Book)> = self
            .nodes
            .iter()
            .filter(|(_, b)| b.live)
            .map(|(id, b)| (*id, b))
            .collect();
        // The pending tasks `may_start` refuses, asked once per task rather than once per task
        // and queue (every pending task is in every node's queue; at 16 nodes with 400 tasks
        // queued, those look-ups took 5 % of the cluster benchmark's CPU time, by `perf`):
        // usually none, and then every queue is cut at its window as without a rule.
        let mut refused: std::collections::BTreeSet<TaskId> = match may_start {
            None => Default::default(),
            Some(f) => self
                .tasks
                .iter()
                .filter(|(_, e)| e.state == TaskState::Pending && !f(e))
                .map(|(id, _)| *id)
                .collect(),
        };
        // Lower classes held back for forecast urgent arrivals (`reserve`, off by default).
        refused.extend(self.held_back(slot));
        // Each live node's window (task ids in window order) and overflow.
        let windows: Vec<(Vec<TaskId>, usize)> = live
            .iter()
            .map(|(_, b)| {
                super::order::window(&b.queue, self.priorities, slot, self.window, &refused)
            })
            .collect();
        let mut pending_ids: Vec<TaskId> = windows
            .iter()
            .flat_map(|(w, _)| w.iter().copied())
            .collect();
        pending_ids.sort_unstable();
        pending_ids.dedup();
        let mut running_ids: Vec<TaskId> = live
            .iter()
            .flat_map(|(_, b)| b.running.iter().copied())
            .collect();
        running_ids.sort_unstable();
        let nodes = live
            .iter()
            .zip(windows)
            .map(|((id, b), (window, overflow))| {
                NodeView {
                    gpu: b.gpu,
                    id: *id,
                    capacity: b.capacity.clone(),
                    // An elastic node's re-share is not a claim (see `elastic`).
                    free: self.claimable(*id),
                    window: window
                        .iter()
                        .filter_map(|t| pending_ids.binary_search(t).ok())
                        .collect(),
                    overflow,
                    // Both lists are sorted by id, so the indices come out sorted.
                    running: b
                        .running
                        .iter()
                        .filter_map(|t| running_ids.binary_search(t).ok())
                        .collect(),
                }
            })
            .collect();
        // The largest node per kind: the ceiling of every task's `at_max`.
        let largest = self.largest_live();
        // The GPU models of the live boxes, the most common first (ties: the least key): a
        // pending task's `est` is on the first, `on` holds the others.
        let mut models: Vec<(usize, crate::estimate::GpuModel)> = Vec::new();
        for (_, b) in &live {
            match models.iter_mut().find(|(_, m)| *m == b.gpu) {
                Some((n, _)) => *n += 1,
                None => models.push((1, b.gpu)),
            }
        }
        models.sort_by(|(n1, m1), (n2, m2)| n2.cmp(n1).then(m1.cmp(m2)));
        let main = models
            .first()
            .map_or(crate::estimate::GpuModel::NONE, |m| m.1);
        ClusterView {
            slot,
            step,
            num_types,
            classes: self.priorities.honour,
            kinds: self.estimator.kinds(),
            nodes,
            pending: pending_ids
                .iter()
                .filter_map(|id| self.tasks.get(id))
                .map(|e| PendingView {
                    on: models
                        .iter()
                        .skip(1)
                        .map(|(_, m)| (*m, self.estimate_on(&e.task, *m, &largest)))
                        .collect(),
                    task: e.task.clone(),
                    est: self.estimate_on(&e.task, main, &largest),
                    class: self.priorities.class(&e.task, slot),
                    size: self.predicted(&e.task, &e.identity),
                    done: e.work,
                })
                .collect(),
            running: running_ids
                .iter()
                .filter_map(|id| self.tasks.get(id))
                .filter_map(|e| match &e.state {
                    TaskState::Running {
                        node,
                        alloc,
                        progress,
                        started,
                    } => {
                        let alloc = self.shown_alloc(*node, &e.task, alloc);
                        let gpu = self.gpu_model(*node);
                        // What its last slot ran at (the same in every driver, however many
                        // re-shares a slot sees); a task that has not run yet: what it shows.
                        let in_force = e
                            .observed
                            .as_ref()
                            .map_or_else(|| alloc.clone(), |(_, _, a)| a.clone());
                        Some(RunningView {
                            task: e.task.clone(),
                            node: *node,
                            alloc: alloc.clone(),
                            in_force,
                            started: *started,
                            progress: *progress,
                            attained: e.attained,
                            est: self.estimate_on(&e.task, gpu, &largest),
                            est_alloc: self.estimator.slots_on(&e.task, gpu, alloc),
                            converging: self.is_converging(e.task.id),
                            size: self.predicted(&e.task, &e.identity),
                            done: e.work,
                        })
                    }
                    _ => None,
                })
                .collect(),
            forecast: self.forecast().to_vec(),
        }
    }

    /// The estimator's view of `task` as a view built now would show it (a gang member shown
    /// as a task of its own, for a policy that places gangs).
    pub fn estimate_now(&self, task: &Task) -> TaskEstimate {
        self.estimate_on(task, crate::estimate::GpuModel::NONE, &self.largest_live())
    }

    /// The largest live node's capacity, per kind.
    pub(super) fn largest_live(&self) -> Resources {
        let mut largest = Resources::zeros(0);
        for b in self.nodes.values().filter(|b| b.live) {
            if largest.len() < b.capacity.len() {
                largest.0.resize(b.capacity.len(), 0);
            }
            for (x, c) in largest.0.iter_mut().zip(&b.capacity.0) {
                *x = (*x).max(*c);
            }
        }
        largest
    }

    /// The estimator's view of `task` on a box of GPU model `gpu` in a cluster whose largest
    /// node (per kind) is `largest`.
    fn estimate_on(
        &self,
        task: &Task,
        gpu: crate::estimate::GpuModel,
        largest: &Resources,
    ) -> TaskEstimate {
        TaskEstimate::of_on(&self.estimator, task, gpu, largest)
    }
}
