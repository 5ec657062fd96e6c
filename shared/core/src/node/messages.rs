//! What a node does with each message from a peer: heartbeats (liveness, leases, the peer's
//! running copies), announcements, protocol messages, starts and outcomes.
//!
//! Reconciliation rules, the same on every node so that all agree without a coordinator:
//! a copy with a higher epoch beats one with a lower epoch (equal epochs: the lower node id wins),
//! and a finished task stays finished (an outcome beats every running copy; among outcomes the
//! higher epoch wins, a cancellation beats all). A node whose copy loses stops it at once.
//! Nothing here does I/O: the driver carries out the returned [`Action`]s.

use super::{Action, NodeCore, Peer, TaskMeta, TaskState};
use crate::ledger::Requeue;
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use crate::wire::{Body, CANCELLED, Envelope, MAX_WANT, NodeState, Outcome};

/// Whether copy `(epoch, node)` beats copy `(other_epoch, other_node)`.
pub(super) fn beats(epoch: u64, node: NodeId, other_epoch: u64, other_node: NodeId) -> bool {
    epoch > other_epoch || (epoch == other_epoch && node < other_node)
}

impl NodeCore {
    /// A message from a peer (already decoded and validated by the wire layer).
    pub fn on_message(&mut self, e: Envelope, now: u64) -> Vec<Action> {
        let from = e.from;
        if from == self.cfg.me {
            return Vec::new();
        }
        self.now = self.now.max(now);
        self.stats.received += 1;
        if let Body::Heartbeat(state) = &e.body
            && let Some(refused) = self.check_steps(from, &state.steps)
        {
            return refused;
        }
        if self.members.other_steps.contains(&from) {
            self.stats.refused("other-steps");
            return Vec::new();
        }
        match e.body {
            Body::Heartbeat(state) => self.on_heartbeat(from, state, now),
            Body::Leaving { incarnation } => self.on_leaving(from, incarnation),
            Body::Preempted {
                task,
                times,
                work_lost,
            } => self.on_preempted(from, task, times, work_lost),
            Body::Announce {
                task,
                spec,
                owner,
                epoch,
                runs,
            } => {
                let id = task.id;
                let mut out = self.on_announce(from, task, spec, owner, epoch, now);
                if let Some(alloc) = runs {
                    out.extend(self.on_copy(id, from, &alloc, epoch, None, None));
                }
                out
            }
            Body::Protocol(m) => {
                if !self.protocol.members().contains(&from) {
                    // Not in step with us (or not heard yet): it takes part once it is, with
                    // its latest proposal.
                    self.stats.refused("not-a-member");
                    if self
                        .rounds
                        .unheard
                        .get(&from)
                        .is_none_or(|u| u.round <= m.round)
                    {
                        self.rounds.unheard.insert(from, m);
                    }
                    return Vec::new();
                }
                if m.round.slot > self.protocol.round().slot + 1 {
                    // Far behind the cluster (we just started, or were cut off): join its current
                    // round instead of replaying slots nobody else runs. The rounds skipped may
                    // have started tasks this node has not heard of yet, so it claims nothing
                    // until a round is decided with every member's proposal (`settling`): by then
                    // each member's start messages, sent before its proposal, are in.
                    self.protocol = self.fresh_protocol(m.round);
                    self.rounds.proposed_at = None;
                    self.rounds.settling = true;
                }
                match self.protocol.receive(m, now) {
                    Ok(outputs) => self.handle(outputs, now),
                    Err(e) => {
                        self.stats.refused(e.kind());
                        // A member still in a round we have left decided it otherwise (its view
                        // of which tasks had started differed) or has not heard its last
                        // proposals: it waits for ours there. Our proposal in the current round
                        // counts there as a pass (`ahead`) and ends its wait; without it, a node
                        // waiting for its slot timer held the cluster up for a slot.
                        if matches!(e, crate::protocol::ProtocolError::Stale { .. }) {
                            self.propose_when(now, true)
                        } else {
                            Vec::new()
                        }
                    }
                }
            }
            Body::Started { task, alloc, epoch } => self.on_started(task, from, alloc, epoch),
            Body::Want(ids) => self.on_want(from, &ids, now),
            Body::Ranges(r) => self.on_ranges(&r, now),
            Body::Ids(i) => self.on_ids(&i, now),
            Body::Finished(o) => self.apply_outcome(o),
            Body::Outcomes(list) => {
                let mut out = Vec::new();
                for f in list {
                    // A task we never heard of (submitted across a partition): learn it first.
                    if !self.tasks.contains(f.task.id) {
                        self.learn_task(
                            f.task,
                            TaskState::Pending,
                            TaskMeta {
                                spec: f.spec,
                                owner: Some(f.outcome.node),
                                epoch: 0,
                            },
                        );
                    }
                    out.extend(self.apply_outcome(f.outcome));
                }
                out
            }
            Body::Failed {
                task,
                requeue,
                reason: _,
                attained,
            } => {
                let gang_member = self.tasks.get(task).is_some_and(|t| {
                    matches!(&t.state, TaskState::Gang { members, .. } if members.iter().any(|(n, _)| *n == from))
                });
                if requeue && gang_member {
                    // A member of a gang failed: every box stops its members, the gang waits
                    // to be placed again (its owner stays).
                    self.requeue_gang(task)
                } else if requeue {
                    // Handed back by a node that is leaving: anyone whose side holds a quorum
                    // may run it.
                    if self.tasks.get(task).and_then(|t| t.state.running_on()) == Some(from) {
                        // The runner's count: this node may have ended the slot, and counted
                        // it, before it heard of the stop.
                        if let Some(a) = attained.filter(|a| a.is_finite() && *a >= 0.0) {
                            self.tasks.set_attained(task, a);
                        }
                        self.tasks.requeue(task, Requeue::HandedBack);
                        if let Some(m) = self.tasks.meta_mut(task) {
                            m.owner = None;
                        }
                        self.protocol.release(task);
                    }
                    Vec::new()
                } else {
                    // Cancelled by a user at any agent.
                    self.apply_outcome(Outcome {
                        task,
                        node: from,
                        epoch: CANCELLED,
                        exit_code: None,
                        work: None,
                    })
                }
            }
        }
    }

    /// A heartbeat's resource steps against this node's: `Some` (the refusal, said once per
    /// peer, then nothing) when they differ, so that nothing the peer says is heard; a peer
    /// heard again once it says the same (restarted with the cluster's steps).
    fn check_steps(&mut self, from: NodeId, steps: &[f64]) -> Option<Vec<Action>> {
        if self.cfg.steps.is_empty() || steps.is_empty() || steps == self.cfg.steps.as_slice() {
            self.members.other_steps.remove(&from);
            return None;
        }
        self.stats.refused("other-steps");
        if !self.members.other_steps.insert(from) {
            return Some(Vec::new());
        }
        let show = |s: &[f64]| {
            self.cfg
                .kind_names
                .iter()
                .zip(s)
                .map(|(k, x)| format!("{k} {x}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Some(vec![Action::Refused {
            task: None,
            from,
            reason: format!(
                "its resource steps ({}) are not this box's ({}): one unit would mean two \
                 amounts, so it is not heard until it uses the cluster's (`gpu_step`)",
                show(steps),
                show(&self.cfg.steps)
            ),
        }])
    }

    fn on_heartbeat(&mut self, from: NodeId, state: NodeState, now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        if self.left_already(from, state.incarnation) {
            return out;
        }
        self.members.silent.remove(&from);
        self.members.taken_over.remove(&from);
        if self.members.known.insert(from) {
            self.members.known_changed = true;
        }
        let restarted = self
            .members
            .incarnations
            .insert(from, state.incarnation)
            .is_some_and(|i| i != state.incarnation);
        if restarted {
            // What it ran before its restart and does not list now died with it (it adopts what
            // still runs, and lists that).
            let listed: std::collections::BTreeSet<TaskId> =
                state.running.iter().map(|r| r.task).collect();
            let lost: Vec<TaskId> = self
                .tasks
                .running_on(from)
                .filter(|id| !listed.contains(id))
                .collect();
            for id in lost {
                self.tasks.requeue(id, Requeue::NodeRestarted);
                if let Some(m) = self.tasks.meta_mut(id) {
                    m.owner = Some(from);
                }
                self.protocol.release(id);
            }
        }
        if !self.peers.contains_key(&from) || restarted {
            // It takes part in the rounds once in step ([`NodeCore::tick`]). Greeted at the next tick ([`NodeCore::tick`]): one greet for every peer that
            // joins meanwhile.
            self.members.greet_due = true;
        }
        // Its running list is authoritative for its copies; fencing by epoch.
        let mut want = std::collections::BTreeSet::new();
        for r in &state.running {
            if !self.tasks.contains(r.task) {
                want.insert(r.task);
            }
            out.extend(self.on_copy(
                r.task,
                from,
                &r.alloc,
                r.epoch,
                Some(r.progress),
                Some(r.attained),
            ));
        }
        self.heard_reports(from, &state.running);
        for g in &state.gangs {
            self.gang_heard(g);
        }
        // Its latest outcomes make good a finish message that was lost.
        for o in &state.recent {
            if self.tasks.contains(o.task) {
                out.extend(self.apply_outcome(o.clone()));
            } else {
                want.insert(o.task);
            }
        }
        // A gang we believe has members on its box, which it no longer lists: broken.
        out.extend(self.gangs_unlisted(from, &state.gangs, now));
        // A copy we believe it runs, which it neither lists nor recently finished: ask.
        let listed: std::collections::BTreeSet<TaskId> = state
            .running
            .iter()
            .map(|r| r.task)
            .chain(state.recent.iter().map(|o| o.task))
            .collect();
        // Only once it has gone unlisted for a peer timeout: a copy this node saw start in a
        // round it decided is often not yet in the runner's heartbeat (sent before the runner
        // decided that round). Asking at once made every start draw a question from nearly
        // every other node (in the 16-agent bench, all of the `Want`s).
        let believed: Vec<TaskId> = self.tasks.running_on(from).collect();
        for id in believed {
            if listed.contains(&id) {
                self.reconcile.listed(id);
                continue;
            }
            if self.reconcile.unlisted_for(id, from, now) >= self.cfg.peer_timeout_ms {
                want.insert(id);
            }
        }
        let tasks = &self.tasks;
        self.reconcile.bound_unlisted(|id| {
            tasks
                .get(id)
                .is_some_and(|t| t.state.running_on().is_some())
        });
        // A task asked about within the peer timeout is not asked about again (4 heartbeats a
        // second from each peer would each ask).
        let ids = self
            .reconcile
            .ask_now(want, now, self.cfg.peer_timeout_ms, MAX_WANT);
        if !ids.is_empty() {
            out.push(self.envelope(Body::Want(ids)));
        }
        out.extend(self.compare_digest(from, state.digest, now));
        self.tasks.set_node(from, state.capacity.clone());
        // Its GPU model, as its labels name it: the estimator learns per model.
        self.tasks
            .set_gpu_model(from, crate::estimate::GpuModel::of_labels(&state.labels));
        self.peers.insert(
            from,
            Peer {
                state,
                last_seen: now,
            },
        );
        out
    }

    fn on_started(
        &mut self,
        task: TaskId,
        node: NodeId,
        alloc: Resources,
        epoch: u64,
    ) -> Vec<Action> {
        if self.tasks.get(task).is_some_and(|t| t.task.gang.is_some()) {
            // A gang's member box started its members: what a node holding the gang from an
            // incomplete round waits for ([`super::gangs`]). A gang is never a single copy.
            self.gang_started(task, epoch);
            return Vec::new();
        }
        self.on_copy(task, node, &alloc, epoch, None, None)
    }

    /// `node` runs a copy of `task` with `epoch` (from its start message or its heartbeat, which
    /// also tells its progress and attained service).
    fn on_copy(
        &mut self,
        task: TaskId,
        node: NodeId,
        alloc: &Resources,
        epoch: u64,
        progress: Option<f64>,
        attained: Option<f64>,
    ) -> Vec<Action> {
        let me = self.cfg.me;
        let slot = self.protocol.round().slot;
        let Some(t) = self.tasks.get(task) else {
            return Vec::new();
        };
        let known_epoch = t.meta.epoch;
        let mut out = Vec::new();
        let moved = TaskState::Running {
            node,
            alloc: alloc.clone(),
            progress: progress.unwrap_or(0.0),
            started: slot,
        };
        match t.state.clone() {
            TaskState::Done {
                node: ran,
                code,
                epoch: e,
            } => {
                // Finished already: tell the node running a late copy, so it stops it (the
                // runner tells, or one live node for it).
                if self.answers_for(Some(ran), Some(node)) {
                    out.push(self.envelope(Body::Finished(Outcome {
                        task,
                        node: ran,
                        epoch: e,
                        exit_code: code,
                        work: None,
                    })));
                }
                return out;
            }
            TaskState::Running {
                node: n, alloc: a, ..
            } if n == node && known_epoch == epoch => {
                // The copy we know: its shares (an elastic runner re-shares every slot) and its
                // progress change, in that order, as the simulator re-shares before a slot runs
                // (so the speed estimator counts the progress at the shares it ran with).
                if a != *alloc && node != me {
                    self.tasks.set_alloc(task, alloc.clone());
                }
                // The runner's count of attained service is the one kept with the shares it ran
                // with; this node's own count used the shares it knew of at each slot's end.
                if let Some(s) = attained.filter(|_| node != me) {
                    self.tasks.set_attained(task, s);
                }
                if let Some(np) = progress {
                    self.tasks.set_progress(task, np, slot as f64);
                }
            }
            TaskState::Running { node: n, .. } => {
                if beats(epoch, node, known_epoch, n) {
                    if n == me {
                        // Our copy lost (a higher epoch started elsewhere, or the same round was
                        // decided differently and the lower id keeps it): stop it.
                        out.push(self.stop_copy(task));
                        self.stats.copies_stopped += 1;
                    }
                    self.set_copy(task, moved, epoch);
                }
                // Otherwise the other copy loses: its node stops it when it hears of ours.
            }
            TaskState::Pending => {
                if epoch >= known_epoch {
                    self.set_copy(task, moved, epoch);
                }
            }
            // A single-process start of a task this node holds as a gang: a gang is started
            // whole by its round's outcome, never by one member's message.
            TaskState::Gang { .. } => {}
        }
        if self
            .tasks
            .get(task)
            .is_some_and(|t| t.state.running_on().is_some())
        {
            self.protocol.mark_committed(task);
        }
        out
    }

    fn set_copy(&mut self, task: TaskId, state: TaskState, epoch: u64) {
        self.tasks.set_state(task, state);
        if let Some(m) = self.tasks.meta_mut(task) {
            m.epoch = epoch;
        }
    }

    /// An outcome of `o.task` (a peer's finish, a cancellation, or a reconciliation entry).
    pub(super) fn apply_outcome(&mut self, o: Outcome) -> Vec<Action> {
        let me = self.cfg.me;
        let Some(t) = self.tasks.get(o.task) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        // The end of a run older than the task's latest start (handed back, then started again
        // elsewhere) does not override that start, unless it succeeded: done is done.
        if !matches!(t.state, TaskState::Done { .. })
            && o.epoch != CANCELLED
            && o.epoch < t.meta.epoch
            && o.exit_code != Some(0)
        {
            return out;
        }
        match &t.state {
            TaskState::Done { node, epoch, .. } if !beats(o.epoch, o.node, *epoch, *node) => {
                return out;
            }
            TaskState::Gang { .. } => return self.end_gang(&o),
            TaskState::Running { node, .. } if *node == me && o.node != me => {
                // Finished elsewhere (or cancelled): our copy is a duplicate; stop it.
                out.push(self.stop_copy(o.task));
                self.stats.copies_stopped += 1;
            }
            _ => {}
        }
        if let Some(m) = self.tasks.meta_mut(o.task) {
            m.epoch = m.epoch.max(if o.epoch == CANCELLED { 0 } else { o.epoch });
        }
        self.reconcile.forget_runs(o.task);
        if let Some(work) = o.work.filter(|w| w.is_finite() && *w >= 0.0) {
            // The runner's count: the size the book learns (`Outcome::work`).
            self.tasks.set_work(o.task, work);
        }
        self.tasks.set_state(
            o.task,
            TaskState::Done {
                node: o.node,
                code: o.exit_code,
                epoch: o.epoch,
            },
        );
        self.protocol.mark_committed(o.task);
        out
    }
}
