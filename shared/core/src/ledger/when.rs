//! When each task is expected to start and finish, as a user waiting for a shared cluster asks
//! (Slurm's `squeue --start`): from what the ledger knows now, never a speed model.
//!
//! A running task finishes after its expected remaining work
//! ([`crate::view::expected_remaining`]: its declared work, its own progress, or the size
//! book's distribution given the work done) at the estimator's speed for its allocation, and
//! holds its allocation until then (on an elastic box only its floor: a re-share makes room
//! for a newcomer). The
//! waiting tasks are then placed in queue order (priority class with aging, then arrival, then
//! id), each at its minimum demand on the reachable live box where it can start first, for its
//! expected work: at once where it fits now beside everything running and placed (as a policy
//! claims any task of its window that fits), else no earlier than the task placed before it
//! (a waiting task does not overtake another to a later start: a plain, checkable rule, where
//! the policy in force may start a short task sooner, and an elastic share may finish one
//! sooner). What it misses is measured: `tapfinger-sim
//! start-estimates` compares every task's estimate at its arrival with when it started.

use super::{Ledger, TaskState};
use crate::resources::Resources;
use crate::task::{NodeId, Task, TaskId};
use crate::view::{TaskEstimate, expected_remaining};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Waiting tasks estimated at most (those deeper in the queue get no estimate: the error of
/// the thousandth is the sum of a thousand).
pub const MAX_ESTIMATED: usize = 1000;

/// A task's expected start and finish, in slots from now (a running task: started, 0).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    /// Slots until it starts.
    pub start: f64,
    /// Slots until it finishes.
    pub finish: f64,
    /// The box it is expected on.
    pub node: NodeId,
}

/// A box as the estimate fills it: its capacity, and the units held until when.
struct Timeline {
    capacity: Resources,
    /// (slots from now until released, units).
    holds: Vec<(f64, Resources)>,
}

impl Timeline {
    /// The earliest time from `from` at which `demand` fits: holds only end from `from` on
    /// (every hold began at or before it), so the free units only grow.
    fn earliest(&self, from: f64, demand: &Resources) -> Option<f64> {
        if !demand.fits_in(&self.capacity) {
            return None;
        }
        let mut ends: Vec<&(f64, Resources)> =
            self.holds.iter().filter(|(e, _)| *e > from).collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut free = self.capacity.clone();
        for (_, r) in &ends {
            for (f, u) in free.0.iter_mut().zip(&r.0) {
                *f = f.saturating_sub(*u);
            }
        }
        if demand.fits_in(&free) {
            return Some(from);
        }
        for (end, r) in ends {
            for (f, u) in free.0.iter_mut().zip(&r.0) {
                *f += *u;
            }
            if demand.fits_in(&free) {
                return Some(*end);
            }
        }
        None
    }
}

impl<M> Ledger<M> {
    /// Every running task's expected finish and every waiting task's expected start and
    /// finish (at most [`MAX_ESTIMATED`] of them) at `slot`, by id (module doc). A task no live
    /// box can hold, and a waiting gang, get none.
    pub fn expected(&self, slot: u64) -> BTreeMap<TaskId, Expected> {
        let mut out = BTreeMap::new();
        let mut boxes: BTreeMap<NodeId, Timeline> = self
            .nodes
            .iter()
            .filter(|(_, b)| b.live && b.capacity.0.iter().any(|c| *c > 0))
            .map(|(id, b)| {
                let t = Timeline {
                    capacity: b.capacity.clone(),
                    holds: Vec::new(),
                };
                (*id, t)
            })
            .collect();
        let largest = self.largest_live();
        for e in self.tasks.values() {
            let (held, progress, started): (Vec<(NodeId, Resources)>, f64, u64) = match &e.state {
                TaskState::Running {
                    node,
                    alloc,
                    progress,
                    started,
                } => (vec![(*node, alloc.clone())], *progress, *started),
                TaskState::Gang {
                    members,
                    progress,
                    started,
                } => (members.clone(), *progress, *started),
                _ => continue,
            };
            let Some((first, alloc)) = held.first().cloned() else {
                continue;
            };
            let left = if e.task.gang.is_some() {
                // A gang's work is not the book's: its own progress over the slots it ran,
                // else its estimate.
                let ran = slot.saturating_sub(started) as f64;
                if progress >= 0.05 && ran > 0.0 {
                    ran * (1.0 - progress.min(1.0)) / progress
                } else {
                    self.estimate_now(&e.task).at_min
                }
            } else {
                let gpu = self.gpu_model(first);
                let est = TaskEstimate::of_on(&self.estimator, &e.task, gpu, &largest);
                let size = self.predicted(&e.task, &e.identity);
                let work = expected_remaining(&est, size.as_deref(), e.work, progress);
                let at = self.estimator.slots_on(&e.task, gpu, &alloc);
                let min = self.estimator.slots_on(&e.task, gpu, &e.task.min_demand);
                let speed = if at > 0.0 && min > 0.0 { at / min } else { 1.0 };
                work * speed.clamp(0.0, 1.0)
            };
            for (node, units) in held {
                // On an elastic box a running task holds only its floor against a newcomer:
                // the next re-share shrinks it to make room (`Ledger::claimable`).
                let units = match (&e.state, self.nodes.get(&node)) {
                    (TaskState::Running { .. }, Some(b)) if b.elastic => self
                        .floors
                        .get(&e.task.id)
                        .cloned()
                        .unwrap_or_else(|| e.task.min_demand.clone()),
                    _ => units,
                };
                if let Some(t) = boxes.get_mut(&node) {
                    t.holds.push((left, units));
                }
            }
            out.insert(
                e.task.id,
                Expected {
                    start: 0.0,
                    finish: left,
                    node: first,
                },
            );
        }
        let mut waiting: Vec<(u8, u64, TaskId, &Task)> = self
            .tasks
            .values()
            .filter(|e| matches!(e.state, TaskState::Pending) && e.task.gang.is_none())
            .map(|e| {
                let t = &*e.task;
                (self.priorities.class(t, slot), t.arrival, t.id, t)
            })
            .collect();
        waiting.sort_by_key(|w| (w.0, w.1, w.2));
        let mut from = 0.0_f64;
        for (_, _, id, task) in waiting.into_iter().take(MAX_ESTIMATED) {
            let Some(e) = self.tasks.get(&id) else {
                continue;
            };
            let place = |from: f64| {
                task.reachable
                    .iter()
                    .filter_map(|n| Some((*n, boxes.get(n)?.earliest(from, &task.min_demand)?)))
                    .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            };
            // A task that fits now beside everything running and placed starts now, as a policy
            // claims any task of its window that fits; the others wait their turn.
            let now = place(0.0).filter(|(_, t)| *t == 0.0);
            let Some((node, start)) = now.or_else(|| place(from)) else {
                continue;
            };
            let est = TaskEstimate::of_on(&self.estimator, task, self.gpu_model(node), &largest);
            let size = self.predicted(task, &e.identity);
            let work = expected_remaining(&est, size.as_deref(), e.work, 0.0);
            if let Some(t) = boxes.get_mut(&node) {
                t.holds.push((start + work, task.min_demand.clone()));
            }
            from = from.max(start);
            out.insert(
                id,
                Expected {
                    start,
                    finish: start + work,
                    node,
                },
            );
        }
        out
    }
}

#[cfg(test)]
#[path = "when_tests.rs"]
mod tests;
