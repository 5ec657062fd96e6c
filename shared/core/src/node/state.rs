//! A node core's state by concern: membership, the lease, the rounds, what it reconciles with
//! its peers, the copies run here (preemption's and anti-entropy's live in their modules). Each is a field of [`super::NodeCore`]; the
//! behaviour lives in the sibling modules, one concern each.

use crate::NodeId;
use crate::protocol::Message;
use crate::resources::Resources;
use crate::task::TaskId;
use crate::wire::Outcome;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Who the members are: those known, silent, taken over, restarted, and greeting them.
#[derive(Default)]
pub(super) struct Membership {
    /// Members for the quorum (this node, nodes heard, persisted ones), and whether that changed.
    pub(super) known: BTreeSet<NodeId>,
    /// `known` grew since the driver last persisted it (`NodeCore::take_known`).
    pub(super) known_changed: bool,
    /// Members not heard within the peer timeout: when they were last heard (or first missed).
    pub(super) silent: BTreeMap<NodeId, u64>,
    /// Silent members whose tasks were taken over already.
    pub(super) taken_over: BTreeSet<NodeId>,
    /// Peers whose heartbeats carry other resource steps than this node's: not heard until
    /// one carries the same (refused once, loudly, then quietly).
    pub(super) other_steps: BTreeSet<NodeId>,
    /// Each peer's last incarnation (kept across silences, to tell a restart).
    pub(super) incarnations: BTreeMap<NodeId, u64>,
    /// Peers that said they leave on purpose ([`super::leave`]), with the incarnation that
    /// left: its late heartbeats are not heard; a new incarnation is a member again.
    pub(super) left: BTreeMap<NodeId, u64>,
    /// A peer (re)joined since this node last greeted: greet at the next tick that may. A greet
    /// is a broadcast, so one serves every peer that joined meanwhile; sending one per joiner
    /// made 16 agents starting together (or flapping under load) send thousands of messages.
    pub(super) greet_due: bool,
    /// When this node last greeted: at most one greet per peer timeout (peers that flap under
    /// load would otherwise draw a greet from every node at every heartbeat).
    pub(super) last_greet: Option<u64>,
}

/// The lease: whether a quorum holds, since when, and what its loss did.
pub(super) struct LeaseState {
    /// When a quorum last held (may be before this run: the driver's record).
    pub(super) last_quorum: Option<i128>,
    /// The lease lapsed and this node stopped its copies.
    pub(super) lease_lost: bool,
    /// The lease was lost after a quorum had held (not a fresh node's first ticks).
    pub(super) lapsed: bool,
    /// Whether a quorum held at the last tick (silence counts only while one does).
    pub(super) had_quorum: bool,
    /// No tick yet: the first one sets `last_quorum` from the driver's record.
    pub(super) first_lease_tick: bool,
}

/// The rounds: whether this node is in step, its proposals' timing, peers out of step.
#[derive(Default)]
pub(super) struct RoundState {
    /// When this node proposed in the current round (for round latency).
    pub(super) proposed_at: Option<u64>,
    /// Back with a quorum after its lease lapsed: this node claims nothing (it passes) until a
    /// round is decided with every member's proposal in the same round. Until then its rounds
    /// and the other side's are out of step, and both may hold the same tasks as pending (its
    /// stopped copies, which the other side may have taken over).
    pub(super) settling: bool,
    /// The last round was decided with every member's proposal but over different member
    /// sets: until a round is complete, only owners start tasks, and this node claims only its
    /// own ([`super::NodeCore::start_rule`]).
    pub(super) sets_differ: bool,
    /// The latest proposal of each peer not (yet) in step with this node: refused then, and
    /// taken if the peer comes into step ([`super::NodeCore::sync_members`]). Its sender does not send
    /// it again once its own round is complete, so without this the round waited here for the
    /// next resend, or its deadline.
    pub(super) unheard: BTreeMap<NodeId, Message>,
    /// Round latencies (ms) not yet taken by the driver; the oldest go beyond [`super::MAX_LATENCIES`].
    pub(super) latencies: VecDeque<u64>,
}

/// Copies with a process here, and those stopped whose end is awaited.
#[derive(Default)]
pub(super) struct Copies {
    /// Copies stopped because the lease lapsed, handed back when the driver reports their end.
    handing_back: BTreeSet<TaskId>,
    /// Units of copies stopped here whose end the driver has not reported ([`super::draining`]).
    draining: BTreeMap<TaskId, Resources>,
    /// Tasks with a process here: started (or adopted) and whose end is not reported yet. Only
    /// the stop of one of these keeps units ([`super::draining`]); a stop of a copy already gone
    /// would keep them for good.
    live: BTreeSet<TaskId>,
    /// The latest outcomes of tasks run here, repeated in heartbeats.
    pub(super) recent: VecDeque<Outcome>,
}

impl Copies {
    /// A process of `task` runs here now (started, or adopted after a restart). A new run ends
    /// the wait for an earlier one stopped for a lapsed lease: that one's end, reported late,
    /// would pass for this run's.
    pub(super) fn started(&mut self, task: TaskId) {
        self.handing_back.remove(&task);
        self.live.insert(task);
    }

    /// Whether no process of any task runs here (as far as the driver has reported).
    pub(super) fn none_live(&self) -> bool {
        self.live.is_empty()
    }

    /// Tasks with a process here.
    pub(super) fn live(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.live.iter().copied()
    }

    /// `task`'s process here ended (or never started): whether its stopped units were kept,
    /// now free.
    pub(super) fn ended(&mut self, task: TaskId) -> bool {
        self.live.remove(&task);
        self.draining.remove(&task).is_some()
    }

    /// `task`'s copy here was stopped holding `units`: they stay kept until its end is reported,
    /// if a process of it still runs (a stop of a copy already gone would keep them for good).
    /// A second stop keeps the first count (one process). Whether units are kept.
    pub(super) fn stopped(&mut self, task: TaskId, units: Resources) -> bool {
        if !self.live.contains(&task) || units.0.iter().all(|x| *x == 0) {
            return false;
        }
        self.draining.entry(task).or_insert(units);
        true
    }

    /// Whether a stopped copy of `task` here has not ended yet.
    pub(super) fn dying(&self, task: TaskId) -> bool {
        self.draining.contains_key(&task)
    }

    /// Units of stopped copies whose end is not reported yet (by task).
    pub(super) fn draining(&self) -> &BTreeMap<TaskId, Resources> {
        &self.draining
    }

    /// `capacity` less what stopped copies still use.
    pub(super) fn usable(&self, capacity: &Resources) -> Resources {
        let mut cap = capacity.clone();
        for units in self.draining.values() {
            for (c, x) in cap.0.iter_mut().zip(&units.0) {
                *c = c.saturating_sub(*x);
            }
        }
        cap
    }

    /// `task`'s copy here was stopped because the lease lapsed: handed back when it ends.
    pub(super) fn hand_back(&mut self, task: TaskId) {
        self.handing_back.insert(task);
    }

    /// Whether `task`'s copy here awaits its end to be handed back.
    pub(super) fn handing_back(&self, task: TaskId) -> bool {
        self.handing_back.contains(&task)
    }

    /// `task`'s copy stopped for a lapsed lease ended: whether it was awaited so.
    pub(super) fn handed_back(&mut self, task: TaskId) -> bool {
        self.handing_back.remove(&task)
    }

    /// The outcome of a task run here, kept to be repeated in heartbeats: the latest
    /// [`crate::wire::MAX_RECENT`] only.
    pub(super) fn remember(&mut self, o: Outcome) {
        if self.recent.len() >= crate::wire::MAX_RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(o);
    }
}

impl Default for LeaseState {
    fn default() -> Self {
        Self {
            last_quorum: None,
            lease_lost: false,
            lapsed: false,
            had_quorum: false,
            first_lease_tick: true,
        }
    }
}
