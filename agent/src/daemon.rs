//! The agent's event loop: binds the sans-IO [`NodeCore`] to the network ([`crate::net`]), an
//! [`Executor`] and the wall clock.
//!
//! One tokio task owns the core; everything reaches it through bounded channels (network events,
//! executor events, commands from the API or tests), and a 10 ms ticker drives its timers. Actions
//! are carried out in order: broadcasts go to the network, starts and stops to the executor. The
//! loop publishes a [`Status`] snapshot after every step for the API and tests to read.

use crate::exec::{Allocation, ExecEvent, Executor};
use crate::net::{NetEvent, Network};
use libp2p::PeerId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tapfinger::node::{Action, NodeCore, TaskState};
use tapfinger::resources::ResourceSpace;
use tapfinger::spec::{Placement, SpecError, TaskSpec};
use tapfinger::{NodeId, Resources, TaskId};
use tokio::sync::{mpsc, oneshot, watch};

/// The node id of a peer: a hash of its peer id, so every agent derives the same one.
pub fn node_id(peer: &PeerId) -> NodeId {
    // FNV-1a over the peer id's bytes.
    let mut h: u32 = 0x811c_9dc5;
    for b in peer.to_bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    NodeId(h)
}

/// A command for the loop.
pub enum Command {
    /// Submit a task spec; the reply is its id or why it was refused.
    Submit(TaskSpec, oneshot::Sender<Result<TaskId, SpecError>>),
    /// Cancel a task; the reply says whether it was known and not finished.
    Cancel(TaskId, oneshot::Sender<bool>),
    /// Hand running tasks back to the cluster and stop.
    Shutdown(oneshot::Sender<()>),
    /// Go back to the previous policy version; the reply is the version now in use.
    Rollback(oneshot::Sender<Result<u64, String>>),
}

/// What the loop publishes after every step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// This node.
    pub id: Option<NodeId>,
    /// Live peers.
    pub peers: Vec<NodeId>,
    /// Live peers: id, name, capacity, free units (from their last heartbeat).
    pub peer_table: Vec<(NodeId, String, Resources, Resources)>,
    /// Units allocated here.
    pub used: Option<Resources>,
    /// Capacity offered.
    pub capacity: Option<Resources>,
    /// Every known task and its state.
    pub tasks: BTreeMap<TaskId, TaskState>,
    /// Tasks this node ran to completion (exit code 0 or not), in order.
    pub finished_here: Vec<TaskId>,
    /// Malformed messages dropped.
    pub dropped: u64,
    /// Negotiation counters (rounds, claims, conflicts, messages, round latency).
    pub stats: tapfinger::node::NodeStats,
    /// Policy version and online learning (None: no coordinator configured).
    pub policy: Option<crate::online::PolicyStatus>,
}

/// Converts grid units to what an executor needs (natural units of each kind). GPUs come out as a
/// count (`gpus` holds `0..n`); the daemon replaces them with the devices it hands the task.
pub type ToAllocation = Box<dyn Fn(&Resources) -> Allocation + Send>;

/// A running agent.
pub struct Agent {
    /// Command channel.
    pub commands: mpsc::Sender<Command>,
    /// Status snapshots.
    pub status: watch::Receiver<Status>,
    task: tokio::task::JoinHandle<()>,
}

impl Agent {
    /// Submit a task and wait for its id.
    pub async fn submit(&self, spec: TaskSpec) -> Result<TaskId, String> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Submit(spec, tx))
            .await
            .map_err(|_| "agent stopped".to_string())?;
        rx.await
            .map_err(|_| "agent stopped".to_string())?
            .map_err(|e| e.to_string())
    }

    /// Stop abruptly, as a SIGKILL would: no hand-back, no goodbye.
    pub fn kill(&self) {
        self.task.abort();
    }

    /// Hand back running tasks and stop.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Shutdown(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// Everything the loop needs.
pub struct Parts {
    /// The node core.
    pub core: NodeCore,
    /// The network.
    pub net: Network,
    /// The executor and its events.
    pub executor: Box<dyn Executor>,
    /// Executor events.
    pub exec_events: mpsc::Receiver<ExecEvent>,
    /// Grid units → executor allocation.
    pub to_allocation: ToAllocation,
    /// Resource kinds (for validating specs).
    pub space: ResourceSpace,
    /// Task type names (for validating specs).
    pub types: Vec<String>,
    /// The durable journal (None: tasks are kept in memory only, as in tests).
    pub store: Option<crate::store::Store>,
    /// What the journal held at start (replayed before anything else: see [`crate::recover`]).
    pub recovered: crate::store::Recovered,
    /// Files beside the journal (None: kept in memory only).
    pub files: Option<Files>,
    /// GPU device indices this node offers (their count is the GPU capacity).
    pub gpu_devices: Vec<u32>,
    /// Online learning and policy rollout (None: no coordinator configured).
    pub online: Option<crate::online::Online>,
}

/// The data directory's files the loop keeps up to date.
#[derive(Debug, Clone)]
pub struct Files {
    /// The lease file: touched while this node holds a quorum (task supervisors read it).
    pub lease: std::path::PathBuf,
    /// The members counted for the quorum.
    pub members: std::path::PathBuf,
    /// Task logs and exit records, swept after `retention` (None: kept forever).
    pub sweep: Vec<std::path::PathBuf>,
    /// How long logs of tasks that ended are kept.
    pub retention: Option<Duration>,
}

/// Which GPU devices each task running here holds, so that two tasks never get the same device
/// (the node core counts GPUs; only the daemon knows device indices).
#[derive(Debug, Default)]
struct GpuPool {
    free: std::collections::BTreeSet<u32>,
    held: BTreeMap<TaskId, Vec<u32>>,
}

impl GpuPool {
    fn new(devices: &[u32]) -> Self {
        Self {
            free: devices.iter().copied().collect(),
            held: BTreeMap::new(),
        }
    }

    /// Take `n` free devices for `task` (lowest indices first); None if fewer are free, which the
    /// core's capacity accounting should make impossible.
    fn take(&mut self, task: TaskId, n: usize) -> Option<Vec<u32>> {
        if self.free.len() < n {
            return None;
        }
        let got: Vec<u32> = self.free.iter().take(n).copied().collect();
        for d in &got {
            self.free.remove(d);
        }
        if !got.is_empty() {
            self.held.insert(task, got.clone());
        }
        Some(got)
    }

    /// Devices an adopted task holds (from the journal).
    fn hold(&mut self, task: TaskId, devices: Vec<u32>) {
        for d in &devices {
            self.free.remove(d);
        }
        if !devices.is_empty() {
            self.held.insert(task, devices);
        }
    }

    fn release(&mut self, task: TaskId) {
        if let Some(ds) = self.held.remove(&task) {
            self.free.extend(ds);
        }
    }
}

/// Start the loop.
pub fn spawn(parts: Parts) -> Agent {
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let (status_tx, status_rx) = watch::channel(Status::default());
    let task = tokio::spawn(run(parts, cmd_rx, status_tx));
    Agent {
        commands: cmd_tx,
        status: status_rx,
        task,
    }
}

async fn run(mut p: Parts, mut commands: mpsc::Receiver<Command>, status: watch::Sender<Status>) {
    let epoch = Instant::now();
    let now_ms = || epoch.elapsed().as_millis() as u64;
    let me = p.core.id();
    let mut stopped_here: std::collections::BTreeSet<TaskId> = Default::default();
    let mut finished_here = Vec::new();
    let mut dropped = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // Replay the journal before deciding anything: adopt what still runs, announce what is
    // unfinished, restore the history; numbering continues after every id ever accepted here.
    let recovered = std::mem::take(&mut p.recovered);
    let mut next_local =
        crate::recover::next_local(me, recovered.last_id, p.core.config().incarnation);
    let mut recorded: std::collections::BTreeSet<TaskId> =
        recovered.outcomes.keys().copied().collect();
    let (mut pending_actions, held) =
        crate::recover::replay(&mut p.core, p.executor.as_mut(), &mut p.store, recovered);
    let mut gpus = GpuPool::new(&p.gpu_devices);
    for (task, devices) in held {
        gpus.hold(task, devices);
    }
    let mut last_touch: Option<Instant> = None;
    let mut last_sweep: Option<Instant> = None;
    let mut had_quorum: Option<bool> = None;
    // Replies to API commands wait until the status they imply is published, so a caller that
    // reads the status right after the reply sees its own change (a cancelled task is done).
    let mut replies: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    loop {
        let replay = std::mem::take(&mut pending_actions);
        let mut actions = replay;
        actions.extend(tokio::select! {
            _ = ticker.tick() => p.core.tick(now_ms()),
            ev = p.net.next_event() => match ev {
                Some(NetEvent::Message { from, envelope }) => {
                    // The sender must be who it claims: its node id derives from its peer id.
                    if envelope.from == node_id(&from) {
                        p.core.on_message(*envelope, now_ms())
                    } else {
                        dropped += 1;
                        Vec::new()
                    }
                }
                Some(NetEvent::Dropped { .. }) => { dropped += 1; Vec::new() }
                Some(NetEvent::Listening(addr)) => {
                    tracing::info!(address = %format!("{addr}/p2p/{}", p.net.peer_id), "listening");
                    Vec::new()
                }
                Some(NetEvent::PeerUp(peer)) => {
                    tracing::info!(%peer, "peer connected");
                    if let Some(o) = &mut p.online { o.connection(peer, true); }
                    Vec::new()
                }
                Some(NetEvent::PeerDown(peer)) => {
                    tracing::info!(%peer, "peer disconnected");
                    if let Some(o) = &mut p.online { o.connection(peer, false); }
                    Vec::new()
                }
                Some(NetEvent::Request { channel, .. }) => {
                    // Agents serve no requests; only the coordinator does.
                    let _ = p.net.respond(channel, crate::learn::Response::Error("not a coordinator".into())).await;
                    Vec::new()
                }
                Some(NetEvent::Response { from, response }) => {
                    if let Some(o) = &mut p.online {
                        for (to, r) in o.on_response(from, *response, &mut p.core) {
                            let _ = p.net.request(to, r).await;
                        }
                    }
                    Vec::new()
                }
                Some(NetEvent::RequestFailed { to, reason }) => {
                    tracing::debug!(%to, %reason, "request failed");
                    if let Some(o) = &mut p.online { o.on_failure(to); }
                    Vec::new()
                }
                None => return,
            },
            ev = p.exec_events.recv() => match ev {
                Some(ExecEvent::Progress { task, progress, .. }) => { p.core.on_progress(task, progress); Vec::new() }
                Some(ExecEvent::Exited { task, code, stopped: by_executor }) => {
                    gpus.release(task);
                    if let Some(store) = &mut p.store && let Err(e) = store.ended(task) {
                        tracing::warn!(%task, error = %e, "cannot journal the end of a run");
                    }
                    let stopped = stopped_here.remove(&task) || by_executor;
                    if !stopped {
                        finished_here.push(task);
                    }
                    p.core.on_exit(task, code, stopped)
                }
                None => return,
            },
            cmd = commands.recv() => match cmd {
                Some(Command::Submit(spec, reply)) => {
                    // Never an id any node knows (ids also continue after the journal's).
                    while p.core.tasks().contains(task_id(me, next_local)) {
                        next_local += 1;
                    }
                    let checked = validate(&p, &spec, me, next_local).and_then(|task| {
                        // Durable before the caller hears "accepted".
                        match &mut p.store {
                            Some(store) => store.accepted(&task, &spec).map(|()| task).map_err(|e| SpecError {
                                field: "store".into(),
                                message: format!("cannot record the task durably: {e}"),
                            }),
                            None => Ok(task),
                        }
                    });
                    match checked {
                        Ok(task) => {
                            next_local += 1;
                            let id = task.id;
                            replies.push(Box::new(move || { let _ = reply.send(Ok(id)); }));
                            p.core.submit(task, spec)
                        }
                        Err(e) => { let _ = reply.send(Err(e)); Vec::new() }
                    }
                }
                Some(Command::Cancel(task, reply)) => {
                    let actions = p.core.cancel(task);
                    let found = actions.is_some();
                    replies.push(Box::new(move || { let _ = reply.send(found); }));
                    actions.unwrap_or_default()
                }
                Some(Command::Rollback(reply)) => {
                    let r = match &mut p.online {
                        Some(o) => o.rollback(&mut p.core).map_err(|e| e.to_string()),
                        None => Err("no coordinator is configured, so there are no versions to roll back".into()),
                    };
                    replies.push(Box::new(move || { let _ = reply.send(r); }));
                    Vec::new()
                }
                Some(Command::Shutdown(done)) => {
                    let actions = p.core.shutdown();
                    for a in actions {
                        match a {
                            Action::Broadcast(e) => { let _ = p.net.send(&e).await; }
                            Action::Stop { task } => p.executor.stop(task),
                            Action::Start { .. } | Action::Refused { .. } => {}
                        }
                    }
                    // Give the hand-back messages a moment to leave.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let _ = done.send(());
                    return;
                }
                None => return,
            },
        });
        for a in actions {
            match a {
                Action::Broadcast(e) => {
                    if let Err(err) = p.net.send(&e).await {
                        tracing::warn!(error = %err, "cannot broadcast");
                    }
                }
                Action::Start {
                    task,
                    mut spec,
                    alloc,
                } => {
                    // What a task may want to know of itself: its id, where it runs, and its epoch
                    // (a fencing token it can hand to external storage).
                    let epoch = p.core.tasks().get(task).map_or(0, |t| t.meta.epoch);
                    spec.env
                        .insert("TAPFINGER_TASK_ID".into(), task.0.to_string());
                    spec.env
                        .insert("TAPFINGER_NODE".into(), p.core.config().name.clone());
                    spec.env.insert("TAPFINGER_EPOCH".into(), epoch.to_string());
                    // A stop asked for an earlier run of this task here is not about this one.
                    stopped_here.remove(&task);
                    let mut allocation = (p.to_allocation)(&alloc);
                    let started = if gpus.held.contains_key(&task) {
                        Err(crate::exec::ExecError::AlreadyRunning(task))
                    } else {
                        match gpus.take(task, allocation.gpus.len()) {
                            Some(devices) => {
                                allocation.gpus = devices;
                                p.executor.start(task, &spec, &allocation)
                            }
                            None => Err(crate::exec::ExecError::Spawn {
                                task,
                                reason: format!(
                                    "{} GPU(s) needed, {} free",
                                    allocation.gpus.len(),
                                    gpus.free.len()
                                ),
                            }),
                        }
                    };
                    if started.is_ok()
                        && let Some(store) = &mut p.store
                    {
                        // Durable before anyone hears of the start, so a restart adopts it.
                        let entry = &p.core.tasks()[&task];
                        let run = crate::store::Run {
                            task: (*entry.task).clone(),
                            spec: spec.clone(),
                            epoch: entry.meta.epoch,
                            alloc: alloc.clone(),
                            gpus: gpus.held.get(&task).cloned().unwrap_or_default(),
                            handle: p.executor.handle(task),
                        };
                        if let Err(e) = store.run(&run) {
                            tracing::warn!(%task, error = %e, "cannot journal a start");
                        }
                    }
                    match started {
                        Ok(enforcement) => tracing::info!(%task, %alloc, ?enforcement, "started"),
                        Err(e) => {
                            if !matches!(e, crate::exec::ExecError::AlreadyRunning(_)) {
                                gpus.release(task);
                            }
                            tracing::warn!(%task, error = %e, "cannot start");
                            let more = p.core.on_exit(task, None, false);
                            for m in more {
                                if let Action::Broadcast(e) = m {
                                    let _ = p.net.send(&e).await;
                                }
                            }
                        }
                    }
                }
                Action::Stop { task } => {
                    stopped_here.insert(task);
                    p.executor.stop(task);
                }
                Action::Refused { task, from, reason } => {
                    tracing::warn!(%task, peer = %from, %reason, "refused a peer's message");
                }
            }
        }
        if let Some(files) = &p.files {
            upkeep(
                &mut p.core,
                files,
                now_ms(),
                &mut last_touch,
                &mut last_sweep,
                &mut had_quorum,
            );
        }
        if let Some(o) = &mut p.online {
            for (to, r) in o.step(&mut p.core, now_ms()) {
                if let Err(e) = p.net.request(to, r).await {
                    tracing::warn!(error = %e, "cannot send a request");
                }
            }
        }
        // Journal the tasks accepted here once they are known finished (anywhere).
        if let Some(store) = &mut p.store {
            for (id, t) in p.core.tasks().iter() {
                if let TaskState::Done { node, code, epoch } = t.state
                    && id.0 >> 32 == u64::from(me.0)
                    && recorded.insert(id)
                    && let Err(e) = store.outcome(id, crate::store::Finish { node, code, epoch })
                {
                    tracing::warn!(task = %id, error = %e, "cannot journal a finished task");
                }
            }
        }
        let snapshot = Status {
            id: Some(me),
            peers: p.core.peers().collect(),
            peer_table: p.core.peer_table(),
            used: Some(p.core.used()),
            capacity: Some(p.core.capacity().clone()),
            tasks: p
                .core
                .tasks()
                .iter()
                .map(|(id, t)| (id, t.state.clone()))
                .collect(),
            finished_here: finished_here.clone(),
            dropped,
            stats: p.core.stats().clone(),
            policy: p.online.as_ref().map(|o| o.status().clone()),
        };
        status.send_if_modified(|s| {
            if *s == snapshot {
                false
            } else {
                *s = snapshot;
                true
            }
        });
        for r in replies.drain(..) {
            r();
        }
    }
}

/// The id of this node's `local`-th task.
fn task_id(me: NodeId, local: u32) -> TaskId {
    TaskId((u64::from(me.0) << 32) | u64::from(local))
}

/// The lease file (touched at most every 200 ms while a quorum holds, so that the supervisors
/// see when the lease started to run out), the persisted members, and the sweep of old logs.
fn upkeep(
    core: &mut NodeCore,
    files: &Files,
    now: u64,
    last_touch: &mut Option<Instant>,
    last_sweep: &mut Option<Instant>,
    had_quorum: &mut Option<bool>,
) {
    let quorum = core.has_quorum(now);
    if *had_quorum != Some(quorum) {
        let known = core.known().len();
        if quorum {
            tracing::info!(
                members = known,
                "a quorum of the cluster is reachable: lease held"
            );
        } else {
            tracing::warn!(
                members = known,
                autonomy_ms = core.config().autonomy_ms,
                "no quorum of the cluster is reachable: tasks here keep running for the autonomy time"
            );
        }
        *had_quorum = Some(quorum);
    }
    if quorum && last_touch.is_none_or(|t| t.elapsed() >= Duration::from_millis(200)) {
        *last_touch = Some(Instant::now());
        if let Err(e) = crate::supervise::touch(&files.lease, &core.id().0.to_string()) {
            tracing::warn!(path = %files.lease.display(), error = %e, "cannot touch the lease file");
        }
    }
    if core.take_known_changed()
        && let Err(e) = crate::store::save_members(&files.members, core.known())
    {
        tracing::warn!(path = %files.members.display(), error = %e, "cannot save the members");
    }
    if let Some(retention) = files.retention
        && last_sweep.is_none_or(|t| t.elapsed() >= Duration::from_secs(3600))
    {
        *last_sweep = Some(Instant::now());
        let me = core.id();
        let keep = core
            .tasks()
            .iter()
            .filter(|(_, t)| matches!(&t.state, TaskState::Running { node, .. } if *node == me))
            .map(|(id, _)| id)
            .collect();
        let dirs: Vec<&std::path::Path> = files.sweep.iter().map(|d| d.as_path()).collect();
        let n = crate::recover::sweep(&dirs, retention, &keep);
        if n > 0 {
            tracing::info!(files = n, "deleted task logs past their retention");
        }
    }
}

/// Validate a submitted spec against the nodes this agent knows (itself and its peers).
fn validate(
    p: &Parts,
    spec: &TaskSpec,
    me: NodeId,
    local: u32,
) -> Result<tapfinger::Task, SpecError> {
    let view = p.core.view();
    let names = p.core.node_names();
    let labels = p.core.node_labels();
    let empty = BTreeMap::new();
    let placements: Vec<Placement<'_>> = view
        .nodes
        .iter()
        .map(|n| Placement {
            id: n.id,
            name: names.get(&n.id).map_or("", String::as_str),
            labels: labels.get(&n.id).unwrap_or(&empty),
            capacity: &n.capacity,
        })
        .collect();
    let id = task_id(me, local);
    spec.validate(&p.space, &p.types, &placements, id, p.core.slot())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_devices_are_never_shared_and_come_back() {
        let mut pool = GpuPool::new(&[0, 1, 2]);
        assert_eq!(pool.take(TaskId(1), 2), Some(vec![0, 1]));
        assert_eq!(pool.take(TaskId(2), 2), None, "only one is free");
        assert_eq!(pool.take(TaskId(2), 1), Some(vec![2]));
        assert_eq!(pool.take(TaskId(3), 0), Some(vec![]));
        pool.release(TaskId(1));
        pool.release(TaskId(3));
        assert_eq!(pool.take(TaskId(4), 2), Some(vec![0, 1]));
        pool.release(TaskId(2));
        pool.release(TaskId(2));
        assert_eq!(pool.free.iter().copied().collect::<Vec<_>>(), vec![2]);
    }
}
