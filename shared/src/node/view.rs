//! What a node's policy sees and is rewarded for: the [`ClusterView`] built from this node's
//! knowledge, and the per-slot reward (learning mode). Reads the state; changes nothing.

use super::{NodeCore, TaskEntry, TaskState};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use crate::view::{ClusterView, NodeView, PendingView, RunningView};
use std::collections::BTreeMap;

/// A per-node pseudo-random rank of a task (splitmix64 of task and node id): deterministic, so
/// every agent computes the same windows for every node.
fn spread(task: TaskId, node: NodeId) -> u64 {
    let mut z = task.0 ^ (u64::from(node.0)).rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl NodeCore {
    /// This node's reward for the slot that just ended, as the simulator defines it: minus the
    /// tasks running here and its share of the pending tasks (each split evenly among the live
    /// nodes that can run it), so that the nodes' rewards sum to minus the tasks in the system.
    pub(super) fn reward(&self) -> f64 {
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

    /// The cluster as this node knows it, for its policy.
    pub fn view(&self) -> ClusterView {
        let mut nodes: BTreeMap<NodeId, (Resources, Resources)> = BTreeMap::new();
        nodes.insert(self.cfg.me, (self.cfg.capacity.clone(), self.free()));
        for (id, p) in &self.peers {
            nodes.insert(*id, (p.state.capacity.clone(), p.state.free.clone()));
        }
        // Only the pending tasks this node may start now (its side holds their owner, or they
        // were taken over): a task it may not start is not in any window it decides from.
        let pending: Vec<&TaskEntry> = self
            .tasks
            .values()
            .filter(|t| t.state == TaskState::Pending && self.may_start(t, self.now))
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
