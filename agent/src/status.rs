//! What an agent's loop publishes after every step ([`Status`]): the snapshot the API, the
//! dashboard, the metrics and the tests read. Its own module, below both the loop that writes it
//! and the readers.

use std::collections::BTreeMap;
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
    /// What the network carried: messages taken directly and by relay, copies, frames dropped
    /// for a slow peer.
    pub traffic: crate::net::Traffic,
    /// Negotiation counters (rounds, claims, conflicts, messages, round latency).
    pub stats: tapfinger::node::NodeStats,
    /// Policy version and online learning (None: no coordinator configured).
    pub policy: Option<crate::online::PolicyStatus>,
    /// This node's name.
    pub name: String,
    /// This node's current slot and the slot length (ms).
    pub slot: u64,
    /// Slot length (ms).
    pub slot_ms: u64,
    /// The cluster's pending tasks in the order nodes take them: priority class (0 first), then
    /// arrival, then id.
    pub queue: Vec<Queued>,
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
