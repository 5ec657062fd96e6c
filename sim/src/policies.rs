//! Policy construction for the simulator: the shared baselines by name, plus the clairvoyant
//! reference, which alone may read the true speed model (every report marks it as such).
//!
//! Optimus's profiling samples are produced here the way a profiler would: by running each task
//! type alone at a few configurations and timing it to completion. The policy then sees only those
//! numbers, never the formula or the table.

use crate::env::{Simulator, allocations};
use crate::scenario::Scenario;
use tapfinger::baselines::{self, BaselineContext, BaselineError, ProfileSample};
use tapfinger::model::checkpoint::{self, LoadError};
use tapfinger::view::View;
use tapfinger::{Decision, Policy, Resources, TaskTypeId};

/// Every policy name the simulator knows, in report order.
pub fn all_policies() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = baselines::BASELINES.to_vec();
    v.push(CLAIRVOYANT);
    v
}

/// Name of the learned policy. Its ablations (`nohan`, `nopointer`, `vanilla`) are trained with
/// `tapfinger-sim train --variant NAME` and evaluated as `tapfinger` with their own `--model`: the
/// variant is part of the model's `train.json`.
pub const TAPFINGER: &str = "tapfinger";

/// Why the learned policy could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LearnedError {
    /// Asked for without a model, and none ships for the scenario.
    #[error(
        "policy tapfinger needs trained weights and none ships for scenario {scenario:?} (shipped: {shipped}): pass --model DIR_OR_FILE (train one with `tapfinger-sim train --scenario ...`)"
    )]
    NoModel {
        /// Scenario name.
        scenario: String,
        /// Scenarios with a shipped model.
        shipped: String,
    },
    /// The model could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// The learned policy (greedy decisions) for every node, from a trained model: `model` if given,
/// else the model shipped for the scenario ([`tapfinger::model::checkpoint::SHIPPED`]).
pub fn learned(
    sim: &Simulator,
    model: Option<&std::path::Path>,
) -> Result<Vec<Box<dyn Policy>>, LearnedError> {
    let dims = sim.dims();
    let (net, cfg) = match model {
        Some(path) => checkpoint::load_path(path, &dims).map(|(net, cfg, _)| (net, cfg))?,
        None => {
            let name = &sim.scenario().name;
            let shipped = checkpoint::shipped(name).ok_or_else(|| LearnedError::NoModel {
                scenario: name.clone(),
                shipped: checkpoint::SHIPPED
                    .iter()
                    .map(|m| m.scenario)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
            shipped.load(&dims)?
        }
    };
    Ok((0..sim.scenario().nodes.len())
        .map(|_| {
            Box::new(
                tapfinger::model::TapfingerPolicy::from_net(
                    net.clone(),
                    cfg.clone(),
                    burn::tensor::Device::flex(),
                )
                .greedy(true),
            ) as Box<dyn Policy>
        })
        .collect())
}

/// True if `tapfinger` can run on this simulator without `--model` (a model ships for it).
pub fn has_shipped_model(sim: &Simulator) -> bool {
    checkpoint::shipped(&sim.scenario().name).is_some()
}

/// Name of the clairvoyant reference.
pub const CLAIRVOYANT: &str = "clairvoyant";

/// Label for reports: the clairvoyant reference is marked.
pub fn label(name: &str) -> String {
    if name == CLAIRVOYANT {
        format!("{name} (reads true speed; reference only)")
    } else {
        name.to_string()
    }
}

/// Profiling levels of one kind: min, quarter, half and full of the largest usable amount.
fn levels(lo: u32, hi: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [lo, lo + (hi - lo) / 4, lo + (hi - lo) / 2, hi].into();
    v.dedup();
    v
}

/// Profiling runs for Optimus: each type alone at a 4 × 4 grid of CPU × GPU levels; other kinds at
/// the type's true need (a profiling run that runs out of memory is retried with more, so the
/// profiler learns the need).
pub fn profile(sc: &Scenario) -> Vec<ProfileSample> {
    let (cpu, gpu) = sc.cpu_gpu_kinds();
    let mut out = Vec::new();
    for (ty, t) in sc.types.iter().enumerate() {
        let base = t.min_demand.max_each(&t.need);
        let Some(host) = sc
            .nodes
            .iter()
            .map(|n| {
                t.max_demand
                    .as_ref()
                    .map_or(n.capacity.clone(), |m| m.min_each(&n.capacity))
            })
            .filter(|c| base.fits_in(c))
            .max_by_key(|c| c.0.iter().map(|x| u64::from(*x)).sum::<u64>())
        else {
            continue;
        };
        for c in levels(base.get(cpu), host.get(cpu)) {
            for g in levels(base.get(gpu), host.get(gpu)) {
                let mut a = base.clone();
                a.0[cpu] = c;
                a.0[gpu] = g;
                if let Some((_, slots)) = t.speed.isolated(&a, sc.slot_seconds) {
                    out.push(ProfileSample {
                        ty: TaskTypeId(ty as u16),
                        alloc: a,
                        slots,
                    });
                }
            }
        }
    }
    out
}

/// One policy instance per node.
pub fn build(sim: &Simulator, name: &str) -> Result<Vec<Box<dyn Policy>>, BaselineError> {
    let sc = sim.scenario();
    if name == CLAIRVOYANT {
        let c = Clairvoyant::new(sc);
        return Ok((0..sc.nodes.len())
            .map(|_| Box::new(c.clone()) as Box<dyn Policy>)
            .collect());
    }
    let (cpu_kind, gpu_kind) = sc.cpu_gpu_kinds();
    let ctx = BaselineContext {
        num_types: sc.types.len(),
        cpu_kind,
        gpu_kind,
        profile: if name.starts_with("optimus") {
            profile(sc)
        } else {
            Vec::new()
        },
    };
    (0..sc.nodes.len())
        .map(|_| baselines::by_name(name, &ctx))
        .collect()
}

/// Clairvoyant reference: knows each type's true isolated runtime at every allocation. It starts
/// the feasible task whose "knee" runtime is shortest (shortest job first), giving it the smallest
/// allocation within 10% of the best runtime it could get now, so resources stay for the others.
/// It is patient: it leaves a task whose runtime here and now would exceed by more than
/// [`Clairvoyant::PATIENCE`] slots what the task could get on the best node that can reach it,
/// because waiting a slot for a better node is cheaper than running slowly (on `hetero6` this takes
/// the reference from 4.23 to 3.48 slots of average JCT).
#[derive(Debug, Clone)]
pub struct Clairvoyant {
    /// `[type]`: (allocation, slots), ascending by allocation size.
    table: Vec<Vec<(Resources, u64)>>,
}

impl Clairvoyant {
    /// Slots of slowdown accepted rather than waiting for a better node.
    pub const PATIENCE: u64 = 2;

    /// Tabulate the true isolated runtimes up to the largest node.
    pub fn new(sc: &Scenario) -> Self {
        let kinds = sc.space.len();
        let biggest = Resources(
            (0..kinds)
                .map(|k| {
                    sc.nodes
                        .iter()
                        .map(|n| n.capacity.get(k))
                        .max()
                        .unwrap_or(0)
                })
                .collect(),
        );
        let size = |a: &Resources| -> f64 {
            (0..kinds)
                .map(|k| f64::from(a.get(k)) / f64::from(biggest.get(k).max(1)))
                .sum()
        };
        let table = sc
            .types
            .iter()
            .map(|t| {
                let hi = t
                    .max_demand
                    .as_ref()
                    .map_or(biggest.clone(), |m| m.min_each(&biggest));
                let lo = t.min_demand.min_each(&hi);
                let mut rows: Vec<(Resources, u64)> = allocations(&lo, &hi)
                    .into_iter()
                    .filter_map(|a| {
                        if t.need.fits_in(&a) {
                            t.speed.isolated(&a, sc.slot_seconds).map(|x| (a, x.0))
                        } else {
                            None
                        }
                    })
                    .collect();
                rows.sort_by(|a, b| size(&a.0).total_cmp(&size(&b.0)).then(a.0.0.cmp(&b.0.0)));
                rows
            })
            .collect();
        Self { table }
    }
}

impl Policy for Clairvoyant {
    fn name(&self) -> &str {
        CLAIRVOYANT
    }
    fn decide(&mut self, view: &View<'_>, _rng: &mut tapfinger::Rng) -> Decision {
        let free = &view.node().free;
        let mut best: Option<(u64, u64, &Resources, tapfinger::TaskId)> = None;
        for t in view.feasible() {
            let cap = t.cap(free);
            let rows = &self.table[usize::from(t.ty.0)];
            let fits = || {
                rows.iter()
                    .filter(|(a, _)| t.min_demand.fits_in(a) && a.fits_in(&cap))
            };
            let Some(fastest) = fits().map(|r| r.1).min() else {
                continue;
            };
            // Best runtime on any node that can reach the task, were that node empty.
            let best_anywhere = view
                .cluster
                .nodes
                .iter()
                .filter(|n| t.reachable.binary_search(&n.id).is_ok())
                .filter_map(|n| {
                    let c = t.cap(&n.capacity);
                    rows.iter()
                        .filter(|(a, _)| t.min_demand.fits_in(a) && a.fits_in(&c))
                        .map(|r| r.1)
                        .min()
                })
                .min()
                .unwrap_or(fastest);
            if fastest > best_anywhere + Self::PATIENCE {
                continue;
            }
            let limit = fastest + fastest / 10;
            let Some((alloc, slots)) = fits().find(|r| r.1 <= limit) else {
                continue;
            };
            let key = (*slots, t.arrival);
            if best.as_ref().is_none_or(|b| key < (b.0, b.1)) {
                best = Some((*slots, t.arrival, alloc, t.id));
            }
        }
        match best {
            Some((_, _, alloc, task)) => Decision::Claim {
                task,
                alloc: alloc.clone(),
                prob: 1.0,
            },
            None => Decision::Pass,
        }
    }
}
