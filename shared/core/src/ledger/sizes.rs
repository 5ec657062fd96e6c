//! Tasks' sizes on the ledger: the work each running task does, in one unit every class shares,
//! and what the size book ([`crate::sizes`]) learns of it and predicts for every task.
//!
//! **Work** is counted in slots at the task's minimum demand: a slot run at allocation `a` is
//! worth the speed-up the estimator gives `a` over the minimum (its estimated job time at the
//! minimum over that at `a`), so a task that ran ten slots at four times its minimum's speed
//! did forty slots of work. The unit is what every class has (a CPU-only class attains no GPU
//! service, where least-attained-service counts units of one kind), and it reads the
//! estimator's figures only: never a speed model or a true size. The book learns the work of
//! each task that ran here and succeeded; a view shows each task's prediction from the book as
//! it stands (each key's prediction is made once, when it learns).

use super::{Entry, Ledger, TaskState};
use crate::sizes::{Identity, Prediction, Query};
use crate::task::{Task, TaskId};
use std::sync::Arc;

/// The most one slot's work may count (slots at the minimum demand): a bound on what an
/// estimator that knows nothing yet can credit.
const MAX_SPEEDUP: f64 = 64.0;

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

    /// End of a slot's work: every running task does the slot's worth at its allocation
    /// (module doc).
    pub(super) fn accrue_work(&mut self) {
        let done: Vec<(TaskId, f64)> = self
            .tasks
            .values()
            .filter_map(|e| match &e.state {
                TaskState::Running { node, alloc, .. } => {
                    let gpu = self.gpu_model(*node);
                    let at = self.estimator.slots_on(&e.task, gpu, alloc);
                    let min = self.estimator.slots_on(&e.task, gpu, &e.task.min_demand);
                    let worth = if at > 0.0 && min.is_finite() {
                        (min / at).clamp(0.0, MAX_SPEEDUP)
                    } else {
                        1.0
                    };
                    Some((e.task.id, worth))
                }
                _ => None,
            })
            .collect();
        for (id, worth) in done {
            if let Some(Entry { work, .. }) = self.tasks.get_mut(&id) {
                *work += worth;
            }
        }
    }
}
