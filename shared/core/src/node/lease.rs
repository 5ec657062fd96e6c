//! Leases, quorum and takeover: who may start a task while the cluster is split.
//!
//! A node holds its **lease** while a quorum of the known members (itself included) is **in
//! step** with it ([`NodeCore::peers_in_step`]): more than half of them sent, within
//! `peer_timeout_ms`, a heartbeat that echoes one this node sent at most `peer_timeout_ms +
//! heartbeat_ms` ago. The lease lasts `autonomy_ms` past the last moment a quorum held. While it
//! holds, the node keeps running its tasks and may start the pending tasks whose owner is in step
//! with it and holds its lease too (a round member, [`NodeCore::round_members`]); when it lapses, the node stops its copies itself, starts nothing until a quorum is
//! back (then it first listens for two heartbeat periods, so it learns what the other side did),
//! and hands its pending tasks to any quorum side (each stopped copy once the driver reports
//! that its process ended), so that a node still heard but out of step does not keep them.
//!
//! Rounds whose members all proposed but decided over different member sets (peers in step with
//! one member and not with another) start only tasks their winner owns, and then each member
//! claims only its own tasks (`NodeCore::owner_may_start` says why that is safe).
//!
//! A peer out of step, without its lease, or silent for `peer_timeout_ms`, leaves the
//! protocol's members at once
//! (its missing proposals stop holding rounds up, and its claims, made on old news, are not
//! weighed), but its tasks stay its own: only after
//! `peer_timeout_ms + autonomy_ms + grace` of silence, and only on a side that holds a quorum,
//! are they taken over (running copies re-queued, pending ones un-owned). Silence is silence to
//! the quorum, not to this node alone: it counts only while this node holds a quorum (from the
//! moment it regains one), and a node that a live peer says it hears is not silent (its silence
//! counts from that peer's heartbeat). The silent node has
//! stopped its copies by then, on its own clock, because its lease lapsed no later than
//! `peer_timeout_ms + autonomy_ms` after the peers last heard it; `grace` covers the heartbeat
//! period and the time to stop a process. So two copies never run at once: an epoch higher than
//! any before marks the new start, and a copy that meets a higher epoch stops.
//!
//! This module decides nothing else and does no I/O.

use super::state::LeaseState;
use super::{Action, NodeCore, TaskEntry, TaskState};
use crate::ledger::Requeue;
use crate::task::NodeId;

impl NodeCore {
    /// Extra wait before taking over a silent node's tasks, beyond `peer_timeout_ms +
    /// autonomy_ms`: two heartbeat periods (the node's last heartbeat may have left up to one
    /// period before the peers' last) and one second to stop its processes.
    pub fn takeover_grace_ms(&self) -> u64 {
        2 * self.cfg.heartbeat_ms + 1000
    }

    /// How long a silent node's tasks stay its own before a quorum side takes them over.
    pub fn takeover_ms(&self) -> u64 {
        self.cfg.peer_timeout_ms + self.cfg.autonomy_ms + self.takeover_grace_ms()
    }

    /// Members this node counts for its quorum: itself and every node heard from (from earlier
    /// runs too, as the driver persisted them), until silent for `forget_ms`.
    pub fn known(&self) -> &std::collections::BTreeSet<NodeId> {
        &self.members.known
    }

    /// True once since the known members changed (the driver persists them then).
    pub fn take_known_changed(&mut self) -> bool {
        std::mem::take(&mut self.members.known_changed)
    }

    /// Whether peer `p` is in step with this node at `now`: heard within the peer timeout, and
    /// its latest heartbeat echoes one this node sent (in this incarnation) at most
    /// `peer_timeout_ms + heartbeat_ms` ago on this node's clock. The round trip counts both ways,
    /// so a node that hears everything late is out of step with its peers and they with it,
    /// however regularly its heartbeats arrive: it would decide on old news (which tasks are
    /// free, which rounds are done). Only peers in step make a quorum, take part in this node's
    /// rounds and keep their tasks their own against it.
    ///
    /// Why the bound keeps the lease rule sound: a quorum at time t means a peer heard this
    /// node's heartbeat sent after `t - peer_timeout_ms - heartbeat_ms`, and any majority that
    /// might take this node's tasks over includes such a peer, whose silence count starts no
    /// earlier than that; the takeover grace (over one heartbeat period) covers the difference.
    pub(super) fn in_step(&self, p: &super::Peer, now: u64) -> bool {
        let me = self.cfg.me;
        now.saturating_sub(p.last_seen) <= self.cfg.peer_timeout_ms
            && p.state.hears.iter().any(|h| {
                h.node == me
                    && h.incarnation == self.cfg.incarnation
                    && h.echo <= now
                    && now - h.echo <= self.cfg.peer_timeout_ms + self.cfg.heartbeat_ms
            })
    }

    /// Peers in step with this node now: its rounds' members besides itself. A peer is in step
    /// while heard within the peer timeout and its latest heartbeat echoes one this node sent (in
    /// this incarnation) at most `peer_timeout_ms + heartbeat_ms` ago; see the module doc.
    pub fn peers_in_step(&self, now: u64) -> impl Iterator<Item = NodeId> + '_ {
        self.peers
            .iter()
            .filter(move |(_, p)| self.in_step(p, now))
            .map(|(id, _)| *id)
    }

    /// The peers that take part in this node's rounds: those in step with it whose latest
    /// heartbeat says they hold their lease. A peer without a lease only passes; counted as a
    /// member by the peers in step with it and not by the others, it made member sets differ.
    /// Only members' tasks may be started here (the start rule): a task's owner is a
    /// member of every round in which another node may win it.
    pub fn round_members(&self, now: u64) -> impl Iterator<Item = NodeId> + '_ {
        self.peers
            .iter()
            .filter(move |(_, p)| p.state.lease && self.in_step(p, now))
            .map(|(id, _)| *id)
    }

    /// Whether more than half of the known members (this node included) are in step with it now.
    /// A member that said it left on purpose ([`NodeCore::leave`]) is not counted while this node
    /// runs.
    pub fn has_quorum(&self, now: u64) -> bool {
        let mutual = 1 + self.peers_in_step(now).count();
        let members = self
            .members
            .known
            .iter()
            .filter(|m| !self.members.left.contains_key(m))
            .count();
        2 * mutual > members.max(1)
    }

    /// Whether this node holds its lease (a quorum within the last `autonomy_ms`).
    pub fn lease_held(&self, now: u64) -> bool {
        self.lease.held(now, self.cfg.autonomy_ms)
    }

    /// When a quorum last held (ms on the driver's clock; negative: before this run began).
    pub fn last_quorum(&self) -> Option<i128> {
        self.lease.last_quorum
    }

    /// A member to remember: a peer we hear, or the owner of a task we were told of. A node we
    /// never heard counts as silent from now on, so its tasks are taken over only after a full
    /// takeover period.
    pub(super) fn note_member(&mut self, id: NodeId, now: u64) {
        if id == self.cfg.me || self.peers.contains_key(&id) {
            return;
        }
        if self.members.known.insert(id) {
            self.members.known_changed = true;
        }
        self.members.silent.entry(id).or_insert(now);
    }

    /// A node this one does not hear but a peer in step does is not silent: its silence counts
    /// from that peer's last heartbeat (which said it heard the node). Without this, a node
    /// whose own links to X are cut would take over X's tasks while X keeps its quorum, and
    /// its copies, through the others.
    fn heard_through_peers(&mut self, now: u64) {
        // Nobody silent (the usual case): nothing to update, and no pass over every peer's
        // heartbeat at every tick.
        if self.members.silent.is_empty() {
            return;
        }
        let heard: Vec<(NodeId, u64)> = self
            .peers
            .values()
            .filter(|p| self.in_step(p, now))
            .flat_map(|p| p.state.hears.iter().map(|h| (h.node, p.last_seen)))
            .collect();
        for (x, at) in heard {
            if let Some(s) = self.members.silent.get_mut(&x) {
                *s = (*s).max(at);
            }
        }
    }

    /// Whether this node may start a task now (the rule of the module doc), as a test of the
    /// task's entry. The rule depends on the task's owner alone, so the owners it allows are
    /// worked out here once per view, not once per task (each a look-up of the owner and a scan
    /// of its heartbeat).
    pub(super) fn start_rule(&self, now: u64) -> impl Fn(&TaskEntry) -> bool + use<> {
        let lease = self.lease_held(now);
        let quorum = self.has_quorum(now);
        // An owner heard but out of step (or without its lease, as its heartbeat said) keeps
        // its tasks (it may still hold its lease through
        // others); they wait until it is in step again or silent long enough to be taken over.
        let mut allowed: std::collections::BTreeSet<NodeId> = self.round_members(now).collect();
        allowed.insert(self.cfg.me);
        if quorum {
            let takeover = self.takeover_ms();
            allowed.extend(
                self.members
                    .silent
                    .iter()
                    .filter(|(_, s)| now >= *s + takeover)
                    .map(|(o, _)| *o),
            );
        }
        // While the members decide rounds over different member sets, only an owner starts a
        // task (`owner_may_start`): this node claims its own tasks alone, or its claims would
        // win tasks it may not start and crowd out the owners' claims.
        let own_only = self.rounds.sets_differ.then_some(self.cfg.me);
        move |t: &TaskEntry| {
            lease
                && own_only.is_none_or(|me| t.meta.owner == Some(me))
                && match t.meta.owner {
                    Some(o) => allowed.contains(&o),
                    None => quorum,
                }
        }
    }

    /// Hand `ids` (pending, owned here) to any side that holds a quorum, and tell the peers.
    pub(super) fn hand_back(&mut self, ids: &[crate::task::TaskId]) -> Vec<Action> {
        let mut tell = Vec::new();
        for id in ids {
            if let Some(m) = self.tasks.meta_mut(*id) {
                m.owner = None;
            }
            if let Some(t) = self.tasks.get(*id) {
                tell.push(t.announcement(None));
            }
        }
        self.stats.handed_back += tell.len() as u64;
        self.tell(tell, Vec::new())
    }

    /// Whether this node is back from a lapsed lease and passes until its rounds are in step
    /// with the others' (a round decided with every member's proposal).
    pub fn settling(&self) -> bool {
        self.rounds.settling
    }

    /// Leases and takeovers, once per tick.
    pub(super) fn tick_leases(&mut self, now: u64) -> Vec<Action> {
        let me = self.cfg.me;
        let mut out = Vec::new();
        self.lease.start(now, self.cfg.lease_age_ms);
        let quorum = self.has_quorum(now);
        if quorum {
            if let Some(lapsed) = self.lease.regained(now) {
                // Back with a quorum after stopping everything: listen before deciding, and
                // claim nothing until the rounds are in step again (`settling`).
                // (A node that never held a quorum before, such as a fresh one, has nothing
                // another side could have taken over.)
                self.rounds.settling = lapsed;
                self.first_tick = None;
            }
            if !self.lease.had_quorum {
                // Silence measured while this node had no quorum proves nothing: the silent
                // node may have held a quorum on the other side all along. It counts from now.
                for s in self.members.silent.values_mut() {
                    *s = (*s).max(now);
                }
            }
        }
        self.lease.had_quorum = quorum;
        self.heard_through_peers(now);
        if !self.lease_held(now) && self.lease.lose() {
            self.first_tick = None;
            let mine: Vec<_> = self.tasks.running_on(me).collect();
            for id in mine {
                // The other side may start it once our lease is over: our copy must end now.
                // It stays ours until the driver reports the copy ended; then it is handed
                // back ([`NodeCore::on_exit`]).
                out.push(Action::Stop { task: id });
                self.stats.lease_stops += 1;
                self.tasks.requeue(id, Requeue::HandedBack);
                if let Some(m) = self.tasks.meta_mut(id) {
                    m.owner = Some(me);
                }
                self.protocol.release(id);
                self.copies.hand_back(id);
            }
            // The pending tasks this node owns, which nobody runs: handed to whichever side
            // holds a quorum. A node cut off says so in vain (the others take them over when its
            // silence has lasted), but one that is heard and out of step (it hears everything
            // late) would otherwise keep them waiting for as long as it stays slow.
            let owned: Vec<_> = self
                .tasks
                .iter()
                .filter(|(id, t)| {
                    t.state == TaskState::Pending
                        && t.meta.owner == Some(me)
                        && !self.copies.handing_back(*id)
                })
                .map(|(id, _)| id)
                .collect();
            out.extend(self.hand_back(&owned));
        }
        // Members we remember but do not hear count as silent from the first tick on.
        let unheard: Vec<NodeId> = self
            .members
            .known
            .iter()
            .filter(|id| **id != me && !self.peers.contains_key(id))
            .copied()
            .collect();
        for id in unheard {
            self.members.silent.entry(id).or_insert(now);
        }
        let forget: Vec<NodeId> = self
            .members
            .silent
            .iter()
            .filter(|(_, s)| now.saturating_sub(**s) > self.cfg.forget_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in forget {
            self.members.silent.remove(&id);
            self.members.taken_over.remove(&id);
            self.members.known.remove(&id);
            self.members.known_changed = true;
        }
        if quorum {
            let due: Vec<NodeId> = self
                .members
                .silent
                .iter()
                .filter(|(id, s)| {
                    now >= **s + self.takeover_ms() && !self.members.taken_over.contains(id)
                })
                .map(|(id, _)| *id)
                .collect();
            for id in due {
                self.members.taken_over.insert(id);
                let theirs: Vec<_> = self
                    .tasks
                    .iter()
                    .filter(|(_, t)| match &t.state {
                        TaskState::Running { node, .. } => *node == id,
                        // A gang with a member there is no longer whole: it goes back to pending.
                        TaskState::Gang { members, .. } => members.iter().any(|(n, _)| *n == id),
                        TaskState::Pending => t.meta.owner == Some(id),
                        TaskState::Done { .. } => false,
                    })
                    .map(|(tid, _)| tid)
                    .collect();
                for tid in theirs {
                    let held_there = self.tasks.get(tid).is_some_and(|t| match &t.state {
                        TaskState::Gang { .. } => true,
                        s => s.running_on() == Some(id),
                    });
                    if held_there {
                        self.tasks.requeue(tid, Requeue::NodeSilent);
                        self.protocol.release(tid);
                    }
                    if let Some(m) = self.tasks.meta_mut(tid) {
                        m.owner = None;
                    }
                }
            }
        }
        out
    }
}

impl LeaseState {
    /// Whether the lease is held at `now`: a quorum within the last `autonomy_ms`.
    pub(super) fn held(&self, now: u64, autonomy_ms: u64) -> bool {
        self.last_quorum
            .is_some_and(|t| i128::from(now) <= t + i128::from(autonomy_ms))
    }

    /// At the first tick only: the last quorum is the driver's record (`lease_age_ms` before
    /// `now`), if it has one.
    fn start(&mut self, now: u64, lease_age_ms: Option<u64>) {
        if self.first_lease_tick {
            self.first_lease_tick = false;
            self.last_quorum = lease_age_ms.map(|a| i128::from(now) - i128::from(a));
        }
    }

    /// A quorum holds at `now`. If that ends a lost lease, returns whether the lease had lapsed
    /// after a quorum had held (not a fresh node's first ticks).
    fn regained(&mut self, now: u64) -> Option<bool> {
        self.last_quorum = Some(i128::from(now));
        if !self.lease_lost {
            return None;
        }
        self.lease_lost = false;
        Some(self.lapsed)
    }

    /// The lease is not held: the first call of a loss marks it (and whether a quorum had held
    /// before) and returns true; later calls, until it is regained, return false.
    fn lose(&mut self) -> bool {
        if self.lease_lost {
            return false;
        }
        self.lease_lost = true;
        self.lapsed = self.last_quorum.is_some();
        true
    }
}
