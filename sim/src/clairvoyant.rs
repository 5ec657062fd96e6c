//! The clairvoyant reference's own rule: a policy that reads the simulator's true speed model
//! (and, in heavy-tailed scenarios, each task's true size), elastic like the elastic baselines,
//! with a short look-ahead. Reports run it as part of the reference (`report::run_one_with`),
//! which also knows the whole workload in advance and keeps, per workload, the best of this
//! rule's schedule and every baseline's: sound by construction (never worse than the best
//! baseline). It runs in the simulator only and is marked `*` in every report: a reference,
//! never a deployable policy nor the yardstick of success.

use crate::env::allocations;
use crate::scenario::Scenario;
use tapfinger::view::View;
use tapfinger::{Decision, Policy, Resources, TaskId};

/// Name of the clairvoyant reference.
pub const CLAIRVOYANT: &str = "clairvoyant";

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
    /// The same reference, knowing each task's true size in the episode of workload `seed`.
    pub fn with_sizes(mut self, sc: &Scenario, seed: u64) -> Self {
        self.sizes = std::sync::Arc::new(crate::workload::sizes(sc, seed, sc.tasks as usize));
        self
    }

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
        crate::workload::size_of(&self.sizes, id)
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
