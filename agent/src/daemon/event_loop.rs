//! The loop: waits on its sources (the ticker, the network, the executor, commands), hands each
//! event to its handler, which calls the node core, and carries out the core's actions with
//! [`Daemon::execute`]; after every step the journal, the lease file and the status follow.

use super::{Command, Parts, Status, node_id, task_id, validate};
use crate::exec::ExecEvent;
use crate::net::NetEvent;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tapfinger::gpu_pool::GpuPool;
use tapfinger::node::{Action, TaskState};
use tapfinger::spec::{SpecError, TaskSpec};
use tapfinger::{NodeId, TaskId};
use tokio::sync::{mpsc, watch};

mod execute;
mod leaving;
mod peer_logs;
mod state;

use state::{Ends, Outlets, Turned, Upkeep};

/// Whether the loop goes on.
enum Flow {
    /// Carry these actions out and go on.
    Continue(Vec<Action>),
    /// A source closed, or the agent was asked to stop.
    Stop,
}

/// The loop's state besides the core.
struct Daemon {
    /// The core, network, executor and files the loop drives.
    p: Parts,
    /// This node's id (from its peer id).
    me: NodeId,
    /// The loop's clock origin: the core's `now` is milliseconds since then.
    epoch: Instant,
    /// How the ends of this box's processes are read.
    ends: Ends,
    /// Running tasks' metrics and convergence.
    reports: crate::reports::Reports,
    /// The task-volume forecast ([`super::forecasting`]).
    forecasting: super::forecasting::Forecasting,
    /// What was turned away from peers.
    turned: Turned,
    /// The next local task number (ids continue after every id accepted here).
    next_local: u32,
    /// The largest id the journal and its counter held at start: a task of this box's numbering
    /// above it, heard from a peer, was accepted after the journal's last record.
    journal_last: TaskId,
    /// Which GPU devices each task running here holds (a device goes to one task at a time).
    gpus: GpuPool,
    /// The box's own upkeep after every step.
    upkeep: Upkeep,
    /// Where the state goes out: status, replies, `/metrics`, history (see [`PUBLISH_EVERY`]).
    outlets: Outlets,
    /// What tasks running here use of their GPUs.
    gpu_use: crate::gpu_use::Sampler,
    /// The cluster's workload as observed here, sampled once a slot (its twin).
    observed: crate::workload::Observed,
    /// A graceful stop under way ([`leaving`]).
    leaving: Option<leaving::Leaving>,
    /// The longest a graceful stop waits for the tasks' grace.
    stop_timeout: Duration,
    /// Logs of tasks that ran on other boxes, asked of those boxes ([`peer_logs`]).
    peer_logs: peer_logs::PeerLogs,
    /// The addresses the network listens on, with the peer id ([`Status::listening`]).
    listening: Vec<String>,
}

/// How often the status snapshot, the metrics and the outcome journal are brought up to date
/// when no API reply waits for them and nothing started or stopped here. Each is a pass over
/// every known task; done after every step (every message), they made 16 agents with 500 tasks
/// on 2 cores so slow that heartbeats came late and peers timed out, and every 100 ms they
/// still took 9 % of the cluster benchmark's CPU time (`perf`). The dashboard asks once a
/// second.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// Run the loop until a source closes or the agent is shut down.
pub(super) async fn run(
    mut p: Parts,
    mut commands: mpsc::Receiver<Command>,
    status: watch::Sender<std::sync::Arc<Status>>,
    metrics: std::sync::Arc<crate::metrics::AgentMetrics>,
    history: std::sync::Arc<crate::history::History>,
) {
    let me = p.core.id();
    // Replay the journal before deciding anything: adopt what still runs, announce what is
    // unfinished, restore the history; numbering continues after every id ever accepted here.
    let recovered = std::mem::take(&mut p.recovered);
    let next_local = crate::recover::next_local(me, recovered.last_id, p.core.config().incarnation);
    let journal_last = recovered.last_id.unwrap_or(TaskId(0));
    let recorded = recovered.outcomes.keys().copied().collect();
    let (mut pending, held) =
        crate::recover::replay(&mut p.core, p.executor.as_mut(), &mut p.store, recovered);
    let adopted: BTreeSet<TaskId> = held.iter().map(|(t, _, _)| *t).collect();
    let swept = p.executor.sweep_leftovers(&adopted);
    if swept > 0 {
        tracing::info!(
            cgroups = swept,
            "removed the empty cgroups of tasks that ended while the agent was away"
        );
    }
    let gpus = p.gpus.pool(held);
    let forecast_every = p.forecast_interval_slots;
    let stop_timeout = p.stop_timeout;
    let plateau = p.plateau;
    let mut d = Daemon {
        p,
        me,
        epoch: Instant::now(),
        ends: Ends::new(recorded),
        reports: crate::reports::Reports::new(plateau),
        forecasting: super::forecasting::Forecasting::new(forecast_every),
        turned: Turned::default(),
        next_local,
        journal_last,
        gpus,
        upkeep: Upkeep::default(),
        outlets: Outlets::new(metrics, history),
        gpu_use: crate::gpu_use::Sampler::new(None),
        observed: Default::default(),
        leaving: None,
        stop_timeout,
        peer_logs: Default::default(),
        listening: Vec::new(),
    };
    d.gpu_use = crate::gpu_use::Sampler::new(d.p.gpus.probe.take());
    d.state_devices();
    let mut runs_changed = false;
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let flow = tokio::select! {
            _ = ticker.tick() => Flow::Continue(d.p.core.tick(d.now())),
            ev = d.p.net.next_event() => match ev {
                Some(ev) => {
                    let rounds = d.p.core.stats().rounds;
                    let mut flow = d.on_net(ev).await;
                    // A round was decided: tick now, so that this node's proposal for the next
                    // one goes out at once rather than at the next tick (up to 10 ms later; at
                    // 16 agents, the round waits for the last member's proposal).
                    if d.p.core.stats().rounds != rounds
                        && let Flow::Continue(actions) = &mut flow
                    {
                        actions.extend(d.p.core.tick(d.now()));
                    }
                    flow
                }
                None => Flow::Stop,
            },
            ev = d.p.exec_events.recv() => match ev {
                Some(ev) => {
                    // A task here ended: shown at once (below).
                    runs_changed |= matches!(ev, ExecEvent::Exited { .. });
                    Flow::Continue(d.on_exec(ev))
                }
                None => Flow::Stop,
            },
            cmd = commands.recv() => match cmd {
                Some(cmd) => d.on_command(cmd).await,
                None => Flow::Stop,
            },
        };
        let Flow::Continue(actions) = flow else {
            d.journal_outcomes();
            d.save_sizes_now();
            return;
        };
        pending.extend(actions);
        for a in std::mem::take(&mut pending) {
            runs_changed |= matches!(
                a,
                Action::Start { .. }
                    | Action::Stop { .. }
                    | Action::Preempt { .. }
                    | Action::Resize { .. }
            );
            d.execute(a).await;
        }
        d.after_step().await;
        if d.leaving.is_some() && d.leaving_step().await {
            d.save_sizes_now();
            d.publish(&status);
            return;
        }
        // What runs here is published as soon as it changes, so that the status (the dashboard,
        // the API, a test's overlap check) never shows a copy here that has stopped, or misses
        // one that has started, for up to `PUBLISH_EVERY`.
        if d.outlets
            .due(std::mem::take(&mut runs_changed), PUBLISH_EVERY)
        {
            d.journal_outcomes();
            d.publish(&status);
        }
    }
}

impl Daemon {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Save the size history on the way out, whatever it learned since the last save.
    fn save_sizes_now(&mut self) {
        if let Some(files) = &self.p.files {
            self.upkeep
                .save_sizes(self.p.core.tasks().sizes(), &files.sizes, true);
        }
    }

    async fn on_net(&mut self, ev: NetEvent) -> Flow {
        let p = &mut self.p;
        let actions = match ev {
            NetEvent::Message { from, envelope } => {
                // The sender must be who it claims: its node id derives from its peer id.
                if envelope.from == node_id(&from) {
                    self.peer_logs.heard(envelope.from, from);
                    let now = self.epoch.elapsed().as_millis() as u64;
                    p.core.on_message(*envelope, now)
                } else {
                    self.turned.dropped += 1;
                    Vec::new()
                }
            }
            NetEvent::Dropped { .. } => {
                self.turned.dropped += 1;
                Vec::new()
            }
            // Logged by the network and counted; nothing of it reaches the protocol.
            NetEvent::Refused { .. } => {
                self.turned.refused += 1;
                Vec::new()
            }
            NetEvent::Listening(addr) => {
                let full = format!("{addr}/p2p/{}", p.net.peer_id);
                tracing::info!(address = %full, "listening");
                if !self.listening.contains(&full) {
                    self.listening.push(full);
                }
                Vec::new()
            }
            NetEvent::PeerUp(peer) | NetEvent::PeerDown(peer) => {
                let up = matches!(ev, NetEvent::PeerUp(_));
                if up {
                    self.peer_logs.heard(node_id(&peer), peer);
                }
                tracing::info!(%peer, up, "peer connection");
                if let Some(o) = &mut p.online {
                    o.connection(peer, up);
                }
                Vec::new()
            }
            NetEvent::Request {
                request, channel, ..
            } => {
                // Agents answer their peers' questions about logs; the rest only the
                // coordinator serves.
                let answer = match *request {
                    crate::learn::Request::Logs {
                        task,
                        stdout_from,
                        stderr_from,
                    } => self.logs_for_peer(task, (stdout_from, stderr_from)),
                    _ => crate::learn::Response::Error("not a coordinator".into()),
                };
                let _ = self.p.net.respond(channel, answer).await;
                Vec::new()
            }
            NetEvent::Response { from, response } => {
                if !self.logs_answer(from, &response)
                    && let Some(o) = &mut self.p.online
                {
                    for (to, r) in o.on_response(from, *response, &mut self.p.core) {
                        let _ = self.p.net.request(to, r).await;
                    }
                }
                Vec::new()
            }
            NetEvent::RequestFailed { to, reason } => {
                tracing::debug!(%to, %reason, "request failed");
                if !self.peer_logs.failed(to, &reason)
                    && let Some(o) = &mut self.p.online
                {
                    o.on_failure(to);
                }
                Vec::new()
            }
        };
        Flow::Continue(actions)
    }

    async fn on_command(&mut self, cmd: Command) -> Flow {
        let actions = match cmd {
            Command::Submit(spec, reply) => match self.accept(&spec) {
                Ok(task) => {
                    let id = task.id;
                    self.outlets.reply_after_publishing(Box::new(move || {
                        let _ = reply.send(Ok(id));
                    }));
                    self.p.core.submit(task, *spec)
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                    Vec::new()
                }
            },
            Command::Cancel(task, reply) => {
                let actions = self.p.core.cancel(task);
                let found = actions.is_some();
                self.outlets.reply_after_publishing(Box::new(move || {
                    let _ = reply.send(found);
                }));
                actions.unwrap_or_default()
            }
            Command::Spec(task, reply) => {
                let spec = self
                    .p
                    .core
                    .tasks()
                    .get(task)
                    .map(|e| Box::new(e.meta.spec.clone()));
                let _ = reply.send(spec);
                Vec::new()
            }
            Command::Workload(slots, reply) => {
                let _ = reply.send(Box::new(self.observed.export(&self.p.core, slots)));
                Vec::new()
            }
            Command::Rollback(reply) => {
                let r = match &mut self.p.online {
                    Some(o) => o.rollback(&mut self.p.core).map_err(|e| e.to_string()),
                    None => Err(
                        "no coordinator is configured, so there are no versions to roll back"
                            .into(),
                    ),
                };
                self.outlets.reply_after_publishing(Box::new(move || {
                    let _ = reply.send(r);
                }));
                Vec::new()
            }
            Command::Shutdown(done) => self.begin_leaving(done),
            Command::StopNow => self.stop_now(),
            Command::PeerLogs {
                node,
                task,
                from,
                reply,
            } => {
                self.ask_logs(node, task, from, reply).await;
                Vec::new()
            }
        };
        Flow::Continue(actions)
    }

    /// A submitted spec, validated and journaled (durable before the caller hears "accepted"),
    /// under an id no node knows.
    fn accept(&mut self, spec: &TaskSpec) -> Result<tapfinger::Task, SpecError> {
        while self
            .p
            .core
            .tasks()
            .contains(task_id(self.me, self.next_local))
        {
            self.next_local += 1;
        }
        let task = validate(&self.p, spec, self.me, self.next_local)?;
        if let Some(store) = &mut self.p.store {
            store.accepted(&task, spec).map_err(|e| SpecError {
                // The API answers these with 507 / 503 and Retry-After: not the client's fault.
                field: match &e {
                    crate::store::StoreError::Unavailable { full: true, .. } => {
                        crate::store::REFUSED_FULL
                    }
                    _ => crate::store::REFUSED_FAILING,
                }
                .into(),
                message: format!("the task was not accepted: {e}"),
                by_boxes: false,
            })?;
        }
        self.next_local += 1;
        Ok(task)
    }

    /// After every step: files and online learning.
    async fn after_step(&mut self) {
        let now = self.now();
        if let Some(store) = &mut self.p.store {
            // What a full disk kept in memory is written once it has room (at most once a
            // second while failing; nothing to do otherwise).
            store.retry();
        }
        if let Some(files) = &self.p.files {
            self.upkeep
                .run(&mut self.p.core, files, self.p.store.as_ref(), now);
        }
        self.forecasting.collect(&mut self.p.core).await;
        self.forecasting.start(&self.p.core);
        if let Some(o) = &mut self.p.online {
            let mut out = o.step(&mut self.p.core, now);
            // The guard's input: what this agent observed under the choice in force.
            if let Some(slots) = o.workload_due(&self.p.core, now) {
                let w = self.observed.export(&self.p.core, slots);
                out.push(o.workload_request(&self.p.core, w));
            }
            for (to, r) in out {
                if let Err(e) = self.p.net.request(to, r).await {
                    tracing::warn!(error = %e, "cannot send a request");
                }
            }
        }
    }

    /// Journal the tasks accepted here once they are known finished (anywhere); and an
    /// unfinished task accepted here that the journal lacks (its record lost, the loss accepted
    /// with `repair-journal`) once a peer has told it back, so that it survives the next restart
    /// even if no peer does. (Finished ones are not: compaction forgets old finished tasks on
    /// purpose, and peers keep their history.)
    fn journal_outcomes(&mut self) {
        if let Some(store) = &mut self.p.store {
            for (id, t) in self.p.core.tasks().iter() {
                if id.0 >> 32 == u64::from(self.me.0)
                    && !matches!(t.state, TaskState::Done { .. })
                    && !store.has_accepted(id)
                    && store.health().failing.is_none()
                {
                    match store.accepted(&t.task, &t.meta.spec) {
                        Ok(()) => {
                            // The journal held every task accepted here before it was
                            // acknowledged: one it lacks was lost with it (deleted and
                            // repaired, or the data directory restored from an older copy,
                            // which its own counter cannot tell).
                            if id > self.journal_last {
                                // Numbered after everything the journal and its counter held:
                                // both are older than what this box acknowledged.
                                tracing::error!(task = %id, name = ?t.meta.spec.name, journal_last = %self.journal_last,
                                    "the data directory was restored from an older copy: a task accepted here after the journal's last record was relearned from a peer and journaled again");
                            } else {
                                tracing::warn!(task = %id, name = ?t.meta.spec.name,
                                    "a task accepted here was missing from the journal (lost and repaired): relearned from a peer and journaled again");
                            }
                        }
                        Err(e) => {
                            tracing::debug!(task = %id, error = %e, "cannot journal a relearned task")
                        }
                    }
                }
                if let TaskState::Done { node, code, epoch } = t.state
                    && id.0 >> 32 == u64::from(self.me.0)
                    && self.ends.journal(id)
                    && let Err(e) = store.outcome(id, crate::store::Finish { node, code, epoch })
                {
                    tracing::warn!(task = %id, error = %e, "cannot journal a finished task");
                }
            }
        }
    }

    /// Publish the status (if it changed), then answer the commands of this step.
    fn publish(&mut self, status: &watch::Sender<std::sync::Arc<Status>>) {
        let box_names = self.outlets.names(&self.p.core, self.me);
        let core = &self.p.core;
        let me = self.me;
        let snapshot = Status {
            id: Some(me),
            peers: core.peers().collect(),
            peer_table: core.peer_table(),
            used: Some(core.used()),
            capacity: Some(core.capacity().clone()),
            tasks: core
                .tasks()
                .iter()
                .map(|(id, t)| (id, t.state.clone()))
                .collect(),
            finished_here: self.ends.finished_here().to_vec(),
            dropped: self.turned.dropped,
            refused: self.turned.refused,
            traffic: self.p.net.traffic(),
            stats: core.stats().clone(),
            policy: self.p.online.as_ref().map(|o| o.status().clone()),
            deciding: self.p.core.policy_name().to_string(),
            name: core.config().name.clone(),
            labels: core.node_labels(),
            slot: core.slot(),
            slot_ms: core.config().slot_ms,
            queue: crate::status::queue_of(core.tasks(), core.slot()),
            classes: crate::status::classes_of(core.tasks()),
            reports: self.reports.all().clone(),
            shared_reports: core.reports(),
            gpu_use: self.gpu_use.latest().clone(),
            steps: core.config().steps.clone(),
            names: crate::status::names_of(core.tasks()),
            box_names,
            preempted: core.preempted().clone(),
            preempted_everywhere: core.preempted_everywhere(),
            requeued: core.tasks().requeues().clone(),
            forecast: self.forecasting.latest().cloned(),
            estimates: crate::status::estimates_of(
                core.tasks(),
                &self.p.types,
                &core.node_labels(),
            ),
            storage: self.p.store.as_ref().map(crate::store::Store::health),
            expected: self.outlets.expected(core),
            start_error: self.outlets.start_error(),
            listening: self.listening.clone(),
        };
        let latencies = self.p.core.take_latencies();
        if self.outlets.publish(snapshot, &latencies, status) {
            // Once a slot: the twin's sample of the workload.
            self.observed.observe(&self.p.core);
        }
    }
}
