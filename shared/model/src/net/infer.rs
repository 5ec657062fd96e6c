//! The network's decision pass (encoder, pointer, allocation heads) on plain `f32` buffers, for
//! deciding, with its weights read from a safetensors file ([`Infer::from_safetensors`]): what
//! the simulator's comparisons and the agent run, without burn. With the feature `train` the same
//! network exists in burn (`Net`); `Net::infer` hands its weights over through the very
//! same safetensors bytes, so one reader serves shipped models, checkpoints and training.
//!
//! Why a second forward pass: a decision's graph is small (tens of nodes × width 64), and burn's
//! per-operation cost (dispatch, a fresh buffer per result, layout checks) was most of a decision:
//! profiled on `hetero6`, the matrix products were under a tenth of the time and allocation and
//! copies about a quarter; and burn's CPU backend is the longest unit of the build. Training
//! keeps burn (it needs the gradients); deciding runs this pass, in the simulator and the agent
//! alike. The unit tests (feature `train`) check that both passes give the same logits on every
//! node type, edge kind and mask, for untrained networks of every named variant (with and
//! without graph attention) and for the shipped general model on real views, so this is one
//! network with two evaluators, not two networks.
//! Matrix products go through `nalgebra` (which calls `matrixmultiply`; a plain row loop was
//! slower on the decision benchmark); the rest is row loops.

use super::super::batch::{EDGE_KINDS, GraphBatch};
use super::{AllocQuery, MASKED};

/// Layer-norm epsilon of every norm in the network (burn's default for `LayerNormConfig` and
/// `TransformerEncoderConfig`, which the training network uses).
const EPS: f32 = 1e-5;

/// The score a padded window slot gets inside the window encoder's attention (burn's default
/// `min_float` of multi-head attention, which the training network uses; `Net::infer` refuses a
/// network built otherwise).
pub(crate) const PAD_SCORE: f32 = -1.0e4;

mod load;
pub use load::WeightsError;

/// A linear layer: `y = x W + b`, `W` row-major `inp × out`.
#[derive(Debug, Clone)]
struct Lin {
    w: Vec<f32>,
    b: Option<Vec<f32>>,
    inp: usize,
    out: usize,
}

impl Lin {
    /// `x` (`n × inp`, row-major) times `W`, plus the bias: `n × out`, row-major.
    fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
        let mut y = vec![0.0f32; n * self.out];
        if n > 0 {
            // Row-major buffers read column-major are the transposes: (x W)ᵀ = Wᵀ xᵀ.
            let wt = nalgebra::DMatrixView::from_slice(&self.w, self.out, self.inp);
            let xt = nalgebra::DMatrixView::from_slice(&x[..n * self.inp], self.inp, n);
            let mut yt = nalgebra::DMatrixViewMut::from_slice(&mut y, self.out, n);
            yt.gemm(1.0, &wt, &xt, 0.0);
        }
        if let Some(b) = &self.b {
            for row in y.chunks_mut(self.out) {
                row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
        }
        y
    }
}

/// A layer norm over rows of its width.
#[derive(Debug, Clone)]
struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

impl Norm {
    fn apply(&self, x: &mut [f32]) {
        let d = self.gamma.len();
        for row in x.chunks_mut(d) {
            let mean = row.iter().sum::<f32>() / d as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
            let inv = 1.0 / (var + EPS).sqrt();
            for ((v, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *v = (*v - mean) * inv * g + b;
            }
        }
    }
}

fn relu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

fn gelu(x: &mut [f32]) {
    x.iter_mut()
        .for_each(|v| *v = 0.5 * *v * (1.0 + libm::erff(*v / std::f32::consts::SQRT_2)));
}

/// Rows `idx` of `x` (row width `d`).
fn gather(x: &[f32], d: usize, idx: impl IntoIterator<Item = i32>) -> Vec<f32> {
    idx.into_iter()
        .flat_map(|i| &x[i as usize * d..(i as usize + 1) * d])
        .copied()
        .collect()
}

/// Write the rows of `y` (row width `d`) to rows `idx` of `x`.
fn scatter(x: &mut [f32], d: usize, idx: &[usize], y: &[f32]) {
    for (r, row) in idx.iter().zip(y.chunks(d)) {
        x[r * d..(r + 1) * d].copy_from_slice(row);
    }
}

/// A destination type's incoming aggregates (one per edge kind, `n × d` each) combined by
/// per-node semantic attention, β_k = softmax_k(q · tanh(W z_k)); a lone one is itself.
fn semantic(layer: &Han, zs: Vec<Vec<f32>>, n: usize, d: usize) -> Vec<f32> {
    if zs.len() <= 1 {
        return zs.into_iter().next().unwrap_or_else(|| vec![0.0; n * d]);
    }
    let scores: Vec<Vec<f32>> = zs
        .iter()
        .map(|z| {
            let mut s = layer.sem_w.forward(z, n);
            s.iter_mut().for_each(|v| *v = v.tanh());
            layer.sem_q.forward(&s, n)
        })
        .collect();
    let mut z = vec![0.0f32; n * d];
    for i in 0..n {
        let max = scores.iter().map(|s| s[i]).fold(f32::MIN, f32::max);
        let e: Vec<f32> = scores.iter().map(|s| (s[i] - max).exp()).collect();
        let sum: f32 = e.iter().sum();
        let row = &mut z[i * d..(i + 1) * d];
        for (zk, ek) in zs.iter().zip(&e) {
            let beta = ek / sum;
            row.iter_mut()
                .zip(&zk[i * d..(i + 1) * d])
                .for_each(|(r, v)| *r += v * beta);
        }
    }
    z
}

#[derive(Debug, Clone)]
struct EdgeAtt {
    msg: Lin,
    a_src: Lin,
    a_dst: Lin,
}

#[derive(Debug, Clone)]
struct Han {
    edges: Vec<EdgeAtt>,
    sem_w: Lin,
    sem_q: Lin,
    norms: Vec<Norm>,
}

/// One post-norm transformer-encoder layer with GELU (what `Net` builds).
#[derive(Debug, Clone)]
struct EncLayer {
    q: Lin,
    k: Lin,
    v: Lin,
    o: Lin,
    heads: usize,
    ff_in: Lin,
    ff_out: Lin,
    norm_1: Norm,
    norm_2: Norm,
}

impl EncLayer {
    /// `x`: `g` sequences of `len` tokens (`g·len × d`); `pad[g·len]` masks keys.
    fn forward(&self, x: &mut [f32], g: usize, len: usize, pad: &[bool]) {
        let d = self.q.out;
        let n = g * len;
        let (q, k, v) = (
            self.q.forward(x, n),
            self.k.forward(x, n),
            self.v.forward(x, n),
        );
        let dk = d / self.heads;
        let scale = (dk as f32).sqrt();
        let mut ctx = vec![0.0f32; n * d];
        let mut w = vec![0.0f32; len];
        for s in 0..g {
            for h in 0..self.heads {
                for i in 0..len {
                    let qi = &q[(s * len + i) * d + h * dk..][..dk];
                    for (j, wj) in w.iter_mut().enumerate() {
                        *wj = if pad[s * len + j] {
                            PAD_SCORE
                        } else {
                            let kj = &k[(s * len + j) * d + h * dk..][..dk];
                            qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() / scale
                        };
                    }
                    let max = w.iter().copied().fold(f32::MIN, f32::max);
                    w.iter_mut().for_each(|v| *v = (*v - max).exp());
                    let z: f32 = w.iter().sum();
                    let out = &mut ctx[(s * len + i) * d + h * dk..][..dk];
                    for (j, wj) in w.iter().enumerate() {
                        let vj = &v[(s * len + j) * d + h * dk..][..dk];
                        out.iter_mut().zip(vj).for_each(|(o, v)| *o += wj / z * v);
                    }
                }
            }
        }
        let att = self.o.forward(&ctx, n);
        x.iter_mut().zip(&att).for_each(|(x, a)| *x += a);
        self.norm_1.apply(x);
        let mut ff = self.ff_in.forward(x, n);
        gelu(&mut ff);
        let ff = self.ff_out.forward(&ff, n);
        x.iter_mut().zip(&ff).for_each(|(x, f)| *x += f);
        self.norm_2.apply(x);
    }
}

/// The network's weights for deciding (module doc).
#[derive(Debug, Clone)]
pub struct Infer {
    input: Vec<Lin>,
    layers: Vec<Han>,
    window_enc: Vec<EncLayer>,
    ptr_slot: Lin,
    ptr_query: Lin,
    ptr_v: Lin,
    pass: Lin,
    alloc_hidden: Vec<Lin>,
    alloc_out: Vec<Lin>,
    heads: usize,
    width: usize,
    kinds: usize,
    window: usize,
    max_units: usize,
}

/// Node embeddings per type, row-major `counts[t] × width`.
#[derive(Debug, Clone)]
pub struct Embeddings {
    h: Vec<Vec<f32>>,
}

/// Per node type, which rows a computation needs.
type Rows = [Vec<bool>; 4];

/// The indices where `need` is true.
fn indices(need: &[bool]) -> Vec<usize> {
    need.iter()
        .enumerate()
        .filter(|(_, n)| **n)
        .map(|(i, _)| i)
        .collect()
}

impl Infer {
    /// `Net::encode`: every node's embedding.
    pub fn encode(&self, b: &GraphBatch) -> Embeddings {
        self.encode_rows(b, std::array::from_fn(|t| vec![true; b.counts[t]]))
    }

    /// What a decision reads of `Net::encode`: the embeddings of each graph's deciding server
    /// and window slots (what the pointer and allocation heads read) are exact; other rows are
    /// not computed. Why: a layer's output at a node depends only on its neighbours' inputs
    /// (per-destination softmax and semantic attention, row-wise norms), so the last layer runs
    /// for those nodes alone and each earlier layer for the nodes the next one reads.
    pub fn encode_decision(&self, b: &GraphBatch) -> Embeddings {
        let mut out: Rows = std::array::from_fn(|t| vec![false; b.counts[t]]);
        for &m in &b.me {
            out[0][m as usize] = true;
        }
        for &w in &b.window {
            out[1][w as usize] = true;
        }
        self.encode_rows(b, out)
    }

    /// Rows each layer must compute for `out` after the last: `need[l]` is what layer `l`
    /// (0: the input projection) must produce.
    fn needed(&self, b: &GraphBatch, out: Rows) -> Vec<Rows> {
        let mut need = vec![out];
        for _ in &self.layers {
            let next = need.last().cloned().unwrap_or_default();
            let mut prev = next.clone();
            for (k, (_, src_t, dst_t)) in EDGE_KINDS.iter().enumerate() {
                for (s, d) in b.edges[k].0.iter().zip(&b.edges[k].1) {
                    if next[*dst_t][*d as usize] {
                        prev[*src_t][*s as usize] = true;
                    }
                }
            }
            need.push(prev);
        }
        need.reverse();
        need
    }

    /// `Net::encode` for the rows `out` needs (the others are left at zero).
    fn encode_rows(&self, b: &GraphBatch, out: Rows) -> Embeddings {
        let d = self.width;
        let need = self.needed(b, out);
        let mut h: Vec<Vec<f32>> = (0..4).map(|t| vec![0.0f32; b.counts[t] * d]).collect();
        for (t, h) in h.iter_mut().enumerate() {
            let rows = indices(&need[0][t]);
            let w = self.input[t].inp;
            let x = gather(&b.features[t], w, rows.iter().map(|r| *r as i32));
            let mut y = self.input[t].forward(&x, rows.len());
            relu(&mut y);
            scatter(h, d, &rows, &y);
        }
        for (l, layer) in self.layers.iter().enumerate() {
            let now = &need[l + 1];
            let rows: Vec<Vec<usize>> = now.iter().map(|n| indices(n)).collect();
            // Compact position of each computed row, per type.
            let pos: Vec<Vec<usize>> = (0..4)
                .map(|t| {
                    let mut p = vec![usize::MAX; b.counts[t]];
                    rows[t].iter().enumerate().for_each(|(i, r)| p[*r] = i);
                    p
                })
                .collect();
            let mut incoming: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 4];
            for (k, (_, src_t, dst_t)) in EDGE_KINDS.iter().enumerate() {
                let agg = self.messages(&layer.edges[k], b, k, &h, (*src_t, *dst_t), &rows, &pos);
                incoming[*dst_t].push(agg);
            }
            for (t, zs) in incoming.into_iter().enumerate() {
                let n = rows[t].len();
                let z = semantic(layer, zs, n, d);
                let mut x = gather(&h[t], d, rows[t].iter().map(|r| *r as i32));
                x.iter_mut().zip(&z).for_each(|(x, z)| *x += z.max(0.0));
                layer.norms[t].apply(&mut x);
                scatter(&mut h[t], d, &rows[t], &x);
            }
        }
        Embeddings { h }
    }

    /// One edge kind's attention-weighted messages into the computed rows of its destination
    /// type (compact, `rows[dst] × width`): a softmax over each destination's incoming edges
    /// per head, shifted by the per-destination maximum.
    #[allow(clippy::too_many_arguments)]
    fn messages(
        &self,
        att: &EdgeAtt,
        b: &GraphBatch,
        k: usize,
        h: &[Vec<f32>],
        (src_t, dst_t): (usize, usize),
        rows: &[Vec<usize>],
        pos: &[Vec<usize>],
    ) -> Vec<f32> {
        let (d, heads) = (self.width, self.heads);
        let dh = d / heads;
        let n_dst = rows[dst_t].len();
        let mut agg = vec![0.0f32; n_dst * d];
        // The edges into computed rows, as (compact source, compact destination).
        let mut src_pos = vec![usize::MAX; b.counts[src_t]];
        let mut src_rows = Vec::new();
        let edges: Vec<(usize, usize)> = b.edges[k]
            .0
            .iter()
            .zip(&b.edges[k].1)
            .filter(|(_, t)| pos[dst_t][**t as usize] != usize::MAX)
            .map(|(s, t)| {
                let s = *s as usize;
                if src_pos[s] == usize::MAX {
                    src_pos[s] = src_rows.len();
                    src_rows.push(s as i32);
                }
                (src_pos[s], pos[dst_t][*t as usize])
            })
            .collect();
        if edges.is_empty() {
            return agg;
        }
        let m = att.msg.forward(
            &gather(&h[src_t], d, src_rows.iter().copied()),
            src_rows.len(),
        );
        let a_src = att.a_src.forward(&m, src_rows.len());
        let x_dst = gather(&h[dst_t], d, rows[dst_t].iter().map(|r| *r as i32));
        let a_dst = att.a_dst.forward(&x_dst, n_dst);
        let score: Vec<f32> = edges
            .iter()
            .flat_map(|(s, t)| (0..heads).map(move |x| (*s, *t, x)))
            .map(|(s, t, x)| {
                let v = a_src[s * heads + x] + a_dst[t * heads + x];
                if v >= 0.0 { v } else { 0.2 * v }
            })
            .collect();
        let mut max = vec![-1.0e30f32; n_dst * heads];
        for (e, (_, t)) in edges.iter().enumerate() {
            for x in 0..heads {
                let m = &mut max[t * heads + x];
                *m = m.max(score[e * heads + x]);
            }
        }
        let ex: Vec<f32> = edges
            .iter()
            .enumerate()
            .flat_map(|(e, (_, t))| (0..heads).map(move |x| (e, *t, x)))
            .map(|(e, t, x)| (score[e * heads + x] - max[t * heads + x]).exp())
            .collect();
        let mut denom = vec![0.0f32; n_dst * heads];
        for (e, (_, t)) in edges.iter().enumerate() {
            for x in 0..heads {
                denom[t * heads + x] += ex[e * heads + x];
            }
        }
        for (e, (s, t)) in edges.iter().enumerate() {
            for x in 0..heads {
                let alpha = ex[e * heads + x] / (denom[t * heads + x] + 1e-16);
                let from = &m[s * d + x * dh..][..dh];
                let to = &mut agg[t * d + x * dh..][..dh];
                to.iter_mut().zip(from).for_each(|(a, v)| *a += v * alpha);
            }
        }
        agg
    }

    /// `Net::pointer_logits`, flat: `window + 1` per graph.
    pub fn pointer_logits(
        &self,
        enc: &Embeddings,
        b: &GraphBatch,
        blocked: &[bool],
        pass_blocked: &[bool],
    ) -> Vec<f32> {
        let (g, w, d) = (b.graphs, self.window, self.width);
        let q = gather(&enc.h[0], d, b.me.iter().copied());
        // Per graph: [agent's server, slot 1..W], the server token never padded.
        let mut seq = Vec::with_capacity(g * (w + 1) * d);
        let mut pad = Vec::with_capacity(g * (w + 1));
        for i in 0..g {
            seq.extend_from_slice(&q[i * d..(i + 1) * d]);
            seq.extend(gather(
                &enc.h[1],
                d,
                b.window[i * w..(i + 1) * w].iter().copied(),
            ));
            pad.push(false);
            pad.extend_from_slice(&b.empty[i * w..(i + 1) * w]);
        }
        for layer in &self.window_enc {
            layer.forward(&mut seq, g, w + 1, &pad);
        }
        let slots: Vec<f32> = (0..g)
            .flat_map(|i| &seq[(i * (w + 1) + 1) * d..(i + 1) * (w + 1) * d])
            .copied()
            .collect();
        let keys = self.ptr_slot.forward(&slots, g * w);
        let query = self.ptr_query.forward(&q, g);
        let mut t = keys;
        for (r, row) in t.chunks_mut(d).enumerate() {
            let qr = &query[(r / w) * d..(r / w + 1) * d];
            row.iter_mut()
                .zip(qr)
                .for_each(|(k, q)| *k = (*k + q).tanh());
        }
        let u = self.ptr_v.forward(&t, g * w);
        let pass = self.pass.forward(&q, g);
        let mut out = Vec::with_capacity(g * (w + 1));
        for (i, p) in pass.iter().enumerate() {
            for (x, ux) in u.iter().enumerate().skip(i * w).take(w) {
                let masked = b.empty[x] || blocked.get(x).copied().unwrap_or(false);
                out.push(if masked { MASKED } else { *ux });
            }
            let masked = pass_blocked.get(i).copied().unwrap_or(false);
            out.push(if masked { MASKED } else { *p });
        }
        out
    }

    /// `Net::alloc_logits`, flat: `max_units + 1` per graph.
    pub fn alloc_logits(&self, enc: &Embeddings, b: &GraphBatch, q: &AllocQuery<'_>) -> Vec<f32> {
        let (slot, k, prev, lo, hi, two_point) = (q.slot, q.kind, q.prev, q.lo, q.hi, q.two_point);
        let (g, w, d) = (b.graphs, self.window, self.width);
        let scale = self.max_units.max(1) as f32;
        let task = gather(
            &enc.h[1],
            d,
            (0..g).map(|i| b.window[i * w + slot[i].min(w - 1)]),
        );
        let q = gather(&enc.h[0], d, b.me.iter().copied());
        let x: Vec<f32> = (0..g)
            .flat_map(|i| {
                task[i * d..(i + 1) * d]
                    .iter()
                    .chain(&q[i * d..(i + 1) * d])
                    .copied()
                    .chain(
                        prev[i * self.kinds..(i + 1) * self.kinds]
                            .iter()
                            .map(|p| p / scale),
                    )
            })
            .collect();
        let mut x = self.alloc_hidden[k].forward(&x, g);
        relu(&mut x);
        let mut logits = self.alloc_out[k].forward(&x, g);
        let units = self.max_units + 1;
        for (i, row) in logits.chunks_mut(units).enumerate() {
            for (u, l) in row.iter_mut().enumerate() {
                if super::legal(u as u32, lo[i], hi[i], two_point) {
                    *l += super::two_point_shift(u as u32, lo[i], hi[i], two_point);
                } else {
                    *l = MASKED;
                }
            }
        }
        logits
    }
}

#[cfg(test)]
mod tests;
