//! The episode's side of preemption (`[priorities] preempt`): tasks checkpoint every so many
//! slots they run; once a slot, after its rounds, the ledger's rule
//! ([`tapfinger::ledger::Ledger::preemption_plan`]) names the victims, which go back to the queue
//! to resume from their last checkpoint (the progress since it is the work lost), and the node
//! that made room keeps a [`Room`] for the waiting task: the slot step's rule
//! ([`tapfinger::slot`]), the agents' own. With a
//! grace (`grace_slots`, the agents' `grace_seconds`) the victims' units stay taken that many
//! slots, as an agent keeps a stopped copy's units until its process has ended (by lowering the
//! node's capacity in its ledger and its heartbeats), the node makes no other room and does not
//! claim a victim again meanwhile; the units are the node's again from the slot after the
//! grace's last.

use super::Episode;
use tapfinger::TaskId;
use tapfinger::ledger::{Requeue, TaskState};
use tapfinger::protocol::Proposal;
use tapfinger::slot::Room;

/// What the episode keeps of a task's checkpoints and preemptions beside the ledger.
#[derive(Debug, Clone, Default)]
pub(super) struct Checkpoints {
    /// Progress at its last checkpoint (where a preempted run resumes).
    pub(super) at: f64,
    /// Progress its next run starts from.
    pub(super) resume: f64,
    /// Times it was preempted.
    pub(super) preemptions: u32,
    /// Work lost to preemption, in its own work (progress × size).
    pub(super) lost: f64,
}

impl Episode<'_> {
    /// A running task that has run a multiple of the checkpoint period since it started saves
    /// its progress.
    pub(super) fn checkpoint(&mut self, id: TaskId, progress: f64, slot: u64) {
        let Some(k) = self.sc.checkpoint_slots else {
            return;
        };
        if let Some(m) = self.ledger.meta_mut(id)
            && (slot + 1 - m.start).is_multiple_of(k.max(1))
        {
            m.checkpoints.at = progress;
        }
    }

    /// After the slot's rounds: the ledger's preemptions, carried out.
    pub(super) fn preempt(&mut self, slot: u64) {
        if self.sc.checkpoint_slots.is_none() {
            return;
        }
        // Rooms are made after a slot's rounds, and the rounds after the victims' grace start
        // the task (its node proposes it): one still waiting then is a room made for nothing
        // so far ([`Room::late`]).
        let ledger = &self.ledger;
        let mut late = 0;
        self.rooms.retain(|_, r| {
            late += u64::from(r.late(slot, ledger));
            !r.expired(slot, ledger)
        });
        self.rooms_unused += late;
        let plan = {
            let ledger = &self.ledger;
            ledger.preemption_plan(slot, |id| match ledger.get(id) {
                Some(e) => match &e.state {
                    TaskState::Running { progress, .. } => progress - e.meta.checkpoints.at,
                    _ => 0.0,
                },
                None => 0.0,
            })
        };
        let grace = self.sc.preempt_grace_slots;
        // A node that keeps a room makes no other (as an agent's).
        let busy: Vec<tapfinger::NodeId> = self.rooms.keys().copied().collect();
        for p in plan.into_iter().filter(|p| !busy.contains(&p.node)) {
            for v in &p.victims {
                let (progress, alloc) = match self.ledger.get(*v).map(|e| &e.state) {
                    Some(TaskState::Running {
                        progress, alloc, ..
                    }) => (*progress, alloc.clone()),
                    _ => continue,
                };
                let size = self.size(*v);
                self.ledger.requeue(*v, Requeue::Preempted);
                if let Some(m) = self.ledger.meta_mut(*v) {
                    let c = &mut m.checkpoints;
                    c.lost += (progress - c.at).max(0.0) * size;
                    c.resume = c.at;
                    c.preemptions += 1;
                    m.prev = None;
                }
                for proto in &mut self.protocols {
                    proto.release(*v);
                }
                if grace > 0 {
                    self.draining.push((slot + grace, p.node, *v, alloc));
                }
            }
            self.hold_draining(p.node);
            self.rooms.insert(p.node, Room::made(p.task, slot, grace));
        }
    }

    /// At the end of the slot step (after the plan and the re-share): victims whose grace is
    /// over end with the slot, and their units are the node's again from the next slot on. The
    /// slot's plan and re-share still saw them held, as an agent's do: its victim's process
    /// ends while the slot runs, and its peers hear of it with the next heartbeat.
    pub(super) fn end_grace(&mut self, slot: u64) {
        let ended: Vec<_> = self
            .draining
            .iter()
            .filter(|d| d.0 <= slot)
            .cloned()
            .collect();
        self.draining.retain(|d| d.0 > slot);
        for (_, node, _, _) in ended {
            self.hold_draining(node);
        }
    }

    /// Whether a copy of `task` is ending on `node` (a victim in its grace): the node does not
    /// claim it meanwhile ([`tapfinger::slot::propose`]).
    pub(super) fn dying(&self, node: tapfinger::NodeId, task: TaskId) -> bool {
        self.draining.iter().any(|d| d.1 == node && d.2 == task)
    }

    /// `node`'s capacity in the ledger: what it offers less the units of victims still in
    /// their grace.
    fn hold_draining(&mut self, node: tapfinger::NodeId) {
        let Some(i) = self.ids.iter().position(|n| *n == node) else {
            return;
        };
        let mut cap = self.sc.nodes[i].capacity.clone();
        for (_, _, _, units) in self.draining.iter().filter(|d| d.1 == node) {
            for (c, u) in cap.0.iter_mut().zip(&units.0) {
                *c = c.saturating_sub(*u);
            }
        }
        self.ledger.set_node(node, cap);
    }

    /// Agent `i`'s proposal while it keeps a room ([`Room::proposal`]: its task once it fits,
    /// a pass until then).
    pub(super) fn room_proposal(&self, i: usize) -> Option<Proposal> {
        let node = self.ids[i];
        self.rooms.get(&node)?.proposal(node, &self.ledger)
    }
}
