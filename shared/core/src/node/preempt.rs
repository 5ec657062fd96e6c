//! Preemption on a real node: the slot step's rule ([`crate::slot`]: the ledger's plan, one
//! [`Room`] per node, its lifetime and its proposal), the same the simulator carries out, acted
//! on for this node's own tasks only.
//!
//! At a slot's end, if the plan names this node, its victims get the checkpoint signal
//! ([`Action::Preempt`]: SIGTERM, then the task's grace, then a kill), go back to the queue (a
//! `Failed { requeue }` tells the peers, as a hand-back does) and keep their units here until
//! their processes have ended (as any stopped copy's, `draining`). Meanwhile this node proposes
//! nothing but the task it made room for, as soon as it fits ([`Room::proposal`]). The work each
//! victim lost (its progress since its last `checkpoint=` report) is counted per task.

use super::{Action, NodeCore, TaskState};
use crate::ledger::Requeue;
use crate::protocol::Proposal;
use crate::slot::Room;
use crate::task::{NodeId, TaskId};
use crate::wire::Body;
use std::collections::BTreeMap;

/// Checkpoints, the room kept for a waiting task, and what preemption cost.
#[derive(Default)]
pub(super) struct Preemption {
    /// Progress at each own task's last reported checkpoint.
    checkpoints: BTreeMap<TaskId, f64>,
    /// The room this node keeps for a waiting task.
    room: Option<crate::slot::Room>,
    /// What preemption cost the tasks preempted here.
    preempted: BTreeMap<TaskId, Preempted>,
    /// Copies preempted here whose end is not reported yet, with their epoch: one that exits 0
    /// within its grace has finished, in that epoch.
    ending: BTreeMap<TaskId, u64>,
    /// What preemption cost tasks on the other boxes, as each box told it ([`Body::Preempted`]).
    elsewhere: BTreeMap<TaskId, BTreeMap<NodeId, Preempted>>,
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

impl Preemption {
    /// A checkpoint of `task` at progress `p` (clamped to [0, 1]; not finite: ignored).
    fn checkpoint(&mut self, task: TaskId, p: f64) {
        if p.is_finite() {
            self.checkpoints.insert(task, p.clamp(0.0, 1.0));
        }
    }

    /// The work `task`, at `progress`, loses if it stops now: its progress since its last
    /// checkpoint.
    fn work_lost(&self, task: TaskId, progress: f64) -> f64 {
        (progress - self.checkpoints.get(&task).copied().unwrap_or(0.0)).max(0.0)
    }

    /// `task`, at `progress`, was preempted: counted, with the work it lost.
    pub(super) fn count(&mut self, task: TaskId, progress: f64) {
        let lost = self.work_lost(task, progress);
        let cost = self.preempted.entry(task).or_default();
        cost.times += 1;
        cost.work_lost += lost;
    }

    /// Whether a room is still kept at the end of `slot`'s rounds ([`Room::expired`] drops it).
    fn keeps_room<M>(&mut self, slot: u64, ledger: &crate::ledger::Ledger<M>) -> bool {
        if self.room.is_some_and(|r| r.expired(slot, ledger)) {
            self.room = None;
        }
        self.room.is_some()
    }

    /// The room's proposal for node `me` ([`Room::proposal`]); the room is dropped once its task
    /// no longer waits.
    fn room_proposal<M>(
        &mut self,
        me: NodeId,
        ledger: &crate::ledger::Ledger<M>,
    ) -> Option<Proposal> {
        let p = self.room?.proposal(me, ledger);
        if p.is_none() {
            self.room = None;
        }
        p
    }
}

impl NodeCore {
    /// A task running here reported a checkpoint at progress `p` (its progress line's
    /// `checkpoint=`): a preemption from now on loses only what it does after it.
    pub fn on_checkpoint(&mut self, task: TaskId, p: f64) {
        self.preemption.checkpoint(task, p);
    }

    /// The end of a copy of `task` here was reported: if it was preempted, its epoch.
    pub(super) fn preempted_copy_ended(&mut self, task: TaskId) -> Option<u64> {
        self.preemption.ending.remove(&task)
    }

    /// Tasks preempted here, with what it cost them.
    pub fn preempted(&self) -> &BTreeMap<TaskId, Preempted> {
        &self.preemption.preempted
    }

    /// What preemption cost each task on every box: this node's counts and those its peers told
    /// it, summed over the boxes.
    pub fn preempted_everywhere(&self) -> BTreeMap<TaskId, Preempted> {
        let mut all = self.preemption.preempted.clone();
        for (task, boxes) in &self.preemption.elsewhere {
            let sum = all.entry(*task).or_default();
            for p in boxes.values() {
                sum.times += p.times;
                sum.work_lost += p.work_lost;
            }
        }
        all
    }

    /// This node's count for `task` ([`Body::Preempted`]), for every peer to show, after a
    /// preemption here.
    pub(super) fn tell_preempted(&mut self, task: TaskId) -> Option<Action> {
        let p = *self.preemption.preempted.get(&task)?;
        Some(self.envelope(Body::Preempted {
            task,
            times: p.times,
            work_lost: p.work_lost,
        }))
    }

    /// Peer `from`'s count for `task`: the latest replaces the one before.
    pub(super) fn on_preempted(
        &mut self,
        from: NodeId,
        task: TaskId,
        times: u32,
        work_lost: f64,
    ) -> Vec<Action> {
        if self.tasks.contains(task) && work_lost.is_finite() && work_lost >= 0.0 {
            self.preemption
                .elsewhere
                .entry(task)
                .or_default()
                .insert(from, Preempted { times, work_lost });
        }
        Vec::new()
    }

    /// What preemption had cost `task` here before a restart (the agent's journal).
    pub fn restore_preempted(&mut self, task: TaskId, p: Preempted) {
        self.preemption.preempted.insert(task, p);
    }

    /// At a slot's end: this node's part of the slot's preemption plan, if preemption is on.
    pub(super) fn preempt(&mut self, slot: u64, now: u64) -> Vec<Action> {
        // Without a lease (or settling after one lapsed) this node starts nothing, so it makes
        // no room either.
        // A leaving node makes no room: it is handing everything back.
        if !self.cfg.preempt
            || !self.lease_held(now)
            || self.rounds.settling
            || self.leaving.is_some()
        {
            return Vec::new();
        }
        if self.preemption.keeps_room(slot, &self.tasks) {
            return Vec::new();
        }
        let me = self.cfg.me;
        let plan = {
            let (tasks, preemption) = (&self.tasks, &self.preemption);
            tasks.preemption_plan(slot, |id| match tasks.get(id).map(|e| &e.state) {
                Some(TaskState::Running { progress, .. }) => preemption.work_lost(id, *progress),
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
            let attained = e.attained;
            let epoch = e.meta.epoch;
            let grace_ms = e.meta.spec.grace_seconds.max(0) as u64 * 1000;
            grace_slots = grace_slots.max(grace_ms.div_ceil(self.cfg.slot_ms.max(1)));
            self.preemption.count(*v, progress);
            self.preemption.ending.insert(*v, epoch);
            self.stats.preempted += 1;
            out.push(self.preempt_copy(*v));
            self.tasks.requeue(*v, Requeue::Preempted);
            if let Some(m) = self.tasks.meta_mut(*v) {
                m.owner = None;
            }
            self.protocol.release(*v);
            out.extend(self.tell_preempted(*v));
            out.push(self.envelope(Body::Failed {
                task: *v,
                requeue: true,
                reason: format!("preempted for {} (a higher priority class)", p.task),
                attained: Some(attained),
            }));
        }
        self.preemption.room = Some(Room::made(p.task, slot, grace_slots));
        out
    }

    /// While this node keeps a room: [`Room::proposal`] (its task once it fits, a pass until
    /// then); `None` without a room, or once its task no longer waits (the room is dropped).
    pub(super) fn room_proposal(&mut self) -> Option<Proposal> {
        self.preemption.room_proposal(self.cfg.me, &self.tasks)
    }
}
