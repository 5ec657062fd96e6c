//! Tasks' sizes on the ledger: the work each running task does, in one unit every class shares,
//! and what the size book ([`crate::sizes`]) learns of it and predicts for every task.
//!
//! **Work** is counted in slots at the task's minimum demand of the service kind (the kind
//! least-attained-service counts, GPUs where the cluster has them): a slot at twice its minimum
//! GPUs counts two, so ten slots at four GPUs of a one-GPU task are forty. It is the task's
//! attained service over its minimum, counted on what every driver agrees on (the allocation
//! the ledger holds, and a task's attained service as its runner counted it), so the simulator
//! and the agents show the same figures. Two units were tried and dropped because agents and
//! the simulator came to different figures for one task: the estimator's speed-up of each
//! slot's allocation (each driver observes progress at another moment), and slots run for a
//! class that holds none of the kind (an agent counts a peer's task only from when it heard it
//! start). So a class that holds none of the service kind (CPU-only on a GPU cluster) does no
//! work here and its sizes are not learned yet. Never a speed model or a true size. The book
//! learns the work of each task that ran and succeeded, as its runner counted it where the
//! outcome carries that count ([`Ledger::set_work`]: a peer hears of the end later than the
//! runner, and would count a slot more); a view shows each task's prediction from the book as
//! it stands (each key's prediction is made once, when it learns) and its work done.

use super::{Entry, Ledger, TaskState};
use crate::sizes::{Identity, Prediction, Query};
use crate::task::{NodeId, Task, TaskId};
use std::sync::Arc;

/// The most one slot's work may count (slots at the minimum demand).
const MAX_SPEEDUP: u32 = 64;

impl<M> Ledger<M> {
    /// Say who submitted task `id` and which recurring job it is: the size book's most specific
    /// keys ([`crate::sizes::Level`]). Unknown: nothing.
    pub fn set_identity(&mut self, id: TaskId, identity: Identity) {
        if let Some(e) = self.tasks.get_mut(&id) {
            e.identity = Arc::new(identity);
        }
    }

    /// The size knowledge learned from the tasks that succeeded here.
    pub fn sizes(&self) -> &crate::sizes::SizeBook {
        &self.sizes
    }

    /// Start from `book` (what a driver kept of an earlier run: an agent's restart), in place
    /// of what was learned so far.
    pub fn set_sizes(&mut self, book: crate::sizes::SizeBook) {
        self.sizes = book;
    }

    /// `id`'s predicted size (work in all, slots at its minimum demand) from the tasks that
    /// succeeded before it.
    pub fn predict_size(&self, id: TaskId) -> Option<Arc<Prediction>> {
        let e = self.tasks.get(&id)?;
        self.predicted(&e.task, &e.identity)
    }

    /// What the book predicts now of `task` submitted as `identity`.
    pub(super) fn predicted(&self, task: &Task, identity: &Identity) -> Option<Arc<Prediction>> {
        self.sizes.predict(&Query {
            identity,
            class: task.ty,
            min_demand: &task.min_demand,
        })
    }

    /// A single task seen running here that ends in success: its work is a size the book
    /// learns. Nothing else is: a task first heard of as done did no work here, a failure or a
    /// cancellation says nothing of its size, and a gang's work is its members'.
    pub(super) fn learn_size(&mut self, id: TaskId, old: &TaskState, new: &TaskState) {
        let Some(e) = self.tasks.get(&id) else { return };
        if !matches!(old, TaskState::Running { .. })
            || !new.succeeded()
            || e.task.gang.is_some()
            || e.work <= 0.0
        {
            return;
        }
        let q = Query {
            identity: &e.identity,
            class: e.task.ty,
            min_demand: &e.task.min_demand,
        };
        let work = e.work;
        self.sizes.observe(&q, work);
    }

    /// A running single task that succeeded leaves the ledger (a driver that keeps only a
    /// record of finished tasks, the simulator): the book learns its work first, as it does
    /// where a driver keeps the task as done ([`Ledger::set_state`]). Returns it.
    pub fn finished(&mut self, id: TaskId) -> Option<Entry<M>> {
        let old = self.tasks.get(&id)?.state.clone();
        let done = TaskState::Done {
            node: old.running_on().unwrap_or(NodeId(0)),
            code: Some(0),
            epoch: 0,
        };
        self.learn_size(id, &old, &done);
        self.remove(id)
    }

    /// End of a slot's work: every running task does the slot's worth at its allocation, on
    /// the allocation the ledger holds (the one attained service counts, which every driver
    /// agrees on: module doc).
    pub(super) fn accrue_work(&mut self) {
        let k = self.service_kind;
        for e in self.tasks.values_mut() {
            if let TaskState::Running { alloc, .. } = &e.state {
                let min = e.task.min_demand.get(k);
                e.held += held(min, alloc.get(k));
                if min > 0 {
                    e.work = e.held / f64::from(min);
                }
            }
        }
    }

    /// `id`'s work as its runner counted it at its end (a peer's count starts and stops when it
    /// hears of the start and the end): what the book learns when it ends.
    pub fn set_work(&mut self, id: TaskId, work: f64) {
        let k = self.service_kind;
        if let Some(e) = self.tasks.get_mut(&id) {
            e.work = work;
            e.held = work * f64::from(e.task.min_demand.get(k));
        }
    }

    /// The runner's count of `id`'s attained service, as a driver learned it (a task handed
    /// back): its work follows, where its class holds the service kind.
    pub(super) fn work_from_attained(&mut self, id: TaskId) {
        let k = self.service_kind;
        if let Some(e) = self.tasks.get_mut(&id) {
            let min = e.task.min_demand.get(k);
            if min > 0 {
                e.held = e.attained;
                e.work = e.attained / f64::from(min);
            }
        }
    }
}

/// A slot's units of the service kind at `units` held for a task whose minimum is `min` of
/// them (its work is these over `min`: a slot at twice its minimum GPUs counts two), at most
/// [`MAX_SPEEDUP`] times the minimum; none for a task whose class holds none of the kind
/// (module doc).
fn held(min: u32, units: u32) -> f64 {
    f64::from(units.min(min.saturating_mul(MAX_SPEEDUP)))
}

#[cfg(test)]
#[path = "sizes_tests.rs"]
mod tests;
