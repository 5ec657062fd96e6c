//! Identifiers and the task description shared by every component.
//!
//! A [`Task`] is what a user submits (or what the simulator generates): its type, minimum demand,
//! optional per-task cap, priority class, the nodes that can reach it, and when it arrived. How
//! fast it runs under an allocation is deliberately *not* here: that is hidden from policies.

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
    pub gang: Option<Box<crate::placement::gang::GangShape>>,
}

impl Task {
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
