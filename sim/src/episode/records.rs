//! What an episode reports and how it fails: its records per task and per slot, its result,
//! its errors, and the [`Observer`] that watches it run.

use tapfinger::view::ClusterView;
use tapfinger::{NodeId, ProtocolError, Resources, Round, RoundOutcome, TaskId};

/// Errors that end an episode.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A policy returned something the rules forbid (a bug in the policy).
    #[error("policy {policy} on agent {agent} in slot {slot}: {reason}")]
    PolicyViolation {
        /// Policy name.
        policy: String,
        /// Agent.
        agent: NodeId,
        /// Slot.
        slot: u64,
        /// What it did wrong.
        reason: String,
    },
    /// The number of policies does not match the number of nodes.
    #[error("{policies} policies given for {nodes} nodes")]
    PolicyCount {
        /// Policies.
        policies: usize,
        /// Nodes.
        nodes: usize,
    },
    /// Two protocol instances decided a round differently (a protocol bug).
    #[error("protocol instances disagree on round {0}")]
    Divergence(Round),
    /// A protocol instance refused a message or did not decide.
    #[error("protocol error in round {round}: {source}")]
    Protocol {
        /// Round.
        round: Round,
        /// Cause.
        source: ProtocolError,
    },
    /// The round did not complete (a protocol bug).
    #[error("round {0} was not decided by every agent")]
    Undecided(Round),
    /// The episode hit its slot limit.
    #[error(
        "episode did not finish within {slots} slots: {unfinished} task(s) unfinished ({stalled} stalled below their true need)"
    )]
    DidNotFinish {
        /// Limit.
        slots: u64,
        /// Tasks not done.
        unfinished: usize,
        /// Of which running below their need.
        stalled: usize,
    },
}

/// Watches an episode as it runs (audits, training data collection). Every method has a no-op
/// default.
pub trait Observer {
    /// Whether [`Observer::view`] should be called (building a snapshot costs time).
    fn wants_views(&self) -> bool {
        false
    }
    /// The cluster after every decision step and after every elastic re-allocation.
    fn view(&mut self, _view: &ClusterView) {}
    /// The view every agent decides from at each decision step (only if
    /// [`Observer::wants_views`]).
    fn decision_view(&mut self, _view: &ClusterView) {}
    /// End of a slot's run: a running task's progress, and whether it finished.
    fn progressed(&mut self, _slot: u64, _task: TaskId, _progress: f64, _finished: bool) {}
    /// End of a slot's run: the plateau detector judged a running task converging or not
    /// (shrinking on and its type has a curve), as an agent's executor reports it.
    fn judged(&mut self, _slot: u64, _task: TaskId, _converging: bool) {}
    /// Every decided round, as all agents decided it.
    fn round(&mut self, _outcome: &RoundOutcome) {}
    /// End of a slot: each agent's reward for it (−tasks queued or running at its node).
    fn slot_end(&mut self, _slot: u64, _rewards: &[f64]) {}
    /// An elastic node re-allocated its running tasks after the slot's rounds: the tasks whose
    /// allocation changed, with the allocation they run with from now on.
    fn reallocated(&mut self, _slot: u64, _node: NodeId, _changed: &[(TaskId, Resources)]) {}
    /// The recorder of the cluster's twin to feed the tasks of every slot, as they run it
    /// (after the slot's decisions and device placement), if this observer keeps one.
    fn twin(&mut self) -> Option<&mut tapfinger::twin::Recorder> {
        None
    }
    /// The episode ended; `estimator` holds what the cluster's speed estimator learned.
    fn ended(&mut self, _slots: u64, _estimator: &tapfinger::estimate::Estimator) {}
    /// The episode ended; `book` holds what the cluster's size book learned (after
    /// [`Observer::ended`]).
    fn sizes(&mut self, _book: &tapfinger::sizes::SizeBook) {}
    /// Whether [`Observer::expected`] should be called (the estimates cost time).
    fn wants_estimates(&self) -> bool {
        false
    }
    /// After a slot's arrivals joined the queues: the tasks that arrived, and the ledger's
    /// start and finish estimates of every task then ([`tapfinger::ledger::Ledger::expected`],
    /// slots from `slot`), as an agent's API would show them.
    fn expected(
        &mut self,
        _slot: u64,
        _arrived: &[TaskId],
        _expected: &std::collections::BTreeMap<TaskId, tapfinger::ledger::Expected>,
    ) {
    }
}

/// An observer that watches nothing.
pub struct NoObserver;

impl Observer for NoObserver {}

/// What happened to one task.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TaskRecord {
    /// Task id.
    pub id: u64,
    /// Type name index.
    pub ty: u16,
    /// Arrival slot.
    pub arrival: u64,
    /// Slot of the (last) start.
    pub start: u64,
    /// End of the slot in which it finished.
    pub finish: u64,
    /// Node it finished on.
    pub node: u32,
    /// Completion time in slots (finish − arrival).
    pub jct: u64,
    /// Best isolated completion time in slots on any reachable node.
    pub lower_bound: u64,
    /// Its least area per resource kind: slots × its share of the cluster's whole capacity of
    /// that kind, at its thriftiest allocation on any reachable node ([`crate::bound`]).
    #[serde(skip)]
    pub area: Vec<f64>,
    /// Failed runs (below the true need in `fail` mode).
    pub failures: u32,
    /// Members of a gang (multi-node job); 0 for a single task.
    pub members: u32,
    /// Priority class as submitted (0 is the highest).
    pub priority: u8,
    /// Its model's final accuracy (its type's learning curve at the end), if it has a curve.
    pub accuracy: Option<f64>,
    /// Its accuracy when the plateau detector first found it converging, if it did.
    pub accuracy_at_plateau: Option<f64>,
    /// Node-slots of resources it held ([`crate::learning`]).
    pub resource_time: f64,
    /// Times it was preempted (to make room for a higher class).
    pub preemptions: u32,
    /// Work it lost to preemption, in its own work (1: a whole run).
    pub work_lost: f64,
    /// Times its GPU count changed while it ran (an elastic re-share): on an agent, each one
    /// restarts the task with its new devices.
    pub gpu_changes: u32,
    /// Its cluster reward, with the scenario's weights ([`crate::learning`]).
    pub cluster_reward: f64,
    /// Its work over its type's: its data's size (1 without heavy-tailed sizes; the simulator's
    /// secret, never in a view).
    pub size: f64,
}

/// Per-slot measurements.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SlotRecord {
    /// Slot.
    pub slot: u64,
    /// Tasks arrived and not finished (at the end of the slot's decisions).
    pub in_system: u32,
    /// Of those, tasks not started (waiting in the queues).
    pub waiting: u32,
    /// Allocated / capacity per kind, summed over nodes.
    pub utilization: Vec<f64>,
    /// Contested tasks in the slot's rounds.
    pub conflicts: u32,
    /// Tasks started.
    pub commits: u32,
    /// Decision steps (rounds).
    pub steps: u32,
}

/// The outcome of one episode.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EpisodeResult {
    /// Policy name.
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// One record per task, by id.
    pub tasks: Vec<TaskRecord>,
    /// One record per slot.
    pub slots: Vec<SlotRecord>,
    /// Sum of per-slot rewards per agent (−tasks queued or running at that node).
    pub returns: Vec<f64>,
    /// Protocol messages delivered.
    pub messages: u64,
    /// Rooms made by preemption whose waiting task had not started by the end of the next
    /// slot's rounds (the rule says none: a node stops tasks only when the waiting task then fits).
    pub rooms_unused: u64,
    /// The task-volume forecast, interval by interval (`compare --forecast`; empty without).
    pub forecasts: Vec<super::ForecastPoint>,
    /// What the speed estimator the policies read held of each task class at the end (as an
    /// agent's `GET /v1/classes` shows it, less the names).
    pub estimates: Vec<tapfinger::estimate::ClassSummary>,
}
