//! The TapFinger network in burn: a heterogeneous graph-attention (HAN) encoder, a pointer over the
//! agent's pending window, a masked allocation head decomposed per resource kind, and a value head.
//!
//! The pointer runs one transformer-encoder layer over the agent's window (with the agent's server
//! as an extra, never-padded token) before additive attention.
//!
//! Design choices (small and fast on 2 CPU cores; the reference used 8 layers × 256 without
//! residuals): width 64, 4 heads, 2 layers, a residual connection and layer norm after each layer.
//! Semantic attention over edge types is computed *per destination node* (HAN averages it over all
//! nodes of a type), so a node's embedding never depends on other graphs in a batch: batched and
//! single-graph forward passes agree. Masks use a large negative number, never −∞ (NaN-safe).

pub mod infer;

use super::batch::{Dims, EDGE_KINDS, GraphBatch};
use burn::module::Module;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::{leaky_relu, relu, tanh};
use burn::tensor::{Bool, Device, IndexingUpdateOp, Int, Tensor, TensorData};

/// Added to masked logits.
pub const MASKED: f32 = -1.0e9;

/// Network sizes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NetConfig {
    /// Input sizes.
    pub dims: Dims,
    /// Embedding width.
    pub width: usize,
    /// Attention heads (must divide `width`).
    pub heads: usize,
    /// HAN layers.
    pub layers: usize,
    /// Largest number of units of one kind the allocation head can give (grid 0..=max_units).
    pub max_units: usize,
    /// How the task is selected (the paper's ablations replace the pointer).
    #[serde(default)]
    pub selection: Selection,
    /// The work-conserving action mask, in training and in deployment alike: an idle node (no
    /// task running on it) may not pass while a task in its window fits. (Models written before
    /// it existed were evaluated with the same rule as a greedy-mode guard.)
    #[serde(default = "yes")]
    pub work_conserving: bool,
    /// With `work_conserving`, the strict form, in training and in deployment alike: a busy node
    /// may not pass either while a task in its window fits in the units its running tasks would
    /// not take (its free units after the node's re-share of them, which gives a task whose
    /// switches are free every spare unit up to its cap, and leaves a task whose class pays for
    /// a switch what it holds unless a move is worth it), unless the task runs
    /// [`super::FASTER_ELSEWHERE`] times faster on another
    /// box it may run on (GPU models differ; by the estimator). So a task that fits never waits
    /// while units no one can use lie idle but to run much faster elsewhere, and a node whose
    /// running tasks would take its spare units may still wait for them. Off (the per-preset
    /// models; the general model has it on): only an idle node is held to it. Why: on replays
    /// of real traces, whose tasks cannot be resized, a model trained on generated scenarios
    /// passed on busy boxes with GPUs idle and tasks waiting (docs/DECISIONS.md, "Masks and
    /// action rules").
    #[serde(default)]
    pub strict_conserving: bool,
    /// Elastic sharing, in training and in deployment alike: a claim starts the task at its
    /// minimum demand (the allocation head is not used), and once per slot the node's spare units
    /// are re-shared among its running tasks by [`tapfinger_policies::baselines::least_attained_shares`]
    /// (Tiresias's rule). Off (models written before it existed): the allocation head chooses
    /// each task's units once, for its whole run.
    #[serde(default)]
    pub elastic: bool,
    /// With `elastic`: the GPUs are not re-shared; a task runs with the GPUs of its minimum
    /// demand from start to end, CPU and memory are re-shared. (The agent re-shares GPUs by
    /// restarting resumable tasks with new devices; this form is for clusters whose tasks
    /// cannot resume.) Off (the default, and models written before it existed): GPUs are
    /// re-shared as well.
    #[serde(default)]
    pub hold_gpus: bool,
    /// With `elastic`: the allocation head chooses each claimed task's **floor** — the least it
    /// holds for its run — and the slot's re-share tops tasks up from their floors by the same
    /// least-attained rule, never taking one under its floor ([`tapfinger_core::ledger::Ledger::set_floors`]),
    /// in training and in deployment alike. So the policy can start a task large (as
    /// first-fit-max does), at its minimum (as Tiresias does) or in between. A task whose minimum
    /// demand in some kind is beyond the head's grid is claimed at its minimum. Off (the default,
    /// and models written before it existed): claims at the minimum demand.
    #[serde(default)]
    pub floors: bool,
    /// With `floors`: a floor is one of two points per kind, the task's minimum demand or the
    /// most the node could give it now (its cap, the node's free units, the head's grid), and
    /// the head's logit of the larger is shifted by this offset (negative: the start rarely
    /// claims large, so training explores it without first losing what claiming at the minimum
    /// does). In training and in deployment alike. `None` (the default): any unit between.
    #[serde(default)]
    pub two_point: Option<f32>,
    /// With `elastic`: the slot's re-share hands each spare CPU and GPU unit to the running
    /// task whose estimated job time it cuts by the largest fraction
    /// ([`tapfinger_core::share::gain_greedy_shares`]: on the online speed estimator, never a true speed
    /// model), in training and in deployment alike. Off (the default, and models written before
    /// it existed): Tiresias's least-attained round robin.
    #[serde(default)]
    pub gain_share: bool,
    /// With `gain_share`: the re-share first lets the running tasks it can finish within the
    /// slot finish, those needing the fewest units first ([`tapfinger_core::share::gain_greedy_shares`]
    /// with `finish_first`), in training and in deployment alike. Off (the default, and models
    /// written before it existed): the gain-aware share alone.
    #[serde(default)]
    pub finish_first: bool,
    /// Each decision attends to at most this many nodes ([`tapfinger_core::view::ClusterView::focus`]:
    /// the deciding node, those competing for its window, the freest), in training and in
    /// deployment alike, so that a decision's cost stays bounded on a large cluster; 0 (models
    /// written before it existed): the whole cluster.
    #[serde(default)]
    pub focus: usize,
    /// RLPTO models (feature schema 3): the interval in slots of the arrival forecast their
    /// views carried in training, which they are run with (0: none; other models).
    #[serde(default)]
    pub forecast_interval_slots: u64,
    /// The exclusive-first mask, in training and in deployment alike (off: the shipped models,
    /// and models written before it existed): while a window task that no other box could ever
    /// run ([`crate::graph::has_other_host`] is false) fits the node's free units, the younger tasks
    /// of its class behind it that other boxes could run may not be chosen; the older ones,
    /// the other exclusive ones and tasks of other classes may (which class runs first is the
    /// policy's choice). Why: a box's own tasks wait for that box alone, and a policy that
    /// keeps taking the tasks of their class anyone could run piles them up until the
    /// arrivals stop (docs/DECISIONS.md, "Masks and action rules").
    #[serde(default)]
    pub exclusive_first: bool,
    /// The wait-for-faster mask, in training and in deployment alike (off: the shipped models,
    /// and models written before it existed): a window task may not be chosen on a box where
    /// another box it may run on, of another GPU model, would by the estimator finish it
    /// [`super::FASTER_ELSEWHERE`] times sooner even after waiting for room there (free now or
    /// freed by its running tasks' estimated ends). With every fitting task so held, the node
    /// may pass. Why: on replays of Gavel traces on V100, P100 and K80 boxes the learned policy
    /// started rigid jobs on K80s that a baseline waited out, up to 2.2 times the best
    /// baseline's average JCT on a window (docs/DECISIONS.md, "Masks and action rules").
    #[serde(default)]
    pub wait_faster: bool,
}

/// Task selection: the learned pointer, or the ablations' fixed rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Selection {
    /// The pointer network (with "do nothing").
    #[default]
    Pointer,
    /// Uniformly among feasible window tasks (the No-pointer ablation).
    Uniform,
    /// The oldest feasible window task (Vanilla DRL's first-come choice).
    Fifo,
}

/// Named variants: the full policy and the paper's ablations.
pub const VARIANTS: &[&str] = &[
    "tapfinger",
    "nohan",
    "nopointer",
    "vanilla",
    "nomask",
    "exclusive",
    "waitfaster",
];

impl NetConfig {
    /// The configuration of a named variant: `nohan` drops the graph attention layers (each node
    /// is embedded from its own features by an MLP), `nopointer` selects uniformly, `vanilla` is
    /// both an MLP encoder and first-come selection, `nomask` is the full policy without the
    /// work-conserving mask (its ablation), `exclusive` the full policy with the
    /// exclusive-first mask ([`NetConfig::exclusive_first`]), `waitfaster` the full policy with the
    /// wait-for-faster mask ([`NetConfig::wait_faster`]).
    pub fn variant(dims: Dims, name: &str) -> Option<Self> {
        let mut c = Self::new(dims);
        match name {
            "tapfinger" => {}
            "nohan" => c.layers = 0,
            "nopointer" => c.selection = Selection::Uniform,
            "nomask" => c.work_conserving = false,
            "exclusive" => c.exclusive_first = true,
            "waitfaster" => c.wait_faster = true,
            "vanilla" => {
                c.layers = 0;
                c.selection = Selection::Fifo;
            }
            _ => return None,
        }
        Some(c)
    }
}

impl NetConfig {
    /// Defaults for the given input sizes.
    pub fn new(dims: Dims) -> Self {
        Self {
            dims,
            width: 64,
            heads: 4,
            layers: 2,
            max_units: 32,
            selection: Selection::Pointer,
            work_conserving: true,
            strict_conserving: false,
            elastic: false,
            hold_gpus: false,
            floors: false,
            two_point: None,
            gain_share: false,
            finish_first: false,
            focus: 0,
            forecast_interval_slots: 0,
            exclusive_first: false,
            wait_faster: false,
        }
    }
}

fn yes() -> bool {
    true
}

/// Node-level attention for one edge type.
#[derive(Module, Debug)]
struct EdgeAttention {
    /// Message transform of the source node's state.
    msg: Linear,
    /// Attention score's source term.
    a_src: Linear,
    /// Attention score's destination term.
    a_dst: Linear,
}

/// One HAN layer: attention per edge type, semantic attention per destination node.
#[derive(Module, Debug)]
struct HanLayer {
    /// One attention per edge type (the heterogeneous graph's relations).
    edges: Vec<EdgeAttention>,
    /// Semantic attention over edge types: projection.
    sem_w: Linear,
    /// Semantic attention over edge types: query.
    sem_q: Linear,
    /// Layer norm per node type after the residual.
    norms: Vec<LayerNorm>,
}

/// The whole network.
#[derive(Module, Debug)]
pub struct Net {
    /// Input projection per node type (features to `width`).
    input: Vec<Linear>,
    /// The graph attention layers.
    layers: Vec<HanLayer>,
    /// Self-attention over a node's window of pending tasks.
    window_enc: TransformerEncoder,
    /// Pointer: key of each window slot.
    ptr_slot: Linear,
    /// Pointer: the deciding node's query.
    ptr_query: Linear,
    /// Pointer: score vector of the additive attention.
    ptr_v: Linear,
    /// Logit of passing (claiming nothing this step).
    pass: Linear,
    /// Allocation head per kind: hidden layer.
    alloc_hidden: Vec<Linear>,
    /// Allocation head per kind: logits over unit counts.
    alloc_out: Vec<Linear>,
    /// Critic: hidden layer.
    value_hidden: Linear,
    /// Critic: the value.
    value_out: Linear,
    /// Attention heads (kept to split `width` at run time).
    heads: usize,
    /// Hidden width.
    width: usize,
    /// Resource kinds (one allocation head each).
    kinds: usize,
    /// Pending tasks per node it was built for.
    window: usize,
    /// Largest unit count an allocation head can choose.
    max_units: usize,
}

/// What an allocation head is asked, per graph of a batch: the logits of kind `kind` for the
/// window slot `slot[g]` (ignored where it is the pass action), given the units already chosen
/// for the kinds before it (`prev`, `graphs × kinds`, zeros from `kind` on) and the legal range
/// `lo[g]..=hi[g]`.
#[derive(Debug, Clone, Copy)]
pub struct AllocQuery<'a> {
    /// The chosen window slot per graph.
    pub slot: &'a [usize],
    /// The network's resource kind.
    pub kind: usize,
    /// Units chosen so far per graph and kind.
    pub prev: &'a [f32],
    /// Least legal units per graph.
    pub lo: &'a [u32],
    /// Most legal units per graph.
    pub hi: &'a [u32],
    /// [`NetConfig::two_point`]: only `lo` and `hi` are legal, `hi`'s logit shifted by this.
    pub two_point: Option<f32>,
}

/// Whether `u` units are a legal allocation in `lo..=hi` ([`AllocQuery`]); with
/// [`NetConfig::two_point`], only its two ends.
pub(crate) fn legal(u: u32, lo: u32, hi: u32, two_point: Option<f32>) -> bool {
    (lo..=hi).contains(&u) && (two_point.is_none() || u == lo || u == hi)
}

/// What [`NetConfig::two_point`] adds to the logit of `u` units in `lo..=hi`: its offset at the
/// larger point, where there are two; 0 elsewhere (and without it).
pub(crate) fn two_point_shift(u: u32, lo: u32, hi: u32, two_point: Option<f32>) -> f32 {
    match two_point {
        Some(off) if u == hi && hi > lo => off,
        _ => 0.0,
    }
}

/// Node embeddings per type.
pub struct Encoded {
    /// `[counts[t], width]` per node type.
    pub h: Vec<Tensor<2>>,
}

fn ints(v: &[i32], device: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(v.to_vec(), [v.len()]), device)
}

impl Net {
    /// This network's allocation heads set to draw, for every kind, the lowest unit allowed
    /// (a task's minimum demand) most often and each unit above it `e^-slope` times as often as
    /// the one below: zero weights, bias `-slope · u` for `u` units. The warm start of a model
    /// trained without floors ([`NetConfig::floors`]) whose floors are now learned: its
    /// untrained heads would draw floors at random over the whole grid (a share of a box no
    /// task needs, so the boxes' queues stall), while this start claims near the minimum, as it
    /// did, and leaves PPO room to find where larger floors pay.
    pub fn floors_near_minimum(mut self, slope: f32) -> Self {
        for lin in &mut self.alloc_out {
            let w = lin.weight.val();
            let [inp, units] = w.dims();
            let device = w.device();
            lin.weight =
                burn::module::Param::from_tensor(Tensor::<2>::zeros([inp, units], &device));
            let bias: Vec<f32> = (0..units).map(|u| -slope * u as f32).collect();
            lin.bias = Some(burn::module::Param::from_tensor(Tensor::<1>::from_data(
                TensorData::new(bias, [units]),
                &device,
            )));
        }
        self
    }

    /// A freshly initialized network.
    pub fn new(cfg: &NetConfig, device: &Device) -> Self {
        let d = cfg.width;
        let lin = |i: usize, o: usize| LinearConfig::new(i, o).init(device);
        let nobias = |i: usize, o: usize| LinearConfig::new(i, o).with_bias(false).init(device);
        let input = (0..4).map(|t| lin(cfg.dims.feature_width(t), d)).collect();
        let layers = (0..cfg.layers)
            .map(|_| HanLayer {
                edges: EDGE_KINDS
                    .iter()
                    .map(|_| EdgeAttention {
                        msg: lin(d, d),
                        a_src: nobias(d, cfg.heads),
                        a_dst: nobias(d, cfg.heads),
                    })
                    .collect(),
                sem_w: lin(d, d),
                sem_q: nobias(d, 1),
                norms: (0..4)
                    .map(|_| LayerNormConfig::new(d).init(device))
                    .collect(),
            })
            .collect();
        let k = cfg.dims.kinds;
        Self {
            input,
            layers,
            window_enc: TransformerEncoderConfig::new(d, 2 * d, cfg.heads, 1)
                .with_dropout(0.0)
                .init(device),
            ptr_slot: lin(d, d),
            ptr_query: lin(d, d),
            ptr_v: nobias(d, 1),
            pass: lin(d, 1),
            alloc_hidden: (0..k).map(|_| lin(2 * d + k, d)).collect(),
            alloc_out: (0..k).map(|_| lin(d, cfg.max_units + 1)).collect(),
            value_hidden: lin(2 * d, d),
            value_out: lin(d, 1),
            heads: cfg.heads,
            width: d,
            kinds: k,
            window: cfg.dims.window,
            max_units: cfg.max_units,
        }
    }

    /// Units per kind the allocation head can express.
    pub fn max_units(&self) -> usize {
        self.max_units
    }

    /// Encode a batch.
    pub fn encode(&self, b: &GraphBatch, device: &Device) -> Encoded {
        let mut h: Vec<Tensor<2>> = (0..4)
            .map(|t| {
                let w = b.features[t].len() / b.counts[t].max(1);
                let x = Tensor::<2>::from_data(
                    TensorData::new(b.features[t].clone(), [b.counts[t], w]),
                    device,
                );
                relu(self.input[t].forward(x))
            })
            .collect();
        let edges: Vec<(Tensor<1, Int>, Tensor<1, Int>)> = b
            .edges
            .iter()
            .map(|(s, d)| (ints(s, device), ints(d, device)))
            .collect();
        let dh = self.width / self.heads;
        for layer in &self.layers {
            // Messages per edge type, then semantic attention per destination type.
            let mut incoming: Vec<Vec<Tensor<2>>> = vec![Vec::new(); 4];
            for (k, (_, src_t, dst_t)) in EDGE_KINDS.iter().enumerate() {
                let n_edges = b.edges[k].0.len();
                let n_dst = b.counts[*dst_t];
                if n_edges == 0 {
                    incoming[*dst_t].push(Tensor::zeros([n_dst, self.width], device));
                    continue;
                }
                let att = &layer.edges[k];
                let (src, dst) = (&edges[k].0, &edges[k].1);
                let m = att.msg.forward(h[*src_t].clone());
                let score = leaky_relu(
                    att.a_src.forward(m.clone()).select(0, src.clone())
                        + att.a_dst.forward(h[*dst_t].clone()).select(0, dst.clone()),
                    0.2,
                );
                // Segment softmax over each destination's incoming edges, shifted by the
                // (detached) per-destination maximum for stability.
                let max = Tensor::<2>::full([n_dst, self.heads], -1.0e30, device).select_assign(
                    0,
                    dst.clone(),
                    score.clone().detach(),
                    IndexingUpdateOp::Max,
                );
                let e = (score - max.select(0, dst.clone())).exp();
                let denom = Tensor::<2>::zeros([n_dst, self.heads], device).select_assign(
                    0,
                    dst.clone(),
                    e.clone(),
                    IndexingUpdateOp::Add,
                );
                let alpha = e / (denom.select(0, dst.clone()) + 1e-16);
                let msg = m.select(0, src.clone()).reshape([n_edges, self.heads, dh])
                    * alpha.unsqueeze_dim::<3>(2);
                let agg = Tensor::<2>::zeros([n_dst, self.width], device).select_assign(
                    0,
                    dst.clone(),
                    msg.reshape([n_edges, self.width]),
                    IndexingUpdateOp::Add,
                );
                incoming[*dst_t].push(agg);
            }
            let mut next = Vec::with_capacity(4);
            for (t, zs) in incoming.into_iter().enumerate() {
                let z = if zs.len() == 1 {
                    zs.into_iter()
                        .next()
                        .unwrap_or_else(|| Tensor::zeros([b.counts[t], self.width], device))
                } else {
                    // Per-node semantic attention: β_k = softmax_k(q · tanh(W z_k)).
                    let scores: Vec<Tensor<2>> = zs
                        .iter()
                        .map(|z| layer.sem_q.forward(tanh(layer.sem_w.forward(z.clone()))))
                        .collect();
                    let beta = burn::tensor::activation::softmax(Tensor::cat(scores, 1), 1);
                    let n = zs.len();
                    let stacked = Tensor::stack::<3>(zs, 1);
                    (stacked * beta.reshape([b.counts[t], n, 1]))
                        .sum_dim(1)
                        .reshape([b.counts[t], self.width])
                };
                next.push(layer.norms[t].forward(h[t].clone() + relu(z)));
            }
            h = next;
        }
        Encoded { h }
    }

    /// The deciding agent's server embedding per graph, `[graphs, width]`.
    fn me(&self, enc: &Encoded, b: &GraphBatch, device: &Device) -> Tensor<2> {
        enc.h[0].clone().select(0, ints(&b.me, device))
    }

    /// Pointer logits `[graphs, window + 1]`: one per window slot, the last one "do nothing".
    /// `blocked` (`graphs × window`) masks slots besides empty ones (e.g. infeasible tasks).
    pub fn pointer_logits(
        &self,
        enc: &Encoded,
        b: &GraphBatch,
        blocked: &[bool],
        pass_blocked: &[bool],
        device: &Device,
    ) -> Tensor<2> {
        let g = b.graphs;
        let q = self.me(enc, b, device);
        let slots = enc.h[1].clone().select(0, ints(&b.window, device));
        // A transformer layer over [agent's server, slot 1..W] lets each slot see the others and
        // the agent's context; the server token is never padded, so no row is fully masked.
        let w = self.window;
        let seq = Tensor::cat(
            vec![
                q.clone().reshape([g, 1, self.width]),
                slots.reshape([g, w, self.width]),
            ],
            1,
        );
        let pad: Vec<bool> = (0..g)
            .flat_map(|i| std::iter::once(false).chain(b.empty[i * w..(i + 1) * w].iter().copied()))
            .collect();
        let pad = Tensor::<2, Bool>::from_data(TensorData::new(pad, [g, w + 1]), device);
        let ctx = self
            .window_enc
            .forward(TransformerEncoderInput::new(seq).mask_pad(pad));
        let slots = ctx.narrow(1, 1, w).reshape([g * w, self.width]);
        let keys = self
            .ptr_slot
            .forward(slots)
            .reshape([g, self.window, self.width]);
        let query = self
            .ptr_query
            .forward(q.clone())
            .reshape([g, 1, self.width]);
        let u = self
            .ptr_v
            .forward(tanh(keys + query).reshape([g * self.window, self.width]))
            .reshape([g, self.window]);
        let mask: Vec<bool> = b.empty.iter().zip(blocked).map(|(e, x)| *e || *x).collect();
        let mask = Tensor::<2, Bool>::from_data(TensorData::new(mask, [g, self.window]), device);
        let u = u.mask_fill(mask, MASKED);
        let pass = self.pass.forward(q);
        let pass = if pass_blocked.iter().any(|x| *x) {
            // The work-conserving mask: an idle node may not pass while a task fits.
            let m = Tensor::<2, Bool>::from_data(
                TensorData::new(
                    (0..g)
                        .map(|i| pass_blocked.get(i).copied().unwrap_or(false))
                        .collect::<Vec<_>>(),
                    [g, 1],
                ),
                device,
            );
            pass.mask_fill(m, MASKED)
        } else {
            pass
        };
        Tensor::cat(vec![u, pass], 1)
    }

    /// Allocation logits `[graphs, max_units + 1]` for the query's kind ([`AllocQuery`]).
    pub fn alloc_logits(
        &self,
        enc: &Encoded,
        b: &GraphBatch,
        q: &AllocQuery<'_>,
        device: &Device,
    ) -> Tensor<2> {
        let (slot, k, prev, lo, hi, two_point) = (q.slot, q.kind, q.prev, q.lo, q.hi, q.two_point);
        let g = b.graphs;
        let idx: Vec<i32> = (0..g)
            .map(|i| b.window[i * self.window + slot[i].min(self.window - 1)])
            .collect();
        let task = enc.h[1].clone().select(0, ints(&idx, device));
        let q = self.me(enc, b, device);
        let scale = self.max_units.max(1) as f32;
        let prev = Tensor::<2>::from_data(
            TensorData::new(
                prev.iter().map(|p| p / scale).collect::<Vec<f32>>(),
                [g, self.kinds],
            ),
            device,
        );
        let x = relu(self.alloc_hidden[k].forward(Tensor::cat(vec![task, q, prev], 1)));
        let logits = self.alloc_out[k].forward(x);
        let units = self.max_units + 1;
        let mask: Vec<bool> = (0..g)
            .flat_map(|i| (0..units).map(move |u| !legal(u as u32, lo[i], hi[i], two_point)))
            .collect();
        let logits = match two_point {
            Some(_) => {
                let shift: Vec<f32> = (0..g)
                    .flat_map(|i| {
                        (0..units).map(move |u| two_point_shift(u as u32, lo[i], hi[i], two_point))
                    })
                    .collect();
                logits + Tensor::<2>::from_data(TensorData::new(shift, [g, units]), device)
            }
            None => logits,
        };
        logits.mask_fill(
            Tensor::<2, Bool>::from_data(TensorData::new(mask, [g, units]), device),
            MASKED,
        )
    }

    /// Value per graph `[graphs]`, from the summary node (which sees every server) and the
    /// deciding agent's server. Unbounded output: returns are negative.
    pub fn value(&self, enc: &Encoded, b: &GraphBatch, device: &Device) -> Tensor<1> {
        let s = enc.h[3].clone().select(0, ints(&b.summary, device));
        let x = relu(
            self.value_hidden
                .forward(Tensor::cat(vec![s, self.me(enc, b, device)], 1)),
        );
        self.value_out.forward(x).reshape([b.graphs])
    }
}
