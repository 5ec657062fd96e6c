//! The loop's execution side: events from the executor (progress, reports, ends) and the core's
//! actions carried out on it (starts, resizes, stops, preemptions, restarts for new devices).

use super::Daemon;
use crate::exec::ExecEvent;
use tapfinger::node::{Action, TaskState};
use tapfinger::spec::TaskSpec;
use tapfinger::{Resources, TaskId};

impl Daemon {
    pub(super) fn on_exec(&mut self, ev: ExecEvent) -> Vec<Action> {
        match ev {
            ExecEvent::Progress {
                task,
                progress,
                metrics,
            } => {
                self.p.core.on_progress(task, progress);
                // A checkpoint report bounds the work a preemption would lose.
                if let Some(c) = metrics.get("checkpoint") {
                    self.p.core.on_checkpoint(task, *c);
                }
                self.reports.record(task, metrics);
                if let Some(r) = self.reports.all().get(&task) {
                    self.p.core.on_report(task, &r.last, r.converging);
                }
                Vec::new()
            }
            ExecEvent::Exited {
                task,
                code,
                stopped: by_executor,
            } => {
                self.free_gpus(task);
                self.reports.forget(task);
                if self.ends.restarts(task)
                    && let Some(again) = self.restart(task)
                {
                    return vec![again];
                }
                let asked = self.ends.asked(task);
                // A copy handed back by a graceful stop keeps its run record: a restart reads
                // its exit record as a hand-back and restores the task with the epoch of that
                // run, so that its next start, wherever it is, fences above it even if every
                // box of the cluster was stopped.
                let handed_back =
                    self.p.core.is_leaving() && (by_executor || asked) && code != Some(0);
                if !handed_back
                    && let Some(store) = &mut self.p.store
                    && let Err(e) = store.ended(task)
                {
                    tracing::warn!(%task, error = %e, "cannot journal the end of a run");
                }
                let here = self
                    .p
                    .core
                    .tasks()
                    .get(task)
                    .and_then(|t| t.state.running_on())
                    == Some(self.me);
                if by_executor && !asked && here {
                    // Ended without an outcome that nobody here asked for (its supervisor had
                    // no room to record one, or its lease ran out first): no copy runs any
                    // more, so the task goes back to the queue instead of staying "running".
                    return self
                        .p
                        .core
                        .on_start_refused(task, "its copy here ended without an outcome");
                }
                // A copy asked to stop that exited 0 by itself all the same (within a
                // preemption's grace) has finished: done is done.
                let stopped = by_executor || (asked && code != Some(0));
                if !stopped {
                    self.ends.finished(task);
                }
                self.p.core.on_exit(task, code, stopped)
            }
        }
    }

    /// Carry out one action of the core.
    pub(super) async fn execute(&mut self, action: Action) {
        match action {
            Action::Broadcast(e) => {
                if let Err(err) = self.p.net.send(&e).await {
                    tracing::warn!(error = %err, "cannot broadcast");
                }
            }
            Action::Start {
                task,
                spec,
                alloc,
                gang,
            } => self.start(task, spec, alloc, gang).await,
            Action::Resize { task, alloc } => self.resize(task, &alloc),
            Action::Stop { task } => {
                self.ends.stopping(task);
                self.p.executor.stop(task);
            }
            Action::Preempt { task } => {
                if self.p.core.is_leaving() {
                    tracing::info!(%task, "checkpoint signal: this box is stopping");
                } else {
                    tracing::info!(%task, "preempted for a higher priority class");
                }
                self.ends.stopping(task);
                self.p.executor.preempt(task);
                // Its count and the work it lost survive a restart of this agent.
                if let (Some(store), Some(p)) =
                    (self.p.store.as_mut(), self.p.core.preempted().get(&task))
                    && let Err(e) = store.preempted(task, p.times, p.work_lost)
                {
                    tracing::warn!(%task, error = %e, "cannot journal a preemption");
                }
            }
            Action::Refused { task, from, reason } => {
                let task = task.map(|t| t.to_string()).unwrap_or_default();
                tracing::warn!(%task, peer = %from, %reason, "refused a peer's message");
            }
        }
    }

    /// The start of a task stopped for new GPU devices, if it still runs here (a stop or an
    /// outcome meanwhile ends it as any run ends): with its shares in force, told to resume.
    fn restart(&mut self, task: TaskId) -> Option<Action> {
        let me = self.p.core.id();
        let e = self.p.core.tasks().get(task)?;
        let TaskState::Running { node, alloc, .. } = &e.state else {
            return None;
        };
        if *node != me {
            return None;
        }
        if let Some(store) = &mut self.p.store
            && let Err(err) = store.ended(task)
        {
            tracing::warn!(%task, error = %err, "cannot journal the end of a run");
        }
        let mut spec = e.meta.spec.clone();
        spec.env.insert("TAPFINGER_RESUME".into(), "1".into());
        tracing::info!(%task, %alloc, "restarting with new GPU devices");
        Some(Action::Start {
            task,
            spec,
            alloc: alloc.clone(),
            gang: None,
        })
    }

    /// New shares for a task running here: CPU and memory change while it runs; a new GPU count
    /// means new devices, which a process cannot change, so it is stopped and started again
    /// (only resumable tasks are given GPUs beyond their minimum, see `TaskSpec::resumable`).
    fn resize(&mut self, task: TaskId, alloc: &Resources) {
        let mut allocation = (self.p.to_allocation)(alloc);
        // The agent's GPU kind is its second (`crate::config::space`). MPS fixes a client's
        // share when it starts, as a process's devices are fixed: a new share is a restart.
        if alloc.get(1) != self.gpus.units_of(task) {
            if self.ends.restart(task) {
                self.p.executor.stop(task);
            }
            return;
        }
        allocation.gpus = self.gpus.devices_of(task);
        match self.p.executor.resize(task, &allocation) {
            Ok(crate::exec::Enforcement::None(why)) => {
                tracing::warn!(%task, %alloc, %why, "re-shared, not enforced");
            }
            Ok(_) => tracing::debug!(%task, %alloc, "re-shared"),
            Err(e) => tracing::warn!(%task, %alloc, error = %e, "cannot re-share"),
        }
    }

    /// Start a task this node won: its GPU devices, the process, the journal's run record, and
    /// then the go-ahead for the task's program.
    async fn start(
        &mut self,
        task: TaskId,
        mut spec: TaskSpec,
        alloc: Resources,
        gang: Option<tapfinger::node::gangs::GangStart>,
    ) {
        let p = &mut self.p;
        // What a task may want to know of itself: its id, where it runs, and its epoch (a
        // fencing token it can hand to external storage).
        let epoch = p.core.tasks().get(task).map_or(0, |t| t.meta.epoch);
        // The journal keeps the spec as submitted: a restarted agent announces the copies it
        // adopts with it, and peers refuse a task known under its id with another spec (with
        // these variables added, they refused it, and the copy was never reconciled).
        let submitted = spec.clone();
        spec.env
            .insert("TAPFINGER_TASK_ID".into(), task.0.to_string());
        spec.env
            .insert("TAPFINGER_NODE".into(), p.core.config().name.clone());
        spec.env.insert("TAPFINGER_EPOCH".into(), epoch.to_string());
        // A resumable task that ran before (preempted, handed back, taken over from a silent
        // box) picks up from its last checkpoint, as after a restart for new devices. The
        // ledger counts runs it believed started, so a start a peer was believed to make and
        // did not counts too: a task resumes only from a checkpoint it finds.
        let runs = p.core.tasks().get(task).map_or(0, |t| t.runs);
        if submitted.resumable && runs > 1 {
            spec.env.insert("TAPFINGER_RESUME".into(), "1".into());
        }
        if let Some(g) = &gang {
            super::super::gang_start::wrap(task, &mut spec, g);
        }
        // A stop asked for an earlier run of this task here is not about this one.
        self.ends.starting(task);
        let mut allocation = (p.to_allocation)(&alloc);
        let failing = p_store_failing(&self.p.store);
        let started = if self.gpus.holds(task) {
            Err(crate::exec::ExecError::AlreadyRunning(task))
        } else if let Some(why) = &failing {
            // Its start could not be journaled (and so not adopted after a restart): the task
            // waits in the queue until the disk takes writes again.
            Err(crate::exec::ExecError::NoRoom {
                task,
                reason: format!("the journal cannot be written: {why}"),
            })
        } else {
            let placed = self.place_gpus(task, &mut allocation);
            self.state_devices();
            placed.and_then(|()| self.p.executor.start(task, &spec, &allocation))
        };
        let p = &mut self.p;
        let mut started = started;
        if started.is_ok()
            && let Some(store) = &mut p.store
        {
            // Durable before anyone hears of the start, so a restart adopts it.
            let entry = &p.core.tasks()[&task];
            let run = crate::store::Run {
                task: (*entry.task).clone(),
                spec: submitted,
                epoch: entry.meta.epoch,
                alloc: alloc.clone(),
                gpus: self.gpus.devices_of(task),
                handle: p.executor.handle(task),
            };
            if let Err(e) = store.run(&run) {
                // A start the journal does not know would not be adopted after a restart (and
                // run again beside its copy): undo it, and the task waits for the disk.
                tracing::warn!(%task, error = %e, "cannot journal a start: stopping it again");
                p.executor.stop(task);
                self.ends.stopping(task);
                started = Err(crate::exec::ExecError::NoRoom {
                    task,
                    reason: format!("the journal cannot record the start: {e}"),
                });
            }
        }
        if started.is_ok() {
            // Only now may the task's program begin: had this agent died before the journal
            // held the start, its supervisor would have ended without starting it.
            p.executor.confirm(task);
        }
        match started {
            Ok(enforcement) => {
                // How long it waited, in whole slots since it was submitted.
                let arrival = p.core.tasks().get(task).map_or(0, |e| e.task.arrival);
                let waited = p.core.slot().saturating_sub(arrival) * p.core.config().slot_ms;
                self.outlets.metrics.queue_wait(waited);
                tracing::info!(%task, %alloc, ?enforcement, "started");
            }
            Err(e) => {
                if !matches!(e, crate::exec::ExecError::AlreadyRunning(_)) {
                    self.free_gpus(task);
                }
                if failing.is_some() {
                    // Said once when the store began failing; every round would repeat it.
                    tracing::debug!(%task, error = %e, "cannot start");
                } else {
                    tracing::warn!(%task, error = %e, "cannot start");
                }
                let back = match &e {
                    crate::exec::ExecError::NoRoom { reason, .. } => {
                        self.p.core.on_start_refused(task, reason)
                    }
                    crate::exec::ExecError::NoStorage { error, .. } => {
                        // The disk is full: no start here until it has room again (the store
                        // says when), and submissions are refused meanwhile.
                        if let Some(store) = &mut self.p.store {
                            store.note_failure(error);
                        }
                        self.p.core.on_start_refused(task, &e.to_string())
                    }
                    _ => self.p.core.on_exit(task, None, false),
                };
                for m in back {
                    if let Action::Broadcast(e) = m {
                        let _ = self.p.net.send(&e).await;
                    }
                }
            }
        }
    }

    /// The devices of a task about to start, in `allocation`: whole devices from the pool, or
    /// a share of one device with its MPS daemon running and the client environment set.
    fn place_gpus(
        &mut self,
        task: TaskId,
        allocation: &mut crate::exec::Allocation,
    ) -> Result<(), crate::exec::ExecError> {
        let spawn = |reason: String| crate::exec::ExecError::Spawn { task, reason };
        let Some(share) = allocation.gpu_share else {
            let n = allocation.gpus.len();
            allocation.gpus = self.gpus.take(task, n).ok_or_else(|| {
                spawn(format!(
                    "{n} GPU(s) needed, {} free",
                    self.gpus.free_devices()
                ))
            })?;
            return Ok(());
        };
        let shares = &mut self.p.gpus.shares;
        let Some(mps) = shares.mps.as_mut() else {
            return Err(spawn(format!(
                "{share} of a GPU asked, and this box gives {}",
                shares.note
            )));
        };
        let units = (share * f64::from(shares.per_device)).round() as u32;
        let device =
            self.gpus
                .take_share(task, units)
                .ok_or_else(|| crate::exec::ExecError::NoRoom {
                    task,
                    reason: format!("no GPU here has {share} of a device free"),
                })?;
        let memory = shares.memory.get(&device).copied().unwrap_or(0);
        let env = mps.acquire(device).and_then(|()| {
            mps.client_env(device, share, memory, None)
                .inspect_err(|_| {
                    let _ = mps.release(device);
                })
        });
        match env {
            Ok(env) => {
                allocation.gpus = vec![device];
                allocation.gpu_env = env;
                Ok(())
            }
            Err(e) => {
                self.gpus.release(task);
                Err(spawn(e.to_string()))
            }
        }
    }

    /// Give back what a task that ended (or did not start) held: its devices, or its share,
    /// the share's MPS daemon stopping with the device's last client.
    fn free_gpus(&mut self, task: TaskId) {
        if let Some(device) = self.gpus.release(task)
            && let Some(mps) = &mut self.p.gpus.shares.mps
            && let Err(e) = mps.release(device)
        {
            tracing::warn!(%task, error = %e, "cannot stop the MPS daemon");
        }
        self.state_devices();
    }

    /// Tell the core how this box's devices stand, where they are shared in fractions: its
    /// claims' packing prior reads them (`tapfinger::ledger::Ledger::set_devices`).
    pub(super) fn state_devices(&mut self) {
        let per = self.gpus.per_device();
        if per > 1 && self.p.gpus.pack {
            // The agent's GPU kind is its second (`crate::config::space`).
            self.p.core.set_devices(1, per, self.gpus.left());
        }
    }
}

/// Why nothing may start here now: the journal fails, or the data directory is short of room.
fn p_store_failing(store: &Option<crate::store::Store>) -> Option<String> {
    let s = store.as_ref()?;
    s.health()
        .failing
        .or_else(|| s.short_of_room().map(|e| e.to_string()))
}
