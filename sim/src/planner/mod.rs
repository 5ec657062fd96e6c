//! The learned layer-to-resource planner (HeterPS's approach): an LSTM walks the layer chain and,
//! at each layer, scores every resource type; types are chosen one layer after another (the
//! previous choice is the next step's input), trained with REINFORCE ([`train`]). The plan is
//! then provisioned and costed exactly as every planner's is
//! ([`tapfinger::plan::Problem::evaluate`]), and judged against the exact planner.
//!
//! Features are type-agnostic and scale-free, so one set of weights reads any price list: per
//! layer, how many units it alone would need at the target on its fastest and slowest type and
//! how heavily a split after it would load the link; per (layer, type), whether the type runs
//! it, the units it needs there, its cost there against the layer's cheapest type, how near a
//! stage ending here would come to the type's scaling cap, and whether the type continues the
//! current stage. The mask forbids what can never work, in training and in use alike: a type
//! that cannot run the layer, a split where the link cannot carry the target, and a choice after
//! which the rest of the chain cannot be placed under those two rules.
//!
//! In use ([`Learned::plan`]) the planner decodes greedily and draws [`SAMPLES`] more plans,
//! keeping those that meet the target and the unit limits; the local search that moves runs of
//! layers between types while the cost drops ([`tapfinger::plan::improve`]) then starts from
//! each of the [`SEARCHED`] cheapest distinct ones, and the cheapest result is the plan. When
//! no draw meets the target and the limits it says so.

pub mod train;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Lstm, LstmConfig, LstmState};
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Tensor, TensorData};
use rand::RngExt;
use tapfinger::plan::{Plan, PlanError, Problem};

/// Features per layer (the LSTM's own part of its input).
const LAYER_F: usize = 6;
/// Features per (layer, type) pair.
const PAIR_F: usize = 11;
/// The LSTM's input: the layer's features and the previous layer's chosen pair's.
const INPUT: usize = LAYER_F + PAIR_F;
/// Plans drawn beside the greedy one when planning.
pub const SAMPLES: usize = 512;
/// The cheapest distinct draws the local search starts from.
pub const SEARCHED: usize = 8;
/// A logit that rules a choice out.
const MASKED: f32 = -1e9;

/// Size of the network.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlannerConfig {
    /// LSTM hidden size and scoring width.
    pub hidden: usize,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self { hidden: 64 }
    }
}

/// The network: an LSTM over the layers and a scorer of (layer, type) pairs.
#[derive(Module, Debug)]
pub struct PlannerNet {
    /// Reads the layer chain.
    lstm: Lstm,
    /// Projects a partial plan's state.
    state: Linear,
    /// Scores a (layer, type) pair.
    pair: Linear,
    /// The logit per type.
    out: Linear,
}

impl PlannerNet {
    /// A network with fresh weights.
    pub fn new(cfg: &PlannerConfig, device: &Device) -> Self {
        let h = cfg.hidden;
        Self {
            lstm: LstmConfig::new(INPUT, h, true).init(device),
            state: LinearConfig::new(h, h).init(device),
            pair: LinearConfig::new(PAIR_F, h).init(device),
            out: LinearConfig::new(h, 1).init(device),
        }
    }
}

/// Where a partial plan stands: the previous layer's type and the time of the open stage.
#[derive(Debug, Clone, Copy)]
struct Open {
    /// The previous layer's type.
    r: usize,
    /// Time of the open stage so far.
    t: f64,
}

/// A partial plan: its open stage and the units its closed stages hold, per type.
#[derive(Debug, Clone, Default)]
struct Partial {
    /// The stage being built (`None` before the first layer).
    open: Option<Open>,
    /// Units the closed stages hold, per type.
    used: Vec<u32>,
}

impl Partial {
    fn new(types: usize) -> Self {
        Self {
            open: None,
            used: vec![0; types],
        }
    }

    /// Put the next layer on `r`: extend the open stage, or close it (its units now held) and
    /// open another.
    fn push(&mut self, p: &Problem, l: usize, r: usize) {
        let t = p.time(l, r).unwrap_or(0.0);
        self.open = Some(match self.open {
            Some(o) if o.r == r => Open { r, t: o.t + t },
            Some(o) => {
                self.used[o.r] += p.provision(o.t, o.r).unwrap_or(0);
                Open { r, t }
            }
            None => Open { r, t },
        });
    }
}

/// The features of layer `l`.
fn layer_features(p: &Problem, l: usize) -> [f32; LAYER_F] {
    let target = p.job.throughput;
    let times: Vec<f64> = (0..p.types()).filter_map(|r| p.time(l, r)).collect();
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    let slowest = times.iter().copied().fold(0.0, f64::max);
    let n = p.layers();
    let split_load = if l + 1 < n {
        target / p.link_rate(l)
    } else {
        0.0
    };
    [
        (target * fastest).ln_1p() as f32,
        (target * slowest).ln_1p() as f32,
        split_load.min(4.0).ln_1p() as f32,
        f32::from(u8::from(split_load > 1.0)),
        l as f32 / n as f32,
        f32::from(u8::from(l + 1 == n)),
    ]
}

/// The features of putting layer `l` on type `r` after `part`.
fn pair_features(p: &Problem, l: usize, r: usize, part: &Partial) -> [f32; PAIR_F] {
    let Some(t) = p.time(l, r) else {
        return [0.0; PAIR_F];
    };
    let open = part.open;
    let target = p.job.throughput;
    let ty = &p.prices.resources[r];
    let cheapest = (0..p.types())
        .filter_map(|q| p.time(l, q).map(|s| p.prices.resources[q].price * s))
        .fold(f64::INFINITY, f64::min);
    let continues = open.is_some_and(|o| o.r == r);
    let stage = t + open.filter(|o| o.r == r).map_or(0.0, |o| o.t);
    let units = target * stage;
    let limit = ty.units.map_or(0.0, |u| (f64::from(u)).ln_1p());
    // Units the stage would hold if it ended here, what rounding up wastes, and what the
    // limit would leave (1 when unlimited; below 0 when it would not fit).
    let (k, waste) = p.provision(stage, r).map_or((0.0, 1.0), |k| {
        let k = f64::from(k);
        (k, (k - units).max(0.0) / k)
    });
    let left = ty.units.map_or(1.0, |u| {
        let u = f64::from(u);
        ((u - f64::from(part.used[r]) - k) / u).clamp(-1.0, 1.0)
    });
    [
        k.ln_1p() as f32,
        waste as f32,
        left as f32,
        1.0,
        (target * t).ln_1p() as f32,
        ((ty.price * t).max(1e-12) / cheapest.max(1e-12))
            .ln()
            .min(6.0) as f32,
        (ty.scaling * units).min(2.0) as f32,
        units.ln_1p() as f32,
        f32::from(u8::from(ty.kind == tapfinger::plan::Kind::Gpu)),
        f32::from(u8::from(continues)),
        limit as f32,
    ]
}

/// Whether the link after layer `l` carries the target (a split may follow `l`).
fn split_ok(p: &Problem, l: usize) -> bool {
    p.link_rate(l) >= p.job.throughput * (1.0 - 1e-9)
}

/// `reach[l][r]`: layers `l..` can all be placed, starting with layer `l` on type `r`, each on a
/// type that runs it, splitting only where the link carries the target (backwards over the
/// chain). The mask keeps only such choices, so a draw never walks into a dead end (a type
/// that cannot run the next layer, after a layer whose output no link carries).
fn reachable(p: &Problem) -> Vec<Vec<bool>> {
    let (n, types) = (p.layers(), p.types());
    let mut reach = vec![vec![false; types]; n];
    for l in (0..n).rev() {
        for r in 0..types {
            reach[l][r] = p.time(l, r).is_some()
                && (l + 1 == n
                    || reach[l + 1][r]
                    || (split_ok(p, l) && reach[l + 1].iter().any(|&x| x)));
        }
    }
    reach
}

/// Whether layer `l` may go on type `r` after `part`: the type runs it, a split after the
/// previous layer is one the link can carry, and the rest of the chain can still be placed.
fn allowed(p: &Problem, reach: &[Vec<bool>], l: usize, r: usize, part: &Partial) -> bool {
    if !reach[l][r] {
        return false;
    }
    match part.open {
        Some(o) if o.r != r => split_ok(p, l - 1),
        _ => true,
    }
}

/// Rows being decoded together: each a problem and a decoding mode.
pub(crate) struct Rollout {
    /// Chosen type per layer, per row.
    pub(crate) assign: Vec<Vec<usize>>,
    /// Sum over its steps of each row's log-probability (a graph to learn from in training).
    pub(crate) logp: Tensor<1>,
    /// Entropy summed over each row's steps.
    pub(crate) entropy: Tensor<1>,
}

/// Decode `rows` (a problem each, and whether to take the likeliest type rather than draw one).
pub(crate) fn rollout(
    net: &PlannerNet,
    rows: &[(&Problem, bool)],
    rng: &mut tapfinger::Rng,
    device: &Device,
) -> Rollout {
    let b = rows.len();
    let steps = rows.iter().map(|(p, _)| p.layers()).max().unwrap_or(0);
    let types = rows.iter().map(|(p, _)| p.types()).max().unwrap_or(0);
    let mut assign: Vec<Vec<usize>> = vec![Vec::new(); b];
    let mut part: Vec<Partial> = rows.iter().map(|(p, _)| Partial::new(p.types())).collect();
    let reach: Vec<Vec<Vec<bool>>> = rows.iter().map(|(p, _)| reachable(p)).collect();
    let mut state: Option<LstmState<2>> = None;
    let mut logp = Tensor::<1>::zeros([b], device);
    let mut entropy = Tensor::<1>::zeros([b], device);
    for l in 0..steps {
        let mut x = Vec::with_capacity(b * INPUT);
        let mut pairs = Vec::with_capacity(b * types * PAIR_F);
        let mut mask = Vec::with_capacity(b * types);
        let mut active = Vec::with_capacity(b);
        for (i, (p, _)) in rows.iter().enumerate() {
            let live = l < p.layers();
            active.push(f32::from(u8::from(live)));
            if live {
                x.extend(layer_features(p, l));
                match part[i].open {
                    Some(o) if l > 0 => {
                        x.extend(pair_features(p, l - 1, o.r, &Partial::new(p.types())));
                    }
                    _ => x.extend([0.0; PAIR_F]),
                }
            } else {
                x.extend([0.0; INPUT]);
            }
            for r in 0..types {
                let ok = live && r < p.types() && allowed(p, &reach[i], l, r, &part[i]);
                if ok {
                    pairs.extend(pair_features(p, l, r, &part[i]));
                } else {
                    pairs.extend([0.0; PAIR_F]);
                }
                // A finished row keeps one open column so that its softmax stays finite.
                mask.push(if ok || (!live && r == 0) { 0.0 } else { MASKED });
            }
        }
        let xin = Tensor::<3>::from_data(TensorData::new(x, [b, 1, INPUT]), device);
        let (h, s) = net.lstm.forward(xin, state);
        state = Some(s);
        let h = net.state.forward(h.reshape([b, net_hidden(net)]));
        let pf = Tensor::<3>::from_data(TensorData::new(pairs, [b, types, PAIR_F]), device);
        let z = relu(net.pair.forward(pf) + h.unsqueeze_dim::<3>(1));
        let logits = net.out.forward(z).reshape([b, types])
            + Tensor::<2>::from_data(TensorData::new(mask, [b, types]), device);
        let lp = log_softmax(logits, 1);
        let probs: Vec<f32> = lp
            .clone()
            .exp()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        let mut chosen = Vec::with_capacity(b);
        for (i, (p, greedy)) in rows.iter().enumerate() {
            let row = &probs[i * types..(i + 1) * types];
            let r = if *greedy {
                (0..types)
                    .max_by(|&a, &c| row[a].total_cmp(&row[c]))
                    .unwrap_or(0)
            } else {
                let u: f32 = rng.random_range(0.0..1.0);
                let mut acc = 0.0;
                (0..types)
                    .find(|&r| {
                        acc += row[r];
                        u < acc
                    })
                    .unwrap_or_else(|| (0..types).rev().find(|&r| row[r] > 0.0).unwrap_or(0))
            };
            chosen.push(r as i64);
            if l < p.layers() {
                part[i].push(p, l, r);
                assign[i].push(r);
            }
        }
        let idx =
            Tensor::<2, burn::tensor::Int>::from_data(TensorData::new(chosen, [b, 1]), device);
        let act = Tensor::<1>::from_data(TensorData::new(active, [b]), device);
        let ent = -(lp.clone().exp() * lp.clone().clamp_min(-30.0))
            .sum_dim(1)
            .reshape([b]);
        logp = logp + lp.gather(1, idx).reshape([b]) * act.clone();
        entropy = entropy + ent * act;
    }
    Rollout {
        assign,
        logp,
        entropy,
    }
}

fn net_hidden(net: &PlannerNet) -> usize {
    net.lstm.d_hidden
}

/// A trained planner, ready to plan.
pub struct Learned {
    /// The weights.
    net: PlannerNet,
    /// Seeds the sampled plans, so that a plan is reproducible.
    seed: u64,
    /// Finish the best draw with the local search ([`tapfinger::plan::improve`]); on by
    /// default, off to judge the network's draws alone.
    search: bool,
}

/// The shipped planner's weights and configuration (`sim/planner/`, written by
/// `tapfinger-sim train-planner`).
const SHIPPED_MODEL: &[u8] = include_bytes!("../../planner/model.bpk");
const SHIPPED_CONFIG: &str = include_str!("../../planner/train.json");

/// Why a planner's weights do not load.
#[derive(Debug, thiserror::Error)]
#[error("cannot load the learned planner ({label}): {reason}")]
pub struct LoadError {
    /// Which weights (the shipped ones or a path).
    label: String,
    /// What went wrong.
    reason: String,
}

impl Learned {
    /// A planner from a network (fresh or trained).
    pub fn new(net: PlannerNet, seed: u64) -> Self {
        Self {
            net,
            seed,
            search: true,
        }
    }

    /// The same planner with the local search on or off.
    pub fn with_search(mut self, search: bool) -> Self {
        self.search = search;
        self
    }

    /// The planner shipped with this build.
    pub fn shipped() -> Result<Self, LoadError> {
        Self::from_bytes(SHIPPED_MODEL.to_vec(), SHIPPED_CONFIG, "shipped")
    }

    /// A planner from the bytes of a `model.bpk` and the text of its `train.json`.
    pub fn from_bytes(bytes: Vec<u8>, config: &str, label: &str) -> Result<Self, LoadError> {
        let err = |reason: String| LoadError {
            label: label.to_string(),
            reason,
        };
        let meta: train::Meta = serde_json::from_str(config).map_err(|e| err(e.to_string()))?;
        let record =
            burn::store::ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
                .map_err(|e| err(e.to_string()))?;
        let net = PlannerNet::new(&meta.train.config, &Device::flex())
            .try_load_record(record)
            .map_err(|e| err(e.to_string()))?;
        Ok(Self::new(net, 0))
    }

    /// The cheapest plan among the greedy decode and [`SAMPLES`] draws that meets the target
    /// and the limits, each of the [`SEARCHED`] cheapest finished by the local search unless it
    /// is off; [`PlanError::Infeasible`] when no draw meets them.
    pub fn plan(&self, p: &Problem) -> Result<Plan, PlanError> {
        let device = Device::flex();
        let mut rng = tapfinger::seeded_rng(self.seed);
        let rows: Vec<(&Problem, bool)> = std::iter::once((p, true))
            .chain(std::iter::repeat_n((p, false), SAMPLES))
            .collect();
        let out = rollout(&self.net, &rows, &mut rng, &device);
        let mut plans: Vec<Plan> = out
            .assign
            .iter()
            .filter_map(|a| p.evaluate(a, "learned").ok())
            .collect();
        plans.sort_by(|a, b| a.cost.total_cmp(&b.cost));
        // Distinct assignments only (plans of equal cost need not be adjacent to their copies).
        let mut seen = std::collections::BTreeSet::new();
        plans.retain(|q| seen.insert(q.assign.clone()));
        // The search starts from each of the cheapest few distinct draws: a local optimum near
        // the best draw is not always the cheapest one near the draws.
        let finish = if self.search { SEARCHED } else { 1 };
        plans
            .into_iter()
            .take(finish)
            .map(|d| {
                if self.search {
                    tapfinger::plan::improve::improve(p, d)
                } else {
                    d
                }
            })
            .min_by(|a, b| a.cost.total_cmp(&b.cost))
            .ok_or(PlanError::Infeasible {
                planner: "learned",
                why: format!(
                    "found no plan that meets {} batches/s within the units on offer in {} tries",
                    p.job.throughput,
                    SAMPLES + 1
                ),
            })
    }
}

#[cfg(test)]
mod tests;
