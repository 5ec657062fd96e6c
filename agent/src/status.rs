//! What an agent's loop publishes after every step ([`Status`]): the snapshot the API, the
//! dashboard, the metrics and the tests read. Its own module, below both the loop that writes it
//! and the readers.

use std::collections::BTreeMap;
use tapfinger::ledger::Ledger;
use tapfinger::node::TaskState;
use tapfinger::{NodeId, Resources, TaskId};

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
    /// Connections and requests refused from peers off the allowlist.
    pub refused: u64,
    /// What the network carried: messages taken directly and by relay, copies, frames dropped
    /// for a slow peer.
    pub traffic: crate::net::Traffic,
    /// Negotiation counters (rounds, claims, conflicts, messages, round latency).
    pub stats: tapfinger::node::NodeStats,
    /// Policy version and online learning (None: no coordinator configured).
    pub policy: Option<crate::online::PolicyStatus>,
    /// The name of the policy deciding here now (the node core's).
    pub deciding: String,
    /// This node's name.
    pub name: String,
    /// The labels of this node and its live peers (each box's GPU model among them,
    /// `gpu_model`, as NVML names it unless configured).
    pub labels: BTreeMap<NodeId, BTreeMap<String, String>>,
    /// This node's current slot and the slot length (ms).
    pub slot: u64,
    /// Slot length (ms).
    pub slot_ms: u64,
    /// The cluster's pending tasks in the order nodes take them: effective priority class (0
    /// first; aging moves a waiting task up), then arrival, then id.
    pub queue: Vec<Queued>,
    /// The priority class of every known task whose class is not 0.
    pub classes: BTreeMap<TaskId, u8>,
    /// What the tasks running here report besides progress.
    pub reports: BTreeMap<TaskId, crate::reports::Report>,
    /// The latest reports of the tasks running on its peers (from their heartbeats).
    pub shared_reports: BTreeMap<TaskId, tapfinger::node::reports::TaskReport>,
    /// Every task's name and class, by id.
    pub names: BTreeMap<TaskId, TaskNames>,
    /// The names of the boxes this agent knows (itself and its live peers), by id.
    pub box_names: BTreeMap<NodeId, String>,
    /// Each resource kind's grid step in its natural unit (0.25: a GPU unit is a quarter).
    pub steps: Vec<f64>,
    /// What the tasks running here use of their GPUs (NVML, sampled every 2 s).
    pub gpu_use: BTreeMap<TaskId, crate::gpu_use::TaskGpuUse>,
    /// Tasks this agent preempted, with what it cost them.
    pub preempted: BTreeMap<TaskId, tapfinger::node::preempt::Preempted>,
    /// What preemption cost each task on every box, as the boxes told it (this one's included):
    /// what the API shows of a task, on any box.
    pub preempted_everywhere: BTreeMap<TaskId, tapfinger::node::preempt::Preempted>,
    /// Tasks this agent's ledger sent back to the queue, by reason
    /// ([`tapfinger::ledger::Ledger::requeue`]): its own and those its peers told it of.
    pub requeued: BTreeMap<tapfinger::ledger::Requeue, u64>,
    /// The latest task-volume forecast, if one was made.
    pub forecast: Option<tapfinger::forecast::outlook::Outlook>,
    /// What the speed estimator holds of each task class ([`estimates_of`]).
    pub estimates: Vec<ClassInfo>,
    /// Each running task's expected finish and each waiting task's expected start and finish,
    /// in slots from `slot` ([`tapfinger::ledger::Ledger::expected`]).
    pub expected: std::sync::Arc<BTreeMap<TaskId, tapfinger::ledger::Expected>>,
    /// How far this box's start estimates were from the starts, in slots
    /// ([`tapfinger::ledger::StartErrors`]; none until a task it estimated started).
    pub start_error: Option<tapfinger::ledger::StartError>,
    /// Whether the journal takes writes (none: the agent keeps no journal).
    pub storage: Option<crate::store::Health>,
    /// The addresses this agent listens on, each with its peer id (`…/p2p/<peer id>`): what
    /// another box's `--bootstrap` takes.
    pub listening: Vec<String>,
}

/// The pending tasks of `tasks` in the order nodes take them at `slot` ([`Status::queue`]).
pub fn queue_of<M>(tasks: &Ledger<M>, slot: u64) -> Vec<Queued> {
    let p = tasks.priorities();
    let mut q: Vec<(u8, Queued)> = tasks
        .iter()
        .filter(|(_, e)| e.state == TaskState::Pending)
        .map(|(id, e)| {
            let queued = Queued {
                id,
                priority: e.task.priority,
                arrival: e.task.arrival,
                min_demand: e.task.min_demand.clone(),
            };
            (p.class(&e.task, slot), queued)
        })
        .collect();
    q.sort_by_key(|(c, t)| (*c, t.arrival, t.id));
    q.into_iter().map(|(_, t)| t).collect()
}

/// What people call a task: its spec's name (else its program's file name) and its class (the
/// spec's `type`; empty: none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskNames {
    /// Its name.
    pub name: String,
    /// Its class.
    pub class: String,
    /// The slot it arrived in.
    pub arrival: u64,
}

/// A spec's name, else its program's file name.
pub fn task_name(spec: &tapfinger::spec::TaskSpec) -> String {
    if !spec.name.is_empty() {
        return spec.name.clone();
    }
    spec.command
        .first()
        .and_then(|p| std::path::Path::new(p).file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every task's names ([`Status::names`]).
pub fn names_of(tasks: &Ledger<tapfinger::node::TaskMeta>) -> BTreeMap<TaskId, TaskNames> {
    tasks
        .iter()
        .map(|(id, e)| {
            let names = TaskNames {
                name: task_name(&e.meta.spec),
                class: e.meta.spec.task_type.clone(),
                arrival: e.task.arrival,
            };
            (id, names)
        })
        .collect()
}

/// Every task's class where it is not 0 ([`Status::classes`]).
pub fn classes_of<M>(tasks: &Ledger<M>) -> BTreeMap<TaskId, u8> {
    tasks
        .iter()
        .filter(|(_, e)| e.task.priority > 0)
        .map(|(id, e)| (id, e.task.priority))
        .collect()
}

/// What the ledger's speed estimator holds of each class, named by a known task's spec
/// (`type`), else by the agent's configured type list, else `#ID` (a class whose tasks
/// have all left the ledger and which no type list names), each with the name of the GPU
/// model its samples ran on as the boxes' `gpu_model` labels in `labels` give it.
pub fn estimates_of(
    tasks: &Ledger<tapfinger::node::TaskMeta>,
    types: &[String],
    labels: &BTreeMap<tapfinger::NodeId, BTreeMap<String, String>>,
) -> Vec<ClassInfo> {
    use tapfinger::estimate::{GPU_MODEL_LABEL, GpuModel};
    let models: BTreeMap<GpuModel, &str> = labels
        .values()
        .filter_map(|l| l.get(GPU_MODEL_LABEL))
        .map(|n| (GpuModel::of(n), n.as_str()))
        .collect();
    let names: BTreeMap<u16, &str> = tasks
        .iter()
        .map(|(_, e)| (e.task.ty.0, e.meta.spec.task_type.as_str()))
        .collect();
    tasks
        .estimator()
        .summary()
        .into_iter()
        .map(|c| {
            let id = c.class.0;
            let name = names
                .get(&id)
                .map(|n| (*n).to_string())
                .or_else(|| types.get(usize::from(id)).cloned())
                .unwrap_or_else(|| format!("#{id}"));
            let gpu_model = models
                .get(&c.gpu_model)
                .map(|n| (*n).to_string())
                .unwrap_or_default();
            ClassInfo {
                name,
                gpu_model,
                estimate: c,
            }
        })
        .collect()
}

/// One task class as this agent's speed estimator holds it (every agent holds the same, from
/// the same progress reports).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassInfo {
    /// The class's name (a spec's `type`; empty: tasks that name none).
    pub name: String,
    /// The GPU model its samples here ran on (a box's `gpu_model` label; empty: none named,
    /// or a class that uses no GPU): the estimator learns a class per model.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "gpu_model_name"
    )]
    pub gpu_model: String,
    /// What the estimator holds of it (`class` is its id: the index in the cluster's type
    /// list, else a hash of the name).
    #[serde(flatten)]
    pub estimate: tapfinger::estimate::ClassSummary,
}

/// A pending task as the dashboard shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    /// The task.
    pub id: TaskId,
    /// Priority class (0 highest).
    pub priority: u8,
    /// Slot it was submitted in (at the agent that accepted it).
    pub arrival: u64,
    /// Its minimum demand.
    pub min_demand: Resources,
}
