//! One batched forward pass per simulated decision step.
//!
//! In the simulator every agent of a step decides from one view of the cluster, each with its
//! own instance of the same network. Instances built [`TapfingerPolicy::batched`] with one shared
//! [`SharedStep`] let the first agent to decide in a step compute the pointer logits of every
//! agent that has a task to choose, in one block-diagonal batch ([`super::batch::batch`]: no edge
//! crosses graphs, so each graph's logits are those of a pass over it alone); the others take
//! theirs from the cache. A decision's cost then no longer includes a forward pass of its own,
//! which is what bounds a large cluster's step. The agent never batches: one node, one view.

use super::TapfingerPolicy;
use super::batch::batch;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tapfinger_core::NodeId;
use tapfinger_core::view::{ClusterView, View};

/// The pointer logits of one step's deciding agents (see the module doc).
#[derive(Debug, Default)]
pub struct StepLogits {
    /// The step they belong to: (slot, step, address of the cluster view decided from).
    key: Option<(u64, u32, usize)>,
    /// Per agent with a task to choose: logits over its window slots and "pass".
    logits: BTreeMap<NodeId, Vec<f32>>,
    /// A model with floors: per agent whose greedy choice draws a floor, its units per network
    /// kind (the allocation heads' greedy choices in the same batch), or `None` where the chosen
    /// task has no legal floor (a cap below its minimum: the agent passes, as alone).
    floors: BTreeMap<NodeId, Option<Vec<u32>>>,
    /// Batched passes run, and the graphs they held in all.
    passes: u64,
    /// Graphs those passes held in all (their ratio is the batching's gain).
    graphs: u64,
}

impl StepLogits {
    /// Batched passes run so far, and the graphs (agents' decisions) they held in all.
    pub fn passes(&self) -> (u64, u64) {
        (self.passes, self.graphs)
    }
}

/// Shared by the policy instances of one simulated cluster.
pub type SharedStep = Arc<Mutex<StepLogits>>;

impl TapfingerPolicy {
    /// Share one batched forward pass per step with the other instances given `shared` (module
    /// doc). Only where it decides exactly as alone: an elastic model (with floors, the allocation
    /// heads run in the same batch) with a bounded focus, choosing by the pointer, greedily,
    /// recording nothing; otherwise ignored.
    pub fn batched(mut self, shared: SharedStep) -> Self {
        self.step = Some(shared);
        self
    }

    fn batches(&self) -> bool {
        self.step.is_some()
            && self.greedy
            && self.recorder.is_none()
            && self.cfg.elastic
            && self.cfg.focus > 0
            && self.cfg.selection == super::net::Selection::Pointer
    }

    /// This agent's pointer logits for the step `view` is from, computed with every other
    /// deciding agent's at the step's first decision, and (a model with floors) the floor its
    /// greedy choice draws; `None` when not batching.
    #[allow(clippy::type_complexity)]
    pub(super) fn step_logits(
        &self,
        view: &View<'_>,
    ) -> Option<(Vec<f32>, Option<Option<Vec<u32>>>)> {
        if !self.batches() {
            return None;
        }
        let mut s = self.step.as_ref()?.lock().ok()?;
        let c = view.cluster;
        let key = (c.slot, c.step, std::ptr::from_ref(c) as usize);
        if s.key != Some(key) {
            (s.logits, s.floors) = self.all_logits(c)?;
            s.key = Some(key);
            s.passes += 1;
            s.graphs += s.logits.len() as u64;
        }
        let logits = s.logits.get(&view.me).cloned()?;
        Some((logits, s.floors.get(&view.me).cloned()))
    }

    /// The pointer logits of every graph of `items` in one block-diagonal pass, flat (`window +
    /// 1` per graph), under the masks `blocked` (`window` per graph) and `pass`, with the batch
    /// and its encoding (for the allocation heads that run after the pointer).
    fn encoded_pointer_pass(
        &self,
        items: &[(&ClusterView, NodeId)],
        blocked: &[bool],
        pass: &[bool],
    ) -> Option<(
        super::batch::GraphBatch,
        super::net::infer::Embeddings,
        Vec<f32>,
    )> {
        let b = batch(items, &self.cfg.dims);
        let fast = self.fast()?;
        let enc = fast.encode_decision(&b);
        let flat = fast.pointer_logits(&enc, &b, blocked, pass);
        Some((b, enc, flat))
    }

    /// Every agent's logits in one pass, with the masks `try_decide` would use; with floors,
    /// also the floors their greedy choices draw.
    #[allow(clippy::type_complexity)]
    fn all_logits(
        &self,
        cluster: &ClusterView,
    ) -> Option<(
        BTreeMap<NodeId, Vec<f32>>,
        BTreeMap<NodeId, Option<Vec<u32>>>,
    )> {
        let dims = &self.cfg.dims;
        let (mut views, mut ids, mut blocked_all, mut pass) = (vec![], vec![], vec![], vec![]);
        for n in &cluster.nodes {
            let Some(v) = cluster.for_agent(n.id) else {
                continue;
            };
            let window: Vec<&tapfinger_core::Task> = v.window().take(dims.window).collect();
            let blocked = self.blocked(&v, &window);
            if blocked.iter().all(|b| *b) {
                continue;
            }
            let focused = cluster.focus(n.id, self.cfg.focus).into_owned();
            let fv = focused.for_agent(n.id)?;
            let fwindow: Vec<&tapfinger_core::Task> = fv.window().take(dims.window).collect();
            pass.push(self.pass_blocked(&fv, &fwindow, &blocked));
            blocked_all.extend(blocked);
            ids.push(n.id);
            views.push(focused);
        }
        if ids.is_empty() {
            return Some(Default::default());
        }
        let items: Vec<(&ClusterView, NodeId)> =
            views.iter().zip(&ids).map(|(v, id)| (v, *id)).collect();
        let (b, enc, flat) = self.encoded_pointer_pass(&items, &blocked_all, &pass)?;
        let w = dims.window + 1;
        let logits: Vec<Vec<f32>> = flat.chunks(w).map(<[f32]>::to_vec).collect();
        let floors = if self.cfg.floors {
            self.floors_pass(&items, &b, &enc, &logits)?
        } else {
            BTreeMap::new()
        };
        Some((ids.into_iter().zip(logits).collect(), floors))
    }

    /// The floors the agents of `items` draw greedily for the tasks their `logits` choose, the
    /// allocation heads run kind by kind over the whole batch (as `try_decide` runs them for one
    /// agent): agents that pass or claim a task beyond the head's grid draw none; one whose task
    /// has no legal floor gets `None`.
    fn floors_pass(
        &self,
        items: &[(&ClusterView, NodeId)],
        b: &super::batch::GraphBatch,
        enc: &super::net::infer::Embeddings,
        logits: &[Vec<f32>],
    ) -> Option<BTreeMap<NodeId, Option<Vec<u32>>>> {
        let kinds = self.cfg.dims.kinds;
        let g = items.len();
        // Per graph: the chosen window slot and its task's legal range per kind, if it draws.
        let mut slots = vec![0usize; g];
        let mut ranges: Vec<Option<Vec<(u32, u32)>>> = vec![None; g];
        let mut out = BTreeMap::new();
        for (i, ((cv, me), l)) in items.iter().zip(logits).enumerate() {
            let v = cv.for_agent(*me)?;
            let window: Vec<&tapfinger_core::Task> =
                v.window().take(self.cfg.dims.window).collect();
            let (slot, _) = super::argmax(l)?;
            let Some(t) = window.get(slot) else { continue };
            if !self.draws_floor(&v, t) {
                continue;
            }
            let cap = t.cap(&v.node().free);
            let r: Vec<(u32, u32)> = (0..kinds).map(|k| self.range(&v, t, &cap, k)).collect();
            if r.iter().any(|(lo, hi)| lo > hi) {
                out.insert(*me, None);
                continue;
            }
            slots[i] = slot;
            ranges[i] = Some(r);
        }
        let mut prev = vec![0.0f32; g * kinds];
        let mut units = vec![vec![0u32; kinds]; g];
        for k in 0..kinds {
            let (lo, hi): (Vec<u32>, Vec<u32>) = ranges
                .iter()
                .map(|r| r.as_ref().map_or((0, 0), |r| r[k]))
                .unzip();
            let q = super::net::AllocQuery {
                slot: &slots,
                kind: k,
                prev: &prev,
                lo: &lo,
                hi: &hi,
                two_point: self.cfg.two_point,
            };
            let l = self.fast()?.alloc_logits(enc, b, &q);
            let width = l.len() / g.max(1);
            for i in (0..g).filter(|&i| ranges[i].is_some()) {
                let (u, _) = super::argmax(&l[i * width..(i + 1) * width])?;
                units[i][k] = u as u32;
                prev[i * kinds + k] = u as f32;
            }
        }
        for (((_, me), u), r) in items.iter().zip(units).zip(&ranges) {
            if r.is_some() {
                out.insert(*me, Some(u));
            }
        }
        Some(out)
    }
}
