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
use crate::NodeId;
use crate::view::{ClusterView, View};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The pointer logits of one step's deciding agents (see the module doc).
#[derive(Debug, Default)]
pub struct StepLogits {
    /// The step they belong to: (slot, step, address of the cluster view decided from).
    key: Option<(u64, u32, usize)>,
    /// Per agent with a task to choose: logits over its window slots and "pass".
    logits: BTreeMap<NodeId, Vec<f32>>,
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
    /// doc). Only where it decides exactly as alone: an elastic model without floors (no allocation
    /// head) with a
    /// bounded focus, choosing by the pointer, greedily, recording nothing; otherwise ignored.
    pub fn batched(mut self, shared: SharedStep) -> Self {
        self.step = Some(shared);
        self
    }

    fn batches(&self) -> bool {
        self.step.is_some()
            && self.greedy
            && self.recorder.is_none()
            && self.cfg.elastic
            && !self.cfg.floors
            && self.cfg.focus > 0
            && self.cfg.selection == super::net::Selection::Pointer
    }

    /// This agent's pointer logits for the step `view` is from, computed with every other
    /// deciding agent's at the step's first decision; `None` when not batching.
    pub(super) fn step_logits(&self, view: &View<'_>) -> Option<Vec<f32>> {
        if !self.batches() {
            return None;
        }
        let mut s = self.step.as_ref()?.lock().ok()?;
        let c = view.cluster;
        let key = (c.slot, c.step, std::ptr::from_ref(c) as usize);
        if s.key != Some(key) {
            s.logits = self.all_logits(c)?;
            s.key = Some(key);
            s.passes += 1;
            s.graphs += s.logits.len() as u64;
        }
        s.logits.get(&view.me).cloned()
    }

    /// The pointer logits of every graph of `items` in one block-diagonal pass, flat (`window +
    /// 1` per graph), under the masks `blocked` (`window` per graph) and `pass`.
    pub(super) fn pointer_pass(
        &self,
        items: &[(&ClusterView, NodeId)],
        blocked: &[bool],
        pass: &[bool],
    ) -> Option<Vec<f32>> {
        let b = batch(items, &self.cfg.dims);
        let enc = self.net.encode(&b, &self.device);
        self.net
            .pointer_logits(&enc, &b, blocked, pass, &self.device)
            .into_data()
            .try_to_vec::<f32>()
            .ok()
    }

    /// Every agent's logits in one pass, with the masks `try_decide` would use.
    fn all_logits(&self, cluster: &ClusterView) -> Option<BTreeMap<NodeId, Vec<f32>>> {
        let dims = &self.cfg.dims;
        let (mut views, mut ids, mut blocked_all, mut pass) = (vec![], vec![], vec![], vec![]);
        for n in &cluster.nodes {
            let Some(v) = cluster.for_agent(n.id) else {
                continue;
            };
            let window: Vec<&crate::Task> = v.window().take(dims.window).collect();
            let blocked = self.blocked(&v, &window);
            if blocked.iter().all(|b| *b) {
                continue;
            }
            let focused = cluster.focus(n.id, self.cfg.focus).into_owned();
            let fv = focused.for_agent(n.id)?;
            let fwindow: Vec<&crate::Task> = fv.window().take(dims.window).collect();
            pass.push(self.pass_blocked(&fv, &fwindow, &blocked));
            blocked_all.extend(blocked);
            ids.push(n.id);
            views.push(focused);
        }
        if ids.is_empty() {
            return Some(BTreeMap::new());
        }
        let items: Vec<(&ClusterView, NodeId)> =
            views.iter().zip(&ids).map(|(v, id)| (v, *id)).collect();
        let flat = self.pointer_pass(&items, &blocked_all, &pass)?;
        let w = dims.window + 1;
        Some(
            ids.into_iter()
                .zip(flat.chunks(w).map(<[f32]>::to_vec))
                .collect(),
        )
    }
}
