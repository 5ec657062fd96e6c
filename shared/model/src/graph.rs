//! The heterogeneous graph form of a [`ClusterView`], the input of graph-attention policies.
//!
//! Node types follow the TapFinger reference: servers, pending tasks, running tasks and one
//! summary node. Feature schemas: per preset ([`build`]: free units per kind, queue length,
//! "is me"; minimum demand and a one-hot type; allocation, one-hot type, running time), general
//! ([`build_general`]: the canonical kinds and the online speed estimates, no task type), and
//! the general ones with more per task: RLPTO's ([`build_rlpto`]) and each pending task's fit
//! to the boxes beside the tasks running on each ([`build_general_contended`], the shipped
//! general model's). Edges go both ways between a server and each
//! task in its window, each task it runs, and the summary node. Features are scaled by the largest
//! node capacity per kind so that one set of weights works for clusters of any size. This module
//! only builds data; it never decides.

use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};
use tapfinger_core::task::{NodeId, TaskId};
use tapfinger_core::view::ClusterView;

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

/// Build the graph of a snapshot, marking `me` in the server features (schema 1: the cluster's
/// own kinds and a one-hot of the task type).
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
    // A type the model was not trained for (an agent's task class) reads as type 0.
    let onehot = |ty: u16| -> Vec<f32> {
        let ty = if usize::from(ty) < view.num_types {
            usize::from(ty)
        } else {
            0
        };
        (0..view.num_types)
            .map(|i| if i == ty { 1.0 } else { 0.0 })
            .collect()
    };
    let servers = view
        .nodes
        .iter()
        .map(|n| {
            let mut f: Vec<f32> = (0..kinds)
                .map(|k| n.free.get(k) as f32 / scale[k])
                .collect();
            f.push(n.queue_len() as f32 / 10.0);
            f.push(if n.id == me { 1.0 } else { 0.0 });
            f
        })
        .collect();
    let pending = view
        .pending
        .iter()
        .map(|p| {
            let mut f: Vec<f32> = (0..kinds)
                .map(|k| p.task.min_demand.get(k) as f32 / scale[k])
                .collect();
            f.extend(onehot(p.task.ty.0));
            f
        })
        .collect();
    let running = view
        .running
        .iter()
        .map(|r| {
            let mut f: Vec<f32> = (0..kinds)
                .map(|k| r.alloc.get(k) as f32 / scale[k])
                .collect();
            f.extend(onehot(r.task.ty.0));
            f.push(view.slot.saturating_sub(r.started) as f32 / 10.0);
            f
        })
        .collect();
    assemble(
        view,
        Features {
            servers,
            pending,
            running,
            summary: vec![1.0],
        },
    )
}

/// Feature widths of the general schema: server, pending task, running task.
pub const GENERAL_WIDTHS: [usize; 3] = [9, 10, 8];

/// A count or a time in slots, compressed: `ln(1 + x) / 4` (≈ 1 at 50 slots), so that heavy
/// tails and long queues stay in range.
fn squash(x: f64) -> f32 {
    ((1.0 + x.max(0.0)).ln() / 4.0) as f32
}

/// The general features of `view` (see [`build_general`]).
fn general_features(view: &ClusterView, me: NodeId) -> Features {
    let map = view.kinds;
    let canon = |r: &tapfinger_core::resources::Resources| map.canonical(r);
    let mut scale = [1.0f64; 3];
    for n in &view.nodes {
        for (s, c) in scale.iter_mut().zip(canon(&n.capacity)) {
            *s = s.max(c);
        }
    }
    let scaled = |r: &tapfinger_core::resources::Resources| -> Vec<f32> {
        canon(r)
            .iter()
            .zip(&scale)
            .map(|(x, s)| (x / s) as f32)
            .collect()
    };
    let servers = view
        .nodes
        .iter()
        .map(|n| {
            let mut f = scaled(&n.free);
            f.extend(scaled(&n.capacity));
            f.push(squash(n.queue_len() as f64));
            f.push(squash(n.running.len() as f64));
            f.push(if n.id == me { 1.0 } else { 0.0 });
            f
        })
        .collect();
    // Pending tasks' estimates on the deciding box's GPU model (where boxes differ in it).
    let gpu = view
        .nodes
        .iter()
        .find(|n| n.id == me)
        .map_or(tapfinger_core::estimate::GpuModel::NONE, |n| n.gpu);
    let pending = view
        .pending
        .iter()
        .map(|p| {
            let est = p.est_on(gpu);
            let mut f = scaled(&p.task.min_demand);
            f.push(squash(est.at_min));
            f.push(squash(est.at_max));
            f.extend(est.gain.iter().map(|g| g.clamp(0.0, 1.0) as f32));
            f.push(squash(view.slot.saturating_sub(p.task.arrival) as f64));
            f.push(if est.samples > 0 { 1.0 } else { 0.0 });
            f
        })
        .collect();
    let running = view
        .running
        .iter()
        .map(|r| {
            let mut f = scaled(&r.alloc);
            f.push(squash((1.0 - r.progress) * r.est_alloc));
            f.push(squash(r.est_alloc));
            f.push(r.progress as f32);
            f.push(squash(view.slot.saturating_sub(r.started) as f64));
            f.push(squash(r.attained));
            f
        })
        .collect();
    Features {
        servers,
        pending,
        running,
        summary: vec![1.0],
    }
}

/// Build the graph of a snapshot with the general features alone, marking `me` (what the
/// general and RLPTO schemas, [`build_general_contended`] and [`build_rlpto`], add to). They mean
/// the same on every cluster: the canonical kinds CPU, GPU and memory (an absent kind is zero),
/// scaled by the largest node per kind; and for tasks, the online estimator's speeds instead of
/// a task type, with waiting time, progress and attained service.
///
/// - server: free (3), capacity (3), queue length, running tasks (squashed), is me;
/// - pending: minimum demand (3), estimated slots at the minimum and at the largest allocation
///   (squashed), the gain of one more unit per kind (3), waiting time (squashed), whether its
///   class has been observed;
/// - running: allocation (3), estimated remaining and total slots at its allocation (squashed),
///   progress, running time and attained service (squashed).
pub fn build_general(view: &ClusterView, me: NodeId) -> HeteroGraph {
    general_features(view, me).assemble(view)
}

/// Pending task `p`'s estimated time by `time_on` on the deciding node `mine` (its time at the
/// minimum demand where there is none), and the least over that and every box it may run on
/// and fits now.
fn here_and_best(
    view: &ClusterView,
    mine: Option<&tapfinger_core::view::NodeView>,
    p: &tapfinger_core::view::PendingView,
    time_on: impl Fn(&tapfinger_core::view::NodeView) -> f64,
) -> (f64, f64) {
    let t = &p.task;
    let here = mine.map_or(p.est.at_min, &time_on);
    let best = view
        .nodes
        .iter()
        .filter(|n| t.reachable.binary_search(&n.id).is_ok() && t.min_demand.fits_in(&n.free))
        .map(&time_on)
        .fold(here, f64::min);
    (here, best)
}

/// Feature widths of the general schema (number 5, [`build_general_contended`]).
pub const GENERAL_CONTENDED_WIDTHS: [usize; 3] =
    [GENERAL_WIDTHS[0], GENERAL_WIDTHS[1] + 3, GENERAL_WIDTHS[2]];

/// Build the graph with the general features and each pending task's fit to the boxes under
/// contention (schema 5): [`build_general`]'s features, and per pending task three more, all
/// from the online estimator's figures in the view (never a true speed model):
///
/// - its estimated job time (squashed) at what it would run at on the deciding node if it
///   started there now, sharing the node with the tasks running there (an equal split of the
///   units beyond the floors among the tasks that take each kind);
/// - the least such time over the boxes it may run on and fits now (the deciding node's own
///   where it fits nowhere);
/// - the time its start would add to the deciding node's running tasks: the sum of their
///   estimated remaining times at what they would keep, less at what they hold (0 where it
///   does not fit).
///
/// Why: on an elastic node a start takes only the minimum demand from the node's free units
/// and the re-share splits the rest, so a node's free units (a removed schema's figure) say what
/// a task would get alone, not beside the others. A box running nine tasks that use GPUs showed
/// every GPU task 16 GPUs' speed; the general model piled them onto the largest box
/// (`hetero6`, docs/DECISIONS.md, "The general model: recipe and features").
pub fn build_general_contended(view: &ClusterView, me: NodeId) -> HeteroGraph {
    contended_features(view, me).assemble(view)
}

/// Whether some box of `view` other than `me` could ever run `t` (one its spec lets it reach
/// whose capacity holds its minimum demand), stopping at the first: the exclusive-first mask (`NetConfig::exclusive_first`) asks this of
/// every window task at every decision, and on a 1,000-box cluster a scan of every box per task
/// would cost more than the decision's network pass.
pub fn has_other_host(view: &ClusterView, me: NodeId, t: &tapfinger_core::task::Task) -> bool {
    other_host_boxes(view, me, t).next().is_some()
}

/// The boxes of `view` other than `me` that could ever run `t`, walked from `t`'s reachable
/// boxes (`view`'s nodes are in id order, as every view the ledger builds and every focus of
/// one is: [`ClusterView::node_index`]).
fn other_host_boxes<'a>(
    view: &'a ClusterView,
    me: NodeId,
    t: &'a tapfinger_core::task::Task,
) -> impl Iterator<Item = &'a tapfinger_core::view::NodeView> + 'a {
    t.reachable
        .iter()
        .filter(move |&&id| id != me)
        .filter_map(move |&id| view.node_index(id).map(|i| &view.nodes[i]))
        .filter(move |n| t.min_demand.fits_in(&n.capacity))
}

/// Schema 5's features.
fn contended_features(view: &ClusterView, me: NodeId) -> Features {
    let mut f = general_features(view, me);
    let kinds = &view.kinds;
    let mine = view.nodes.iter().find(|n| n.id == me);
    for (x, p) in f.pending.iter_mut().zip(&view.pending) {
        let t = &p.task;
        // On each box, the estimate on its GPU model.
        let time_on = |n: &tapfinger_core::view::NodeView| {
            let est = p.est_on(n.gpu);
            let spare = n.free.saturating_sub(&t.min_demand);
            let a = contended(view, n, &spare, &t.min_demand, t, &est.gain, Some(est));
            est.slots_at(kinds, &t.min_demand, &a)
        };
        let (here, best) = here_and_best(view, mine, p, time_on);
        let delay = mine
            .filter(|n| t.min_demand.fits_in(&n.free))
            .map_or(0.0, |n| added_delay(view, n, p));
        x.push(squash(here));
        x.push(squash(best));
        x.push(squash(delay));
    }
    f
}

/// What a task would run at on node `n` beside the tasks running there, by an equal split of
/// the units beyond the floors: its `floor`, and of the node's `spare` units (those no floor
/// holds, less a newcomer's minimum) an equal part per kind among the tasks that take that
/// kind — of CPU and GPU the tasks whose estimates gain from it (at least
/// [`tapfinger_core::share::MIN_GAIN`], as the gain-aware share hands them out), of memory every task —
/// capped by its maximum demand. `extra` is the newcomer (its estimate) where it is not one of
/// the running tasks: it counts among the takers. A figure for the features, not the share
/// itself: the share's greedy steps would cost a re-share per task and node per decision, and
/// for tasks alike (the usual crowding) both split equally.
fn contended(
    view: &ClusterView,
    n: &tapfinger_core::view::NodeView,
    spare: &tapfinger_core::resources::Resources,
    floor: &tapfinger_core::resources::Resources,
    t: &tapfinger_core::task::Task,
    gain: &[f64; 3],
    extra: Option<&tapfinger_core::view::TaskEstimate>,
) -> tapfinger_core::resources::Resources {
    let takes = |g: &[f64; 3], c: usize| c == 2 || g[c] >= tapfinger_core::share::MIN_GAIN;
    let mut a = floor.clone();
    for (c, i) in view.kinds.0.iter().enumerate() {
        let Some(i) = *i else { continue };
        if i >= a.len() || !takes(gain, c) {
            continue;
        }
        let others = n
            .running
            .iter()
            .filter_map(|&r| view.running.get(r))
            .filter(|r| takes(&r.est.gain, c))
            .count();
        let takers = others + usize::from(extra.is_some_and(|e| takes(&e.gain, c)));
        let part = spare.get(i) / u32::try_from(takers.max(1)).unwrap_or(u32::MAX);
        a.0[i] = a.0[i].saturating_add(part);
    }
    t.cap(&a).max_each(floor)
}

/// The time pending task `p`'s start on node `n` would add to the tasks running there: per
/// running task, its estimated remaining time at its [`contended`] part with `p` among the
/// takers, less at its part without.
fn added_delay(
    view: &ClusterView,
    n: &tapfinger_core::view::NodeView,
    p: &tapfinger_core::view::PendingView,
) -> f64 {
    let after = n.free.saturating_sub(&p.task.min_demand);
    n.running
        .iter()
        .filter_map(|&r| view.running.get(r))
        .map(|r| {
            let t = &r.task;
            let before = contended(view, n, &n.free, &r.alloc, t, &r.est.gain, None);
            let with = contended(
                view,
                n,
                &after,
                &r.alloc,
                t,
                &r.est.gain,
                Some(p.est_on(n.gpu)),
            );
            let left = 1.0 - r.progress.clamp(0.0, 1.0);
            left * (r.est.slots_at(&view.kinds, &t.min_demand, &with)
                - r.est.slots_at(&view.kinds, &t.min_demand, &before))
        })
        .sum::<f64>()
        .max(0.0)
}

/// Feature widths of the sized general schema (number 8, [`build_general_sized`]).
pub const GENERAL_SIZED_WIDTHS: [usize; 3] = [
    GENERAL_CONTENDED_WIDTHS[0],
    GENERAL_CONTENDED_WIDTHS[1] + 3,
    GENERAL_CONTENDED_WIDTHS[2] + 2,
];

/// Build the graph with schema 5's features ([`build_general_contended`]) and what the cluster
/// knows of each task's size (schema 8), all from the view: the declared work, the size book's
/// distribution of the task's recurring job, submitter or class (learned from tasks the cluster
/// finished), and its own progress; never a true size or a speed model.
///
/// - pending: its expected remaining work in slots at its minimum demand
///   ([`tapfinger_core::view::expected_remaining`], squashed), the spread of that estimate, and
///   how specific the knowledge behind it is;
/// - running: its expected remaining work (squashed) and the spread.
///
/// The spread is `ln(p90 / p10) / 4` of the book's distribution, capped at 1 (0 for declared
/// work; 1 where nothing was learned, the estimator's class mean speaking). The knowledge is 1
/// for declared work, then 0.75, 0.5 and 0.25 for a book level of the recurring job, the
/// submitter and the class, 0 for the whole cluster's or none.
///
/// Why: schema 5 knows a task by its class's mean; two runs of one class a hundred times apart
/// look alike to it, so it cannot serve the short one first (`docs/DECISIONS.md`, "Sizes").
pub fn build_general_sized(view: &ClusterView, me: NodeId) -> HeteroGraph {
    let mut f = contended_features(view, me);
    for (x, p) in f.pending.iter_mut().zip(&view.pending) {
        let (spread, known) = size_knowledge(&p.est, p.size.as_deref());
        x.push(squash(p.expected_remaining()));
        x.push(spread);
        x.push(known);
    }
    for (x, r) in f.running.iter_mut().zip(&view.running) {
        let (spread, _) = size_knowledge(&r.est, r.size.as_deref());
        x.push(squash(r.expected_remaining()));
        x.push(spread);
    }
    f.assemble(view)
}

/// The spread and how specific the size knowledge of a task is ([`build_general_sized`]).
fn size_knowledge(
    est: &tapfinger_core::view::TaskEstimate,
    size: Option<&tapfinger_core::sizes::Prediction>,
) -> (f32, f32) {
    use tapfinger_core::sizes::Level;
    if (est.size - 1.0).abs() > 1e-9 {
        return (0.0, 1.0);
    }
    let Some(p) = size.filter(|p| p.samples > 0) else {
        return (1.0, 0.0);
    };
    let [lo, _, hi] = p.quantiles;
    let spread = ((hi.max(1e-3) / lo.max(1e-3)).ln() / 4.0).clamp(0.0, 1.0) as f32;
    let known = match p.level {
        Level::Job => 0.75,
        Level::Submitter => 0.5,
        Level::Class => 0.25,
        Level::All => 0.0,
    };
    (spread, known)
}

/// Intervals ahead of the arrival forecast the RLPTO features carry.
pub const FORECAST_AHEAD: usize = 3;

/// Feature widths of the RLPTO schema: server, pending task, running task, summary.
pub const RLPTO_WIDTHS: [usize; 4] = [
    GENERAL_WIDTHS[0],
    GENERAL_WIDTHS[1] + 1,
    GENERAL_WIDTHS[2] + 1,
    1 + FORECAST_AHEAD,
];

/// Build the graph with the RLPTO features (schema 3): the general features of
/// [`build_general`] and what RLPTO's scheduler knows beside them, all in the view, so an agent
/// computes them as the simulator does:
///
/// - pending: its priority class as the queues serve it now (aging included; 0 is the most
///   urgent, scaled to [0, 1] over the ten classes; 0 where the cluster ignores classes);
/// - running: whether its reports have plateaued (it is converging and shrinks);
/// - summary: the forecast arrivals of the next [`FORECAST_AHEAD`] intervals (squashed; 0 where
///   no forecast runs).
pub fn build_rlpto(view: &ClusterView, me: NodeId) -> HeteroGraph {
    let mut f = general_features(view, me);
    for (x, p) in f.pending.iter_mut().zip(&view.pending) {
        let class = if view.classes {
            f32::from(p.class.min(tapfinger_core::task::LOWEST_CLASS))
                / f32::from(tapfinger_core::task::LOWEST_CLASS)
        } else {
            0.0
        };
        x.push(class);
    }
    for (x, r) in f.running.iter_mut().zip(&view.running) {
        x.push(if r.converging { 1.0 } else { 0.0 });
    }
    f.summary
        .extend((0..FORECAST_AHEAD).map(|h| squash(view.forecast.get(h).copied().unwrap_or(0.0))));
    f.assemble(view)
}

/// The features of a view's nodes, per type in the view's orders.
struct Features {
    servers: Vec<Vec<f32>>,
    pending: Vec<Vec<f32>>,
    running: Vec<Vec<f32>>,
    summary: Vec<f32>,
}

impl Features {
    fn assemble(self, view: &ClusterView) -> HeteroGraph {
        assemble(view, self)
    }
}

/// The graph of `view` with these features per server, pending and running task (in the view's
/// orders): nodes, the summary node, and the edges of the module doc.
fn assemble(view: &ClusterView, f: Features) -> HeteroGraph {
    let Features {
        servers: server_f,
        pending: pending_f,
        running: running_f,
        summary: summary_f,
    } = f;
    let mut g = HeteroGraph::new();
    let summary = g.add_node(GraphNode {
        kind: NodeKind::Summary,
        refers: NodeRef::Summary,
        features: summary_f,
    });
    let mut servers: Vec<NodeIndex> = Vec::with_capacity(view.nodes.len());
    for (n, f) in view.nodes.iter().zip(server_f) {
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
        .zip(pending_f)
        .map(|(p, f)| {
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
        .zip(running_f)
        .map(|(r, f)| {
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
    use tapfinger_core::resources::Resources;
    use tapfinger_core::task::{Task, TaskTypeId};
    use tapfinger_core::view::{NodeView, PendingView};

    /// Node 0 of 8 cores and 16 memory units, half of each free, running task 0, with `window`.
    fn half_free_box(window: Vec<usize>) -> NodeView {
        NodeView {
            gpu: Default::default(),
            id: NodeId(0),
            capacity: Resources(vec![8, 16]),
            free: Resources(vec![4, 8]),
            window,
            overflow: 0,
            running: vec![0],
        }
    }

    /// The features of the first pending task in `g`.
    fn pending(g: &HeteroGraph) -> Vec<f32> {
        g.node_weights()
            .find(|n| n.kind == NodeKind::Pending)
            .unwrap()
            .features
            .clone()
    }

    /// Every node of `g` has its type's width of `widths` (server, pending, running; 1 for the
    /// summary).
    fn assert_widths(g: &HeteroGraph, widths: [usize; 3]) {
        for n in g.node_weights() {
            let w = match n.kind {
                NodeKind::Server => widths[0],
                NodeKind::Pending => widths[1],
                NodeKind::Running => widths[2],
                NodeKind::Summary => 1,
            };
            assert_eq!(n.features.len(), w, "{:?}", n.kind);
        }
    }

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
            gang: None,
        };
        let node = |id| NodeView {
            gpu: Default::default(),
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
                on: Vec::new(),
                class: 0,
                task: task.into(),
                est: Default::default(),
                size: None,
                done: 0.0,
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

    #[test]
    fn general_features_have_fixed_widths_and_ignore_the_task_type() {
        let task = |ty| Task {
            id: TaskId(1),
            ty: TaskTypeId(ty),
            min_demand: Resources(vec![2, 4]),
            max_demand: None,
            priority: 0,
            reachable: vec![NodeId(0)],
            arrival: 0,
            gang: None,
        };
        // A cluster with CPU and memory only (its kinds in another order): GPU is zero.
        let kinds = tapfinger_core::estimate::KindMap::from_names(&["mem", "cpu"]);
        let view = |ty| ClusterView {
            num_types: 7,
            kinds,
            nodes: vec![NodeView {
                gpu: Default::default(),
                id: NodeId(0),
                capacity: Resources(vec![16, 8]),
                free: Resources(vec![8, 8]),
                window: vec![0],
                overflow: 0,
                running: vec![],
            }],
            pending: vec![PendingView {
                on: Vec::new(),
                class: 0,
                task: task(ty).into(),
                est: Default::default(),
                size: None,
                done: 0.0,
            }],
            ..Default::default()
        };
        let g = build_general(&view(3), NodeId(0));
        assert_widths(&g, GENERAL_WIDTHS);
        let server = g
            .node_weights()
            .find(|n| n.kind == NodeKind::Server)
            .unwrap();
        // free: cpu 8/8, gpu 0, mem 8/16; capacity 1, 0, 1.
        assert_eq!(server.features[..6], [1.0, 0.0, 0.5, 1.0, 0.0, 1.0]);
        let feats = |g: &HeteroGraph| -> Vec<Vec<f32>> {
            g.node_weights().map(|n| n.features.clone()).collect()
        };
        assert_eq!(feats(&g), feats(&build_general(&view(0), NodeId(0))));
    }

    #[test]
    fn sized_features_add_what_the_cluster_knows_of_each_size_to_schema_5() {
        use tapfinger_core::sizes::{Level, Prediction};
        use tapfinger_core::view::{RunningView, TaskEstimate};
        let task = |id| std::sync::Arc::new(Task::new(id, [1, 2]).on(&[0]));
        // A recurring job's history: 1, 2 and e² slots at the minimum.
        let e2 = 2f64.exp();
        let history = std::sync::Arc::new(Prediction {
            level: Level::Job,
            samples: 3,
            quantiles: [1.0, 2.0, e2],
            mean: (3.0 + e2) / 3.0,
            sorted: vec![1.0, 2.0, e2],
        });
        let est = |at_min: f64, size: f64| TaskEstimate {
            at_min,
            size,
            ..Default::default()
        };
        let pending = |id, est, size| PendingView {
            on: Vec::new(),
            class: 0,
            task: task(id),
            est,
            size,
            done: 0.0,
        };
        let view = ClusterView {
            kinds: tapfinger_core::estimate::KindMap::from_names(&["cpu", "mem"]),
            nodes: vec![half_free_box(vec![0, 1, 2])],
            pending: vec![
                // Nothing learned; the history of its job; its work declared (twice its class's).
                pending(1, est(6.0, 1.0), None),
                pending(2, est(6.0, 1.0), Some(history.clone())),
                pending(3, est(10.0, 2.0), Some(history.clone())),
            ],
            running: vec![RunningView {
                task: task(4),
                node: NodeId(0),
                alloc: Resources(vec![4, 8]),
                started: 0,
                progress: 0.0,
                attained: 0.0,
                est: est(6.0, 1.0),
                est_alloc: 4.0,
                converging: false,
                in_force: Default::default(),
                size: Some(history.clone()),
                done: 1.5,
            }],
            ..Default::default()
        };
        let contended = build_general_contended(&view, NodeId(0));
        let sized = build_general_sized(&view, NodeId(0));
        let rows = |g: &HeteroGraph, k: NodeKind| -> Vec<Vec<f32>> {
            g.node_weights()
                .filter(|n| n.kind == k)
                .map(|n| n.features.clone())
                .collect()
        };
        for (i, k) in [NodeKind::Server, NodeKind::Pending, NodeKind::Running]
            .into_iter()
            .enumerate()
        {
            for (a, b) in rows(&contended, k).iter().zip(&rows(&sized, k)) {
                assert_eq!(b.len(), GENERAL_SIZED_WIDTHS[i], "{k:?}");
                // Schema 5's features come first, unchanged.
                assert_eq!(b[..a.len()], a[..], "{k:?}");
            }
        }
        let tail = |r: &Vec<f32>, n: usize| r[r.len() - n..].to_vec();
        let p = rows(&sized, NodeKind::Pending);
        let mut p = p.iter().map(|r| tail(r, 3));
        // Nothing learned: the class mean's time, the widest spread, no knowledge.
        assert_eq!(p.next().unwrap(), vec![squash(6.0), 1.0, 0.0]);
        // Its job's history: the mean of the sizes, ln(e² / 1) / 4 = 0.5, a job's level.
        let h = p.next().unwrap();
        assert!((h[0] - squash((3.0 + e2) / 3.0)).abs() < 1e-6, "{h:?}");
        assert!((h[1] - 0.5).abs() < 1e-6, "{h:?}");
        assert_eq!(h[2], 0.75);
        // Declared: the estimator's time at its size, no spread, the surest knowledge.
        assert_eq!(p.next().unwrap(), vec![squash(10.0), 0.0, 1.0]);
        // Running, 1.5 slots done: the mean of the sizes above that (2 and e²), less 1.5.
        let r = tail(&rows(&sized, NodeKind::Running)[0], 2);
        assert!(
            (r[0] - squash((2.0 + e2) / 2.0 - 1.5)).abs() < 1e-6,
            "{r:?}"
        );
        assert!((r[1] - 0.5).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn rlpto_features_add_the_class_convergence_and_forecast_to_the_general_ones() {
        let task = |id, priority| {
            std::sync::Arc::new(Task {
                id: TaskId(id),
                ty: TaskTypeId(0),
                min_demand: Resources(vec![1, 2]),
                max_demand: None,
                priority,
                reachable: vec![NodeId(0)],
                arrival: 0,
                gang: None,
            })
        };
        let view = ClusterView {
            classes: true,
            kinds: tapfinger_core::estimate::KindMap::from_names(&["cpu", "mem"]),
            nodes: vec![half_free_box(vec![0])],
            pending: vec![PendingView {
                on: Vec::new(),
                task: task(1, 9),
                est: Default::default(),
                class: 3,
                size: None,
                done: 0.0,
            }],
            running: vec![tapfinger_core::view::RunningView {
                task: task(2, 0),
                node: NodeId(0),
                alloc: Resources(vec![4, 8]),
                started: 0,
                progress: 0.5,
                attained: 0.0,
                est: Default::default(),
                est_alloc: 4.0,
                converging: true,
                in_force: Default::default(),
                size: None,
                done: 0.0,
            }],
            forecast: vec![0.0, (4f64).exp() - 1.0],
            ..Default::default()
        };
        let general = build_general(&view, NodeId(0));
        let rlpto = build_rlpto(&view, NodeId(0));
        let of = |g: &HeteroGraph, k: NodeKind| -> Vec<f32> {
            g.node_weights()
                .find(|n| n.kind == k)
                .unwrap()
                .features
                .clone()
        };
        for (i, k) in [
            NodeKind::Server,
            NodeKind::Pending,
            NodeKind::Running,
            NodeKind::Summary,
        ]
        .into_iter()
        .enumerate()
        {
            let (a, b) = (of(&general, k), of(&rlpto, k));
            assert_eq!(b.len(), RLPTO_WIDTHS[i], "{k:?}");
            // The general features come first, unchanged.
            assert_eq!(b[..a.len()], a[..], "{k:?}");
        }
        // Class 3 of 9 (as served now, not as submitted); converging; the forecast squashed,
        // a missing third interval as 0.
        assert!((of(&rlpto, NodeKind::Pending)[10] - 3.0 / 9.0).abs() < 1e-6);
        assert_eq!(of(&rlpto, NodeKind::Running)[8], 1.0);
        let s = of(&rlpto, NodeKind::Summary);
        assert_eq!(s[0], 1.0);
        assert!(
            s[1] == 0.0 && (s[2] - 1.0).abs() < 1e-6 && s[3] == 0.0,
            "{s:?}"
        );
        // A cluster that ignores classes shows none.
        let blind = ClusterView {
            classes: false,
            ..view
        };
        assert_eq!(
            of(&build_rlpto(&blind, NodeId(0)), NodeKind::Pending)[10],
            0.0
        );
    }

    /// Two boxes of 8 CPUs and 8 GPUs: box 0 runs a GPU-bound task, box 1 one that gains from
    /// nothing, each half done at its floor; pending, a GPU-bound task that may run on both
    /// (the estimate of [`crate::tests::gpu_bound`]).
    fn two_boxes() -> ClusterView {
        let kinds = tapfinger_core::estimate::KindMap::from_names(&["cpu", "gpu"]);
        let task = |id, reachable: Vec<u32>| crate::tests::gpu_task(id, &reachable);
        let gpu_bound = crate::tests::gpu_bound(3.0);
        let running = |id, node, est| tapfinger_core::view::RunningView {
            task: task(id, vec![node]).into(),
            node: NodeId(node),
            alloc: Resources(vec![1, 1]),
            in_force: Resources(vec![1, 1]),
            started: 0,
            progress: 0.5,
            attained: 0.0,
            est,
            est_alloc: 0.0,
            converging: false,
            size: None,
            done: 0.0,
        };
        let node = |id, r| NodeView {
            gpu: Default::default(),
            id: NodeId(id),
            capacity: Resources(vec![8, 8]),
            free: Resources(vec![7, 7]),
            window: vec![0],
            overflow: 0,
            running: vec![r],
        };
        ClusterView {
            kinds,
            // Box 0 runs a GPU-bound task; box 1 one that gains from nothing.
            nodes: vec![node(0, 0), node(1, 1)],
            running: vec![
                running(2, 0, gpu_bound.clone()),
                running(
                    3,
                    1,
                    tapfinger_core::view::TaskEstimate {
                        at_min: 4.0,
                        ..Default::default()
                    },
                ),
            ],
            pending: vec![PendingView {
                on: Vec::new(),
                class: 0,
                task: task(1, vec![0, 1]).into(),
                est: gpu_bound,
                size: None,
                done: 0.0,
            }],
            ..Default::default()
        }
    }

    /// Schema 5 judges a box by what a task would get beside the tasks running there: a box
    /// whose running task takes GPUs too gives it half its spare GPUs, one whose task gains
    /// nothing from them gives it all; and starting it there slows the running task by the
    /// estimated remaining time it loses.
    #[test]
    fn contended_fit_features_count_the_tasks_running_on_each_box() {
        let view = two_boxes();
        // T(g) = 10 + 18 · (1/(1 + g) − 1/2) slots at g GPUs.
        let t = |g: f64| 10.0 + 18.0 * (1.0 / (1.0 + g) - 0.5);
        let [here, best, delay] = [0, 1, 2].map(|i| GENERAL_WIDTHS[1] + i);
        let close = |a: f32, b: f64| (a - squash(b)).abs() < 1e-6;
        // On box 0: 1 + 6/2 = 4 GPUs (its free units alone would say 7); the running task
        // would drop from 8 GPUs to 4 for the half of its work left.
        let on0 = pending(&build_general_contended(&view, NodeId(0)));
        assert_eq!(on0.len(), GENERAL_CONTENDED_WIDTHS[1]);
        assert_eq!(
            on0[..GENERAL_WIDTHS[1]],
            pending(&build_general(&view, NodeId(0)))[..]
        );
        assert!(close(on0[here], t(4.0)), "{on0:?}");
        assert!(close(on0[best], t(7.0)), "{on0:?}");
        assert!(close(on0[delay], 0.5 * (t(4.0) - t(8.0))), "{on0:?}");
        // On box 1: all 6 spare GPUs, and nobody slowed.
        let on1 = pending(&build_general_contended(&view, NodeId(1)));
        assert!(
            close(on1[here], t(7.0)) && close(on1[best], t(7.0)),
            "{on1:?}"
        );
        assert!(close(on1[delay], 0.0), "{on1:?}");
        assert_widths(
            &build_general_contended(&view, NodeId(0)),
            GENERAL_CONTENDED_WIDTHS,
        );
    }

    /// Whether another box could ever run a task: one its spec lets it reach whose capacity
    /// holds its minimum demand (a box without GPUs cannot hold a task that asks for one,
    /// whatever is free now). The exclusive-first mask asks this.
    #[test]
    fn another_host_is_a_reachable_box_that_can_hold_the_task() {
        let mut view = two_boxes();
        // Box 2 has no GPUs.
        view.nodes.push(NodeView {
            gpu: Default::default(),
            id: NodeId(2),
            capacity: Resources(vec![8, 0]),
            free: Resources(vec![8, 0]),
            window: vec![],
            overflow: 0,
            running: vec![],
        });
        let est = view.pending[0].est.clone();
        for (id, reach) in [(4, vec![0]), (5, vec![0, 2]), (6, vec![0, 1, 2])] {
            view.pending.push(PendingView {
                on: Vec::new(),
                class: 0,
                task: crate::tests::gpu_task(id, &reach).into(),
                est: est.clone(),
                size: None,
                done: 0.0,
            });
        }
        // Tasks 1 (boxes 0, 1), 4 (box 0 only), 5 (box 2 cannot hold it), 6 (boxes 1 and 2).
        let want = [true, false, false, true];
        for (p, w) in view.pending.iter().zip(want) {
            assert_eq!(
                has_other_host(&view, NodeId(0), &p.task),
                w,
                "{}",
                p.task.id
            );
        }
        // From box 1, task 1 could also run on box 0.
        assert!(has_other_host(&view, NodeId(1), &view.pending[0].task));
        assert!(!has_other_host(&view, NodeId(0), &view.pending[1].task));
    }
}
