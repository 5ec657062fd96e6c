//! Preemption on a real node: the ledger's rule ([`crate::ledger::Ledger::preemption_plan`]),
//! the same the simulator carries out, acted on for this node's own tasks only.
//!
//! At a slot's end, if the plan names this node, its victims get the checkpoint signal
//! ([`Action::Preempt`]: SIGTERM, then the task's grace, then a kill), go back to the queue (a
//! `Failed { requeue }` tells the peers, as a hand-back does) and keep their units here until
//! their processes have ended (as any stopped copy's, `draining`). Meanwhile this node proposes nothing but the
//! task it made room for, and proposes that one as soon as it fits (`room_proposal`);
//! the room is given up when the task starts (here or elsewhere), leaves the queue, or after
//! [`ROOM_SLOTS`] slots plus the longest grace of its victims. The work each victim lost (its
//! progress since its last `checkpoint=` report) is counted per task.

use super::{Action, NodeCore, TaskState};
use crate::protocol::{Claim, Proposal};
use crate::task::TaskId;
use crate::wire::Body;

/// Slots a room is kept for its task beyond its victims' grace.
pub const ROOM_SLOTS: u64 = 5;

/// A room this node made: the task, and the slot after which it is given up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Room {
    pub(super) task: TaskId,
    pub(super) until: u64,
}

/// What preemption cost a task that ran here.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Preempted {
    /// Times it was preempted here.
    pub times: u32,
    /// Work lost: its progress since its last checkpoint, summed over those times (1: a whole
    /// run).
    pub work_lost: f64,
}

impl NodeCore {
    /// A task running here reported a checkpoint at progress `p` (its progress line's
    /// `checkpoint=`): a preemption from now on loses only what it does after it.
    pub fn on_checkpoint(&mut self, task: TaskId, p: f64) {
        if p.is_finite() {
            self.preemption.checkpoints.insert(task, p.clamp(0.0, 1.0));
        }
    }

    /// Tasks preempted here, with what it cost them.
    pub fn preempted(&self) -> &std::collections::BTreeMap<TaskId, Preempted> {
        &self.preemption.preempted
    }

    /// What preemption had cost `task` here before a restart (the agent's journal).
    pub fn restore_preempted(&mut self, task: TaskId, p: Preempted) {
        self.preemption.preempted.insert(task, p);
    }

    /// At a slot's end: this node's part of the slot's preemption plan, if preemption is on.
    pub(super) fn preempt(&mut self, slot: u64, now: u64) -> Vec<Action> {
        // Without a lease (or settling after one lapsed) this node starts nothing, so it makes
        // no room either.
        if !self.cfg.preempt || !self.lease_held(now) || self.rounds.settling {
            return Vec::new();
        }
        if let Some(r) = self.preemption.room
            && (slot > r.until || !self.waits(r.task))
        {
            self.preemption.room = None;
        }
        if self.preemption.room.is_some() {
            return Vec::new();
        }
        let me = self.cfg.me;
        let plan = {
            let tasks = &self.tasks;
            let checkpoints = &self.preemption.checkpoints;
            tasks.preemption_plan(slot, |id| match tasks.get(id).map(|e| &e.state) {
                Some(TaskState::Running { progress, .. }) => {
                    (progress - checkpoints.get(&id).copied().unwrap_or(0.0)).max(0.0)
                }
                _ => 0.0,
            })
        };
        let Some(p) = plan.into_iter().find(|p| p.node == me) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut grace_slots = 0;
        for v in &p.victims {
            let Some(e) = self.tasks.get(*v) else {
                continue;
            };
            let TaskState::Running { progress, .. } = e.state else {
                continue;
            };
            let grace_ms = e.meta.spec.grace_seconds.max(0) as u64 * 1000;
            grace_slots = grace_slots.max(grace_ms.div_ceil(self.cfg.slot_ms.max(1)));
            let lost =
                (progress - self.preemption.checkpoints.get(v).copied().unwrap_or(0.0)).max(0.0);
            let cost = self.preemption.preempted.entry(*v).or_default();
            cost.times += 1;
            cost.work_lost += lost;
            self.stats.preempted += 1;
            out.push(self.preempt_copy(*v));
            self.tasks.set_state(*v, TaskState::Pending);
            if let Some(m) = self.tasks.meta_mut(*v) {
                m.owner = None;
            }
            self.protocol.release(*v);
            out.push(self.envelope(Body::Failed {
                task: *v,
                requeue: true,
                reason: format!("preempted for {} (a higher priority class)", p.task),
            }));
        }
        self.preemption.room = Some(Room {
            task: p.task,
            until: slot + ROOM_SLOTS + grace_slots,
        });
        out
    }

    /// Whether `task` is still waiting in the queue.
    fn waits(&self, task: TaskId) -> bool {
        self.tasks
            .get(task)
            .is_some_and(|e| e.state == TaskState::Pending)
    }

    /// While this node keeps a room: the task it is for, once it fits
    /// ([`crate::ledger::Ledger::room_alloc`]), and a pass until then; `None` without a room.
    pub(super) fn room_proposal(&mut self) -> Option<Proposal> {
        let r = self.preemption.room?;
        if !self.waits(r.task) {
            self.preemption.room = None;
            return None;
        }
        let me = self.cfg.me;
        let Some(alloc) = self.tasks.room_alloc(me, r.task) else {
            return Some(Proposal::Pass);
        };
        let min = &self.tasks.get(r.task)?.task.min_demand;
        Some(Proposal::Claim(Claim {
            task: r.task,
            headroom: self.tasks.claimable(me).headroom(min),
            alloc,
            prob: 1.0,
        }))
    }
}
