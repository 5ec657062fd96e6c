//! Copies this node has stopped whose processes have not ended yet.
//!
//! A stop is a request: the process (a supervisor killing a process group, a program shutting
//! down) ends some time later, and on a loaded box that can be hundreds of milliseconds. The
//! ledger moves the task on at once (finished elsewhere, cancelled, taken by a higher epoch, a
//! gang sent back to pending), which frees its units there; had nothing else kept them, the next
//! round could start another task on units the dying copy still used, and a box ran more copies
//! than it offers (the fault harness saw three copies alive at once on a 2-CPU box). So the
//! units of a stopped copy stay taken here, by lowering this node's capacity in its own ledger,
//! until the driver reports the copy's end ([`NodeCore::on_exit`]). Its heartbeats advertise that
//! capacity too, so that peers' views of this box (and the preemption plan every node computes
//! on its own ledger) hold the same units taken, as the simulator's one ledger does. While a
//! copy of a task is ending here this node does not claim that task ([`crate::slot::propose`]):
//! the executor knows one process per task, and the old one's end would pass for the new run's.
//!
//! A copy stopped because the lease lapsed is not counted here: it stays running in the ledger
//! (units taken) until its end is reported, and is handed back then ([`super::lease`]).

use super::{Action, NodeCore, TaskState};
use crate::resources::Resources;
use crate::task::TaskId;

impl NodeCore {
    /// Stop this node's copy of `task` (it runs here as a task or as gang members), keeping its
    /// units taken until its end is reported (if its process is still alive: a gang member may
    /// have ended before its gang did). Call before the task's state changes.
    pub(super) fn stop_copy(&mut self, task: TaskId) -> Action {
        self.hold_units(task);
        Action::Stop { task }
    }

    /// Preempt this node's copy of `task`: as [`NodeCore::stop_copy`], with the checkpoint
    /// signal and the task's grace first ([`Action::Preempt`]).
    pub(super) fn preempt_copy(&mut self, task: TaskId) -> Action {
        self.hold_units(task);
        Action::Preempt { task }
    }

    /// Keep the units of this node's copy of `task` taken until its end is reported.
    fn hold_units(&mut self, task: TaskId) {
        let me = self.cfg.me;
        let units = self.tasks.get(task).map(|t| match &t.state {
            TaskState::Running { node, alloc, .. } if *node == me => alloc.clone(),
            TaskState::Gang { members, .. } => {
                let mut sum = Resources(vec![0; self.cfg.capacity.len()]);
                for (_, a) in members.iter().filter(|(n, _)| *n == me) {
                    for (s, x) in sum.0.iter_mut().zip(&a.0) {
                        *s = s.saturating_add(*x);
                    }
                }
                sum
            }
            _ => Resources::default(),
        });
        if units.is_some_and(|u| self.copies.stopped(task, u)) {
            self.reserve_draining();
        }
    }

    /// The driver reports that a copy of `task` here ended: a stopped copy's units are free.
    pub(super) fn drained(&mut self, task: TaskId) {
        if self.copies.ended(task) {
            self.reserve_draining();
        }
    }

    /// Units of stopped copies whose end is not reported yet (by task).
    pub fn draining(&self) -> &std::collections::BTreeMap<TaskId, Resources> {
        self.copies.draining()
    }

    /// This node's capacity in its ledger: what it offers less what stopped copies still use.
    fn reserve_draining(&mut self) {
        let cap = self.copies.usable(&self.cfg.capacity);
        self.tasks.set_node(self.cfg.me, cap);
    }
}

#[cfg(test)]
mod tests {
    use super::super::NodeCore;
    use super::*;
    use crate::task::NodeId;
    use crate::wire::{Body, Outcome};

    fn node() -> NodeCore {
        super::super::test_core(0, Resources(vec![2, 0]))
    }

    fn running_here(n: &mut NodeCore, id: u64) {
        super::super::test_running_here(n, id, 1);
    }

    /// A copy here learns the task finished elsewhere: it is stopped, and its CPU stays taken
    /// until the driver reports the process ended (before, it was free at once, and a new
    /// start could join a copy still dying on the same units).
    #[test]
    fn a_stopped_copy_keeps_its_units_until_its_end_is_reported() {
        let mut n = node();
        running_here(&mut n, 7);
        running_here(&mut n, 8);
        assert_eq!(n.free(), Resources(vec![0, 0]));
        let elsewhere = Outcome {
            task: TaskId(7),
            node: NodeId(1),
            epoch: 2,
            exit_code: Some(0),
            work: None,
        };
        let out = n.apply_outcome(elsewhere);
        assert!(
            out.iter()
                .any(|a| matches!(a, Action::Stop { task } if *task == TaskId(7))),
            "{out:?}"
        );
        assert!(matches!(
            n.tasks().get(TaskId(7)).map(|t| &t.state),
            Some(TaskState::Done { .. })
        ));
        assert_eq!(
            n.free(),
            Resources(vec![0, 0]),
            "freed before the copy ended"
        );
        assert_eq!(n.draining().len(), 1);
        // Its end, reported as a stopped copy's: no outcome told, the CPU free again.
        let out = n.on_exit(TaskId(7), None, true);
        assert!(
            !out.iter()
                .any(|a| matches!(a, Action::Broadcast(e) if matches!(e.body, Body::Finished(_)))),
            "{out:?}"
        );
        assert_eq!(n.free(), Resources(vec![1, 0]));
        assert!(n.draining().is_empty());
    }

    /// The same for a user's cancellation of a copy running here.
    #[test]
    fn a_cancelled_copy_keeps_its_units_until_it_ends() {
        let mut n = node();
        running_here(&mut n, 9);
        let out = n.cancel(TaskId(9)).unwrap();
        assert!(out.iter().any(|a| matches!(a, Action::Stop { .. })));
        assert_eq!(n.free(), Resources(vec![1, 0]));
        n.on_exit(TaskId(9), None, true);
        assert_eq!(n.free(), Resources(vec![2, 0]));
    }
}
