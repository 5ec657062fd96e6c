//! One slot step: the per-slot rules both drivers follow, written once. The simulator's episode
//! and an agent's [`crate::node::NodeCore`] each call these; what stays theirs is what only
//! they have (true speeds and time in the simulator; messages, leases and processes on agents).
//!
//! A slot, on either driver:
//!
//! 1. **Rounds** until one commits nothing. In each, a node proposes ([`propose`]): the task it
//!    made room for by preemption if it keeps a room ([`Room::proposal`]: that task once it
//!    fits, a pass until then), else a pending gang it owns that fits, else its policy's claim.
//!    The policy decides every round whatever is proposed, so its randomness is drawn the same
//!    way on both drivers.
//! 2. **Preemption** ([`crate::ledger::Ledger::preemption_plan`]): a node that keeps no room
//!    stops the victims the plan names on it, requeues them ([`crate::ledger::Ledger::requeue`])
//!    and keeps a [`Room`] for the waiting task. Rooms are given up ([`Room::expired`]) when
//!    their task no longer waits or [`ROOM_SLOTS`] slots after the victims' grace.
//! 3. **The end of the slot** ([`end_of_slot`]): converging tasks shrink a step, the elastic
//!    policies of nodes with tasks running re-share, converging tasks are held at their
//!    ceilings ([`EndOfSlot::finish`]).

use crate::ledger::{Ledger, TaskState};
use crate::protocol::{Claim, Proposal};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};

/// Slots a room is kept for its task once its victims' grace is over. The task fits as soon as
/// the victims' units are free, so a simulated room is used in the first of them; agents get
/// the rest for what messages and processes take (a victim that ends late, a gang placed
/// meanwhile).
pub const ROOM_SLOTS: u64 = 5;

/// A room one node made by preemption: the task it is for, the first slot its victims' units
/// are free again, and the last slot it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// The waiting task the room is for.
    pub task: TaskId,
    /// The first slot whose rounds may start it (after its victims' grace).
    pub ready: u64,
    /// The last slot the room is kept (`ready + ROOM_SLOTS - 1`).
    pub until: u64,
}

impl Room {
    /// The room made at the end of `slot` for `task`, its victims ending `grace_slots` slots
    /// later.
    pub fn made(task: TaskId, slot: u64, grace_slots: u64) -> Self {
        let ready = slot + grace_slots + 1;
        Self {
            task,
            ready,
            until: ready + ROOM_SLOTS - 1,
        }
    }

    /// Whether the room is given up at the end of `slot`'s rounds: its task no longer waits
    /// (it started, here or elsewhere, or left), or its time is over.
    pub fn expired<M>(&self, slot: u64, ledger: &Ledger<M>) -> bool {
        slot >= self.until || !waits(ledger, self.task)
    }

    /// Whether the room was made for nothing so far: at the end of its first slot its task
    /// still waits. (In the simulator, where nothing is late, that is a fault; the tests count
    /// it.)
    pub fn late<M>(&self, slot: u64, ledger: &Ledger<M>) -> bool {
        slot == self.ready && waits(ledger, self.task)
    }

    /// What `node`, keeping this room, proposes: its task once it fits
    /// ([`Ledger::room_alloc`]), a pass until then (the policy must not fill the room). `None`
    /// where the task no longer waits: the room has served, and the node proposes as usual.
    pub fn proposal<M>(&self, node: NodeId, ledger: &Ledger<M>) -> Option<Proposal> {
        if !waits(ledger, self.task) {
            return None;
        }
        let Some(alloc) = ledger.room_alloc(node, self.task) else {
            return Some(Proposal::Pass);
        };
        let task = &ledger.get(self.task)?.task;
        Some(Proposal::Claim(Claim {
            task: self.task,
            headroom: ledger.claim_prior(node, task, &alloc),
            alloc,
            prob: 1.0,
        }))
    }
}

/// A policy's proposal ([`crate::policy::to_proposal`]) with the prior `node` states for its
/// claim ([`Ledger::claim_prior`]: FGD's growth score where GPUs are shared in fractions and
/// the node's devices are known, else its headroom). Both drivers call it on every claim.
pub fn with_prior<M>(p: Proposal, node: NodeId, ledger: &Ledger<M>) -> Proposal {
    match p {
        Proposal::Claim(mut c) => {
            if let Some(e) = ledger.get(c.task) {
                c.headroom = ledger.claim_prior(node, &e.task, &c.alloc);
            }
            Proposal::Claim(c)
        }
        p => p,
    }
}

/// Whether `task` still waits in the queue.
fn waits<M>(ledger: &Ledger<M>, task: TaskId) -> bool {
    ledger
        .get(task)
        .is_some_and(|e| e.state == TaskState::Pending)
}

/// A node's proposal in a round, in the one order: a room's, else a gang's, else the policy's;
/// a pass instead of a claim of a task whose earlier copy on this node is still ending
/// (`dying`: a victim of preemption in its grace). Why: a node runs one process per task, and
/// the old one's end would pass for the new run's; it may claim the task again once the old
/// copy has ended, and any other node may meanwhile.
pub fn propose(
    room: Option<Proposal>,
    gang: Option<Proposal>,
    policy: Proposal,
    dying: impl Fn(TaskId) -> bool,
) -> Proposal {
    match room.or(gang).unwrap_or(policy) {
        Proposal::Claim(c) if dying(c.task) => Proposal::Pass,
        p => p,
    }
}

/// The end of a slot's rounds on `nodes` (every node in the simulator, its own on an agent),
/// after preemption, begun: converging tasks running there may hold one unit less
/// ([`Ledger::shrink_step`]). The driver's elastic policies re-share next (the driver builds
/// their views; only nodes with tasks running re-share), then [`EndOfSlot::finish`] holds the
/// converging tasks at their ceilings.
pub fn end_of_slot<'a, M>(ledger: &mut Ledger<M>, nodes: &'a [NodeId]) -> EndOfSlot<'a> {
    for n in nodes {
        ledger.shrink_step(*n);
    }
    EndOfSlot { nodes }
}

/// The end of a slot under way: the shrink step done, the ceilings to hold after the re-shares.
#[must_use = "the end of a slot is finished by EndOfSlot::finish, after the re-shares"]
#[derive(Debug)]
pub struct EndOfSlot<'a> {
    nodes: &'a [NodeId],
}

impl EndOfSlot<'_> {
    /// After the re-shares: converging tasks held at their ceilings
    /// ([`Ledger::apply_ceilings`]), which then settle at what each will run at
    /// ([`Ledger::settle_ceilings`]). Returns the allocations this changed, by node.
    pub fn finish<M>(self, ledger: &mut Ledger<M>) -> Vec<Changed> {
        let mut changed = Vec::new();
        for n in self.nodes {
            let c = ledger.apply_ceilings(*n);
            ledger.settle_ceilings(*n);
            if !c.is_empty() {
                changed.push((*n, c));
            }
        }
        changed
    }
}

/// A node's re-allocated tasks, with their new allocations.
pub type Changed = (NodeId, Vec<(TaskId, Resources)>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Task;
    use std::sync::Arc;

    fn ledger() -> Ledger<()> {
        let mut l = Ledger::new(8, 1);
        l.set_node(NodeId(0), Resources(vec![4, 0]));
        l
    }

    #[test]
    fn a_room_proposes_its_task_once_it_fits_and_passes_until_then() {
        let mut l = ledger();
        let big = Arc::new(Task::new(1, [3, 0]));
        let small = Arc::new(Task::new(2, [2, 0]));
        l.insert(small.clone(), TaskState::Pending, ());
        l.set_state(
            small.id,
            TaskState::Running {
                node: NodeId(0),
                alloc: Resources(vec![2, 0]),
                progress: 0.0,
                started: 0,
            },
        );
        l.insert(big.clone(), TaskState::Pending, ());
        let room = Room::made(big.id, 3, 1);
        assert_eq!((room.ready, room.until), (5, 5 + ROOM_SLOTS - 1));
        assert_eq!(room.proposal(NodeId(0), &l), Some(Proposal::Pass));
        assert!(room.late(5, &l) && !room.late(4, &l));
        assert!(!room.expired(room.until - 1, &l) && room.expired(room.until, &l));
        l.requeue(small.id, crate::ledger::Requeue::Preempted);
        l.remove(small.id);
        match room.proposal(NodeId(0), &l) {
            Some(Proposal::Claim(c)) => assert_eq!(c.task, big.id),
            other => panic!("{other:?}"),
        }
        l.set_state(
            big.id,
            TaskState::Running {
                node: NodeId(0),
                alloc: Resources(vec![3, 0]),
                progress: 0.0,
                started: 5,
            },
        );
        // Started: the room has served and is given up.
        assert_eq!(room.proposal(NodeId(0), &l), None);
        assert!(room.expired(5, &l) && !room.late(5, &l));
    }

    #[test]
    fn the_order_is_room_then_gang_then_policy_and_a_dying_copy_is_not_claimed() {
        let claim = |t| {
            Proposal::Claim(Claim {
                task: TaskId(t),
                headroom: 0.0,
                alloc: Resources(vec![1]),
                prob: 1.0,
            })
        };
        let alive = |_| false;
        assert_eq!(
            propose(Some(claim(1)), Some(claim(2)), claim(3), alive),
            claim(1)
        );
        assert_eq!(propose(None, Some(claim(2)), claim(3), alive), claim(2));
        assert_eq!(propose(None, None, claim(3), alive), claim(3));
        // A task whose copy here is still ending is not claimed here: a pass.
        assert_eq!(
            propose(None, None, claim(3), |t| t == TaskId(3)),
            Proposal::Pass
        );
        assert_eq!(propose(None, None, claim(3), |t| t == TaskId(4)), claim(3));
        assert_eq!(
            propose(Some(Proposal::Pass), Some(claim(2)), claim(3), alive),
            Proposal::Pass
        );
    }
}
