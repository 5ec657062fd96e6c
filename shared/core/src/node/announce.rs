//! Telling peers about tasks and answering their questions: what a (re)joining peer must hear
//! ([`NodeCore::greet`]), which single node answers for a task ([`NodeCore::answers_for`]),
//! announcements of tasks ([`Body::Announce`]) and the questions of peers that lack some
//! ([`Body::Want`]). Each task is told by one node, not by every node that knows it.

use super::{Action, NodeCore, TaskEntry, TaskMeta, TaskState};
use crate::ledger::Requeue;
use crate::resources::Resources;
use crate::spec::TaskSpec;
use crate::task::{NodeId, Task, TaskId};
use crate::wire::{Body, FinishedTask, MAX_OUTCOMES, Outcome};

impl NodeCore {
    /// What a (re)joining peer must hear from us: the pending tasks we own (and, from one node,
    /// those nobody owns; announcing again is idempotent), the tasks we run and the outcomes of the tasks we ran, each with its
    /// task and spec, so both sides of a healed partition agree in one exchange. Each task is
    /// told by one node ([`NodeCore::answers_for`]), not by every node that knows it: with every
    /// node telling every pending task, a greet cost the cluster nodes × tasks messages.
    pub(super) fn greet(&mut self) -> Vec<Action> {
        let me = self.cfg.me;
        let mut out = Vec::new();
        let tell: Vec<Body> = self
            .tasks
            .values()
            .filter_map(|t| match &t.state {
                // Pending tasks of other owners are theirs to tell (a gone owner's are known to
                // the nodes that schedule them, and a node that lacks one asks when it is started):
                // telling them for a gone owner made a node that heard few peers, under load,
                // announce every task in the cluster at every greet.
                TaskState::Pending if t.meta.owner == Some(me) => Some(t.announcement(None)),
                TaskState::Pending if t.meta.owner.is_none() && self.answers_for(None, None) => {
                    Some(t.announcement(None))
                }
                TaskState::Running { node, alloc, .. } if *node == me => {
                    Some(t.announcement(Some(alloc.clone())))
                }
                _ => None,
            })
            .collect();
        let mine: Vec<FinishedTask> = self
            .tasks
            .values()
            .filter(|t| matches!(&t.state, TaskState::Done { node, .. } if *node == me))
            .filter_map(TaskEntry::finished_task)
            .collect();
        out.extend(self.tell(tell, mine));
        out
    }

    /// Whether this node answers for what `node` (a task's owner or runner) would say, to a
    /// question from `asker` (`None`: a broadcast to all): `node` itself while it is live and not
    /// the asker; otherwise the live node with the lowest id other than the asker. Answers are
    /// broadcasts, so one answer serves all; before, every node that knew a task answered, and
    /// under load those answers (thousands per joining peer) made more peers time out and join
    /// again.
    pub(super) fn answers_for(&self, node: Option<NodeId>, asker: Option<NodeId>) -> bool {
        let me = self.cfg.me;
        match node {
            Some(n) if Some(n) != asker && (n == me || self.peers.contains_key(&n)) => n == me,
            _ => self
                .peers
                .keys()
                .filter(|p| Some(**p) != asker)
                .all(|p| *p > me),
        }
    }

    /// Announcements, then outcomes in messages of at most [`MAX_OUTCOMES`].
    pub(super) fn tell(
        &mut self,
        announcements: Vec<Body>,
        finished: Vec<FinishedTask>,
    ) -> Vec<Action> {
        let mut out: Vec<Action> = announcements
            .into_iter()
            .map(|b| self.envelope(b))
            .collect();
        for chunk in finished.chunks(MAX_OUTCOMES) {
            out.push(self.envelope(Body::Outcomes(chunk.to_vec())));
        }
        out
    }

    pub(super) fn on_announce(
        &mut self,
        from: NodeId,
        task: Task,
        spec: TaskSpec,
        owner: Option<NodeId>,
        epoch: u64,
        now: u64,
    ) -> Vec<Action> {
        let id = task.id;
        if let Some(o) = owner {
            self.note_member(o, now);
        }
        let Some(t) = self.tasks.get(id) else {
            self.learn_task(task, TaskState::Pending, TaskMeta { spec, owner, epoch });
            return Vec::new();
        };
        if t.meta.spec != spec {
            // An id reused for another task (a node that lost its data and its identity's
            // counter): refuse it, loudly, rather than mistake one task for the other.
            self.stats.refused_announces += 1;
            return vec![Action::Refused {
                task: Some(id),
                from,
                reason: "announced with another spec than the task known under this id".into(),
            }];
        }
        let (state, known_epoch, known_owner) = (t.state.clone(), t.meta.epoch, t.meta.owner);
        if let Some(m) = self.tasks.meta_mut(id) {
            if epoch > known_epoch {
                m.epoch = epoch;
                m.owner = owner;
            } else if epoch == known_epoch
                && state == TaskState::Pending
                && known_owner == Some(from)
            {
                // The owner speaks for its ownership: one whose lease lapsed hands its pending
                // tasks back ([`NodeCore::hand_back`]).
                m.owner = owner;
            }
        }
        // The sender speaks for its own copies: if it says the task is pending, it does not run
        // it (it stopped it when its lease ran out, or lost it in a restart).
        if state.running_on() == Some(from) && epoch >= known_epoch {
            self.tasks.requeue(id, Requeue::NotRunning);
            if let Some(m) = self.tasks.meta_mut(id) {
                m.owner = owner;
            }
            self.protocol.release(id);
            return Vec::new();
        }
        match state {
            // A re-announcement (a restarted agent replaying its journal): the node that runs
            // the task answers, so the announcer does not start it again.
            TaskState::Running { node, alloc, .. } if node == self.cfg.me => {
                let epoch = known_epoch.max(epoch);
                vec![self.envelope(Body::Started {
                    task: id,
                    alloc,
                    epoch,
                })]
            }
            // It finished: the runner says so, or one live node for it if it is gone.
            TaskState::Done { node, code, epoch } if self.answers_for(Some(node), Some(from)) => {
                vec![self.envelope(Body::Finished(Outcome {
                    task: id,
                    node,
                    epoch,
                    exit_code: code,
                    work: None,
                }))]
            }
            _ => Vec::new(),
        }
    }

    /// A peer lacks these tasks: answer for those we speak for (outcomes of tasks we ran, copies
    /// we run, pending tasks we own; for an owner or runner that is gone, one live node). A
    /// finished task asked about again, a peer timeout or more after this node first heard it
    /// asked about, is answered by every node that knows its outcome: the node that should have
    /// answered may have forgotten it (a runner restarted without the tasks it ran for others).
    pub(super) fn on_want(&mut self, from: NodeId, ids: &[TaskId], now: u64) -> Vec<Action> {
        let me = self.cfg.me;
        let timeout = self.cfg.peer_timeout_ms;
        let mut done = Vec::new();
        let mut tell = Vec::new();
        for id in ids {
            let Some(t) = self.tasks.get(*id) else {
                continue;
            };
            let again = self.reconcile.heard_again(*id, now, timeout);
            match &t.state {
                TaskState::Done { node, .. }
                    if again || self.answers_for(Some(*node), Some(from)) =>
                {
                    done.extend(t.finished_task());
                }
                TaskState::Running { node, alloc, .. } if *node == me => {
                    tell.push(t.announcement(Some(alloc.clone())));
                }
                TaskState::Pending
                    if self.answers_for(t.meta.owner, Some(from))
                        || self.reconcile.answers_for_won(*id) =>
                {
                    tell.push(t.announcement(None));
                }
                _ => {}
            }
        }
        let tasks = &self.tasks;
        self.reconcile.bound_questions(now, timeout, |id| {
            tasks.get(id).is_some_and(|t| t.state == TaskState::Pending)
        });
        self.tell(tell, done)
    }
}

impl TaskEntry {
    /// This task as a finished one, with its outcome (None unless it is done).
    pub(super) fn finished_task(&self) -> Option<FinishedTask> {
        let TaskState::Done { node, code, epoch } = &self.state else {
            return None;
        };
        Some(FinishedTask {
            task: (*self.task).clone(),
            spec: self.meta.spec.clone(),
            outcome: Outcome {
                task: self.task.id,
                node: *node,
                epoch: *epoch,
                exit_code: *code,
                work: None,
            },
        })
    }

    /// Its announcement; `runs`: the sender runs it with this allocation.
    pub(super) fn announcement(&self, runs: Option<Resources>) -> Body {
        Body::Announce {
            task: (*self.task).clone(),
            spec: self.meta.spec.clone(),
            owner: self.meta.owner,
            epoch: self.meta.epoch,
            runs,
        }
    }
}
