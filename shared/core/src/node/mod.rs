//! One agent's scheduling state as a sans-IO state machine: what the daemon drives with network
//! messages, executor events and the clock, and what tests drive with an in-memory network.
//!
//! The [`NodeCore`] keeps the tasks it has heard of (announced by any agent), its peers' last
//! heartbeats, its own running tasks, and one [`Protocol`] — the same decision protocol the
//! simulator drives. Each slot it builds a [`ClusterView`](crate::view::ClusterView) from that knowledge, asks its
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
//! pending. A node back from a lapsed lease claims nothing until a round is decided with every
//! member's proposal (its rounds and the other side's were out of step, and both may hold the
//! same task as pending). When a peer (re)joins, both exchange their pending tasks and their outcomes, so all
//! agents agree on who ran each task.

use crate::ledger::Ledger;
use crate::policy::Policy;
use crate::protocol::{Protocol, Round};
use crate::resources::Resources;
use crate::spec::TaskSpec;
use crate::task::{NodeId, TaskId};
use crate::wire::{Body, Envelope, NodeState, RunningState, WIRE_VERSION};
use std::collections::{BTreeMap, BTreeSet};

mod announce;
mod draining;
mod entropy;
pub mod gangs;
pub mod lease;
mod leave;
mod local;
pub mod messages;
pub mod preempt;
mod reconcile;
pub mod reports;
mod rounds;
mod state;
mod stats;
use preempt::Preemption;
use reconcile::Reconcile;
use state::{Copies, LeaseState, Membership, RoundState};
mod view;
pub use stats::NodeStats;

/// Settings of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// This node's id.
    pub me: NodeId,
    /// Name (from the configuration).
    pub name: String,
    /// Units offered to the cluster.
    pub capacity: Resources,
    /// The cluster's resource kind names, in the capacity's order: what specs name (in their
    /// profile hints, say), and where CPU, GPU and memory sit for the speed estimator
    /// ([`crate::estimate::KindMap::from_names`]).
    pub kind_names: Vec<String>,
    /// Each kind's grid step in its natural unit (the resource space's), sent in heartbeats: a
    /// peer with other steps is not heard, since its units mean other amounts (a box sharing
    /// GPUs in quarters and one counting whole devices). Empty: not said, not checked.
    pub steps: Vec<f64>,
    /// Placement labels.
    pub labels: BTreeMap<String, String>,
    /// Incarnation (increase on every restart).
    pub incarnation: u64,
    /// Number of task types (for the policy's features).
    pub num_types: usize,
    /// Pending window per node (as in the policy's training).
    pub window: usize,
    /// Resource kind whose units count as Tiresias's attained service (GPUs where there are).
    pub service_kind: usize,
    /// Slot length (ms): a new slot's first round starts this long after the previous one began.
    pub slot_ms: u64,
    /// Round deadline (ms) after proposing: while some member's proposal is missing, this node
    /// sends its own again after this long (then after growing gaps); it decides without that
    /// member only after the peer timeout.
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
    /// The address gang members on this box are reached at (rank 0's `MASTER_ADDR` when it
    /// runs here); empty: this box hosts no gang members ([`gangs`]).
    pub addr: String,
    /// How priority classes order the queues and elastic shares (aging in slots); every agent
    /// of a cluster must use the same, as every one computes every node's window.
    pub priorities: crate::ledger::Priorities,
    /// The kind converging tasks shrink in (the CPU kind), if this node shrinks them
    /// ([`crate::ledger::Ledger::apply_ceilings`]); a node's own choice, not the cluster's.
    pub shrink_kind: Option<usize>,
    /// Lower classes running here make room for waiting tasks of higher ones ([`preempt`]).
    pub preempt: bool,
}

impl NodeConfig {
    /// Node `me` (named `n<me>`, one task type, CPU and GPU kinds) offering `capacity`, with the
    /// short timings of the in-memory harness and the unit tests: slots of 200 ms, heartbeats
    /// every 50 ms, a peer timeout of 300 ms and an autonomy time of 1 s.
    pub fn short(me: NodeId, capacity: Resources) -> Self {
        Self {
            me,
            name: format!("n{}", me.0),
            capacity,
            kind_names: vec!["cpu".into(), "gpu".into()],
            steps: Vec::new(),
            labels: BTreeMap::new(),
            incarnation: 1,
            num_types: 1,
            window: 10,
            service_kind: 1,
            slot_ms: 200,
            round_ms: 50,
            heartbeat_ms: 50,
            peer_timeout_ms: 300,
            autonomy_ms: 1000,
            forget_ms: DEFAULT_FORGET_MS,
            known: BTreeSet::new(),
            lease_age_ms: None,
            addr: "127.0.0.1".into(),
            priorities: crate::ledger::Priorities::default(),
            shrink_kind: None,
            preempt: false,
        }
    }
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
        /// Allocation in grid units (a gang's: its members' here, added up).
        alloc: Resources,
        /// A gang's members here and their rendezvous; `None` for a single task.
        gang: Option<gangs::GangStart>,
    },
    /// Change the shares of a task running here (an elastic policy re-shared the node: after a
    /// start here, and at the end of a slot's rounds). The agent changes CPU and memory shares
    /// while the task runs, and restarts it with new devices when its GPU count changes.
    Resize {
        /// Task.
        task: TaskId,
        /// Its allocation from now on, in grid units.
        alloc: Resources,
    },
    /// Stop a task running here (a copy with a higher epoch, an outcome, a cancellation, or
    /// this node's lease lapsed).
    Stop {
        /// Task.
        task: TaskId,
    },
    /// Preempt a task running here for a higher class: its checkpoint signal (SIGTERM), its
    /// spec's grace, then a stop. Its end is no outcome (it is back in the queue).
    Preempt {
        /// Task.
        task: TaskId,
    },
    /// A peer's message was refused (for the driver to log): an id known with another task, or
    /// a peer whose resource steps differ from this node's.
    Refused {
        /// The task concerned, if one is.
        task: Option<TaskId>,
        /// Sender.
        from: NodeId,
        /// Why.
        reason: String,
    },
}

pub use crate::ledger::TaskState;

/// A task and what this node knows about it: the ledger's entry with this node's data.
pub type TaskEntry = crate::ledger::Entry<TaskMeta>;

/// What the agent keeps per task beside its state.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskMeta {
    /// Its spec (command, environment): what a node that wins it starts.
    pub spec: TaskSpec,
    /// Who may start it during a partition ([`lease`]); `None`: any quorum side.
    pub owner: Option<NodeId>,
    /// Highest epoch of any start known (0: never started).
    pub epoch: u64,
}

#[derive(Debug, Clone)]
struct Peer {
    /// Its latest heartbeat (capacity, free units, running copies, recent outcomes).
    state: NodeState,
    /// When it was last heard (ms), for the peer timeout.
    last_seen: u64,
}

/// One node's scheduling state machine.
pub struct NodeCore {
    /// Settings (identity, capacity, timings).
    cfg: NodeConfig,
    /// What proposes this node's claims each round (replaced by [`NodeCore::set_policy`]).
    policy: Box<dyn Policy>,
    /// The policy's randomness, seeded, so a node's decisions replay in tests.
    rng: crate::Rng,
    /// The decision protocol the simulator drives too.
    protocol: Protocol,
    /// Peers heard within the peer timeout, with their last heartbeat (the view's source).
    peers: BTreeMap<NodeId, Peer>,
    /// Every task this node knows, and the nodes it hears: the ledger the simulator keeps too.
    tasks: Ledger<TaskMeta>,
    /// Sequence number of this node's envelopes (a receiver tells messages apart by it).
    seq: u64,
    /// When this node last sent a heartbeat.
    last_heartbeat: Option<u64>,
    /// When the current slot's first round may start.
    slot_start: u64,
    /// First tick: a node proposes only after two heartbeat periods, so that a (re)started node
    /// first hears its peers and their answers to its re-announced tasks.
    first_tick: Option<u64>,
    /// Counters for metrics and benchmarks.
    stats: NodeStats,
    /// Learning mode: which of this node's claims lost and its rewards ([`NodeCore::learn`]).
    learning: Option<crate::experience::Outcomes>,
    /// How this node places the gangs it proposes ([`NodeCore::set_gangs`]).
    gangs: crate::ledger::GangPlacement,
    /// The latest `now` seen (for the view, which takes no clock).
    now: u64,
    /// Running tasks' latest reports, this node's and its peers' ([`reports`]).
    reports: BTreeMap<TaskId, reports::TaskReport>,
    /// Who the members are: those known, silent, taken over, restarted, and greeting them.
    members: Membership,
    /// The lease: whether a quorum holds, since when, and what its loss did.
    lease: LeaseState,
    /// The rounds: whether this node is in step, its proposals' timing, peers out of step.
    rounds: RoundState,
    /// What this node reconciles with its peers about copies and gangs.
    reconcile: Reconcile,
    /// The anti-entropy of task lists with the peers ([`entropy`]).
    entropy: entropy::Entropy,
    /// Copies with a process here, and those stopped whose end is awaited.
    copies: Copies,
    /// Checkpoints, the room kept for a waiting task, and what preemption cost.
    preemption: Preemption,
    /// This node is stopping on purpose ([`leave`]): the copies it asked to end (`None`: it is
    /// not leaving).
    leaving: Option<std::collections::BTreeSet<TaskId>>,
}

/// Round-latency samples kept for a driver that does not take them.
pub const MAX_LATENCIES: usize = 4096;

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
            rounds::protocol_config(&cfg),
        );
        let (elastic, floors) = (policy.elastic(), policy.floors());
        Self {
            rng: crate::seeded_rng(seed),
            policy,
            protocol,
            peers: BTreeMap::new(),
            tasks: {
                let mut l = Ledger::new(cfg.window, cfg.service_kind)
                    .with_priorities(cfg.priorities)
                    .with_shrink(cfg.shrink_kind)
                    .with_kinds(crate::estimate::KindMap::from_names(&cfg.kind_names));
                l.set_node(cfg.me, cfg.capacity.clone());
                l.set_gpu_model(cfg.me, crate::estimate::GpuModel::of_labels(&cfg.labels));
                l.set_all_elastic(elastic);
                l.set_all_floors(floors);
                l
            },
            seq: 0,
            last_heartbeat: None,
            slot_start: 0,
            first_tick: None,
            stats: NodeStats::default(),
            learning: None,
            gangs: crate::ledger::GangPlacement::default(),
            now: 0,
            reports: BTreeMap::new(),
            members: Membership {
                known: cfg.known.iter().copied().chain([cfg.me]).collect(),
                ..Membership::default()
            },
            lease: LeaseState::default(),
            rounds: RoundState::default(),
            reconcile: Reconcile::default(),
            entropy: entropy::Entropy::default(),
            copies: Copies::default(),
            preemption: Preemption::default(),
            leaving: None,
            cfg,
        }
    }

    /// Record what learning needs from this node (learning mode): which of its claims lost and
    /// its reward at every slot end. The driver keeps the policy's decisions itself and joins
    /// them with [`NodeCore::take_outcomes`] into the coordinator's experience.
    pub fn learn(&mut self) {
        self.learning = Some(crate::experience::Outcomes::default());
    }

    /// Outcomes recorded since the last call (empty when not learning).
    pub fn take_outcomes(&mut self) -> crate::experience::Outcomes {
        self.learning
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// How this box's GPU devices stand: `left` grid units on each, `per` a device, in kind
    /// `kind`. Its claims then state the packing prior ([`crate::ledger::Ledger::set_devices`]);
    /// a driver that shares GPUs in fractions calls it whenever its device pool changes.
    pub fn set_devices(&mut self, kind: usize, per: u32, left: Vec<u32>) {
        self.tasks.set_devices(self.cfg.me, kind, per, left);
    }

    /// Place the gangs this node proposes with `gangs` (placer and link speeds) instead of the
    /// core's default, pack-first over edge links.
    pub fn set_gangs(&mut self, gangs: crate::ledger::GangPlacement) {
        self.gangs = gangs;
    }

    /// Replace the policy (a new model version). Called between events, so the round in
    /// progress keeps the proposal the old policy made and the next one uses the new policy.
    pub fn set_policy(&mut self, policy: Box<dyn Policy>) {
        self.tasks.set_all_elastic(policy.elastic());
        self.tasks.set_all_floors(policy.floors());
        self.policy = policy;
    }

    /// The name of the policy that proposes this node's claims (`tapfinger`, a baseline's).
    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// This node's settings.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// Negotiation counters.
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// Round latencies (ms, from this node's proposal to the round's decision here) since the
    /// last call, oldest first.
    pub fn take_latencies(&mut self) -> Vec<u64> {
        self.rounds.latencies.drain(..).collect()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.cfg.me
    }

    /// Every task this node knows, by id.
    pub fn tasks(&self) -> &Ledger<TaskMeta> {
        &self.tasks
    }

    /// Start the size history from `book` (what this agent kept before a restart).
    pub fn restore_sizes(&mut self, book: crate::sizes::SizeBook) {
        self.tasks.set_sizes(book);
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
        self.tasks.free(self.cfg.me)
    }

    /// The free units this node offers its peers: none while it leaves.
    fn offered_free(&self) -> Resources {
        match self.leaving {
            Some(_) => Resources(vec![0; self.cfg.capacity.len()]),
            None => self.free(),
        }
    }

    /// Units allocated here (never above the capacity: the invariant the tests check).
    pub fn used(&self) -> Resources {
        self.tasks.used(self.cfg.me)
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
            Body::Ranges(_) => "ranges",
            Body::Ids(_) => "ids",
            Body::Failed { .. } => "failed",
            Body::Leaving { .. } => "leaving",
            Body::Preempted { .. } => "preempted",
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
            .running_on(self.cfg.me)
            .filter_map(|id| {
                let e = self.tasks.get(id)?;
                match &e.state {
                    TaskState::Running {
                        alloc,
                        progress,
                        started,
                        ..
                    } => Some(RunningState {
                        task: id,
                        alloc: alloc.clone(),
                        progress: *progress,
                        started: *started,
                        epoch: e.meta.epoch,
                        attained: e.attained,
                        report: self.report_of(id),
                    }),
                    _ => None,
                }
            })
            .collect();
        let hears = self
            .peers
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.last_seen) <= self.cfg.peer_timeout_ms)
            .map(|(id, p)| crate::wire::Heard {
                node: *id,
                incarnation: p.state.incarnation,
                echo: p.state.sent,
            })
            .collect();
        let gangs = self
            .tasks
            .gangs_on(self.cfg.me)
            .filter_map(|id| {
                let e = self.tasks.get(id)?;
                match &e.state {
                    TaskState::Gang { members, .. } => Some(crate::wire::GangRun {
                        task: id,
                        epoch: e.meta.epoch,
                        members: members.clone(),
                    }),
                    _ => None,
                }
            })
            .collect();
        let state = NodeState {
            gangs,
            addr: self.cfg.addr.clone(),
            name: self.cfg.name.clone(),
            labels: self.cfg.labels.clone(),
            // What it offers less what stopped copies still hold (a preemption's victims in
            // their grace): peers place and plan on what this box can give now, as its own
            // ledger does and as the simulator's one ledger does.
            capacity: self.copies.usable(&self.cfg.capacity),
            steps: self.cfg.steps.clone(),
            free: self.offered_free(),
            running,
            incarnation: self.cfg.incarnation,
            sent: now,
            hears,
            // A leaving node holds no lease for its peers: it takes no part in their rounds.
            lease: self.lease_held(now) && self.leaving.is_none(),
            recent: self.copies.recent.iter().cloned().collect(),
            digest: self.digest(),
        };
        self.envelope(Body::Heartbeat(state))
    }
}

/// A node core for unit tests: node `me` with `capacity`, deciding with the `min` baseline.
#[cfg(test)]
pub(crate) fn test_core(me: u32, capacity: Resources) -> NodeCore {
    let cfg = NodeConfig::short(NodeId(me), capacity);
    NodeCore::new(cfg, Box::new(crate::policy::MinPolicy), 0)
}

/// For unit tests: a 1-CPU task `id` (reachable on nodes 0 and 1) restored as running on `n`
/// with epoch `epoch`, as a journal would after a restart.
#[cfg(test)]
pub(crate) fn test_running_here(n: &mut NodeCore, id: u64, epoch: u64) {
    let me = n.id();
    test_running_on(n, id, me, epoch);
}

/// For unit tests: as [`test_running_here`], running on `node`.
#[cfg(test)]
pub(crate) fn test_running_on(n: &mut NodeCore, id: u64, node: NodeId, epoch: u64) {
    let task = test_task(id);
    let spec = TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 1 }\n").unwrap();
    let running = TaskState::Running {
        node,
        alloc: Resources(vec![1, 0]),
        progress: 0.0,
        started: 0,
    };
    n.restore(task, spec, running, Some(node), epoch);
}

/// For unit tests: a 1-CPU task `id`, reachable on nodes 0 and 1.
#[cfg(test)]
pub(crate) fn test_task(id: u64) -> crate::task::Task {
    crate::task::Task {
        id: TaskId(id),
        ty: crate::TaskTypeId(0),
        min_demand: Resources(vec![1, 0]),
        max_demand: None,
        priority: 0,
        reachable: vec![NodeId(0), NodeId(1)],
        arrival: 0,
        gang: None,
    }
}
