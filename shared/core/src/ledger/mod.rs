//! The cluster ledger: the one record of tasks and nodes that both drivers keep, so that the
//! simulator's result is the agents' result.
//!
//! It holds every task's lifecycle ([`TaskState`]), each node's pending queue in window order,
//! its running tasks and its used units, and from these builds the [`ClusterView`](crate::view::ClusterView) a policy
//! decides from ([`Ledger::view`]), the per-slot reward ([`Ledger::reward`]), Tiresias's attained
//! service ([`Ledger::accrue_service`]) and elastic re-allocation ([`Ledger::rebalance`], see
//! [`Ledger::set_elastic`] for what an elastic node shows). The
//! simulator keeps one ledger for the whole cluster; every agent's [`crate::node::NodeCore`]
//! keeps one with what it knows. A driver never changes a state by hand: every change goes
//! through [`Ledger::set_state`] (or the narrower methods here), which keeps the indices right.
//!
//! Definitions, stated once:
//! - **Window order** ([`Priorities`], [`rank`]): the highest priority class first (0;
//!   a waiting task moves up a class per so many slots, `order`), then the oldest arrival; tasks of the same age in an order of each node's own ([`rank`], a hash
//!   of task and node), so that agents whose windows hold the same tasks do not all claim the
//!   same one and lose the round to each other. Every node's window is the first `window` tasks
//!   of its queue that the driver lets it start. The simulator and the agents order alike.
//! - **Free units** of a node: its capacity minus the allocations of the tasks running there.
//! - **Reward** of a node for a slot: minus the tasks running on it and minus every pending task
//!   it could run (its whole queue, window and overflow). The TapFinger objective: summed over
//!   slots, a node's return is minus the time its tasks spent in the system. With
//!   [`Ledger::with_cluster_reward`] (RLPTO's) it also pays for the resources its tasks hold and
//!   earns the accuracy they gain (`ledger/outlook.rs`).
//! - **Forecast**: the expected arrivals of the next intervals the driver sets
//!   ([`Ledger::set_forecast`]), carried by every view.
//! - **Gangs** (tasks with [`Task::gang`]): a pending gang is in no node's queue (one box
//!   proposes it whole by the rule of [`Ledger::gang_proposal`]; `reachable` names the boxes
//!   its members may use); a running one holds
//!   every member's units on its box ([`TaskState::Gang`]).
//! - **Attained service** (Tiresias): the units of the service kind (GPUs where the cluster has
//!   them) a task held, summed over the slots it ran.
//! - **Shrinking** (RLPTO, off unless asked): a converging task gives up a CPU a slot
//!   ([`Ledger::shrink_step`]).
//!
//! `M` is the driver's own data per task (the agent: spec, owner, epoch; the simulator: its
//! records); the ledger never reads it.

use crate::resources::Resources;
use crate::task::{NodeId, Task, TaskId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod arrivals;
mod elastic;
mod gangs;
mod nodes;
mod observe;
mod order;
mod outlook;
mod packing;
mod preempt;
mod requeue;
mod reserve;
mod shrink;
mod sizes;
mod start_errors;
mod view;
mod when;
use elastic::{add_each, sub_each};
pub use gangs::{GANG_TRIES, GangPlacement};
pub use order::{Priorities, rank};
pub use outlook::RewardWeights;
pub use packing::MAX_SHAPES;
pub use preempt::Preemption;
pub use requeue::Requeue;
pub use start_errors::{StartError, StartErrors};
pub use view::MayStart;
pub use when::{Expected, MAX_ESTIMATED};

/// Where a task stands.
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
    /// A gang (a multi-node task) running as `members`, in rank order: each member's node and
    /// allocation. Every member's units are held on its node, all of them from the same
    /// moment to the same moment: a gang is never partly placed.
    Gang {
        /// Each member's node and allocation, in rank order.
        members: Vec<(NodeId, Resources)>,
        /// Progress in [0, 1].
        progress: f64,
        /// Slot in which it started.
        started: u64,
    },
    /// Finished (exit code, if any) on `node`, by the copy of `epoch` ([`crate::wire::CANCELLED`]:
    /// cancelled by a user at `node`).
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
        matches!(self, TaskState::Done { code: Some(0), epoch, .. } if *epoch != crate::wire::CANCELLED)
    }

    /// The node it runs on, if it runs (a gang: its first member's, the PS host).
    pub fn running_on(&self) -> Option<NodeId> {
        match self {
            TaskState::Running { node, .. } => Some(*node),
            TaskState::Gang { members, .. } => members.first().map(|(n, _)| *n),
            _ => None,
        }
    }
}

/// A task in the ledger. Drivers read it; they change `meta` through [`Ledger::meta_mut`] and the
/// state only through the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry<M> {
    /// The task as submitted (shared with the views built from it).
    pub task: Arc<Task>,
    /// Where it stands.
    pub state: TaskState,
    /// Attained service so far (see the module doc); kept across re-queues.
    pub attained: f64,
    /// The last progress the speed estimator saw of the running copy: (progress, time in slots,
    /// allocation); `None` until its first observation.
    pub observed: Option<(f64, f64, Resources)>,
    /// Times it went from waiting to running (a run believed started counts too).
    pub runs: u32,
    /// Its work done so far, in slots at its minimum demand ([`Ledger::accrue_service`]): the
    /// size every class's tasks share; kept across re-queues.
    pub work: f64,
    /// The same in units × slots of the service kind (`work` is this over the minimum): whole
    /// numbers summed exactly, so that a sum slot by slot and a runner's count divided once
    /// come to the same bits in every driver.
    pub(super) held: f64,
    /// Who submitted it and which recurring job it is ([`Ledger::set_identity`]).
    pub identity: Arc<crate::sizes::Identity>,
    /// The driver's data.
    pub meta: M,
}

/// Why a ledger change was refused (nothing changed).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LedgerError {
    /// No such task.
    #[error("unknown task {0}")]
    UnknownTask(TaskId),
    /// A re-allocation of a task that does not run on the node.
    #[error("re-allocated {task}, which does not run on node {node}")]
    NotRunningHere {
        /// Task.
        task: TaskId,
        /// Node.
        node: NodeId,
    },
    /// A re-allocation below the task's floor (its minimum demand unless a claim set a higher
    /// one) or above its cap.
    #[error("re-allocation {alloc} for {task} is outside [min {min}, cap {cap}]")]
    OutOfBounds {
        /// Task.
        task: TaskId,
        /// Allocation asked for.
        alloc: Resources,
        /// Its floor.
        min: Resources,
        /// Its cap on this node.
        cap: Resources,
    },
    /// Re-allocations that do not fit the node together.
    #[error("re-allocations total {total}, above the node's capacity {capacity}")]
    OverCapacity {
        /// Sum of the allocations.
        total: Resources,
        /// The node's capacity.
        capacity: Resources,
    },
}

impl<M> std::ops::Index<&TaskId> for Ledger<M> {
    type Output = Entry<M>;

    /// The task; panics if unknown (as a map's index does).
    fn index(&self, id: &TaskId) -> &Entry<M> {
        &self.tasks[id]
    }
}

/// One node's books.
#[derive(Debug, Clone)]
struct Book {
    /// Units the node offers (zeros until the node itself is known: a peer's running task can
    /// be heard of before the peer's heartbeat).
    capacity: Resources,
    /// Sum of the allocations of the tasks running here (kept as tasks start and end).
    used: Resources,
    /// Its GPU model ([`Ledger::set_gpu_model`]): the estimator learns each class per model.
    gpu: crate::estimate::GpuModel,
    /// Sum of the floors of the tasks running here (their minimum demands unless a claim set a
    /// higher floor, [`Ledger::set_floors`]): an elastic node's claimable units are its capacity
    /// less these.
    min_used: Resources,
    /// Whether the node shares elastically (see [`Ledger::set_elastic`]).
    elastic: bool,
    /// Whether a claim here sets its task's floor (see [`Ledger::set_floors`]).
    floors: bool,
    /// Whether the node is in the views (the agent's live peers; every node in the simulator).
    /// Books of nodes that are not live stay, so their running tasks keep their place.
    live: bool,
    /// Pending tasks this node could run, in queue order ([`order`]).
    queue: BTreeSet<order::QueueKey>,
    /// Tasks running here, by id (the view lists them in this order).
    running: BTreeSet<TaskId>,
    /// Units held by gang members here (in `used` and `min_used` too: a member's units are
    /// fixed while its gang runs, no re-share takes them).
    held: Resources,
    /// Gangs with a member here, by id.
    gangs: BTreeSet<TaskId>,
}

/// The ledger (module doc).
#[derive(Debug, Clone)]
pub struct Ledger<M> {
    /// Pending tasks per node a policy sees (what its network was trained for).
    window: usize,
    /// How priority classes order the queues.
    priorities: Priorities,
    /// The resource kind whose units count as attained service.
    service_kind: usize,
    /// Every task, by id (ordered: views and rewards must not depend on hashing).
    tasks: BTreeMap<TaskId, Entry<M>>,
    /// Every node ever heard of, by id.
    nodes: BTreeMap<NodeId, Book>,
    /// The online speed estimator, fed by every running task's observed progress.
    estimator: crate::estimate::Estimator,
    /// Whether nodes first heard of share elastically ([`Ledger::set_all_elastic`]).
    all_elastic: bool,
    /// Whether claims on nodes first heard of set floors ([`Ledger::set_all_floors`]).
    all_floors: bool,
    /// Running tasks' floors above their minimum demand, by id ([`Ledger::set_floors`]).
    floors: BTreeMap<TaskId, Resources>,
    /// Pending gangs, by id (in no node's queue: their owners propose them whole).
    pending_gangs: BTreeSet<TaskId>,
    /// The kind converging tasks shrink in, if on, and their ceilings in it ([`shrink`]).
    shrink_kind: Option<usize>,
    ceilings: BTreeMap<TaskId, u32>,
    /// Tasks by the slot they arrived in ([`arrivals`]).
    arrivals: BTreeMap<u64, BTreeSet<TaskId>>,
    /// The forecast and the cluster reward ([`outlook`]).
    outlook: outlook::Outlook,
    /// Capacity kept for forecast urgent arrivals ([`reserve`]).
    reserve: reserve::Reserve,
    /// Tasks sent back to the queue, by reason ([`Ledger::requeue`]).
    requeues: BTreeMap<Requeue, u64>,
    /// The work of the tasks that succeeded here: the cluster's size knowledge
    /// ([`crate::sizes`], [`sizes`]).
    sizes: crate::sizes::SizeBook,
    /// The shapes that arrived and the devices drivers stated: a claim's prior ([`packing`]).
    packing: packing::Packing,
    /// Tasks added, removed or moved to another state so far ([`Ledger::changes`]).
    changes: u64,
}

impl<M> Ledger<M> {
    /// An empty ledger: windows of `window` tasks; attained service counted in kind
    /// `service_kind`.
    pub fn new(window: usize, service_kind: usize) -> Self {
        Self {
            window,
            priorities: Priorities::default(),
            service_kind,
            tasks: BTreeMap::new(),
            nodes: BTreeMap::new(),
            estimator: crate::estimate::Estimator::default(),
            all_elastic: false,
            all_floors: false,
            floors: BTreeMap::new(),
            pending_gangs: BTreeSet::new(),
            shrink_kind: None,
            ceilings: BTreeMap::new(),
            arrivals: BTreeMap::new(),
            outlook: Default::default(),
            reserve: Default::default(),
            requeues: BTreeMap::new(),
            packing: Default::default(),
            sizes: Default::default(),
            changes: 0,
        }
    }

    /// How many times a task was added, removed or moved to another state: what a driver
    /// that caches something made of the states compares.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The window size.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Order the queues by priority class as `p` says (set before the first task arrives).
    pub fn with_priorities(mut self, p: Priorities) -> Self {
        self.priorities = p;
        self
    }

    /// How priority classes order the queues.
    pub fn priorities(&self) -> Priorities {
        self.priorities
    }

    /// Add a node (live), or update a known node's capacity and make it live.
    pub fn set_node(&mut self, id: NodeId, capacity: Resources) {
        self.book(id).capacity = capacity;
        if let Some(b) = self.nodes.get_mut(&id) {
            b.live = true;
        }
    }

    /// Take a node out of the views (`false`) or back in. Unknown nodes: nothing.
    pub fn set_live(&mut self, id: NodeId, live: bool) {
        if let Some(b) = self.nodes.get_mut(&id) {
            b.live = live;
        }
    }

    /// Whether a node is in the views.
    pub fn is_live(&self, id: NodeId) -> bool {
        self.nodes.get(&id).is_some_and(|b| b.live)
    }

    /// The book of `id`, made (not live, no capacity) if new: its queue then gets every pending
    /// task it could run.
    fn book(&mut self, id: NodeId) -> &mut Book {
        let tasks = &self.tasks;
        let priorities = self.priorities;
        let (elastic, floors) = (self.all_elastic, self.all_floors);
        self.nodes.entry(id).or_insert_with(|| Book {
            capacity: Resources::default(),
            used: Resources::default(),
            gpu: crate::estimate::GpuModel::NONE,
            min_used: Resources::default(),
            elastic,
            floors,
            live: false,
            queue: tasks
                .values()
                .filter(|e| {
                    e.state == TaskState::Pending
                        && e.task.gang.is_none()
                        && e.task.reachable.contains(&id)
                })
                .map(|e| order::key(priorities, &e.task, id))
                .collect(),
            running: BTreeSet::new(),
            held: Resources::default(),
            gangs: BTreeSet::new(),
        })
    }

    /// Add a task in `state`. A known id: nothing changes, and `false`.
    pub fn insert(&mut self, task: Arc<Task>, state: TaskState, meta: M) -> bool {
        let id = task.id;
        if self.tasks.contains_key(&id) {
            return false;
        }
        self.set_floor(&task, &state);
        self.index(&task, &state);
        self.arrived(&task);
        self.arrived_urgent(&task);
        self.packing.observe(&task);
        if matches!(state, TaskState::Done { .. }) {
            // Learned only once done (an outcome, a journal): what it declared counts towards
            // its class, as on the agents that heard it earlier, and is then let go.
            self.estimator.forget(id);
        }
        self.changes += 1;
        let runs = u32::from(state.running_on().is_some());
        let identity = Arc::new(crate::sizes::Identity::default());
        self.tasks.insert(
            id,
            Entry {
                task,
                state,
                attained: 0.0,
                observed: None,
                runs,
                work: 0.0,
                held: 0.0,
                identity,
                meta,
            },
        );
        true
    }

    /// Remove a task (and its place in every queue). Returns it.
    pub fn remove(&mut self, id: TaskId) -> Option<Entry<M>> {
        let e = self.tasks.remove(&id)?;
        self.changes += 1;
        self.unindex(&e.task, &e.state);
        self.floors.remove(&id);
        self.estimator.forget(id);
        Some(e)
    }

    /// Move a task to `state` (queues, running sets and used units follow). Unknown: `None`.
    pub fn set_state(&mut self, id: TaskId, state: TaskState) -> Option<()> {
        let e = self.tasks.get(&id)?;
        self.changes += 1;
        let (task, old) = (e.task.clone(), e.state.clone());
        self.unindex(&task, &old);
        // The entry changes before it is indexed: a node's book made while indexing scans the
        // tasks' states and must see this one's new state.
        if matches!(state, TaskState::Done { .. }) {
            self.estimator.forget(id);
        }
        self.learn_size(id, &old, &state);
        if let Some(e) = self.tasks.get_mut(&id) {
            e.observed = match (&old, &state, e.observed.take()) {
                // The same copy re-allocated: the observation point stays as it is, at the
                // allocation its last slot ran at, so the next sample (the first slot at the new
                // allocation, which carries the cost of the switch: a restart on new devices, a
                // slowed slot) is a measure of that cost, not a speed sample; the slots after
                // it are. (However many re-shares a slot sees, only what ran counts.)
                (
                    TaskState::Running {
                        node: n0,
                        started: s0,
                        ..
                    },
                    TaskState::Running { node, started, .. },
                    Some(point),
                ) if n0 == node && s0 == started => Some(point),
                _ => None,
            };
            if old.running_on().is_none() && state.running_on().is_some() {
                e.runs += 1;
            }
            e.state = state.clone();
        }
        // A new run (not the same copy re-allocated) takes its floor from its start.
        let same_copy = matches!(
            (&old, &state),
            (
                TaskState::Running { node: n0, started: s0, .. },
                TaskState::Running { node, started, .. },
            ) if n0 == node && s0 == started
        );
        if !same_copy {
            self.set_floor(&task, &state);
        }
        self.index(&task, &state);
        Some(())
    }

    /// Replace a task's description (the simulator re-queues a task that ran out of memory
    /// asking for more); its state and attained service stay.
    pub fn replace_task(&mut self, task: Arc<Task>) -> Option<()> {
        let e = self.tasks.get(&task.id)?;
        let (old, state) = (e.task.clone(), e.state.clone());
        self.unindex(&old, &state);
        if let Some(e) = self.tasks.get_mut(&task.id) {
            e.task = task.clone();
        }
        self.index(&task, &state);
        Some(())
    }

    fn index(&mut self, task: &Task, state: &TaskState) {
        match state {
            // A gang is in no node's queue, whatever boxes it may use (module doc).
            TaskState::Pending if task.gang.is_some() => {
                self.pending_gangs.insert(task.id);
            }
            TaskState::Pending => {
                for n in &task.reachable {
                    if let Some(b) = self.nodes.get_mut(n) {
                        b.queue.insert(order::key(self.priorities, task, *n));
                    }
                }
            }
            TaskState::Gang { members, .. } => {
                for (node, alloc) in members {
                    let b = self.book(*node);
                    b.gangs.insert(task.id);
                    add_each(&mut b.used, alloc);
                    add_each(&mut b.min_used, alloc);
                    add_each(&mut b.held, alloc);
                }
            }
            TaskState::Running { node, alloc, .. } => {
                let floor = self.floor(task).clone();
                let b = self.book(*node);
                b.running.insert(task.id);
                add_each(&mut b.used, alloc);
                add_each(&mut b.min_used, &floor);
            }
            TaskState::Done { .. } => {}
        }
    }

    fn unindex(&mut self, task: &Task, state: &TaskState) {
        match state {
            TaskState::Pending if task.gang.is_some() => {
                self.pending_gangs.remove(&task.id);
            }
            TaskState::Pending => {
                for n in &task.reachable {
                    if let Some(b) = self.nodes.get_mut(n) {
                        b.queue.remove(&order::key(self.priorities, task, *n));
                    }
                }
            }
            TaskState::Gang { members, .. } => {
                for (node, alloc) in members {
                    if let Some(b) = self.nodes.get_mut(node) {
                        b.gangs.remove(&task.id);
                        sub_each(&mut b.used, alloc);
                        sub_each(&mut b.min_used, alloc);
                        sub_each(&mut b.held, alloc);
                    }
                }
            }
            TaskState::Running { node, alloc, .. } => {
                let floor = self.floor(task).clone();
                if let Some(b) = self.nodes.get_mut(node) {
                    b.running.remove(&task.id);
                    sub_each(&mut b.used, alloc);
                    sub_each(&mut b.min_used, &floor);
                }
            }
            TaskState::Done { .. } => {}
        }
    }

    /// A task.
    pub fn get(&self, id: TaskId) -> Option<&Entry<M>> {
        self.tasks.get(&id)
    }

    /// Whether a task is known.
    pub fn contains(&self, id: TaskId) -> bool {
        self.tasks.contains_key(&id)
    }

    /// The driver's data of a task, to change.
    pub fn meta_mut(&mut self, id: TaskId) -> Option<&mut M> {
        self.tasks.get_mut(&id).map(|e| &mut e.meta)
    }

    /// Every task, by id.
    pub fn iter(&self) -> impl Iterator<Item = (TaskId, &Entry<M>)> + '_ {
        self.tasks.iter().map(|(id, e)| (*id, e))
    }

    /// Every task, by id.
    pub fn values(&self) -> impl Iterator<Item = &Entry<M>> + '_ {
        self.tasks.values()
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether there is no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// A task's attained service as its runner counts it (a peer's heartbeat). Unknown: nothing.
    pub fn set_attained(&mut self, id: TaskId, attained: f64) {
        if let Some(e) = self.tasks.get_mut(&id) {
            e.attained = attained;
        }
        self.work_from_attained(id);
    }

    /// End of a slot: every running task attains the units of the service kind it holds, and
    /// its work the slot's worth at its allocation (slots at its minimum demand: `ledger/sizes.rs`).
    pub fn accrue_service(&mut self) {
        self.clear_gains();
        self.accrue_work();
        let k = self.service_kind;
        for e in self.tasks.values_mut() {
            if let TaskState::Running { alloc, .. } = &e.state {
                e.attained += f64::from(alloc.get(k));
            }
        }
    }
}

#[cfg(test)]
mod tests;
