//! Identifiers and the task description shared by every component.
//!
//! A [`Task`] is what a user submits (or what the simulator generates): its type, minimum demand,
//! optional per-task cap, priority class, the nodes that can reach it, and when it arrived. How
//! fast it runs under an allocation is deliberately *not* here: that is hidden from policies.
//! A multi-node job's shape ([`GangShape`]) is part of the description too, since every layer
//! reads it (the wire, specs, the ledger, placement); where its members go is
//! [`crate::placement::gang`]'s business.

use crate::resources::Resources;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Identifier of a node (edge box); every node runs exactly one agent, so this is also the agent id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

/// Identifier of a task, unique in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub u64);

/// Index of a task type in the cluster's list of types (used for one-hot features).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskTypeId(pub u16);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// The lowest priority class a task may have: classes run from 0 (the highest) to this.
pub const LOWEST_CLASS: u8 = 9;

/// The class `priority` names, or why it names none.
pub fn check_class(priority: i64) -> Result<u8, String> {
    u8::try_from(priority)
        .ok()
        .filter(|p| *p <= LOWEST_CLASS)
        .ok_or_else(|| {
            format!(
                "{priority} is not a priority class: classes run from 0 (the highest) to {LOWEST_CLASS}"
            )
        })
}

/// A task as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Unique id.
    pub id: TaskId,
    /// Task type.
    pub ty: TaskTypeId,
    /// Minimum demand: no allocation below it in any kind is allowed.
    pub min_demand: Resources,
    /// Maximum useful demand (per-task cap); `None` means "up to the node's free capacity".
    pub max_demand: Option<Resources>,
    /// Priority class; 0 is the highest.
    pub priority: u8,
    /// Nodes allowed to run the task (placement constraints / data locality), sorted.
    pub reachable: Vec<NodeId>,
    /// Slot (or round) in which the task arrived.
    pub arrival: u64,
    /// A multi-node job: its workers and parameter servers, placed together as a gang
    /// ([`crate::placement::gang`]); `None` for a task that runs as one process on one node.
    /// A gang is in no node's queue: no policy claims it one node at a time; its owner
    /// proposes it whole, with members on `reachable` boxes only.
    // Always written (no `skip_serializing_if`): the wire's binary format has no field names
    // to leave one out by.
    #[serde(default)]
    pub gang: Option<Box<GangShape>>,
}

/// Most members in one gang (a bound on what one message may carry).
pub const MAX_MEMBERS: usize = 256;

/// A multi-node job's members and its locality model, as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GangShape {
    /// Fewest and most workers (equal: a fixed count).
    pub workers: (u32, u32),
    /// Parameter servers, all on one box (the host); at least 1.
    pub ps: u32,
    /// Units one worker holds.
    pub worker_demand: Resources,
    /// Units one parameter server holds.
    pub ps_demand: Resources,
    /// Seconds of compute per iteration of one worker, as stated by the user.
    pub compute_seconds: f64,
    /// Bytes of gradients (and of parameters) a worker exchanges with the PS per iteration, as
    /// stated by the user.
    pub gradient_bytes: f64,
    /// Times the gang is put back in the queue after a member fails, before it is failed.
    pub restarts: u32,
    /// A pipeline's members, in rank order (a planned layer chain's stages, `crate::plan`):
    /// when not empty, these are the members, and `workers` and `ps` are not used.
    pub stages: Vec<Resources>,
}

/// Why a gang shape is malformed.
pub fn validate(s: &GangShape) -> Result<(), String> {
    if !s.stages.is_empty() {
        if s.stages.len() > MAX_MEMBERS {
            return Err(format!(
                "{} members; a gang has at most {}",
                s.stages.len(),
                MAX_MEMBERS
            ));
        }
        if s.stages.iter().any(Resources::is_zero) {
            return Err("a pipeline member with no units".into());
        }
        return Ok(());
    }
    if s.ps == 0 {
        return Err("ps: at least one parameter server".into());
    }
    if s.workers.0 == 0 || s.workers.0 > s.workers.1 {
        return Err(format!(
            "workers: the range {}..={} must start at 1 or more and not be empty",
            s.workers.0, s.workers.1
        ));
    }
    if (s.workers.1 + s.ps) as usize > MAX_MEMBERS {
        return Err(format!(
            "{} members; a gang has at most {}",
            s.workers.1 + s.ps,
            MAX_MEMBERS
        ));
    }
    if s.worker_demand.is_zero() || s.ps_demand.is_zero() {
        return Err("worker_demand and ps_demand must each name a positive unit".into());
    }
    if s.worker_demand.len() != s.ps_demand.len() {
        return Err("worker_demand and ps_demand have different kinds".into());
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !(positive(s.compute_seconds) && s.gradient_bytes.is_finite() && s.gradient_bytes >= 0.0) {
        return Err("compute_seconds must be positive and gradient_bytes not negative".into());
    }
    Ok(())
}

impl Task {
    /// A task of type 0 and class 0 that arrives at slot 0, may run on node 0 only and asks for
    /// `min_demand` with no maximum: the start of a builder ([`Task::of_type`], [`Task::class`],
    /// [`Task::arriving`], [`Task::on`], [`Task::at_most`]) for the tasks tests and tools make.
    pub fn new(id: u64, min_demand: impl Into<Vec<u32>>) -> Self {
        Self {
            id: TaskId(id),
            ty: TaskTypeId(0),
            min_demand: Resources(min_demand.into()),
            max_demand: None,
            priority: 0,
            reachable: vec![NodeId(0)],
            arrival: 0,
            gang: None,
        }
    }

    /// This task of type `ty`.
    pub fn of_type(mut self, ty: u16) -> Self {
        self.ty = TaskTypeId(ty);
        self
    }

    /// This task in priority class `class`.
    pub fn class(mut self, class: u8) -> Self {
        self.priority = class;
        self
    }

    /// This task arriving at `slot`.
    pub fn arriving(mut self, slot: u64) -> Self {
        self.arrival = slot;
        self
    }

    /// This task allowed on `nodes` (kept sorted, as [`Task::reachable`] must be).
    pub fn on(mut self, nodes: &[u32]) -> Self {
        self.reachable = nodes.iter().copied().map(NodeId).collect();
        self.reachable.sort();
        self.reachable.dedup();
        self
    }

    /// This task asking for at most `max_demand`.
    pub fn at_most(mut self, max_demand: impl Into<Vec<u32>>) -> Self {
        self.max_demand = Some(Resources(max_demand.into()));
        self
    }

    /// The cap on an allocation on a node with `free` units left: min(free, max_demand).
    pub fn cap(&self, free: &Resources) -> Resources {
        match &self.max_demand {
            Some(m) => free.min_each(m),
            None => free.clone(),
        }
    }

    /// True if `alloc` is a legal allocation for this task given `free` units on the node.
    pub fn allows(&self, alloc: &Resources, free: &Resources) -> bool {
        self.min_demand.fits_in(alloc) && alloc.fits_in(&self.cap(free))
    }
}

/// A one-unit class-0 task of type 0 that arrived at slot 0 and may run on nodes 0 and 1: what
/// unit tests need where the task itself does not matter.
#[cfg(test)]
pub(crate) fn test_task(id: u64) -> std::sync::Arc<Task> {
    std::sync::Arc::new(Task::new(id, [1]).on(&[0, 1]))
}
