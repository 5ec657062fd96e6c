//! What an agent knows when it decides: the cluster view.
//!
//! A [`ClusterView`] is a snapshot of every node's capacity, free units and pending window, the
//! tasks in those windows, and the running tasks. A [`View`] is that snapshot seen from one agent
//! (`me`). The simulator builds one `ClusterView` per decision step and lends it to every agent;
//! a daemon builds it from its own state and its peers' heartbeats. This module only describes
//! data; it never decides anything. Its only speed information is the online estimator's
//! ([`TaskEstimate`]), built from observed progress, never from a speed model.

use crate::resources::Resources;
use crate::task::{NodeId, Task};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One node as seen in a view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// Node (and agent) id.
    pub id: NodeId,
    /// Total units per kind.
    pub capacity: Resources,
    /// Units not allocated to any running task.
    pub free: Resources,
    /// Indices into [`ClusterView::pending`] of the node's pending window, oldest first.
    pub window: Vec<usize>,
    /// Pending tasks reachable from this node that wait beyond the window (FIFO overflow).
    pub overflow: usize,
    /// Indices into [`ClusterView::running`] of the tasks running on this node.
    pub running: Vec<usize>,
    /// Its GPU model ([`crate::estimate::GpuModel::NONE`]: none named): the estimates of its
    /// window's tasks there are [`PendingView::est_on`]'s.
    #[serde(default)]
    pub gpu: crate::estimate::GpuModel,
}

impl NodeView {
    /// Window + overflow: the node's whole pending queue length.
    pub fn queue_len(&self) -> usize {
        self.window.len() + self.overflow
    }
}

/// What the online speed estimator ([`crate::estimate`]) says of a task: the only speed
/// information a view carries. Times are slots alone for all of the task's work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEstimate {
    /// At its minimum demand.
    pub at_min: f64,
    /// At the largest allocation its cap allows on the cluster's largest node (per kind).
    pub at_max: f64,
    /// Per canonical kind (CPU, GPU, memory): the fraction of `at_min` that one more unit of it
    /// saves (0 for a kind the cluster lacks).
    pub gain: [f64; 3],
    /// Samples of its class the estimator holds (0: the prior speaks).
    pub samples: usize,
    /// The fraction of a slot's progress a re-allocation costs its class, as measured
    /// ([`crate::estimate::Estimator::switch_cost`]; 0 until measured).
    #[serde(default)]
    pub switch_cost: f64,
    /// Its declared work over its class's mean declared work
    /// ([`crate::estimate::Estimator::relative_work`]; 1 where nothing is declared): how many
    /// mean tasks of its class it is. The times above already include it; a policy with a
    /// speed model of its own (Optimus) scales that model's times by it.
    #[serde(default = "crate::resources::one")]
    pub size: f64,
    /// Per canonical kind, the offset `o` of the estimator's term `θ / (o + a)`
    /// ([`crate::estimate::offsets`]: 0, Amdahl's `θ / a`, where the class's model is fitted
    /// and its tasks ask for the kind; else 1), so that [`TaskEstimate::slots_at`] says what
    /// the estimator says at every allocation.
    #[serde(default = "ones3")]
    pub offset: [f64; 3],
}

fn ones3() -> [f64; 3] {
    [1.0; 3]
}

impl Default for TaskEstimate {
    fn default() -> Self {
        Self {
            at_min: 0.0,
            at_max: 0.0,
            gain: [0.0; 3],
            samples: 0,
            switch_cost: 0.0,
            size: 1.0,
            offset: [1.0; 3],
        }
    }
}

impl TaskEstimate {
    /// What a view shows of `task` by estimator `est` in a cluster whose largest node (per
    /// kind) is `largest`: its time at its minimum demand, at its cap there, and the fraction of
    /// the first that one more unit of each canonical kind saves (0 for a kind the cluster
    /// lacks).
    pub fn of(est: &crate::estimate::Estimator, task: &Task, largest: &Resources) -> Self {
        Self::of_on(est, task, crate::estimate::GpuModel::NONE, largest)
    }

    /// [`TaskEstimate::of`] on a box of GPU model `gpu`.
    pub fn of_on(
        est: &crate::estimate::Estimator,
        task: &Task,
        gpu: crate::estimate::GpuModel,
        largest: &Resources,
    ) -> Self {
        let at_min = est.slots_on(task, gpu, &task.min_demand);
        let mut top = task.cap(largest);
        for (x, m) in top.0.iter_mut().zip(&task.min_demand.0) {
            *x = (*x).max(*m);
        }
        let gain = est.kinds().0.map(|k| {
            k.filter(|&i| i < task.min_demand.len() && largest.get(i) > 0)
                .map_or(0.0, |i| {
                    let mut a = task.min_demand.clone();
                    a.0[i] += 1;
                    ((at_min - est.slots_on(task, gpu, &a)) / at_min).max(0.0)
                })
        });
        Self {
            at_min,
            at_max: est.slots_on(task, gpu, &top),
            gain,
            samples: est.samples(task.ty),
            switch_cost: est.switch_cost(task.ty),
            size: est.relative_work(task),
            offset: est.offsets_on(task, gpu),
        }
    }

    /// The task's job time in slots alone at allocation `a` (at least its minimum demand `min`),
    /// from these figures: the estimator's model `T(a) = θ₀ + Σ θ_k · term(o_k, a_k)` with
    /// `term(o, a) = 1 / max(o + a, 1)` ([`crate::estimate`]) is fixed by its time at the
    /// minimum demand and each kind's gain of one unit there, so
    /// `θ_k = gain_k · T(min) / (term(o_k, m_k) − term(o_k, m_k + 1))`.
    pub fn slots_at(
        &self,
        kinds: &crate::estimate::KindMap,
        min: &Resources,
        a: &Resources,
    ) -> f64 {
        use crate::estimate::term;
        let m = kinds.canonical(min);
        let a = kinds.canonical(a);
        let mut t = self.at_min;
        for c in 0..3 {
            let o = self.offset[c];
            let step = term(o, m[c]) - term(o, m[c] + 1.0);
            if self.gain[c] <= 0.0 || step <= 0.0 {
                continue;
            }
            let theta = self.gain[c] * self.at_min / step;
            t += theta * (term(o, a[c].max(m[c])) - term(o, m[c]));
        }
        t.max(1e-6 * self.at_min.max(1e-9))
    }
}

/// A pending task in at least one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingView {
    /// The task as submitted (shared, so that building a view per step stays cheap).
    pub task: Arc<Task>,
    /// The estimator's view of its speed (on the GPU model most of the live boxes have: on a
    /// cluster of one model, or none, on every box).
    #[serde(default)]
    pub est: TaskEstimate,
    /// Where the live boxes have more than one GPU model: its estimate on each of the others
    /// ([`PendingView::est_on`]), by model; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<(crate::estimate::GpuModel, TaskEstimate)>,
    /// Its priority class as the queues serve it in this view's slot (aging included; 0 is the
    /// most urgent); 0 where the cluster ignores classes.
    #[serde(default)]
    pub class: u8,
    /// What the cluster's history predicts of its whole size, in slots at its minimum demand
    /// ([`crate::sizes`]); `None` while nothing like it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Arc<crate::sizes::Prediction>>,
    /// The work it did before it went back to the queue (0 for a task never run), in the same
    /// unit.
    #[serde(default)]
    pub done: f64,
}

impl PendingView {
    /// Its estimate on a box of GPU model `gpu` (a node's [`NodeView::gpu`]).
    pub fn est_on(&self, gpu: crate::estimate::GpuModel) -> &TaskEstimate {
        self.on
            .iter()
            .find(|(m, _)| *m == gpu)
            .map_or(&self.est, |(_, e)| e)
    }

    /// Its expected remaining work, in slots at its minimum demand ([`expected_remaining`]).
    pub fn expected_remaining(&self) -> f64 {
        expected_remaining(&self.est, self.size.as_deref(), self.done, 0.0)
    }
}

/// A task's expected remaining work in slots at its minimum demand, from what the cluster
/// knows: where it declared its work ([`TaskEstimate::size`] other than 1), the estimator's
/// time at its minimum, which already scales by it; else where it reports progress `p` of at
/// least 5 % after `done` of work, `done · (1 − p) / p`; else the size book's distribution given
/// `done` ([`crate::sizes::Prediction::remaining`]); else the estimator's time for its class's
/// mean task. Never less than a thousandth of a slot. Size-aware policies order by it; it reads
/// the estimator and the book, never a speed model or a true size.
pub fn expected_remaining(
    est: &TaskEstimate,
    size: Option<&crate::sizes::Prediction>,
    done: f64,
    progress: f64,
) -> f64 {
    let declared = (est.size - 1.0).abs() > 1e-9;
    let r = if declared {
        est.at_min - done
    } else if progress >= 0.05 && done > 0.0 {
        done * (1.0 - progress.min(1.0)) / progress
    } else if let Some(p) = size {
        p.remaining(done)
    } else {
        est.at_min - done
    };
    if r.is_finite() { r.max(1e-3) } else { 1e-3 }
}

/// A running task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningView {
    /// The task as submitted (type, minimum demand, cap, arrival).
    pub task: Arc<Task>,
    /// Node it runs on.
    pub node: NodeId,
    /// Current allocation (on an elastic node, its floor: the re-share starts from there).
    pub alloc: Resources,
    /// The allocation in force, what it ran at in the last slot, whatever `alloc` shows (a
    /// re-share can leave a task what it holds where a change would cost it).
    #[serde(default)]
    pub in_force: Resources,
    /// Slot in which it started.
    pub started: u64,
    /// Progress in [0, 1] as reported by the task (a training loop knows its epoch count).
    pub progress: f64,
    /// Attained service as Tiresias counts it: Σ over the slots run of the allocated units of the
    /// service kind (GPUs where the cluster has them, else the first kind).
    pub attained: f64,
    /// The estimator's view of its speed.
    #[serde(default)]
    pub est: TaskEstimate,
    /// Estimated slots alone at its current allocation (all of its work; the remaining time is
    /// `(1 - progress)` of it).
    #[serde(default)]
    pub est_alloc: f64,
    /// Its reports have plateaued: it is converging, and shrinks where shrinking is on
    /// ([`crate::ledger::Ledger::set_converging`]).
    #[serde(default)]
    pub converging: bool,
    /// What the cluster's history predicts of its whole size ([`PendingView::size`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Arc<crate::sizes::Prediction>>,
    /// The work it did so far, in slots at its minimum demand ([`PendingView::done`]).
    #[serde(default)]
    pub done: f64,
}

impl RunningView {
    /// Its expected remaining work, in slots at its minimum demand ([`expected_remaining`]).
    pub fn expected_remaining(&self) -> f64 {
        expected_remaining(&self.est, self.size.as_deref(), self.done, self.progress)
    }
}

/// A snapshot of the cluster for one decision step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ClusterView {
    /// Current slot.
    pub slot: u64,
    /// Decision step within the slot.
    pub step: u32,
    /// Number of task types (for one-hot features).
    pub num_types: usize,
    /// Priority classes order this cluster's queues and its elastic shares (a priority-blind
    /// ledger: `false`, every task as class 0).
    #[serde(default)]
    pub classes: bool,
    /// Where CPU, GPU and memory sit among the cluster's kinds (general features and the
    /// estimator use these three).
    #[serde(default)]
    pub kinds: crate::estimate::KindMap,
    /// All nodes, sorted by id.
    pub nodes: Vec<NodeView>,
    /// Tasks in at least one window, sorted by id.
    pub pending: Vec<PendingView>,
    /// Running tasks, sorted by id.
    pub running: Vec<RunningView>,
    /// Expected arrivals in each of the next intervals, nearest first, as the node's forecast
    /// says (the crate `tapfinger-forecast`); empty where no forecast runs.
    #[serde(default)]
    pub forecast: Vec<f64>,
}

impl ClusterView {
    /// Index of a node in `nodes`.
    pub fn node_index(&self, id: NodeId) -> Option<usize> {
        self.nodes.binary_search_by_key(&id, |n| n.id).ok()
    }

    /// The part of this snapshot one decision of `me` attends to, at most `k` nodes: its own
    /// node, then the nodes whose windows share the most tasks with its window (who competes for
    /// what it may claim), then the most free capacity (a fraction of each kind, summed), then
    /// id; the pending tasks of their windows and the tasks running on them. With `k` 0 or at
    /// least the node count, the whole snapshot. This bounds a decision's cost on a large
    /// cluster; `me`'s own window and running tasks are always kept whole and in order.
    pub fn focus(&self, me: NodeId, k: usize) -> std::borrow::Cow<'_, ClusterView> {
        use std::borrow::Cow;
        use std::collections::BTreeSet;
        let Some(mine) = self.node_index(me) else {
            return Cow::Borrowed(self);
        };
        if k == 0 || self.nodes.len() <= k {
            return Cow::Borrowed(self);
        }
        // This agent's window as a mask over the pending list: the overlap of every other
        // node's window with it is then a few loads per window entry (this runs once per
        // deciding agent over every node, the part of a decision that grows with the cluster).
        let mut my_window = vec![false; self.pending.len()];
        for &w in &self.nodes[mine].window {
            if let Some(m) = my_window.get_mut(w) {
                *m = true;
            }
        }
        let free_share = |n: &NodeView| -> f64 {
            n.capacity
                .0
                .iter()
                .zip(&n.free.0)
                .filter(|(c, _)| **c > 0)
                .map(|(c, f)| f64::from(*f) / f64::from(*c))
                .sum()
        };
        let mut others: Vec<(usize, usize, f64)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != mine)
            .map(|(i, n)| {
                let shared = n
                    .window
                    .iter()
                    .filter(|&&w| my_window.get(w).copied().unwrap_or(false))
                    .count();
                (i, shared, free_share(n))
            })
            .collect();
        // Only the first k - 1 in this (total) order are kept: select them, no full sort.
        if others.len() > k - 1 {
            others.select_nth_unstable_by(k - 1, |a, b| {
                b.1.cmp(&a.1).then(b.2.total_cmp(&a.2)).then(a.0.cmp(&b.0))
            });
        }
        let mut keep: Vec<usize> = std::iter::once(mine)
            .chain(others.iter().take(k - 1).map(|o| o.0))
            .collect();
        keep.sort_unstable();
        // Old index → new index, for the pending and running lists (kept in id order).
        let pending: BTreeSet<usize> = keep
            .iter()
            .flat_map(|&i| self.nodes[i].window.iter().copied())
            .collect();
        let running: BTreeSet<usize> = keep
            .iter()
            .flat_map(|&i| self.nodes[i].running.iter().copied())
            .collect();
        let p_new: std::collections::BTreeMap<usize, usize> =
            pending.iter().enumerate().map(|(n, &o)| (o, n)).collect();
        let r_new: std::collections::BTreeMap<usize, usize> =
            running.iter().enumerate().map(|(n, &o)| (o, n)).collect();
        let nodes = keep
            .iter()
            .map(|&i| {
                let n = &self.nodes[i];
                NodeView {
                    gpu: Default::default(),
                    window: n.window.iter().map(|w| p_new[w]).collect(),
                    running: n.running.iter().map(|r| r_new[r]).collect(),
                    ..n.clone()
                }
            })
            .collect();
        Cow::Owned(ClusterView {
            slot: self.slot,
            step: self.step,
            num_types: self.num_types,
            classes: self.classes,
            kinds: self.kinds,
            nodes,
            pending: pending.iter().map(|&i| self.pending[i].clone()).collect(),
            running: running.iter().map(|&i| self.running[i].clone()).collect(),
            forecast: self.forecast.clone(),
        })
    }

    /// View of this snapshot from agent `me`; `None` if `me` is not a node of the view.
    pub fn for_agent(&self, me: NodeId) -> Option<View<'_>> {
        let idx = self.node_index(me)?;
        Some(View {
            me,
            idx,
            cluster: self,
        })
    }
}

/// A [`ClusterView`] as seen by one agent.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The deciding agent.
    pub me: NodeId,
    /// The deciding agent's index in `cluster.nodes` (found once, not searched per call).
    idx: usize,
    /// The shared snapshot.
    pub cluster: &'a ClusterView,
}

impl<'a> View<'a> {
    /// The agent's own node.
    pub fn node(&self) -> &'a NodeView {
        &self.cluster.nodes[self.idx]
    }

    /// Index of the agent's node in `cluster.nodes`.
    pub fn node_index(&self) -> usize {
        self.idx
    }

    /// The agent's pending window, oldest first.
    pub fn window(&self) -> impl Iterator<Item = &'a Task> + 'a {
        let c = self.cluster;
        self.node().window.iter().map(move |&i| &*c.pending[i].task)
    }

    /// Window tasks whose minimum demand fits in the node's free units right now.
    pub fn feasible(&self) -> impl Iterator<Item = &'a Task> + 'a {
        self.feasible_pending().map(|p| &*p.task)
    }

    /// [`Self::feasible`] with what the view shows of each (its estimate).
    pub fn feasible_pending(&self) -> impl Iterator<Item = &'a PendingView> + 'a {
        let c = self.cluster;
        let free = &self.node().free;
        self.node()
            .window
            .iter()
            .map(move |&i| &c.pending[i])
            .filter(move |p| p.task.min_demand.fits_in(free))
    }

    /// Tasks running on the agent's node.
    pub fn running(&self) -> impl Iterator<Item = &'a RunningView> + 'a {
        let c = self.cluster;
        self.node().running.iter().map(move |&i| &c.running[i])
    }
}
