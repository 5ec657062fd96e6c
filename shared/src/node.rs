//! One agent's scheduling state as a sans-IO state machine: what the daemon drives with network
//! messages, executor events and the clock, and what tests drive with an in-memory network.
//!
//! The [`NodeCore`] keeps the tasks it has heard of (announced by any agent), its peers' last
//! heartbeats, its own running tasks, and one [`Protocol`] — the same decision protocol the
//! simulator drives. Each slot it builds a [`ClusterView`] from that knowledge, asks its
//! [`Policy`], and proposes; decided rounds start the tasks it won ([`Action::Start`]). It never
//! does I/O and never reads a clock: every call takes `now` in milliseconds and returns
//! [`Action`]s for the driver.
//!
//! Failure handling. A peer silent for `peer_timeout_ms` is removed from the protocol's members
//! (its missing proposals stop holding rounds up) and every task it was running goes back to
//! pending — every survivor does this from the same knowledge, so no coordinator is needed. A
//! restarted peer (new incarnation in its heartbeat) is treated the same way for the tasks it ran
//! before. If a round is decided differently on two agents (a deadline passed on one and not the
//! other), the same task may start twice: the agent with the higher id stops its copy as soon as it
//! hears of the other's start, so a task still finishes once.

use crate::policy::{Policy, to_proposal};
use crate::protocol::{Output, Protocol, ProtocolConfig, Round, RoundOutcome};
use crate::resources::Resources;
use crate::spec::TaskSpec;
use crate::task::{NodeId, Task, TaskId};
use crate::view::{ClusterView, NodeView, PendingView, RunningView};
use crate::wire::{Body, Envelope, NodeState, RunningState, WIRE_VERSION};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Settings of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// This node's id.
    pub me: NodeId,
    /// Name (from the configuration).
    pub name: String,
    /// Units offered to the cluster.
    pub capacity: Resources,
    /// Placement labels.
    pub labels: BTreeMap<String, String>,
    /// Incarnation (increase on every restart).
    pub incarnation: u64,
    /// Number of task types (for the policy's features).
    pub num_types: usize,
    /// Pending window per node (as in the policy's training).
    pub window: usize,
    /// Slot length (ms): a new slot's first round starts this long after the previous one began.
    pub slot_ms: u64,
    /// Round deadline (ms) after proposing.
    pub round_ms: u64,
    /// Heartbeat period (ms).
    pub heartbeat_ms: u64,
    /// Silence after which a peer is considered gone (ms).
    pub peer_timeout_ms: u64,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Broadcast to every peer.
    Broadcast(Envelope),
    /// Start a task that this node won.
    Start {
        /// Task.
        task: TaskId,
        /// Its spec (command, environment).
        spec: TaskSpec,
        /// Allocation in grid units.
        alloc: Resources,
    },
    /// Stop a task running here (a duplicate start elsewhere won).
    Stop {
        /// Task.
        task: TaskId,
    },
}

/// Where a task stands, as this node knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    /// Waiting for a node.
    Pending,
    /// Running on `node`.
    Running {
        /// Node.
        node: NodeId,
        /// Allocation.
        alloc: Resources,
        /// Progress in [0, 1].
        progress: f64,
        /// Slot in which it started.
        started: u64,
    },
    /// Finished (exit code, if any) on `node`.
    Done {
        /// Node.
        node: NodeId,
        /// Exit code.
        code: Option<i32>,
    },
}

/// A task and what this node knows about it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEntry {
    /// The task.
    pub task: Arc<Task>,
    /// Its spec.
    pub spec: TaskSpec,
    /// State.
    pub state: TaskState,
}

/// A per-node pseudo-random rank of a task (splitmix64 of task and node id): deterministic, so
/// every agent computes the same windows for every node.
fn spread(task: TaskId, node: NodeId) -> u64 {
    let mut z = task.0 ^ (u64::from(node.0)).rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Upper bounds (ms) of the round-latency histogram buckets (the last bucket is unbounded).
pub const LATENCY_BUCKETS_MS: [u64; 20] = [
    1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1000, 2000, 5000,
];

/// What a node counts about its own negotiation (for metrics and benchmarks). Counters only
/// grow; a histogram keeps round latency without keeping every sample.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeStats {
    /// Rounds decided here.
    pub rounds: u64,
    /// Claims this node made (proposals that were not a pass).
    pub claims: u64,
    /// Claims of this node that lost to another agent's.
    pub claims_lost: u64,
    /// Tasks claimed by more than one agent, summed over rounds.
    pub conflicts: u64,
    /// Members whose proposal was missing at a round's deadline, summed over rounds.
    pub missing: u64,
    /// Messages this node broadcast, by kind (`heartbeat`, `protocol`, ...).
    pub sent: BTreeMap<String, u64>,
    /// Messages received from peers.
    pub received: u64,
    /// Round latency: from this node's proposal to the round's decision here. Counts per bucket
    /// of [`LATENCY_BUCKETS_MS`] plus one overflow bucket.
    pub latency_buckets: Vec<u64>,
    /// Sum of the latencies (ms).
    pub latency_sum_ms: u64,
}

impl NodeStats {
    fn observe_latency(&mut self, ms: u64) {
        if self.latency_buckets.is_empty() {
            self.latency_buckets = vec![0; LATENCY_BUCKETS_MS.len() + 1];
        }
        let i = LATENCY_BUCKETS_MS
            .iter()
            .position(|b| ms <= *b)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_buckets[i] += 1;
        self.latency_sum_ms += ms;
    }

    /// Total messages sent.
    pub fn sent_total(&self) -> u64 {
        self.sent.values().sum()
    }

    /// Add another node's counters to these (for cluster-wide figures).
    pub fn merge(&mut self, o: &NodeStats) {
        self.rounds += o.rounds;
        self.claims += o.claims;
        self.claims_lost += o.claims_lost;
        self.conflicts += o.conflicts;
        self.missing += o.missing;
        for (k, v) in &o.sent {
            *self.sent.entry(k.clone()).or_default() += v;
        }
        self.received += o.received;
        if self.latency_buckets.len() < o.latency_buckets.len() {
            self.latency_buckets.resize(o.latency_buckets.len(), 0);
        }
        for (a, b) in self.latency_buckets.iter_mut().zip(&o.latency_buckets) {
            *a += b;
        }
        self.latency_sum_ms += o.latency_sum_ms;
    }

    /// The `q`-quantile of round latency (ms), interpolated linearly inside its bucket as
    /// Prometheus' `histogram_quantile` does; None without samples. The overflow bucket
    /// reports its lower bound.
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.latency_buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0u64;
        for (i, c) in self.latency_buckets.iter().enumerate() {
            if *c > 0 && (seen + c) as f64 >= rank {
                let lo = if i == 0 { 0 } else { LATENCY_BUCKETS_MS[i - 1] } as f64;
                let Some(hi) = LATENCY_BUCKETS_MS.get(i) else {
                    return Some(lo);
                };
                let frac = (rank - seen as f64) / *c as f64;
                return Some(lo + (*hi as f64 - lo) * frac.clamp(0.0, 1.0));
            }
            seen += c;
        }
        None
    }
}

#[derive(Debug, Clone)]
struct Peer {
    state: NodeState,
    last_seen: u64,
}

/// One node's scheduling state machine.
pub struct NodeCore {
    cfg: NodeConfig,
    policy: Box<dyn Policy>,
    rng: crate::Rng,
    protocol: Protocol,
    peers: BTreeMap<NodeId, Peer>,
    tasks: BTreeMap<TaskId, TaskEntry>,
    seq: u64,
    last_heartbeat: Option<u64>,
    /// When the current slot's first round may start.
    slot_start: u64,
    /// First tick: a node proposes only after two heartbeat periods, so that a (re)started node
    /// first hears its peers and their answers to its re-announced tasks.
    first_tick: Option<u64>,
    /// When this node proposed in the current round (for round latency).
    proposed_at: Option<u64>,
    stats: NodeStats,
    /// Learning mode: where the policy records its decisions, and what this node adds.
    learning: Option<(crate::model::Recorder, crate::model::Experience)>,
}

impl std::fmt::Debug for NodeCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCore")
            .field("me", &self.cfg.me)
            .field("round", &self.protocol.round())
            .field("peers", &self.peers.keys().collect::<Vec<_>>())
            .field("tasks", &self.tasks.len())
            .finish()
    }
}

impl NodeCore {
    /// A node that starts alone; peers join as their heartbeats arrive.
    pub fn new(cfg: NodeConfig, policy: Box<dyn Policy>, seed: u64) -> Self {
        let protocol = Protocol::new(
            cfg.me,
            [cfg.me],
            Round::default(),
            ProtocolConfig {
                round_timeout: Some(cfg.round_ms),
                ..ProtocolConfig::default()
            },
        );
        Self {
            rng: crate::seeded_rng(seed),
            cfg,
            policy,
            protocol,
            peers: BTreeMap::new(),
            tasks: BTreeMap::new(),
            seq: 0,
            last_heartbeat: None,
            slot_start: 0,
            first_tick: None,
            proposed_at: None,
            stats: NodeStats::default(),
            learning: None,
        }
    }

    /// Record experience for the coordinator (learning mode): the policy must push its decisions
    /// into `recorder` (a [`crate::model::TapfingerPolicy`] built `.recording(recorder)`); this
    /// node adds which of its claims lost and its reward at every slot end. Collect it with
    /// [`NodeCore::take_experience`].
    pub fn learn(&mut self, recorder: crate::model::Recorder) {
        self.learning = Some((recorder, crate::model::Experience::default()));
    }

    /// Experience recorded since the last call (empty when not learning).
    pub fn take_experience(&mut self) -> crate::model::Experience {
        let Some((recorder, exp)) = self.learning.as_mut() else {
            return crate::model::Experience::default();
        };
        let mut out = std::mem::take(exp);
        if let Ok(mut recs) = recorder.lock() {
            out.records.append(&mut recs);
        }
        out
    }

    /// Replace the policy (a new model version). Called between events, so the round in
    /// progress keeps the proposal the old policy made and the next one uses the new policy.
    pub fn set_policy(&mut self, policy: Box<dyn Policy>) {
        self.policy = policy;
    }

    /// This node's reward for the slot that just ended, as the simulator defines it: minus the
    /// tasks running here and its share of the pending tasks (each split evenly among the live
    /// nodes that can run it), so that the nodes' rewards sum to minus the tasks in the system.
    fn reward(&self) -> f64 {
        let live = |n: &NodeId| *n == self.cfg.me || self.peers.contains_key(n);
        let mut r = 0.0;
        for t in self.tasks.values() {
            match &t.state {
                TaskState::Running { node, .. } if *node == self.cfg.me => r -= 1.0,
                TaskState::Pending if t.task.reachable.binary_search(&self.cfg.me).is_ok() => {
                    let n = t.task.reachable.iter().filter(|n| live(n)).count().max(1);
                    r -= 1.0 / n as f64;
                }
                _ => {}
            }
        }
        r
    }

    /// Negotiation counters.
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.cfg.me
    }

    /// Every task this node knows, by id.
    pub fn tasks(&self) -> &BTreeMap<TaskId, TaskEntry> {
        &self.tasks
    }

    /// The current slot (what a task submitted now records as its arrival).
    pub fn slot(&self) -> u64 {
        self.protocol.round().slot
    }

    /// Names of this node and its live peers.
    /// Live peers as their last heartbeat described them: name, capacity, free units.
    pub fn peer_table(&self) -> Vec<(NodeId, String, Resources, Resources)> {
        self.peers
            .iter()
            .map(|(id, p)| {
                (
                    *id,
                    p.state.name.clone(),
                    p.state.capacity.clone(),
                    p.state.free.clone(),
                )
            })
            .collect()
    }

    /// Names of this node and its live peers.
    pub fn node_names(&self) -> BTreeMap<NodeId, String> {
        let mut m: BTreeMap<NodeId, String> = self
            .peers
            .iter()
            .map(|(id, p)| (*id, p.state.name.clone()))
            .collect();
        m.insert(self.cfg.me, self.cfg.name.clone());
        m
    }

    /// Labels of this node and its live peers.
    pub fn node_labels(&self) -> BTreeMap<NodeId, BTreeMap<String, String>> {
        let mut m: BTreeMap<NodeId, BTreeMap<String, String>> = self
            .peers
            .iter()
            .map(|(id, p)| (*id, p.state.labels.clone()))
            .collect();
        m.insert(self.cfg.me, self.cfg.labels.clone());
        m
    }

    /// Live peers.
    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.peers.keys().copied()
    }

    /// Units this node offers.
    pub fn capacity(&self) -> &Resources {
        &self.cfg.capacity
    }

    /// Units not allocated to tasks running here.
    pub fn free(&self) -> Resources {
        let mut free = self.cfg.capacity.clone();
        for e in self.tasks.values() {
            if let TaskState::Running { node, alloc, .. } = &e.state
                && *node == self.cfg.me
            {
                for (k, f) in free.0.iter_mut().enumerate() {
                    *f = f.saturating_sub(alloc.get(k));
                }
            }
        }
        free
    }

    /// Units allocated here (never above the capacity: the invariant the tests check).
    pub fn used(&self) -> Resources {
        let mut used = Resources::zeros(self.cfg.capacity.len());
        for e in self.tasks.values() {
            if let TaskState::Running { node, alloc, .. } = &e.state
                && *node == self.cfg.me
            {
                for (k, u) in used.0.iter_mut().enumerate() {
                    *u += alloc.get(k);
                }
            }
        }
        used
    }

    fn envelope(&mut self, body: Body) -> Action {
        self.seq += 1;
        let kind = match &body {
            Body::Heartbeat(_) => "heartbeat",
            Body::Announce { .. } => "announce",
            Body::Protocol(_) => "protocol",
            Body::Started { .. } => "started",
            Body::Finished { .. } => "finished",
            Body::Failed { .. } => "failed",
        };
        *self.stats.sent.entry(kind.to_string()).or_default() += 1;
        Action::Broadcast(Envelope {
            version: WIRE_VERSION,
            from: self.cfg.me,
            seq: self.seq,
            body,
        })
    }

    fn heartbeat(&mut self, now: u64) -> Action {
        self.last_heartbeat = Some(now);
        let running = self
            .tasks
            .iter()
            .filter_map(|(id, e)| match &e.state {
                TaskState::Running {
                    node,
                    alloc,
                    progress,
                    started,
                } if *node == self.cfg.me => Some(RunningState {
                    task: *id,
                    alloc: alloc.clone(),
                    progress: *progress,
                    started: *started,
                }),
                _ => None,
            })
            .collect();
        let state = NodeState {
            name: self.cfg.name.clone(),
            labels: self.cfg.labels.clone(),
            capacity: self.cfg.capacity.clone(),
            free: self.free(),
            running,
            incarnation: self.cfg.incarnation,
        };
        self.envelope(Body::Heartbeat(state))
    }

    /// A task accepted here (already validated and persisted by the driver): announce it.
    pub fn submit(&mut self, task: Task, spec: TaskSpec) -> Vec<Action> {
        let id = task.id;
        if self.tasks.contains_key(&id) {
            return Vec::new();
        }
        self.tasks.insert(
            id,
            TaskEntry {
                task: Arc::new(task.clone()),
                spec: spec.clone(),
                state: TaskState::Pending,
            },
        );
        vec![self.envelope(Body::Announce { task, spec })]
    }

    /// A message from a peer (already decoded and validated by the wire layer).
    pub fn on_message(&mut self, e: Envelope, now: u64) -> Vec<Action> {
        let from = e.from;
        if from == self.cfg.me {
            return Vec::new();
        }
        self.stats.received += 1;
        let mut out = Vec::new();
        match e.body {
            Body::Heartbeat(state) => {
                let restarted = self
                    .peers
                    .get(&from)
                    .is_some_and(|p| p.state.incarnation != state.incarnation);
                if restarted {
                    // What it ran before its restart died with it.
                    self.requeue_tasks_of(from);
                }
                if !self.peers.contains_key(&from) {
                    self.protocol.add_member(from);
                    // A newcomer must know our tasks; announcing them again is idempotent.
                    let known: Vec<(Task, TaskSpec)> = self
                        .tasks
                        .values()
                        .filter(|t| t.state == TaskState::Pending)
                        .map(|t| ((*t.task).clone(), t.spec.clone()))
                        .collect();
                    for (task, spec) in known {
                        out.push(self.envelope(Body::Announce { task, spec }));
                    }
                }
                // Its running list is authoritative for tasks on that node.
                for r in &state.running {
                    if let Some(t) = self.tasks.get_mut(&r.task) {
                        match &mut t.state {
                            TaskState::Done { .. } => {}
                            TaskState::Running { node, progress, .. } if *node == from => {
                                *progress = r.progress;
                            }
                            _ => {
                                t.state = TaskState::Running {
                                    node: from,
                                    alloc: r.alloc.clone(),
                                    progress: r.progress,
                                    started: r.started,
                                };
                                self.protocol.mark_committed(r.task);
                            }
                        }
                    }
                }
                self.peers.insert(
                    from,
                    Peer {
                        state,
                        last_seen: now,
                    },
                );
            }
            Body::Announce { task, spec } => {
                let id = task.id;
                match self.tasks.get(&id).map(|t| t.state.clone()) {
                    None => {
                        self.tasks.insert(
                            id,
                            TaskEntry {
                                task: Arc::new(task),
                                spec,
                                state: TaskState::Pending,
                            },
                        );
                    }
                    // A re-announcement (a restarted agent replaying its journal): the node that
                    // runs the task answers, so the announcer does not start it again.
                    Some(TaskState::Running { node, alloc, .. }) if node == self.cfg.me => {
                        out.push(self.envelope(Body::Started { task: id, alloc }));
                    }
                    // Anyone who knows it finished says so (the runner may be gone). The
                    // announcer then records the replier as the node: the state is what matters.
                    Some(TaskState::Done { code, .. }) => {
                        out.push(self.envelope(Body::Finished {
                            task: id,
                            exit_code: code,
                        }));
                    }
                    Some(_) => {}
                }
            }
            Body::Protocol(m) => {
                if !self.peers.contains_key(&from) {
                    // Not heard a heartbeat yet: it will be a member from its first heartbeat.
                    return out;
                }
                if m.round.slot > self.protocol.round().slot + 1 {
                    // Far behind the cluster (we just started, or were cut off): join its current
                    // round instead of replaying slots nobody else runs.
                    self.protocol = self.fresh_protocol(m.round);
                    self.proposed_at = None;
                }
                if let Ok(outputs) = self.protocol.receive(m, now) {
                    out.extend(self.handle(outputs, now));
                }
            }
            Body::Started { task, alloc } => {
                out.extend(self.on_started_elsewhere(task, from, alloc));
            }
            Body::Finished { task, exit_code } => {
                if let Some(t) = self.tasks.get_mut(&task) {
                    t.state = TaskState::Done {
                        node: from,
                        code: exit_code,
                    };
                    self.protocol.mark_committed(task);
                }
            }
            Body::Failed {
                task,
                requeue,
                reason: _,
            } => {
                let me = self.cfg.me;
                if let Some(t) = self.tasks.get_mut(&task) {
                    if requeue {
                        t.state = TaskState::Pending;
                        self.protocol.release(task);
                    } else {
                        // Failed for good, or cancelled by a user at any agent: if it runs here,
                        // stop it.
                        if matches!(&t.state, TaskState::Running { node, .. } if *node == me) {
                            out.push(Action::Stop { task });
                        }
                        t.state = TaskState::Done {
                            node: from,
                            code: None,
                        };
                        self.protocol.mark_committed(task);
                    }
                }
            }
        }
        out
    }

    /// A user cancelled a task (at this agent): stop it if it runs here, and tell every peer (the
    /// node running it stops it; nobody claims it any more). Unknown or finished tasks: nothing.
    pub fn cancel(&mut self, task: TaskId) -> Option<Vec<Action>> {
        let t = self.tasks.get_mut(&task)?;
        if matches!(t.state, TaskState::Done { .. }) {
            return None;
        }
        let mut out = Vec::new();
        if matches!(&t.state, TaskState::Running { node, .. } if *node == self.cfg.me) {
            out.push(Action::Stop { task });
        }
        t.state = TaskState::Done {
            node: self.cfg.me,
            code: None,
        };
        self.protocol.mark_committed(task);
        out.push(self.envelope(Body::Failed {
            task,
            reason: "cancelled".into(),
            requeue: false,
        }));
        Some(out)
    }

    fn fresh_protocol(&self, round: Round) -> Protocol {
        let mut p = Protocol::new(
            self.cfg.me,
            self.peers.keys().copied(),
            round,
            ProtocolConfig {
                round_timeout: Some(self.cfg.round_ms),
                ..ProtocolConfig::default()
            },
        );
        for (id, t) in &self.tasks {
            if t.state != TaskState::Pending {
                p.mark_committed(*id);
            }
        }
        p
    }

    fn on_started_elsewhere(
        &mut self,
        task: TaskId,
        node: NodeId,
        alloc: Resources,
    ) -> Vec<Action> {
        let Some(t) = self.tasks.get_mut(&task) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        match &t.state {
            TaskState::Running { node: mine, .. } if *mine == self.cfg.me => {
                // A duplicate start (rounds decided differently): the lower id keeps it.
                if node < self.cfg.me {
                    out.push(Action::Stop { task });
                    t.state = TaskState::Running {
                        node,
                        alloc,
                        progress: 0.0,
                        started: self.protocol.round().slot,
                    };
                }
            }
            TaskState::Done { .. } => {}
            _ => {
                t.state = TaskState::Running {
                    node,
                    alloc,
                    progress: 0.0,
                    started: self.protocol.round().slot,
                };
            }
        }
        self.protocol.mark_committed(task);
        out
    }

    fn requeue_tasks_of(&mut self, node: NodeId) {
        for (id, t) in self.tasks.iter_mut() {
            if matches!(&t.state, TaskState::Running { node: n, .. } if *n == node) {
                t.state = TaskState::Pending;
                self.protocol.release(*id);
            }
        }
    }

    /// Progress of a task running here (from the executor).
    pub fn on_progress(&mut self, task: TaskId, p: f64) {
        if let Some(TaskEntry {
            state: TaskState::Running { progress, node, .. },
            ..
        }) = self.tasks.get_mut(&task)
            && *node == self.cfg.me
        {
            *progress = p.clamp(0.0, 1.0);
        }
    }

    /// A task running here ended. `stopped` = we stopped it (a duplicate): say nothing.
    pub fn on_exit(&mut self, task: TaskId, code: Option<i32>, stopped: bool) -> Vec<Action> {
        let Some(t) = self.tasks.get_mut(&task) else {
            return Vec::new();
        };
        if stopped || !matches!(&t.state, TaskState::Running { node, .. } if *node == self.cfg.me) {
            return Vec::new();
        }
        t.state = TaskState::Done {
            node: self.cfg.me,
            code,
        };
        vec![self.envelope(Body::Finished {
            task,
            exit_code: code,
        })]
    }

    /// The node is shutting down: hand back every task running here (peers re-queue them).
    pub fn shutdown(&mut self) -> Vec<Action> {
        let mine: Vec<TaskId> = self
            .tasks
            .iter()
            .filter(|(_, t)| matches!(&t.state, TaskState::Running { node, .. } if *node == self.cfg.me))
            .map(|(id, _)| *id)
            .collect();
        let mut out = Vec::new();
        for task in mine {
            out.push(Action::Stop { task });
            if let Some(t) = self.tasks.get_mut(&task) {
                t.state = TaskState::Pending;
            }
            out.push(self.envelope(Body::Failed {
                task,
                reason: "node shutting down".into(),
                requeue: true,
            }));
        }
        out
    }

    /// Advance time: heartbeats, peer timeouts, round deadlines, and this node's proposal when a
    /// round is due.
    pub fn tick(&mut self, now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        if self
            .last_heartbeat
            .is_none_or(|t| now.saturating_sub(t) >= self.cfg.heartbeat_ms)
        {
            out.push(self.heartbeat(now));
        }
        let gone: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.last_seen) > self.cfg.peer_timeout_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.peers.remove(&id);
            self.requeue_tasks_of(id);
            let outputs = self.protocol.remove_member(id);
            out.extend(self.handle(outputs, now));
        }
        let outputs = self.protocol.tick(now);
        out.extend(self.handle(outputs, now));
        let warm = now >= *self.first_tick.get_or_insert(now) + 2 * self.cfg.heartbeat_ms;
        if warm
            && !self.protocol.has_proposed()
            && (now >= self.slot_start || self.protocol.round_begun_elsewhere())
        {
            out.extend(self.propose(now));
        }
        out
    }

    fn propose(&mut self, now: u64) -> Vec<Action> {
        let view = self.view();
        let proposal = match view.for_agent(self.cfg.me) {
            Some(v) => {
                let d = self.policy.decide(&v, &mut self.rng);
                to_proposal(&d, &v).unwrap_or(crate::protocol::Proposal::Pass)
            }
            None => crate::protocol::Proposal::Pass,
        };
        let claim = !matches!(proposal, crate::protocol::Proposal::Pass);
        match self.protocol.propose(proposal, now) {
            Ok(outputs) => {
                self.stats.claims += u64::from(claim);
                self.proposed_at = Some(now);
                self.handle(outputs, now)
            }
            Err(_) => Vec::new(),
        }
    }

    fn handle(&mut self, outputs: Vec<Output>, now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for o in outputs {
            match o {
                Output::Send(m) => out.push(self.envelope(Body::Protocol(m))),
                Output::Decided(outcome) => out.extend(self.apply(outcome, now)),
            }
        }
        out
    }

    fn apply(&mut self, outcome: RoundOutcome, now: u64) -> Vec<Action> {
        let mut out = Vec::new();
        self.stats.rounds += 1;
        self.stats.conflicts += u64::from(outcome.contested);
        self.stats.missing += outcome.missing.len() as u64;
        self.stats.claims_lost += outcome
            .lost
            .iter()
            .filter(|(a, _)| *a == self.cfg.me)
            .count() as u64;
        if let Some(t) = self.proposed_at.take() {
            self.stats.observe_latency(now.saturating_sub(t));
        }
        for c in &outcome.commits {
            let Some(t) = self.tasks.get_mut(&c.task) else {
                continue;
            };
            if matches!(t.state, TaskState::Done { .. }) {
                continue;
            }
            t.state = TaskState::Running {
                node: c.agent,
                alloc: c.alloc.clone(),
                progress: 0.0,
                started: outcome.round.slot,
            };
            if c.agent == self.cfg.me {
                let spec = t.spec.clone();
                out.push(Action::Start {
                    task: c.task,
                    spec,
                    alloc: c.alloc.clone(),
                });
                out.push(self.envelope(Body::Started {
                    task: c.task,
                    alloc: c.alloc.clone(),
                }));
            }
        }
        if outcome.slot_ended {
            self.slot_start = now + self.cfg.slot_ms;
        }
        if self.learning.is_some() {
            let me = self.cfg.me;
            let reward = outcome.slot_ended.then(|| self.reward());
            if let Some((_, exp)) = self.learning.as_mut() {
                if outcome.lost.iter().any(|(a, _)| *a == me) {
                    exp.lost
                        .insert((outcome.round.slot, outcome.round.step, me));
                }
                if let Some(r) = reward {
                    exp.rewards.insert((outcome.round.slot, me), r);
                }
            }
        }
        out
    }

    /// The cluster as this node knows it, for its policy.
    pub fn view(&self) -> ClusterView {
        let mut nodes: BTreeMap<NodeId, (Resources, Resources)> = BTreeMap::new();
        nodes.insert(self.cfg.me, (self.cfg.capacity.clone(), self.free()));
        for (id, p) in &self.peers {
            nodes.insert(*id, (p.state.capacity.clone(), p.state.free.clone()));
        }
        let pending: Vec<&TaskEntry> = self
            .tasks
            .values()
            .filter(|t| t.state == TaskState::Pending)
            .collect();
        let running: Vec<(TaskId, &TaskEntry)> = self
            .tasks
            .iter()
            .filter(|(_, t)| matches!(&t.state, TaskState::Running { node, .. } if nodes.contains_key(node)))
            .map(|(id, t)| (*id, t))
            .collect();
        let node_views = nodes
            .iter()
            .map(|(id, (cap, free))| {
                let mut queue: Vec<usize> = pending
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.task.reachable.binary_search(id).is_ok())
                    .map(|(i, _)| i)
                    .collect();
                // Oldest first; tasks of the same age in an order of this node's own (a hash of
                // task and node), so that agents whose windows hold the same tasks do not all
                // claim the same one and lose the round to each other.
                queue.sort_by_key(|&i| {
                    let t = &pending[i].task;
                    (t.arrival, spread(t.id, *id), t.id)
                });
                let overflow = queue.len().saturating_sub(self.cfg.window);
                queue.truncate(self.cfg.window);
                NodeView {
                    id: *id,
                    capacity: cap.clone(),
                    free: free.clone(),
                    window: queue,
                    overflow,
                    running: running
                        .iter()
                        .enumerate()
                        .filter(|(_, (_, t))| matches!(&t.state, TaskState::Running { node, .. } if node == id))
                        .map(|(i, _)| i)
                        .collect(),
                }
            })
            .collect();
        ClusterView {
            slot: self.protocol.round().slot,
            step: self.protocol.round().step,
            num_types: self.cfg.num_types,
            nodes: node_views,
            pending: pending
                .iter()
                .map(|t| PendingView {
                    task: t.task.clone(),
                })
                .collect(),
            running: running
                .iter()
                .filter_map(|(_, t)| match &t.state {
                    TaskState::Running {
                        node,
                        alloc,
                        progress,
                        started,
                    } => Some(RunningView {
                        task: t.task.clone(),
                        node: *node,
                        alloc: alloc.clone(),
                        started: *started,
                        progress: *progress,
                        attained: 0.0,
                    }),
                    _ => None,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    //! An in-memory cluster: nodes exchange messages through a delayed, in-order bus; tasks run
    //! for a time set by their allocation. Checked: every task finishes exactly once, no node ever
    //! allocates more than its capacity, and a node that dies mid-run loses no task.
    use super::*;
    use crate::baselines;
    use std::collections::BTreeSet;

    const STEP: u64 = 10;

    struct Cluster {
        nodes: Vec<NodeCore>,
        alive: Vec<bool>,
        /// (deliver at, to, envelope)
        bus: Vec<(u64, usize, Envelope)>,
        /// (ends at, node, task)
        running: Vec<(u64, usize, TaskId)>,
        finished: BTreeMap<TaskId, u32>,
        starts: u32,
        now: u64,
    }

    fn spec() -> TaskSpec {
        TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 1 }\n").unwrap()
    }

    impl Cluster {
        fn new(n: usize, policy: &str) -> Self {
            let ctx = baselines::BaselineContext {
                num_types: 1,
                cpu_kind: 0,
                gpu_kind: 1,
                profile: Vec::new(),
            };
            let nodes = (0..n)
                .map(|i| {
                    let cfg = NodeConfig {
                        me: NodeId(i as u32),
                        name: format!("n{i}"),
                        capacity: Resources(vec![4, 0]),
                        labels: BTreeMap::new(),
                        incarnation: 1,
                        num_types: 1,
                        window: 10,
                        slot_ms: 200,
                        round_ms: 50,
                        heartbeat_ms: 50,
                        peer_timeout_ms: 300,
                    };
                    NodeCore::new(cfg, baselines::by_name(policy, &ctx).unwrap(), i as u64)
                })
                .collect();
            Self {
                nodes,
                alive: vec![true; n],
                bus: Vec::new(),
                running: Vec::new(),
                finished: BTreeMap::new(),
                starts: 0,
                now: 0,
            }
        }

        fn act(&mut self, from: usize, actions: Vec<Action>) {
            for a in actions {
                match a {
                    Action::Broadcast(e) => {
                        // Encode and decode as the wire would: what a node sends must pass.
                        let bytes = crate::wire::encode(&e).unwrap();
                        let e = crate::wire::decode(&bytes).unwrap();
                        for to in 0..self.nodes.len() {
                            if to != from {
                                self.bus.push((self.now + STEP, to, e.clone()));
                            }
                        }
                    }
                    Action::Start { task, alloc, .. } => {
                        self.starts += 1;
                        // 4 units of CPU-work: 1 s at 1 core, 250 ms at 4.
                        let ms = 1000 / u64::from(alloc.get(0).max(1));
                        self.running.push((self.now + ms, from, task));
                    }
                    Action::Stop { task } => {
                        self.running.retain(|(_, n, t)| !(*n == from && *t == task));
                        let more = self.nodes[from].on_exit(task, None, true);
                        self.act(from, more);
                    }
                }
            }
        }

        fn step(&mut self) {
            self.now += STEP;
            let now = self.now;
            let due: Vec<(u64, usize, Envelope)> = {
                let (due, later): (Vec<_>, Vec<_>) =
                    self.bus.drain(..).partition(|(t, _, _)| *t <= now);
                self.bus = later;
                due
            };
            for (_, to, e) in due {
                if self.alive[to] {
                    let acts = self.nodes[to].on_message(e, now);
                    self.act(to, acts);
                }
            }
            let (done, rest): (Vec<_>, Vec<_>) =
                self.running.drain(..).partition(|(t, _, _)| *t <= now);
            self.running = rest;
            for (_, node, task) in done {
                if self.alive[node] {
                    *self.finished.entry(task).or_default() += 1;
                    let acts = self.nodes[node].on_exit(task, Some(0), false);
                    self.act(node, acts);
                }
            }
            for i in 0..self.nodes.len() {
                if self.alive[i] {
                    let acts = self.nodes[i].tick(now);
                    self.act(i, acts);
                    let used = self.nodes[i].used();
                    assert!(
                        used.fits_in(&Resources(vec![4, 0])),
                        "node {i} allocates {used} at {now} ms"
                    );
                }
            }
        }

        fn submit(&mut self, at: usize, id: u64) {
            let reachable: Vec<NodeId> = (0..self.nodes.len() as u32).map(NodeId).collect();
            let task = Task {
                id: TaskId(id),
                ty: crate::TaskTypeId(0),
                min_demand: Resources(vec![1, 0]),
                max_demand: None,
                priority: 0,
                reachable,
                arrival: self.now / 200,
            };
            let acts = self.nodes[at].submit(task, spec());
            self.act(at, acts);
        }

        fn kill(&mut self, i: usize) {
            self.alive[i] = false;
            self.running.retain(|(_, n, _)| *n != i);
        }
    }

    #[test]
    fn tasks_finish_exactly_once_within_capacity() {
        for policy in ["min", "random", "first-fit-max", "drf"] {
            let mut c = Cluster::new(4, policy);
            for s in 0..40 {
                c.step();
                if s == 39 {
                    assert!(
                        c.nodes.iter().all(|n| n.peers().count() == 3),
                        "{:?}",
                        c.nodes
                    );
                }
            }
            for id in 0..30u64 {
                c.submit((id % 4) as usize, id);
                c.step();
            }
            let mut steps = 0;
            while c.finished.len() < 30 && steps < 5000 {
                c.step();
                steps += 1;
            }
            assert_eq!(
                c.finished.len(),
                30,
                "{policy}: {} finished",
                c.finished.len()
            );
            assert!(
                c.finished.values().all(|n| *n == 1),
                "{policy}: {:?}",
                c.finished
            );
            // Once the last notices are delivered, every node agrees every task is done.
            for _ in 0..5 {
                c.step();
            }
            for n in &c.nodes {
                let left: Vec<_> = n
                    .tasks()
                    .iter()
                    .filter(|(_, t)| !matches!(t.state, TaskState::Done { .. }))
                    .collect();
                assert!(
                    left.is_empty(),
                    "{policy}: node {} still has {left:?}",
                    n.id().0
                );
            }
        }
    }

    #[test]
    fn a_restarted_node_replays_its_tasks_without_running_them_twice() {
        let mut c = Cluster::new(3, "min");
        for _ in 0..30 {
            c.step();
        }
        for id in 0..18u64 {
            c.submit(0, id);
        }
        // Let some tasks finish, then restart node 0 with a blank memory and the journal's replay
        // (every task it accepted, as the store would return the unfinished ones and more).
        while c.finished.len() < 6 {
            c.step();
        }
        c.running.retain(|(_, n, _)| *n != 0);
        let ctx = baselines::BaselineContext {
            num_types: 1,
            cpu_kind: 0,
            gpu_kind: 1,
            profile: Vec::new(),
        };
        let mut cfg = c.nodes[0].cfg.clone();
        cfg.incarnation = 2;
        c.nodes[0] = NodeCore::new(cfg, baselines::by_name("min", &ctx).unwrap(), 99);
        for id in 0..18u64 {
            c.submit(0, id);
        }
        let mut steps = 0;
        while c.finished.len() < 18 && steps < 10_000 {
            c.step();
            steps += 1;
        }
        assert_eq!(c.finished.len(), 18);
        assert!(
            c.finished.values().all(|n| *n == 1),
            "a task ran to completion twice: {:?}",
            c.finished
        );
    }

    #[test]
    fn a_cancelled_task_stops_wherever_it_runs() {
        let mut c = Cluster::new(2, "min");
        for _ in 0..30 {
            c.step();
        }
        c.submit(0, 1);
        while c.running.is_empty() {
            c.step();
        }
        let runner = c.running[0].1;
        let other = 1 - runner;
        let acts = c.nodes[other].cancel(TaskId(1)).unwrap();
        c.act(other, acts);
        for _ in 0..20 {
            c.step();
        }
        assert!(
            c.running.is_empty(),
            "the runner did not stop the cancelled task"
        );
        assert!(c.finished.is_empty());
        for n in &c.nodes {
            assert!(matches!(
                n.tasks()[&TaskId(1)].state,
                TaskState::Done { .. }
            ));
        }
        assert!(c.nodes[0].cancel(TaskId(1)).is_none(), "already ended");
    }

    #[test]
    fn a_dead_node_loses_no_task() {
        let mut c = Cluster::new(3, "min");
        for _ in 0..30 {
            c.step();
        }
        for id in 0..24u64 {
            c.submit((id % 3) as usize, id);
        }
        // Run until node 2 runs something, then kill it.
        let mut guard = 0;
        while !c.running.iter().any(|(_, n, _)| *n == 2) && guard < 1000 {
            c.step();
            guard += 1;
        }
        let lost: BTreeSet<TaskId> = c
            .running
            .iter()
            .filter(|(_, n, _)| *n == 2)
            .map(|(_, _, t)| *t)
            .collect();
        assert!(!lost.is_empty());
        c.kill(2);
        let mut steps = 0;
        while c.finished.len() < 24 && steps < 10_000 {
            c.step();
            steps += 1;
        }
        assert_eq!(c.finished.len(), 24, "finished {:?}", c.finished.keys());
        assert!(c.finished.values().all(|n| *n == 1));
        for t in lost {
            let TaskState::Done { node, .. } = &c.nodes[0].tasks()[&t].state else {
                panic!("{t} not done");
            };
            assert_ne!(*node, NodeId(2), "{t} finished on the dead node");
        }
    }
}
