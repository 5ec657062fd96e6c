//! Leaving on purpose: a node whose driver stops it gracefully (an operator's stop, an upgrade)
//! and the peers that hear it go.
//!
//! A graceful stop is a preemption of everything here, then a hand-off. [`NodeCore::leave`]
//! gives every copy running here its checkpoint signal and grace ([`Action::Preempt`]; a copy
//! that reported completion, progress 1, is left to end by itself), hands the pending tasks this
//! node owns to the cluster, and from then on the node claims nothing, offers no room and says
//! in its heartbeats that it holds no lease (so that its peers' rounds do not wait for it). Each
//! copy is handed back when the driver reports its end ([`NodeCore::on_exit`]): a copy that
//! exits 0 within its grace has finished, and is reported as such. The task stays running here
//! until then, so no peer starts a second copy while the first one still saves its checkpoint.
//! Once nothing runs here the driver sends [`NodeCore::farewell`]: a [`Body::Leaving`] that
//! takes this node out of its peers' quorum count at once, so a cluster of two carries on with
//! one box (a box that vanishes still counts for the quorum until it is forgotten: only a box
//! that says it runs nothing may leave the count). It stays a known member, so a peer restarted
//! before it is back counts it again.
//!
//! Nothing here does I/O; the driver bounds the wait and escalates ([`NodeCore::leave_now`]).

use super::{Action, NodeCore, TaskState};
use crate::ledger::Requeue;
use crate::task::{NodeId, TaskId};
use crate::wire::Body;

impl NodeCore {
    /// This node stops on purpose (module doc): preempt every copy running here, hand back the
    /// pending tasks it owns and the gangs it takes part in. Called again (the driver does, at
    /// every step while it waits), it preempts a copy started since (a round decided before the
    /// stop).
    pub fn leave(&mut self) -> Vec<Action> {
        let me = self.cfg.me;
        let first = self.leaving.is_none();
        let mut out = Vec::new();
        if first {
            self.leaving = Some(Default::default());
            // Gangs with members here go back in the queue everywhere (their other members
            // stop): a gang cannot wait for one member's checkpoint.
            let gangs: Vec<TaskId> = self.tasks.gangs_on(me).collect();
            for task in gangs {
                out.extend(self.requeue_gang(task));
                out.push(self.envelope(Body::Failed {
                    task,
                    reason: "handed back: its box is stopping".into(),
                    requeue: true,
                    attained: self.tasks.get(task).map(|e| e.attained),
                }));
            }
            out.extend(self.hand_back_owned());
        }
        out.extend(self.leave_more());
        out
    }

    /// Whether this node is leaving ([`NodeCore::leave`] was called).
    pub fn is_leaving(&self) -> bool {
        self.leaving.is_some()
    }

    /// Copies running here that the stop has not reached yet: each gets its checkpoint signal
    /// (a copy that reported completion is left to end by itself).
    pub(super) fn leave_more(&mut self) -> Vec<Action> {
        let me = self.cfg.me;
        let Some(asked) = &self.leaving else {
            return Vec::new();
        };
        let new: Vec<(TaskId, f64)> = self
            .tasks
            .running_on(me)
            .filter(|t| !asked.contains(t))
            .filter_map(|t| match self.tasks.get(t).map(|e| &e.state) {
                Some(TaskState::Running { progress, .. }) => Some((t, *progress)),
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        for (task, progress) in new {
            if let Some(asked) = &mut self.leaving {
                asked.insert(task);
            }
            if progress >= 1.0 {
                continue;
            }
            // Counted as a preemption, with the work it loses since its last checkpoint.
            self.preemption.count(task, progress);
            out.push(Action::Preempt { task });
            out.extend(self.tell_preempted(task));
        }
        out
    }

    /// Whether every copy this node ran has ended (the driver reported each end): it may say
    /// farewell.
    pub fn nothing_runs_here(&self) -> bool {
        self.copies.none_live()
            && self.tasks.running_on(self.cfg.me).next().is_none()
            && self.tasks.gangs_on(self.cfg.me).next().is_none()
    }

    /// The driver's escalation (a second stop signal, or its bound on the wait passed): stop
    /// every copy still here at once.
    pub fn leave_now(&mut self) -> Vec<Action> {
        self.copies
            .live()
            .map(|task| Action::Stop { task })
            .collect()
    }

    /// The last word of a leaving node, once nothing runs here ([`NodeCore::nothing_runs_here`]):
    /// the pending tasks it owns go to the cluster, and its peers drop it from their members.
    /// With a copy still running here (its end never reported) it says nothing: its peers then
    /// treat it as a box that vanished, whose tasks are taken over only after its lease is
    /// surely over.
    pub fn farewell(&mut self) -> Vec<Action> {
        if !self.nothing_runs_here() {
            return Vec::new();
        }
        let mut out = self.hand_back_owned();
        out.push(self.envelope(Body::Leaving {
            incarnation: self.cfg.incarnation,
        }));
        out
    }

    /// A copy here ended while this node leaves: back to the queue everywhere, with the
    /// service it attained.
    pub(super) fn hand_back_copy(&mut self, task: TaskId) -> Vec<Action> {
        self.tasks.requeue(task, Requeue::HandedBack);
        if let Some(m) = self.tasks.meta_mut(task) {
            m.owner = None;
        }
        self.protocol.release(task);
        let attained = self.tasks.get(task).map(|e| e.attained);
        vec![self.envelope(Body::Failed {
            task,
            reason: "handed back: its box is stopping".into(),
            requeue: true,
            attained,
        })]
    }

    /// The pending tasks this node owns, to any node of the cluster.
    fn hand_back_owned(&mut self) -> Vec<Action> {
        let me = self.cfg.me;
        let owned: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.state == TaskState::Pending && t.meta.owner == Some(me))
            .map(|(id, _)| id)
            .collect();
        if owned.is_empty() {
            return Vec::new();
        }
        self.hand_back(&owned)
    }

    /// Peer `from` says it leaves on purpose and runs nothing ([`Body::Leaving`]): it is no
    /// longer a member (of the rounds, nor of the quorum), what it was believed to run goes
    /// back to the queue, and what it owned is anyone's. A message of an incarnation older than
    /// one heard since is late news, and ignored.
    pub(super) fn on_leaving(&mut self, from: NodeId, incarnation: u64) -> Vec<Action> {
        if self
            .members
            .incarnations
            .get(&from)
            .is_some_and(|i| *i > incarnation)
        {
            return Vec::new();
        }
        self.members.left.insert(from, incarnation);
        self.peers.remove(&from);
        self.forget_entropy(from);
        self.tasks.set_live(from, false);
        let out = self.break_gangs(from);
        // It stays a known member (and so in the members the driver persists): it leaves the
        // quorum's count only for as long as this node runs ([`NodeCore::has_quorum`]). A node
        // restarted before the one that left is back counts it again, so two boxes that both
        // left never each start again as a quorum of one.
        let theirs: Vec<(TaskId, bool)> = self
            .tasks
            .iter()
            .filter_map(|(id, t)| match &t.state {
                TaskState::Running { node, .. } if *node == from => Some((id, true)),
                TaskState::Pending if t.meta.owner == Some(from) => Some((id, false)),
                _ => None,
            })
            .collect();
        for (id, running) in theirs {
            if running {
                self.tasks.requeue(id, Requeue::HandedBack);
                self.protocol.release(id);
            }
            if let Some(m) = self.tasks.meta_mut(id) {
                m.owner = None;
            }
        }
        out
    }

    /// Whether a heartbeat of `from` in `incarnation` comes from an incarnation that left
    /// (late news): not heard. A later incarnation is a member again.
    pub(super) fn left_already(&mut self, from: NodeId, incarnation: u64) -> bool {
        match self.members.left.get(&from) {
            Some(i) if *i >= incarnation => true,
            Some(_) => {
                self.members.left.remove(&from);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NodeConfig, NodeCore};
    use super::*;
    use crate::resources::Resources;
    use crate::wire::Envelope;

    fn node(me: u32) -> NodeCore {
        super::super::test_core(me, Resources(vec![4, 0]))
    }

    fn envelope(a: Action) -> Envelope {
        match a {
            Action::Broadcast(e) => e,
            other => panic!("not a broadcast: {other:?}"),
        }
    }

    fn broadcasts(out: &[Action]) -> Vec<&Envelope> {
        out.iter()
            .filter_map(|a| match a {
                Action::Broadcast(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    /// A graceful stop preempts the copy here and keeps it running in the ledger until its end
    /// is reported; then it is handed back (one `Failed { requeue }`), and only then may the
    /// node say farewell.
    #[test]
    fn a_leaving_node_hands_a_copy_back_only_once_it_has_ended() {
        let mut n = node(0);
        super::super::test_running_here(&mut n, 7, 2);
        let out = n.leave();
        assert!(
            out.iter()
                .any(|a| matches!(a, Action::Preempt { task } if *task == TaskId(7))),
            "{out:?}"
        );
        assert!(
            !broadcasts(&out)
                .iter()
                .any(|e| matches!(e.body, Body::Failed { .. })),
            "handed back before its copy ended: {out:?}"
        );
        assert_eq!(
            n.tasks().get(TaskId(7)).and_then(|t| t.state.running_on()),
            Some(NodeId(0))
        );
        assert!(!n.nothing_runs_here());
        assert!(n.farewell().is_empty(), "farewell with a copy alive");
        // Called again, nothing new is preempted.
        assert!(n.leave().is_empty());
        // Its end as a preempted copy's: handed back.
        let out = n.on_exit(TaskId(7), None, true);
        assert!(
            broadcasts(&out).iter().any(
                |e| matches!(e.body, Body::Failed { requeue: true, task, .. } if task == TaskId(7))
            ),
            "{out:?}"
        );
        assert_eq!(
            n.tasks().get(TaskId(7)).map(|t| &t.state),
            Some(&TaskState::Pending)
        );
        assert_eq!(n.preempted()[&TaskId(7)].times, 1);
        assert!(n.nothing_runs_here());
        let bye = n.farewell();
        assert!(
            broadcasts(&bye)
                .iter()
                .any(|e| matches!(e.body, Body::Leaving { .. })),
            "{bye:?}"
        );
    }

    /// The preemption a stop makes is shown by every box that hears it, summed over boxes.
    #[test]
    fn every_peer_shows_what_a_preemption_cost() {
        let mut n = node(0);
        let mut peer = node(1);
        super::super::test_running_here(&mut n, 7, 2);
        super::super::test_running_on(&mut peer, 7, NodeId(0), 2);
        n.on_checkpoint(TaskId(7), 0.25);
        n.on_progress(TaskId(7), 0.5);
        for e in broadcasts(&n.leave()) {
            peer.on_message((*e).clone(), 0);
        }
        let seen = peer.preempted_everywhere();
        assert_eq!(seen[&TaskId(7)].times, 1, "{seen:?}");
        assert!((seen[&TaskId(7)].work_lost - 0.25).abs() < 1e-9, "{seen:?}");
        assert!(peer.preempted().is_empty(), "counted as the peer's own");
    }

    /// A copy that exits 0 within its grace has finished: an outcome, not a hand-back. A copy
    /// that reported completion gets no checkpoint signal at all.
    #[test]
    fn a_copy_that_finishes_in_its_grace_succeeded_and_a_done_one_is_not_signalled() {
        let mut n = node(0);
        super::super::test_running_here(&mut n, 7, 2);
        super::super::test_running_here(&mut n, 8, 2);
        n.on_progress(TaskId(8), 1.0);
        let out = n.leave();
        let preempted: Vec<TaskId> = out
            .iter()
            .filter_map(|a| match a {
                Action::Preempt { task } => Some(*task),
                _ => None,
            })
            .collect();
        assert_eq!(preempted, vec![TaskId(7)]);
        for id in [7, 8] {
            let out = n.on_exit(TaskId(id), Some(0), false);
            assert!(
                broadcasts(&out)
                    .iter()
                    .any(|e| matches!(&e.body, Body::Finished(o) if o.exit_code == Some(0))),
                "{out:?}"
            );
        }
        assert!(n.nothing_runs_here());
    }

    /// A peer of two hears the other leave: its quorum is itself alone, the copy the other ran
    /// and the task it owned are anyone's, and a late heartbeat of the incarnation that left is
    /// not heard; a new incarnation is a member again.
    #[test]
    fn a_peer_that_leaves_stops_counting_for_the_quorum() {
        let cfg = |me: u32| {
            let mut c = NodeConfig::short(NodeId(me), Resources(vec![4, 0]));
            c.known = [NodeId(0), NodeId(1)].into();
            c
        };
        let policy = || Box::new(crate::policy::MinPolicy);
        let mut a = NodeCore::new(cfg(0), policy(), 0);
        let mut b = NodeCore::new(cfg(1), policy(), 0);
        // They hear each other, and a has a task b runs.
        for now in (0..2000).step_by(100) {
            let from_a = a.tick(now);
            let from_b = b.tick(now);
            for e in broadcasts(&from_a) {
                b.on_message((*e).clone(), now);
            }
            for e in broadcasts(&from_b) {
                a.on_message((*e).clone(), now);
            }
        }
        assert!(a.has_quorum(2000));
        super::super::test_running_on(&mut a, 9, NodeId(1), 1);
        let hb = envelope(b.heartbeat(2000));
        let mut bye = b.leave();
        bye.extend(b.farewell());
        for e in broadcasts(&bye) {
            a.on_message((*e).clone(), 2000);
        }
        assert!(a.has_quorum(2000), "a alone is not a quorum after b left");
        // Still a member for the next run of a (persisted), just not counted now.
        assert!(a.known().contains(&NodeId(1)));
        let restarted = {
            let mut c = cfg(0);
            c.known = a.known().clone();
            NodeCore::new(c, policy(), 0)
        };
        assert!(
            !restarted.has_quorum(2000),
            "a restarted alone counts b again"
        );
        assert_eq!(
            a.tasks().get(TaskId(9)).map(|t| &t.state),
            Some(&TaskState::Pending)
        );
        assert_eq!(a.tasks().get(TaskId(9)).and_then(|t| t.meta.owner), None);
        // A late heartbeat of the incarnation that left: still gone.
        a.on_message(hb, 2050);
        assert!(a.has_quorum(2050));
        // b restarted (a new incarnation): counted again, and not in step yet.
        let mut c = cfg(1);
        c.incarnation += 1;
        let mut b2 = NodeCore::new(c, policy(), 0);
        let hb = envelope(b2.heartbeat(2100));
        a.on_message(hb, 2100);
        assert!(!a.has_quorum(2100), "b's new run does not count");
    }
}
