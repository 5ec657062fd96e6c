//! [`Net`]: the network of [`super`] in burn, with gradients, for training (feature `train`).
//! Its forward passes give the same logits as the decision pass ([`super::infer`]) on the same
//! weights; the decision pass's tests check it.

use super::super::batch::{EDGE_KINDS, GraphBatch};
use super::{AllocQuery, MASKED, NetConfig, legal, two_point_shift};
use burn::module::Module;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::{leaky_relu, relu, tanh};
use burn::tensor::{Bool, Device, IndexingUpdateOp, Int, Tensor, TensorData};

/// Node-level attention for one edge type.
#[derive(Module, Debug)]
pub(super) struct EdgeAttention {
    /// Message transform of the source node's state.
    pub(super) msg: Linear,
    /// Attention score's source term.
    pub(super) a_src: Linear,
    /// Attention score's destination term.
    pub(super) a_dst: Linear,
}

/// One HAN layer: attention per edge type, semantic attention per destination node.
#[derive(Module, Debug)]
pub(super) struct HanLayer {
    /// One attention per edge type (the heterogeneous graph's relations).
    pub(super) edges: Vec<EdgeAttention>,
    /// Semantic attention over edge types: projection.
    pub(super) sem_w: Linear,
    /// Semantic attention over edge types: query.
    pub(super) sem_q: Linear,
    /// Layer norm per node type after the residual.
    pub(super) norms: Vec<LayerNorm>,
}

/// The whole network.
#[derive(Module, Debug)]
pub struct Net {
    /// Input projection per node type (features to `width`).
    pub(super) input: Vec<Linear>,
    /// The graph attention layers.
    pub(super) layers: Vec<HanLayer>,
    /// Self-attention over a node's window of pending tasks.
    pub(super) window_enc: TransformerEncoder,
    /// Pointer: key of each window slot.
    pub(super) ptr_slot: Linear,
    /// Pointer: the deciding node's query.
    pub(super) ptr_query: Linear,
    /// Pointer: score vector of the additive attention.
    pub(super) ptr_v: Linear,
    /// Logit of passing (claiming nothing this step).
    pub(super) pass: Linear,
    /// Allocation head per kind: hidden layer.
    pub(super) alloc_hidden: Vec<Linear>,
    /// Allocation head per kind: logits over unit counts.
    pub(super) alloc_out: Vec<Linear>,
    /// Critic: hidden layer.
    pub(super) value_hidden: Linear,
    /// Critic: the value.
    pub(super) value_out: Linear,
    /// Attention heads (kept to split `width` at run time).
    pub(super) heads: usize,
    /// Hidden width.
    pub(super) width: usize,
    /// Resource kinds (one allocation head each).
    pub(super) kinds: usize,
    /// Pending tasks per node it was built for.
    pub(super) window: usize,
    /// Largest unit count an allocation head can choose.
    pub(super) max_units: usize,
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
