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
    /// Tasks recovered from the journal, re-announced at start.
    pub recovered: Vec<(tapfinger::Task, TaskSpec)>,
    /// GPU device indices this node offers (their count is the GPU capacity).
    pub gpu_devices: Vec<u32>,
    /// Online learning and policy rollout (None: no coordinator configured).
    pub online: Option<crate::online::Online>,
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
    let mut next_local: u32 = 0;
    let mut stopped_here: std::collections::BTreeSet<TaskId> = Default::default();
    let mut finished_here = Vec::new();
    let mut dropped = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // Replay the journal: our own tasks keep their ids, and numbering continues after them.
    let mut pending_actions = Vec::new();
    let mut recorded: std::collections::BTreeSet<TaskId> = Default::default();
    for (task, spec) in std::mem::take(&mut p.recovered) {
        if task.id.0 >> 32 == u64::from(me.0) {
            next_local = next_local.max((task.id.0 & 0xFFFF_FFFF) as u32 + 1);
        }
        tracing::info!(task = %task.id, "recovered from the journal");
        pending_actions.extend(p.core.submit(task, spec));
    }
    // Replies to API commands wait until the status they imply is published, so a caller that
    // reads the status right after the reply sees its own change (a cancelled task is done).
    let mut replies: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    let mut gpus = GpuPool::new(&p.gpu_devices);
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
                Some(ExecEvent::Exited { task, code }) => {
                    gpus.release(task);
                    let stopped = stopped_here.remove(&task);
                    if !stopped {
                        finished_here.push(task);
                    }
                    p.core.on_exit(task, code, stopped)
                }
                None => return,
            },
            cmd = commands.recv() => match cmd {
                Some(Command::Submit(spec, reply)) => {
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
                            Action::Start { .. } => {}
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
                Action::Start { task, spec, alloc } => {
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
            }
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
            for (id, t) in p.core.tasks() {
                if matches!(t.state, TaskState::Done { .. })
                    && id.0 >> 32 == u64::from(me.0)
                    && recorded.insert(*id)
                    && let Err(e) = store.finished(*id)
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
                .map(|(id, t)| (*id, t.state.clone()))
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
    let id = TaskId((u64::from(me.0) << 32) | u64::from(local));
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
