//! The slot's progress: attained service grows, running tasks progress at their true speed
//! (slowed in a run's first slot by `start_weight` and in a switch's slot by `switch_weight`,
//! scaled by the type's `gpu_speed` for the box's GPU model and, on a shared GPU, by the
//! co-location factor of its device's other tasks),
//! finish, stall below their need, or (memory `fail` mode) die and queue again.

use super::{Episode, Observer, TaskRecord};
use crate::scenario::MemoryMode;
use std::sync::Arc;
use tapfinger::TaskId;
use tapfinger::ledger::TaskState;

impl Episode<'_> {
    /// The slot runs: attained service grows, running tasks progress at their true speed,
    /// finish, stall below their need, or (memory `fail` mode) die and queue again.
    pub(super) fn progress(&mut self, slot: u64, observe: &mut dyn Observer) {
        let sc = self.sc;
        let gpu = tapfinger::estimate::KindMap::from_names(&sc.kind_names()).0[1];
        self.ledger.accrue_service();
        // Shares on devices; tasks no device holds go back to the queue here.
        let shared = self.place_on_devices();
        if let Some(r) = observe.twin() {
            r.observe(
                slot,
                self.ledger.values().map(|e| tapfinger::twin::Seen {
                    identity: &e.identity,
                    task: &e.task,
                    state: &e.state,
                    class: &sc.types[usize::from(e.task.ty.0)].name,
                    // What its submitter declared, as `arrive` declared it to the ledger.
                    work: sc
                        .declare_work
                        .then(|| crate::workload::size_of(&self.sizes, e.task.id)),
                }),
            );
        }
        let running: Vec<TaskId> = self
            .ids
            .iter()
            .flat_map(|n| self.ledger.running_on(*n).collect::<Vec<_>>())
            .collect();
        for id in running {
            let e = &self.ledger[&id];
            let TaskState::Running {
                node,
                alloc,
                progress,
                ..
            } = e.state.clone()
            else {
                continue;
            };
            let task = e.task.clone();
            let ty = &sc.types[usize::from(task.ty.0)];
            let switched = e.meta.prev.as_ref().is_some_and(|p| *p != alloc);
            // A run's first slot (no slot of this copy has run yet) holds its start-up.
            let first = e.meta.prev.is_none();
            let gpus_changed = gpu.is_some_and(|g| {
                e.meta
                    .prev
                    .as_ref()
                    .is_some_and(|p| p.get(g) != alloc.get(g))
            });
            if gpus_changed && let Some(m) = self.ledger.meta_mut(id) {
                m.gpu_changes += 1;
            }
            if !ty.need.fits_in(&alloc) {
                if sc.memory == MemoryMode::Fail {
                    // Killed for lack of memory; re-queued asking for what it really needs.
                    let mut again = (*task).clone();
                    again.min_demand = again.min_demand.max_each(&ty.need);
                    self.ledger
                        .requeue(id, tapfinger::ledger::Requeue::OutOfMemory);
                    self.ledger.replace_task(Arc::new(again));
                    if let Some(m) = self.ledger.meta_mut(id) {
                        m.failures += 1;
                    }
                    for p in &mut self.protocols {
                        p.release(id);
                    }
                } else if let Some(m) = self.ledger.meta_mut(id) {
                    m.prev = Some(alloc);
                }
                continue;
            }
            let penalty = if first {
                sc.start_weight
            } else if switched {
                sc.switch_weight
            } else {
                1.0
            };
            // A task `size` times its type's work advances `size` times slower; on a box of a
            // GPU model its type lists, at that model's relative speed.
            let size = self.size(id);
            let pace = sc.nodes.get(node.0 as usize).map_or(1.0, |n| ty.pace(n))
                * shared.get(&id).copied().unwrap_or(1.0);
            let progress = progress
                + ty.speed.delta(&alloc, progress, sc.slot_seconds) * penalty * pace / size;
            if let Some(m) = self.ledger.meta_mut(id) {
                m.prev = Some(alloc.clone());
            }
            if let Some(converging) = self.learn(id, &alloc, progress, slot) {
                observe.judged(slot, id, converging);
            }
            self.checkpoint(id, progress, slot);
            let finished = progress >= 1.0 - 1e-12;
            observe.progressed(slot, id, progress, finished);
            if finished {
                let finish = slot + 1;
                let meta = &self.ledger[&id].meta;
                let (lower_bound, area) = (self.lower_bound)(&task, size);
                self.records.push(TaskRecord {
                    id: id.0,
                    ty: task.ty.0,
                    arrival: task.arrival,
                    start: meta.start,
                    finish,
                    node: node.0,
                    jct: finish - task.arrival,
                    lower_bound,
                    area,
                    failures: meta.failures,
                    members: 0,
                    priority: task.priority,
                    accuracy: self.final_accuracy(task.ty.0),
                    accuracy_at_plateau: meta.learning.at_plateau,
                    resource_time: meta.learning.resource_time,
                    preemptions: meta.checkpoints.preemptions,
                    work_lost: meta.checkpoints.lost,
                    gpu_changes: meta.gpu_changes,
                    cluster_reward: sc.reward.of(
                        self.final_accuracy(task.ty.0),
                        finish - task.arrival,
                        meta.learning.resource_time,
                    ),
                    size,
                });
                // The accuracy it ends with (its reports' gains then sum to it: the cluster
                // reward paid by slot sums to the record's).
                if let Some(a) = self.final_accuracy(task.ty.0) {
                    self.ledger.note_accuracy(id, a);
                }
                // Finished tasks leave the ledger: the record is all that is kept of them
                // (and what the size book learns of them, as on the agents).
                self.ledger.finished(id);
            } else {
                self.ledger.set_progress(id, progress, (slot + 1) as f64);
            }
        }
    }
}
