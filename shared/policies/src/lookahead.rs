//! Look-ahead planning of one node's tasks, and the `lookahead` policy that plans on the online
//! estimator's figures.
//!
//! The planner takes a node's tasks (the running ones first, then those that could start), each
//! with a table of job times at a grid of allocations and the work it has left, and plays them
//! out to completion under three ways of sharing the node, with no arrivals: every task at its
//! knee (the smallest allocation within 10% of the fastest it could reach), each in turn as fast
//! as it can go (the others wait), or a round robin of the spare units. It keeps the way with
//! the least total completion time and says which tasks start and what each runs at. Tasks are
//! visited shortest remaining first.
//!
//! Two policies use it, with different tables: the simulator's clairvoyant reference (the true
//! speed model and sizes; never deployable) and [`Lookahead`], a deployable policy whose tables
//! come from the view's estimates ([`tapfinger_core::view::TaskEstimate::slots_at`], the same figures
//! every other policy sees) and whose tasks' sizes are unknown (each task's work is its
//! class's). One planner, two sources of figures, so that the reference measures what the
//! rule would do with perfect knowledge and `lookahead` what it does with what an agent knows.

use tapfinger_core::Rng;
use tapfinger_core::policy::{Decision, Policy};
use tapfinger_core::resources::Resources;
use tapfinger_core::task::{Task, TaskId};
use tapfinger_core::view::{TaskEstimate, View};

/// A job-time table: (allocation, slots alone at it), ascending by allocation size.
pub type Rows = Vec<(Resources, f64)>;

/// One task of a plan: the task, its table and the work it has left (in units of its table's
/// job).
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// The task (its minimum demand and cap bound its allocations).
    pub task: &'a Task,
    /// Its job-time table.
    pub rows: &'a [(Resources, f64)],
    /// Work left, as a fraction of the table's job (1 for a task not started of its class's size).
    pub left: f64,
}

impl<'a> Item<'a> {
    /// The rows within `cap` that meet the minimum demand, smallest first.
    pub fn fitting(&self, cap: &Resources) -> impl Iterator<Item = &'a (Resources, f64)> + use<'a> {
        let (lo, cap) = (self.task.min_demand.clone(), cap.clone());
        self.rows
            .iter()
            .filter(move |(a, _)| lo.fits_in(a) && a.fits_in(&cap))
    }

    /// The knee within `cap`: the smallest allocation within 10% of the fastest time there.
    fn knee(&self, cap: &Resources) -> Option<&'a (Resources, f64)> {
        let fastest = self.fitting(cap).map(|r| r.1).min_by(f64::total_cmp)?;
        let limit = fastest * 1.1;
        self.fitting(cap).find(|r| r.1 <= limit)
    }

    /// Its job time alone at `a`, if the table has the allocation.
    fn slots(&self, a: &Resources) -> Option<f64> {
        self.rows.iter().find(|(x, _)| x == a).map(|r| r.1)
    }
}

/// Sort `rows` ascending by size: the sum over kinds of each allocation's units over `biggest`'s
/// (the largest node's), ties by the units themselves.
pub fn sort_rows(rows: &mut Rows, biggest: &Resources) {
    let size = |a: &Resources| -> f64 {
        (0..a.len())
            .map(|k| f64::from(a.get(k)) / f64::from(biggest.get(k).max(1)))
            .sum()
    };
    rows.sort_by(|a, b| size(&a.0).total_cmp(&size(&b.0)).then(a.0.0.cmp(&b.0.0)));
}

/// How a node is shared among its tasks, visited shortest-remaining first. Running tasks always
/// keep the smallest allocation in their table (an elastic task can shrink, not pause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
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
    /// Every rule, in the order ties are broken.
    pub const ALL: [Rule; 3] = [Rule::Knee, Rule::Max, Rule::Spread];
}

/// Indices of `items` shortest remaining first (at the best they could get from `pool`), ties
/// by task id.
pub fn order(items: &[Item<'_>], pool: &Resources) -> Vec<usize> {
    let rem: Vec<f64> = items
        .iter()
        .map(|it| {
            let best = it
                .fitting(&it.task.cap(pool))
                .map(|x| x.1)
                .min_by(f64::total_cmp);
            it.left * best.unwrap_or(f64::MAX)
        })
        .collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|a, b| {
        rem[*a]
            .total_cmp(&rem[*b])
            .then(items[*a].task.id.cmp(&items[*b].task.id))
    });
    order
}

/// Allocations (in `items`' order; `None`: waits) sharing `pool` by `rule`, visiting tasks in
/// `order`; the first `running` items are running.
pub fn plan(
    items: &[Item<'_>],
    order: &[usize],
    pool: &Resources,
    running: usize,
    rule: Rule,
) -> Vec<Option<Resources>> {
    let mut free = pool.clone();
    let mut out: Vec<Option<Resources>> = vec![None; items.len()];
    // Running tasks first, each at the smallest allocation in its table.
    for (i, it) in items.iter().enumerate().take(running) {
        let a = it
            .fitting(&it.task.cap(&free))
            .next()
            .map_or(it.task.min_demand.clone(), |x| x.0.clone());
        free = free.saturating_sub(&a);
        out[i] = Some(a);
    }
    let take = |i: usize, a: &Resources, free: &mut Resources, out: &mut [Option<Resources>]| {
        let held = out[i].clone().unwrap_or_else(|| Resources::zeros(a.len()));
        *free = free.saturating_add(&held).saturating_sub(a);
        out[i] = Some(a.clone());
    };
    let reach = |i: usize, free: &Resources, out: &[Option<Resources>]| {
        let held = out[i]
            .clone()
            .unwrap_or_else(|| Resources::zeros(free.len()));
        items[i].task.cap(&held.saturating_add(free))
    };
    if rule != Rule::Max {
        for &i in order.iter().filter(|&&i| i >= running) {
            let cap = reach(i, &free, &out);
            if let Some((a, _)) = items[i].fitting(&cap).next() {
                take(i, a, &mut free, &mut out);
            }
        }
    }
    match rule {
        Rule::Knee | Rule::Max => {
            for &i in order {
                if rule == Rule::Knee && out[i].is_none() {
                    continue;
                }
                let cap = reach(i, &free, &out);
                let pick = match rule {
                    Rule::Knee => items[i].knee(&cap),
                    _ => items[i].fitting(&cap).min_by(|a, b| a.1.total_cmp(&b.1)),
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
                        let mut a = held.clone();
                        a.0[k] += 1;
                        if free.get(k) > 0
                            && a.fits_in(&items[i].task.cap(&held.saturating_add(&free)))
                            && items[i].slots(&a).is_some()
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

/// Total completion time (slots, continuous) of `items` sharing `pool` by `rule`, re-planned
/// whenever one finishes, with no arrivals.
pub fn play_out(items: &[Item<'_>], pool: &Resources, running: usize, rule: Rule) -> f64 {
    // (item, started): a task that started keeps running.
    let mut left: Vec<(Item<'_>, bool)> = items
        .iter()
        .enumerate()
        .map(|(i, it)| (*it, i < running))
        .collect();
    let (mut now, mut total) = (0.0, 0.0);
    while !left.is_empty() {
        // Started tasks first, as `plan` wants them.
        left.sort_by_key(|x| !x.1);
        let started = left.iter().filter(|x| x.1).count();
        let view: Vec<Item<'_>> = left.iter().map(|x| x.0).collect();
        let order = order(&view, pool);
        let allocs = plan(&view, &order, pool, started, rule);
        let rates: Vec<f64> = view
            .iter()
            .zip(&allocs)
            .map(|(it, a)| {
                a.as_ref()
                    .and_then(|a| it.slots(a))
                    .map_or(0.0, |s| 1.0 / s.max(1.0))
            })
            .collect();
        let Some(dt) = view
            .iter()
            .zip(&rates)
            .filter(|(_, r)| **r > 0.0)
            .map(|(it, r)| it.left / r)
            .min_by(f64::total_cmp)
        else {
            // Nothing can progress under this rule: the worst possible.
            return f64::INFINITY;
        };
        now += dt;
        let mut next = Vec::new();
        for ((it, started), r) in left.iter().zip(&rates) {
            let f = it.left - r * dt;
            if f <= 1e-9 {
                total += now;
            } else {
                next.push((Item { left: f, ..*it }, *started || *r > 0.0));
            }
        }
        left = next;
    }
    total
}

/// Play `items` (the first `running` of them running, the rest waiting) out under each rule and
/// plan by the one with the least total completion time. Returns the shortest-remaining-first
/// order and each task's allocation (`None`: it waits).
pub fn best_plan(
    items: &[Item<'_>],
    pool: &Resources,
    running: usize,
) -> (Vec<usize>, Vec<Option<Resources>>) {
    let rule = Rule::ALL
        .into_iter()
        .map(|r| (r, play_out(items, pool, running, r)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(Rule::Knee, |(r, _)| r);
    let order = order(items, pool);
    let allocs = plan(items, &order, pool, running, rule);
    (order, allocs)
}

/// The decision of a planner over `items` (the first `running` are the node's running tasks,
/// the rest the window tasks that could start; the pool is the running tasks' minimum demands
/// plus `free`): the first task in the plan's order that the plan starts, at the smallest
/// allocation of its table that fits in `free` (the re-share at the end of the slot grows it);
/// else pass.
pub fn decide(items: &[Item<'_>], running: usize, free: &Resources) -> Decision {
    if items.len() == running {
        return Decision::Pass;
    }
    let pool = items[..running]
        .iter()
        .fold(free.clone(), |p, it| p.saturating_add(&it.task.min_demand));
    let (order, allocs) = best_plan(items, &pool, running);
    order
        .iter()
        .find(|&&i| i >= running && allocs[i].is_some())
        .and_then(|&i| {
            let it = &items[i];
            it.fitting(&it.task.cap(free))
                .next()
                .map(|(a, _)| Decision::Claim {
                    task: it.task.id,
                    alloc: a.clone(),
                    prob: 1.0,
                })
        })
        .unwrap_or(Decision::Pass)
}

/// The re-share of a planner over `items` (all running; `free` what their minimum demands leave):
/// each at its planned allocation, its minimum demand where the plan has none.
pub fn rebalance(items: &[Item<'_>], free: &Resources) -> Vec<(TaskId, Resources)> {
    let pool = items
        .iter()
        .fold(free.clone(), |p, it| p.saturating_add(&it.task.min_demand));
    let (_, allocs) = best_plan(items, &pool, items.len());
    items
        .iter()
        .zip(allocs)
        .map(|(it, a)| (it.task.id, a.unwrap_or_else(|| it.task.min_demand.clone())))
        .collect()
}

/// The look-ahead planner on the online estimator's figures (by name, `lookahead`; not among
/// the baselines a suite ranks). Each task's table is its estimated job time
/// ([`TaskEstimate::slots_at`]) at a grid between its minimum demand and its cap of the node:
/// for each kind the estimate says it gains from (at least [`tapfinger_core::share::MIN_GAIN`]), every
/// level, or [`LEVELS`] evenly spaced ones where there are more; any other kind at its minimum.
/// Every task's size is its class's, so shortest remaining first is by the class's time and
/// the progress made.
///
/// Why a grid of at most [`LEVELS`] per kind: the plan is made per decision for every task on
/// the node (a 64-CPU box's full grid with memory would be thousands of rows per task), and the
/// knee needs the grid fine: doublings (1, 2, 4, …) scored a mean ratio of 1.045 to the best
/// baseline on the development scenarios, 16 levels 1.019 and 64 levels 1.017
/// (2026-11-26).
///
/// Sized (`lookahead-predicted`), each task's work left is what the cluster knows of its size
/// instead ([`tapfinger_core::view::expected_remaining`]: declared work, its own progress, the
/// size book's history, else its class's mean), over its class's time at its minimum demand: the
/// same planner and placement, ordered shortest predicted remaining first, a waiting task's
/// size aged as the size-aware baselines age theirs. Where every task
/// declares its work the two plan alike (the tables already scale by it) but for a running
/// task's work left, which the sized rule takes from its progress on its own size, not on its
/// class's.
#[derive(Debug, Clone, Default)]
pub struct Lookahead {
    /// Whether tasks' work left comes from the cluster's size knowledge (`lookahead-predicted`),
    /// not from their class's size.
    pub sized: bool,
}

/// Most levels per kind of [`Lookahead`]'s grid.
pub const LEVELS: u32 = 16;

/// Name of [`Lookahead`].
pub const LOOKAHEAD: &str = "lookahead";

/// Name of [`Lookahead`] sized.
pub const LOOKAHEAD_PREDICTED: &str = "lookahead-predicted";

/// A sized task's work left in units of its class's job at its minimum demand (`expected` slots
/// at the minimum over the estimator's `at_min`), bounded so that one wild estimate cannot
/// stall the plan's arithmetic.
fn relative(expected: f64, at_min: f64) -> f64 {
    if at_min > 0.0 && expected.is_finite() {
        (expected / at_min).clamp(1e-3, 1e3)
    } else {
        1.0
    }
}

impl Lookahead {
    /// The table of `t` (estimate `est`) on a node of `capacity`.
    fn rows(view: &View<'_>, t: &Task, est: &TaskEstimate) -> Rows {
        let kinds = &view.cluster.kinds;
        let capacity = &view.node().capacity;
        let hi = t.cap(capacity).max_each(&t.min_demand);
        let mut gains = vec![false; t.min_demand.len()];
        for (c, i) in kinds.0.iter().enumerate() {
            if let Some(i) = *i
                && i < gains.len()
            {
                gains[i] = est.gain[c] >= tapfinger_core::share::MIN_GAIN;
            }
        }
        let levels = |k: usize| -> Vec<u32> {
            let (lo, top) = (t.min_demand.get(k), hi.get(k));
            if !gains[k] || top <= lo {
                return vec![lo];
            }
            let span = top - lo;
            let n = span.min(LEVELS - 1);
            let mut v: Vec<u32> = (0..=n).map(|i| lo + span * i / n).collect();
            v.dedup();
            v
        };
        let mut grid: Vec<Vec<u32>> = vec![Vec::new()];
        for k in 0..t.min_demand.len() {
            let lv = levels(k);
            grid = grid
                .into_iter()
                .flat_map(|p| {
                    lv.iter().map(move |&v| {
                        let mut q = p.clone();
                        q.push(v);
                        q
                    })
                })
                .collect();
        }
        let mut rows: Rows = grid
            .into_iter()
            .map(|a| {
                let a = Resources(a);
                let s = est.slots_at(kinds, &t.min_demand, &a);
                (a, s)
            })
            .collect();
        sort_rows(&mut rows, capacity);
        rows
    }

    /// The node's running tasks' tables and work left, then the feasible window tasks'.
    fn tables<'a>(&self, view: &View<'a>, window: bool) -> (Vec<(&'a Task, Rows, f64)>, usize) {
        let sized = self.sized;
        let mut out: Vec<(&'a Task, Rows, f64)> = view
            .running()
            .map(|r| {
                let left = if sized {
                    relative(r.expected_remaining(), r.est.at_min)
                } else {
                    (1.0 - r.progress).clamp(0.0, 1.0)
                };
                (&*r.task, Self::rows(view, &r.task, &r.est), left)
            })
            .collect();
        let running = out.len();
        if window {
            let c = view.cluster;
            let free = &view.node().free;
            for &i in &view.node().window {
                let p = &c.pending[i];
                if p.task.min_demand.fits_in(free) {
                    let left = if sized {
                        // Aged as the size-aware baselines age their admission
                        // (`crate::sized`): a task that waited as long as it is expected to
                        // take counts half its size, so a long task, or one whose estimate is
                        // wrong, is never passed over for good by a stream of short ones. The
                        // plan's play-out takes it at that size too: it only chooses among
                        // ways of sharing, and a waiting task's share of it is the least sure.
                        let expected = p.expected_remaining();
                        let waited = c.slot.saturating_sub(p.task.arrival) as f64;
                        relative(expected * expected / (expected + waited), p.est.at_min)
                    } else {
                        1.0
                    };
                    out.push((
                        &*p.task,
                        Self::rows(view, &p.task, p.est_on(view.node().gpu)),
                        left,
                    ));
                }
            }
        }
        (out, running)
    }
}

fn items<'a>(tables: &'a [(&'a Task, Rows, f64)]) -> Vec<Item<'a>> {
    tables
        .iter()
        .map(|(task, rows, left)| Item {
            task,
            rows,
            left: *left,
        })
        .collect()
}

impl Policy for Lookahead {
    fn name(&self) -> &str {
        if self.sized {
            LOOKAHEAD_PREDICTED
        } else {
            LOOKAHEAD
        }
    }
    fn elastic(&self) -> bool {
        true
    }
    fn decide(&mut self, view: &View<'_>, _rng: &mut Rng) -> Decision {
        let (tables, running) = self.tables(view, true);
        decide(&items(&tables), running, &view.node().free)
    }
    fn rebalance(&mut self, view: &View<'_>, _rng: &mut Rng) -> Vec<(TaskId, Resources)> {
        let (tables, _) = self.tables(view, false);
        rebalance(&items(&tables), &view.node().free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapfinger_core::NodeId;

    use std::sync::Arc;
    use tapfinger_core::view::{ClusterView, NodeView, PendingView};

    fn task(id: u64, min: [u32; 3]) -> Arc<Task> {
        Arc::new(Task::new(id, min).arriving(id))
    }

    /// A job of `work` slots at one GPU that speeds up linearly with GPUs (1 to 4).
    fn linear(work: f64) -> Rows {
        (1..=4)
            .map(|g| (Resources(vec![0, g, 0]), work / f64::from(g)))
            .collect()
    }

    /// Two tasks that scale linearly on a 4-GPU node, one half done: running them one after
    /// the other at full speed (4 slots of total completion time) beats each at its knee (4.33)
    /// and the round robin (5), so the plan gives the shorter all four GPUs and the other
    /// waits, and the decision starts the shorter.
    #[test]
    fn linear_tasks_run_one_after_the_other() {
        let (a, b) = (task(1, [0, 1, 0]), task(2, [0, 1, 0]));
        let (ra, rb) = (linear(8.0), linear(8.0));
        let items = [
            Item {
                task: &b,
                rows: &rb,
                left: 1.0,
            },
            Item {
                task: &a,
                rows: &ra,
                left: 0.5,
            },
        ];
        let pool = Resources(vec![0, 4, 0]);
        assert!((play_out(&items, &pool, 0, Rule::Max) - 4.0).abs() < 1e-9);
        assert!((play_out(&items, &pool, 0, Rule::Knee) - 13.0 / 3.0).abs() < 1e-9);
        assert!((play_out(&items, &pool, 0, Rule::Spread) - 5.0).abs() < 1e-9);
        let (order, allocs) = best_plan(&items, &pool, 0);
        assert_eq!(order, vec![1, 0]);
        assert_eq!(allocs, vec![None, Some(Resources(vec![0, 4, 0]))]);
        assert_eq!(
            decide(&items, 0, &pool),
            Decision::Claim {
                task: TaskId(1),
                alloc: Resources(vec![0, 1, 0]),
                prob: 1.0
            }
        );
    }

    /// Tasks that gain nothing from more units all start: each at its minimum, side by side.
    #[test]
    fn tasks_that_do_not_scale_share_the_node() {
        let (a, b) = (task(1, [0, 1, 0]), task(2, [0, 1, 0]));
        let flat: Rows = (1..=4).map(|g| (Resources(vec![0, g, 0]), 8.0)).collect();
        let items = [
            Item {
                task: &a,
                rows: &flat,
                left: 1.0,
            },
            Item {
                task: &b,
                rows: &flat,
                left: 1.0,
            },
        ];
        let (_, allocs) = best_plan(&items, &Resources(vec![0, 4, 0]), 0);
        assert!(allocs.iter().all(Option::is_some), "{allocs:?}");
    }

    /// The estimated tables: every level of the kinds the estimate gains from (here fewer than
    /// [`LEVELS`]), every other kind at its minimum, ascending by size, the times the view's
    /// estimate gives.
    #[test]
    fn estimated_tables_grid_the_kinds_that_gain() {
        let cluster = ClusterView {
            kinds: tapfinger_core::estimate::KindMap([Some(0), Some(1), Some(2)]),
            nodes: vec![NodeView {
                gpu: Default::default(),
                id: NodeId(0),
                capacity: Resources(vec![16, 6, 32]),
                free: Resources(vec![16, 6, 32]),
                window: vec![0],
                overflow: 0,
                running: vec![],
            }],
            pending: vec![PendingView {
                on: Vec::new(),
                task: task(1, [1, 1, 4]),
                // GPU-bound: 10 slots at the minimum, one more GPU saves 30 % of that.
                est: TaskEstimate {
                    at_min: 10.0,
                    at_max: 4.0,
                    gain: [0.0, 0.3, 0.0],
                    samples: 3,
                    switch_cost: 0.0,
                    size: 1.0,
                    offset: [1.0; 3],
                },
                class: 0,
                size: None,
                done: 0.0,
            }],
            ..Default::default()
        };
        let view = cluster.for_agent(NodeId(0)).unwrap();
        let p = &cluster.pending[0];
        let rows = Lookahead::rows(&view, &p.task, &p.est);
        let grid: Vec<Vec<u32>> = rows.iter().map(|r| r.0.0.clone()).collect();
        let want: Vec<Vec<u32>> = (1..=6).map(|g| vec![1, g, 4]).collect();
        assert_eq!(grid, want);
        for (a, s) in &rows {
            let want = p.est.slots_at(&cluster.kinds, &p.task.min_demand, a);
            assert!((s - want).abs() < 1e-12);
        }
        // A GPU-bound task alone on an idle node starts, at its minimum demand.
        assert_eq!(
            Lookahead::default().decide(&view, &mut tapfinger_core::seeded_rng(0)),
            Decision::Claim {
                task: TaskId(1),
                alloc: Resources(vec![1, 1, 4]),
                prob: 1.0
            }
        );
    }

    /// Sized, the planner orders by what the cluster knows of each task's size: of two tasks of
    /// one class that cannot run together, the one the history says is short starts first,
    /// where the rule on classes' sizes takes the lower id; a long task that waited three
    /// times its expected time counts a quarter of it and goes before a fresh one a third of
    /// its size.
    #[test]
    fn sized_the_plan_starts_the_predicted_short_task_and_ages_a_long_one() {
        let history = |s: f64| {
            Some(Arc::new(tapfinger_core::sizes::Prediction {
                level: tapfinger_core::sizes::Level::Job,
                samples: 3,
                quantiles: [s; 3],
                mean: s,
                sorted: vec![s; 3],
            }))
        };
        let pending = |id: u64, arrival: u64, size: f64| PendingView {
            on: Vec::new(),
            task: Arc::new(Task::new(id, [1, 1, 4]).arriving(arrival)),
            est: TaskEstimate {
                at_min: 10.0,
                at_max: 10.0,
                samples: 3,
                ..Default::default()
            },
            class: 0,
            size: history(size),
            done: 0.0,
        };
        let cluster = |slot: u64, pending: Vec<PendingView>| ClusterView {
            slot,
            kinds: tapfinger_core::estimate::KindMap([Some(0), Some(1), Some(2)]),
            nodes: vec![NodeView {
                gpu: Default::default(),
                id: NodeId(0),
                capacity: Resources(vec![4, 1, 8]),
                free: Resources(vec![4, 1, 8]),
                window: (0..pending.len()).collect(),
                overflow: 0,
                running: vec![],
            }],
            pending,
            ..Default::default()
        };
        let claimed = |sized: bool, c: &ClusterView| {
            let view = c.for_agent(NodeId(0)).unwrap();
            match (Lookahead { sized }).decide(&view, &mut tapfinger_core::seeded_rng(0)) {
                Decision::Claim { task, .. } => task.0,
                d => panic!("{d:?}"),
            }
        };
        let c = cluster(0, vec![pending(1, 0, 30.0), pending(2, 0, 3.0)]);
        assert_eq!(claimed(false, &c), 1);
        assert_eq!(claimed(true, &c), 2);
        // Task 1 (30 slots expected) waited 90: it counts 30 · 30 / 120 = 7.5 against a fresh
        // task of 10.
        let c = cluster(90, vec![pending(1, 0, 30.0), pending(2, 90, 10.0)]);
        assert_eq!(claimed(true, &c), 1);
        let c = cluster(90, vec![pending(1, 80, 30.0), pending(2, 90, 10.0)]);
        assert_eq!(claimed(true, &c), 2);
    }
}
