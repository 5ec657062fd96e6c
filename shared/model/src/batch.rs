//! Block-diagonal batching of heterogeneous graphs into flat arrays for the network.
//!
//! Many agents' views become one batch: per node type, one feature matrix with the graphs' nodes
//! stacked (plus one padding node per type, so no type is ever empty); per edge type, source and
//! destination indices shifted by each graph's offset. Because no edge crosses graphs, a forward
//! pass over the batch equals forward passes over each graph alone. Pure data: no tensors here.

use crate::graph::{self, EdgeKind, NodeKind};
use tapfinger_core::NodeId;
use tapfinger_core::view::ClusterView;

/// Node types in a fixed order (index = position).
pub const NODE_KINDS: [NodeKind; 4] = [
    NodeKind::Server,
    NodeKind::Pending,
    NodeKind::Running,
    NodeKind::Summary,
];

/// Edge types in a fixed order with (source type, destination type) indices into [`NODE_KINDS`].
pub const EDGE_KINDS: [(EdgeKind, usize, usize); 6] = [
    (EdgeKind::PendingServer, 1, 0),
    (EdgeKind::RunningServer, 2, 0),
    (EdgeKind::SummaryServer, 3, 0),
    (EdgeKind::ServerPending, 0, 1),
    (EdgeKind::ServerRunning, 0, 2),
    (EdgeKind::ServerSummary, 0, 3),
];

/// A model's feature schema: what its graph's nodes carry. One per kind of model that ships,
/// written in a model's `train.json` by its number (1, 3, 5 and 8; the numbers between were
/// experiments, `docs/DECISIONS.md`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "u32", into = "u32")]
pub enum Schema {
    /// Per preset (1, [`graph::build`]): the cluster's own kinds and a one-hot of the task type:
    /// a model fits one preset.
    #[default]
    Preset,
    /// RLPTO's (3, [`graph::build_rlpto`]): the general features with each task's priority
    /// class, its convergence and the arrival forecast.
    Rlpto,
    /// General (5, [`graph::build_general_contended`]): the canonical kinds and the online
    /// speed estimates, the same meaning on every cluster, and each pending task's fit to the
    /// boxes beside the tasks running there (the shipped general model's).
    General,
    /// General with sizes (8, [`graph::build_general_sized`]): the general schema's features
    /// and what the cluster knows of each task's size: its expected remaining work, the spread
    /// of that estimate and how specific the knowledge is (declared, the recurring job's
    /// history, the submitter's, the class's).
    Sized,
}

impl Schema {
    /// Every schema this build reads.
    pub const ALL: [Schema; 4] = [
        Schema::Preset,
        Schema::Rlpto,
        Schema::General,
        Schema::Sized,
    ];

    /// Its number in a model's `train.json`.
    pub fn number(self) -> u32 {
        match self {
            Schema::Preset => 1,
            Schema::Rlpto => 3,
            Schema::General => 5,
            Schema::Sized => 8,
        }
    }

    /// What it is called.
    pub fn name(self) -> &'static str {
        match self {
            Schema::Preset => "per preset",
            Schema::Rlpto => "RLPTO",
            Schema::General => "general",
            Schema::Sized => "general with sizes",
        }
    }
}

impl From<Schema> for u32 {
    fn from(s: Schema) -> u32 {
        s.number()
    }
}

/// A schema number this build does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "written with feature schema {0}; this build reads schemas {known}: use the tapfinger that trained it, or retrain",
    known = Schema::ALL.map(|s| format!("{} ({})", s.number(), s.name())).join(", ")
)]
pub struct UnknownSchema(pub u32);

impl TryFrom<u32> for Schema {
    type Error = UnknownSchema;

    fn try_from(n: u32) -> Result<Self, Self::Error> {
        Schema::ALL
            .into_iter()
            .find(|s| s.number() == n)
            .ok_or(UnknownSchema(n))
    }
}

impl std::fmt::Display for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.number(), self.name())
    }
}

/// Sizes that fix the network's input and output shapes, and the feature schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dims {
    /// Resource kinds (the cluster's own per preset; CPU, GPU, memory in the general schemas).
    pub kinds: usize,
    /// Task types (one-hot width; per preset only).
    pub types: usize,
    /// Pending window per agent.
    pub window: usize,
    /// The feature schema (absent in older files: per preset).
    #[serde(default)]
    pub schema: Schema,
}

impl Dims {
    /// Per-preset sizes (a model for one preset).
    pub fn per_preset(kinds: usize, types: usize, window: usize) -> Self {
        Self {
            kinds,
            types,
            window,
            schema: Schema::Preset,
        }
    }

    /// The general schema: canonical kinds, no task types, `window` pending tasks per agent.
    pub fn general(window: usize) -> Self {
        Self {
            kinds: tapfinger_core::estimate::KINDS.len(),
            types: 0,
            window,
            schema: Schema::General,
        }
    }

    /// The general schema with sizes ([`graph::build_general_sized`]).
    pub fn sized(window: usize) -> Self {
        Self {
            schema: Schema::Sized,
            ..Self::general(window)
        }
    }

    /// RLPTO's schema: the general one's kinds with priority classes, convergence and the
    /// arrival forecast ([`graph::build_rlpto`]).
    pub fn rlpto(window: usize) -> Self {
        Self {
            schema: Schema::Rlpto,
            ..Self::general(window)
        }
    }

    /// Whether the features are general (one model for every cluster: RLPTO's and general).
    pub fn is_general(&self) -> bool {
        self.schema != Schema::Preset
    }

    /// Whether this is RLPTO's schema.
    pub fn is_rlpto(&self) -> bool {
        self.schema == Schema::Rlpto
    }

    /// Feature width of each node type (as [`graph::build`], [`graph::build_rlpto`],
    /// [`graph::build_general_contended`] or [`graph::build_general_sized`] build them).
    pub fn feature_width(&self, kind: usize) -> usize {
        match self.schema {
            Schema::Rlpto => graph::RLPTO_WIDTHS.get(kind).copied().unwrap_or(1),
            Schema::General => graph::GENERAL_CONTENDED_WIDTHS
                .get(kind)
                .copied()
                .unwrap_or(1),
            Schema::Sized => graph::GENERAL_SIZED_WIDTHS.get(kind).copied().unwrap_or(1),
            Schema::Preset => match kind {
                0 => self.kinds + 2,
                1 => self.kinds + self.types,
                2 => self.kinds + self.types + 1,
                _ => 1,
            },
        }
    }
}

/// A batch of graphs, one per (view, deciding agent).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphBatch {
    /// Number of graphs.
    pub graphs: usize,
    /// Nodes per type (padding included).
    pub counts: [usize; 4],
    /// Row-major features per type: `counts[t] × Dims::feature_width(t)`.
    pub features: [Vec<f32>; 4],
    /// Per edge type (order of [`EDGE_KINDS`]): source and destination indices.
    pub edges: [(Vec<i32>, Vec<i32>); 6],
    /// Per graph: index of the deciding agent's server node.
    pub me: Vec<i32>,
    /// Per graph: index of its summary node.
    pub summary: Vec<i32>,
    /// `graphs × window`: pending-node index of each window slot (the padding node when empty).
    pub window: Vec<i32>,
    /// `graphs × window`: true where the slot is empty.
    pub empty: Vec<bool>,
}

/// Batch `items` (a view and the agent deciding in it). Views whose agent is not a node of the
/// view contribute an empty window.
pub fn batch(items: &[(&ClusterView, NodeId)], dims: &Dims) -> GraphBatch {
    let mut counts = [0usize; 4];
    let mut features: [Vec<f32>; 4] = Default::default();
    let mut edges: [(Vec<i32>, Vec<i32>); 6] = Default::default();
    let (mut me, mut summary, mut window, mut empty) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut pending_slots: Vec<Vec<i32>> = Vec::with_capacity(items.len());
    for (view, agent) in items {
        let g = match dims.schema {
            Schema::Rlpto => graph::build_rlpto(view, *agent),
            Schema::General => graph::build_general_contended(view, *agent),
            Schema::Sized => graph::build_general_sized(view, *agent),
            Schema::Preset => graph::build(view, *agent),
        };
        // Local index of every graph node within its type, offset by the batch so far.
        let mut local = vec![0i32; g.node_count()];
        for idx in g.node_indices() {
            let n = &g[idx];
            let t = NODE_KINDS.iter().position(|k| *k == n.kind).unwrap_or(0);
            local[idx.index()] = counts[t] as i32;
            counts[t] += 1;
            let w = dims.feature_width(t);
            let mut f = n.features.clone();
            f.resize(w, 0.0);
            features[t].extend(f);
            if n.kind == NodeKind::Server && n.refers == graph::NodeRef::Server(*agent) {
                me.push(local[idx.index()]);
            }
            if n.kind == NodeKind::Summary {
                summary.push(local[idx.index()]);
            }
        }
        if me.len() < summary.len() {
            // The agent is not in this view: point at the first server (its window is empty).
            me.push(local.first().copied().unwrap_or(0));
        }
        for e in g.edge_indices() {
            let Some((s, d)) = g.edge_endpoints(e) else {
                continue;
            };
            if let Some(k) = EDGE_KINDS.iter().position(|(kind, _, _)| *kind == g[e]) {
                edges[k].0.push(local[s.index()]);
                edges[k].1.push(local[d.index()]);
            }
        }
        // Pending nodes are added in `view.pending` order, so window entry i is pending node i.
        let first_pending = g
            .node_indices()
            .find(|i| g[*i].kind == NodeKind::Pending)
            .map(|i| local[i.index()]);
        let slots: Vec<i32> = view
            .node_index(*agent)
            .map(|ni| {
                view.nodes[ni]
                    .window
                    .iter()
                    .take(dims.window)
                    .map(|&p| first_pending.unwrap_or(0) + p as i32)
                    .collect()
            })
            .unwrap_or_default();
        pending_slots.push(slots);
    }
    // One padding node per type: keeps every type non-empty; empty window slots point at it.
    for (t, count) in counts.iter_mut().enumerate() {
        features[t].extend(std::iter::repeat_n(0.0, dims.feature_width(t)));
        *count += 1;
    }
    let pad_pending = counts[1] as i32 - 1;
    for slots in &pending_slots {
        for i in 0..dims.window {
            window.push(slots.get(i).copied().unwrap_or(pad_pending));
            empty.push(i >= slots.len());
        }
    }
    GraphBatch {
        graphs: items.len(),
        counts,
        features,
        edges,
        me,
        summary,
        window,
        empty,
    }
}
