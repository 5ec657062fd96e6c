//! `tapfinger-model`: the learned TapFinger policy, over the core's view and [`Policy`] trait.
//!
//! The heterogeneous graph of a view ([`graph`], petgraph), graph batching ([`batch`](mod@batch)), the
//! network ([`net`]) and [`TapfingerPolicy`], which implements the shared [`Policy`] trait.
//! The policy decides with the network's decision pass ([`net::infer`]: plain buffers, only the
//! nodes a decision reads, weights from safetensors), which needs no burn; training runs the same
//! network in burn (the feature `train`: `net::Net`, `critic` and the training side of
//! [`checkpoint`]).
//!
//! Decisions sample from the network's masked distributions with the caller's seeded RNG (never
//! burn's), so a decision is reproducible from the seed. The masks are exact: a task is selectable
//! only if its minimum demand fits the node's free units (and the head's grid), and each kind's
//! units are drawn between the task's minimum and `min(free, cap, max_units)` (an elastic model has
//! no such grid limit). An elastic model
//! (`NetConfig::elastic`) claims at the minimum demand (or, with `NetConfig::floors`, at a floor
//! its allocation head draws) and re-shares running tasks once per slot
//! ([`Policy::rebalance`]); a model with a `focus` decides on a bounded part of the cluster
//! ([`tapfinger_core::view::ClusterView::focus`]). Both act in training and deployment alike.

pub mod batch;
pub mod checkpoint;
#[cfg(feature = "train")]
pub mod critic;
pub mod graph;
mod masks;
pub mod net;
pub mod sharing;
pub mod step_batch;

pub use checkpoint::{LoadError, load_bytes};
pub use masks::FASTER_ELSEWHERE;
use masks::{faster_elsewhere, waits_for_faster};

use batch::{Dims, batch};
use net::NetConfig;
use net::infer::Infer;
use rand::RngExt;
use std::sync::Arc;
use tapfinger_core::Rng;
use tapfinger_core::policy::{Decision, Policy};
use tapfinger_core::resources::Resources;
use tapfinger_core::view::View;

pub use tapfinger_core::experience::{DecisionRecord, Experience, Recorder};

/// The learned policy. A clone shares the weights (and a recorder or batched step, if set).
#[derive(Debug, Clone)]
pub struct TapfingerPolicy {
    /// The network's weights for deciding ([`net::infer`]), shared by every agent that runs the
    /// same model; `None` where a training network's could not be read (never for one
    /// `Net::new` builds: the decision pass's tests read every named variant).
    infer: Option<Arc<Infer>>,
    /// Its configuration (feature schema, window, focus), for building its inputs.
    cfg: NetConfig,
    /// Take the most likely action (deployment) instead of sampling (training).
    greedy: bool,
    /// Where decisions go for learning (`recording`); `None` outside training.
    recorder: Option<Recorder>,
    /// Shared with the other agents of a simulated cluster: one batched pass per step.
    step: Option<step_batch::SharedStep>,
}

/// Index of the largest logit and its probability.
pub fn argmax(logits: &[f32]) -> Option<(usize, f64)> {
    let max = logits.iter().copied().fold(f32::MIN, f32::max);
    let z: f64 = logits.iter().map(|l| f64::from(l - max).exp()).sum();
    let i = logits.iter().position(|l| *l == max)?;
    (z.is_finite() && z > 0.0).then(|| (i, 1.0 / z))
}

/// Sample an index from logits; returns it and its probability. Masked (≈ −1e9) entries have
/// probability exactly 0 and are never returned.
pub fn sample(logits: &[f32], rng: &mut Rng) -> Option<(usize, f64)> {
    let max = logits.iter().copied().fold(f32::MIN, f32::max);
    let w: Vec<f64> = logits.iter().map(|l| f64::from(l - max).exp()).collect();
    let z: f64 = w.iter().sum();
    if !(z.is_finite() && z > 0.0) {
        return None;
    }
    let u = rng.random::<f64>() * z;
    let mut acc = 0.0;
    let mut last = None;
    for (i, wi) in w.iter().enumerate() {
        if *wi > 0.0 {
            acc += wi;
            last = Some(i);
            if u < acc {
                return Some((i, wi / z));
            }
        }
    }
    last.map(|i| (i, w[i] / z))
}

impl TapfingerPolicy {
    /// A policy deciding with `infer`'s weights under `cfg` (sampling, not recording): what a
    /// model loaded with [`checkpoint::load_bytes`] or [`checkpoint::Shipped::load`] runs.
    pub fn new(infer: Arc<Infer>, cfg: NetConfig) -> Self {
        Self::with(Some(infer), cfg)
    }

    fn with(infer: Option<Arc<Infer>>, cfg: NetConfig) -> Self {
        Self {
            infer,
            cfg,
            greedy: false,
            recorder: None,
            step: None,
        }
    }

    /// A policy with a freshly initialized network (untrained; feature `train`).
    #[cfg(feature = "train")]
    pub fn untrained(cfg: NetConfig, device: burn::tensor::Device) -> Self {
        let net = net::Net::new(&cfg, &device);
        Self::from_net(&net, cfg)
    }

    /// A policy deciding with a training network's current weights (feature `train`). Where they
    /// cannot be read by the decision pass the policy passes, as on any numerical failure
    /// ([`Policy::decide`]); a model file that could not is refused when it is loaded.
    #[cfg(feature = "train")]
    pub fn from_net(net: &net::Net, cfg: NetConfig) -> Self {
        Self::with(net.infer(&cfg).map(Arc::new), cfg)
    }

    /// The decision pass ([`net::infer`]).
    fn fast(&self) -> Option<&Infer> {
        self.infer.as_deref()
    }

    /// Take the most likely action instead of sampling (evaluation and deployment). The
    /// work-conserving mask acts in both modes (see [`net::NetConfig::work_conserving`]).
    pub fn greedy(mut self, greedy: bool) -> Self {
        self.greedy = greedy;
        self
    }

    /// Record every decision into `recorder` (training).
    pub fn recording(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    fn pick(&self, logits: &[f32], rng: &mut Rng) -> Option<(usize, f64)> {
        if self.greedy {
            argmax(logits)
        } else {
            sample(logits, rng)
        }
    }

    /// The network configuration.
    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    /// The window slots the pointer must not choose: empty ones and tasks whose minimum demand
    /// does not fit the node's free units or the allocation head's grid.
    fn blocked(&self, view: &View<'_>, window: &[&tapfinger_core::Task]) -> Vec<bool> {
        let free = &view.node().free;
        let max_units = self.cfg.max_units as u32;
        // The allocation head's grid (0..=max_units per kind) limits only a model that draws
        // allocations: an elastic one claims at the minimum demand, however large (a task asking
        // for 60 GiB, say, must not wait forever).
        let grid = !self.cfg.elastic;
        // The exclusive-first mask (`NetConfig::exclusive_first`): the window is in queue order
        // (oldest first), so the tasks behind a fitting exclusive one are younger.
        let exclusive: Vec<bool> = window
            .iter()
            .map(|t| {
                self.cfg.exclusive_first
                    && t.min_demand.fits_in(free)
                    && !crate::graph::has_other_host(view.cluster, view.me, t)
            })
            .collect();
        // Per window slot: whether an older exclusive task of its class fits.
        let behind: Vec<bool> = (0..window.len())
            .map(|i| (0..i).any(|e| exclusive[e] && window[e].ty == window[i].ty))
            .collect();
        let node = view.node();
        (0..self.cfg.dims.window)
            .map(|i| {
                window.get(i).is_none_or(|t| {
                    !t.min_demand.fits_in(free)
                        || behind[i] && !exclusive[i]
                        || self.cfg.wait_faster
                            && node
                                .window
                                .get(i)
                                .is_some_and(|&p| waits_for_faster(view, &view.cluster.pending[p]))
                        || grid
                            && (0..self.cfg.dims.kinds).any(|k| {
                                self.kind_of(view, k)
                                    .is_some_and(|c| t.min_demand.get(c) > max_units)
                            })
                })
            })
            .collect()
    }

    /// The work-conserving mask ([`net::NetConfig::work_conserving`]): whether this node may not
    /// pass, being idle (or, in the strict form, at all) with a selectable task in its window.
    fn pass_blocked(
        &self,
        view: &View<'_>,
        window: &[&tapfinger_core::Task],
        blocked: &[bool],
    ) -> bool {
        if !self.cfg.work_conserving || !(0..window.len()).any(|i| !blocked[i]) {
            return false;
        }
        if view.node().running.is_empty() {
            return true;
        }
        if !self.cfg.strict_conserving {
            return false;
        }
        let spare = self.idle_after_share(view);
        let node = view.node();
        window.iter().enumerate().any(|(i, t)| {
            !blocked[i]
                && t.min_demand.fits_in(&spare)
                && node
                    .window
                    .get(i)
                    .is_none_or(|&p| !faster_elsewhere(view, &view.cluster.pending[p]))
        })
    }

    /// The units of the deciding node that would stay idle next slot if it passed: its free
    /// units after its running tasks are re-shared by [`Self::shares`] (what the node does at
    /// the end of the slot), each task's change in allocation taken from or given back to them.
    /// Where switches are free a running task takes every spare unit up to its cap; one whose
    /// class pays for a switch keeps what it holds unless a move is worth it, so the units it
    /// leaves are idle, and the strict mask counts them so.
    fn idle_after_share(&self, view: &View<'_>) -> Resources {
        let mut spare = view.node().free.clone();
        for (id, a) in self.shares(view) {
            let Some(r) = view.running().find(|r| r.task.id == id) else {
                continue;
            };
            for k in 0..spare.len() {
                let (now, next) = (r.alloc.get(k), a.get(k));
                spare.0[k] = (spare.0[k] + now).saturating_sub(next);
            }
        }
        spare
    }

    /// The node's re-share of its running tasks under this model's sharing rule (none unless
    /// elastic): what [`Policy::rebalance`] returns, and what the strict mask reads.
    fn shares(&self, view: &View<'_>) -> Vec<(tapfinger_core::TaskId, Resources)> {
        if !self.cfg.elastic {
            Vec::new()
        } else if self.cfg.gain_share {
            tapfinger_core::share::gain_greedy_shares(
                view,
                self.cfg.hold_gpus,
                self.cfg.finish_first,
            )
        } else {
            tapfinger_core::share::least_attained_shares(view, self.cfg.hold_gpus)
        }
    }

    /// Whether this model draws task `t`'s floor with its allocation head (an elastic model with
    /// floors, [`net::NetConfig::floors`]): not if `t`'s minimum demand of some kind is beyond
    /// the head's grid (it is claimed at its minimum, as it must not wait forever).
    fn draws_floor(&self, view: &View<'_>, t: &tapfinger_core::Task) -> bool {
        let max_units = self.cfg.max_units as u32;
        self.cfg.floors
            && (0..self.cfg.dims.kinds).all(|k| {
                self.kind_of(view, k)
                    .is_none_or(|c| t.min_demand.get(c) <= max_units)
            })
    }

    /// The cluster kind the network's kind `k` stands for: itself in a per-preset model; in a
    /// general one, where the canonical kind sits in this cluster (`None`: it has none).
    fn kind_of(&self, view: &View<'_>, k: usize) -> Option<usize> {
        if self.cfg.dims.is_general() {
            view.cluster.kinds.0.get(k).copied().flatten()
        } else {
            Some(k)
        }
    }

    /// The legal units of the network's kind `k` for task `t` under `cap`: from its minimum to
    /// `min(cap, max_units)`; 0 for a kind the cluster lacks.
    fn range(
        &self,
        view: &View<'_>,
        t: &tapfinger_core::Task,
        cap: &Resources,
        k: usize,
    ) -> (u32, u32) {
        let max_units = self.cfg.max_units as u32;
        self.kind_of(view, k)
            .map_or((0, 0), |c| (t.min_demand.get(c), cap.get(c).min(max_units)))
    }

    /// The allocation in the cluster's kinds for the network's `units`: kinds the network does
    /// not cover stay at the task's minimum.
    fn allocation(&self, view: &View<'_>, t: &tapfinger_core::Task, units: &[u32]) -> Resources {
        if !self.cfg.dims.is_general() {
            return Resources(units.to_vec());
        }
        let mut a = t.min_demand.clone();
        for (k, u) in units.iter().enumerate() {
            if let Some(c) = self.kind_of(view, k)
                && let Some(x) = a.0.get_mut(c)
            {
                *x = *u;
            }
        }
        a
    }

    /// The size of the graph this policy's decision on `view` encodes: its rows over every node
    /// type, padding included. The network's cost per decision grows with it; with a focus it
    /// stays bounded however large the cluster (`sim/tests/scale.rs` checks the shipped general
    /// model's).
    pub fn graph_rows(&self, view: &View<'_>) -> usize {
        let focused = view.cluster.focus(view.me, self.cfg.focus);
        batch(&[(&*focused, view.me)], &self.cfg.dims)
            .counts
            .iter()
            .sum()
    }

    /// The record this policy would have made had it taken `decision` (another policy's, e.g. a
    /// teacher's) on `view`: what imitation learning trains on. `None` when the network cannot
    /// express the decision (a task outside the window or blocked, units outside the legal
    /// range). Log-probabilities are left at 0.
    pub fn label(&self, view: &View<'_>, decision: &Decision) -> Option<DecisionRecord> {
        let focused = view.cluster.focus(view.me, self.cfg.focus);
        let view = &focused.for_agent(view.me)?;
        let dims = &self.cfg.dims;
        let window: Vec<&tapfinger_core::Task> = view.window().take(dims.window).collect();
        let blocked = self.blocked(view, &window);
        let pass_blocked = self.pass_blocked(view, &window, &blocked);
        let mut record = DecisionRecord::new(view.cluster.clone(), view.me, blocked, dims.window);
        record.pass_blocked = pass_blocked;
        let Decision::Claim { task, alloc, .. } = decision else {
            // A pass the mask forbids cannot be expressed.
            return (!pass_blocked).then_some(record);
        };
        let slot = window.iter().position(|t| t.id == *task)?;
        if record.blocked[slot] {
            return None;
        }
        let t = window[slot];
        if self.cfg.elastic && !self.draws_floor(view, t) {
            // An elastic policy claims at the minimum demand and nothing else (one with floors:
            // for a task beyond the head's grid).
            record.slot = slot;
            return (*alloc == t.min_demand).then_some(record);
        }
        let cap = t.cap(&view.node().free);
        let mut units = Vec::with_capacity(dims.kinds);
        for k in 0..dims.kinds {
            let (lo, hi) = self.range(view, t, &cap, k);
            let u = self.kind_of(view, k).map_or(0, |c| alloc.get(c));
            if !net::legal(u, lo, hi, self.cfg.two_point) {
                return None;
            }
            record.lo.push(lo);
            record.hi.push(hi);
            units.push(u);
        }
        // Kinds the network does not cover must be at the minimum for it to express this.
        if self.allocation(view, t, &units) != *alloc {
            return None;
        }
        record.slot = slot;
        record.units = units;
        Some(record)
    }

    fn try_decide(&self, view: &View<'_>, rng: &mut Rng) -> Option<Decision> {
        let dims: &Dims = &self.cfg.dims;
        // The agent's own window, free units and kinds are the same in the focused view.
        let window: Vec<&tapfinger_core::Task> = view.window().take(dims.window).collect();
        let blocked = self.blocked(view, &window);
        if blocked.iter().all(|b| *b) {
            // Nothing can be claimed: "pass" is the only action, with probability 1 under every
            // selection rule (and passing is never masked then), so neither the focus nor the
            // network need run — most agents of a large, busy cluster are here at most steps.
            // A recording policy keeps the record the network would have made.
            if self.recorder.is_some() {
                let focused = view.cluster.focus(view.me, self.cfg.focus);
                let record =
                    DecisionRecord::new(focused.into_owned(), view.me, blocked, dims.window);
                self.record(record);
            }
            return Some(Decision::Pass);
        }
        // Simulated clusters: this agent's logits from the step's one batched pass. The focused
        // view keeps this agent's window whole and in order, so a slot indexes the window seen
        // here; batching is for elastic models only, which claim at the minimum demand or at the
        // floor the batch drew.
        if let Some((logits, floor)) = self.step_logits(view) {
            let (slot, prob) = self.pick(&logits, rng)?;
            return Some(match (window.get(slot), floor) {
                // A task with no legal floor: the agent passes, as alone.
                (None, _) | (Some(_), Some(None)) => Decision::Pass,
                (Some(t), floor) => Decision::Claim {
                    task: t.id,
                    alloc: floor.flatten().map_or_else(
                        || t.min_demand.clone(),
                        |units| self.allocation(view, t, &units),
                    ),
                    prob,
                },
            });
        }
        let focused = view.cluster.focus(view.me, self.cfg.focus);
        let view = &focused.for_agent(view.me)?;
        let free = &view.node().free;
        let window: Vec<&tapfinger_core::Task> = view.window().take(dims.window).collect();
        let pass_blocked = self.pass_blocked(view, &window, &blocked);
        let selectable: Vec<usize> = (0..window.len()).filter(|&i| !blocked[i]).collect();
        let b = batch(&[(view.cluster, view.me)], dims);
        let fast = self.fast()?;
        let enc = fast.encode_decision(&b);
        let (slot, prob) = match self.cfg.selection {
            net::Selection::Pointer => {
                let logits = fast.pointer_logits(&enc, &b, &blocked, &[pass_blocked]);
                self.pick(&logits, rng)?
            }
            // Ablations: a fixed rule picks the task; they pass only when nothing fits.
            net::Selection::Uniform => match selectable.len() {
                0 => (dims.window, 1.0),
                n => (selectable[rng.random_range(0..n)], 1.0 / n as f64),
            },
            net::Selection::Fifo => (selectable.first().copied().unwrap_or(dims.window), 1.0),
        };
        let mut record = DecisionRecord::new(view.cluster.clone(), view.me, blocked, slot);
        record.logp_ptr = prob.ln() as f32;
        record.pass_blocked = pass_blocked;
        if slot >= window.len() {
            self.record(record);
            return Some(Decision::Pass);
        }
        let task = window[slot];
        if self.cfg.elastic && !self.draws_floor(view, task) {
            // Elastic: the task starts at its minimum; the slot's re-sharing gives it more.
            self.record(record);
            return Some(Decision::Claim {
                task: task.id,
                alloc: task.min_demand.clone(),
                prob,
            });
        }
        let cap = task.cap(free);
        let kinds = dims.kinds;
        let mut prev = vec![0.0f32; kinds];
        let mut alloc = Vec::with_capacity(kinds);
        for k in 0..kinds {
            let (lo, hi) = self.range(view, task, &cap, k);
            if lo > hi {
                // A cap below the minimum (a malformed task): no legal allocation, so pass.
                return Some(Decision::Pass);
            }
            let q = net::AllocQuery {
                slot: &[slot],
                kind: k,
                prev: &prev,
                lo: &[lo],
                hi: &[hi],
                two_point: self.cfg.two_point,
            };
            let l = fast.alloc_logits(&enc, &b, &q);
            let (units, p) = self.pick(&l, rng)?;
            prev[k] = units as f32;
            alloc.push(units as u32);
            record.lo.push(lo);
            record.hi.push(hi);
            record.logp_alloc += p.ln() as f32;
        }
        let claim = self.allocation(view, task, &alloc);
        record.units = alloc;
        self.record(record);
        Some(Decision::Claim {
            task: task.id,
            alloc: claim,
            prob,
        })
    }

    fn record(&self, r: DecisionRecord) {
        if let Some(rec) = &self.recorder
            && let Ok(mut buf) = rec.lock()
        {
            buf.push(r);
        }
    }
}

impl Policy for TapfingerPolicy {
    fn name(&self) -> &str {
        "tapfinger"
    }
    fn decide(&mut self, view: &View<'_>, rng: &mut Rng) -> Decision {
        // A numerical failure must not stop an agent: it passes this step.
        self.try_decide(view, rng).unwrap_or(Decision::Pass)
    }
    fn elastic(&self) -> bool {
        self.cfg.elastic
    }
    fn floors(&self) -> bool {
        self.cfg.elastic && self.cfg.floors
    }
    fn rebalance(
        &mut self,
        view: &View<'_>,
        _rng: &mut Rng,
    ) -> Vec<(tapfinger_core::TaskId, Resources)> {
        self.shares(view)
    }
    fn forecast_interval(&self) -> Option<u64> {
        (self.cfg.dims.is_rlpto() && self.cfg.forecast_interval_slots > 0)
            .then_some(self.cfg.forecast_interval_slots)
    }
}

#[cfg(test)]
mod tests;
