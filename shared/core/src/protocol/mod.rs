//! The decision protocol as a sans-IO state machine.
//!
//! Every agent runs one [`Protocol`]. In each round (a decision *step* of a *slot*) every member
//! proposes exactly once — a [`Claim`] on one task or a pass — and broadcasts it. When a member has
//! every live member's proposal for the round (or its deadline has passed), it resolves the round
//! with [`resolve`]: claims on a task nobody else wants win outright; a contested task goes to the
//! argmax of the Bayes posterior `π_k(task)·P(k) / Σ_k' π_k'(task)·P(k')` with the prior
//! `P(k) = softmax(ρ)` over the claimants' headrooms; exact ties go to the lowest agent id. Winners
//! commit; losers may claim again in the next step. A round in which nothing commits ends the slot.
//!
//! The resolution is a pure function of the *set* of proposals, so every member that saw the same
//! proposals computes the same winners whatever order they arrived in. The machine never reads a
//! clock (the caller passes `now`, in any monotone unit) and never does I/O: it consumes messages
//! and returns [`Output`]s (messages to broadcast, decided rounds) for its driver to act on.
//! What it must not do: assume a global clock, shared memory, or reliable delivery beyond the
//! round deadline.

use crate::resources::Resources;
use crate::task::{NodeId, TaskId};

use std::collections::{BTreeMap, BTreeSet};

mod bayes;
pub mod gang;
mod resolve;
pub(crate) use bayes::check_bayes;
pub use bayes::posteriors;
pub use gang::{GangClaim, GangCommit};
use resolve::validate;
pub use resolve::{resolve, resolve_with_free};

mod message;
pub use message::*;

/// One agent's protocol state.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// This member.
    me: NodeId,
    /// The members whose proposals the current round waits for.
    members: BTreeSet<NodeId>,
    /// The current round.
    round: Round,
    /// The current round's proposals received, by member.
    proposals: BTreeMap<NodeId, Proposal>,
    /// The member sets stated with the current round's proposals, and with the buffered ones.
    stated: BTreeMap<NodeId, Stated>,
    /// Member sets stated with buffered proposals of later rounds.
    future_stated: BTreeMap<Round, BTreeMap<NodeId, Stated>>,
    /// Proposals of later rounds, kept until their round comes (bounded by `max_rounds_ahead`).
    future: BTreeMap<Round, BTreeMap<NodeId, Proposal>>,
    /// Tasks committed in some round: never claimed again.
    committed: BTreeSet<TaskId>,
    /// The same in commit order, to forget the oldest beyond `committed_memory`.
    committed_order: std::collections::VecDeque<TaskId>,
    /// When this member proposed in the current round (its deadline counts from there).
    proposed_at: Option<u64>,
    /// When this member last sent its proposal of the current round, and how often it has sent
    /// it again (for `resend_every`).
    sent_at: Option<u64>,
    /// Times the current round's proposal was sent again.
    resends: u32,
    /// Deadlines, resends and bounds.
    config: ProtocolConfig,
}

/// What a member stated with its proposal besides the proposal itself.
#[derive(Debug, Clone, Default, PartialEq)]
struct Stated {
    /// The members it decides the round with (empty: not stated).
    members: Vec<NodeId>,
    /// Its free units (empty: not stated).
    free: Resources,
}

impl Protocol {
    /// A machine for agent `me` among `members` (which is made to include `me`), starting at `start`.
    pub fn new(
        me: NodeId,
        members: impl IntoIterator<Item = NodeId>,
        start: Round,
        config: ProtocolConfig,
    ) -> Self {
        let mut members: BTreeSet<NodeId> = members.into_iter().collect();
        members.insert(me);
        Self {
            me,
            members,
            round: start,
            proposals: BTreeMap::new(),
            stated: BTreeMap::new(),
            future_stated: BTreeMap::new(),
            future: BTreeMap::new(),
            committed: BTreeSet::new(),
            committed_order: std::collections::VecDeque::new(),
            proposed_at: None,
            sent_at: None,
            resends: 0,
            config,
        }
    }

    /// The round being decided.
    pub fn round(&self) -> Round {
        self.round
    }

    /// This agent's id.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Current members.
    pub fn members(&self) -> &BTreeSet<NodeId> {
        &self.members
    }

    /// True if the local agent has proposed in the current round.
    pub fn has_proposed(&self) -> bool {
        self.proposals.contains_key(&self.me)
    }

    /// True if another member has already proposed in the current round: the round has begun
    /// somewhere, so a driver waiting for its own slot timer should join now (slot timers on
    /// different machines drift apart; the earliest one starts the slot for everyone).
    pub fn round_begun_elsewhere(&self) -> bool {
        self.proposals.keys().any(|k| *k != self.me)
    }

    /// True if `task` was committed in an earlier round (within the remembered window).
    pub fn is_committed(&self, task: TaskId) -> bool {
        self.committed.contains(&task)
    }

    /// Record a task as started through other means (e.g. recovered after a restart).
    pub fn mark_committed(&mut self, task: TaskId) {
        if self.committed.insert(task) {
            self.committed_order.push_back(task);
            while self.committed_order.len() > self.config.committed_memory {
                if let Some(old) = self.committed_order.pop_front() {
                    self.committed.remove(&old);
                }
            }
        }
    }

    /// Forget that `task` was committed, so it can be claimed again: the task was handed back
    /// (its run failed and it is re-queued, or its node died). Every member must release it in the
    /// same round for the members to keep agreeing.
    pub fn release(&mut self, task: TaskId) {
        if self.committed.remove(&task) {
            self.committed_order.retain(|t| *t != task);
        }
    }

    /// The local agent's proposal for the current round. Returns the message to broadcast and,
    /// if every member's proposal is now in, the decided round.
    pub fn propose(&mut self, proposal: Proposal, now: u64) -> Result<Vec<Output>, ProtocolError> {
        self.propose_offering(proposal, Resources::default(), now)
    }

    /// [`Protocol::propose`], stating this agent's free units: gangs may then place members on
    /// this box in the round ([`gang`]).
    pub fn propose_offering(
        &mut self,
        proposal: Proposal,
        free: Resources,
        now: u64,
    ) -> Result<Vec<Output>, ProtocolError> {
        if self.has_proposed() {
            return Err(ProtocolError::AlreadyProposed(self.round));
        }
        let mut msg = Message::new(self.round, self.me, proposal);
        msg.members = self.members.iter().copied().collect();
        msg.free = free;
        self.proposals.insert(self.me, msg.proposal.clone());
        self.stated.insert(
            self.me,
            Stated {
                members: msg.members.clone(),
                free: msg.free.clone(),
            },
        );
        self.proposed_at = Some(now);
        self.sent_at = Some(now);
        let mut out = vec![Output::Send(msg)];
        out.extend(self.try_decide(false));
        Ok(out)
    }

    /// A peer's message. Errors describe why it was refused (a stale message is harmless). A claim
    /// that fails validation is counted as a pass and reported as an error, so that the round can
    /// still complete on every member in the same way.
    pub fn receive(&mut self, msg: Message, _now: u64) -> Result<Vec<Output>, ProtocolError> {
        if msg.version != PROTOCOL_VERSION {
            return Err(ProtocolError::Version { got: msg.version });
        }
        if !self.members.contains(&msg.from) {
            return Err(ProtocolError::UnknownPeer(msg.from));
        }
        if msg.from == self.me {
            // Our own message echoed back (gossip); ignore.
            return Ok(Vec::new());
        }
        if msg.round < self.round {
            return Err(ProtocolError::Stale {
                got: msg.round,
                current: self.round,
            });
        }
        let (proposal, invalid) = match validate(&msg) {
            Ok(()) => (msg.proposal, None),
            Err(reason) => (
                Proposal::Pass,
                Some(ProtocolError::InvalidClaim {
                    from: msg.from,
                    reason,
                }),
            ),
        };
        let (slot, stated) = if msg.round == self.round {
            (&mut self.proposals, &mut self.stated)
        } else {
            if !self.within_buffer(msg.round) {
                return Err(ProtocolError::TooFarAhead {
                    got: msg.round,
                    current: self.round,
                });
            }
            (
                self.future.entry(msg.round).or_default(),
                self.future_stated.entry(msg.round).or_default(),
            )
        };
        match slot.get(&msg.from) {
            Some(existing) if *existing != proposal => {
                return Err(ProtocolError::Equivocation {
                    from: msg.from,
                    round: msg.round,
                });
            }
            Some(_) => return Ok(Vec::new()),
            None => {
                slot.insert(msg.from, proposal);
                stated.insert(
                    msg.from,
                    Stated {
                        members: msg.members,
                        free: msg.free,
                    },
                );
            }
        }
        if let Some(e) = invalid {
            // Still try to decide: the pass counts.
            let _ = self.try_decide(false);
            return Err(e);
        }
        Ok(self.try_decide(false))
    }

    /// Advance time: if the round deadline has passed, decide without the missing members;
    /// before that, send this member's proposal again every `resend_every` while some are missing.
    pub fn tick(&mut self, now: u64) -> Vec<Output> {
        let Some(at) = self.proposed_at else {
            return Vec::new();
        };
        if self
            .config
            .round_timeout
            .is_some_and(|timeout| now.saturating_sub(at) >= timeout)
        {
            return self.try_decide(true);
        }
        let due = match (self.config.resend_every, self.sent_at) {
            (Some(every), Some(sent)) => {
                now.saturating_sub(sent) >= every.saturating_mul(1 << self.resends.min(16))
            }
            _ => false,
        };
        if !due || self.proposals.len() >= self.members.len() {
            return Vec::new();
        }
        self.sent_at = Some(now);
        self.resends += 1;
        let mine = self.proposals.get(&self.me).cloned();
        let st = self.stated.get(&self.me).cloned().unwrap_or_default();
        mine.map(|p| {
            let mut m = Message::new(self.round, self.me, p);
            m.members = st.members;
            m.free = st.free;
            Output::Send(m)
        })
        .into_iter()
        .collect()
    }

    /// A member left (e.g. stopped heart-beating). May complete the current round.
    pub fn remove_member(&mut self, id: NodeId) -> Vec<Output> {
        if id == self.me {
            return Vec::new();
        }
        self.members.remove(&id);
        self.proposals.remove(&id);
        self.stated.remove(&id);
        for round in self.future.values_mut() {
            round.remove(&id);
        }
        for round in self.future_stated.values_mut() {
            round.remove(&id);
        }
        self.try_decide(false)
    }

    /// A member joined; it takes part from the current round on.
    pub fn add_member(&mut self, id: NodeId) {
        self.members.insert(id);
    }

    /// This member's proposal of the current round again, if it has proposed (with the member
    /// set it stated then). For a member that joined after the proposal went out: it refused
    /// the proposal of a node it did not count as a member yet, and the round would otherwise
    /// wait for the next resend (`resend_every`).
    pub fn resend(&mut self, now: u64) -> Vec<Output> {
        let Some(mine) = self.proposals.get(&self.me).cloned() else {
            return Vec::new();
        };
        self.sent_at = Some(now);
        let mut m = Message::new(self.round, self.me, mine);
        let st = self.stated.get(&self.me).cloned().unwrap_or_default();
        m.members = st.members;
        m.free = st.free;
        vec![Output::Send(m)]
    }

    fn within_buffer(&self, r: Round) -> bool {
        let ahead = if r.slot == self.round.slot {
            u64::from(r.step - self.round.step)
        } else {
            // Rounds of later slots: count slots plus the steps of the target slot.
            (r.slot - self.round.slot).saturating_add(u64::from(r.step))
        };
        ahead <= u64::from(self.config.max_rounds_ahead)
            && self.future.len() < self.config.max_rounds_ahead as usize
    }

    fn try_decide(&mut self, deadline_passed: bool) -> Vec<Output> {
        if !self.has_proposed() {
            return Vec::new();
        }
        // A member that has proposed in a later round has decided this one and moved on (rounds
        // only go forward), so it will never propose here: waiting for it until the deadline
        // would only make every later round wait too. It counts as a pass.
        // The common case, answered without a pass over the members (this runs once per message,
        // so a pass would make a round quadratic in the members): proposals come only from
        // members, so fewer proposals than members and nobody ahead means someone is missing.
        if !deadline_passed && self.future.is_empty() && self.proposals.len() < self.members.len() {
            return Vec::new();
        }
        let moved_on = |m: &NodeId| self.future.values().any(|ps| ps.contains_key(m));
        let missing: Vec<NodeId> = self
            .members
            .iter()
            .filter(|m| !self.proposals.contains_key(m) && !moved_on(m))
            .copied()
            .collect();
        if !missing.is_empty() && !deadline_passed {
            return Vec::new();
        }
        let ahead: Vec<NodeId> = if self.future.is_empty() {
            Vec::new()
        } else {
            self.members
                .iter()
                .filter(|m| !self.proposals.contains_key(m) && moved_on(m))
                .copied()
                .collect()
        };
        let proposals = std::mem::take(&mut self.proposals);
        let stated = std::mem::take(&mut self.stated);
        let disagree: Vec<NodeId> = stated
            .iter()
            .filter(|(_, s)| !s.members.is_empty() && !s.members.iter().eq(self.members.iter()))
            .map(|(id, _)| *id)
            .collect();
        let free: BTreeMap<NodeId, Resources> = stated
            .into_iter()
            .filter(|(_, s)| !s.free.is_empty())
            .map(|(id, s)| (id, s.free))
            .collect();
        let mut outcome = resolve_with_free(self.round, &proposals, &free, &self.committed);
        outcome.missing = missing;
        outcome.ahead = ahead;
        outcome.disagree = disagree;
        for c in &outcome.commits {
            self.mark_committed(c.task);
        }
        for g in &outcome.gangs {
            self.mark_committed(g.task);
        }
        // Members that moved on never propose in the rounds between: go straight to the earliest
        // round one of them proposed in. (Stepping through them one by one, a member that lagged
        // by a slot won its own claim in every step of the old slot, as the others counted as
        // passes, so that slot never ended and it never caught up.)
        if !outcome.ahead.is_empty()
            && let Some(r) = self.future.keys().find(|r| **r > outcome.next)
        {
            outcome.next = *r;
        }
        self.round = outcome.next;
        self.proposed_at = None;
        self.sent_at = None;
        self.resends = 0;
        // Proposals that arrived early for the new round become current; older buffered ones are
        // dropped (they belong to rounds this member will never run).
        let later = self.future.split_off(&self.round);
        if let Some((r, p)) = later.first_key_value()
            && *r == self.round
        {
            self.proposals = p.clone();
        }
        self.future = later;
        self.future.remove(&self.round);
        let mut later = self.future_stated.split_off(&self.round);
        if let Some(s) = later.remove(&self.round) {
            self.stated = s;
        }
        self.future_stated = later;
        vec![Output::Decided(outcome)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(task: u64, prob: f64, headroom: f64) -> Proposal {
        Proposal::Claim(Claim {
            task: TaskId(task),
            alloc: Resources(vec![2, 1]),
            prob,
            headroom,
        })
    }

    fn msg(from: u32, round: Round, proposal: Proposal) -> Message {
        Message {
            version: PROTOCOL_VERSION,
            round,
            from: NodeId(from),
            proposal,
            members: Vec::new(),
            free: Resources::default(),
        }
    }

    fn decided(out: &[Output]) -> Option<&RoundOutcome> {
        out.iter().find_map(|o| match o {
            Output::Decided(d) => Some(d),
            Output::Send(_) => None,
        })
    }

    #[test]
    fn a_member_that_joins_mid_round_gets_the_proposal_again_and_the_round_completes() {
        let r = Round::default();
        let cfg = ProtocolConfig::default();
        let mut one = Protocol::new(NodeId(1), [NodeId(2)], r, cfg.clone());
        // 2 does not count 1 yet (not in step): it refuses 1's proposal.
        let mut two = Protocol::new(NodeId(2), [], r, cfg.clone());
        let out = one.propose(claim(7, 0.5, 1.0), 0).unwrap();
        let [Output::Send(m)] = out.as_slice() else {
            panic!("expected one message, got {out:?}")
        };
        assert!(two.receive(m.clone(), 1).is_err());
        two.add_member(NodeId(1));
        let out = two.propose(Proposal::Pass, 2).unwrap();
        assert!(decided(&out).is_none(), "2 waits for 1's proposal");
        // Without the resend 2 would wait for `resend_every`; with it the round completes.
        let again = one.resend(3);
        let [Output::Send(m2)] = again.as_slice() else {
            panic!("expected one message, got {again:?}")
        };
        assert_eq!(m2, m, "the same proposal and stated members");
        let out = two.receive(m2.clone(), 3).unwrap();
        assert_eq!(decided(&out).map(|d| d.commits.len()), Some(1));
        // A member that has not proposed has nothing to send again.
        let mut three = Protocol::new(NodeId(3), [], r, cfg);
        assert!(three.resend(3).is_empty());
    }

    #[test]
    fn winner_is_posterior_argmax() {
        // Agent 1: prob 0.9, headroom 1; agent 2: prob 0.3, headroom 2.
        // posterior ∝ 0.9·e^1 = 2.45 vs 0.3·e^2 = 2.22 → agent 1.
        let mut p = BTreeMap::new();
        p.insert(NodeId(1), claim(7, 0.9, 1.0));
        p.insert(NodeId(2), claim(7, 0.3, 2.0));
        let o = resolve(Round::default(), &p, &BTreeSet::new());
        assert_eq!(o.commits.len(), 1);
        assert_eq!(o.commits[0].agent, NodeId(1));
        assert_eq!(o.lost, vec![(NodeId(2), TaskId(7))]);
        assert_eq!(o.contested, 1);
        // Make the headroom gap bigger: 0.3·e^3 = 6.0 > 2.45 → agent 2.
        p.insert(NodeId(2), claim(7, 0.3, 3.0));
        let o = resolve(Round::default(), &p, &BTreeSet::new());
        assert_eq!(o.commits[0].agent, NodeId(2));
    }

    #[test]
    fn posterior_matches_formula() {
        let a = Claim {
            task: TaskId(1),
            alloc: Resources(vec![1]),
            prob: 0.5,
            headroom: 0.0,
        };
        let b = Claim {
            task: TaskId(1),
            alloc: Resources(vec![1]),
            prob: 0.25,
            headroom: 1.0,
        };
        let post = posteriors(&[(NodeId(0), &a), (NodeId(1), &b)]);
        let pa = 0.5 * 1.0 / (1.0 + 1f64.exp());
        let pb = 0.25 * 1f64.exp() / (1.0 + 1f64.exp());
        assert!((post[0] - pa / (pa + pb)).abs() < 1e-12);
        assert!((post[1] - pb / (pa + pb)).abs() < 1e-12);
    }

    #[test]
    fn ties_go_to_lowest_agent_id() {
        let mut p = BTreeMap::new();
        p.insert(NodeId(5), claim(3, 0.5, 1.0));
        p.insert(NodeId(2), claim(3, 0.5, 1.0));
        p.insert(NodeId(9), claim(3, 0.5, 1.0));
        let o = resolve(Round::default(), &p, &BTreeSet::new());
        assert_eq!(o.commits[0].agent, NodeId(2));
        assert_eq!(o.lost, vec![(NodeId(5), TaskId(3)), (NodeId(9), TaskId(3))]);
    }

    #[test]
    fn zero_likelihoods_fall_back_to_prior() {
        let mut p = BTreeMap::new();
        p.insert(NodeId(1), claim(3, 0.0, 1.0));
        p.insert(NodeId(2), claim(3, 0.0, 2.0));
        let o = resolve(Round::default(), &p, &BTreeSet::new());
        assert_eq!(o.commits[0].agent, NodeId(2));
    }

    #[test]
    fn claims_on_committed_tasks_lose_and_passes_end_the_slot() {
        let mut p = BTreeMap::new();
        p.insert(NodeId(1), claim(3, 1.0, 1.0));
        p.insert(NodeId(2), Proposal::Pass);
        let committed: BTreeSet<TaskId> = [TaskId(3)].into();
        let o = resolve(Round { slot: 4, step: 2 }, &p, &committed);
        assert!(o.commits.is_empty());
        assert_eq!(o.lost, vec![(NodeId(1), TaskId(3))]);
        assert!(o.slot_ended);
        assert_eq!(o.next, Round { slot: 5, step: 0 });
    }

    #[test]
    fn machine_decides_when_all_members_proposed_and_advances() {
        let r0 = Round::default();
        let mut a = Protocol::new(NodeId(0), [NodeId(1)], r0, ProtocolConfig::default());
        let out = a.propose(claim(1, 1.0, 1.0), 0).unwrap();
        assert!(matches!(out[0], Output::Send(_)));
        assert!(decided(&out).is_none());
        let out = a.receive(msg(1, r0, claim(2, 1.0, 1.0)), 0).unwrap();
        let d = decided(&out).unwrap();
        assert_eq!(d.commits.len(), 2);
        assert!(!d.slot_ended);
        assert_eq!(a.round(), Round { slot: 0, step: 1 });
        // A later claim on task 1 loses even uncontested.
        a.propose(claim(1, 1.0, 1.0), 1).unwrap();
        let out = a.receive(msg(1, a.round(), Proposal::Pass), 1).unwrap();
        let d = decided(&out).unwrap();
        assert!(d.commits.is_empty() && d.slot_ended);
        assert_eq!(a.round(), Round { slot: 1, step: 0 });
    }

    #[test]
    fn early_messages_are_buffered_and_stale_ones_refused() {
        let r0 = Round::default();
        let r1 = Round { slot: 0, step: 1 };
        let mut a = Protocol::new(NodeId(0), [NodeId(1)], r0, ProtocolConfig::default());
        // Peer is one round ahead already.
        assert!(a.receive(msg(1, r1, Proposal::Pass), 0).unwrap().is_empty());
        a.receive(msg(1, r0, claim(9, 1.0, 1.0)), 0).unwrap();
        let out = a.propose(Proposal::Pass, 0).unwrap();
        assert!(decided(&out).is_some());
        assert_eq!(a.round(), r1);
        // The buffered proposal counts: our pass completes round r1 at once.
        let out = a.propose(Proposal::Pass, 0).unwrap();
        assert!(decided(&out).unwrap().slot_ended);
        assert!(matches!(
            a.receive(msg(1, r0, Proposal::Pass), 0),
            Err(ProtocolError::Stale { .. })
        ));
    }

    #[test]
    fn bad_messages_are_refused_without_harm() {
        let r0 = Round::default();
        let mut a = Protocol::new(NodeId(0), [NodeId(1)], r0, ProtocolConfig::default());
        let mut m = msg(1, r0, Proposal::Pass);
        m.version = 99;
        assert!(matches!(
            a.receive(m, 0),
            Err(ProtocolError::Version { got: 99 })
        ));
        assert!(matches!(
            a.receive(msg(7, r0, Proposal::Pass), 0),
            Err(ProtocolError::UnknownPeer(_))
        ));
        let far = Round {
            slot: 1000,
            step: 0,
        };
        assert!(matches!(
            a.receive(msg(1, far, Proposal::Pass), 0),
            Err(ProtocolError::TooFarAhead { .. })
        ));
        // NaN probability: counted as a pass, reported.
        let bad = claim(1, f64::NAN, 1.0);
        assert!(matches!(
            a.receive(msg(1, r0, bad), 0),
            Err(ProtocolError::InvalidClaim { .. })
        ));
        // Equivocation: the first (pass) stands.
        assert!(matches!(
            a.receive(msg(1, r0, claim(1, 1.0, 1.0)), 0),
            Err(ProtocolError::Equivocation { .. })
        ));
        let out = a.propose(claim(1, 0.5, 1.0), 0).unwrap();
        let d = decided(&out).unwrap();
        assert_eq!(d.commits.len(), 1);
        assert_eq!(d.commits[0].agent, NodeId(0));
        assert!(a.propose(Proposal::Pass, 0).is_ok());
        assert!(matches!(
            a.propose(Proposal::Pass, 0),
            Err(ProtocolError::AlreadyProposed(_))
        ));
    }

    #[test]
    fn deadline_decides_without_silent_members() {
        let cfg = ProtocolConfig {
            round_timeout: Some(100),
            ..ProtocolConfig::default()
        };
        let mut a = Protocol::new(NodeId(0), [NodeId(1), NodeId(2)], Round::default(), cfg);
        a.propose(claim(1, 1.0, 1.0), 10).unwrap();
        a.receive(msg(1, Round::default(), Proposal::Pass), 20)
            .unwrap();
        assert!(a.tick(50).is_empty());
        let out = a.tick(110);
        let d = decided(&out).unwrap();
        assert_eq!(d.missing, vec![NodeId(2)]);
        assert_eq!(d.commits.len(), 1);
    }

    #[test]
    fn a_missing_proposal_is_asked_for_by_sending_ours_again_until_the_deadline() {
        let cfg = ProtocolConfig {
            round_timeout: Some(1000),
            resend_every: Some(100),
            ..ProtocolConfig::default()
        };
        let mut a = Protocol::new(NodeId(0), [NodeId(1)], Round::default(), cfg);
        let first = a.propose(claim(1, 1.0, 1.0), 0).unwrap();
        let Output::Send(sent) = &first[0] else {
            panic!("proposing sends the proposal");
        };
        assert!(a.tick(50).is_empty(), "not yet due");
        let again = a.tick(100);
        assert!(
            matches!(&again[..], [Output::Send(m)] if m == sent),
            "the same message again"
        );
        assert!(a.tick(250).is_empty(), "then after twice the gap");
        assert_eq!(a.tick(300).len(), 1);
        assert!(a.tick(650).is_empty());
        assert_eq!(a.tick(700).len(), 1);
        // Member 1's proposal arrives late: decided with it, nothing missing.
        let out = a
            .receive(msg(1, Round::default(), Proposal::Pass), 800)
            .unwrap();
        assert!(decided(&out).unwrap().missing.is_empty());
        // A receiver that gets our proposal twice keeps the first.
        let mut b = Protocol::new(
            NodeId(1),
            [NodeId(0)],
            Round::default(),
            ProtocolConfig::default(),
        );
        b.receive(sent.clone(), 0).unwrap();
        assert!(b.receive(sent.clone(), 1).unwrap().is_empty());
    }

    #[test]
    fn a_member_already_in_a_later_round_counts_as_a_pass() {
        let mut a = Protocol::new(
            NodeId(0),
            [NodeId(1), NodeId(2)],
            Round::default(),
            ProtocolConfig {
                round_timeout: Some(100),
                ..ProtocolConfig::default()
            },
        );
        a.propose(claim(1, 1.0, 1.0), 0).unwrap();
        a.receive(msg(1, Round::default(), Proposal::Pass), 1)
            .unwrap();
        // Member 2 decided this round without us (a deadline) and is already in the next slot.
        let next = Round { slot: 1, step: 0 };
        let out = a.receive(msg(2, next, Proposal::Pass), 2).unwrap();
        let d = decided(&out).expect("no need to wait for the deadline");
        assert!(d.missing.is_empty());
        assert_eq!(d.ahead, vec![NodeId(2)]);
        assert_eq!(d.commits.len(), 1);
        // A commit would keep us in slot 0 (step 1), but member 2 will never propose there: we
        // go straight to its round, where its buffered proposal is current.
        assert_eq!(d.next, next);
        assert_eq!(a.round(), next);
        assert!(a.round_begun_elsewhere());
    }

    #[test]
    fn released_tasks_can_be_claimed_again() {
        let mut a = Protocol::new(NodeId(0), [], Round::default(), ProtocolConfig::default());
        let out = a.propose(claim(4, 1.0, 1.0), 0).unwrap();
        assert_eq!(decided(&out).unwrap().commits.len(), 1);
        assert!(a.is_committed(TaskId(4)));
        a.release(TaskId(4));
        assert!(!a.is_committed(TaskId(4)));
        let out = a.propose(claim(4, 1.0, 1.0), 1).unwrap();
        assert_eq!(decided(&out).unwrap().commits.len(), 1);
    }

    #[test]
    fn removing_a_member_completes_the_round() {
        let mut a = Protocol::new(
            NodeId(0),
            [NodeId(1)],
            Round::default(),
            ProtocolConfig::default(),
        );
        a.propose(Proposal::Pass, 0).unwrap();
        let out = a.remove_member(NodeId(1));
        assert!(decided(&out).unwrap().slot_ended);
    }
}
