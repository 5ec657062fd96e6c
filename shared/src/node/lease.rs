//! Leases, quorum and takeover: who may start a task while the cluster is split.
//!
//! A node holds its **lease** while a quorum of the known members (itself included) hear each
//! other: more than half of them sent a heartbeat within `peer_timeout_ms` that says they hear
//! this node. The lease lasts `autonomy_ms` past the last moment a quorum held. While it holds,
//! the node keeps running its tasks and may start the pending tasks whose owner is on its side;
//! when it lapses, the node stops its copies itself and starts nothing until a quorum is back
//! (then it first listens for two heartbeat periods, so it learns what the other side did).
//!
//! A peer silent for `peer_timeout_ms` leaves the protocol's members at once (its missing
//! proposals stop holding rounds up), but its tasks stay its own: only after
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

use super::{Action, NodeCore, TaskEntry, TaskState};
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
        &self.known
    }

    /// True once since the known members changed (the driver persists them then).
    pub fn take_known_changed(&mut self) -> bool {
        std::mem::take(&mut self.known_changed)
    }

    /// Whether more than half of the known members (this node included) hear each other now.
    pub fn has_quorum(&self, now: u64) -> bool {
        let me = self.cfg.me;
        let mutual = 1 + self
            .peers
            .values()
            .filter(|p| {
                now.saturating_sub(p.last_seen) <= self.cfg.peer_timeout_ms
                    && p.state.hears.contains(&me)
            })
            .count();
        2 * mutual > self.known.len().max(1)
    }

    /// Whether this node holds its lease (a quorum within the last `autonomy_ms`).
    pub fn lease_held(&self, now: u64) -> bool {
        self.last_quorum
            .is_some_and(|t| i128::from(now) <= t + i128::from(self.cfg.autonomy_ms))
    }

    /// When a quorum last held (ms on the driver's clock; negative: before this run began).
    pub fn last_quorum(&self) -> Option<i128> {
        self.last_quorum
    }

    /// A member to remember: a peer we hear, or the owner of a task we were told of. A node we
    /// never heard counts as silent from now on, so its tasks are taken over only after a full
    /// takeover period.
    pub(super) fn note_member(&mut self, id: NodeId, now: u64) {
        if id == self.cfg.me || self.peers.contains_key(&id) {
            return;
        }
        if self.known.insert(id) {
            self.known_changed = true;
        }
        self.silent.entry(id).or_insert(now);
    }

    /// A node this one does not hear but a live peer does is not silent: its silence counts
    /// from that peer's last heartbeat (which said it heard the node). Without this, a node
    /// whose own links to X are cut would take over X's tasks while X keeps its quorum, and
    /// its copies, through the others.
    fn heard_through_peers(&mut self, now: u64) {
        for (x, s) in &mut self.silent {
            for p in self.peers.values() {
                if now.saturating_sub(p.last_seen) <= self.cfg.peer_timeout_ms
                    && p.state.hears.contains(x)
                {
                    *s = (*s).max(p.last_seen);
                }
            }
        }
    }

    /// Whether this node may start `t` now (the rule of the module doc).
    pub(super) fn may_start(&self, t: &TaskEntry, now: u64) -> bool {
        if !self.lease_held(now) {
            return false;
        }
        match t.meta.owner {
            Some(o) if o == self.cfg.me || self.peers.contains_key(&o) => true,
            Some(o) => {
                self.has_quorum(now)
                    && self
                        .silent
                        .get(&o)
                        .is_some_and(|s| now >= s + self.takeover_ms())
            }
            None => self.has_quorum(now),
        }
    }

    /// Whether this node is back from a lapsed lease and passes until its rounds are in step
    /// with the others' (a round decided with every member's proposal).
    pub fn settling(&self) -> bool {
        self.settling
    }

    /// Leases and takeovers, once per tick.
    pub(super) fn tick_leases(&mut self, now: u64) -> Vec<Action> {
        let me = self.cfg.me;
        let mut out = Vec::new();
        if self.first_lease_tick {
            self.first_lease_tick = false;
            self.last_quorum = self
                .cfg
                .lease_age_ms
                .map(|a| i128::from(now) - i128::from(a));
        }
        let quorum = self.has_quorum(now);
        if quorum {
            self.last_quorum = Some(i128::from(now));
            if self.lease_lost {
                // Back with a quorum after stopping everything: listen before deciding, and
                // claim nothing until the rounds are in step again (`settling`).
                // (A node that never held a quorum before, such as a fresh one, has nothing
                // another side could have taken over.)
                self.lease_lost = false;
                self.settling = self.lapsed;
                self.first_tick = None;
            }
            if !self.had_quorum {
                // Silence measured while this node had no quorum proves nothing: the silent
                // node may have held a quorum on the other side all along. It counts from now.
                for s in self.silent.values_mut() {
                    *s = (*s).max(now);
                }
            }
        }
        self.had_quorum = quorum;
        self.heard_through_peers(now);
        if !self.lease_held(now) && !self.lease_lost {
            self.lease_lost = true;
            self.lapsed = self.last_quorum.is_some();
            self.first_tick = None;
            let mine: Vec<_> = self.tasks.running_on(me).collect();
            for id in mine {
                // The other side may start it once our lease is over: our copy must end now.
                out.push(Action::Stop { task: id });
                self.stats.lease_stops += 1;
                self.tasks.set_state(id, TaskState::Pending);
                if let Some(m) = self.tasks.meta_mut(id) {
                    m.owner = Some(me);
                }
                self.protocol.release(id);
            }
        }
        // Members we remember but do not hear count as silent from the first tick on.
        let unheard: Vec<NodeId> = self
            .known
            .iter()
            .filter(|id| **id != me && !self.peers.contains_key(id))
            .copied()
            .collect();
        for id in unheard {
            self.silent.entry(id).or_insert(now);
        }
        let forget: Vec<NodeId> = self
            .silent
            .iter()
            .filter(|(_, s)| now.saturating_sub(**s) > self.cfg.forget_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in forget {
            self.silent.remove(&id);
            self.taken_over.remove(&id);
            self.known.remove(&id);
            self.known_changed = true;
        }
        if quorum {
            let due: Vec<NodeId> = self
                .silent
                .iter()
                .filter(|(id, s)| now >= **s + self.takeover_ms() && !self.taken_over.contains(id))
                .map(|(id, _)| *id)
                .collect();
            for id in due {
                self.taken_over.insert(id);
                let theirs: Vec<_> = self
                    .tasks
                    .iter()
                    .filter(|(_, t)| match &t.state {
                        TaskState::Running { node, .. } => *node == id,
                        TaskState::Pending => t.meta.owner == Some(id),
                        TaskState::Done { .. } => false,
                    })
                    .map(|(tid, _)| tid)
                    .collect();
                for tid in theirs {
                    if self.tasks.get(tid).and_then(|t| t.state.running_on()) == Some(id) {
                        self.tasks.set_state(tid, TaskState::Pending);
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
