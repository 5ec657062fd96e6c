//! What the ledger tells the speed estimator: the kinds it estimates in, the submitters' hints
//! and declared work, each running task's observed progress as speed samples (with the GPU
//! model of the box it ran on), and each box's GPU model. Nothing here decides.

use super::{Entry, Ledger, TaskState};
use crate::estimate::GpuModel;
use crate::resources::Resources;
use crate::task::{NodeId, Task, TaskId};

impl<M> Ledger<M> {
    /// Estimate speeds in the canonical kinds as `kinds` maps them (set before the first
    /// observation; without it no kind is known and every estimate is the prior).
    pub fn with_kinds(mut self, kinds: crate::estimate::KindMap) -> Self {
        self.estimator = crate::estimate::Estimator::new(kinds);
        self
    }

    /// Start from `estimator` (what the cluster learned before: [`crate::estimate::Estimator::carried`])
    /// instead of an empty one.
    pub fn set_estimator(&mut self, estimator: crate::estimate::Estimator) {
        self.estimator = estimator;
    }

    /// Profile hints for `task`'s class from its submitter
    /// ([`crate::estimate::Estimator::hint`]: each `(alloc, slots)` its time alone there).
    pub fn hint(&mut self, task: &Task, hints: &[(Resources, f64)]) {
        if !hints.is_empty() {
            self.estimator.hint(task, hints);
        }
    }

    /// `task`'s submitter declared `work` units of work
    /// ([`crate::estimate::Estimator::declare`]: its estimate scales by it).
    pub fn declare(&mut self, task: &Task, work: f64) {
        self.estimator.declare(task, work);
    }

    /// The online speed estimator.
    pub fn estimator(&self) -> &crate::estimate::Estimator {
        &self.estimator
    }

    /// Node `id`'s GPU model (a box's `gpu_model` label; [`GpuModel::NONE`]: none named):
    /// progress observed there is a sample of its tasks' classes on that model, and views show
    /// pending tasks' estimates there ([`crate::view::PendingView::est_on`]).
    pub fn set_gpu_model(&mut self, id: NodeId, gpu: GpuModel) {
        self.book(id).gpu = gpu;
    }

    /// Node `id`'s GPU model ([`GpuModel::NONE`] for an unknown node).
    pub fn gpu_model(&self, id: NodeId) -> GpuModel {
        self.nodes.get(&id).map_or(GpuModel::NONE, |b| b.gpu)
    }

    /// Progress of a running task (clamped to [0, 1]) observed at time `now` (in slots, on the
    /// driver's clock); other states: nothing. The progress made since the copy's last
    /// observation at the same allocation (or since its start) is a sample for the speed
    /// estimator; made since an observation at another allocation (the slot of a re-share),
    /// it is a switch ([`crate::estimate::Estimator::observe_switch`]). A copy's first sample,
    /// since its start, holds its start-up ([`crate::estimate::Estimator::observe_start`]).
    /// Progress that reaches 1 makes no sample: the task finished somewhere within the time
    /// since the last observation (an agent's task reporting `progress=1` before it exits), so
    /// that time says nothing of its speed.
    pub fn set_progress(&mut self, id: TaskId, p: f64, now: f64) {
        let Some(Entry {
            task,
            state:
                TaskState::Running {
                    node,
                    progress,
                    alloc,
                    started,
                },
            observed,
            ..
        }) = self.tasks.get_mut(&id)
        else {
            return;
        };
        let p = p.clamp(0.0, 1.0);
        let gpu = self.nodes.get(node).map_or(GpuModel::NONE, |b| b.gpu);
        if observed.as_ref().is_some_and(|(_, t, _)| now <= *t) {
            // No time has passed on the driver's clock (reports within one slot): the sample
            // waits for the next slot.
            *progress = p;
            return;
        }
        let finished = p >= 1.0;
        let since = match observed.take() {
            Some((q, t, a)) if a == *alloc => Some((q, t, false)),
            // The slot of a switch to this allocation: what it cost, not a speed.
            Some((q, t, _)) => {
                if !finished {
                    self.estimator
                        .observe_switch_on(task, gpu, alloc, p - q, now - t);
                }
                None
            }
            // The first observation of a copy that has not progressed before: since its start.
            None if *progress == 0.0 => Some((0.0, *started as f64, true)),
            None => None,
        };
        match since {
            _ if finished => {}
            Some((q, t, true)) => self
                .estimator
                .observe_start_on(task, gpu, alloc, p - q, now - t),
            Some((q, t, false)) => self.estimator.observe_on(task, gpu, alloc, p - q, now - t),
            None => {}
        }
        *progress = p;
        *observed = Some((p, now, alloc.clone()));
    }
}
