//! Optimus (Peng et al., EuroSys 2018) as a baseline: a speed model per task type fitted by
//! non-negative least squares on profiling samples, and greedy marginal-gain allocation on it,
//! elastic or non-preemptive. It never reads a task's true speed, only its profiling samples.

use super::{BaselineContext, BaselineError, claim};
use tapfinger_core::Rng;
use tapfinger_core::policy::{Decision, Policy};
use tapfinger_core::resources::Resources;
use tapfinger_core::task::{Task, TaskId, TaskTypeId};
use tapfinger_core::view::{RunningView, View};

/// Optimus's speed model for one task type: completion time
/// `T(p, w) = a/w + b + c·w/p + d·w + e·p` slots with `p` CPUs and `w` GPUs (the inverse of
/// Optimus's `f(p, w)`), fitted by non-negative least squares on profiling samples.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimusModel {
    /// Coefficients (a, b, c, d, e), all ≥ 0.
    pub theta: [f64; 5],
}

fn optimus_features(p: f64, w: f64) -> [f64; 5] {
    let p = p.max(0.5);
    let w = w.max(0.5);
    [1.0 / w, 1.0, w / p, w, p]
}

impl OptimusModel {
    /// Fit from (cpus, gpus, slots) samples.
    pub fn fit(samples: &[(f64, f64, f64)]) -> Self {
        let x: Vec<[f64; 5]> = samples.iter().map(|s| optimus_features(s.0, s.1)).collect();
        let y: Vec<f64> = samples.iter().map(|s| s.2).collect();
        Self {
            theta: tapfinger_core::fit::nnls(&x, &y),
        }
    }

    /// Predicted completion time in slots with `p` CPUs and `w` GPUs.
    pub fn slots(&self, p: f64, w: f64) -> f64 {
        optimus_features(p, w)
            .iter()
            .zip(&self.theta)
            .map(|(f, t)| f * t)
            .sum::<f64>()
            .max(1e-6)
    }
}

/// Optimus: greedy marginal-gain allocation on a fitted speed model.
///
/// Elastic form: pending tasks are admitted at their minimum demand in arrival order, and every
/// slot the node's spare CPU and GPU units go one at a time to the running task whose estimated
/// remaining time drops most. Non-preemptive form: plans that greedy allocation over the window
/// tasks that fit together, then starts the planned task with the largest GPU share.
#[derive(Debug, Clone)]
pub struct Optimus {
    /// Each task type's fitted speed model (from the profiling samples), by type index.
    models: Vec<OptimusModel>,
    /// Where CPU sits among the resource kinds (the model's first input).
    cpu: usize,
    /// Where GPU sits among the resource kinds (the model's second input).
    gpu: usize,
    /// Elastic form (re-share every slot) or the non-preemptive one.
    elastic: bool,
}

impl Optimus {
    /// Fit one model per task type from the context's profiling samples.
    pub fn fit(ctx: &BaselineContext, elastic: bool) -> Result<Self, BaselineError> {
        if ctx.num_types == 0 {
            return Err(BaselineError::NoProfile(0));
        }
        let mut models = Vec::with_capacity(ctx.num_types);
        for ty in 0..ctx.num_types {
            let samples: Vec<(f64, f64, f64)> = ctx
                .profile
                .iter()
                .filter(|s| usize::from(s.ty.0) == ty && s.slots.is_finite())
                .map(|s| {
                    (
                        f64::from(s.alloc.get(ctx.cpu_kind)),
                        f64::from(s.alloc.get(ctx.gpu_kind)),
                        s.slots,
                    )
                })
                .collect();
            if samples.is_empty() {
                return Err(BaselineError::NoProfile(
                    u16::try_from(ty).unwrap_or(u16::MAX),
                ));
            }
            models.push(OptimusModel::fit(&samples));
        }
        Ok(Self {
            models,
            cpu: ctx.cpu_kind,
            gpu: ctx.gpu_kind,
            elastic,
        })
    }

    /// The fitted models, one per task type.
    pub fn models(&self) -> &[OptimusModel] {
        &self.models
    }

    /// Remaining slots of `e` at allocation `a`: its type's fitted time, times its size (a
    /// declared work says how many mean tasks of its type it is, as Optimus estimates a job's
    /// remaining epochs; 1 where nothing is declared), times the work left.
    fn remaining(&self, e: &Entry, a: &Resources) -> f64 {
        let m = &self.models[usize::from(e.ty.0).min(self.models.len() - 1)];
        (1.0 - e.progress).max(0.0)
            * e.size
            * m.slots(f64::from(a.get(self.cpu)), f64::from(a.get(self.gpu)))
    }

    /// Greedy: hand out `free` one unit at a time (CPU or GPU) to the entry whose estimated
    /// remaining time drops most per unit.
    fn greedy(&self, entries: &mut [Entry], free: &mut Resources) {
        let kinds = if self.cpu == self.gpu {
            vec![self.cpu]
        } else {
            vec![self.cpu, self.gpu]
        };
        loop {
            let mut best: Option<(usize, usize, f64)> = None;
            for (i, e) in entries.iter().enumerate() {
                let now = self.remaining(e, &e.alloc);
                for &k in &kinds {
                    if free.get(k) == 0 || e.alloc.get(k) >= e.cap.get(k) {
                        continue;
                    }
                    let mut b = e.alloc.clone();
                    b.0[k] += 1;
                    let gain = now - self.remaining(e, &b);
                    if gain > 1e-9 && best.is_none_or(|(_, _, g)| gain > g) {
                        best = Some((i, k, gain));
                    }
                }
            }
            let Some((i, k, _)) = best else { break };
            entries[i].alloc.0[k] += 1;
            free.0[k] -= 1;
        }
    }
}

/// A task Optimus allocates to.
#[derive(Debug, Clone)]
struct Entry {
    ty: TaskTypeId,
    progress: f64,
    /// Mean tasks of its type it is ([`tapfinger_core::view::TaskEstimate::size`]).
    size: f64,
    alloc: Resources,
    cap: Resources,
}

impl Policy for Optimus {
    fn name(&self) -> &str {
        if self.elastic {
            "optimus"
        } else {
            "optimus-np"
        }
    }
    fn elastic(&self) -> bool {
        self.elastic
    }
    fn decide(&mut self, view: &View<'_>, _rng: &mut Rng) -> Decision {
        if self.elastic {
            return match view.feasible().next() {
                Some(t) => claim(t, t.min_demand.clone(), 1.0),
                None => Decision::Pass,
            };
        }
        let node = view.node();
        let mut free = node.free.clone();
        let mut tasks: Vec<&Task> = Vec::new();
        let mut entries = Vec::new();
        for p in view.feasible_pending() {
            let t = &p.task;
            if let Ok(rest) = free.checked_sub(&t.min_demand) {
                free = rest;
                tasks.push(t);
                entries.push(Entry {
                    ty: t.ty,
                    progress: 0.0,
                    size: p.est.size,
                    alloc: t.min_demand.clone(),
                    cap: t.cap(&node.free),
                });
            }
        }
        if tasks.is_empty() {
            return Decision::Pass;
        }
        self.greedy(&mut entries, &mut free);
        let best = (0..tasks.len())
            .max_by(|&i, &j| {
                entries[i]
                    .alloc
                    .get(self.gpu)
                    .cmp(&entries[j].alloc.get(self.gpu))
                    .then(j.cmp(&i))
            })
            .unwrap_or(0);
        claim(tasks[best], entries[best].alloc.clone(), 1.0)
    }
    fn rebalance(&mut self, view: &View<'_>, _rng: &mut Rng) -> Vec<(TaskId, Resources)> {
        let mut free = view.node().free.clone();
        let running: Vec<&RunningView> = view.running().collect();
        let mut entries: Vec<_> = running
            .iter()
            .map(|r| {
                let cap = r
                    .task
                    .max_demand
                    .clone()
                    .unwrap_or_else(|| view.node().capacity.clone());
                Entry {
                    ty: r.task.ty,
                    progress: r.progress,
                    size: r.est.size,
                    alloc: r.alloc.clone(),
                    cap,
                }
            })
            .collect();
        self.greedy(&mut entries, &mut free);
        running
            .iter()
            .zip(entries)
            .map(|(r, e)| (r.task.id, e.alloc))
            .collect()
    }
}
