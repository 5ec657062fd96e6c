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
use tapfinger::{Decision, Policy, Resources, TaskId, TaskTypeId};

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

/// The imitation teacher chosen per scenario by evaluation ([`best_teacher`]).
pub const AUTO_TEACHER: &str = "auto";

/// Development workload seeds on which [`best_teacher`] ranks the candidates (never the seeds
/// results are reported on, which start at 100).
const TEACHER_SEEDS: std::ops::Range<u64> = 0..3;

/// Whether `name` can teach the learned policy: a known policy that does not re-allocate running
/// tasks (the learned policy cannot copy re-allocation). `Err` says why not.
pub fn check_teacher(sim: &Simulator, name: &str) -> Result<(), String> {
    if name == AUTO_TEACHER {
        return Ok(());
    }
    let ps = build(sim, name).map_err(|e| e.to_string())?;
    if ps.first().is_some_and(|p| p.elastic()) {
        return Err(format!(
            "{name} re-allocates running tasks every slot, which the learned policy cannot copy; \
             choose a non-elastic policy ({}) or auto",
            teachers().join(", ")
        ));
    }
    Ok(())
}

/// The non-elastic policies that may teach.
fn teachers() -> Vec<&'static str> {
    let ctx = BaselineContext {
        num_types: 1,
        cpu_kind: 0,
        gpu_kind: 1,
        profile: Vec::new(),
    };
    baselines::BASELINES
        .iter()
        .copied()
        .filter(|n| {
            // Optimus needs profiles to build; its elasticity does not depend on them.
            let elastic = match baselines::by_name(n, &ctx) {
                Ok(p) => p.elastic(),
                Err(_) => *n == "optimus",
            };
            !elastic
        })
        .collect()
}

/// The teacher for a scenario: the non-elastic policy with the least average JCT over the
/// development seeds (ties: the first in the baseline list).
pub fn best_teacher(sim: &Simulator) -> String {
    let kinds = sim.scenario().kind_names();
    let jct = |name: &str| -> f64 {
        TEACHER_SEEDS
            .map(|seed| {
                build(sim, name)
                    .ok()
                    .and_then(|ps| sim.run(ps, seed).ok())
                    .map_or(f64::INFINITY, |e| {
                        crate::metrics::summarize(&e, &kinds).avg_jct
                    })
            })
            .sum()
    };
    teachers()
        .into_iter()
        .map(|n| (n, jct(n)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or_else(|| "tiresias-np".to_string(), |(n, _)| n.to_string())
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

/// One policy instance per node. The clairvoyant reference built here does not know the
/// workload's task sizes ([`build_for_seed`] does).
pub fn build(sim: &Simulator, name: &str) -> Result<Vec<Box<dyn Policy>>, BaselineError> {
    build_with(sim, name, None)
}

/// [`build`] for the episode of workload `seed`: the clairvoyant reference also knows every
/// task's true size there (heavy-tailed scenarios), as it knows the true speed model.
pub fn build_for_seed(
    sim: &Simulator,
    name: &str,
    seed: u64,
) -> Result<Vec<Box<dyn Policy>>, BaselineError> {
    build_with(sim, name, Some(seed))
}

fn build_with(
    sim: &Simulator,
    name: &str,
    seed: Option<u64>,
) -> Result<Vec<Box<dyn Policy>>, BaselineError> {
    let sc = sim.scenario();
    if name == CLAIRVOYANT {
        let mut c = Clairvoyant::new(sc);
        if let Some(seed) = seed {
            c.sizes = std::sync::Arc::new(crate::workload::sizes(sc, seed, sc.tasks as usize));
        }
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

/// Clairvoyant reference: knows each type's true isolated runtime at every allocation, and
/// re-allocates elastically like the elastic baselines, so it is never handicapped against them.
///
/// Decisions: it starts the feasible task whose best runtime here (at the largest allocation it
/// could get now) is shortest (shortest job first, then oldest), at the smallest allocation that
/// meets the task's true need, so every task that fits starts. Once per slot it re-allocates the
/// node's running tasks shortest-remaining-first: each in turn gets the smallest allocation
/// within 10% of the best remaining time it could reach with what is left ("its knee"), so the
/// tasks nearest to finishing run near their full speed and the rest share what remains. (An
/// earlier rule let a task wait for a better node: tuned on `hetero6`, it collapsed elsewhere,
/// up to 2.3× the best baseline's JCT on generated scenarios.)
#[derive(Debug, Clone)]
pub struct Clairvoyant {
    /// `[type]`: (allocation, slots), ascending by allocation size.
    table: Vec<Vec<(Resources, u64)>>,
    /// Each task's work over its type's, by id (empty: all 1).
    sizes: std::sync::Arc<Vec<f64>>,
}

impl Clairvoyant {
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
        Self {
            table,
            sizes: std::sync::Arc::default(),
        }
    }

    /// The rows of `t`'s type that fit within `cap` (its minimum demand met), smallest first.
    fn fitting<'a>(
        &'a self,
        t: &tapfinger::Task,
        cap: &Resources,
    ) -> impl Iterator<Item = &'a (Resources, u64)> + use<'a> {
        let (lo, cap) = (t.min_demand.clone(), cap.clone());
        self.table[usize::from(t.ty.0)]
            .iter()
            .filter(move |(a, _)| lo.fits_in(a) && a.fits_in(&cap))
    }

    /// The knee within `cap`: the smallest allocation within 10% of the fastest runtime there.
    fn knee<'a>(&'a self, t: &tapfinger::Task, cap: &Resources) -> Option<&'a (Resources, u64)> {
        let fastest = self.fitting(t, cap).map(|r| r.1).min()?;
        let limit = fastest + fastest / 10;
        self.fitting(t, cap).find(|r| r.1 <= limit)
    }
}

impl Policy for Clairvoyant {
    fn name(&self) -> &str {
        CLAIRVOYANT
    }
    fn elastic(&self) -> bool {
        true
    }
    fn decide(&mut self, view: &View<'_>, _rng: &mut tapfinger::Rng) -> Decision {
        let free = &view.node().free;
        let (mut tasks, pool) = self.on_node(view);
        let running = tasks.len();
        tasks.extend(
            view.feasible()
                .filter(|t| self.fitting(t, &t.cap(free)).next().is_some())
                .map(|t| (t, self.size(t.id))),
        );
        if tasks.len() == running {
            return Decision::Pass;
        }
        // Start the shortest waiting task that the best rule would start now, at the smallest
        // allocation that meets its need (the re-allocation at the end of the slot grows it).
        let (order, allocs) = self.best_plan(&tasks, &pool, running);
        order
            .iter()
            .find(|&&i| i >= running && allocs[i].is_some())
            .and_then(|&i| {
                let t = tasks[i].0;
                self.fitting(t, &t.cap(free))
                    .next()
                    .map(|(a, _)| Decision::Claim {
                        task: t.id,
                        alloc: a.clone(),
                        prob: 1.0,
                    })
            })
            .unwrap_or(Decision::Pass)
    }
    fn rebalance(
        &mut self,
        view: &View<'_>,
        _rng: &mut tapfinger::Rng,
    ) -> Vec<(TaskId, Resources)> {
        let (tasks, pool) = self.on_node(view);
        let running = tasks.len();
        let (_, allocs) = self.best_plan(&tasks, &pool, running);
        tasks
            .iter()
            .zip(allocs)
            .map(|((t, _), a)| (t.id, a.unwrap_or_else(|| t.min_demand.clone())))
            .collect()
    }
}

impl Clairvoyant {
    /// The node's running tasks (with their work left, in units of their type's) and the pool they share:
    /// they are shown at their minimum demand, so the pool is that plus what is free.
    fn on_node<'a>(&self, view: &View<'a>) -> (Vec<(&'a tapfinger::Task, f64)>, Resources) {
        let mut pool = view.node().free.clone();
        let mut tasks = Vec::new();
        for r in view.running() {
            pool = plus(&pool, &r.task.min_demand);
            tasks.push((&*r.task, (1.0 - r.progress) * self.size(r.task.id)));
        }
        (tasks, pool)
    }

    /// Task `id`'s work over its type's.
    fn size(&self, id: TaskId) -> f64 {
        usize::try_from(id.0)
            .ok()
            .and_then(|i| self.sizes.get(i))
            .copied()
            .unwrap_or(1.0)
    }

    /// A short look-ahead: play `tasks` (the first `running` of them running, the rest waiting)
    /// out under each rule, with no arrivals, and plan by the rule with the least total
    /// completion time. Returns the shortest-remaining-first order and each task's allocation
    /// (`None`: it waits).
    fn best_plan(
        &self,
        tasks: &[(&tapfinger::Task, f64)],
        pool: &Resources,
        running: usize,
    ) -> (Vec<usize>, Vec<Option<Resources>>) {
        let rule = Rule::ALL
            .into_iter()
            .map(|r| (r, self.play_out(tasks, pool, running, r)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(Rule::Knee, |(r, _)| r);
        let order = self.order(tasks, pool);
        let allocs = self.plan(tasks, &order, pool, running, rule);
        (order, allocs)
    }
}

/// How the clairvoyant shares a node among its tasks, visited shortest-remaining first. Running
/// tasks always keep the smallest allocation that meets their need (an elastic task can shrink,
/// not pause).
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// Every task that fits starts at its smallest allocation; then each grows to its knee
    /// (within 10% of the fastest it could reach).
    Knee,
    /// Each in turn takes the fastest allocation it can reach; a waiting task that gets nothing
    /// waits (close to running them one by one).
    Max,
    /// Every task that fits starts at its smallest allocation; then units go round-robin.
    Spread,
}

impl Rule {
    const ALL: [Rule; 3] = [Rule::Knee, Rule::Max, Rule::Spread];
}

impl Clairvoyant {
    /// Slots `t` takes alone at `a`, if the table has the allocation.
    fn slots(&self, t: &tapfinger::Task, a: &Resources) -> Option<u64> {
        self.table[usize::from(t.ty.0)]
            .iter()
            .find(|(x, _)| x == a)
            .map(|r| r.1)
    }

    /// Indices of `tasks` shortest remaining first (at the best they could get from `pool`).
    fn order(&self, tasks: &[(&tapfinger::Task, f64)], pool: &Resources) -> Vec<usize> {
        let rem: Vec<f64> = tasks
            .iter()
            .map(|(t, left)| {
                let best = self.fitting(t, &t.cap(pool)).map(|x| x.1).min();
                left * best.map_or(f64::MAX, |b| b as f64)
            })
            .collect();
        let mut order: Vec<usize> = (0..tasks.len()).collect();
        order.sort_by(|a, b| {
            rem[*a]
                .total_cmp(&rem[*b])
                .then(tasks[*a].0.id.cmp(&tasks[*b].0.id))
        });
        order
    }

    /// Allocations (in `tasks`' order; `None`: waits) sharing `pool` by `rule`, visiting tasks
    /// in `order`; the first `running` tasks are running.
    fn plan(
        &self,
        tasks: &[(&tapfinger::Task, f64)],
        order: &[usize],
        pool: &Resources,
        running: usize,
        rule: Rule,
    ) -> Vec<Option<Resources>> {
        let mut free = pool.clone();
        let mut out: Vec<Option<Resources>> = vec![None; tasks.len()];
        // Running tasks first, each at the smallest allocation meeting its need.
        for i in 0..running {
            let t = tasks[i].0;
            let a = self
                .fitting(t, &t.cap(&free))
                .next()
                .map_or(t.min_demand.clone(), |x| x.0.clone());
            free = minus(&free, &a);
            out[i] = Some(a);
        }
        let take =
            |i: usize, a: &Resources, free: &mut Resources, out: &mut [Option<Resources>]| {
                let held = out[i].clone().unwrap_or_else(|| Resources::zeros(a.len()));
                *free = minus(&plus(free, &held), a);
                out[i] = Some(a.clone());
            };
        let reach = |i: usize, free: &Resources, out: &[Option<Resources>]| {
            let held = out[i]
                .clone()
                .unwrap_or_else(|| Resources::zeros(free.len()));
            tasks[i].0.cap(&plus(&held, free))
        };
        if !matches!(rule, Rule::Max) {
            for &i in order.iter().filter(|&&i| i >= running) {
                let cap = reach(i, &free, &out);
                if let Some((a, _)) = self.fitting(tasks[i].0, &cap).next() {
                    take(i, a, &mut free, &mut out);
                }
            }
        }
        match rule {
            Rule::Knee | Rule::Max => {
                for &i in order {
                    let t = tasks[i].0;
                    if matches!(rule, Rule::Knee) && out[i].is_none() {
                        continue;
                    }
                    let cap = reach(i, &free, &out);
                    let pick = match rule {
                        Rule::Knee => self.knee(t, &cap),
                        _ => self.fitting(t, &cap).min_by_key(|r| r.1),
                    };
                    if let Some((a, _)) = pick
                        && out[i].as_ref().is_none_or(|h| h.fits_in(a))
                    {
                        take(i, a, &mut free, &mut out);
                    }
                }
            }
            Rule::Spread => {
                for k in 0..free.len() {
                    let mut gave = true;
                    while gave && free.get(k) > 0 {
                        gave = false;
                        for &i in order {
                            let Some(held) = out[i].clone() else { continue };
                            let t = tasks[i].0;
                            let mut a = held.clone();
                            a.0[k] += 1;
                            if free.get(k) > 0
                                && a.fits_in(&t.cap(&plus(&held, &free)))
                                && self.slots(t, &a).is_some()
                            {
                                free.0[k] -= 1;
                                out[i] = Some(a);
                                gave = true;
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Total completion time (slots, continuous) of `tasks` sharing `pool` by `rule`, re-planned
    /// whenever one finishes, with no arrivals.
    fn play_out(
        &self,
        tasks: &[(&tapfinger::Task, f64)],
        pool: &Resources,
        running: usize,
        rule: Rule,
    ) -> f64 {
        // (task, work left, started): a task that started keeps running.
        let mut left: Vec<(&tapfinger::Task, f64, bool)> = tasks
            .iter()
            .enumerate()
            .map(|(i, (t, f))| (*t, *f, i < running))
            .collect();
        let (mut now, mut total) = (0.0, 0.0);
        while !left.is_empty() {
            // Started tasks first, as `plan` wants them.
            left.sort_by_key(|x| !x.2);
            let started = left.iter().filter(|x| x.2).count();
            let view: Vec<(&tapfinger::Task, f64)> = left.iter().map(|x| (x.0, x.1)).collect();
            let order = self.order(&view, pool);
            let allocs = self.plan(&view, &order, pool, started, rule);
            let rates: Vec<f64> = view
                .iter()
                .zip(&allocs)
                .map(|((t, _), a)| {
                    a.as_ref()
                        .and_then(|a| self.slots(t, a))
                        .map_or(0.0, |s| 1.0 / s.max(1) as f64)
                })
                .collect();
            let Some(dt) = view
                .iter()
                .zip(&rates)
                .filter(|(_, r)| **r > 0.0)
                .map(|((_, f), r)| f / r)
                .min_by(f64::total_cmp)
            else {
                // Nothing can progress under this rule: the worst possible.
                return f64::INFINITY;
            };
            now += dt;
            let mut next = Vec::new();
            for (x, r) in left.iter().zip(&rates) {
                let f = x.1 - r * dt;
                if f <= 1e-9 {
                    total += now;
                } else {
                    next.push((x.0, f, x.2 || *r > 0.0));
                }
            }
            left = next;
        }
        total
    }
}

/// `a + b` per kind (saturating).
fn plus(a: &Resources, b: &Resources) -> Resources {
    Resources(
        a.0.iter()
            .zip(&b.0)
            .map(|(x, y)| x.saturating_add(*y))
            .collect(),
    )
}

/// `a - b` per kind, floored at zero.
fn minus(a: &Resources, b: &Resources) -> Resources {
    Resources(
        a.0.iter()
            .zip(&b.0)
            .map(|(x, y)| x.saturating_sub(*y))
            .collect(),
    )
}
