//! The episode's side of preemption (`[priorities] preempt`): tasks checkpoint every so many
//! slots they run; once a slot, after its rounds, the ledger's rule
//! ([`tapfinger::ledger::Ledger::preemption_plan`]) names the victims, which go back to the queue
//! to resume from their last checkpoint (the progress since it is the work lost), and the node
//! that made room proposes the waiting task in the next rounds, ahead of its policy.

use super::Episode;
use tapfinger::TaskId;
use tapfinger::ledger::TaskState;
use tapfinger::protocol::{Claim, Proposal};

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
        // Rooms are made after a slot's rounds, and the next slot's rounds start the task (its
        // node proposes it): one still waiting now is a room made for nothing.
        let ledger = &self.ledger;
        self.rooms_unused += self
            .forced
            .values()
            .filter(|t| {
                ledger
                    .get(**t)
                    .is_some_and(|e| e.state == TaskState::Pending)
            })
            .count() as u64;
        self.forced.clear();
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
        for p in plan {
            for v in &p.victims {
                let progress = match self.ledger.get(*v).map(|e| &e.state) {
                    Some(TaskState::Running { progress, .. }) => *progress,
                    _ => continue,
                };
                let size = self.size(*v);
                self.ledger.set_state(*v, TaskState::Pending);
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
            }
            self.forced.insert(p.node, p.task);
        }
    }

    /// Agent `i`'s proposal if it made room for a waiting task that still waits and now fits:
    /// that task, at its minimum demand on an elastic node (the re-share gives it its share),
    /// else with all the node can give it up to its maximum (as a policy's claim could).
    pub(super) fn forced_proposal(&self, i: usize) -> Option<Proposal> {
        let node = self.ids[i];
        let task = *self.forced.get(&node)?;
        let e = self.ledger.get(task)?;
        let free = self.ledger.claimable(node);
        (e.state == TaskState::Pending && e.task.min_demand.fits_in(&free)).then(|| {
            let alloc = if self.ledger.is_elastic(node) {
                e.task.min_demand.clone()
            } else {
                e.task.cap(&free)
            };
            Proposal::Claim(Claim {
                task,
                alloc,
                prob: 1.0,
                headroom: free.headroom(&e.task.min_demand),
            })
        })
    }
}
