//! The learned network's configuration and its two evaluators: [`infer`], the decision pass on
//! plain `f32` buffers, which reads the weights from a safetensors file and needs nothing else
//! (the simulator's comparisons and the agent decide with it), and, with the feature `train`,
//! `Net`, the same network in burn with gradients, for training.
//!
//! The network: a heterogeneous graph-attention (HAN) encoder, a pointer over the agent's
//! pending window, a masked allocation head decomposed per resource kind, and a value head
//! (training's critic). The pointer runs one transformer-encoder layer over the agent's window
//! (with the agent's server as an extra, never-padded token) before additive attention.
//!
//! Design choices (small and fast on 2 CPU cores; the reference used 8 layers × 256 without
//! residuals): width 64, 4 heads, 2 layers, a residual connection and layer norm after each layer.
//! Semantic attention over edge types is computed *per destination node* (HAN averages it over all
//! nodes of a type), so a node's embedding never depends on other graphs in a batch: batched and
//! single-graph forward passes agree. Masks use a large negative number, never −∞ (NaN-safe).

pub mod infer;
#[cfg(feature = "train")]
mod network;
#[cfg(feature = "train")]
mod weights;

#[cfg(feature = "train")]
pub use network::{Encoded, Net};

use super::batch::Dims;

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
