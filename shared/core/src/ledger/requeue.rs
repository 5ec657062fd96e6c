//! Sending a task back to the queue, for every reason either driver has, in one place
//! ([`Ledger::requeue`]): its state becomes pending (queues, running sets and used units
//! follow), and the ledger counts why. What else a requeue does is the driver's: an agent
//! releases the task in its protocol instance and says who owns it now; the simulator resumes a
//! preempted task from its checkpoint.

use super::{Ledger, TaskState};
use crate::task::TaskId;

/// Why a task went back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Requeue {
    /// Stopped so that a waiting task of a higher class could start ([`super::Preemption`]).
    Preempted,
    /// Won, but its node could not start it (a GPU share no single device holds).
    StartRefused,
    /// Handed back by its node: the node is leaving, or its lease lapsed.
    HandedBack,
    /// Its node says it does not run it (stopped for a lapsed lease, lost in a restart).
    NotRunning,
    /// Its node restarted and no longer lists it.
    NodeRestarted,
    /// Its node went silent and its tasks were taken over.
    NodeSilent,
    /// A member of its gang failed or went silent.
    GangBroken,
    /// It ran out of memory below its true need (the simulator's `fail` mode).
    OutOfMemory,
}

impl Requeue {
    /// Every reason, in order (for reports that list them all).
    pub const ALL: [Requeue; 8] = [
        Requeue::Preempted,
        Requeue::StartRefused,
        Requeue::HandedBack,
        Requeue::NotRunning,
        Requeue::NodeRestarted,
        Requeue::NodeSilent,
        Requeue::GangBroken,
        Requeue::OutOfMemory,
    ];

    /// The reason as one snake-case word (logs, metrics' labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Requeue::Preempted => "preempted",
            Requeue::StartRefused => "start_refused",
            Requeue::HandedBack => "handed_back",
            Requeue::NotRunning => "not_running",
            Requeue::NodeRestarted => "node_restarted",
            Requeue::NodeSilent => "node_silent",
            Requeue::GangBroken => "gang_broken",
            Requeue::OutOfMemory => "out_of_memory",
        }
    }
}

impl std::fmt::Display for Requeue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<M> Ledger<M> {
    /// Send task `id` back to the queue for `why`; returns the state it left (`None`: not
    /// known here, nothing done). A task already pending stays so and is not counted again.
    pub fn requeue(&mut self, id: TaskId, why: Requeue) -> Option<TaskState> {
        let old = self.tasks.get(&id)?.state.clone();
        if old == TaskState::Pending {
            return Some(old);
        }
        self.set_state(id, TaskState::Pending)?;
        *self.requeues.entry(why).or_default() += 1;
        Some(old)
    }

    /// How many tasks went back to the queue, by reason, since this ledger was made.
    pub fn requeues(&self) -> &std::collections::BTreeMap<Requeue, u64> {
        &self.requeues
    }
}
