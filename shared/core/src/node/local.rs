//! What this node's driver tells it: tasks accepted here or restored from its journal,
//! cancellations, progress and exits of its own processes (its graceful stop is
//! [`super::leave`]). Each returns the
//! actions (announcements, stops) that follow; nothing here does I/O.

use super::{Action, NodeCore, TaskMeta, TaskState};
use crate::ledger::Requeue;
use crate::spec::TaskSpec;
use crate::task::{NodeId, Task, TaskId};
use crate::wire::{Body, CANCELLED, Outcome};
use std::sync::Arc;

impl NodeCore {
    /// A task accepted here (already validated and persisted by the driver): announce it, with
    /// this node as its owner. An id already known is refused (the driver checks first).
    pub fn submit(&mut self, task: Task, spec: TaskSpec) -> Vec<Action> {
        let owner = Some(self.cfg.me);
        self.restore(task, spec, TaskState::Pending, owner, 0)
    }

    /// A task as the driver's journal recorded it before a restart: pending (announced again),
    /// running here (a copy the driver adopted: its heartbeat lists it; if it ended while the
    /// driver was away, the driver reports that with [`NodeCore::on_exit`] next), or finished
    /// (history: peers learn it when they greet this node). A task already known is left as it is.
    pub fn restore(
        &mut self,
        task: Task,
        spec: TaskSpec,
        state: TaskState,
        owner: Option<NodeId>,
        epoch: u64,
    ) -> Vec<Action> {
        let id = task.id;
        if self.tasks.contains(id) {
            return Vec::new();
        }
        let body = match &state {
            TaskState::Pending => Some(Body::Announce {
                task: task.clone(),
                spec: spec.clone(),
                owner,
                epoch,
                runs: None,
            }),
            TaskState::Running { .. } | TaskState::Gang { .. } | TaskState::Done { .. } => None,
        };
        if state != TaskState::Pending {
            self.protocol.mark_committed(id);
        }
        let here = match &state {
            TaskState::Running { node, .. } => *node == self.cfg.me,
            TaskState::Gang { members, .. } => members.iter().any(|(n, _)| *n == self.cfg.me),
            TaskState::Pending | TaskState::Done { .. } => false,
        };
        if here {
            // An adopted copy: its process lives on here.
            self.copies.started(id);
        }
        self.learn_task(task, state, TaskMeta { spec, owner, epoch });
        body.map(|b| vec![self.envelope(b)]).unwrap_or_default()
    }

    /// Put a task this node did not know into its ledger, and its spec's profile hints into
    /// the speed estimator: every agent that learns of a task hears its spec, by whichever path
    /// (a submission, an announcement, an outcome, its journal), so every estimator takes the
    /// same hints (a set: the order they are heard in does not matter).
    pub(super) fn learn_task(&mut self, task: Task, state: TaskState, meta: TaskMeta) {
        let hints = meta.spec.profile_hints(
            &self.cfg.kind_names,
            &self.cfg.steps,
            &task.min_demand,
            self.cfg.slot_ms,
        );
        // Work first: the hints are of this task, at its size.
        if let Some(w) = meta.spec.work {
            self.tasks.declare(&task, w);
        }
        self.tasks.hint(&task, &hints);
        let (id, identity) = (task.id, meta.spec.identity());
        self.tasks.insert(Arc::new(task), state, meta);
        self.tasks.set_identity(id, identity);
    }

    /// A user cancelled a task (at this agent): stop it if it runs here, and tell every peer (the
    /// node running it stops it; nobody claims it any more). Unknown or finished tasks: nothing.
    pub fn cancel(&mut self, task: TaskId) -> Option<Vec<Action>> {
        let t = self.tasks.get(task)?;
        if matches!(t.state, TaskState::Done { .. }) {
            return None;
        }
        let mut out = Vec::new();
        if t.state.running_on() == Some(self.cfg.me) {
            out.push(self.stop_copy(task));
        }
        self.tasks.set_state(
            task,
            TaskState::Done {
                node: self.cfg.me,
                code: None,
                epoch: CANCELLED,
            },
        );
        self.protocol.mark_committed(task);
        out.push(self.envelope(Body::Failed {
            task,
            reason: "cancelled".into(),
            requeue: false,
            attained: None,
        }));
        Some(out)
    }

    /// Progress of a task running here (from the executor).
    pub fn on_progress(&mut self, task: TaskId, p: f64) {
        if self.tasks.get(task).and_then(|t| t.state.running_on()) == Some(self.cfg.me) {
            let now = self.slot() as f64;
            self.tasks.set_progress(task, p, now);
        }
    }

    /// A task running here ended (or could not start). `stopped` = we stopped it (a
    /// duplicate): say nothing.
    pub fn on_exit(&mut self, task: TaskId, code: Option<i32>, stopped: bool) -> Vec<Action> {
        let out = self.exited(task, code, stopped);
        // Its process is gone, so its units are free, whether this node had stopped it before
        // or stops it while handling the end (a gang member that ended by itself sends its gang
        // back to the queue, which stops this box's members, this one among them: already
        // gone, its units were once kept for good and the gang never fitted again).
        self.drained(task);
        out
    }

    fn exited(&mut self, task: TaskId, code: Option<i32>, stopped: bool) -> Vec<Action> {
        let preempted_in = self.preempted_copy_ended(task);
        let Some(t) = self.tasks.get(task) else {
            return Vec::new();
        };
        if matches!(t.state, TaskState::Gang { .. }) {
            return self.gang_exit(task, code, stopped);
        }
        let here = t.state.running_on() == Some(self.cfg.me);
        if stopped && here && self.leaving.is_some() {
            // Preempted because this node is leaving: back to the queue, now that it has ended.
            return self.hand_back_copy(task);
        }
        if let Some(epoch) = preempted_in
            && !stopped
            && code == Some(0)
            && !here
            && !matches!(t.state, TaskState::Done { .. })
        {
            // A preempted copy that exited 0 within its grace has finished: done is done, even
            // if the task was started again elsewhere meanwhile (that copy is stopped by this
            // outcome, [`super::messages`]).
            return self.finished_here(task, code, epoch);
        }
        // (A copy started here again since is another run: its end is an ordinary one.)
        if self.copies.handed_back(task) && t.state.running_on() != Some(self.cfg.me) {
            // A copy stopped because the lease lapsed has ended: if the task is still ours and
            // the lease still gone, nothing runs it any more, and a quorum side may have it.
            let ours = t.state == TaskState::Pending && t.meta.owner == Some(self.cfg.me);
            if ours && !self.lease_held(self.now) {
                return self.hand_back(&[task]);
            }
            return Vec::new();
        }
        if stopped || t.state.running_on() != Some(self.cfg.me) {
            return Vec::new();
        }
        let epoch = t.meta.epoch;
        self.finished_here(task, code, epoch)
    }

    /// A copy here of `task`, in `epoch`, ended by itself with `code`: its outcome, told to the
    /// peers.
    fn finished_here(&mut self, task: TaskId, code: Option<i32>, epoch: u64) -> Vec<Action> {
        let work = self.tasks.get(task).map(|e| e.work);
        self.tasks.set_state(
            task,
            TaskState::Done {
                node: self.cfg.me,
                code,
                epoch,
            },
        );
        self.protocol.mark_committed(task);
        let o = Outcome {
            task,
            node: self.cfg.me,
            epoch,
            exit_code: code,
            work,
        };
        self.copies.remember(o.clone());
        vec![self.envelope(Body::Finished(o))]
    }

    /// A task this node won could not start for want of room its units do not show (a GPU
    /// share that fits the node's free units but no single device's): back to the queue
    /// everywhere, to be placed again, rather than failed.
    pub fn on_start_refused(&mut self, task: TaskId, reason: &str) -> Vec<Action> {
        self.drained(task);
        if self.tasks.get(task).and_then(|t| t.state.running_on()) != Some(self.cfg.me) {
            return Vec::new();
        }
        self.tasks.requeue(task, Requeue::StartRefused);
        if let Some(m) = self.tasks.meta_mut(task) {
            m.owner = None;
        }
        self.protocol.release(task);
        vec![self.envelope(Body::Failed {
            task,
            reason: reason.into(),
            requeue: true,
            attained: self.tasks.get(task).map(|e| e.attained),
        })]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;

    fn node() -> NodeCore {
        super::super::test_core(0, Resources(vec![4, 0]))
    }

    /// Hand every broadcast among `out` to `peer`.
    fn deliver(out: Vec<Action>, peer: &mut NodeCore) {
        for act in out {
            if let Action::Broadcast(e) = act {
                peer.on_message(e, 0);
            }
        }
    }

    /// A box's `gpu_model` label (NVML's device name on an agent) is its GPU model in its own
    /// ledger and, from its heartbeats, in its peers': the estimator learns per model there.
    #[test]
    fn a_box_s_gpu_model_label_reaches_its_peers_ledgers() {
        use crate::estimate::{GPU_MODEL_LABEL, GpuModel};
        let mut cfg = super::super::NodeConfig::short(NodeId(1), Resources(vec![4, 1]));
        cfg.labels
            .insert(GPU_MODEL_LABEL.to_string(), "Tesla K80".to_string());
        let mut b = NodeCore::new(cfg, Box::new(crate::policy::MinPolicy), 0);
        let k80 = GpuModel::of("tesla k80");
        assert_eq!(b.tasks().gpu_model(NodeId(1)), k80);
        let mut a = node();
        deliver(vec![b.heartbeat(0)], &mut a);
        assert_eq!(a.tasks().gpu_model(NodeId(1)), k80);
        assert_eq!(a.tasks().gpu_model(NodeId(0)), GpuModel::NONE);
    }

    /// A spec's profile hints reach the speed estimator of the node it was submitted at and of
    /// a peer that hears its announcement, alike, in slots of the node's slot length.
    #[test]
    fn profile_hints_reach_every_estimator_that_hears_the_task() {
        let spec = TaskSpec::from_toml(
            "command = [\"x\"]\nmin_demand = { cpu = 1 }\n\
             [[profile]]\nseconds = 2\n[[profile]]\nalloc = { cpu = 3 }\nseconds = 1\n",
        )
        .unwrap();
        let task = super::super::test_task(5);
        let mut a = node();
        let mut b = super::super::test_core(1, Resources(vec![4, 0]));
        deliver(a.submit(task.clone(), spec), &mut b);
        assert!(b.tasks().contains(TaskId(5)), "the peer never heard of it");
        // 200 ms slots: 2 s at the minimum is 10 slots, 1 s at 3 CPUs is 5.
        for n in [&a, &b] {
            let est = n.tasks().estimator();
            assert_eq!(est.samples(task.ty), 2);
            let at = |c: u32| est.slots(&task, &Resources(vec![c, 0]));
            assert!((at(1) - 10.0).abs() < 1e-6, "{}", at(1));
            assert!((at(3) - 5.0).abs() < 1e-6, "{}", at(3));
        }
    }

    /// A spec's declared work reaches every estimator that hears the task, and scales its
    /// estimate: two tasks of one class, 3 and 30 epochs, with a hint of the short one.
    #[test]
    fn declared_work_reaches_every_estimator_and_scales_the_estimate() {
        let spec = |work: u32, hint: bool| {
            let profile = if hint {
                "[[profile]]\nseconds = 2\n"
            } else {
                ""
            };
            TaskSpec::from_toml(&format!(
                "command = [\"x\"]\nmin_demand = {{ cpu = 1 }}\nwork = {work}\n{profile}"
            ))
            .unwrap()
        };
        let short = super::super::test_task(5);
        let mut long = super::super::test_task(6);
        long.ty = short.ty;
        let mut a = node();
        let mut b = super::super::test_core(1, Resources(vec![4, 0]));
        let mut out = a.submit(short.clone(), spec(3, true));
        out.extend(a.submit(long.clone(), spec(30, false)));
        deliver(out, &mut b);
        assert!(b.tasks().contains(TaskId(6)), "the peer never heard of it");
        // 200 ms slots: the 3-epoch task's hint is 10 slots, so the 30-epoch one's is 100.
        for n in [&a, &b] {
            let est = n.tasks().estimator();
            let at = |t: &Task| est.slots(t, &Resources(vec![1, 0]));
            assert!((at(&short) - 10.0).abs() < 1e-6, "{}", at(&short));
            assert!((at(&long) - 100.0).abs() < 1e-6, "{}", at(&long));
        }
    }

    /// A copy stopped when the lease lapsed is awaited for its hand-back; if the task has been
    /// started here again before that end is reported, the end of the new run is an ordinary
    /// finish (it was once taken for the old copy's, and the node believed the task still ran).
    #[test]
    fn the_end_of_a_later_run_is_not_taken_for_a_stopped_copy() {
        let mut n = node();
        super::super::test_running_here(&mut n, 7, 2);
        // Left over from an earlier run stopped for a lapsed lease, its end not yet reported.
        n.copies.hand_back(TaskId(7));
        let out = n.on_exit(TaskId(7), Some(0), false);
        assert!(
            out.iter()
                .any(|a| matches!(a, Action::Broadcast(e) if matches!(e.body, Body::Finished(_)))),
            "no finish told: {out:?}"
        );
        assert!(matches!(
            n.tasks().get(TaskId(7)).map(|t| &t.state),
            Some(TaskState::Done { .. })
        ));
    }
}
