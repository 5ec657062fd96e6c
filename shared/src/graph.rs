//! The heterogeneous graph form of a [`ClusterView`], the input of graph-attention policies.
//!
//! Node types and features follow the TapFinger reference: servers (free units per kind, queue
//! length, "is me" flag), pending tasks (minimum demand, one-hot type), running tasks (allocation,
//! one-hot type, running time), and one summary node. Edges go both ways between a server and each
//! task in its window, each task it runs, and the summary node. Features are scaled by the largest
//! node capacity per kind so that one set of weights works for clusters of any size. This module
//! only builds data; it never decides.

use crate::task::{NodeId, TaskId};
use crate::view::ClusterView;
use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};

/// Node type of the heterogeneous graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeKind {
    /// An edge server (one agent).
    Server,
    /// A pending task in at least one window.
    Pending,
    /// A running task.
    Running,
    /// The summary ("central") node.
    Summary,
}

/// Edge type, named source→destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EdgeKind {
    /// Server → task in its window.
    ServerPending,
    /// Task in window → server.
    PendingServer,
    /// Server → task it runs.
    ServerRunning,
    /// Running task → its server.
    RunningServer,
    /// Server → summary.
    ServerSummary,
    /// Summary → server.
    SummaryServer,
}

/// What a graph node refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeRef {
    /// A server.
    Server(NodeId),
    /// A task (pending or running).
    Task(TaskId),
    /// The summary node.
    Summary,
}

/// A graph node: its type, what it refers to, and its feature vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphNode {
    /// Node type.
    pub kind: NodeKind,
    /// What it refers to.
    pub refers: NodeRef,
    /// Features (length fixed per node type for a given number of kinds and types).
    pub features: Vec<f32>,
}

/// The heterogeneous graph.
pub type HeteroGraph = DiGraph<GraphNode, EdgeKind>;

/// Build the graph of a snapshot, marking `me` in the server features.
pub fn build(view: &ClusterView, me: NodeId) -> HeteroGraph {
    let kinds = view.nodes.first().map_or(0, |n| n.capacity.len());
    let scale: Vec<f32> = (0..kinds)
        .map(|k| {
            view.nodes
                .iter()
                .map(|n| n.capacity.get(k))
                .max()
                .unwrap_or(1)
                .max(1) as f32
        })
        .collect();
    let onehot = |ty: u16| -> Vec<f32> {
        (0..view.num_types)
            .map(|i| if i == usize::from(ty) { 1.0 } else { 0.0 })
            .collect()
    };
    let mut g = HeteroGraph::new();
    let summary = g.add_node(GraphNode {
        kind: NodeKind::Summary,
        refers: NodeRef::Summary,
        features: vec![1.0],
    });
    let mut servers: Vec<NodeIndex> = Vec::with_capacity(view.nodes.len());
    for n in &view.nodes {
        let mut f: Vec<f32> = (0..kinds)
            .map(|k| n.free.get(k) as f32 / scale[k])
            .collect();
        f.push(n.queue_len() as f32 / 10.0);
        f.push(if n.id == me { 1.0 } else { 0.0 });
        let s = g.add_node(GraphNode {
            kind: NodeKind::Server,
            refers: NodeRef::Server(n.id),
            features: f,
        });
        g.add_edge(s, summary, EdgeKind::ServerSummary);
        g.add_edge(summary, s, EdgeKind::SummaryServer);
        servers.push(s);
    }
    let pending: Vec<NodeIndex> = view
        .pending
        .iter()
        .map(|p| {
            let mut f: Vec<f32> = (0..kinds)
                .map(|k| p.task.min_demand.get(k) as f32 / scale[k])
                .collect();
            f.extend(onehot(p.task.ty.0));
            g.add_node(GraphNode {
                kind: NodeKind::Pending,
                refers: NodeRef::Task(p.task.id),
                features: f,
            })
        })
        .collect();
    let running: Vec<NodeIndex> = view
        .running
        .iter()
        .map(|r| {
            let mut f: Vec<f32> = (0..kinds)
                .map(|k| r.alloc.get(k) as f32 / scale[k])
                .collect();
            f.extend(onehot(r.task.ty.0));
            f.push(view.slot.saturating_sub(r.started) as f32 / 10.0);
            g.add_node(GraphNode {
                kind: NodeKind::Running,
                refers: NodeRef::Task(r.task.id),
                features: f,
            })
        })
        .collect();
    for (si, n) in view.nodes.iter().enumerate() {
        for &w in &n.window {
            g.add_edge(servers[si], pending[w], EdgeKind::ServerPending);
            g.add_edge(pending[w], servers[si], EdgeKind::PendingServer);
        }
        for &r in &n.running {
            g.add_edge(servers[si], running[r], EdgeKind::ServerRunning);
            g.add_edge(running[r], servers[si], EdgeKind::RunningServer);
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;
    use crate::task::{Task, TaskTypeId};
    use crate::view::{NodeView, PendingView};

    #[test]
    fn graph_has_one_node_per_entity_and_edges_both_ways() {
        let task = Task {
            id: TaskId(1),
            ty: TaskTypeId(1),
            min_demand: Resources(vec![2, 1]),
            max_demand: None,
            priority: 0,
            reachable: vec![NodeId(0), NodeId(1)],
            arrival: 0,
        };
        let node = |id| NodeView {
            id: NodeId(id),
            capacity: Resources(vec![16, 16]),
            free: Resources(vec![8, 16]),
            window: vec![0],
            overflow: 0,
            running: vec![],
        };
        let view = ClusterView {
            num_types: 2,
            nodes: vec![node(0), node(1)],
            pending: vec![PendingView {
                task: task.into(),
                est: Default::default(),
            }],
            ..Default::default()
        };
        let g = build(&view, NodeId(1));
        assert_eq!(g.node_count(), 1 + 2 + 1);
        // 2 servers × (summary both ways + window both ways)
        assert_eq!(g.edge_count(), 8);
        let me = g
            .node_weights()
            .find(|n| n.refers == NodeRef::Server(NodeId(1)))
            .unwrap();
        assert_eq!(me.features, vec![0.5, 1.0, 0.1, 1.0]);
        let p = g
            .node_weights()
            .find(|n| n.kind == NodeKind::Pending)
            .unwrap();
        assert_eq!(p.features, vec![0.125, 0.0625, 0.0, 1.0]);
    }
}
