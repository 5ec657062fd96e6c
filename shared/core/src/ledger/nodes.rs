//! What the ledger says of one node: its capacity, the units used, free and held by gangs, the
//! tasks running there and its queue. Reads only.

use super::{Ledger, sub_each};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};

impl<M> Ledger<M> {
    /// A node's capacity (zeros if unknown).
    pub fn capacity(&self, node: NodeId) -> Resources {
        self.nodes
            .get(&node)
            .map(|b| b.capacity.clone())
            .unwrap_or_default()
    }

    /// Units allocated to the tasks running on a node.
    pub fn used(&self, node: NodeId) -> Resources {
        match self.nodes.get(&node) {
            Some(b) => {
                let mut u = b.used.clone();
                u.0.resize(b.capacity.len().max(u.len()), 0);
                u
            }
            None => Resources::default(),
        }
    }

    /// Units of a node not allocated to tasks running there.
    pub fn free(&self, node: NodeId) -> Resources {
        match self.nodes.get(&node) {
            Some(b) => {
                let mut f = b.capacity.clone();
                sub_each(&mut f, &b.used);
                f
            }
            None => Resources::default(),
        }
    }

    /// The tasks running on a node, by id.
    pub fn running_on(&self, node: NodeId) -> impl Iterator<Item = TaskId> + '_ {
        self.nodes
            .get(&node)
            .into_iter()
            .flat_map(|b| b.running.iter().copied())
    }

    /// The gangs with a member on a node, by id.
    pub fn gangs_on(&self, node: NodeId) -> impl Iterator<Item = TaskId> + '_ {
        self.nodes
            .get(&node)
            .into_iter()
            .flat_map(|b| b.gangs.iter().copied())
    }

    /// Units held on a node by gang members (zeros in every kind of its capacity if none).
    pub fn held(&self, node: NodeId) -> Resources {
        match self.nodes.get(&node) {
            Some(b) => {
                let mut h = b.held.clone();
                h.0.resize(b.capacity.len().max(h.len()), 0);
                h
            }
            None => Resources::default(),
        }
    }

    /// The pending gangs, by id.
    pub fn pending_gangs(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.pending_gangs.iter().copied()
    }

    /// A node's whole pending queue length (window and overflow).
    pub fn queue_len(&self, node: NodeId) -> usize {
        self.nodes.get(&node).map_or(0, |b| b.queue.len())
    }
}
