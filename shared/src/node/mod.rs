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
//! Failure handling (details in [`lease`] and [`messages`]). Every task has an **owner** (the
//! node that accepted it, then the node that runs it) and an **epoch** (a fencing token: each
//! start carries an epoch above every one the starter knew). A node keeps its tasks while it
//! holds its lease (a quorum of the known members heard within `autonomy_ms`); a silent peer's
//! tasks are taken over only after its lease has lapsed plus the autonomy time plus a grace, and
//! only by a side that holds a quorum, so a cut-off box and its peers never run two copies at
//! once. A copy that meets a higher epoch, or an outcome, stops. A restarted peer (new
//! incarnation) lists the copies it adopted; what it ran before and does not list goes back to
//! pending. When a peer (re)joins, both exchange their pending tasks and their outcomes, so all
//! agents agree on who ran each task.

use crate::policy::{Policy, to_proposal};
use crate::protocol::{Output, Protocol, ProtocolConfig, Round, RoundOutcome};
use crate::resources::Resources;
use crate::spec::TaskSpec;
use crate::task::{NodeId, Task, TaskId};
use crate::wire::{Body, CANCELLED, Envelope, NodeState, Outcome, RunningState, WIRE_VERSION};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub mod lease;
pub mod messages;
mod stats;
mod view;
pub use stats::{LATENCY_BUCKETS_MS, NodeStats};

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
    /// Silence after which a peer is considered gone (ms): it leaves the protocol's members.
    pub peer_timeout_ms: u64,
    /// Autonomy time (ms): how long a node without a quorum keeps running its tasks, and how
    /// much longer than a lease its peers wait before taking a silent node's tasks over.
    pub autonomy_ms: u64,
    /// Silence after which a member is forgotten (no longer counts toward the quorum).
    pub forget_ms: u64,
    /// Members known from an earlier run (the driver persists [`NodeCore::known`]).
    pub known: BTreeSet<NodeId>,
    /// How long before its first tick this node last held a quorum, as the driver recorded it
    /// (ms); `None` if it never did (a fresh node).
    pub lease_age_ms: Option<u64>,
}

/// Default autonomy time: two minutes. A box cut off keeps its tasks that long; a dead box's
/// tasks wait that long (plus the peer timeout) before they run elsewhere.
pub const DEFAULT_AUTONOMY_MS: u64 = 120_000;
/// Default time after which a silent member is forgotten: one day.
pub const DEFAULT_FORGET_MS: u64 = 86_400_000;

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
    /// Stop a task running here (a copy with a higher epoch, an outcome, a cancellation, or
    /// this node's lease lapsed).
    Stop {
        /// Task.
        task: TaskId,
    },
    /// A peer's message was refused (for the driver to log): an id known with another task.
    Refused {
        /// Task id.
        task: TaskId,
        /// Sender.
        from: NodeId,
        /// Why.
        reason: String,
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
    /// Finished (exit code, if any) on `node`, by the copy of `epoch` ([`CANCELLED`]: cancelled
    /// by a user at `node`).
    Done {
        /// Node.
        node: NodeId,
        /// Exit code (`Some(0)`: succeeded; otherwise failed).
        code: Option<i32>,
        /// Epoch of the copy that finished.
        epoch: u64,
    },
}

impl TaskState {
    /// Whether it finished with exit code 0.
    pub fn succeeded(&self) -> bool {
        matches!(self, TaskState::Done { code: Some(0), epoch, .. } if *epoch != CANCELLED)
    }
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
    /// Who may start it during a partition ([`lease`]); `None`: any quorum side.
    pub owner: Option<NodeId>,
    /// Highest epoch of any start known (0: never started).
    pub epoch: u64,
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
    /// The latest `now` seen (for the view, which takes no clock).
    now: u64,
    /// Members for the quorum (this node, nodes heard, persisted ones), and whether that changed.
    known: BTreeSet<NodeId>,
    known_changed: bool,
    /// Members not heard within the peer timeout: when they were last heard (or first missed).
    silent: BTreeMap<NodeId, u64>,
    /// Silent members whose tasks were taken over already.
    taken_over: BTreeSet<NodeId>,
    /// Each peer's last incarnation (kept across silences, to tell a restart).
    incarnations: BTreeMap<NodeId, u64>,
    /// When a quorum last held (may be before this run: the driver's record).
    last_quorum: Option<i128>,
    /// The lease lapsed and this node stopped its copies.
    lease_lost: bool,
    /// No tick yet: the first one sets `last_quorum` from the driver's record.
    first_lease_tick: bool,
    /// The latest outcomes of tasks run here, repeated in heartbeats.
    recent: std::collections::VecDeque<Outcome>,
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
            now: 0,
            known: cfg.known.iter().copied().chain([cfg.me]).collect(),
            known_changed: false,
            silent: BTreeMap::new(),
            taken_over: BTreeSet::new(),
            incarnations: BTreeMap::new(),
            last_quorum: None,
            lease_lost: false,
            first_lease_tick: true,
            recent: std::collections::VecDeque::new(),
            cfg,
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

    /// This node's settings.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
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
            Body::Finished(_) => "finished",
            Body::Outcomes(_) => "outcomes",
            Body::Want(_) => "want",
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
                    epoch: e.epoch,
                }),
                _ => None,
            })
            .collect();
        let hears = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.last_seen) <= self.cfg.peer_timeout_ms)
            .map(|(id, _)| *id)
            .collect();
        let state = NodeState {
            name: self.cfg.name.clone(),
            labels: self.cfg.labels.clone(),
            capacity: self.cfg.capacity.clone(),
            free: self.free(),
            running,
            incarnation: self.cfg.incarnation,
            hears,
            recent: self.recent.iter().cloned().collect(),
        };
        self.envelope(Body::Heartbeat(state))
    }

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
        if self.tasks.contains_key(&id) {
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
            TaskState::Running { .. } | TaskState::Done { .. } => None,
        };
        if state != TaskState::Pending {
            self.protocol.mark_committed(id);
        }
        self.tasks.insert(
            id,
            TaskEntry {
                task: Arc::new(task),
                spec,
                state,
                owner,
                epoch,
            },
        );
        body.map(|b| vec![self.envelope(b)]).unwrap_or_default()
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
            epoch: CANCELLED,
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
        let epoch = t.epoch;
        t.state = TaskState::Done {
            node: self.cfg.me,
            code,
            epoch,
        };
        let o = Outcome {
            task,
            node: self.cfg.me,
            epoch,
            exit_code: code,
        };
        if self.recent.len() >= crate::wire::MAX_RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(o.clone());
        vec![self.envelope(Body::Finished(o))]
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
                t.owner = None;
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
        self.now = self.now.max(now);
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
            // Out of the rounds at once; its tasks stay its own until a takeover ([`lease`]).
            if let Some(p) = self.peers.remove(&id) {
                self.silent.insert(id, p.last_seen);
            }
            let outputs = self.protocol.remove_member(id);
            out.extend(self.handle(outputs, now));
        }
        out.extend(self.tick_leases(now));
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
            // Without a lease this node starts nothing, but still passes so rounds go on.
            Some(v) if self.lease_held(now) => {
                let d = self.policy.decide(&v, &mut self.rng);
                to_proposal(&d, &v).unwrap_or(crate::protocol::Proposal::Pass)
            }
            _ => crate::protocol::Proposal::Pass,
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
        // A round decided at its deadline without some members' proposals may have been decided
        // otherwise by a member that missed ours (rounds out of step after a partition heals, or
        // a node that just joined): it starts nothing, so a task never starts twice at once. The
        // tasks are claimable again in the next round.
        let tentative = !outcome.missing.is_empty();
        if tentative {
            self.stats.rounds_held_back += u64::from(!outcome.commits.is_empty());
            for c in &outcome.commits {
                self.protocol.release(c.task);
            }
        }
        for c in outcome.commits.iter().filter(|_| !tentative) {
            let Some(t) = self.tasks.get_mut(&c.task) else {
                continue;
            };
            if matches!(t.state, TaskState::Done { .. }) {
                continue;
            }
            // A new start: an epoch above every one known for the task (a fencing token).
            t.epoch += 1;
            t.owner = Some(c.agent);
            t.state = TaskState::Running {
                node: c.agent,
                alloc: c.alloc.clone(),
                progress: 0.0,
                started: outcome.round.slot,
            };
            if c.agent == self.cfg.me {
                let spec = t.spec.clone();
                let epoch = t.epoch;
                out.push(Action::Start {
                    task: c.task,
                    spec,
                    alloc: c.alloc.clone(),
                });
                out.push(self.envelope(Body::Started {
                    task: c.task,
                    alloc: c.alloc.clone(),
                    epoch,
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
}

#[cfg(test)]
mod tests;
