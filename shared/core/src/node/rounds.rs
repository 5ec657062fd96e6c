//! Time and rounds: heartbeats, peer timeouts, leases, round deadlines, this node's proposal,
//! and what a decided round means here (starts with a new epoch). The protocol itself is
//! [`crate::protocol`]; this module only drives it.

use super::{Action, NodeCore, TaskState};
use crate::policy::to_proposal;
use crate::protocol::{Output, Protocol, ProtocolConfig, Round, RoundOutcome};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use crate::wire::Body;
use std::collections::BTreeMap;

/// How a node runs the protocol. A round decided without some member's proposal starts nothing
/// (see `apply`), so deciding early gains nothing: after `round_ms` a node sends its proposal
/// again (in case it was lost; then after 2, 4, ... times `round_ms`), and decides without a member only when that member has been
/// silent for the peer timeout (it leaves the members) or the peer timeout has passed since this
/// node proposed. Deciding at `round_ms`, as before, held back almost every round when 16 agents
/// shared 2 cores and proposals came late, and no task started.
pub(super) fn protocol_config(cfg: &super::NodeConfig) -> ProtocolConfig {
    ProtocolConfig {
        round_timeout: Some(cfg.round_ms.max(cfg.peer_timeout_ms)),
        resend_every: Some(cfg.round_ms),
        ..ProtocolConfig::default()
    }
}

impl NodeCore {
    pub(super) fn fresh_protocol(&self, round: Round) -> Protocol {
        let mut p = Protocol::new(
            self.cfg.me,
            self.round_members(self.now),
            round,
            protocol_config(&self.cfg),
        );
        for (id, t) in self.tasks.iter() {
            if t.state != TaskState::Pending {
                p.mark_committed(id);
            }
        }
        p
    }

    /// Advance time: heartbeats, peer timeouts, round deadlines, and this node's proposal when a
    /// round is due.
    pub fn tick(&mut self, now: u64) -> Vec<Action> {
        self.now = self.now.max(now);
        let mut out = Vec::new();
        if self
            .last_heartbeat
            .is_none_or(|t| now.saturating_sub(t) >= self.cfg.heartbeat_ms)
        {
            out.push(self.heartbeat(now));
        }
        if self.members.greet_due
            && self
                .members
                .last_greet
                .is_none_or(|t| now.saturating_sub(t) >= self.cfg.peer_timeout_ms)
        {
            self.members.greet_due = false;
            self.members.last_greet = Some(now);
            out.extend(self.greet());
        }
        let gone: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.last_seen) > self.cfg.peer_timeout_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            // Out of the rounds at once; its tasks stay its own until a takeover ([`lease`]).
            if let Some(p) = self.peers.remove(&id) {
                self.members.silent.insert(id, p.last_seen);
            }
            self.forget_entropy(id);
            self.tasks.set_live(id, false);
            out.extend(self.break_gangs(id));
        }
        out.extend(self.sync_members(now));
        out.extend(self.tick_leases(now));
        out.extend(self.unconfirmed_gangs(now));
        let outputs = self.protocol.tick(now);
        out.extend(self.handle(outputs, now));
        self.first_tick.get_or_insert(now);
        out.extend(self.propose_if_due(now));
        // A copy a round started while this node was leaving gets its stop too.
        out.extend(self.leave_more());
        out
    }

    /// This node's proposal, if one is due: after its first two heartbeat periods, once per
    /// round, when its slot timer fired or another member began the round. Called at every
    /// tick. (Proposing as soon as a round is decided, without waiting for the next tick, was
    /// tried: it gained nothing measurable and broke the lockstep parity with the simulator.)
    pub(super) fn propose_if_due(&mut self, now: u64) -> Vec<Action> {
        self.propose_when(now, false)
    }

    /// As [`NodeCore::propose_if_due`]; `behind` says a member still in an earlier round is
    /// waiting for this node, which then proposes without waiting for its slot timer.
    pub(super) fn propose_when(&mut self, now: u64, behind: bool) -> Vec<Action> {
        let warm = self
            .first_tick
            .is_some_and(|t| now >= t + 2 * self.cfg.heartbeat_ms);
        if warm
            && !self.protocol.has_proposed()
            && (behind || now >= self.slot_start || self.protocol.round_begun_elsewhere())
        {
            self.propose(now)
        } else {
            Vec::new()
        }
    }

    /// The rounds' members are this node and the peers in step with it ([`NodeCore::in_step`])
    /// that hold their lease ([`NodeCore::round_members`]): a peer that falls out of step, or
    /// loses its lease, leaves at once (its missing proposal stops holding rounds
    /// up, and its claims, made on old news, are not weighed), one back in step takes part from
    /// the current round on.
    fn sync_members(&mut self, now: u64) -> Vec<Action> {
        let me = self.cfg.me;
        let in_step: std::collections::BTreeSet<NodeId> = self.round_members(now).collect();
        let leaving: Vec<NodeId> = self
            .protocol
            .members()
            .iter()
            .filter(|m| **m != me && !in_step.contains(m))
            .copied()
            .collect();
        let mut out = Vec::new();
        for id in leaving {
            let outputs = self.protocol.remove_member(id);
            out.extend(self.handle(outputs, now));
        }
        let mut joined = Vec::new();
        for id in in_step {
            if !self.protocol.members().contains(&id) {
                self.protocol.add_member(id);
                joined.push(id);
            }
        }
        if !joined.is_empty() {
            // A peer that was not in step refused our proposal: it has it again at once.
            let outputs = self.protocol.resend(now);
            out.extend(self.handle(outputs, now));
        }
        for id in joined {
            // And we take the proposal we refused from it (its stated member set tells whether
            // it decides this round over the same members; if not, the round starts nothing).
            if let Some(m) = self.rounds.unheard.remove(&id) {
                match self.protocol.receive(m, now) {
                    Ok(outputs) => out.extend(self.handle(outputs, now)),
                    Err(e) => self.stats.refused(e.kind()),
                }
            }
        }
        out
    }

    fn propose(&mut self, now: u64) -> Vec<Action> {
        let view = self.view();
        let proposal = match view.for_agent(self.cfg.me) {
            // Without a lease this node starts nothing, but still passes so rounds go on; so
            // does a node back from a lapsed lease until its rounds are in step (`settling`).
            // A leaving node ([`super::leave`]) claims nothing either.
            Some(v) if self.lease_held(now) && !self.rounds.settling && self.leaving.is_none() => {
                let d = self.policy.decide(&v, &mut self.rng);
                let single = to_proposal(&d, &v).unwrap_or(crate::protocol::Proposal::Pass);
                let single = crate::slot::with_prior(single, self.cfg.me, &self.tasks);
                // In the slot step's order ([`crate::slot::propose`]): a room this node made by
                // preemption ([`super::preempt`]), a pending gang it proposes
                // ([`super::gangs`]), its policy's claim.
                let gang = self.gang_proposal();
                let room = self.room_proposal();
                let copies = &self.copies;
                crate::slot::propose(room, gang, single, |t| copies.dying(t))
            }
            _ => crate::protocol::Proposal::Pass,
        };
        let claim = !matches!(proposal, crate::protocol::Proposal::Pass);
        // The free units go with the proposal, so that gangs may place members here (none
        // from a leaving node).
        let free = self.offered_free();
        match self.protocol.propose_offering(proposal, free, now) {
            Ok(outputs) => {
                self.stats.claims += u64::from(claim);
                self.rounds.proposed_at = Some(now);
                self.handle(outputs, now)
            }
            Err(_) => Vec::new(),
        }
    }

    pub(super) fn handle(&mut self, outputs: Vec<Output>, now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for o in outputs {
            match o {
                Output::Send(m) => out.push(self.envelope(Body::Protocol(m))),
                Output::Decided(outcome) => out.extend(self.apply(outcome, now)),
            }
        }
        out
    }

    /// An elastic policy re-shares this node's running tasks (after the slot's rounds, as the
    /// simulator does before the slot runs, and after each start here): the tasks whose
    /// allocation changed are resized. Every re-share starts from the minimum demands, so the
    /// last one of a slot is the simulator's whatever came before it.
    ///
    /// Converging tasks shrink here as in the simulator: at a slot's end each may hold one CPU
    /// less, and after the re-share they are held at that ([`crate::ledger::Ledger::shrink_step`]).
    ///
    /// The view is as of `round`, the round just resolved: once a slot's last round is over the
    /// protocol is at the next slot, but this re-share is of the slot about to run (a task
    /// started in it has not run yet, so the share must not take it for settled).
    fn reshare(&mut self, slot_ended: bool, round: &crate::protocol::Round) -> Vec<Action> {
        let me = self.cfg.me;
        let nodes = [me];
        // At a slot's end, the slot step's sequence ([`crate::slot::end_of_slot`]).
        let end = slot_ended.then(|| crate::slot::end_of_slot(&mut self.tasks, &nodes));
        let mut resized: BTreeMap<TaskId, Resources> = BTreeMap::new();
        if self.policy.elastic()
            && self.tasks.running_on(me).next().is_some()
            && let Some(v) = self.view_at(round.slot, round.step).for_agent(me)
        {
            let changes = self.policy.rebalance(&v, &mut self.rng);
            match self.tasks.rebalance(me, &changes) {
                Ok(changed) => resized.extend(changed),
                // A policy's re-share that breaks the node's bounds is refused whole: the tasks
                // keep their shares (the simulator fails such an episode; see its tests).
                Err(_) => self.stats.reshares_refused += 1,
            }
        }
        match end {
            Some(end) => resized.extend(end.finish(&mut self.tasks).into_iter().flat_map(|c| c.1)),
            None => resized.extend(self.tasks.apply_ceilings(me)),
        }
        self.stats.resizes += resized.len() as u64;
        resized
            .into_iter()
            .map(|(task, alloc)| Action::Resize { task, alloc })
            .collect()
    }

    fn apply(&mut self, outcome: RoundOutcome, now: u64) -> Vec<Action> {
        self.count_round(&outcome, now);
        let (tentative, sets_differ) = self.round_mode(&outcome);
        let starts: Vec<bool> = outcome
            .commits
            .iter()
            .map(|c| !tentative || (sets_differ && self.owner_may_start(c)))
            .collect();
        if tentative {
            self.hold_back(&outcome, &starts);
        }
        let mut out = self.start_commits(&outcome, &starts);
        out.extend(self.start_gangs(&outcome.gangs, !tentative, outcome.round.slot, now));
        out.extend(self.after_round(&outcome, &starts, now));
        out
    }

    /// A round's statistics and this node's proposal-to-decision latency.
    fn count_round(&mut self, outcome: &RoundOutcome, now: u64) {
        self.stats.rounds += 1;
        self.stats.conflicts += u64::from(outcome.contested);
        self.stats.missing += outcome.missing.len() as u64;
        self.stats.claims_lost += outcome
            .lost
            .iter()
            .filter(|(a, _)| *a == self.cfg.me)
            .count() as u64;
        if let Some(t) = self.rounds.proposed_at.take() {
            if self.rounds.latencies.len() >= super::MAX_LATENCIES {
                self.rounds.latencies.pop_front();
            }
            self.rounds.latencies.push_back(now.saturating_sub(t));
        }
    }

    /// Whether the round is tentative (its starts held back) and whether only its member sets
    /// differ; whether this node is in step with the others afterwards (`settling`).
    fn round_mode(&mut self, outcome: &RoundOutcome) -> (bool, bool) {
        // A round decided at its deadline without some members' proposals may have been decided
        // otherwise by a member that missed ours (rounds out of step after a partition heals, or
        // a node that just joined): it starts nothing, so a task never starts twice at once. The
        // tasks are claimable again in the next round.
        // Likewise a round decided with members counted as passes because they had proposed in
        // a later round (`ahead`): they decided this round without seeing our proposal (or
        // skipped it), so their outcome may differ from ours. (A node that heard everything
        // 3 s late decided rounds the others had long left, alone, and started tasks the others
        // started too.) And a round in which some member decides over another member set
        // (`disagree`: peers in step with one node and not with another, as when 32 nodes hear
        // each other with delays around the peer timeout): two nodes that each left the other
        // out could both win one task. Any member in both sets tells each of them so.
        let tentative = !outcome.missing.is_empty()
            || !outcome.ahead.is_empty()
            || !outcome.disagree.is_empty();
        // Every member proposed in this round, only some decide it over other member sets
        // (peers in step with one member and not with another: a steady state when delays
        // straddle the peer timeout, in which no round was ever complete and nothing started).
        // The task's owner may still start it: see `owner_may_start`.
        let sets_differ = tentative && outcome.missing.is_empty() && outcome.ahead.is_empty();
        self.rounds.sets_differ = sets_differ;
        self.stats.rounds_sets_differ += u64::from(sets_differ);
        if !tentative || sets_differ {
            // Every member proposed in this round: the rounds are in step, and each member's
            // start messages, sent before its proposal, are in.
            self.rounds.settling = false;
        }
        let natural = if outcome.slot_ended {
            Round {
                slot: outcome.round.slot + 1,
                step: 0,
            }
        } else {
            Round {
                slot: outcome.round.slot,
                step: outcome.round.step + 1,
            }
        };
        if outcome.next != natural {
            // Skipped to the round the others are in: claim nothing until in step (as after a
            // jump in `on_message`).
            self.rounds.settling = true;
        }
        (tentative, sets_differ)
    }

    /// A tentative round's commits that do not start (`starts` false): their tasks are claimable
    /// again, or count as running where another member may have started them.
    fn hold_back(&mut self, outcome: &RoundOutcome, starts: &[bool]) {
        self.stats.rounds_held_back += u64::from(starts.iter().any(|s| !s));
        for c in outcome
            .commits
            .iter()
            .zip(starts)
            .filter(|(_, s)| !**s)
            .map(|(c, _)| c)
        {
            // Members that heard every proposal started it at `c.agent` with the next epoch:
            // record the same epoch, so that when they ask `c.agent` about the copy it does
            // not list, its answer (pending, this epoch) puts the task back to pending there
            // too; and `c.agent` answers for it (`won_in_vain`). Without this they kept
            // believing in a copy that never ran, asking about it at every heartbeat, and
            // never scheduled the task again. The owner does not change: a start that did not
            // happen gives nobody the task (it once did, and two nodes, each alone in its
            // rounds and each made owner by such a round, both started it).
            let pending = self
                .tasks
                .get(c.task)
                .is_some_and(|t| t.state == TaskState::Pending);
            if let Some(m) = self.tasks.meta_mut(c.task).filter(|_| pending) {
                m.epoch = crate::wire::next_epoch(m.epoch, c.agent);
            }
            if pending && c.agent != self.cfg.me {
                // `c.agent` may have decided this round with every proposal and started the
                // task. Until it says otherwise (asked, like any copy it does not list, after
                // a peer timeout) the task counts as running there and stays committed
                // here: released at once, this node could win it in a later round whose
                // other members still held it committed, and start a second copy (seen in
                // the 16-agent bench: a member refused as not yet in step made one node's
                // round tentative while the winner's was complete).
                self.tasks
                    .set_state(c.task, running_at(c, outcome.round.slot));
                continue;
            }
            self.protocol.release(c.task);
            if pending && c.agent == self.cfg.me {
                self.reconcile.won_in_vain(c.task);
            }
        }
    }

    /// The commits that start (`starts` true): a new epoch and owner for each, and for those
    /// won here, the start and its announcement.
    fn start_commits(&mut self, outcome: &RoundOutcome, starts: &[bool]) -> Vec<Action> {
        let mut out = Vec::new();
        for c in outcome
            .commits
            .iter()
            .zip(starts)
            .filter(|(_, s)| **s)
            .map(|(c, _)| c)
        {
            if self
                .tasks
                .get(c.task)
                .is_none_or(|t| matches!(t.state, TaskState::Done { .. }))
            {
                continue;
            }
            // A new start: an epoch above every one known for the task, and of the starting node's
            // own (a fencing token no other start of the task carries).
            self.tasks
                .set_state(c.task, running_at(c, outcome.round.slot));
            let Some(m) = self.tasks.meta_mut(c.task) else {
                continue;
            };
            m.epoch = crate::wire::next_epoch(m.epoch, c.agent);
            m.owner = Some(c.agent);
            if c.agent == self.cfg.me {
                // A new run here: the end of an earlier one stopped for a lapsed lease is
                // no longer awaited (its exit, reported late, would pass for this run's).
                let spec = m.spec.clone();
                let epoch = m.epoch;
                self.copies.started(c.task);
                out.push(Action::Start {
                    task: c.task,
                    spec,
                    alloc: c.alloc.clone(),
                    gang: None,
                });
                out.push(self.envelope(Body::Started {
                    task: c.task,
                    alloc: c.alloc.clone(),
                    epoch,
                }));
            }
        }
        out
    }

    /// What follows a round: preemption and re-sharing at a slot's end (and re-sharing after a
    /// start here), the slot's bookkeeping, and learning's records.
    fn after_round(&mut self, outcome: &RoundOutcome, starts: &[bool], now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        // An elastic node re-shares when the slot's rounds are over, and also as soon as it
        // starts a task: the new task starts at its minimum demand, and without a re-share the
        // shares in force (the running tasks' from the last slot) and it could add up to more
        // than the node has until the slot's last round.
        let started_here = outcome
            .commits
            .iter()
            .zip(starts)
            .any(|(c, s)| *s && c.agent == self.cfg.me);
        if outcome.slot_ended {
            // Lower classes here make room for a waiting task ([`super::preempt`]).
            out.extend(self.preempt(outcome.round.slot, now));
        }
        if outcome.slot_ended || started_here {
            out.extend(self.reshare(outcome.slot_ended, &outcome.round));
        }
        if outcome.slot_ended {
            self.slot_start = now + self.cfg.slot_ms;
            self.tasks.accrue_service();
        }
        if self.learning.is_some() {
            let me = self.cfg.me;
            let reward = outcome.slot_ended.then(|| self.reward());
            if let Some(exp) = self.learning.as_mut() {
                if outcome.lost.iter().any(|(a, _)| *a == me) {
                    exp.lost
                        .insert((outcome.round.slot, outcome.round.step, me));
                }
                if let Some(r) = reward {
                    exp.rewards.insert((outcome.round.slot, me), r);
                }
            }
        }
        out
    }
}

impl NodeCore {
    /// Whether this node may start the task of commit `c` from a round that every member
    /// proposed in but some decided over another member set. Only a task's owner may then, and
    /// only its own pending task (not one it stopped for a lapsed lease, which is being handed
    /// back):
    ///
    /// - Another node may start the task only while the owner is one of its round members (in
    ///   step with it and holding its lease: [`NodeCore::start_rule`]), so a rival starter had
    ///   the owner among its members when it claimed. Starting from a complete round means every member proposed stating the same
    ///   set, the owner included; the owner then holds the same proposals, and decides the task
    ///   the same way (a claim's outcome depends on the claims on that task alone).
    /// - A rival that starts from a round like this one is an owner too: the same node.
    /// - Members whose start messages the owner has not heard: none in its member set (each
    ///   sent its starts before its proposal, on the same ordered link).
    fn owner_may_start(&self, c: &crate::protocol::Commit) -> bool {
        c.agent == self.cfg.me
            && !self.copies.handing_back(c.task)
            && self
                .tasks
                .get(c.task)
                .is_some_and(|t| t.state == TaskState::Pending && t.meta.owner == Some(self.cfg.me))
    }
}

/// The task of commit `c` running at its winner, started in `slot`.
fn running_at(c: &crate::protocol::Commit, slot: u64) -> TaskState {
    TaskState::Running {
        node: c.agent,
        alloc: c.alloc.clone(),
        progress: 0.0,
        started: slot,
    }
}
